//! The sink's requests to each service, as the [`TestHost`] records them, and what each kind
//! of answer becomes. (The same requests against moto's server: tests/it/sinks_aws.rs.)

use serde_json::{Value, json};
use switchyard_sdk::http::{Request, Response};
use switchyard_sdk::testing::{Report, TestHost, event, updated};
use switchyard_sdk::{EventKind, Outcome};

use super::*;

const KEYS: &str = "AKIDEXAMPLE";

fn cm(value: &str) -> Value {
    json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "shop", "uid": "u-1",
           "resourceVersion": "42"}, "data": {"v": value}})
}

fn config(service: &str, settings: Value) -> Value {
    let mut config = json!({
        "service": service,
        "region": "eu-west-1",
        "credentials": {"access_key_id": KEYS, "secret_access_key": "secret\n"},
    });
    for (k, v) in settings.as_object().unwrap() {
        config[k] = v.clone();
    }
    config
}

fn run(config: Value, prefix: &str, response: Response) -> Report {
    TestHost::new()
        .config(config)
        .http(prefix, response)
        .handle::<Aws>(updated(cm("1"), cm("2")))
}

fn header<'a>(request: &'a Request, name: &str) -> &'a str {
    request
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map_or("", |(_, v)| v.as_str())
}

fn signed_for(request: &Request, service: &str) {
    let authorization = header(request, "authorization");
    assert!(
        authorization.starts_with(&format!("AWS4-HMAC-SHA256 Credential={KEYS}/"))
            && authorization.contains(&format!("/eu-west-1/{service}/aws4_request, ")),
        "{authorization}"
    );
    assert_eq!(header(request, "x-amz-date").len(), 16);
}

fn json_body(request: &Request) -> Value {
    serde_json::from_slice(&request.body).unwrap()
}

#[test]
fn sqs_sends_the_change_with_a_fifo_group_and_a_stable_dedup_id() {
    let queue = "https://sqs.eu-west-1.amazonaws.com/123456789012/changes.fifo";
    let report = run(
        config("sqs", json!({"queue_url": queue})),
        "https://sqs.eu-west-1.amazonaws.com/",
        Response::new(200, r#"{"MessageId":"m-1"}"#),
    );
    assert_eq!(report.outcome, Ok(Outcome::Done));
    let request = &report.requests[0];
    assert_eq!(request.url, "https://sqs.eu-west-1.amazonaws.com/");
    assert_eq!(header(request, "x-amz-target"), "AmazonSQS.SendMessage");
    assert_eq!(
        header(request, "content-type"),
        "application/x-amz-json-1.0"
    );
    signed_for(request, "sqs");
    let body = json_body(request);
    assert_eq!(body["QueueUrl"], queue);
    assert_eq!(body["MessageGroupId"], "shop/a");
    assert_eq!(body["MessageDeduplicationId"], "u-1.42.update");
    let message: Value = serde_json::from_str(body["MessageBody"].as_str().unwrap()).unwrap();
    assert_eq!(message["object"], cm("2"));
    assert_eq!(message["oldObject"], cm("1"));
    assert_eq!(message["id"], "u-1.42.update");
}

#[test]
fn a_standard_queue_gets_no_fifo_fields_and_a_fixed_group_is_kept() {
    let standard = run(
        config(
            "sqs",
            json!({"queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q"}),
        ),
        "https://sqs.",
        Response::new(200, "{}"),
    );
    let body = json_body(&standard.requests[0]);
    assert_eq!(body.get("MessageGroupId"), None);
    assert_eq!(body.get("MessageDeduplicationId"), None);
    let fixed = run(
        config(
            "sqs",
            json!({"queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q.fifo",
                   "message_group_id": "cluster-a"}),
        ),
        "https://sqs.",
        Response::new(200, "{}"),
    );
    assert_eq!(json_body(&fixed.requests[0])["MessageGroupId"], "cluster-a");
}

#[test]
fn sns_publishes_a_form_with_the_topic_and_subject() {
    let topic = "arn:aws:sns:eu-west-1:123456789012:changes";
    let report = run(
        config("sns", json!({"topic_arn": topic, "subject": "k8s change"})),
        "https://sns.eu-west-1.amazonaws.com/",
        Response::new(200, "<PublishResponse/>"),
    );
    assert_eq!(report.outcome, Ok(Outcome::Done));
    let request = &report.requests[0];
    signed_for(request, "sns");
    let body = String::from_utf8(request.body.clone()).unwrap();
    assert!(
        body.starts_with(
            "Action=Publish&Version=2010-03-31&TopicArn=arn%3Aaws%3Asns%3Aeu-west-1%3A123456789012%3Achanges&Message=%7B"
        ),
        "{body}"
    );
    assert!(body.ends_with("&Subject=k8s%20change"), "{body}");
    assert!(!body.contains("MessageGroupId"));
}

#[test]
fn eventbridge_puts_one_entry_with_source_and_detail_type() {
    let report = run(
        config("eventbridge", json!({"event_bus": "k8s"})),
        "https://events.eu-west-1.amazonaws.com/",
        Response::new(200, r#"{"FailedEntryCount":0,"Entries":[{"EventId":"e"}]}"#),
    );
    assert_eq!(report.outcome, Ok(Outcome::Done));
    let request = &report.requests[0];
    signed_for(request, "events");
    assert_eq!(header(request, "x-amz-target"), "AWSEvents.PutEvents");
    let entry = &json_body(request)["Entries"][0];
    assert_eq!(entry["Source"], "switchyard");
    assert_eq!(entry["DetailType"], "Kubernetes ConfigMap updated");
    assert_eq!(entry["EventBusName"], "k8s");
    let detail: Value = serde_json::from_str(entry["Detail"].as_str().unwrap()).unwrap();
    assert_eq!(detail["object"], cm("2"));
    let failed = run(
        config("eventbridge", json!({})),
        "https://events.",
        Response::new(
            200,
            r#"{"FailedEntryCount":1,"Entries":[{"ErrorCode":"MalformedDetail","ErrorMessage":"bad"}]}"#,
        ),
    );
    assert_eq!(
        failed.outcome,
        Err("permanent: AWS answered 400 MalformedDetail: bad".into())
    );
}

#[test]
fn firehose_puts_a_newline_delimited_record_in_base64() {
    let report = run(
        config("firehose", json!({"delivery_stream": "to-s3"})),
        "https://firehose.eu-west-1.amazonaws.com/",
        Response::new(200, r#"{"RecordId":"r"}"#),
    );
    assert_eq!(report.outcome, Ok(Outcome::Done));
    let request = &report.requests[0];
    signed_for(request, "firehose");
    assert_eq!(
        header(request, "x-amz-target"),
        "Firehose_20150804.PutRecord"
    );
    let body = json_body(request);
    assert_eq!(body["DeliveryStreamName"], "to-s3");
    let data = unbase64(body["Record"]["Data"].as_str().unwrap());
    let record: Value = serde_json::from_slice(data.strip_suffix(b"\n").expect("a newline"))
        .expect("the record is the message's JSON");
    assert_eq!(record["id"], "u-1.42.update");
}

/// Standard base64 decoded (the test's own reading, not the SDK's encoder reversed).
fn unbase64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("{c} is not base64"),
    };
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let digits: Vec<u8> = chunk
            .iter()
            .filter(|c| **c != b'=')
            .map(|c| value(*c))
            .collect();
        let n = digits
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, d)| n | u32::from(*d) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..digits.len()]);
    }
    out
}

#[test]
fn logs_puts_one_event_with_a_timestamp() {
    let report = run(
        config(
            "logs",
            json!({"log_group": "/k8s", "log_stream": "changes"}),
        ),
        "https://logs.eu-west-1.amazonaws.com/",
        Response::new(200, r#"{"nextSequenceToken":"1"}"#),
    );
    assert_eq!(report.outcome, Ok(Outcome::Done));
    let request = &report.requests[0];
    signed_for(request, "logs");
    assert_eq!(
        header(request, "x-amz-target"),
        "Logs_20140328.PutLogEvents"
    );
    let body = json_body(request);
    assert_eq!(body["logGroupName"], "/k8s");
    assert!(body["logEvents"][0]["timestamp"].as_u64().unwrap() > 1_700_000_000_000);
    // A missing group is not created: the stream's creation fails as the put did.
    let missing = run(
        config(
            "logs",
            json!({"log_group": "/k8s", "log_stream": "changes"}),
        ),
        "https://logs.",
        Response::new(
            400,
            r#"{"__type":"ResourceNotFoundException","message":"The specified log stream does not exist."}"#,
        ),
    );
    assert_eq!(missing.requests.len(), 2);
    assert_eq!(
        header(&missing.requests[1], "x-amz-target"),
        "Logs_20140328.CreateLogStream"
    );
    assert!(
        missing
            .outcome
            .unwrap_err()
            .starts_with("permanent: AWS answered 400 ResourceNotFoundException")
    );
}

#[test]
fn throttling_comes_back_later_and_errors_name_aws_s_code() {
    let sqs = config(
        "sqs",
        json!({"queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q"}),
    );
    let throttled = run(
        sqs.clone(),
        "https://sqs.",
        Response::new(
            400,
            r#"{"__type":"com.amazonaws.sqs#ThrottlingException","message":"slow"}"#,
        ),
    );
    assert!(
        matches!(throttled.outcome, Ok(Outcome::RequeueAfter(_))),
        "{:?}",
        throttled.outcome
    );
    assert!(
        throttled
            .logs
            .iter()
            .any(|(_, l)| l.contains("SQS asked to slow down"))
    );
    let asked = run(
        sqs.clone(),
        "https://sqs.",
        Response::new(503, "").header("Retry-After", "9"),
    );
    assert_eq!(asked.outcome, Ok(Outcome::RequeueAfter(9000)));
    let missing = run(
        sqs.clone(),
        "https://sqs.",
        Response::new(
            400,
            r#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."}"#,
        ),
    );
    assert_eq!(
        missing.outcome,
        Err(
            "permanent: AWS answered 400 QueueDoesNotExist: The specified queue does not exist."
                .into()
        )
    );
    let internal = run(
        sqs,
        "https://sqs.",
        Response::new(500, r#"{"__type":"InternalError","message":"x"}"#),
    );
    assert_eq!(
        internal.outcome,
        Err("AWS answered 500 InternalError: x".into())
    );
}

#[test]
fn a_message_too_large_is_refused_before_sending() {
    let big = "x".repeat(300_000);
    let report = TestHost::new()
        .config(config(
            "sns",
            json!({"topic_arn": "arn:aws:sns:eu-west-1:1:t"}),
        ))
        .http("https://sns.", Response::new(200, ""))
        .handle::<Aws>(event(EventKind::Added, cm(&big)));
    let error = report.outcome.unwrap_err();
    assert!(
        error.starts_with("permanent: the message is 300"),
        "{error}"
    );
    assert!(
        error.contains("more than SNS takes (262144 bytes)"),
        "{error}"
    );
    assert!(report.requests.is_empty());
}

#[test]
fn a_web_identity_is_exchanged_with_sts_and_signs_with_its_session_token() {
    let sts = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
        <AccessKeyId>ASIATEMP</AccessKeyId><SecretAccessKey>s</SecretAccessKey>\
        <SessionToken>session-token</SessionToken><Expiration>2100-01-01T00:00:00Z</Expiration>\
        </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
    let config = json!({
        "service": "sqs", "region": "eu-west-1",
        "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q",
        "credentials": {"web_identity": {"role_arn": "arn:aws:iam::1:role/r", "token": "jwt\n"}},
    });
    let report = TestHost::new()
        .config(config)
        .http(
            "https://sts.eu-west-1.amazonaws.com/",
            Response::new(200, sts),
        )
        .http("https://sqs.", Response::new(200, "{}"))
        .handle::<Aws>(event(EventKind::Added, cm("1")));
    assert_eq!(report.outcome, Ok(Outcome::Done));
    let [exchange, send] = report.requests.as_slice() else {
        panic!("{:?}", report.requests)
    };
    let form = String::from_utf8(exchange.body.clone()).unwrap();
    assert!(form.starts_with("Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fr&RoleSessionName=switchyard&WebIdentityToken=jwt&"), "{form}");
    assert_eq!(header(exchange, "authorization"), "");
    assert!(header(send, "authorization").starts_with("AWS4-HMAC-SHA256 Credential=ASIATEMP/"));
    assert_eq!(header(send, "x-amz-security-token"), "session-token");
    assert!(header(send, "authorization").contains("x-amz-security-token"));
}

#[test]
fn a_bad_config_is_an_init_error_that_names_the_key() {
    let outcome = |config: Value| {
        TestHost::new()
            .config(config)
            .handle::<Aws>(event(EventKind::Added, cm("1")))
            .outcome
            .unwrap_err()
    };
    assert!(outcome(Value::Null).contains("needs at least `service`"));
    assert!(outcome(config("sqs", json!({}))).contains("config.queue_url: service sqs needs it"));
    assert!(outcome(config("kafka", json!({}))).contains("unknown variant `kafka`"));
    assert!(
        outcome(config(
            "sns",
            json!({"topic_arn": "t", "queue_url": "https://q"})
        ))
        .contains("config.queue_url: not a setting of service sns")
    );
    assert!(outcome(config("sqs", json!({"queue_url": "sqs/q"}))).contains("config.queue_url"));
    assert!(
        outcome(config(
            "sqs",
            json!({"queue_url": "https://q", "region": "EU"})
        ))
        .contains("config.region")
    );
    assert!(outcome(config("logs", json!({"log_group": "g"}))).contains("config.log_stream"));
    assert!(
        outcome(config("sqs", json!({"queue_url": "https://q", "qeue": 1})))
            .contains("unknown field `qeue`")
    );
    let half = json!({"service": "sqs", "region": "eu-west-1", "queue_url": "https://q",
                      "credentials": {"access_key_id": "a"}});
    assert!(
        outcome(half).contains("config.credentials: needs access_key_id and secret_access_key")
    );
}
