//! Each service's call for one message: SNS `Publish`, SQS `SendMessage`, EventBridge
//! `PutEvents`, Firehose `PutRecord`, CloudWatch Logs `PutLogEvents`. The batch calls are
//! in [`crate::batch_calls`].

use serde_json::{Value, json};
use sigv4::{Credentials, Scope};
use switchyard_sdk::http::Response;
use switchyard_sdk::sink::base64;

use crate::aws::{self, AwsError, Protocol, Refusal, Target};
use crate::config::{Config, Service};
use crate::message::{Message, fifo_id};

/// Sends `message` to the service `config` names.
pub fn send(config: &Config, credentials: &Credentials, message: &Message) -> Result<(), Refusal> {
    let call = caller(config, credentials);
    match config.service {
        Service::Sns => call(Protocol::Query, &sns(config, message)).map(drop),
        Service::Sqs => call(
            Protocol::Json10("AmazonSQS.SendMessage"),
            &sqs(config, message),
        )
        .map(drop),
        Service::Eventbridge => {
            let answer = call(
                Protocol::Json11("AWSEvents.PutEvents"),
                &eventbridge(config, message),
            )?;
            eventbridge_entry(&answer.text())
        }
        Service::Firehose => call(
            Protocol::Json11("Firehose_20150804.PutRecord"),
            &firehose(config, message),
        )
        .map(drop),
        Service::Logs => {
            logs(config, &logs_body(config, &[message.text.as_str()]), &call).map(drop)
        }
    }
}

/// Calls of the API of the service `config` names: a body in a protocol, sent to its
/// endpoint, signed for its region and signing name with `credentials`.
pub fn caller<'a>(
    config: &'a Config,
    credentials: &'a Credentials,
) -> impl Fn(Protocol, &str) -> Result<Response, Refusal> + 'a {
    let endpoint = config.endpoint();
    move |protocol, body| {
        let target = Target {
            endpoint: &endpoint,
            scope: Scope {
                region: &config.region,
                service: config.service.signing_name(),
            },
            protocol,
        };
        aws::call(&target, Some(credentials), body.as_bytes())
    }
}

/// SNS `Publish` (query protocol); a FIFO topic (`….fifo`) gets the group and the
/// change's id as deduplication id.
fn sns(config: &Config, message: &Message) -> String {
    let topic = config.topic_arn.as_deref().unwrap_or_default();
    let mut pairs = vec![
        ("Action", "Publish".to_string()),
        ("Version", "2010-03-31".to_string()),
        ("TopicArn", topic.to_string()),
        ("Message", message.text.clone()),
    ];
    if let Some(subject) = &config.subject {
        pairs.push(("Subject", subject.clone()));
    }
    if topic.ends_with(".fifo") {
        pairs.push(("MessageGroupId", group(config, message)));
        pairs.push(("MessageDeduplicationId", fifo_id(&message.id)));
    }
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    aws::form(&pairs)
}

/// The FIFO message group: `message_group_id`, else the object.
pub fn group(config: &Config, message: &Message) -> String {
    fifo_id(
        config
            .message_group_id
            .as_deref()
            .unwrap_or(&message.object),
    )
}

/// SQS `SendMessage` (JSON 1.0); a FIFO queue (`….fifo`) as for SNS.
fn sqs(config: &Config, message: &Message) -> String {
    let queue = config.queue_url.as_deref().unwrap_or_default();
    let mut body = json!({"QueueUrl": queue, "MessageBody": message.text});
    if queue.ends_with(".fifo") {
        body["MessageGroupId"] = group(config, message).into();
        body["MessageDeduplicationId"] = fifo_id(&message.id).into();
    }
    body.to_string()
}

/// EventBridge's `Source` and `DetailType` for `message`.
pub fn eventbridge_names(config: &Config, kind: &str, change: &str) -> (String, String) {
    let source = config.source.clone().unwrap_or_else(|| "switchyard".into());
    let detail_type = config
        .detail_type
        .clone()
        .unwrap_or_else(|| format!("Kubernetes {kind} {change}"));
    (source, detail_type)
}

/// EventBridge `PutEvents` with one entry (JSON 1.1).
fn eventbridge(config: &Config, message: &Message) -> String {
    let (source, detail_type) = eventbridge_names(config, &message.kind, message.change);
    let bus = config.event_bus.as_deref().unwrap_or("default");
    json!({"Entries": [{"Source": source, "DetailType": detail_type, "Detail": message.text,
                        "EventBusName": bus}]})
    .to_string()
}

/// `PutEvents` answers 200 with a failed entry: its error code says whether to retry.
fn eventbridge_entry(answer: &str) -> Result<(), Refusal> {
    let answer: Value = serde_json::from_str(answer).unwrap_or_default();
    if answer["FailedEntryCount"].as_u64().unwrap_or(0) == 0 {
        return Ok(());
    }
    Err(eventbridge_failure(&answer["Entries"][0]))
}

/// What a failed `PutEvents` entry (with an `ErrorCode`) means: throttled, a retry
/// (`InternalFailure`, the one failure of an entry that a retry can change), or a refusal.
pub fn eventbridge_failure(entry: &Value) -> Refusal {
    let code = entry["ErrorCode"].as_str().unwrap_or("Unknown").to_string();
    let message = entry["ErrorMessage"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if aws::is_throttling(&code) {
        return Refusal::Throttled(aws::throttle_wait(None));
    }
    let status = if code == "InternalFailure" { 500 } else { 400 };
    Refusal::Refused(AwsError {
        status,
        code,
        message,
    })
}

/// Firehose `PutRecord`: the message and a newline (so the objects Firehose writes to S3
/// are newline-delimited JSON), base64.
fn firehose(config: &Config, message: &Message) -> String {
    let data = base64(format!("{}\n", message.text).as_bytes());
    json!({"DeliveryStreamName": config.delivery_stream, "Record": {"Data": data}}).to_string()
}

/// CloudWatch Logs `PutLogEvents`' body for `texts`, one event each, all with the time
/// now (so in time order).
pub fn logs_body(config: &Config, texts: &[&str]) -> String {
    let now = aws::now() * 1000;
    let events: Vec<Value> = texts
        .iter()
        .map(|text| json!({"timestamp": now, "message": text}))
        .collect();
    json!({"logGroupName": config.log_group, "logStreamName": config.log_stream,
           "logEvents": events})
    .to_string()
}

/// CloudWatch Logs `PutLogEvents` with the body `put` ([`logs_body`]); a missing stream is
/// created (`CreateLogStream`) and the events put again. A missing group is a refusal: the
/// sink does not create groups (their retention and encryption are the account's choice).
pub fn logs(
    config: &Config,
    put: &str,
    call: &dyn Fn(Protocol, &str) -> Result<Response, Refusal>,
) -> Result<Response, Refusal> {
    let stream = json!({"logGroupName": config.log_group, "logStreamName": config.log_stream});
    match call(Protocol::Json11("Logs_20140328.PutLogEvents"), put) {
        Err(Refusal::Refused(e))
            if e.code == "ResourceNotFoundException" && !e.message.contains("group") =>
        {
            match call(
                Protocol::Json11("Logs_20140328.CreateLogStream"),
                &stream.to_string(),
            ) {
                Err(Refusal::Refused(e)) if e.code == "ResourceAlreadyExistsException" => {}
                created => {
                    created?;
                }
            }
            switchyard_sdk::log(
                switchyard_sdk::Level::Info,
                &format!(
                    "created the log stream {:?} in {:?}",
                    config.log_stream.as_deref().unwrap_or_default(),
                    config.log_group.as_deref().unwrap_or_default()
                ),
            );
            call(Protocol::Json11("Logs_20140328.PutLogEvents"), put)
        }
        other => other,
    }
}

/// The bytes of an EventBridge entry besides its `Detail`, which count toward its 256 KiB.
pub fn eventbridge_overhead(config: &Config, kind: &str) -> usize {
    let (source, detail_type) = eventbridge_names(config, kind, "updated");
    // The entry's time (14 bytes) and the bus's name are counted too.
    source.len() + detail_type.len() + 14 + config.event_bus.as_deref().unwrap_or("default").len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_eventbridge_entry_is_a_refusal_with_its_code() {
        assert_eq!(
            eventbridge_entry(r#"{"FailedEntryCount":0,"Entries":[{"EventId":"1"}]}"#),
            Ok(())
        );
        let failed = eventbridge_entry(
            r#"{"FailedEntryCount":1,"Entries":[{"ErrorCode":"NotAuthorizedForSourceException","ErrorMessage":"no"}]}"#,
        );
        let Err(Refusal::Refused(error)) = failed else {
            panic!("{failed:?}")
        };
        assert_eq!(
            error.into_error(),
            "permanent: AWS answered 400 NotAuthorizedForSourceException: no"
        );
        let internal = eventbridge_entry(
            r#"{"FailedEntryCount":1,"Entries":[{"ErrorCode":"InternalFailure"}]}"#,
        );
        let Err(Refusal::Refused(error)) = internal else {
            panic!("{internal:?}")
        };
        assert!(!error.into_error().starts_with("permanent"));
        assert!(matches!(
            eventbridge_entry(
                r#"{"FailedEntryCount":1,"Entries":[{"ErrorCode":"ThrottlingException"}]}"#
            ),
            Err(Refusal::Throttled(_))
        ));
    }
}
