//! Steady churn: a population of ConfigMaps created, updated and deleted at a chosen rate,
//! for the demo and for load tests.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::cluster::{Cluster, ObjectRef};
use super::resources;

/// What the churn does.
#[derive(Debug, Clone)]
pub struct ChurnConfig {
    /// Namespace the churned ConfigMaps live in.
    pub namespace: String,
    /// How many objects the churn keeps alive (about).
    pub objects: usize,
    /// Changes per second.
    pub rate: f64,
    /// Approximate size of each object's data, in bytes.
    pub object_size: usize,
}

impl Default for ChurnConfig {
    fn default() -> Self {
        Self {
            namespace: "default".into(),
            objects: 20,
            rate: 2.0,
            object_size: 64,
        }
    }
}

/// Starts churning; the returned task runs until aborted.
pub fn start(cluster: Arc<Cluster>, config: ChurnConfig) -> JoinHandle<()> {
    tokio::spawn(async move {
        let resource = resources::find("", "v1", "configmaps").expect("configmaps are served");
        let period = Duration::from_secs_f64(1.0 / config.rate.max(0.001));
        let mut ticker = tokio::time::interval(period);
        let mut serial = 0u64;
        loop {
            ticker.tick().await;
            serial += 1;
            // The random generator is not Send, so pick the step before any await.
            let (pick, slot) = {
                let mut rng = rand::rng();
                (
                    rng.random_range(0..100u32),
                    rng.random_range(0..config.objects.max(1)),
                )
            };
            let at = ObjectRef {
                resource,
                namespace: config.namespace.clone(),
                name: format!("churn-{slot}"),
            };
            let exists = cluster.get(&at).is_ok();
            // Errors (a namespace deleted under us, say) only skip a step.
            let _ = match (exists, pick) {
                (false, _) => {
                    cluster.create(resource, &at.namespace, object(&at.name, serial, &config))
                }
                (true, 0..20) => cluster.delete(&at),
                (true, _) => cluster.update(&at, object(&at.name, serial, &config)),
            };
        }
    })
}

fn object(name: &str, serial: u64, config: &ChurnConfig) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "switchyard-churn"}},
        "data": {
            "serial": serial.to_string(),
            "payload": "x".repeat(config.object_size),
        },
    })
}
