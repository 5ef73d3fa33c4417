//! Values of a handler's config taken from a Secret and from the daemon's environment
//! (`valueFrom:`), with `switchyard run` on the simulator and a receiver on loopback: the
//! handler waits for a Secret not there yet (named in `/readyz?verbose` and `/status`),
//! starts once it is created, and a rotated value reaches the next call; no value ever
//! appears in the daemon's log, `/status`, `/handlers/…` or the metrics, though the plugin
//! logs its whole config. `rbac` grants exactly that Secret. A value from a file is waited
//! for until the file is there, and a rewritten file reaches the next call.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use switchyard::sim::RequestFailure;

use crate::sinks::header;
use crate::support::process::{Process, switchyard};
use crate::support::receiver::{Received, Receiver};
use crate::support::{self, TOKEN};

const WAIT: Duration = Duration::from_secs(60);
const FIRST: &str = "first-s3cret-value";
const SECOND: &str = "rotated-s3cret-value";
const FROM_ENV: &str = "env-s3cret-value";

/// The handler `sink` (the `outbound` test plugin), its URL's path and one header from
/// the Secret `hook`, another header from the environment; it logs its config at init.
fn config(receiver: &Receiver, admin: u16) -> String {
    format!(
        "
admin:
  listen: 127.0.0.1:{admin}
  token_file: admin-token
  probes_listen: null
handlers:
  sink:
    plugin: outbound
    timeout: 2s
    backoff_base: 20ms
    qps: 0
    config:
      url: {{valueFrom: {{secretKeyRef: {{name: hook, key: url}}}}}}
      log_config: true
      headers:
        x-hook: {{valueFrom: {{secretKeyRef: {{name: hook, key: token}}}}}}
        x-env: {{valueFrom: {{env: SINK_FROM_ENV}}}}
    capabilities:
      http: [\"{allow}\"]
routes:
  - name: cms
    resource: configmaps
    handler: sink
    delivery: every
",
        allow = receiver.url("http"),
    )
}

fn secret(receiver: &Receiver, token: &str) -> Secret {
    let data = [
        ("url", format!("{}/hooks/{token}", receiver.url("http"))),
        ("token", token.to_string()),
    ];
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("hook".into()),
            ..Default::default()
        },
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

async fn admin_get(admin: u16, path: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{admin}{path}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("the admin API answers");
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The first request the receiver got for the ConfigMap `name`.
async fn request_for(receiver: &Receiver, name: &str) -> Received {
    support::eventually_sync(&format!("a request for {name}"), WAIT, || {
        receiver
            .received()
            .into_iter()
            .find(|r| r.body["name"] == name)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_is_waited_for_rotated_into_new_instances_and_never_shown() {
    let receiver = Receiver::start().await;
    let sim = support::start_sim().await;
    let client = sim.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let admin = support::free_port();
    let config_path = support::write_config(dir.path(), &config(&receiver, admin));
    let args = [
        "run",
        "--config",
        config_path.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ];
    let daemon = Process::start(&args, &[("SINK_FROM_ENV", FROM_ENV)], &[]);
    daemon
        .wait_for_line(WAIT, |l| l.contains("switchyard started"))
        .await;

    // No Secret yet: the handler waits, its events queue, readiness says for what.
    support::create_configmap(&client, "default", json!({"metadata": {"name": "a"}})).await;
    let (code, text) = support::eventually("readyz naming the Secret", WAIT, async || {
        let (code, text) = admin_get(admin, "/readyz?verbose").await;
        text.contains("handler sink").then_some((code, text))
    })
    .await;
    assert_eq!(code, 503, "{text}");
    assert!(
        text.contains(
            r#"[-]handler sink: waits for Secret hook key "token": Secret default/hook not found"#
        ),
        "{text}"
    );
    let (_, status) = admin_get(admin, "/handlers/sink").await;
    assert!(status.contains("Secret default/hook not found"), "{status}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(receiver.received().is_empty(), "{:?}", receiver.received());

    // The Secret is created: the queued event goes out with its values.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    secrets
        .create(&PostParams::default(), &secret(&receiver, FIRST))
        .await
        .unwrap();
    let first = request_for(&receiver, "a").await;
    assert_eq!(first.path, format!("/hooks/{FIRST}"));
    assert_eq!(header(&first, "x-hook"), Some(FIRST));
    assert_eq!(header(&first, "x-env"), Some(FROM_ENV));
    let (code, _) = admin_get(admin, "/readyz").await;
    assert_eq!(code, 200);

    // Rotated: the next event is handled by new instances with the new value.
    let rotated = json!({"data": {"token": ByteString(SECOND.into()),
        "url": ByteString(format!("{}/hooks/{SECOND}", receiver.url("http")).into_bytes())}});
    secrets
        .patch("hook", &PatchParams::default(), &Patch::Merge(&rotated))
        .await
        .unwrap();
    let mut n = 0;
    let rotated = support::eventually("a request with the rotated value", WAIT, async || {
        n += 1;
        let name = format!("b{n}");
        support::create_configmap(&client, "default", json!({"metadata": {"name": name}})).await;
        let request = request_for(&receiver, &name).await;
        (header(&request, "x-hook") == Some(SECOND)).then_some(request)
    })
    .await;
    assert_eq!(rotated.path, format!("/hooks/{SECOND}"));
    // Regression: the handler rebuilt for the new value showed `outbound` requests and
    // `latency.calls` counted from zero, while `processed` went on: all three go on.
    let sent = receiver.received().len() as u64;
    support::eventually("the handler's counts to go on", WAIT, async || {
        let (_, text) = admin_get(admin, "/handlers/sink").await;
        let detail: serde_json::Value = serde_json::from_str(&text).unwrap();
        let counts = (
            detail["processed"].as_u64(),
            detail["latency"]["calls"].as_u64(),
            detail["outbound"][0]["requests"].as_u64(),
        );
        (counts == (Some(sent), Some(sent), Some(sent))).then_some(())
    })
    .await;

    // Nothing the daemon shows holds a value: its log (where the plugin logged its whole
    // config), /status, the handler's detail, the metrics.
    let mut shown = vec![];
    for path in ["/status", "/handlers/sink", "/metrics"] {
        shown.push(admin_get(admin, path).await.1);
    }
    let lines = daemon.kill();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("init with config") && l.contains("<redacted>")),
        "the plugin's log of its config is in the daemon's log, redacted: {lines:#?}"
    );
    shown.extend(lines);
    for text in &shown {
        for value in [FIRST, SECOND, FROM_ENV] {
            assert!(!text.contains(value), "{value} shown in: {text}");
        }
    }
}

/// Regression: a Secret the daemon may not read (403) was asked for about once a second
/// forever (kube's watcher reset its backoff at each attempt's start), each time logging a
/// debug dump of the `Status`. It is asked for with a growing backoff, and the refusal is
/// logged once, by the API server's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_daemon_may_not_read_is_asked_for_with_a_backoff_and_logged_by_its_message() {
    let receiver = Receiver::start().await;
    let sim = support::start_sim().await;
    let tries = 1000;
    let forbidden = RequestFailure::forbidden(tries).on(&["secrets"]);
    sim.faults().fail_next_requests(forbidden).unwrap();
    let asked = || {
        tries
            - sim
                .faults()
                .status()
                .failures
                .first()
                .map_or(0, |f| f.count)
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let config_path = support::write_config(dir.path(), &config(&receiver, support::free_port()));
    let args = [
        "run",
        "--config",
        config_path.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ];
    let daemon = Process::start(&args, &[("SINK_FROM_ENV", FROM_ENV)], &[]);
    support::eventually("the Secret asked for", WAIT, async || {
        (asked() > 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let asked = asked();
    let lines = daemon.kill();
    // 0, 0.8, 2.4, 5.6 s with the default backoff; a retry a second would be 9 or more.
    assert!(
        (2..=5).contains(&asked),
        "asked {asked} times in 8 s: {lines:#?}"
    );
    let logged: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("cannot read the Secret"))
        .collect();
    assert_eq!(logged.len(), 1, "{lines:#?}");
    assert!(
        logged[0].contains("forbidden: injected fault (403)"),
        "{logged:?}"
    );
    for line in &lines {
        assert!(
            !line.contains("Api(") && !line.contains("Status {"),
            "a debug dump: {line}"
        );
    }
}

#[test]
fn rbac_grants_the_named_secrets_only() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "
handlers:
  sink:
    plugin: outbound
    config:
      a: {valueFrom: {secretKeyRef: {name: hook, key: url}}}
      b: {valueFrom: {secretKeyRef: {name: other, key: token, namespace: ops}}}
      c: {valueFrom: {env: NOT_A_SECRET}}
routes:
  - {name: cms, resource: configmaps, handler: sink}
";
    let config = support::write_config(dir.path(), yaml);
    let (code, out, err) = switchyard(&[
        "rbac",
        "--config",
        config.to_str().unwrap(),
        "--namespace",
        "switchyard",
    ]);
    assert_eq!(code, 0, "{err}");
    let role_in = |ns: &str| {
        out.split("---")
            .find(|doc| {
                doc.contains("\nkind: Role\n") && doc.contains(&format!("namespace: \"{ns}\""))
            })
            .unwrap_or_else(|| panic!("no Role in {ns}: {out}"))
            .to_string()
    };
    let own = role_in("switchyard");
    assert!(own.contains("resources: [\"secrets\"]\n    resourceNames: [\"hook\"]\n    verbs: [\"get\", \"list\", \"watch\"]"), "{own}");
    let ops = role_in("ops");
    assert!(ops.contains("resourceNames: [\"other\"]"), "{ops}");
    // No rule on Secrets without names.
    for doc in out.split("---").filter(|d| d.contains("\"secrets\"")) {
        assert!(doc.contains("resourceNames"), "{doc}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_value_is_waited_for_and_a_rewritten_file_reaches_new_instances() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    let yaml = format!(
        "
handlers:
  sink:
    plugin: builtin:webhook
    timeout: 2s
    backoff_base: 20ms
    qps: 0
    config:
      url: {url}
      headers:
        x-token: {{valueFrom: {{file: \"{token}\"}}}}
    capabilities:
      http: [\"{url}\"]
routes:
  - name: cms
    resource: configmaps
    handler: sink
    delivery: every
",
        url = receiver.url("http"),
        token = token.display(),
    );
    let t = support::TestDaemon::start(&yaml).await;
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    let waiting = support::eventually("the handler waiting for the file", WAIT, async || {
        let status = t.status_json().await;
        let waiting = status["handlers"][0]["waiting_for"].to_string();
        waiting.contains("no such file").then_some(waiting)
    })
    .await;
    assert!(
        waiting.contains(&format!("file {}", token.display())),
        "{waiting}"
    );
    assert!(receiver.received().is_empty());
    std::fs::write(&token, "first-token-value\n").unwrap();
    let first = support::eventually_sync("the first delivery", WAIT, || {
        receiver.received().into_iter().next()
    })
    .await;
    assert_eq!(header(&first, "x-token"), Some("first-token-value"));
    // The kubelet rewrites a projected token before it expires: the next call has the new one.
    // The daemon reads the file again every few seconds: changes made until then go with
    // the first token, so one more is made each half second until one has the second.
    std::fs::write(&token, "second-token-value\n").unwrap();
    let mut made = 0;
    support::eventually("a delivery with the new token", WAIT, async || {
        let rotated = receiver
            .received()
            .into_iter()
            .find(|r| header(r, "x-token") == Some("second-token-value"));
        if rotated.is_none() {
            made += 1;
            t.create_configmap(json!({"metadata": {"name": format!("b{made}")}}))
                .await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        rotated
    })
    .await;
    t.stop().await;
}
