//! Traces over OTLP/HTTP, received by a collector on loopback that decodes each export with
//! OpenTelemetry's own protobuf definitions (`opentelemetry-proto` from PyPI, `otlp.py`
//! beside this file): a traced event's spans, their parents and attributes, the outbound
//! request's `traceparent` naming its span; none with a sample ratio of 0, and none
//! without `tracing:` whatever the environment says.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::process::Process;
use crate::support::receiver::{Mode, Receiver};
use crate::support::sim::Lines;
use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);

/// A collector on loopback: every export request and span it decoded, as JSON lines.
struct Collector {
    lines: Lines,
    port: u16,
}

impl Collector {
    fn start() -> Self {
        let python = support::python::opentelemetry_proto();
        let script = support::root().join("tests/it/traces/otlp.py");
        let mut lines = Lines::start(Command::new(python).arg(script), "otlp.py");
        let first = lines.wait_for(WAIT, |l| l.contains("\"port\""));
        let port = serde_json::from_str::<Value>(&first).unwrap()["port"]
            .as_u64()
            .unwrap() as u16;
        Self { lines, port }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Waits for the `event` span of `object` that ended with `outcome`, and returns it
    /// with every span and request line read so far.
    fn event(&mut self, object: &str, outcome: &str) -> (Value, Vec<Value>) {
        let line = self.lines.wait_for(WAIT, |l| {
            let v: Value = serde_json::from_str(l).unwrap_or_default();
            v["span"] == "event"
                && v["attributes"]["switchyard.object"] == object
                && v["attributes"]["switchyard.outcome"] == outcome
        });
        let all = self
            .lines
            .seen()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (serde_json::from_str(&line).unwrap(), all)
    }

    /// The export requests read within `period`.
    fn requests_within(&mut self, period: Duration) -> Vec<String> {
        self.lines
            .read_for(period)
            .iter()
            .filter(|l| l.contains("\"request\""))
            .cloned()
            .collect()
    }
}

/// A handler `notify` posting each ConfigMap to `receiver` and marking it with a patch,
/// with `tracing` (a YAML mapping, or nothing) as the config's section.
fn config(tracing: &str, receiver: &Receiver) -> String {
    let allow = receiver.url("http");
    let url = format!("{allow}/events");
    format!(
        "
{tracing}
handlers:
  notify:
    plugin: outbound
    timeout: 5s
    max_retries: 0
    config: {{url: \"{url}\", mark: configmaps}}
    capabilities:
      http: [\"{allow}\"]
      configmaps: [patch]
routes:
  - name: cms
    resource: configmaps
    handler: notify
"
    )
}

/// The daemon of [`config`] on the simulator.
async fn start(tracing: &str, receiver: &Receiver) -> TestDaemon {
    TestDaemon::builder(&config(tracing, receiver))
        .plugin_file("outbound", "outbound")
        .start()
        .await
}

/// The span named `name` whose parent is `parent`, in `trace`.
fn child<'a>(spans: &'a [Value], name: &str, parent: &Value) -> &'a Value {
    spans
        .iter()
        .find(|s| s["span"] == name && s["parent_span_id"] == parent["span_id"])
        .unwrap_or_else(|| panic!("no {name} span under {parent}: {spans:#?}"))
}

/// The `traceparent` of the request the receiver got for the ConfigMap `name`'s version
/// `rv`.
fn traceparent(receiver: &Receiver, name: &str, rv: &str) -> String {
    let request = receiver
        .received()
        .into_iter()
        .find(|r| r.body["name"] == name && r.body["resourceVersion"] == rv)
        .unwrap_or_else(|| panic!("no request for {name} at {rv}"));
    request
        .headers
        .iter()
        .find(|(n, _)| n == "traceparent")
        .map(|(_, v)| v.clone())
        .expect("a traceparent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_is_one_trace_from_the_route_to_its_write_and_request() {
    let mut collector = Collector::start();
    let receiver = Receiver::start().await;
    let tracing = format!(
        "tracing:\n  otlp_endpoint: {}\n  service_name: switchyard-test\n  headers: {{x-collector-key: k}}",
        collector.endpoint()
    );
    let t = start(&tracing, &receiver).await;
    let created = t
        .create_configmap(json!({"metadata": {"name": "traced"}}))
        .await;
    let (uid, rv) = (
        created.metadata.uid.clone().unwrap(),
        created.metadata.resource_version.clone().unwrap(),
    );
    let (event, lines) = tokio::task::block_in_place(|| collector.event("default/traced", "done"));
    let spans: Vec<Value> = lines
        .iter()
        .filter(|l| l["span"].is_string())
        .cloned()
        .collect();

    // The export: OTLP/HTTP protobuf at /v1/traces, with the configured header and name.
    let request = lines.iter().find(|l| l["request"].is_string()).unwrap();
    assert_eq!(request["request"], "/v1/traces");
    assert_eq!(request["content_type"], "application/x-protobuf");
    assert_eq!(request["headers"]["x-collector-key"], "k");
    assert_eq!(event["resource"]["service.name"], "switchyard-test");

    // The event: a root span with what it was about and how it ended.
    assert_eq!(event["parent_span_id"], "", "{event}");
    let attributes = &event["attributes"];
    for (key, value) in [
        ("switchyard.handler", "notify"),
        ("switchyard.route", "cms"),
        ("switchyard.change", "added"),
        ("switchyard.object", "default/traced"),
        ("k8s.namespace.name", "default"),
        ("k8s.object.name", "traced"),
        ("k8s.object.kind", "ConfigMap"),
        ("k8s.object.uid", uid.as_str()),
        ("k8s.object.resource_version", rv.as_str()),
        ("switchyard.outcome", "done"),
    ] {
        assert_eq!(attributes[key], value, "{key} in {event}");
    }
    // Taken in, routed, queued and called, each under the event, in its trace, in that
    // order.
    let informer = child(&spans, "informer", &event);
    let route = child(&spans, "route", &event);
    let queue = child(&spans, "queue", &event);
    let call = child(&spans, "plugin.call", &event);
    for span in [informer, route, queue, call] {
        assert_eq!(span["trace_id"], event["trace_id"]);
    }
    let time = |s: &Value, at: &str| s[at].as_u64().unwrap();
    assert_eq!(time(&event, "start"), time(informer, "start"));
    assert!(time(informer, "end") <= time(route, "start"));
    assert!(time(route, "end") <= time(queue, "end"));
    assert!(time(queue, "end") <= time(call, "start"));
    assert!(time(call, "end") <= time(&event, "end"));
    assert_eq!(call["attributes"]["switchyard.outcome"], "done");
    assert_eq!(call["attributes"]["switchyard.attempt"], 1);

    // Inside the call: the outbound request, then the write, each a child of the call.
    let post = child(&spans, "POST", call);
    assert_eq!(post["attributes"]["http.request.method"], "POST");
    assert_eq!(post["attributes"]["server.address"], "127.0.0.1");
    assert_eq!(post["attributes"]["server.port"], receiver.port());
    assert_eq!(post["attributes"]["http.response.status_code"], 200);
    let write = child(&spans, "merge-patch configmaps", call);
    assert_eq!(write["attributes"]["switchyard.write.verb"], "merge-patch");
    assert_eq!(
        write["attributes"]["switchyard.write.resource"],
        "configmaps"
    );
    assert_eq!(write["attributes"]["switchyard.object"], "default/traced");
    assert_eq!(write["attributes"]["http.response.status_code"], 200);
    assert!(time(post, "end") <= time(write, "start"));

    // The request went out naming its own span as the parent, in the event's trace.
    assert_eq!(
        traceparent(&receiver, "traced", &rv),
        format!(
            "00-{}-{}-01",
            event["trace_id"].as_str().unwrap(),
            post["span_id"].as_str().unwrap()
        )
    );

    // A refused delivery ends its call and its event as dead letters, with the error.
    receiver.set(Mode::Reject);
    t.create_configmap(json!({"metadata": {"name": "refused"}}))
        .await;
    let (event, lines) =
        tokio::task::block_in_place(|| collector.event("default/refused", "dead_letter"));
    let spans: Vec<Value> = lines
        .iter()
        .filter(|l| l["span"].is_string())
        .cloned()
        .collect();
    let call = child(&spans, "plugin.call", &event);
    assert_eq!(call["attributes"]["switchyard.outcome"], "dead_letter");
    // Status code 2: error.
    assert_eq!(
        (event["status"].as_u64(), call["status"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(
        child(&spans, "POST", call)["attributes"]["http.response.status_code"],
        400
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_ratio_of_zero_exports_nothing_and_requests_say_not_sampled() {
    let mut collector = Collector::start();
    let receiver = Receiver::start().await;
    let tracing = format!(
        "tracing:\n  otlp_endpoint: {}\n  sample_ratio: 0",
        collector.endpoint()
    );
    let t = start(&tracing, &receiver).await;
    let created = t
        .create_configmap(json!({"metadata": {"name": "unsampled"}}))
        .await;
    let rv = created.metadata.resource_version.unwrap();
    support::eventually("the delivery", WAIT, async || {
        receiver
            .received()
            .iter()
            .any(|r| r.body["name"] == "unsampled")
            .then_some(())
    })
    .await;
    let parent = traceparent(&receiver, "unsampled", &rv);
    assert!(
        parent.starts_with("00-") && parent.ends_with("-00"),
        "{parent}"
    );
    // Stopping sends whatever was batched.
    t.stop().await;
    let requests =
        tokio::task::block_in_place(|| collector.requests_within(Duration::from_secs(2)));
    assert!(requests.is_empty(), "{requests:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_in_the_config_nothing_is_exported_whatever_the_environment() {
    let mut collector = Collector::start();
    let receiver = Receiver::start().await;
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let yaml = format!(
        "admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\nplugins_dir: {}\n{}",
        support::plugins_dir().display(),
        config("", &receiver)
    );
    let config = support::write_config(dir.path(), &yaml);
    let endpoint = collector.endpoint();
    let traces_endpoint = format!("{endpoint}/v1/traces");
    let args = ["run", "--config", config.to_str().unwrap()];
    let kube = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let daemon = Process::start(
        &[&args[..], &kube[..]].concat(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                traces_endpoint.as_str(),
            ),
        ],
        &[],
    );
    let client = sim.client().unwrap();
    support::create_configmap(
        &client,
        "default",
        json!({"metadata": {"name": "untraced"}}),
    )
    .await;
    support::eventually("the delivery", WAIT, async || {
        receiver
            .received()
            .iter()
            .any(|r| r.body["name"] == "untraced")
            .then_some(())
    })
    .await;
    daemon.terminate(WAIT);
    let requests =
        tokio::task::block_in_place(|| collector.requests_within(Duration::from_secs(2)));
    assert!(requests.is_empty(), "{requests:?}");
    sim.stop().await;
}

/// The `event` span of `object` that ended with `outcome`, and every span read so far; the
/// test's task sleeps between short reads, so the daemon on the same runtime goes on
/// exporting while it waits.
async fn traced(collector: &mut Collector, object: &str, outcome: &str) -> (Value, Vec<Value>) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        tokio::task::block_in_place(|| collector.lines.read_for(Duration::from_millis(50)));
        let spans: Vec<Value> = collector
            .lines
            .seen()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["span"].is_string())
            .collect();
        let event = spans.iter().find(|v| {
            v["span"] == "event"
                && v["attributes"]["switchyard.object"] == object
                && v["attributes"]["switchyard.outcome"] == outcome
        });
        if let Some(event) = event {
            return (event.clone(), spans);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {outcome} event span of {object}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_of_a_batch_is_traced_to_its_own_outcome() {
    let mut collector = Collector::start();
    let receiver = Receiver::start().await;
    let allow = receiver.url("http");
    let yaml = format!(
        "
tracing:
  otlp_endpoint: {}
handlers:
  sink:
    plugin: builtin:webhook
    max_retries: 0
    batch: {{max_events: 10, max_wait: 300ms}}
    config: {{url: \"{allow}/events\", batch_format: json_array}}
    capabilities:
      http: [\"{allow}\"]
routes:
  - name: cms
    resource: configmaps
    handler: sink
",
        collector.endpoint()
    );
    let t = TestDaemon::start(&yaml).await;
    for name in ["b1", "b2", "b3"] {
        t.create_configmap(json!({"metadata": {"name": name}}))
            .await;
    }
    for name in ["b1", "b2", "b3"] {
        let (event, spans) = traced(&mut collector, &format!("default/{name}"), "done").await;
        child(&spans, "queue", &event);
        let call = child(&spans, "plugin.call", &event);
        assert_eq!(call["attributes"]["switchyard.outcome"], "done");
        assert_eq!(call["attributes"]["switchyard.attempt"], 1);
    }
    // A refused batch ends each of its events as a dead letter.
    receiver.set(Mode::Reject);
    t.create_configmap(json!({"metadata": {"name": "b4"}}))
        .await;
    let (event, spans) = traced(&mut collector, "default/b4", "dead_letter").await;
    let call = child(&spans, "plugin.call", &event);
    assert_eq!(call["attributes"]["switchyard.outcome"], "dead_letter");
    t.stop().await;
}
