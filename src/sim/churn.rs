//! Steady churn: a population of ConfigMaps and/or Pods created, updated and deleted at a
//! chosen rate, for the demo, for `kubectl get -w` and for load tests and benchmarks.
//!
//! Each kind keeps about `objects` objects named `churn-N` (ConfigMaps) or `churn-pod-N`
//! (Pods) in one namespace. Every change picks the next kind in turn and a random slot: an
//! empty slot is created; an existing object is deleted one time in five, updated otherwise
//! (a Pod goes Pending → Running, then gets new annotations). The rate is kept on average,
//! however high: changes that fall due between timer ticks are made together. [`Churn`]
//! counts what was done, and stops after `max_changes` when that is set.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::cluster::{Cluster, ObjectRef};
use super::resources::builtin_index;

/// A kind of object the churn changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChurnKind {
    /// ConfigMaps named `churn-N`, with a payload in `data`.
    ConfigMaps,
    /// Pods named `churn-pod-N` on nodes `node-0`..`node-2`, with a payload in an annotation.
    Pods,
}

/// A churn kind that is neither ConfigMaps nor Pods.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown churn kind {0:?}; expected configmaps or pods")]
pub struct UnknownChurnKind(pub String);

impl FromStr for ChurnKind {
    type Err = UnknownChurnKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "configmaps" | "configmap" | "cm" => Ok(Self::ConfigMaps),
            "pods" | "pod" | "po" => Ok(Self::Pods),
            other => Err(UnknownChurnKind(other.to_string())),
        }
    }
}

/// What the churn does.
#[derive(Debug, Clone)]
pub struct ChurnConfig {
    /// Namespace the churned objects live in (it must exist).
    pub namespace: String,
    /// How many objects of each kind the churn keeps alive (about).
    pub objects: usize,
    /// Changes per second, over all kinds.
    pub rate: f64,
    /// Approximate size of each object's payload, in bytes.
    pub object_size: usize,
    /// The kinds to churn, taking turns (default: ConfigMaps only).
    pub kinds: Vec<ChurnKind>,
    /// Create `objects` objects of each kind at once before churning.
    pub prefill: bool,
    /// Stop after this many changes (the prefill not counted); `None` runs until aborted.
    pub max_changes: Option<u64>,
}

impl Default for ChurnConfig {
    fn default() -> Self {
        Self {
            namespace: "default".into(),
            objects: 20,
            rate: 2.0,
            object_size: 64,
            kinds: vec![ChurnKind::ConfigMaps],
            prefill: false,
            max_changes: None,
        }
    }
}

/// How many changes of each type the churn has made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChurnCounts {
    /// Objects created (prefill included).
    pub created: u64,
    /// Objects updated.
    pub updated: u64,
    /// Objects deleted.
    pub deleted: u64,
}

impl ChurnCounts {
    /// Every change counted.
    pub fn total(&self) -> u64 {
        self.created + self.updated + self.deleted
    }
}

#[derive(Debug, Default)]
struct Counters {
    created: AtomicU64,
    updated: AtomicU64,
    deleted: AtomicU64,
}

/// A running churn. Dropping the handle lets it run on; [`Churn::abort`] stops it.
#[derive(Debug)]
pub struct Churn {
    task: JoinHandle<()>,
    counters: Arc<Counters>,
}

impl Churn {
    /// Stops the churn.
    pub fn abort(&self) {
        self.task.abort();
    }

    /// What the churn has done so far.
    pub fn counts(&self) -> ChurnCounts {
        self.counters.counts()
    }

    /// Whether the churn has stopped (after `max_changes`, or aborted).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits until the churn stops by itself (it must have `max_changes`) and returns what
    /// it did.
    pub async fn finished(self) -> ChurnCounts {
        let Churn { task, counters } = self;
        let _ = task.await;
        counters.counts()
    }
}

impl Counters {
    fn counts(&self) -> ChurnCounts {
        ChurnCounts {
            created: self.created.load(Ordering::Relaxed),
            updated: self.updated.load(Ordering::Relaxed),
            deleted: self.deleted.load(Ordering::Relaxed),
        }
    }
}

/// Starts churning `cluster`.
pub fn start(cluster: Arc<Cluster>, config: ChurnConfig) -> Churn {
    let counters = Arc::new(Counters::default());
    let task = tokio::spawn(run(cluster, config, counters.clone()));
    Churn { task, counters }
}

async fn run(cluster: Arc<Cluster>, config: ChurnConfig, counters: Arc<Counters>) {
    let kinds = if config.kinds.is_empty() {
        vec![ChurnKind::ConfigMaps]
    } else {
        config.kinds.clone()
    };
    let slots = config.objects.max(1);
    let mut serial = 0u64;
    if config.prefill {
        for kind in &kinds {
            for slot in 0..slots {
                serial += 1;
                step(&cluster, &config, *kind, slot, 100, serial, &counters);
            }
        }
    }
    let rate = config.rate.max(0.001);
    // Wake often enough for the rate, never more than once a millisecond.
    let tick = Duration::from_secs_f64((1.0 / rate).clamp(0.001, 0.1));
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = tokio::time::Instant::now();
    let mut done = 0u64;
    loop {
        ticker.tick().await;
        let due = (started.elapsed().as_secs_f64() * rate) as u64;
        // After a stall, catch up at most one second's worth.
        done = done.max(due.saturating_sub(rate.ceil() as u64));
        while done < due {
            if config.max_changes.is_some_and(|max| done >= max) {
                return;
            }
            done += 1;
            serial += 1;
            let kind = kinds[(done as usize) % kinds.len()];
            // The random generator is not Send, so pick before any await.
            let (pick, slot) = {
                let mut rng = rand::rng();
                (rng.random_range(0..100u32), rng.random_range(0..slots))
            };
            step(&cluster, &config, kind, slot, pick, serial, &counters);
        }
        if config.max_changes.is_some_and(|max| done >= max) {
            return;
        }
    }
}

/// One change to the object in `slot`: create it if it is missing, else delete it when
/// `pick` < 20, update it otherwise. Errors (a namespace deleted under us, say) skip it.
fn step(
    cluster: &Cluster,
    config: &ChurnConfig,
    kind: ChurnKind,
    slot: usize,
    pick: u32,
    serial: u64,
    counters: &Counters,
) {
    let (resource, name) = match kind {
        ChurnKind::ConfigMaps => (
            builtin_index("", "v1", "configmaps"),
            format!("churn-{slot}"),
        ),
        ChurnKind::Pods => (builtin_index("", "v1", "pods"), format!("churn-pod-{slot}")),
    };
    let at = ObjectRef {
        resource,
        namespace: config.namespace.clone(),
        name,
    };
    let exists = cluster.get(&at).is_ok();
    let (result, counter) = match (exists, pick) {
        (false, _) => (
            cluster
                .create(
                    resource,
                    &at.namespace,
                    new_object(kind, &at.name, slot, serial, config),
                )
                .map(drop),
            &counters.created,
        ),
        (true, 0..20) => (cluster.delete(&at).map(drop), &counters.deleted),
        (true, _) => (
            cluster
                .modify(&at, |current| Ok(changed(kind, current, serial, config)))
                .map(drop),
            &counters.updated,
        ),
    };
    if result.is_ok() {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

const MANAGED_BY: &str = "switchyard-churn";

fn new_object(
    kind: ChurnKind,
    name: &str,
    slot: usize,
    serial: u64,
    config: &ChurnConfig,
) -> Value {
    let payload = "x".repeat(config.object_size);
    match kind {
        ChurnKind::ConfigMaps => json!({
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
            "data": {"serial": serial.to_string(), "payload": payload},
        }),
        ChurnKind::Pods => json!({
            "metadata": {
                "name": name,
                "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, "app": "churn"},
                "annotations": {"switchyard.dev/serial": serial.to_string(), "switchyard.dev/payload": payload},
            },
            "spec": {
                "nodeName": format!("node-{}", slot % 3),
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            },
            "status": {"phase": "Pending"},
        }),
    }
}

fn changed(kind: ChurnKind, current: &Value, serial: u64, config: &ChurnConfig) -> Value {
    let mut object = current.clone();
    match kind {
        ChurnKind::ConfigMaps => {
            object["data"] = json!({
                "serial": serial.to_string(),
                "payload": "x".repeat(config.object_size),
            });
        }
        ChurnKind::Pods if object["status"]["phase"] == "Pending" => {
            object["status"] = json!({
                "phase": "Running",
                "podIP": format!("10.0.{}.{}", serial % 250, (serial / 250) % 250 + 1),
                "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0}],
            });
        }
        ChurnKind::Pods => {
            object["metadata"]["annotations"]["switchyard.dev/serial"] = serial.to_string().into();
        }
    }
    object
}
