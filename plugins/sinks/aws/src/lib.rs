//! aws: sends each change to an AWS service, signed with SigV4 in the plugin: SNS
//! (`Publish`), SQS (`SendMessage`, FIFO queues too), EventBridge (`PutEvents`), Kinesis
//! Data Firehose (`PutRecord`) or CloudWatch Logs (`PutLogEvents`), one request per change;
//! with `batch:` in the handler's config, a batch of changes in as few calls of the
//! service's batch API as its limits allow (`SendMessageBatch`, `PublishBatch`, `PutEvents`,
//! `PutRecordBatch`, `PutLogEvents`), with an outcome per change (see [`batch`]).
//!
//! ```yaml
//! handlers:
//!   to-sqs:
//!     plugin: builtin:aws
//!     instance: reuse
//!     config:
//!       service: sqs
//!       region: eu-west-1
//!       queue_url: https://sqs.eu-west-1.amazonaws.com/123456789012/changes.fifo
//!       credentials:
//!         access_key_id: {valueFrom: {secretKeyRef: {name: aws, key: access_key_id}}}
//!         secret_access_key: {valueFrom: {secretKeyRef: {name: aws, key: secret_access_key}}}
//!     capabilities:
//!       http: [https://sqs.eu-west-1.amazonaws.com]
//! ```
//!
//! The message is the event as JSON: `{"kind": "added|updated|deleted|sync", "route", "id",
//! "object", "oldObject", "finalStateUnknown"}`, where `id` (`UID.RESOURCEVERSION.CHANGE`)
//! is the same for every attempt at one change, and is a FIFO queue's or topic's
//! deduplication id. See docs/sinks.md ("AWS") for each service's settings, the
//! credentials (a key pair, or a web identity token exchanged with STS), what a refusal,
//! a throttled answer and a message too large become.

mod aws;
mod batch;
mod batch_calls;
mod config;
mod credentials;
mod message;
mod services;

use switchyard_sdk::{Configured, ConfiguredBatch, Event, ItemOutcome, Level, Outcome, log};

use crate::aws::Refusal;
use crate::config::{Config, Service};

/// The handler, built from its `config` once per instance.
struct Aws {
    config: Config,
}

impl Aws {
    /// The largest message this handler's service takes, for a change of `kind`.
    fn max_message(&self, event: &Event) -> usize {
        let max = self.config.service.max_message();
        if self.config.service != Service::Eventbridge {
            return max;
        }
        let kind = serde_json::from_str::<serde_json::Value>(&event.object)
            .ok()
            .and_then(|o| o["kind"].as_str().map(str::to_string))
            .unwrap_or_default();
        max.saturating_sub(services::eventbridge_overhead(&self.config, &kind))
    }
}

impl Configured for Aws {
    fn new(config: &str) -> Result<Self, String> {
        Ok(Self {
            config: Config::parse(config)?,
        })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let config = &self.config;
        let service = config.service.signing_name().to_ascii_uppercase();
        let message = message::build(&event, self.max_message(&event), &service)?;
        let sent = credentials::current(&config.credentials, &config.region)
            .and_then(|credentials| services::send(config, &credentials, &message));
        match sent {
            Ok(()) => {
                log(
                    Level::Debug,
                    &format!("delivered {} to {service}", message.id),
                );
                Ok(Outcome::Done)
            }
            Err(Refusal::Throttled(wait)) => {
                log(
                    Level::Warn,
                    &format!(
                        "{service} asked to slow down: sending again in {} ms",
                        wait.as_millis()
                    ),
                );
                Ok(Outcome::RequeueAfter(
                    u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                ))
            }
            Err(Refusal::Refused(error)) => {
                if error.code.starts_with("Expired") {
                    credentials::forget();
                }
                Err(error.into_error())
            }
            Err(Refusal::Failed(error) | Refusal::TooLarge(_, error)) => Err(error),
        }
    }
}

impl ConfiguredBatch for Aws {
    fn handle_batch(&self, events: Vec<Event>) -> Result<Vec<ItemOutcome>, String> {
        let service = batch::service_name(&self.config);
        let mut outcomes = vec![ItemOutcome::Done; events.len()];
        let mut ready = Vec::new();
        let mut messages = Vec::new();
        for (i, event) in events.iter().enumerate() {
            match message::build(event, self.max_message(event), &service) {
                Ok(message) => {
                    ready.push(i);
                    messages.push(message);
                }
                // A change too large (or not JSON) is refused before anything is sent.
                Err(error) => {
                    let reason = error.strip_prefix(&switchyard_sdk::permanent(""));
                    outcomes[i] = ItemOutcome::DeadLetter(reason.unwrap_or(&error).to_string());
                }
            }
        }
        if !messages.is_empty() {
            for (i, outcome) in ready.into_iter().zip(batch::send(&self.config, &messages)) {
                outcomes[i] = outcome;
            }
        }
        Ok(outcomes)
    }
}

switchyard_sdk::export_batch_handler!(Aws);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests_batch;
