//! The `ExportLogsServiceRequest` for changes
//! (opentelemetry/proto/collector/logs/v1/logs_service.proto): a `ResourceLogs` per
//! resource, the object a change is about, in OpenTelemetry's Kubernetes semantic
//! conventions (`k8s.namespace.name`, `k8s.pod.name`, `k8s.pod.uid`, `k8s.node.name`,
//! `k8s.pod.label.KEY`, and likewise `k8s.KIND.name` ... for every kind), holding a
//! `LogRecord` per change about it. For a core v1 Event, that object is the one it is about (`involvedObject`),
//! the record's body its `message` and its severity WARN for a Warning, INFO otherwise;
//! for any other object, the body is the object itself (a map) and the severity INFO.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use switchyard_sdk::template;

use crate::proto::{Message, any_value, key_value};

/// OTLP's `SEVERITY_NUMBER_INFO`.
const INFO: u64 = 9;
/// OTLP's `SEVERITY_NUMBER_WARN`.
const WARN: u64 = 13;

/// What the config adds: resource and log attributes, name to template.
#[derive(Debug, Default)]
pub struct Extra {
    /// Resource attributes (`service.name`, `k8s.cluster.name`, ...).
    pub resource: BTreeMap<String, String>,
    /// Log record attributes.
    pub attributes: BTreeMap<String, String>,
}

/// The attributes and body of a record, before encoding (what the tests read).
#[derive(Debug, PartialEq)]
pub struct Record {
    /// Resource attributes, in order.
    pub resource: Vec<(String, Value)>,
    /// Log attributes, in order.
    pub attributes: Vec<(String, Value)>,
    /// The body.
    pub body: Value,
    /// Severity number and text.
    pub severity: (u64, String),
    /// When it happened, nanoseconds since the Unix epoch (0: unknown).
    pub time: u64,
}

/// The record for `event` (as `switchyard_sdk::sink::event_json` gives it), `key` its
/// idempotency key.
pub fn build(event: &Value, key: &str, extra: &Extra) -> Record {
    let object = &event["object"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let is_event = text(&object["kind"]) == "Event" && object["involvedObject"].is_object();
    let (subject, meta) = if is_event {
        (&object["involvedObject"], &object["involvedObject"])
    } else {
        (object, &object["metadata"])
    };
    let kind = text(&subject["kind"]).to_ascii_lowercase();
    let mut resource = Vec::new();
    let put = |list: &mut Vec<(String, Value)>, key: String, value: &Value| {
        if !value.is_null() && value != "" {
            list.push((key, value.clone()));
        }
    };
    put(
        &mut resource,
        "k8s.namespace.name".into(),
        &meta["namespace"],
    );
    if !kind.is_empty() {
        put(&mut resource, format!("k8s.{kind}.name"), &meta["name"]);
        put(&mut resource, format!("k8s.{kind}.uid"), &meta["uid"]);
    }
    put(
        &mut resource,
        "k8s.node.name".into(),
        &subject["spec"]["nodeName"],
    );
    if let Some(labels) = subject["metadata"]["labels"].as_object() {
        for (name, value) in labels {
            put(&mut resource, format!("k8s.{kind}.label.{name}"), value);
        }
    }
    for (name, value) in &extra.resource {
        put(&mut resource, name.clone(), &fill(value, event));
    }
    let mut attributes = Vec::new();
    put(&mut attributes, "log.record.uid".into(), &json!(key));
    put(&mut attributes, "k8s.change".into(), &event["kind"]);
    let (body, severity, time) = if is_event {
        for field in ["reason", "type", "count", "action"] {
            put(
                &mut attributes,
                format!("k8s.event.{field}"),
                &object[field],
            );
        }
        let component = &object["source"]["component"];
        put(
            &mut attributes,
            "k8s.event.source.component".into(),
            component,
        );
        put(
            &mut attributes,
            "k8s.event.name".into(),
            &object["metadata"]["name"],
        );
        put(
            &mut attributes,
            "k8s.event.uid".into(),
            &object["metadata"]["uid"],
        );
        let severity = match text(&object["type"]).as_str() {
            "Warning" => (WARN, "Warning".to_string()),
            other => (
                INFO,
                if other.is_empty() { "Normal" } else { other }.to_string(),
            ),
        };
        let time = ["eventTime", "lastTimestamp", "firstTimestamp"]
            .iter()
            .find_map(|f| object[f].as_str().and_then(nanos))
            .unwrap_or(0);
        (object["message"].clone(), severity, time)
    } else {
        (object.clone(), (INFO, "Info".to_string()), 0)
    };
    for (name, value) in &extra.attributes {
        put(&mut attributes, name.clone(), &fill(value, event));
    }
    Record {
        resource,
        attributes,
        body,
        severity,
        time,
    }
}

fn fill(text: &str, event: &Value) -> Value {
    template::fill(&json!(text), event)
}

/// The records encoded as one `ExportLogsServiceRequest`: a `ResourceLogs` per resource
/// (records whose resource attributes are the same share it, in the order first seen), each
/// with one `ScopeLogs` holding its records in order; `now` is the observed time, and the
/// time of a record that has none.
pub fn encode(records: &[Record], now: u64) -> Vec<u8> {
    // The records of each resource, grouped by the first one's resource.
    let mut resources: Vec<Vec<&Record>> = Vec::new();
    for record in records {
        match resources
            .iter_mut()
            .find(|group| group[0].resource == record.resource)
        {
            Some(group) => group.push(record),
            None => resources.push(vec![record]),
        }
    }
    let scope = Message::new()
        .string(1, "switchyard")
        .string(2, env!("CARGO_PKG_VERSION"));
    let mut request = Message::new();
    for group in resources {
        let resource = group[0]
            .resource
            .iter()
            .fold(Message::new(), |m, (k, v)| m.message(1, &key_value(k, v)));
        let scope_logs = group
            .iter()
            .fold(Message::new().message(1, &scope), |m, r| {
                m.message(2, &log_record(r, now))
            });
        let resource_logs = Message::new().message(1, &resource).message(2, &scope_logs);
        request = request.message(1, &resource_logs);
    }
    request.0
}

/// One `LogRecord`.
fn log_record(record: &Record, now: u64) -> Message {
    let time = if record.time == 0 { now } else { record.time };
    let mut log = Message::new()
        .fixed64(1, time)
        .uint(2, record.severity.0)
        .string(3, &record.severity.1)
        .message(5, &any_value(&record.body));
    for (k, v) in &record.attributes {
        log = log.message(6, &key_value(k, v));
    }
    log.fixed64(11, now)
}

/// Nanoseconds since the Unix epoch of an RFC 3339 time in UTC
/// (`2026-11-27T10:00:00Z`, `2026-11-27T10:00:00.123456Z`).
pub fn nanos(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let date: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [year, month, day] = date[..] else {
        return None;
    };
    let (time, fraction) = time.split_once('.').unwrap_or((time, ""));
    let hms: Vec<u64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [h, m, s] = hms[..] else {
        return None;
    };
    let mut frac = 0u64;
    for (i, digit) in fraction.chars().take(9).enumerate() {
        frac += u64::from(digit.to_digit(10)?) * 10u64.pow(8 - i as u32);
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let days =
        u64::try_from(era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468).ok()?;
    Some(((days * 86_400 + h * 3600 + m * 60 + s) * 1_000_000_000) + frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_a_record_about_its_object_with_its_severity() {
        let event = json!({"kind": "added", "object": {
            "kind": "Event", "type": "Warning", "reason": "BackOff", "count": 3,
            "message": "Back-off", "lastTimestamp": "2026-11-27T10:00:00Z",
            "metadata": {"name": "web-1.1", "namespace": "shop", "uid": "e-1"},
            "source": {"component": "kubelet"},
            "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-1",
                               "uid": "p-1"}}});
        let extra = Extra {
            resource: BTreeMap::from([("k8s.cluster.name".into(), "prod".into())]),
            attributes: BTreeMap::from([("app".into(), "{{object.reason}}".into())]),
        };
        let record = build(&event, "e-1.5.add", &extra);
        let names = |list: &[(String, Value)]| {
            list.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(&record.resource),
            [
                r#"k8s.namespace.name="shop""#,
                r#"k8s.pod.name="web-1""#,
                r#"k8s.pod.uid="p-1""#,
                r#"k8s.cluster.name="prod""#,
            ]
        );
        assert_eq!(
            names(&record.attributes),
            [
                r#"log.record.uid="e-1.5.add""#,
                r#"k8s.change="added""#,
                r#"k8s.event.reason="BackOff""#,
                r#"k8s.event.type="Warning""#,
                "k8s.event.count=3",
                r#"k8s.event.source.component="kubelet""#,
                r#"k8s.event.name="web-1.1""#,
                r#"k8s.event.uid="e-1""#,
                r#"app="BackOff""#,
            ]
        );
        assert_eq!(record.severity, (WARN, "Warning".into()));
        assert_eq!(record.body, json!("Back-off"));
        assert_eq!(record.time, 1_795_773_600 * 1_000_000_000);
    }

    #[test]
    fn another_object_is_its_own_resource_and_body() {
        let pod = json!({"kind": "Pod", "spec": {"nodeName": "n1"},
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}}});
        let record = build(
            &json!({"kind": "deleted", "object": pod}),
            "k",
            &Extra::default(),
        );
        assert_eq!(record.resource.len(), 4, "{:?}", record.resource);
        assert_eq!(record.resource[2], ("k8s.node.name".into(), json!("n1")));
        assert_eq!(
            record.resource[3],
            ("k8s.pod.label.app".into(), json!("web"))
        );
        assert_eq!(record.body, pod);
        assert_eq!(record.severity.0, INFO);
    }

    #[test]
    fn times_are_read_to_the_nanosecond() {
        assert_eq!(nanos("1970-01-01T00:00:01Z"), Some(1_000_000_000));
        assert_eq!(nanos("1970-01-01T00:00:00.000001Z"), Some(1000));
        assert_eq!(
            nanos("2000-03-01T00:00:00Z"),
            Some(951_868_800 * 1_000_000_000)
        );
        assert_eq!(nanos("2000-03-01T00:00:00+01:00"), None);
        assert_eq!(nanos("yesterday"), None);
    }
}
