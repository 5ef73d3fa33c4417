//! Replicas whose Lease lapsed. One paused with SIGSTOP past its renew deadline (once, it
//! woke and handled hundreds of buffered events for the range another replica
//! had taken over) must give that range up before any plugin call, count the loss, and
//! claim a range again only as a new member would, delivering it as a hand-over. The Lease
//! of one that never comes back is deleted once it is counted dead, so a replica started
//! later never counts it live (which left part of the hash space unowned).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard::sim::cluster::ObjectRef;
use switchyard::sim::faults::RequestFailure;
use switchyard::sim::{Cluster, Simulator, resources};

use super::{LEASE, Replica, create, members_are, work_cluster};
use crate::support::process::Process;
use crate::support::{eventually, get_json, spawned};

const WAIT: Duration = Duration::from_secs(60);

/// A replica as a child process (`switchyard run`, JSON logs), so that it can be paused,
/// through an API server of its own on the shared cluster.
struct Child {
    process: Process,
    admin: String,
    _sim: Simulator,
    _dir: tempfile::TempDir,
}

impl Child {
    async fn start(cluster: &Arc<Cluster>, identity: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (process, admin, sim) = super::start_child(cluster, dir.path(), identity, "").await;
        Self {
            admin,
            process,
            _sim: sim,
            _dir: dir,
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process.
    fn signal(&self, signal: &str) {
        spawned::signal(self.process.id(), signal);
    }

    /// Every line logged from line `from` on, as JSON.
    fn events_from(&self, from: usize) -> Vec<Value> {
        self.process.lines()[from..]
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    async fn replica_status(&self) -> Value {
        get_json(&format!("{}/status", self.admin)).await.1["replica"].clone()
    }
}

/// What the plugin was called with, by position among `events`: `(index, message)`.
fn plugin_calls(events: &[Value]) -> Vec<(usize, String)> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["handler"] == "log-events")
        .map(|(i, e)| (i, e["message"].as_str().unwrap_or_default().to_string()))
        .collect()
}

/// The object name in a log-events line (`KIND ConfigMap work/NAME rv=…`).
fn object_name(message: &str) -> String {
    let key = message.split_whitespace().nth(2).unwrap_or_default();
    key.rsplit('/').next().unwrap_or_default().to_string()
}

/// Gives every object in `names` a new version.
fn patch_all(cluster: &Cluster, names: &[String]) {
    let configmaps = resources::find("", "v1", "configmaps").unwrap();
    for name in names {
        let at = ObjectRef {
            resource: configmaps,
            namespace: "work".into(),
            name: name.clone(),
        };
        cluster
            .modify(&at, |o| {
                let mut o = o.clone();
                o["data"] = json!({"v": "2"});
                Ok(o)
            })
            .expect("patch a ConfigMap");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_woken_from_a_pause_past_its_renew_deadline_makes_no_call_for_the_range_it_lost()
{
    let cluster = work_cluster();
    let a = Replica::start(&cluster, true, "a").await;
    let c = Child::start(&cluster, "c").await;
    members_are(&[&a], &["a", "c"]).await;
    let names = create(&cluster, "cm", 600);
    let of_c = eventually("every object is handled", WAIT, async || {
        let of_a = a.names();
        let of_c: HashSet<String> = plugin_calls(&c.events_from(0))
            .iter()
            .map(|(_, m)| object_name(m))
            .collect();
        names
            .iter()
            .all(|n| of_a.contains(n) || of_c.contains(n))
            .then_some(of_c)
    })
    .await;
    assert!(of_c.len() > 150, "c handled {} of 600", of_c.len());
    let losses = c.replica_status().await["losses"].as_u64().unwrap();

    // Paused past its renew deadline and lease duration: a takes c's range over and
    // handles a new version of every object, while c's watch buffers the same changes.
    c.signal("STOP");
    members_are(&[&a], &["a"]).await;
    patch_all(&cluster, &names);
    eventually("a handles every new version", WAIT, async || {
        let seen = a.handled.lock().unwrap();
        names.iter().all(|n| seen.patched.contains(n)).then_some(())
    })
    .await;
    let woke = c.process.lines().len();
    c.signal("CONT");

    // Whatever c does with its range after waking, it does for every object of it.
    eventually("c handles its range after waking", WAIT, async || {
        let called: HashSet<String> = plugin_calls(&c.events_from(woke))
            .iter()
            .map(|(_, m)| object_name(m))
            .collect();
        of_c.is_subset(&called).then_some(())
    })
    .await;
    let events = c.events_from(woke);
    let claimed = events.iter().position(|e| {
        e["message"] == "shard assignment changed"
            && e["ranges"].as_str().is_some_and(|r| !r.is_empty())
    });
    let calls = plugin_calls(&events);
    let early: Vec<&String> = calls
        .iter()
        .filter(|(i, _)| claimed.is_none_or(|at| *i < at))
        .map(|(_, m)| m)
        .collect();
    assert!(
        early.is_empty(),
        "after waking, c made {} plugin calls for the range a had taken over before it claimed a range again: {:#?}",
        early.len(),
        &early[..early.len().min(5)]
    );
    assert!(
        calls.iter().all(|(_, m)| m.starts_with("added ")),
        "c's range came back other than as a hand-over: {:?}",
        calls.iter().find(|(_, m)| !m.starts_with("added "))
    );
    let status = c.replica_status().await;
    assert!(
        status["losses"].as_u64().unwrap() > losses,
        "c counted no loss: {status}"
    );
    members_are(&[&a], &["a", "c"]).await;
    drop(c);
    a.daemon.stop_within(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lease_of_a_replica_counted_dead_is_deleted_so_one_started_later_does_not_count_it_live()
 {
    let cluster = work_cluster();
    let (a, c) = tokio::join!(
        Replica::start(&cluster, true, "a"),
        Replica::start(&cluster, true, "c"),
    );
    members_are(&[&a, &c], &["a", "c"]).await;
    // c is cut off for good: its Lease stays as it last wrote it.
    c.daemon
        .sim()
        .faults()
        .fail_next_requests(RequestFailure::internal_error(u64::MAX / 2))
        .expect("a valid fault");
    c.daemon.sim().close_watches();
    members_are(&[&a], &["a"]).await;
    let lease = ObjectRef {
        resource: resources::find("coordination.k8s.io", "v1", "leases").unwrap(),
        namespace: "default".into(),
        name: "shard-c".into(),
    };
    eventually(
        "c's Lease is deleted",
        LEASE + Duration::from_secs(5),
        async || cluster.get(&lease).is_err().then_some(()),
    )
    .await;
    // d has claimed a range once it has started: from the live members only.
    let d = Replica::start(&cluster, true, "d").await;
    let status = d.replica_status().await;
    assert_eq!(status["shards"]["members"], json!(["a", "d"]), "{status}");
    for r in [a, c, d] {
        r.daemon.stop_within(Duration::from_secs(1)).await;
    }
}
