//! The recipe pods-per-node (its README.md and switchyard.yaml beside this folder's
//! Cargo.toml): keeps a gauge of the pods on each node. On every pod event it counts, in the
//! daemon's cache, the pods indexed under the pod's node and sets `pods_on_node{node=...}`
//! (exposed as `switchyard_plugin_pods_on_node{handler="...",node="..."}`). A pod that moved
//! or went away updates its old node too. The route must declare the index, and the handler
//! wants one worker (`concurrency: 1`): with two, a call that read the cache earlier can
//! finish later and set an older count.
//!
//! ```yaml
//! handlers:
//!   pods-per-node: {concurrency: 1}
//! routes:
//!   - name: pods
//!     resource: pods
//!     indexes: {node: spec.nodeName}
//!     handler: pods-per-node
//! ```

use serde_json::Value;
use switchyard_sdk::{Event, Handler, Outcome, cache, export_handler, metrics};

struct PodsPerNode;

fn node_of(object: &str) -> Option<String> {
    let object: Value = serde_json::from_str(object).ok()?;
    object["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

fn count(node: &str) -> Result<(), String> {
    let pods = cache::list_by_index("pods", "node", node)?;
    metrics::gauge("pods_on_node", pods.len() as f64, &[("node", node)])
}

impl Handler for PodsPerNode {
    fn handle(event: Event) -> Result<Outcome, String> {
        let node = node_of(&event.object);
        let old_node = event.old_object.as_deref().and_then(node_of);
        for node in [
            node.as_ref(),
            old_node.as_ref().filter(|o| Some(*o) != node.as_ref()),
        ]
        .into_iter()
        .flatten()
        {
            count(node)?;
        }
        Ok(Outcome::Done)
    }
}

export_handler!(PodsPerNode);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::{Value, json};
    use switchyard_sdk::testing::{TestHost, updated};

    use super::*;

    fn pod(name: &str, node: &str) -> Value {
        json!({"kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node}})
    }

    #[test]
    fn a_pod_that_moved_updates_both_nodes_counts() {
        let by_node = |p: &Value| {
            p["spec"]["nodeName"]
                .as_str()
                .map(String::from)
                .into_iter()
                .collect()
        };
        let host = TestHost::new()
            .index("node", by_node)
            .object("pods", pod("a", "n2"))
            .object("pods", pod("b", "n2"))
            .object("pods", pod("c", "n3"));
        let report = host.handle::<PodsPerNode>(updated(pod("a", "n1"), pod("a", "n2")));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let gauges: Vec<(String, f64)> = (report.metrics.iter())
            .map(|m| (m.labels[0].1.clone(), m.value))
            .collect();
        assert_eq!(gauges, [("n2".to_string(), 2.0), ("n1".to_string(), 0.0)]);
    }
}
