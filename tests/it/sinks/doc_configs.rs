//! Every config docs/sinks.md gives for a sink carried in the binary is one its plugin
//! takes: each runs in a daemon as written (its Secrets made in the simulator), and a
//! Warning Event and a Deployment reach the plugin, which builds itself from the config and
//! tries to send (refused: the test leaves out `capabilities`, so nothing leaves the host).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Secret};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::{WAIT, core_event};
use crate::support::{self, TestDaemon};

/// The ```yaml blocks of docs/sinks.md that are a whole config for a `builtin:` sink (the
/// `aws` configs are held by `sinks_aws::the_documented_config_of_every_service_is_a_valid_config`).
fn configs() -> Vec<String> {
    let page = std::fs::read_to_string(support::root().join("docs/sinks.md")).unwrap();
    page.split("```yaml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block.to_string()))
        .filter(|block| block.contains("plugin: builtin:") && block.contains("routes:"))
        .filter(|block| !block.contains("plugin: builtin:aws"))
        .collect()
}

/// The value after `key: ` on `line`, up to the next `,` or `}`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = &line[line.find(&format!("{key}: "))? + key.len() + 2..];
    Some(rest[..rest.find([',', '}']).unwrap_or(rest.len())].trim())
}

/// The Secrets `config` names (`secretKeyRef: {name: N, key: K}`), each key holding a URL,
/// which every such value of the docs (a URL, a key, a header value) may be.
fn secrets(config: &str) -> Vec<Secret> {
    let mut secrets: BTreeMap<String, BTreeMap<String, ByteString>> = BTreeMap::new();
    for line in config
        .lines()
        .filter_map(|l| l.split_once("secretKeyRef: "))
    {
        let line = line.1;
        let (name, key) = (field(line, "name").unwrap(), field(line, "key").unwrap());
        let value = ByteString(b"https://sink.example.invalid/hook".to_vec());
        secrets
            .entry(name.to_string())
            .or_default()
            .insert(key.to_string(), value);
    }
    let secret = |(name, data)| {
        serde_json::from_value::<Secret>(json!({"metadata": {"name": name}})).map(|mut s| {
            s.data = Some(data);
            s
        })
    };
    secrets.into_iter().map(|s| secret(s).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_builtin_sink_config_in_the_docs_is_one_its_plugin_takes() {
    let configs = configs();
    assert_eq!(
        configs.len(),
        10,
        "webhook in batches, alertmanager, rabbitmq, otlp, pagerduty, opsgenie, teams, discord, loki, elasticsearch"
    );
    for config in configs {
        let handler = config.lines().nth(1).unwrap().trim().trim_end_matches(':');
        let without_capabilities = config
            .split("    capabilities:\n")
            .map(|part| {
                part.split_once("routes:")
                    .map_or(part.to_string(), |(_, r)| format!("routes:{r}"))
            })
            .collect::<Vec<_>>()
            .join("");
        let t = TestDaemon::builder(&without_capabilities).start().await;
        let secrets_api: Api<Secret> = Api::namespaced(t.client(), "default");
        for secret in secrets(&config) {
            secrets_api
                .create(&PostParams::default(), &secret)
                .await
                .unwrap();
        }
        let events: Api<CoreEvent> = Api::namespaced(t.client(), "default");
        let warning = core_event("web-1.2", "Warning", "BackOff", "Back-off restarting app");
        events
            .create(&PostParams::default(), &warning)
            .await
            .unwrap();
        let deployments: Api<Deployment> = Api::namespaced(t.client(), "default");
        let deployment = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}}))
        .unwrap();
        deployments
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap();
        let errors = support::eventually(&format!("{handler} tries to send"), WAIT, async || {
            let (_, status) = t.get(&format!("/handlers/{handler}")).await;
            let errors = status["last_errors"].to_string();
            (errors.contains("request refused") || errors.contains("init")).then_some(errors)
        })
        .await;
        assert!(!errors.contains("init"), "{handler}: {errors}\n{config}");
        t.stop().await;
    }
}
