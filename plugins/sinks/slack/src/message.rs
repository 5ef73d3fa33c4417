//! The message for one change: `text` (what notifications and older clients show) and
//! Block Kit `blocks`. A Kubernetes Event (core v1, or events.k8s.io/v1) says its type,
//! reason, the object it is about and its message; any other object says what happened
//! to it.

use serde_json::{Value, json};
use switchyard_sdk::EventKind;

/// Longest message text put in a section block (Slack allows 3000 characters per text
/// element, and refuses a message with a longer one as `invalid_blocks`).
const MAX_SECTION: usize = 2900;

/// Longest top-level `text` (what notifications show; Slack recommends at most 4000).
const MAX_TEXT: usize = 3999;

/// Longest text taken from any other field (type, reason, the object's kind, namespace and
/// name, the source, the cluster, the time), escaped. Kubernetes bounds none of them where
/// it matters here (an Event's `reason` and `source.component` may be thousands of
/// characters), and each text element holds several: five of them with the words around
/// them stay under 3000.
const MAX_FIELD: usize = 500;

/// What to post about `object`, or `None` for a change not worth a message: a resync,
/// and an Event's deletion (Events expire; that is not news).
pub fn build(kind: EventKind, object: &Value, cluster: Option<&str>) -> Option<Value> {
    if kind == EventKind::Sync {
        return None;
    }
    if is_event(object) {
        return (kind != EventKind::Deleted).then(|| event_message(object, cluster));
    }
    Some(change_message(kind, object, cluster))
}

/// Whether `object` is a Kubernetes Event.
fn is_event(object: &Value) -> bool {
    object["kind"] == "Event"
        && matches!(
            object["apiVersion"].as_str(),
            Some("v1" | "events.k8s.io/v1")
        )
}

/// Text for Slack's mrkdwn: `&`, `<` and `>` escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `text` escaped, cut after at most `max` characters (never inside an entity) and then
/// given an ellipsis when cut.
fn escape_cut(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut count = 0;
    for c in text.chars() {
        let piece = escape(c.encode_utf8(&mut [0; 4]));
        count += piece.chars().count();
        if count > max {
            out.push('…');
            break;
        }
        out.push_str(&piece);
    }
    out
}

fn text<'a>(value: &'a Value, pointers: &[&str]) -> &'a str {
    pointers
        .iter()
        .find_map(|p| value.pointer(p).and_then(Value::as_str))
        .filter(|s| !s.is_empty())
        .unwrap_or_default()
}

/// `Kind namespace/name`, or `Kind name` for a cluster-scoped object.
fn describe(kind: &str, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    }
}

/// `text` escaped and cut to [`MAX_FIELD`].
fn field(text: &str) -> String {
    escape_cut(text, MAX_FIELD)
}

fn event_message(event: &Value, cluster: Option<&str>) -> Value {
    let raw_type = text(event, &["/type"]);
    let event_type = field(raw_type);
    let reason = field(text(event, &["/reason"]));
    let message = text(event, &["/message", "/note"]);
    let regarding = if event["involvedObject"].is_object() {
        &event["involvedObject"]
    } else {
        &event["regarding"]
    };
    let about = describe(
        &field(text(regarding, &["/kind"])),
        &field(text(regarding, &["/namespace"])),
        &field(text(regarding, &["/name"])),
    );
    let icon = if raw_type == "Warning" {
        ":warning:"
    } else {
        ":information_source:"
    };
    let summary = format!("{event_type} {reason} on {about}");
    let mut details = Vec::new();
    if let Some(cluster) = cluster {
        details.push(format!("cluster *{}*", field(cluster)));
    }
    let count = ["/count", "/series/count", "/deprecatedCount"]
        .iter()
        .find_map(|p| event.pointer(p).and_then(Value::as_u64));
    if let Some(count) = count.filter(|c| *c > 1) {
        details.push(format!("seen {count} times"));
    }
    let from = text(
        event,
        &[
            "/source/component",
            "/reportingController",
            "/reportingComponent",
        ],
    );
    if !from.is_empty() {
        details.push(format!("from {}", field(from)));
    }
    let last = text(
        event,
        &[
            "/lastTimestamp",
            "/series/lastObservedTime",
            "/eventTime",
            "/firstTimestamp",
        ],
    );
    if !last.is_empty() {
        details.push(format!("last seen {}", field(last)));
    }
    let mut blocks = vec![section(&format!(
        "{icon} *{event_type}* `{reason}` on *{about}*"
    ))];
    if !message.is_empty() {
        blocks.push(section(&escape_cut(message, MAX_SECTION)));
    }
    if !details.is_empty() {
        blocks.push(context(&details.join(" · ")));
    }
    let text = if message.is_empty() {
        summary
    } else {
        let room = MAX_TEXT.saturating_sub(summary.chars().count() + 2);
        format!("{summary}: {}", escape_cut(message, room.min(MAX_SECTION)))
    };
    json!({"text": text, "blocks": blocks})
}

fn change_message(kind: EventKind, object: &Value, cluster: Option<&str>) -> Value {
    let what = match kind {
        EventKind::Added => "added",
        EventKind::Updated => "updated",
        EventKind::Deleted | EventKind::Sync => "deleted",
    };
    let about = describe(
        &field(text(object, &["/kind"])),
        &field(text(object, &["/metadata/namespace"])),
        &field(text(object, &["/metadata/name"])),
    );
    let mut blocks = vec![section(&format!("*{about}* {what}"))];
    if let Some(cluster) = cluster {
        blocks.push(context(&format!("cluster *{}*", field(cluster))));
    }
    json!({"text": format!("{about} {what}"), "blocks": blocks})
}

fn section(text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

fn context(text: &str) -> Value {
    json!({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warning() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "BackOff",
            "message": "Back-off restarting failed container <app> in pod web-1",
            "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-1"},
            "source": {"component": "kubelet"}, "count": 5,
            "lastTimestamp": "2025-01-02T03:04:05Z",
            "metadata": {"name": "web-1.17", "namespace": "shop"}
        })
    }

    #[test]
    fn a_warning_event_says_its_reason_object_and_message() {
        let message = build(EventKind::Added, &warning(), Some("prod")).unwrap();
        assert_eq!(
            message["text"],
            "Warning BackOff on Pod shop/web-1: Back-off restarting failed container &lt;app&gt; in pod web-1"
        );
        assert_eq!(
            message["blocks"],
            json!([
                section(":warning: *Warning* `BackOff` on *Pod shop/web-1*"),
                section("Back-off restarting failed container &lt;app&gt; in pod web-1"),
                context(
                    "cluster *prod* · seen 5 times · from kubelet · last seen 2025-01-02T03:04:05Z"
                ),
            ])
        );
    }

    #[test]
    fn an_events_k8s_io_event_reads_its_own_field_names() {
        let event = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "type": "Warning",
            "reason": "FailedScheduling", "note": "0/3 nodes are available",
            "regarding": {"kind": "Pod", "namespace": "shop", "name": "web-2"},
            "reportingController": "default-scheduler",
            "metadata": {"name": "web-2.1", "namespace": "shop"}
        });
        let message = build(EventKind::Updated, &event, None).unwrap();
        assert_eq!(
            message["text"],
            "Warning FailedScheduling on Pod shop/web-2: 0/3 nodes are available"
        );
        assert_eq!(message["blocks"][2], context("from default-scheduler"));
    }

    #[test]
    fn resyncs_and_expired_events_post_nothing() {
        assert_eq!(build(EventKind::Sync, &warning(), None), None);
        assert_eq!(build(EventKind::Deleted, &warning(), None), None);
    }

    #[test]
    fn another_object_says_what_happened_to_it() {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
        let message = build(EventKind::Deleted, &node, Some("prod")).unwrap();
        assert_eq!(message["text"], "Node n1 deleted");
        assert_eq!(
            message["blocks"],
            json!([section("*Node n1* deleted"), context("cluster *prod*")])
        );
    }

    #[test]
    fn a_long_message_is_cut_to_fit_a_block() {
        let mut event = warning();
        event["message"] = json!("x".repeat(5000));
        let message = build(EventKind::Added, &event, None).unwrap();
        let text = message["blocks"][1]["text"]["text"].as_str().unwrap();
        assert_eq!(text.chars().count(), MAX_SECTION + 1);
        assert!(text.ends_with('…'));
        assert_eq!(escape_cut("a<b", 5), "a&lt;…");
        assert_eq!(escape_cut("a<b", 6), "a&lt;b");
    }

    /// Every text element of a message: the sections' and the context's.
    fn texts(message: &Value) -> Vec<&str> {
        let mut texts = Vec::new();
        for block in message["blocks"].as_array().unwrap() {
            texts.extend(block["text"]["text"].as_str());
            for element in block["elements"].as_array().into_iter().flatten() {
                texts.extend(element["text"].as_str());
            }
        }
        texts
    }

    #[test]
    fn long_fields_are_cut_so_no_text_element_passes_slack_s_limit() {
        let long = |c: &str, n: usize| c.repeat(n);
        let mut event = warning();
        event["reason"] = json!(long("r", 5000));
        event["source"]["component"] = json!(long("<", 4000));
        event["involvedObject"]["kind"] = json!(long("k", 3000));
        event["involvedObject"]["name"] = json!(long("n", 3000));
        event["involvedObject"]["namespace"] = json!(long("s", 3000));
        event["lastTimestamp"] = json!(long("t", 4000));
        event["message"] = json!(long("&", 4000));
        let cluster = long("c", 4000);
        let message = build(EventKind::Added, &event, Some(&cluster)).unwrap();
        let elements = texts(&message);
        assert_eq!(elements.len(), 3);
        for text in elements {
            assert!(
                text.chars().count() <= 3000,
                "{} chars",
                text.chars().count()
            );
        }
        assert!(message["text"].as_str().unwrap().chars().count() <= 4000);
        let pod = json!({"kind": long("k", 4000), "metadata": {"name": long("n", 4000),
                         "namespace": long("s", 4000)}});
        let message = build(EventKind::Added, &pod, Some(&cluster)).unwrap();
        for text in texts(&message) {
            assert!(
                text.chars().count() <= 3000,
                "{} chars",
                text.chars().count()
            );
        }
    }
}
