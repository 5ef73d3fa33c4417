//! What the store keeps, as plain serde types: the stages above turn their own types into
//! these (the store imports none of them). Values are JSON, so a store can be read with
//! any redb tool and a field added later reads old records with its default. A queued
//! event holds its objects as JSON values, not as strings of JSON ([`StoredOwed::to_json`]):
//! written as they are, with nothing to escape; an event stored as a string reads the same.

use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

/// What a route last delivered of one object: enough to tell, after a restart, whether the
/// object is the same, changed, replaced (another uid) or gone, and to describe it in a
/// `deleted` event. The object itself is not kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRecord {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// [`content_hash`] of the object's JSON as delivered.
    pub hash: u64,
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
}

/// The fields of an object a [`RouteRecord`] keeps; the rest of the JSON is skipped.
#[derive(Deserialize)]
struct Head {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: HeadMeta,
}

#[derive(Deserialize, Default)]
struct HeadMeta {
    #[serde(default)]
    uid: Option<String>,
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
}

impl RouteRecord {
    /// The record of an object given as JSON; `None` if it is not a JSON object.
    pub fn of_json(json: &str) -> Option<Self> {
        let head: Head = serde_json::from_str(json).ok()?;
        Some(Self {
            uid: head.metadata.uid.unwrap_or_default(),
            resource_version: head.metadata.resource_version.unwrap_or_default(),
            hash: content_hash(json.as_bytes()),
            api_version: head.api_version,
            kind: head.kind,
        })
    }

    /// Whether `other` records the same state of the same object: the same uid, and the
    /// same content or the same resourceVersion (an event kept in a handler's queue holds
    /// the object's JSON as it was written then, not byte for byte as a list gives it).
    pub fn is_same(&self, other: &RouteRecord) -> bool {
        self.uid == other.uid
            && (self.hash == other.hash
                || (!self.resource_version.is_empty()
                    && self.resource_version == other.resource_version))
    }

    /// The last state kept of the object under `key` (`namespace/name` or `name`), as JSON:
    /// its apiVersion, kind, name, namespace, uid and resourceVersion.
    pub fn stub_json(&self, key: &str) -> String {
        let (namespace, name) = match key.split_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (None, key),
        };
        let mut metadata = serde_json::json!({
            "name": name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
        });
        if let Some(ns) = namespace {
            metadata["namespace"] = ns.into();
        }
        serde_json::json!({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": metadata,
        })
        .to_string()
    }
}

/// A route's finalizer as the store keeps it: its name and the resources the route puts it
/// on, so that a start whose config no longer holds objects with it can take it off the
/// objects the route delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredFinalizer {
    /// The finalizer's name.
    pub name: String,
    /// The resources the route watches.
    pub resources: Vec<StoredResource>,
}

/// A resource as the API server names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResource {
    /// API group (empty for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// `apiVersion` (`group/version`, or `version` for the core group).
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
}

/// The finalizer of a route no route of the config holds objects with any more, with what
/// the route last delivered (by object key): the objects to take it off.
#[derive(Debug, Clone)]
pub struct StaleFinalizer {
    /// The route that held objects with it.
    pub route: String,
    /// The finalizer and its resources.
    pub finalizer: StoredFinalizer,
    /// What the route last delivered, by object key.
    pub records: std::collections::HashMap<String, RouteRecord>,
}

/// A fast, stable content hash (the same in every build, unlike std's hasher): the text
/// taken as little-endian 64-bit words, each xored in, multiplied and folded, then the last
/// bytes one by one. A word a step, not a byte: an object of a few KiB is hashed for every
/// change a route delivers. Each step is a bijection of the state, so texts that differ in
/// one word never collide. Records an older build hashed with FNV-1a 64 compare by their
/// resourceVersion, which every object from an API server has.
pub fn content_hash(bytes: &[u8]) -> u64 {
    const MUL: u64 = 0x9e37_79b9_7f4a_7c15;
    let step = |hash: u64, word: u64| {
        let hash = (hash ^ word).wrapping_mul(MUL);
        hash ^ (hash >> 29)
    };
    let mut hash = 0xcbf2_9ce4_8422_2325 ^ bytes.len() as u64;
    let (words, rest) = bytes.as_chunks::<8>();
    for word in words {
        hash = step(hash, u64::from_le_bytes(*word));
    }
    for byte in rest {
        hash = step(hash, u64::from(*byte));
    }
    hash
}

/// One event a handler owes, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// `added`, `updated`, `deleted` or `sync`.
    pub kind: String,
    /// The object's JSON (for deletions, the last known state).
    #[serde(deserialize_with = "text_or_json")]
    pub object: Arc<str>,
    /// The state before, for updates.
    #[serde(default, deserialize_with = "maybe_text_or_json")]
    pub old: Option<Arc<str>>,
    /// For deletions inferred from a relist.
    #[serde(default)]
    pub final_state_unknown: bool,
    /// When delivering it first failed, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub first_failure_ms: Option<u64>,
}

/// What a handler has not finished for one key, as stored: the event a worker is handling,
/// if any, first, then what the key owes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredOwed {
    /// The backlog of `every` delivery; `None` for `latest`.
    #[serde(default)]
    pub every: Option<usize>,
    /// The events, oldest first.
    pub events: Vec<StoredEvent>,
}

impl StoredOwed {
    /// The length of the objects' JSON its events hold.
    pub fn text_len(&self) -> usize {
        self.events
            .iter()
            .map(|e| e.object.len() + e.old.as_ref().map_or(0, |old| old.len()))
            .sum()
    }

    /// The entry as the store keeps it: the JSON its `Serialize` gives, except that each
    /// object that is a JSON object's text goes in as that object, copied, not as a string
    /// (escaping every quote of a few KiB was most of a queued event's cost to store).
    pub fn to_json(&self) -> Vec<u8> {
        let text = self.text_len();
        let mut out = Vec::with_capacity(text + text / 16 + 128 * self.events.len() + 32);
        let number = |out: &mut Vec<u8>, n: Option<u64>| match n {
            Some(n) => out.extend_from_slice(n.to_string().as_bytes()),
            None => out.extend_from_slice(b"null"),
        };
        out.extend_from_slice(b"{\"every\":");
        number(&mut out, self.every.map(|n| n as u64));
        out.extend_from_slice(b",\"events\":[");
        for (i, event) in self.events.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"kind\":");
            json_text(&mut out, &event.kind);
            out.extend_from_slice(b",\"object\":");
            object_or_text(&mut out, &event.object);
            out.extend_from_slice(b",\"old\":");
            match &event.old {
                Some(old) => object_or_text(&mut out, old),
                None => out.extend_from_slice(b"null"),
            }
            out.extend_from_slice(if event.final_state_unknown {
                b",\"final_state_unknown\":true,\"first_failure_ms\":"
            } else {
                b",\"final_state_unknown\":false,\"first_failure_ms\":"
            });
            number(&mut out, event.first_failure_ms);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        out
    }
}

/// Writes `text` as a JSON string.
fn json_text(out: &mut Vec<u8>, text: &str) {
    serde_json::to_writer(out, text).expect("a string serializes");
}

/// Writes `text` as it is when it is a JSON object's text, else as a JSON string. An event's
/// objects are the cache's: text parsed off the wire (and cut only where the informer's
/// tests show it stays JSON) or serialized by serde, so they are JSON; the debug build,
/// which the tests run, checks it.
fn object_or_text(out: &mut Vec<u8>, text: &str) {
    let trimmed = text.trim();
    if trimmed.starts_with('{') && trimmed.ends_with('}') {
        debug_assert!(
            serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_ok(),
            "an event's object is not JSON: {trimmed}"
        );
        out.extend_from_slice(trimmed.as_bytes());
    } else {
        json_text(out, text);
    }
}

/// An object kept as a string of JSON (as the store wrote events before) or as JSON.
fn text_or_json<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Arc<str>, D::Error> {
    text_of(<&RawValue>::deserialize(deserializer)?).map_err(D::Error::custom)
}

/// [`text_or_json`] for a field that may be `null`.
fn maybe_text_or_json<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Arc<str>>, D::Error> {
    <Option<&RawValue>>::deserialize(deserializer)?
        .map(text_of)
        .transpose()
        .map_err(D::Error::custom)
}

/// The object's text: a JSON string's content, or the JSON itself.
fn text_of(raw: &RawValue) -> Result<Arc<str>, serde_json::Error> {
    if raw.get().starts_with('"') {
        Ok(serde_json::from_str::<String>(raw.get())?.into())
    } else {
        Ok(raw.get().into())
    }
}

/// A dead letter, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDeadLetter {
    /// The route that delivered it.
    pub route: String,
    /// The object's key.
    pub object: String,
    /// The backlog of `every` delivery; `None` for `latest`.
    #[serde(default)]
    pub every: Option<usize>,
    /// The event given up on.
    pub event: StoredEvent,
    /// The last error.
    pub last_error: String,
    /// Attempts made.
    pub attempts: u32,
    /// When the first attempt failed, in milliseconds since the Unix epoch.
    pub first_failure_ms: u64,
    /// When the last attempt failed, in milliseconds since the Unix epoch.
    pub last_failure_ms: u64,
}

/// One queued key of a handler as the store had it: the events not finished, the one a
/// worker was handling when the daemon stopped (delivered again) first.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredKey {
    /// The route that delivered it.
    pub route: String,
    /// The object's key.
    pub object: String,
    /// Its events, oldest first.
    pub owed: StoredOwed,
}

/// Everything the store holds for one handler.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HandlerSnapshot {
    /// Whether it was paused through the admin API; `None` if never recorded.
    pub paused: Option<bool>,
    /// Its queued keys.
    pub keys: Vec<StoredKey>,
    /// Its dead letters.
    pub dead_letters: Vec<StoredDeadLetter>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_keeps_identity_and_a_hash_that_changes_with_the_content() {
        let a = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"d","uid":"u1","resourceVersion":"5"},"data":{"x":"1"}}"#;
        let b = a.replace("\"1\"}", "\"2\"}");
        let (ra, rb) = (
            RouteRecord::of_json(a).unwrap(),
            RouteRecord::of_json(&b).unwrap(),
        );
        assert_eq!((ra.uid.as_str(), ra.resource_version.as_str()), ("u1", "5"));
        assert_ne!(ra.hash, rb.hash);
        let stub: serde_json::Value = serde_json::from_str(&ra.stub_json("d/a")).unwrap();
        assert_eq!(stub["metadata"]["namespace"], "d");
        assert_eq!(stub["metadata"]["name"], "a");
        assert_eq!(stub["kind"], "ConfigMap");
        assert!(RouteRecord::of_json("[1]").is_none());
    }

    fn owed(object: &str, old: Option<&str>) -> StoredOwed {
        StoredOwed {
            every: Some(3),
            events: vec![StoredEvent {
                kind: "upd\"ated".into(),
                object: object.into(),
                old: old.map(Into::into),
                final_state_unknown: true,
                first_failure_ms: Some(17),
            }],
        }
    }

    #[test]
    fn a_queued_event_keeps_its_objects_as_json_and_reads_back_the_same() {
        let object = r#"{"kind":"ConfigMap","data":{"q":"a \"quoted\" \\ value"}}"#;
        let entry = owed(object, Some(r#" {"kind":"ConfigMap"} "#));
        let bytes = entry.to_json();
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            value["events"][0]["object"]["data"]["q"],
            r#"a "quoted" \ value"#
        );
        assert!(value["events"][0]["old"].is_object(), "{value}");
        let back: StoredOwed = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.events[0].object.as_ref(), object);
        assert_eq!(
            back.events[0].old.as_deref(),
            Some(r#"{"kind":"ConfigMap"}"#)
        );
        assert_eq!(
            (back.every, back.events[0].first_failure_ms),
            (Some(3), Some(17))
        );
        assert_eq!(back.events[0].kind, entry.events[0].kind);
        assert!(back.events[0].final_state_unknown);

        // Text that is not an object's goes in as a string; so did every object before.
        for entry in [owed("not json", None), owed(object, None)] {
            let as_strings = serde_json::to_vec(&entry).unwrap();
            for bytes in [entry.to_json(), as_strings] {
                let back: StoredOwed = serde_json::from_slice(&bytes).unwrap();
                assert_eq!(back, entry, "{}", String::from_utf8_lossy(&bytes));
            }
        }
    }

    #[test]
    fn the_content_hash_is_the_same_in_every_build() {
        // Pinned: a record written by one build is compared by the next.
        assert_eq!(content_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(
            content_hash(br#"{"kind":"ConfigMap","data":{"a":"1"}}"#),
            0x4551_cead_83a1_f5f7
        );
        // Words and the bytes after them both count, and so does the length.
        let text = br#"{"kind":"ConfigMap","data":{"a":"1"}}"#;
        let mut other = *text;
        other[3] ^= 1;
        assert_ne!(content_hash(text), content_hash(&other));
        other = *text;
        other[text.len() - 1] ^= 1;
        assert_ne!(content_hash(text), content_hash(&other));
        assert_ne!(content_hash(b"\0"), content_hash(b"\0\0"));
    }
}
