//! A batch of changes (`handle-batch`): split into the calls the service takes
//! ([`limits`]), each call's answer mapped to an outcome per change.
//!
//! A call that fails as a whole counts for each change it carried: throttled, a 5xx or no
//! answer retries them (and the calls after it are not made: their changes are retried
//! too), any other refusal moves them to the dead letters naming AWS's code and message.

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

/// Sends `messages` in as few calls as the service's limits allow; an outcome per message,
/// in order.
pub fn send(config: &Config, messages: &[Message]) -> Vec<ItemOutcome> {
    let credentials = match credentials::current(&config.credentials, &config.region) {
        Ok(credentials) => credentials,
        Err(refusal) => return vec![for_all(config, refusal); messages.len()],
    };
    let sizes: Vec<usize> = messages.iter().map(|m| entry_size(config, m)).collect();
    let mut outcomes = Vec::with_capacity(messages.len());
    let mut given_up: Option<ItemOutcome> = None;
    for range in chunks(&sizes, limits(config.service)) {
        let chunk = &messages[range];
        if let Some(outcome) = &given_up {
            outcomes.extend(vec![outcome.clone(); chunk.len()]);
            continue;
        }
        match call(config, &credentials, chunk) {
            Ok(each) => outcomes.extend(each),
            Err(refusal) => {
                let outcome = for_all(config, refusal);
                if matches!(outcome, ItemOutcome::Retry(_)) {
                    given_up = Some(outcome.clone());
                }
                outcomes.extend(vec![outcome; chunk.len()]);
            }
        }
    }
    outcomes
}

/// One call of the service's batch API with `chunk`; an outcome per message.
fn call(
    config: &Config,
    credentials: &Credentials,
    chunk: &[Message],
) -> Result<Vec<ItemOutcome>, Refusal> {
    let outcomes = batch_calls::send(config, credentials, chunk)?;
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
        Refusal::Failed(error) => given_up_or_retried(&service, &error),
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
