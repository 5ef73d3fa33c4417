//! What a change becomes: the message (the event as JSON), its idempotency id and its
//! FIFO group, within the size the service takes.
//!
//! # Decision: too large loses the old object, then is refused, never cut
//!
//! A message is JSON a consumer parses; cut, it parses no more. So an update larger than the
//! service takes is sent without its old object (`"oldObject": null, "oldObjectOmitted":
//! true`), and a change larger even so is a permanent error (a dead letter naming both sizes)
//! before anything is sent: AWS would refuse it every time.

use serde_json::{Value, json};
use switchyard_sdk::{Event, EventKind};

/// A change, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The event as JSON text.
    pub text: String,
    /// `UID.RESOURCEVERSION.CHANGE`: the same for every attempt at one change.
    pub id: String,
    /// The object's `namespace/name` (its `name` when cluster-scoped).
    pub object: String,
    /// The object's kind (`ConfigMap`).
    pub kind: String,
    /// `added`, `updated`, `deleted` or `sync`.
    pub change: &'static str,
}

/// The change's name.
fn change(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Added => "added",
        EventKind::Updated => "updated",
        EventKind::Deleted => "deleted",
        EventKind::Sync => "sync",
    }
}

/// `event` as a message of at most `max` bytes (see the module docs); `service` names the
/// service in the error.
pub fn build(event: &Event, max: usize, service: &str) -> Result<Message, String> {
    let parse = |what: &str, text: &str| {
        serde_json::from_str::<Value>(text).map_err(|e| format!("the event's {what}: {e}"))
    };
    let object = parse("object", &event.object)?;
    let old = match &event.old_object {
        Some(text) => parse("old object", text)?,
        None => Value::Null,
    };
    let change = change(event.kind);
    let id = switchyard_sdk::sink::change_key(event.kind, &object);
    let mut body = json!({
        "kind": change,
        "route": event.route,
        "id": id,
        "object": object,
        "oldObject": old,
        "finalStateUnknown": event.final_state_unknown,
    });
    let mut text = body.to_string();
    if text.len() > max && !body["oldObject"].is_null() {
        body["oldObject"] = Value::Null;
        body["oldObjectOmitted"] = Value::Bool(true);
        text = body.to_string();
    }
    if text.len() > max {
        return Err(switchyard_sdk::permanent(&format!(
            "the message is {} bytes, more than {service} takes ({max} bytes) even without the old object",
            text.len()
        )));
    }
    let meta = &body["object"]["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    let object = match meta["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    };
    Ok(Message {
        kind: body["object"]["kind"]
            .as_str()
            .unwrap_or("Object")
            .to_string(),
        text,
        id,
        object,
        change,
    })
}

/// `text` as a FIFO group or deduplication id: at most 128 characters of ASCII
/// punctuation and alphanumerics; anything else becomes its SHA-256 (64 hex characters).
pub fn fifo_id(text: &str) -> String {
    let fits = !text.is_empty() && text.len() <= 128 && text.chars().all(|c| c.is_ascii_graphic());
    if fits {
        text.to_string()
    } else {
        sigv4::sha256_hex(text.as_bytes())
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use switchyard_sdk::testing::{event, updated};

    use super::*;

    fn cm(value: &str) -> Value {
        json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "shop", "uid": "u-1",
               "resourceVersion": "42"}, "data": {"v": value}})
    }

    #[test]
    fn a_change_is_its_event_with_a_stable_id() {
        let message = build(&updated(cm("1"), cm("2")), 10_000, "SQS").unwrap();
        assert_eq!(message.id, "u-1.42.update");
        assert_eq!(message.object, "shop/a");
        assert_eq!(message.kind, "ConfigMap");
        let body: Value = serde_json::from_str(&message.text).unwrap();
        assert_eq!(
            body,
            json!({"kind": "updated", "route": "test", "id": "u-1.42.update",
                   "object": cm("2"), "oldObject": cm("1"), "finalStateUnknown": false})
        );
        let mut retried = updated(cm("1"), cm("2"));
        retried.attempt = 3;
        assert_eq!(build(&retried, 10_000, "SQS").unwrap(), message);
        let deleted = build(&event(EventKind::Deleted, cm("2")), 10_000, "SQS").unwrap();
        assert_eq!(deleted.id, "u-1.42.delete");
    }

    #[test]
    fn too_large_loses_the_old_object_then_is_refused() {
        let big = "x".repeat(600);
        let message = build(&updated(cm(&big), cm("2")), 400, "SNS").unwrap();
        let body: Value = serde_json::from_str(&message.text).unwrap();
        assert_eq!(body["oldObject"], Value::Null);
        assert_eq!(body["oldObjectOmitted"], true);
        assert_eq!(body["object"], cm("2"));
        let error = build(&updated(cm("1"), cm(&big)), 400, "SNS").unwrap_err();
        assert!(error.starts_with("permanent: the message is "), "{error}");
        assert!(error.contains("more than SNS takes (400 bytes)"), "{error}");
    }

    #[test]
    fn fifo_ids_keep_short_ascii_and_hash_the_rest() {
        assert_eq!(fifo_id("shop/a"), "shop/a");
        assert_eq!(fifo_id(&"n".repeat(200)).len(), 64);
        assert_eq!(fifo_id("café").len(), 64);
        assert_eq!(fifo_id("a b").len(), 64);
    }
}
