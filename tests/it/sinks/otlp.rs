//! The otlp sink, carried in the binary (`builtin:otlp`), against a receiver on loopback
//! whose requests are decoded with OpenTelemetry's own protobuf definitions (PyPI's
//! `opentelemetry-proto`): a Warning Event becomes a log record about its Pod with the
//! semantic conventions' resource attributes, WARN severity and the Event's attributes; a
//! 503 is retried with the same `log.record.uid`; a 400 is a dead letter naming the answer;
//! with `batch:`, the changes of a batch are one request, a record each.

use std::io::Write;
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Map, Value, json};

use super::{CONFIGMAPS, WAIT, config_for, core_event, delivered, header};
use crate::support::receiver::{Mode, Receiver};
use crate::support::{self, TestDaemon, spawned};

/// `body` decoded as an `ExportLogsServiceRequest`, in OTLP's JSON form.
fn decode(body: &[u8]) -> Value {
    let python = support::python::opentelemetry_proto();
    let mut command = Command::new(python);
    command
        .arg(support::root().join("tests/it/sinks/otlp_decode.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawned::Spawned::start(&mut command, "otlp_decode.py");
    let mut stdin = child.child().stdin.take().expect("piped stdin");
    stdin.write_all(body).expect("write the request");
    drop(stdin);
    let output = child.wait_with_output();
    assert!(
        output.status.success(),
        "otlp_decode.py: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// OTLP JSON `KeyValue`s as a map of key to `AnyValue`.
fn attributes(list: &Value) -> Map<String, Value> {
    let list = list.as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|kv| (kv["key"].as_str().unwrap().to_string(), kv["value"].clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_sends_a_warning_event_as_a_log_record_about_its_pod() {
    let receiver = Receiver::start().await;
    receiver.set(Mode::Down);
    let sink = json!({"url": receiver.url("http"),
                      "resource_attributes": {"k8s.cluster.name": "test"},
                      "attributes": {"component": "{{object.source.component}}"}});
    let route = "    resource: v1/events\n    events: [added]";
    let yaml = config_for("builtin:otlp", sink, &receiver.url("http"), route);
    let t = TestDaemon::builder(&yaml).start().await;
    let events: Api<CoreEvent> = Api::namespaced(t.client(), "default");
    let made = events
        .create(
            &PostParams::default(),
            &core_event("web-1.2", "Warning", "BackOff", "Back-off restarting app"),
        )
        .await
        .unwrap();
    support::eventually_sync("two refused attempts", WAIT, || {
        (receiver.received().len() >= 2).then_some(())
    })
    .await;
    receiver.set(Mode::Ok);
    let request = delivered(&receiver, 1).await.remove(0);
    assert_eq!(request.path, "/v1/logs");
    assert_eq!(
        header(&request, "content-type"),
        Some("application/x-protobuf")
    );
    let decoded = decode(&request.raw);
    let resource_logs = &decoded["resourceLogs"][0];
    assert_eq!(
        Value::Object(attributes(&resource_logs["resource"]["attributes"])),
        json!({
            "k8s.namespace.name": {"stringValue": "default"},
            "k8s.pod.name": {"stringValue": "web-1"},
            "k8s.cluster.name": {"stringValue": "test"},
            "service.name": {"stringValue": "switchyard"},
        })
    );
    let scope_logs = &resource_logs["scopeLogs"][0];
    assert_eq!(scope_logs["scope"]["name"], "switchyard");
    let record = &scope_logs["logRecords"][0];
    assert_eq!(record["severityNumber"], "SEVERITY_NUMBER_WARN");
    assert_eq!(record["severityText"], "Warning");
    assert_eq!(
        record["body"],
        json!({"stringValue": "Back-off restarting app"})
    );
    let key = format!(
        "{}.{}.add",
        made.metadata.uid.unwrap(),
        made.metadata.resource_version.unwrap()
    );
    let attrs = attributes(&record["attributes"]);
    assert_eq!(attrs["log.record.uid"], json!({"stringValue": key}));
    assert_eq!(attrs["k8s.event.reason"], json!({"stringValue": "BackOff"}));
    assert_eq!(attrs["k8s.event.count"], json!({"intValue": "3"}));
    assert_eq!(attrs["component"], json!({"stringValue": "kubelet"}));
    assert!(record["timeUnixNano"].as_str().is_some(), "{record:#}");
    assert!(
        record["observedTimeUnixNano"].as_str().is_some(),
        "{record:#}"
    );
    // The refused attempts carried the same record key.
    for attempt in receiver.received() {
        let decoded = decode(&attempt.raw);
        let record = &decoded["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
        assert_eq!(
            attributes(&record["attributes"])["log.record.uid"],
            attrs["log.record.uid"]
        );
    }

    receiver.set(Mode::Reject);
    events
        .create(
            &PostParams::default(),
            &core_event("web-1.3", "Normal", "Pulled", "ok"),
        )
        .await
        .unwrap();
    let letter = support::eventually("a dead letter", WAIT, async || {
        let (_, body) = t.get("/handlers/sink/dead-letters").await;
        body["dead_letters"].as_array()?.first().cloned()
    })
    .await;
    assert_eq!(
        letter["last_error"], "permanent: the receiver answered 400: invalid_payload",
        "{letter:#}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_with_batch_sends_the_changes_ready_in_one_request_a_record_each() {
    const COUNT: usize = 6;
    // The ConfigMaps are there before the daemon starts: its first list makes every change
    // ready at once, so one batch takes them all.
    let sim = support::start_sim().await;
    let client = sim.client().unwrap();
    let mut keys = std::collections::BTreeSet::new();
    for i in 0..COUNT {
        let made = support::create_configmap(
            &client,
            "default",
            json!({"metadata": {"name": format!("c{i}")}}),
        )
        .await;
        let meta = made.metadata;
        keys.insert(format!(
            "{}.{}.add",
            meta.uid.unwrap(),
            meta.resource_version.unwrap()
        ));
    }
    let receiver = Receiver::start().await;
    let sink = json!({"url": receiver.url("http")});
    let yaml = config_for("builtin:otlp", sink, &receiver.url("http"), CONFIGMAPS).replace(
        "    instance: reuse\n",
        "    instance: reuse\n    concurrency: 1\n    batch: {max_events: 100, max_wait: 1s}\n",
    );
    let t = TestDaemon::builder(&yaml).sim(sim).start().await;
    let request = delivered(&receiver, 1).await.remove(0);
    let decoded = decode(&request.raw);
    // A ResourceLogs per object, each with its one record.
    let resources = decoded["resourceLogs"].as_array().unwrap();
    assert_eq!(resources.len(), COUNT, "{decoded:#}");
    let mut uids = std::collections::BTreeSet::new();
    for resource_logs in resources {
        let resource = attributes(&resource_logs["resource"]["attributes"]);
        let records = resource_logs["scopeLogs"][0]["logRecords"]
            .as_array()
            .unwrap();
        assert_eq!(records.len(), 1, "{resource_logs:#}");
        let body = attributes(&records[0]["body"]["kvlistValue"]["values"]);
        assert_eq!(
            resource["k8s.configmap.name"],
            body["metadata"]["kvlistValue"]["values"]
                .as_array()
                .unwrap()
                .iter()
                .find(|kv| kv["key"] == "name")
                .unwrap()["value"]
        );
        let uid = &attributes(&records[0]["attributes"])["log.record.uid"];
        uids.insert(uid["stringValue"].as_str().unwrap().to_string());
    }
    assert_eq!(uids, keys);
    support::eventually("every change done", WAIT, async || {
        let status = t.status_json().await;
        (status["handlers"][0]["processed"] == COUNT).then_some(())
    })
    .await;
    assert_eq!(receiver.received().len(), 1, "one request for the batch");
    t.stop().await;
}
