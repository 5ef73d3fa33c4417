//! What the shipped sinks share: a change's idempotency key, the event's object as JSON,
//! the wall clock in RFC 3339, text cut to a receiver's limit, and one request sent the way
//! every sink sends (a `Retry-After` honoured, anything but a 2xx an error that says why).

use serde_json::{Value, json};

use crate::http::{Request, Response};
use crate::{Event, EventKind, ItemOutcome, Level, Outcome, log};

/// `UID.RESOURCEVERSION.CHANGE` (`add`, `update` or `delete`; a resync is an update of the
/// state the object is in): the same for every attempt at one change, across retries and
/// restarts, different for every change. The namespace and name stand in for a missing uid.
pub fn change_key(kind: EventKind, object: &Value) -> String {
    let change = match kind {
        EventKind::Added => "add",
        EventKind::Updated | EventKind::Sync => "update",
        EventKind::Deleted => "delete",
    };
    let meta = &object["metadata"];
    let uid = match meta["uid"].as_str() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => format!(
            "{}/{}",
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default()
        ),
    };
    let version = meta["resourceVersion"].as_str().unwrap_or_default();
    format!("{uid}.{version}.{change}")
}

/// The event's object, parsed.
pub fn object(event: &Event) -> Result<Value, String> {
    serde_json::from_str(&event.object).map_err(|e| format!("the event's object: {e}"))
}

/// The event as JSON, as a [`crate::template`] reads it: `{"kind": "added|updated|deleted|sync",
/// "route", "attempt", "object", "oldObject", "finalStateUnknown"}`.
pub fn event_json(event: &Event) -> Result<Value, String> {
    event_json_reading(event, true)
}

/// [`event_json`], its `oldObject` parsed only when `old` is set (null otherwise): a sink
/// whose template never reads it ([`crate::template::reads`]) skips a parse per event.
pub fn event_json_reading(event: &Event, old: bool) -> Result<Value, String> {
    let parse = |what: &str, text: &str| {
        serde_json::from_str::<Value>(text).map_err(|e| format!("the event's {what}: {e}"))
    };
    let kind = match event.kind {
        EventKind::Added => "added",
        EventKind::Updated => "updated",
        EventKind::Deleted => "deleted",
        EventKind::Sync => "sync",
    };
    let old = match &event.old_object {
        Some(text) if old => parse("old object", text)?,
        _ => Value::Null,
    };
    Ok(json!({
        "kind": kind,
        "route": event.route,
        "attempt": event.attempt,
        "object": parse("object", &event.object)?,
        "oldObject": old,
        "finalStateUnknown": event.final_state_unknown,
    }))
}

/// What a chat or incident sink says about a change: for a core v1 Event, about the object
/// it is about (`Warning BackOff on Pod shop/web-1`, its message, reason, count, source);
/// for any other object, the object and the change (`Deployment shop/web was updated`).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// One line: what happened to what.
    pub title: String,
    /// The Event's message; empty for another object.
    pub text: String,
    /// `warning` for a Warning Event; `info` for any other change.
    pub severity: &'static str,
    /// Name and value pairs worth showing (empty values left out).
    pub facts: Vec<(&'static str, String)>,
    /// The uid of the object the change is about (of the Event itself, for an Event: one
    /// Event counted again is the same incident); its namespace/name without one.
    pub uid: String,
}

/// The [`Summary`] of `event` (as [`event_json`] gives it).
pub fn summary(event: &Value) -> Summary {
    let object = &event["object"];
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let meta = &object["metadata"];
    let is_event = object["kind"] == "Event" && object["involvedObject"].is_object();
    let subject = if is_event {
        &object["involvedObject"]
    } else {
        meta
    };
    let kind = text(if is_event {
        &subject["kind"]
    } else {
        &object["kind"]
    });
    let (namespace, name) = (text(&subject["namespace"]), text(&subject["name"]));
    let path = if namespace.is_empty() {
        name.clone()
    } else {
        format!("{namespace}/{name}")
    };
    let uid = match meta["uid"].as_str() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => format!("{}/{}", text(&meta["namespace"]), text(&meta["name"])),
    };
    let mut facts = vec![
        ("Kind", kind.clone()),
        ("Namespace", namespace),
        ("Name", name),
    ];
    let summary = if is_event {
        let (event_type, reason) = (text(&object["type"]), text(&object["reason"]));
        facts.push(("Reason", reason.clone()));
        facts.push(("Count", text(&object["count"])));
        facts.push(("Source", text(&object["source"]["component"])));
        Summary {
            title: format!("{event_type} {reason} on {kind} {path}"),
            text: text(&object["message"]),
            severity: if event_type == "Warning" {
                "warning"
            } else {
                "info"
            },
            facts,
            uid,
        }
    } else {
        facts.push(("Change", text(&event["kind"])));
        Summary {
            title: format!("{kind} {path} was {}", text(&event["kind"])),
            text: String::new(),
            severity: "info",
            facts,
            uid,
        }
    };
    Summary {
        facts: summary
            .facts
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .collect(),
        ..summary
    }
}

/// `url` without surrounding whitespace (a value from a Secret made with `--from-file` ends
/// in a newline), or an error naming `at` when it is not an `http://` or `https://` URL.
/// The URL itself is left out of the error: it may hold a credential.
pub fn check_url(url: &str, at: &str) -> Result<String, String> {
    let url = url.trim();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!("{at}: not an http:// or https:// URL"));
    }
    Ok(url.to_string())
}

/// An error naming `at` unless `name` is an HTTP token and `value` holds no control
/// character.
pub fn check_header(name: &str, value: &str, at: &str) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!("{at}: {name:?} is not a valid header name"));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(format!(
            "{at}.{name}: the value holds a control character (a line break?)"
        ));
    }
    Ok(())
}

/// `text` as one segment of a URL's path: every byte but the unreserved ones
/// (`A-Z a-z 0-9 - . _ ~`) percent-encoded, so `/` is `%2F`.
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The `authorization` header's value for HTTP Basic authentication (RFC 7617).
pub fn basic_auth(user: &str, password: &str) -> String {
    format!("Basic {}", base64(format!("{user}:{password}").as_bytes()))
}

/// Standard base64 with padding (RFC 4648).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `text` cut to at most `max` characters, the last one `…` when it was cut.
pub fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some(_) if max == 0 => String::new(),
        Some(_) => {
            let end = text.char_indices().nth(max - 1).map_or(0, |(i, _)| i);
            format!("{}…", &text[..end])
        }
        None => text.to_string(),
    }
}

/// Now, in RFC 3339 with milliseconds (`2026-11-27T18:04:05.123Z`).
pub fn now_rfc3339() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since.as_secs(), since.subsec_millis())
}

/// Seconds (and milliseconds) since the Unix epoch in RFC 3339, UTC.
pub fn rfc3339(seconds: u64, millis: u32) -> String {
    let days = (seconds / 86_400) as i64;
    let rest = seconds % 86_400;
    // The civil date from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// What became of a request [`send`] sent.
#[derive(Debug)]
pub enum Sent {
    /// The receiver answered 2xx.
    Answered(Response),
    /// The receiver asked to be asked again later (a 429, a 503 with `Retry-After`): return
    /// this outcome, which does not count toward `max_retries`.
    Later(Outcome),
}

/// Sends `request`. A 429 or a 503 with `Retry-After` is [`Sent::Later`] after the wait the
/// receiver asks for (capped at [`crate::http::MAX_RETRY_AFTER`]); any other answer but a
/// 2xx, a timeout or a failed connection is the error for `handle` to return (permanent for
/// a 4xx), naming the status and the start of the answer's body.
pub fn send(request: Request) -> Result<Sent, String> {
    let response = request.send()?;
    if let Some(wait) = response.retry_later() {
        log(
            Level::Warn,
            &format!(
                "the receiver answered {}: sending again in {} ms, as it asked",
                response.status,
                wait.as_millis()
            ),
        );
        let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        return Ok(Sent::Later(Outcome::RequeueAfter(millis)));
    }
    Ok(Sent::Answered(response.error_for_status()?))
}

/// What an answer means for the events a request carried, and in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The outcome of each event the request carried.
    pub outcome: ItemOutcome,
    /// What the receiver answered, for a log line or an error.
    pub message: String,
}

impl Answer {
    /// The answer for `handle` (a request that carried one event): a wait the receiver
    /// asked for is `requeue-after`, a retry an error, a dead letter a permanent error.
    pub fn single(self) -> Result<Outcome, String> {
        match self.outcome {
            ItemOutcome::Done => Ok(Outcome::Done),
            ItemOutcome::Retry(Some(ms)) => Ok(Outcome::RequeueAfter(ms)),
            ItemOutcome::Retry(None) => Err(self.message),
            ItemOutcome::DeadLetter(_) => Err(crate::permanent(&self.message)),
        }
    }
}

/// What an answer to a request means for every event it carried alike: a 2xx is done; a
/// 429 or a 5xx is retried after at least its `Retry-After` (1 s for a 429 without one, at
/// most [`crate::http::MAX_RETRY_AFTER`]); anything else is a dead letter naming the status
/// and the start of the body. A retry is logged.
pub fn answer_for_all(response: &Response) -> Answer {
    use crate::http::{DEFAULT_RETRY_AFTER, MAX_RETRY_AFTER};
    let mut message = format!("the receiver answered {}", response.status);
    if response.is_success() {
        return Answer {
            outcome: ItemOutcome::Done,
            message,
        };
    }
    let excerpt = response.excerpt(200);
    if !excerpt.trim().is_empty() {
        message.push_str(&format!(": {}", excerpt.trim()));
    }
    if response.status != 429 && !(500..600).contains(&response.status) {
        let outcome = ItemOutcome::DeadLetter(message.clone());
        return Answer { outcome, message };
    }
    let wait = match (response.status, response.retry_after()) {
        (_, Some(after)) => Some(after.min(MAX_RETRY_AFTER)),
        (429, None) => Some(DEFAULT_RETRY_AFTER),
        _ => None,
    };
    let ms = wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX));
    log(
        Level::Warn,
        &format!(
            "{message}: sending again (after at least {} ms)",
            ms.unwrap_or(0)
        ),
    );
    Answer {
        outcome: ItemOutcome::Retry(ms),
        message,
    }
}

/// The `authorization` header for a sink's `username` and `password` (HTTP Basic) or its
/// `bearer_token`; `None` for neither, an error for both or for half a pair.
pub fn authorization(
    username: Option<&str>,
    password: Option<&str>,
    bearer_token: Option<&str>,
) -> Result<Option<String>, String> {
    match (username, password, bearer_token) {
        (None, None, None) => Ok(None),
        (Some(user), Some(password), None) => Ok(Some(basic_auth(user.trim(), password.trim()))),
        (None, None, Some(token)) => Ok(Some(format!("Bearer {}", token.trim()))),
        (_, _, Some(_)) => {
            Err("config: `bearer_token` or `username` and `password`, not both".into())
        }
        _ => Err("config: `username` and `password` go together".into()),
    }
}

/// [`send`], done on a 2xx.
pub fn deliver(request: Request) -> Result<Outcome, String> {
    Ok(match send(request)? {
        Sent::Answered(response) => {
            log(Level::Debug, &format!("delivered: {}", response.status));
            Outcome::Done
        }
        Sent::Later(outcome) => outcome,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn base64_is_the_standard_alphabet_with_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar\n"), "Zm9vYmFyCg==");
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
    }

    #[test]
    fn a_change_key_is_stable_per_change_and_differs_between_changes() {
        let pod = json!({"metadata": {"uid": "u-1", "resourceVersion": "42"}});
        assert_eq!(change_key(EventKind::Added, &pod), "u-1.42.add");
        assert_eq!(change_key(EventKind::Sync, &pod), "u-1.42.update");
        assert_eq!(change_key(EventKind::Deleted, &pod), "u-1.42.delete");
        let named = json!({"metadata": {"namespace": "a", "name": "b", "resourceVersion": "7"}});
        assert_eq!(change_key(EventKind::Updated, &named), "a/b.7.update");
    }

    #[test]
    fn a_summary_speaks_of_an_event_s_object_and_of_another_object_itself() {
        let warning = json!({"kind": "added", "object": {"kind": "Event", "type": "Warning",
            "reason": "BackOff", "message": "Back-off", "count": 3,
            "metadata": {"uid": "e-1", "namespace": "shop", "name": "web-1.1"},
            "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-1"}}});
        let summary = summary(&warning);
        assert_eq!(summary.title, "Warning BackOff on Pod shop/web-1");
        assert_eq!(
            (summary.text.as_str(), summary.severity),
            ("Back-off", "warning")
        );
        assert_eq!(summary.uid, "e-1");
        assert_eq!(summary.facts[3], ("Reason", "BackOff".to_string()));
        assert_eq!(summary.facts[4], ("Count", "3".to_string()));
        assert_eq!(summary.facts.len(), 5);
        let node = json!({"kind": "deleted", "object": {"kind": "Node",
            "metadata": {"name": "n1"}}});
        let summary = super::summary(&node);
        assert_eq!(summary.title, "Node n1 was deleted");
        assert_eq!((summary.severity, summary.uid.as_str()), ("info", "/n1"));
    }

    #[test]
    fn dates_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(1_795_781_045, 123), "2026-11-27T12:04:05.123Z");
        assert!(now_rfc3339().starts_with("20"));
    }

    #[test]
    fn path_segments_and_basic_credentials_are_encoded() {
        assert_eq!(path_segment("/"), "%2F");
        assert_eq!(path_segment("a b.c~d"), "a%20b.c~d");
        // RFC 7617's example, and the three lengths of a last group.
        assert_eq!(
            basic_auth("Aladdin", "open sesame"),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        assert_eq!(basic_auth("guest", "guest"), "Basic Z3Vlc3Q6Z3Vlc3Q=");
        assert_eq!(basic_auth("a", "b"), "Basic YTpi");
        assert_eq!(basic_auth("ab", "c"), "Basic YWI6Yw==");
    }

    #[test]
    fn text_is_cut_to_the_limit_with_an_ellipsis() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
        assert_eq!(cut("ééééé", 4).chars().count(), 4);
        assert_eq!(cut("abc", 0), "");
    }
}
