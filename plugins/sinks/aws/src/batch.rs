//! A batch of changes (`handle-batch`): split into the calls the service takes
//! ([`limits`]), each call's answer mapped to an outcome per change.
//!
//! A call the daemon refuses as larger than the handler's `outbound.max_request_body` is
//! sent again split into calls that fit the limit the refusal names (in halves when it
//! names none); a change whose call alone is too large is a dead letter naming the limit.
//!
//! A call that fails as a whole otherwise counts for each change it carried: throttled, a
//! 5xx or no answer retries them (and the calls after it are not made: their changes are
//! retried too), any other refusal moves them to the dead letters naming AWS's code and
//! message.

use std::ops::Range;

use sigv4::Credentials;
use switchyard_sdk::{ItemOutcome, Level, log};

use crate::aws::Refusal;
use crate::batch_calls;
use crate::config::{Config, Service};
use crate::credentials;
use crate::message::Message;
use crate::services;

/// What one call of a service's batch API takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries (messages, records, events) in one call.
    pub entries: usize,
    /// Bytes of all entries together, as the service counts them ([`entry_size`]).
    pub bytes: usize,
}

/// The limits of one call of `service`'s batch API (see each service's quotas).
pub fn limits(service: Service) -> Limits {
    let (entries, bytes) = match service {
        // SendMessageBatch, PublishBatch, PutEvents: 10 entries, 256 KiB in all.
        Service::Sqs | Service::Sns | Service::Eventbridge => (10, 262_144),
        // PutRecordBatch: 500 records, 4 MiB in all.
        Service::Firehose => (500, 4_194_304),
        // PutLogEvents: 10,000 events, 1 MiB counting 26 bytes per event.
        Service::Logs => (10_000, 1_048_576),
    };
    Limits { entries, bytes }
}

/// The bytes `message` counts toward a call's total: its text, and for EventBridge the
/// entry's other fields, for Firehose the newline, for CloudWatch Logs 26 bytes.
pub fn entry_size(config: &Config, message: &Message) -> usize {
    let text = message.text.len();
    match config.service {
        Service::Sqs | Service::Sns => text,
        Service::Eventbridge => text + services::eventbridge_overhead(config, &message.kind),
        Service::Firehose => text + 1,
        Service::Logs => text + 26,
    }
}

/// Consecutive ranges of `sizes`, in order, each within `limits`. An entry larger than
/// `limits.bytes` alone goes in a call of its own.
pub fn chunks(sizes: &[usize], limits: Limits) -> Vec<Range<usize>> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, size) in sizes.iter().enumerate() {
        let full = i - start == limits.entries || bytes + size > limits.bytes;
        if i > start && full {
            chunks.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < sizes.len() {
        chunks.push(start..sizes.len());
    }
    chunks
}

/// Sends `messages` in as few calls as the service's limits and the handler's
/// `outbound.max_request_body` allow; an outcome per message, in order.
pub fn send(config: &Config, messages: &[Message]) -> Vec<ItemOutcome> {
    let credentials = match credentials::current(&config.credentials, &config.region) {
        Ok(credentials) => credentials,
        Err(refusal) => return vec![for_all(config, refusal); messages.len()],
    };
    let sizes: Vec<usize> = messages.iter().map(|m| entry_size(config, m)).collect();
    let mut sending = Sending {
        config,
        credentials: &credentials,
        outcomes: Vec::with_capacity(messages.len()),
        given_up: None,
        max_body: None,
    };
    for range in chunks(&sizes, limits(config.service)) {
        sending.deliver(&messages[range]);
    }
    sending.outcomes
}

/// A batch being sent: the outcomes so far, and what its calls so far showed.
struct Sending<'a> {
    config: &'a Config,
    credentials: &'a Credentials,
    outcomes: Vec<ItemOutcome>,
    /// Once a call failed in a way that is retried, the outcome of every change left
    /// (the calls after it are not made).
    given_up: Option<ItemOutcome>,
    /// The handler's `outbound.max_request_body`, once a call refused as too large named it.
    max_body: Option<usize>,
}

impl Sending<'_> {
    /// Sends `chunk` in one call, or in several when its body is larger than the handler's
    /// `outbound.max_request_body`; an outcome per message.
    fn deliver(&mut self, chunk: &[Message]) {
        if let Some(outcome) = &self.given_up {
            self.outcomes.extend(vec![outcome.clone(); chunk.len()]);
            return;
        }
        let body = batch_calls::body(self.config, chunk);
        if let Some(max) = self.max_body.filter(|max| body.len() > *max) {
            self.split(chunk, Some(max), body.len());
            return;
        }
        match call(self.config, self.credentials, chunk, &body) {
            Ok(each) => self.outcomes.extend(each),
            Err(Refusal::TooLarge(max, _)) => {
                self.max_body = max.or(self.max_body);
                self.split(chunk, max, body.len());
            }
            Err(refusal) => {
                let outcome = for_all(self.config, refusal);
                if matches!(outcome, ItemOutcome::Retry(_)) {
                    self.given_up = Some(outcome.clone());
                }
                self.outcomes.extend(vec![outcome; chunk.len()]);
            }
        }
    }

    /// Sends `chunk`, whose body of `size` bytes is larger than `max` (the handler's
    /// `outbound.max_request_body`, when known), in calls that fit it, in order: halves when
    /// the limit is unknown. A change that alone is too large is a dead letter.
    fn split(&mut self, chunk: &[Message], max: Option<usize>, size: usize) {
        if chunk.len() == 1 {
            self.outcomes.push(alone_too_large(max, size));
            return;
        }
        let mut pieces = max.map_or_else(Vec::new, |max| fitting(self.config, chunk, max));
        if pieces.len() < 2 {
            // No limit named, or a body measured under it refused all the same.
            let half = chunk.len() / 2;
            pieces = vec![0..half, half..chunk.len()];
        }
        log(
            Level::Debug,
            &format!(
                "{}: a call of {} changes ({size} bytes) is larger than the handler's \
                 outbound.max_request_body{}: sending it in {} calls",
                service_name(self.config),
                chunk.len(),
                max.map(|m| format!(" ({m} bytes)")).unwrap_or_default(),
                pieces.len()
            ),
        );
        for piece in pieces {
            self.deliver(&chunk[piece]);
        }
    }
}

/// Consecutive ranges of `chunk` whose calls' bodies are at most `max` bytes: each entry
/// counted as the bytes it adds to a body (the body of it alone less the empty one) and
/// the separator before it.
fn fitting(config: &Config, chunk: &[Message], max: usize) -> Vec<Range<usize>> {
    let empty = batch_calls::body(config, &[]).len();
    let sizes: Vec<usize> = chunk
        .iter()
        .map(|m| batch_calls::body(config, std::slice::from_ref(m)).len() - empty + 1)
        .collect();
    let limits = Limits {
        entries: chunk.len(),
        // The first entry has no separator.
        bytes: (max + 1).saturating_sub(empty),
    };
    chunks(&sizes, limits)
}

/// The dead letter of a change whose call alone, `size` bytes, is larger than the
/// handler's `outbound.max_request_body` (`max` when the host named it).
fn alone_too_large(max: Option<usize>, size: usize) -> ItemOutcome {
    let max = max.map(|m| format!(" ({m} bytes)")).unwrap_or_default();
    ItemOutcome::DeadLetter(format!(
        "the call for this change alone is {size} bytes, more than the handler's \
         outbound.max_request_body{max}: raise that limit"
    ))
}

/// One call of the service's batch API with `chunk` (its `body`); an outcome per message.
fn call(
    config: &Config,
    credentials: &Credentials,
    chunk: &[Message],
    body: &str,
) -> Result<Vec<ItemOutcome>, Refusal> {
    let outcomes = batch_calls::send(config, credentials, chunk, body)?;
    let delivered = outcomes.iter().filter(|o| **o == ItemOutcome::Done).count();
    log(
        Level::Debug,
        &format!(
            "delivered {delivered} of {} in one call to {}",
            chunk.len(),
            service_name(config)
        ),
    );
    Ok(outcomes)
}

/// The service's name in log lines and errors: `SQS`, `EVENTS`, ...
pub fn service_name(config: &Config) -> String {
    config.service.signing_name().to_ascii_uppercase()
}

/// What a call that failed as a whole means for each change it carried: a wait (throttled),
/// a retry (no answer, a 5xx, expired credentials), or a dead letter (another refusal, or
/// a request larger than the handler's `outbound.max_request_body`).
pub fn for_all(config: &Config, refusal: Refusal) -> ItemOutcome {
    let service = service_name(config);
    match refusal {
        Refusal::Throttled(wait) => {
            let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            log(
                Level::Warn,
                &format!("{service} asked to slow down: sending again in {ms} ms"),
            );
            ItemOutcome::Retry(Some(ms))
        }
        Refusal::Refused(error) => {
            if error.code.starts_with("Expired") {
                credentials::forget();
            }
            given_up_or_retried(&service, &error.into_error())
        }
        // A request larger than the handler's `outbound.max_request_body` is permanent.
        Refusal::Failed(error) | Refusal::TooLarge(_, error) => {
            given_up_or_retried(&service, &error)
        }
    }
}

/// A dead letter for a permanent error (`permanent: …`), a retry for any other.
fn given_up_or_retried(service: &str, error: &str) -> ItemOutcome {
    match error.strip_prefix(&switchyard_sdk::permanent("")) {
        Some(reason) => ItemOutcome::DeadLetter(reason.to_string()),
        None => retry(service, error),
    }
}

/// A retry, logged with why.
pub fn retry(service: &str, why: &str) -> ItemOutcome {
    log(
        Level::Warn,
        &format!("{service}: {why}: sending the change again"),
    );
    ItemOutcome::Retry(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_stop_at_the_entries_and_at_the_bytes_a_call_takes() {
        let ten = Limits {
            entries: 10,
            bytes: 100,
        };
        assert_eq!(chunks(&[1; 25], ten), [0..10, 10..20, 20..25]);
        assert_eq!(chunks(&[40, 40, 40, 10, 60], ten), [0..2, 2..4, 4..5]);
        assert_eq!(chunks(&[150, 1], ten), [0..1, 1..2]);
        assert_eq!(chunks(&[], ten), Vec::<Range<usize>>::new());
        assert_eq!(chunks(&[100, 100], ten), [0..1, 1..2]);
    }
}
