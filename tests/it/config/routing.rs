//! Routing through the `informers:` section, end to end against the simulator: an informer
//! named by group/version/kind, routes that take their changes by informer name or by kind,
//! and route filters (namespaces, labels, `when` conditions) deciding what reaches the plugin.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use switchyard::plugin::PluginLog;
use tokio::sync::broadcast;

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

const CONFIG: &str = "
informers:
  deployments:
    group: apps
    version: v1
    kind: Deployment
    namespaces: [web, db]
handlers:
  log-events: {}
routes:
  # Only changes to the desired state: status-only updates are left out.
  - name: spec-changes
    kinds: [Deployment]
    events: [added, updated]
    when:
      - path: .spec
        changed: true
    handler: log-events
  # Only the web namespace, only deployments labelled tier=front.
  - name: front
    informer: deployments
    namespaces: [web]
    labels: tier=front
    events: [added]
    handler: log-events
";

async fn create_deployment(client: &Client, ns: &str, name: &str, tier: &str) -> Deployment {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"tier": tier}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &deployment)
        .await
        .unwrap()
}

/// Every line logged until `last` (inclusive) appears.
async fn lines_until(logs: &mut broadcast::Receiver<PluginLog>, last: &str) -> Vec<String> {
    let mut lines = Vec::new();
    tokio::time::timeout(WAIT, async {
        loop {
            let line = logs.recv().await.unwrap().message;
            let done = line.contains(last);
            lines.push(line);
            if done {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no line with {last:?}; saw {lines:#?}"));
    lines
}

#[tokio::test]
async fn routes_take_changes_by_kind_and_informer_and_filter_them() {
    let sim = support::start_sim().await;
    let client = sim.client().unwrap();
    support::create_namespaces(&client, &["web", "db", "other"]).await;
    let mut t = TestDaemon::builder(CONFIG).sim(sim).start().await;
    let (_, status) = t.get("/status").await;
    let watches: Vec<&str> = status["informers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["resource"].as_str().unwrap())
        .collect();
    assert_eq!(watches, ["apps/v1/deployments", "apps/v1/deployments"]);

    let front = create_deployment(&client, "web", "front", "front").await;
    let store = create_deployment(&client, "db", "store", "back").await;
    // Not watched: no informer covers the namespace.
    create_deployment(&client, "other", "elsewhere", "front").await;
    let web: Api<Deployment> = Api::namespaced(client.clone(), "web");
    // A status-only update, then a change to the spec.
    web.patch_status(
        "front",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"readyReplicas": 1}})),
    )
    .await
    .unwrap();
    let scaled = web
        .patch(
            "front",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    let scaled_rv = scaled.metadata.resource_version.unwrap();

    let front_rv = front.metadata.resource_version.unwrap();
    let store_rv = store.metadata.resource_version.unwrap();
    // The two namespaces are two watches: their lines may interleave in any order.
    let mut expected = vec![
        format!("added Deployment db/store rv={store_rv} route=spec-changes"),
        format!("added Deployment web/front rv={front_rv} route=front"),
        format!("added Deployment web/front rv={front_rv} route=spec-changes"),
        format!("updated Deployment web/front rv={scaled_rv} route=spec-changes"),
    ];
    expected.sort();
    let mut lines = Vec::new();
    while !expected.iter().all(|e| lines.contains(e)) {
        let missing = expected
            .iter()
            .find(|e| !lines.contains(e))
            .unwrap()
            .clone();
        lines.extend(lines_until(&mut t.logs, &missing).await);
    }
    // spec-changes: 3 delivered, the status-only update skipped. front: web/front
    // delivered; db/store (namespace) and both updates skipped.
    let counts = support::eventually("every change counted", WAIT, async || {
        let (_, routes) = t.get("/routes").await;
        let count = |name: &str, field: &str| {
            routes["routes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == name)
                .unwrap()[field]
                .as_u64()
                .unwrap()
        };
        let counts = [
            count("spec-changes", "delivered"),
            count("spec-changes", "skipped"),
            count("front", "delivered"),
            count("front", "skipped"),
        ];
        (counts.iter().sum::<u64>() >= 8).then_some(counts)
    })
    .await;
    assert_eq!(counts, [3, 1, 1, 3]);
    // Nothing else reached the plugin.
    while let Ok(line) = t.logs.try_recv() {
        lines.push(line.message);
    }
    lines.retain(|l| !l.contains("/elsewhere"));
    lines.sort();
    assert_eq!(lines, expected);
    t.stop().await;
}
