//! Plugins' outbound HTTP against real receivers on loopback: every event arrives through
//! a receiver that answers 503, resets connections and stalls past the deadline; a
//! destination off the allow-list, a name resolving to loopback and a metadata address are
//! refused before any connection; TLS with a test CA.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use switchyard::sim::tls::SimTls;

use crate::support::receiver::{Mode, Receiver};
use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);

/// A handler `notify` running the `outbound` test plugin, posting to `url`, allowed to
/// reach `allow`.
fn config(url: &str, allow: &[&str]) -> String {
    format!(
        "
handlers:
  notify:
    plugin: outbound
    timeout: 1s
    max_retries: 1000
    backoff_base: 20ms
    backoff_cap: 300ms
    qps: 0
    quarantine_after: 0
    config: {{url: \"{url}\"}}
    capabilities:
      http: {allow:?}
routes:
  - name: cms
    resource: configmaps
    handler: notify
    delivery: every
"
    )
}

/// Polls `check` until it is `Ok`, or panics after [`WAIT`] with what it last said.
async fn wait_for<T>(what: &str, mut check: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() > deadline => {
                panic!("timed out after {WAIT:?} waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn last_errors(t: &TestDaemon) -> Vec<String> {
    let (_, detail) = t.get("/handlers/notify").await;
    detail["last_errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["error"].as_str().map(str::to_string))
        .collect()
}

async fn wait_received(receiver: &Receiver, mode: Mode, count: usize) {
    support::eventually_sync(&format!("{count} requests met with {mode:?}"), WAIT, || {
        (receiver
            .received()
            .iter()
            .filter(|r| r.mode == mode)
            .count()
            >= count)
            .then_some(())
    })
    .await;
}

async fn update(t: &TestDaemon, name: &str, value: &str) -> String {
    let patched: ConfigMap = t
        .configmaps("default")
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": value}})),
        )
        .await
        .unwrap();
    patched.metadata.resource_version.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_arrives_in_order_through_503s_resets_and_a_stalled_receiver() {
    let receiver = Receiver::start().await;
    receiver.set(Mode::Unavailable);
    let url = format!("{}/events", receiver.url("http"));
    let t = TestDaemon::builder(&config(&url, &[&receiver.url("http")]))
        .plugin_file("outbound", "outbound")
        .start()
        .await;
    let mut made: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for name in ["a", "b", "c"] {
        let cm = t
            .create_configmap(json!({"metadata": {"name": name}}))
            .await;
        let rv = cm.metadata.resource_version.unwrap();
        made.entry(name.into())
            .or_default()
            .push(rv.parse().unwrap());
    }
    wait_received(&receiver, Mode::Unavailable, 6).await;
    let errors = last_errors(&t).await;
    assert!(
        errors
            .iter()
            .any(|e| e.contains("the receiver answered 503: maintenance")),
        "{errors:#?}"
    );
    receiver.set(Mode::Reset);
    for name in ["a", "b"] {
        let rv = update(&t, name, "1").await;
        made.entry(name.into())
            .or_default()
            .push(rv.parse().unwrap());
    }
    wait_received(&receiver, Mode::Reset, 4).await;
    let errors = last_errors(&t).await;
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("connection failed: ConnectionTerminated")),
        "{errors:#?}"
    );
    // A receiver that reads the request and never answers: each call is cut at its
    // 1 s deadline and retried.
    receiver.set(Mode::Stall);
    let rv = update(&t, "c", "1").await;
    made.entry("c".into())
        .or_default()
        .push(rv.parse().unwrap());
    wait_received(&receiver, Mode::Stall, 3).await;
    receiver.set(Mode::Ok);
    let delivered = support::eventually("every change delivered", WAIT, async || {
        let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for r in receiver.delivered() {
            let name = r.body["name"].as_str().unwrap().to_string();
            let rv: u64 = r.body["resourceVersion"].as_str().unwrap().parse().unwrap();
            seen.entry(name).or_default().push(rv);
        }
        let all = made.iter().all(|(name, rvs)| {
            rvs.iter()
                .all(|rv| seen.get(name).is_some_and(|s| s.contains(rv)))
        });
        all.then_some(seen)
    })
    .await;
    for (name, rvs) in &delivered {
        assert!(
            rvs.windows(2).all(|w| w[0] <= w[1]),
            "{name}'s changes arrived out of order: {rvs:?}"
        );
    }
    // The retries carried the attempt number, and the credential header went through.
    let received = receiver.received();
    assert!(received.iter().any(|r| {
        r.headers
            .iter()
            .any(|(n, v)| n == "x-attempt" && v.parse::<u32>().unwrap() > 2)
    }));
    assert!(received.iter().all(|r| {
        r.headers
            .iter()
            .any(|(n, v)| n == "authorization" && v == "Bearer test-token")
    }));
    // Every request carries a traceparent: one trace id per change, the same on each of
    // its retries, and a span id per request.
    let mut traces: BTreeMap<(String, String), std::collections::BTreeSet<String>> =
        BTreeMap::new();
    let mut spans = std::collections::BTreeSet::new();
    for r in &received {
        let parent = r
            .headers
            .iter()
            .find(|(n, _)| n == "traceparent")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no traceparent: {r:?}"));
        let parts: Vec<&str> = parent.split('-').collect();
        assert_eq!(
            (
                parts.len(),
                parts[0],
                parts[1].len(),
                parts[2].len(),
                parts[3]
            ),
            (4, "00", 32, 16, "01"),
            "{parent}"
        );
        let change = (
            r.body["name"].as_str().unwrap().to_string(),
            r.body["resourceVersion"].as_str().unwrap().to_string(),
        );
        traces
            .entry(change)
            .or_default()
            .insert(parts[1].to_string());
        assert!(
            spans.insert(parts[2].to_string()),
            "span id reused: {parent}"
        );
    }
    let ids: std::collections::BTreeSet<_> = traces.values().flatten().collect();
    assert_eq!(ids.len(), traces.len(), "{traces:#?}");
    assert!(traces.values().all(|ids| ids.len() == 1), "{traces:#?}");
    let (_, status) = t.get("/status").await;
    assert_eq!(status["handlers"][0]["dead_letters"], 0, "{status:#}");
    let metrics = t.metrics_text().await;
    let host = format!("host=\"http://127.0.0.1:{}\"", receiver.port());
    for code in ["503", "200", "timeout"] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("switchyard_outbound_requests_total")
                    && l.contains(&host)
                    && l.contains(&format!("code=\"{code}\""))),
            "no outbound requests counted with code {code}:\n{metrics}"
        );
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_off_the_allow_list_never_sees_a_connection() {
    let allowed = Receiver::start().await;
    let other = Receiver::start().await;
    let url = format!("{}/hook", other.url("http"));
    let t = TestDaemon::builder(&config(&url, &[&allowed.url("http")]))
        .plugin_file("outbound", "outbound")
        .start()
        .await;
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    let errors = support::eventually("two refused calls", WAIT, async || {
        let errors = last_errors(&t).await;
        (errors.len() >= 2).then_some(errors)
    })
    .await;
    assert!(
        errors[0].starts_with("request refused: HttpRequestDenied"),
        "{errors:#?}"
    );
    assert_eq!(other.connections(), 0, "the refused receiver was reached");
    assert_eq!(allowed.connections(), 0);
    let metrics = t.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("switchyard_outbound_refused_total")
                && l.contains("reason=\"not_allowed\"")),
        "{metrics}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_behind_a_name_and_the_metadata_address_are_refused_after_resolution() {
    let receiver = Receiver::start().await;
    for (url, reason) in [
        // Allowed by name, but the name resolves to loopback, which no entry names.
        (
            format!("http://localhost:{}/hook", receiver.port()),
            "loopback",
        ),
        // Every IPv4 literal is allowed, but not the link-local metadata range.
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "link-local",
        ),
    ] {
        let allow = [
            format!("http://localhost:{}", receiver.port()),
            "http://0.0.0.0/0:*".to_string(),
        ];
        let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
        let t = TestDaemon::builder(&config(&url, &allow))
            .plugin_file("outbound", "outbound")
            .start()
            .await;
        t.create_configmap(json!({"metadata": {"name": "a"}})).await;
        let errors = support::eventually("a refused call", WAIT, async || {
            let errors = last_errors(&t).await;
            (!errors.is_empty()).then_some(errors)
        })
        .await;
        assert!(
            errors[0].contains("DestinationIpProhibited"),
            "{url}: {errors:#?}"
        );
        let metrics = t.metrics_text().await;
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("switchyard_outbound_refused_total")
                    && l.contains(&format!("reason=\"{reason}\""))),
            "{url}: {metrics}"
        );
        t.stop().await;
    }
    assert_eq!(receiver.connections(), 0, "a refused address was reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_a_receiver_with_a_private_ca_needs_its_ca_bundle() {
    let ca = SimTls::generate().unwrap();
    let receiver = Receiver::start_with(Some(ca.acceptor())).await;
    let url = format!("{}/hook", receiver.url("https"));
    let plain = config(&url, &[&receiver.url("https")]);
    let t = TestDaemon::builder(&plain)
        .plugin_file("outbound", "outbound")
        .start()
        .await;
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    let errors = support::eventually("a refused certificate", WAIT, async || {
        let errors = last_errors(&t).await;
        (!errors.is_empty()).then_some(errors)
    })
    .await;
    assert!(errors[0].contains("TlsCertificateError"), "{errors:#?}");
    assert!(receiver.received().is_empty());
    let bundle = t.dir().join("ca.pem");
    std::fs::write(&bundle, ca.ca_pem()).unwrap();
    t.write_config(&plain.replace(
        "    capabilities:",
        &format!(
            "    outbound: {{ca_bundle: {}}}\n    capabilities:",
            bundle.display()
        ),
    ));
    let delivered = support::eventually("delivery over TLS", WAIT, async || {
        let d = receiver.delivered();
        (!d.is_empty()).then_some(d)
    })
    .await;
    assert_eq!(delivered[0].body["name"], Value::from("a"));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_fetch_and_the_python_helper_deliver_and_a_refusal_is_an_error_not_a_trap() {
    let receiver = Receiver::start().await;
    let base = receiver.url("http");
    let handler = |name: &str, plugin: &str, url: &str| {
        format!(
            "
  {name}:
    plugin: {plugin}
    timeout: 5s
    max_retries: 1000
    backoff_base: 50ms
    backoff_cap: 500ms
    qps: 0
    quarantine_after: 0
    config: {{url: \"{url}\"}}
    capabilities:
      http: [\"{base}\"]"
        )
    };
    let mut yaml = String::from("handlers:");
    let mut routes = String::from("routes:");
    for (name, plugin, url) in [
        ("js", "notify-js", format!("{base}/js")),
        ("py", "notify-py", format!("{base}/py")),
        (
            "js-refused",
            "notify-js",
            "http://127.0.0.2:9/js".to_string(),
        ),
        (
            "py-refused",
            "notify-py",
            "http://127.0.0.2:9/py".to_string(),
        ),
    ] {
        yaml.push_str(&handler(name, plugin, &url));
        routes.push_str(&format!(
            "\n  - {{name: {name}, resource: configmaps, handler: {name}}}"
        ));
    }
    let t = TestDaemon::builder(&format!("{yaml}\n{routes}\n"))
        .plugin_file("notify-js", "notify-js")
        .plugin_file("notify-py", "notify-py")
        .start()
        .await;
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    support::eventually("deliveries from both languages", WAIT, async || {
        let paths: Vec<String> = receiver.delivered().into_iter().map(|r| r.path).collect();
        (paths.contains(&"/js".to_string()) && paths.contains(&"/py".to_string())).then_some(())
    })
    .await;
    for r in receiver.delivered() {
        assert_eq!(r.body["name"], Value::from("a"), "{r:?}");
        assert_eq!(r.body["kind"], Value::from("added"), "{r:?}");
    }
    for name in ["js-refused", "py-refused"] {
        // `fetch` reports every network failure as one `NetworkError`; Python's helper
        // names the host's error code.
        let expected = if name.starts_with("js") {
            "TypeError: NetworkError when attempting to fetch resource"
        } else {
            "denied: HttpRequestDenied"
        };
        // Until one attempt's error is the refusal: on a loaded machine an attempt may also
        // run out of its `timeout` first (a refusal that trapped would never be an error).
        support::eventually("a refused request's error", WAIT, async || {
            let (_, detail) = t.get(&format!("/handlers/{name}")).await;
            let errors: Vec<String> = detail["last_errors"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["error"].as_str().map(str::to_string))
                .collect();
            errors.iter().any(|e| e.starts_with(expected)).then_some(())
        })
        .await;
        let metrics = t.metrics_text().await;
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("switchyard_outbound_refused_total")
                    && l.contains(&format!("handler=\"{name}\""))
                    && l.contains("reason=\"not_allowed\"")),
            "{name}: {metrics}"
        );
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_captures_requests_redacted_and_never_sends_them() {
    let receiver = Receiver::start().await;
    let url = format!("{}/events", receiver.url("http"));
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(dir.path(), &config(&url, &[&receiver.url("http")]));
    let events = dir.path().join("events.jsonl");
    let event = json!({"route": "cms", "handler": "notify", "kind": "added", "object": {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "default", "resourceVersion": "12"}}});
    std::fs::write(&events, event.to_string()).unwrap();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        crate::support::process::switchyard(&[
            "replay",
            "--config",
            config.to_str().unwrap(),
            "--events",
            events.to_str().unwrap(),
            "--json",
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let request = &report["requests"][0];
    assert_eq!(request["method"], "POST", "{report:#}");
    assert_eq!(request["url"], Value::from(url.as_str()), "{report:#}");
    let headers = request["headers"].as_array().unwrap();
    assert!(
        headers.contains(&json!(["authorization", "<redacted>"])),
        "{report:#}"
    );
    let body: Value = serde_json::from_str(request["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["resourceVersion"], "12");
    assert_eq!(receiver.connections(), 0, "replay sent a request");
    assert!(!out.contains("test-token"), "a credential leaked: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_the_receiver_is_down_with_state_dir_everything_arrives_after_a_restart() {
    let receiver = Receiver::start().await;
    receiver.set(Mode::Unavailable);
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let url = format!("{}/events", receiver.url("http"));
    support::write_config(
        dir.path(),
        &format!(
            "state_dir: state\nadmin:\n  listen: 127.0.0.1:0\n  probes_listen: null\n{}",
            config(&url, &[&receiver.url("http")])
        ),
    );
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(sim.client().unwrap(), "default");
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..12 {
        let cm = support::create_configmap(
            &sim.client().unwrap(),
            "default",
            json!({"metadata": {"name": format!("cm-{i}")}}),
        )
        .await;
        latest.insert(format!("cm-{i}"), cm.metadata.resource_version.unwrap());
    }
    let first = crate::state::Child::start(dir.path(), &kubeconfig).await;
    // Every object was tried at least once (and so committed before the call) while the
    // receiver answered 503.
    wait_for("every object tried", async || {
        let tried: std::collections::BTreeSet<String> = receiver
            .received()
            .iter()
            .filter_map(|r| r.body["name"].as_str().map(str::to_string))
            .collect();
        if tried.len() == 12 {
            Ok(())
        } else {
            Err(format!(
                "tried {tried:?}; status {:#}",
                first.status().await
            ))
        }
    })
    .await;
    first.process.kill();
    for i in 0..3 {
        api.delete(&format!("cm-{i}"), &Default::default())
            .await
            .unwrap();
        latest.remove(&format!("cm-{i}"));
    }
    for i in 3..5 {
        let patched = api
            .patch(
                &format!("cm-{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"v": "2"}})),
            )
            .await
            .unwrap();
        latest.insert(
            format!("cm-{i}"),
            patched.metadata.resource_version.unwrap(),
        );
    }
    receiver.set(Mode::Ok);
    let second = crate::state::Child::start(dir.path(), &kubeconfig).await;
    wait_for(
        "every object's latest state and every deletion delivered",
        async || {
            let delivered = receiver.delivered();
            let has = |name: &str, kind: &str, rv: Option<&str>| {
                delivered.iter().any(|r| {
                    r.body["name"] == name
                        && r.body["kind"] == kind
                        && rv.is_none_or(|rv| r.body["resourceVersion"] == rv)
                })
            };
            let alive = latest
                .iter()
                .all(|(name, rv)| has(name, "added", Some(rv)) || has(name, "updated", Some(rv)));
            let deleted = (0..3).all(|i| has(&format!("cm-{i}"), "deleted", None));
            if alive && deleted {
                return Ok(());
            }
            let seen: Vec<String> = delivered
                .iter()
                .map(|r| {
                    format!(
                        "{} {} {}",
                        r.body["kind"], r.body["name"], r.body["resourceVersion"]
                    )
                })
                .collect();
            Err(format!(
                "wanted {latest:?} alive and cm-0..2 deleted; delivered {seen:?}; status {:#}",
                second.status().await
            ))
        },
    )
    .await;
    second.process.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_through_the_proxy_the_environment_names() {
    // The receiver plays the proxy: a plain-HTTP proxy gets the absolute URL in the request
    // line. The destination's name resolves nowhere; only the proxy can reach it.
    let proxy = Receiver::start().await;
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let url = "http://receiver.switchyard.invalid:8080/events";
    support::write_config(
        dir.path(),
        &format!(
            "admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\n{}",
            config(url, &["http://receiver.switchyard.invalid:8080"])
        ),
    );
    support::create_configmap(
        &sim.client().unwrap(),
        "default",
        json!({"metadata": {"name": "a"}}),
    )
    .await;
    let config_path = dir.path().join("switchyard.yaml");
    let args = [
        "run",
        "--config",
        config_path.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ];
    let proxy_url = proxy.url("http");
    let daemon = crate::support::process::Process::start(
        &args,
        &[
            ("HTTP_PROXY", proxy_url.as_str()),
            ("NO_PROXY", "127.0.0.1,localhost"),
        ],
        &[
            "http_proxy",
            "https_proxy",
            "HTTPS_PROXY",
            "no_proxy",
            "ALL_PROXY",
            "all_proxy",
        ],
    );
    let delivered = support::eventually_sync("a delivery through the proxy", WAIT, || {
        let d = proxy.delivered();
        (!d.is_empty()).then_some(d)
    })
    .await;
    assert_eq!(delivered[0].path, url, "{delivered:?}");
    assert_eq!(delivered[0].body["name"], "a");
    daemon.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadows_requests_are_compared_and_never_sent() {
    let receiver = Receiver::start().await;
    let url = format!("{}/events", receiver.url("http"));
    let yaml = config(&url, &[&receiver.url("http")]).replace(
        "    plugin: outbound\n",
        "    plugin: outbound\n    shadow: outbound-next\n",
    );
    let t = TestDaemon::builder(&yaml)
        .plugin_file("outbound", "outbound")
        .plugin_file("outbound-next", "outbound")
        .start()
        .await;
    for name in ["a", "b"] {
        t.create_configmap(json!({"metadata": {"name": name}}))
            .await;
    }
    let view = wait_for("two events compared", async || {
        let (_, view) = t.get("/handlers/notify/shadow").await;
        if view["compared"] == 2 {
            Ok(view)
        } else {
            Err(format!("{view:#}"))
        }
    })
    .await;
    assert_eq!(view["same"], 2, "{view:#}");
    assert_eq!(view["differing_requests"], 0, "{view:#}");
    // Only the primary's requests reached the receiver.
    assert_eq!(receiver.received().len(), 2, "{:?}", receiver.received());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4xx_the_plugin_calls_permanent_is_a_dead_letter_at_once_with_the_answer_in_it() {
    let receiver = Receiver::start().await;
    receiver.set(Mode::Reject);
    let url = format!("{}/events", receiver.url("http"));
    let t = TestDaemon::builder(&config(&url, &[&receiver.url("http")]))
        .plugin_file("outbound", "outbound")
        .start()
        .await;
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    let letters = wait_for("a dead letter", async || {
        let (_, letters) = t.get("/handlers/notify/dead-letters").await;
        match letters["dead_letters"].as_array() {
            Some(list) if !list.is_empty() => Ok(list[0].clone()),
            _ => Err(format!("{letters:#}")),
        }
    })
    .await;
    assert_eq!(letters["attempts"], 1, "{letters:#}");
    assert_eq!(
        letters["last_error"], "permanent: the receiver answered 400: invalid_payload",
        "{letters:#}"
    );
    assert_eq!(
        receiver.received().len(),
        1,
        "a permanent failure was retried"
    );
    t.stop().await;
}
