//! The recipe pods-per-node (plugins/recipes/pods-per-node) played through the question
//! kube-state-metrics answers with `count by (node) (kube_pod_info)`: pods in any namespace
//! scheduled onto nodes count on their node, a pod not yet scheduled on none, and a deleted
//! pod leaves its node's count; read the way Prometheus reads it, from the probes
//! listener's /metrics without a token.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);
const RECIPE: &str = "pods-per-node";

/// Creates the pod `namespace/name`, on `node` if given (else not scheduled).
async fn create_pod(t: &TestDaemon, namespace: &str, name: &str, node: Option<&str>) {
    let mut pod = json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = node.into();
    }
    let pod: Pod = serde_json::from_value(pod).unwrap();
    Api::<Pod>::namespaced(t.client(), namespace)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// Every `switchyard_plugin_pods_on_node` series on the probes listener's /metrics, as
/// `NODE=COUNT` lines, sorted.
async fn pods_on_nodes(t: &TestDaemon) -> Vec<String> {
    let text = reqwest::get(t.probes_url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = "switchyard_plugin_pods_on_node{handler=\"pods-per-node\",node=\"";
    let mut series: Vec<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .filter_map(|rest| {
            let (node, value) = rest.split_once("\"} ")?;
            Some(format!("{node}={}", value.parse::<f64>().ok()?))
        })
        .collect();
    series.sort();
    series
}

/// Waits until the series are `expected`; panics with the last ones seen after [`WAIT`].
async fn wait_for(t: &TestDaemon, expected: &[&str]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let seen = pods_on_nodes(t).await;
        if seen == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited {WAIT:?} for pods on nodes {expected:?}; last seen {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_the_pods_on_each_node_across_namespaces_as_they_come_and_go() {
    let t = TestDaemon::builder(&super::fragment(RECIPE))
        .plugin_file(RECIPE, RECIPE)
        .start()
        .await;
    support::create_namespaces(&t.client(), &["shop"]).await;
    create_pod(&t, "default", "a", Some("n1")).await;
    create_pod(&t, "default", "b", Some("n1")).await;
    create_pod(&t, "shop", "c", Some("n1")).await;
    create_pod(&t, "shop", "d", Some("n2")).await;
    create_pod(&t, "shop", "pending", None).await;
    wait_for(&t, &["n1=3", "n2=1"]).await;

    let default: Api<Pod> = Api::namespaced(t.client(), "default");
    default.delete("a", &DeleteParams::default()).await.unwrap();
    Api::<Pod>::namespaced(t.client(), "shop")
        .delete("d", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(&t, &["n1=2", "n2=0"]).await;

    let (_, detail) = t.get(&format!("/handlers/{RECIPE}")).await;
    assert_eq!(detail["last_errors"], json!([]), "{detail:#}");
    t.stop().await;
}

#[test]
fn rbac_grants_reading_pods_nothing_more() {
    assert_eq!(
        super::granted(RECIPE),
        ["ClusterRole core pods get,list,watch"]
    );
}
