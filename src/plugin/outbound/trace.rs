//! W3C Trace Context on outbound requests: each request a plugin makes carries a
//! `traceparent` header (unless the plugin set its own), so a receiver, or a tracing
//! backend behind it, can tie together what one event caused.
//!
//! The trace id is derived from the event (the handler, the route, the change and the
//! object as delivered, which includes its `resourceVersion`), so every retry of one event,
//! in this process or after a restart of the same build, carries the same trace id (a
//! fixed-seed foldhash: a few hundred nanoseconds per call); each request gets its own
//! span id (from the trace id, the attempt and the request's number within the call). The
//! header is added as the request leaves: shadow runs and `replay` capture the request as
//! the plugin made it.

use std::hash::{BuildHasher, Hash};

use crate::plugin::{Event, EventKind};

/// The trace of one call of a plugin: its trace id and the requests made so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    id: [u8; 16],
    attempt: u32,
    requests: u32,
}

/// A hash that is the same in every process of one build (foldhash with a fixed seed),
/// unlike the daemon's maps' randomly seeded ones.
fn fixed_hash(seed: u64, parts: impl Hash) -> u64 {
    foldhash::fast::FixedState::with_seed(seed).hash_one(parts)
}

impl Trace {
    /// The trace of a call of `handler`'s plugin with `event`.
    pub fn of(handler: &str, event: &Event) -> Self {
        let kind = match event.kind {
            EventKind::Added => "added",
            EventKind::Updated => "updated",
            EventKind::Deleted => "deleted",
            EventKind::Sync => "sync",
        };
        let seed = (handler, &*event.route, kind, &*event.object);
        let high = fixed_hash(0x7472_6163_6500_0001, seed).to_be_bytes();
        let low = fixed_hash(0x7472_6163_6500_0002, seed).to_be_bytes();
        let mut id = [0; 16];
        id[..8].copy_from_slice(&high);
        id[8..].copy_from_slice(&low);
        Self {
            id,
            attempt: event.attempt,
            requests: 0,
        }
    }

    /// The trace id, 32 lower-case hex digits.
    pub fn id(&self) -> String {
        hex(&self.id)
    }

    /// The `traceparent` value of the call's next request: version 00, the trace id, a
    /// span id of its own, sampled.
    pub fn next_parent(&mut self) -> String {
        self.requests += 1;
        let mut span =
            fixed_hash(0x7370_616e, (self.id, self.attempt, self.requests)).to_be_bytes();
        if span == [0; 8] {
            // An all-zero span id is invalid.
            span[7] = 1;
        }
        format!("00-{}-{}-01", hex(&self.id), hex(&span))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(object: &str, attempt: u32) -> Event {
        Event {
            kind: EventKind::Updated,
            route: "r".into(),
            object: object.into(),
            old_object: None,
            attempt,
            final_state_unknown: false,
        }
    }

    #[test]
    fn one_trace_id_per_event_across_attempts_and_a_span_id_per_request() {
        let mut first = Trace::of("h", &event(r#"{"rv":"1"}"#, 1));
        let mut retry = Trace::of("h", &event(r#"{"rv":"1"}"#, 2));
        let other = Trace::of("h", &event(r#"{"rv":"2"}"#, 1));
        assert_eq!(first.id(), retry.id());
        assert_ne!(first.id(), other.id());
        let (a, b, c) = (
            first.next_parent(),
            first.next_parent(),
            retry.next_parent(),
        );
        assert_eq!(a.len(), 55, "{a}");
        assert!(a.starts_with(&format!("00-{}-", first.id())) && a.ends_with("-01"));
        assert!(a != b && a != c && b != c, "{a} {b} {c}");
        assert_eq!(Trace::of("h", &event(r#"{"rv":"1"}"#, 1)).next_parent(), a);
    }
}
