//! The secret-leak test: Secret values with a newline, quotes, backslashes and characters a
//! URL percent-encodes reach a webhook sink (URL and header), its shadow and the tests'
//! outbound plugin (which logs its config as JSON); a receiver echoes each request in a 400
//! and then a 503 body, which land in errors and dead letters; then every output the daemon
//! has (its log at TRACE, `/status`, `/handlers/…`, dead letters, the shadow comparison,
//! `/metrics`, the status page, `record`'s file and output, `replay`'s output) is searched
//! for any fragment of 8 characters of any value.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use crate::support::process::{Process, switchyard};
use crate::support::receiver::{Mode, Receiver};
use crate::support::{self, TOKEN};

const WAIT: Duration = Duration::from_secs(60);

/// The webhook URL's path and query (after the receiver's origin, which the allow-list
/// names anyway), ending in a newline as `kubectl create secret --from-file` leaves it.
const URL_PATH: &str =
    "/echo/urlSECRETpart1\"urlSECRETpart2\\urlSECRETpart3%7urlSECRETpart4{x}?q=urlSECRETquery5\n";
/// A header value.
const HEADER: &str = "tokSECRETaaaa\"tokSECRETbbbb\\tokSECRETcccc%tokSECRETdddd <x>\n";
/// A value the outbound plugin only logs (inside its config, JSON-escaped).
const LOGGED: &str = "logSECRETeeee\"logSECRETffff\\logSECRETgggg%0Alog SECRET\nlogSECREThhhh\n";

fn config(receiver: &Receiver, admin: u16) -> String {
    let secret = |key: &str| format!("{{valueFrom: {{secretKeyRef: {{name: leak, key: {key}}}}}}}");
    format!(
        "
admin:
  listen: 127.0.0.1:{admin}
  token_file: admin-token
  probes_listen: null
handlers:
  hook:
    plugin: webhook
    shadow: outbound
    timeout: 5s
    backoff_base: 20ms
    backoff_cap: 100ms
    max_retries: 2
    qps: 0
    quarantine_after: 0
    config:
      url: {url}
      headers:
        authorization: {token}
    capabilities:
      http: [\"{allow}\"]
  out:
    plugin: outbound
    timeout: 5s
    backoff_base: 20ms
    max_retries: 1
    qps: 0
    quarantine_after: 0
    config:
      url: {url}
      log_config: true
      note: {note}
      headers:
        x-token: {token}
    capabilities:
      http: [\"{allow}\"]
routes:
  - {{name: cms, resource: configmaps, handler: hook, delivery: every}}
  - {{name: cms-out, resource: configmaps, handler: out}}
",
        url = secret("url"),
        token = secret("token"),
        note = secret("note"),
        allow = receiver.url("http"),
    )
}

fn secret(receiver: &Receiver) -> Secret {
    let data = [
        ("url", format!("{}{URL_PATH}", receiver.url("http"))),
        ("token", HEADER.to_string()),
        ("note", LOGGED.to_string()),
    ];
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("leak".into()),
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

async fn admin_get(admin: u16, path: &str) -> String {
    let response = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{admin}{path}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("the admin API answers");
    format!("GET {path}: {}", response.text().await.unwrap())
}

/// The dead letters of `handler`.
async fn dead_letters(admin: u16, handler: &str) -> Vec<Value> {
    let text = admin_get(admin, &format!("/handlers/{handler}/dead-letters")).await;
    let json = text.split_once(": ").map_or("", |(_, j)| j);
    let value: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    value
        .as_array()
        .or_else(|| value["dead_letters"].as_array())
        .cloned()
        .unwrap_or_default()
}

/// Every fragment of 8 characters of any value that `text` holds.
fn leaks(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for value in [URL_PATH, HEADER, LOGGED] {
        let chars: Vec<char> = value.chars().collect();
        for window in chars.windows(8) {
            let fragment: String = window.iter().collect();
            if text.contains(&fragment) {
                found.push(fragment);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fragment_of_a_secret_value_reaches_any_output() {
    let receiver = Receiver::start().await;
    receiver.set(Mode::EchoReject);
    let sim = support::start_sim().await;
    let client = sim.client().unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    secrets
        .create(&PostParams::default(), &secret(&receiver))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let admin = support::free_port();
    let config_path = support::write_config(dir.path(), &config(&receiver, admin));
    let (config_arg, kubeconfig_arg) =
        (config_path.to_str().unwrap(), kubeconfig.to_str().unwrap());
    let filter = "trace,cranelift_codegen=info,cranelift_frontend=info,regalloc2=info,\
                  wasmtime_cranelift=info,wasmtime::runtime=info";
    let daemon = Process::start(
        &[
            "run",
            "--config",
            config_arg,
            "--kubeconfig",
            kubeconfig_arg,
        ],
        &[("RUST_LOG", filter)],
        &[],
    );
    daemon
        .wait_for_line(WAIT, |l| l.contains("switchyard started"))
        .await;

    // A 400 echoing the request: a dead letter at once. Then a 503 echoing it: retries,
    // then a dead letter.
    support::create_configmap(&client, "default", json!({"metadata": {"name": "a"}})).await;
    support::eventually("the 400's dead letter", WAIT, async || {
        (dead_letters(admin, "hook").await.len() == 1).then_some(())
    })
    .await;
    receiver.set(Mode::EchoUnavailable);
    support::create_configmap(&client, "default", json!({"metadata": {"name": "b"}})).await;
    support::eventually("the 503's dead letter", WAIT, async || {
        (dead_letters(admin, "hook").await.len() == 2).then_some(())
    })
    .await;
    support::eventually("the outbound plugin's dead letters", WAIT, async || {
        (!dead_letters(admin, "out").await.is_empty()).then_some(())
    })
    .await;
    // The values did go out, echoed back.
    let sent = receiver.received();
    assert!(
        sent.iter().any(|r| r.path.contains("urlSECRETpart4")),
        "{sent:?}"
    );
    assert!(sent.iter().any(|r| r.mode == Mode::EchoUnavailable));

    let mut outputs = Vec::new();
    for path in [
        "/status",
        "/handlers/hook",
        "/handlers/out",
        "/handlers/hook/dead-letters",
        "/handlers/out/dead-letters",
        "/handlers/hook/shadow",
        "/metrics",
        "/plugins",
        "/routes",
        "/",
        "/page/app.js",
    ] {
        outputs.push(admin_get(admin, path).await);
    }
    let recorded = dir.path().join("events.jsonl");
    let record = [
        "record",
        "--config",
        config_arg,
        "--kubeconfig",
        kubeconfig_arg,
        "--out",
        recorded.to_str().unwrap(),
        "--seconds",
        "2",
    ];
    let (code, out, err) = switchyard(&record);
    assert_eq!(code, 0, "{out}{err}");
    outputs.push(format!("record: {out}{err}"));
    outputs.push(format!(
        "events file: {}",
        std::fs::read_to_string(&recorded).unwrap()
    ));
    let replay = [
        "replay",
        "--config",
        config_arg,
        "--events",
        recorded.to_str().unwrap(),
    ];
    let (_, out, err) = switchyard(&replay);
    assert!(out.contains("handler hook"), "{out}{err}");
    outputs.push(format!("replay: {out}{err}"));
    let lines = daemon.kill();
    outputs.push(format!("log: {}", lines.join("\n")));
    let mut leaked = Vec::new();
    for output in &outputs {
        let found = leaks(output);
        if !found.is_empty() {
            let start: String = output.chars().take(80).collect();
            leaked.push(format!("{found:?} in {start}…"));
            for line in output.lines().filter(|l| !leaks(l).is_empty()).take(5) {
                leaked.push(format!("    {line}"));
            }
        }
    }
    assert!(leaked.is_empty(), "values leaked:\n{}", leaked.join("\n"));
    // What the outputs are expected to hold, redacted: the errors the echoes made and the
    // plugin's log of its config.
    let all = outputs.join("\n");
    assert!(
        all.contains("the receiver answered 400: path=<redacted>"),
        "{all}"
    );
    assert!(
        all.contains("the receiver answered 503: path=<redacted>"),
        "{all}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("init with config") && l.contains("<redacted>")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("TRACE")),
        "the log is at TRACE"
    );
}
