//! A sharded replica that keeps its state (`state_dir`), killed and started again while
//! objects were deleted and changed, in its ranges and outside them.
//!
//! It first runs alone (so its records cover every object), then another replica joins and
//! takes half; its handler is paused with changes queued, two of them, when a replica joins
//! while it is down, of objects it does not own after the restart (their events are
//! dropped, as at a hand-over). After the restart it delivers exactly the difference for
//! the objects it owns then (`deleted`, `updated`; nothing for the unchanged) and the queued
//! events of those objects, and nothing for the others, whose records it keeps: once the
//! last replica to join leaves and their range comes back, it delivers their difference
//! too. That replica then joins again (taking a range for whose objects events are queued,
//! which are dropped) and leaves once more: the records of the range handed over while
//! running are kept the same way, and a restart after that brings no dropped event back.
//!
//! Once with the same members before and after the restart, once with a third replica that
//! joined while it was down (so its ranges after the restart are not the ones it had).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard::sharding::{HashRange, fnv1a64, split};
use switchyard::sim::cluster::ObjectRef;
use switchyard::sim::{Cluster, Simulator, resources};

use super::{Replica, work_cluster};
use crate::support::process::Process;
use crate::support::{eventually, get_json, post_json};

const WAIT: Duration = Duration::from_secs(60);

/// The replica that restarts: a child process (`switchyard run`, JSON logs) keeping its
/// state in `state/` of a folder that outlives it, through an API server of its own.
struct Stateful {
    process: Process,
    admin: String,
    _sim: Simulator,
}

impl Stateful {
    async fn start(cluster: &Arc<Cluster>, dir: &Path, identity: &str) -> Self {
        let extra = "state_dir: state\n";
        let (process, admin, sim) = super::start_child(cluster, dir, identity, extra).await;
        Self {
            admin,
            process,
            _sim: sim,
        }
    }

    /// Every plugin call so far: (kind of change, object name), in order.
    fn calls(&self) -> Vec<(String, String)> {
        self.lines()
            .iter()
            .filter(|e| e["handler"] == "log-events")
            .filter_map(|e| {
                let message = e["message"].as_str()?;
                let kind = message.split_whitespace().next()?.to_string();
                let key = message
                    .split(" ConfigMap ")
                    .nth(1)?
                    .split_whitespace()
                    .next()?;
                Some((kind, key.rsplit('/').next()?.to_string()))
            })
            .collect()
    }

    fn lines(&self) -> Vec<Value> {
        self.process
            .lines()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    async fn status(&self) -> Value {
        get_json(&format!("{}/status", self.admin)).await.1
    }

    /// Waits until the route's events waiting in the handler number `count` and the store
    /// has committed every change (the queue may still hold a dropped key, which a worker
    /// skips).
    async fn pending_is(&self, count: usize) {
        eventually("the route's pending events", WAIT, async || {
            let status = self.status().await;
            let pending = status["routes"][0]["pending"] == count;
            (pending && status["state"]["pending_writes"] == 0).then_some(())
        })
        .await;
    }

    /// Pauses (`pause`) or resumes (`resume`) its handler.
    async fn handler(&self, action: &str) {
        let url = format!("{}/handlers/log-events/{action}", self.admin);
        assert_eq!(post_json(&url).await.0, 200, "{action}");
    }

    /// Waits until the replica's members are `members`, its cache holds `objects` objects,
    /// its queue is empty and its store has committed every change.
    async fn settled(&self, members: &[&str], objects: usize) {
        eventually("the replica settled", WAIT, async || {
            let status = self.status().await;
            let handler = &status["handlers"][0];
            let settled = status["replica"]["shards"]["members"] == json!(members)
                && status["informers"][0]["objects"] == objects
                && status["informers"][0]["synced"] != false
                && handler["queue_depth"] == 0
                && handler["in_flight"] == 0
                && status["state"]["pending_writes"] == 0;
            settled.then_some(())
        })
        .await;
    }
}

/// The objects of the scenario: name → uid, those whose change was queued in a paused
/// handler, those deleted in earlier rounds, and what became of some in this round.
#[derive(Default)]
struct Objects {
    uids: BTreeMap<String, String>,
    held: Vec<String>,
    gone: Vec<String>,
    deleted: Vec<String>,
    updated: Vec<String>,
}

impl Objects {
    fn create(cluster: &Cluster, count: usize) -> Self {
        let configmaps = resources::find("", "v1", "configmaps").unwrap();
        let uids = (0..count)
            .map(|i| {
                let name = format!("cm-{i}");
                let created = cluster
                    .create(configmaps, "work", json!({"metadata": {"name": name}}))
                    .expect("create a ConfigMap");
                let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
                (name, uid)
            })
            .collect();
        Self {
            uids,
            ..Self::default()
        }
    }

    /// The names in `range`, of the objects that still exist.
    fn in_range(&self, range: HashRange) -> Vec<&String> {
        self.uids
            .iter()
            .filter(|(name, uid)| {
                range.contains(fnv1a64(uid.as_bytes()))
                    && !self.deleted.contains(name)
                    && !self.gone.contains(name)
            })
            .map(|(name, _)| name)
            .collect()
    }

    /// `count` names of objects in `inside` and not in `outside`, none changed before.
    fn pick(&self, inside: HashRange, outside: Option<HashRange>, count: usize) -> Vec<String> {
        let names: Vec<String> = self
            .in_range(inside)
            .into_iter()
            .filter(|n| !self.held.contains(n) && !self.updated.contains(n))
            .filter(|n| outside.is_none_or(|o| !o.contains(fnv1a64(self.uids[*n].as_bytes()))))
            .take(count)
            .cloned()
            .collect();
        assert_eq!(
            names.len(),
            count,
            "too few objects in {inside} outside {outside:?}"
        );
        names
    }

    /// Deletes two objects and changes two others in each part of `parts` (the objects in
    /// the first range and not in the second).
    fn change_some(&mut self, cluster: &Cluster, parts: &[(HashRange, Option<HashRange>)]) {
        for (inside, outside) in parts {
            for (i, name) in self.pick(*inside, *outside, 4).into_iter().enumerate() {
                if i < 2 {
                    cluster.delete(&at(&name)).expect("delete a ConfigMap");
                    self.deleted.push(name);
                } else {
                    change(cluster, &name, "v");
                    self.updated.push(name);
                }
            }
        }
    }

    /// Starts a round of changes: those made so far were delivered.
    fn next_round(&mut self) {
        self.gone.append(&mut self.deleted);
        self.updated.clear();
    }

    /// The calls owed for this round's changes in `range` and not in `before`, sorted.
    fn difference(&self, range: HashRange, before: Option<HashRange>) -> Vec<(String, String)> {
        let owed = |name: &String| {
            let hash = fnv1a64(self.uids[name].as_bytes());
            range.contains(hash) && before.is_none_or(|b| !b.contains(hash))
        };
        let mut calls: Vec<(String, String)> = self
            .deleted
            .iter()
            .filter(|n| owed(n))
            .map(|n| ("deleted".to_string(), n.clone()))
            .chain(
                self.updated
                    .iter()
                    .filter(|n| owed(n))
                    .map(|n| ("updated".to_string(), n.clone())),
            )
            .collect();
        calls.sort();
        calls
    }
}

/// The ConfigMap `name` in `work`.
fn at(name: &str) -> ObjectRef {
    ObjectRef {
        resource: resources::find("", "v1", "configmaps").unwrap(),
        namespace: "work".into(),
        name: name.to_string(),
    }
}

/// Gives the ConfigMap `name` the data key `key`.
fn change(cluster: &Cluster, name: &str, key: &str) {
    cluster
        .modify(&at(name), |o| {
            let mut o = o.clone();
            o["data"] = json!({key: "2"});
            Ok(o)
        })
        .expect("change a ConfigMap");
}

/// Waits until `replica` settled on `members` and `objects` cached objects having made
/// `expected` calls since call `from` (or for [`WAIT`]), and checks it made no other;
/// returns how many calls it has made in all.
async fn delivers_exactly(
    replica: &Stateful,
    from: usize,
    expected: &[(String, String)],
    members: &[&str],
    objects: usize,
) -> usize {
    replica.settled(members, objects).await;
    let _ = tokio::time::timeout(WAIT, async {
        loop {
            let calls = replica.calls();
            let made = &calls[from.min(calls.len())..];
            if expected.iter().all(|c| made.contains(c)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    replica.settled(members, objects).await;
    let calls = replica.calls();
    let mut made = calls[from..].to_vec();
    made.sort();
    assert_eq!(made, expected, "the calls after the change of ranges");
    calls.len()
}

/// Pauses `b`'s handler and changes objects of its range `half`: two it owns again after
/// the restart (in `mine`) and, when it loses part of `half`, two it does not; waits until
/// their events are queued and committed. Returns the names of the two it owns again.
async fn hold_in_paused_handler(
    b: &Stateful,
    cluster: &Cluster,
    objects: &mut Objects,
    half: HashRange,
    mine: HashRange,
) -> Vec<String> {
    b.handler("pause").await;
    let stays = objects.pick(mine, Some(split(2, 0).unwrap()), 2);
    objects.held.extend(stays.iter().cloned());
    if mine != half {
        let leaves = objects.pick(half, Some(mine), 2);
        objects.held.extend(leaves);
    }
    for name in &objects.held {
        change(cluster, name, "q");
    }
    let held = objects.held.len();
    eventually("the changes queued and committed", WAIT, async || {
        let status = b.status().await;
        let queued = status["handlers"][0]["queue_depth"] == held;
        (queued && status["state"]["pending_writes"] == 0).then_some(())
    })
    .await;
    stays
}

/// Waits until the restarted replica restored its route and its handler, paused as it was,
/// holds `depth` events (the queued ones of objects it still owns, and the difference: those
/// of objects another replica owns now are dropped), then resumes it.
async fn resume_once_restored(b: &Stateful, depth: usize) {
    eventually(
        "the route restored into the paused handler",
        WAIT,
        async || {
            let restored = b.lines().iter().any(|l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("route restored from the state store"))
            });
            let status = b.status().await;
            // The route's events waiting in the handler (the queue may still hold a dropped
            // key, which a worker skips).
            let pending = &status["routes"][0]["pending"];
            let held = status["handlers"][0]["paused"] == true && pending == depth;
            (restored && held && status["state"]["pending_writes"] == 0).then_some(())
        },
    )
    .await;
    b.handler("resume").await;
}

/// See the module docs; `joins` starts a third replica while the first is down.
async fn restarted_with_changes_while_down(joins: bool) {
    let cluster = work_cluster();
    let mut objects = Objects::create(&cluster, 150);
    let dir = tempfile::tempdir().unwrap();
    let half = split(2, 1).unwrap();
    let (members, mine): (Vec<&str>, HashRange) = if joins {
        (vec!["a", "b", "c"], split(3, 1).unwrap())
    } else {
        (vec!["a", "b"], half)
    };
    let b = Stateful::start(&cluster, dir.path(), "b").await;
    b.settled(&["b"], 150).await;
    assert_eq!(b.calls().len(), 150, "alone, b handles every object once");
    let a = Replica::start(&cluster, true, "a").await;
    b.settled(&["a", "b"], objects.in_range(half).len()).await;
    let queued = hold_in_paused_handler(&b, &cluster, &mut objects, half, mine).await;
    drop(b.process.kill());

    let c = if joins {
        let c = Replica::start(&cluster, true, "c").await;
        super::members_are(&[&a, &c], &["a", "c"]).await;
        Some(c)
    } else {
        None
    };
    let whole = split(1, 0).unwrap();
    // Changes in the range b owns after the restart (with a member change: in the part it
    // had before and in the part it did not), and outside it (on both sides).
    let parts = if joins {
        vec![
            (mine, Some(half)),
            (mine, Some(split(2, 0).unwrap())),
            (half, Some(mine)),
            (split(2, 0).unwrap(), Some(mine)),
        ]
    } else {
        vec![(mine, None), (whole, Some(mine))]
    };
    objects.change_some(&cluster, &parts);

    let b = Stateful::start(&cluster, dir.path(), "b").await;
    let mut expected = objects.difference(mine, None);
    expected.extend(queued.iter().map(|n| ("updated".to_string(), n.clone())));
    expected.sort();
    resume_once_restored(&b, expected.len()).await;
    let made = delivers_exactly(&b, 0, &expected, &members, objects.in_range(mine).len()).await;

    // The last replica to join leaves: b gains a range and delivers the difference for it
    // from the records it kept (deleted and changed while another replica had it).
    let (leaving, fewer, gained) = match c {
        Some(c) => (c, vec!["a", "b"], half),
        None => (a, vec!["b"], whole),
    };
    let identity = if joins { "c" } else { "a" };
    leaving.daemon.stop_within(Duration::from_secs(1)).await;
    let expected = objects.difference(gained, Some(mine));
    let in_gained = objects.in_range(gained).len();
    let made = delivers_exactly(&b, made, &expected, &fewer, in_gained).await;

    let members = (members.as_slice(), fewer.as_slice());
    let phase = (b, made);
    hand_over_and_back(
        &cluster,
        dir.path(),
        phase,
        &mut objects,
        identity,
        (mine, gained),
        members,
    )
    .await;
}

/// The replica `identity` joins again while `b` (which has made `made` calls) holds events
/// for objects of the range it takes, paused: `b` drops them, from its store too, and keeps
/// the records. When the range (`gained`, beside `mine`) comes back, `b` delivers what
/// changed while the other replica had it, and nothing for the objects unchanged since it
/// last delivered them; a restart after that delivers nothing (no dropped event comes
/// back). `members`: with the other replica, and without.
async fn hand_over_and_back(
    cluster: &Arc<Cluster>,
    dir: &Path,
    (b, made): (Stateful, usize),
    objects: &mut Objects,
    identity: &str,
    (mine, gained): (HashRange, HashRange),
    (with, without): (&[&str], &[&str]),
) {
    objects.next_round();
    b.handler("pause").await;
    let dropped = objects.pick(gained, Some(mine), 2);
    for name in &dropped {
        change(cluster, name, "q");
    }
    objects.held.extend(dropped);
    b.pending_is(2).await;
    let back = Replica::start(cluster, true, identity).await;
    eventually("the range handed over", WAIT, async || {
        let status = b.status().await;
        (status["replica"]["shards"]["members"] == json!(with)).then_some(())
    })
    .await;
    b.pending_is(0).await;
    b.handler("resume").await;
    b.settled(with, objects.in_range(mine).len()).await;
    objects.change_some(cluster, &[(gained, Some(mine))]);
    back.daemon.stop_within(Duration::from_secs(1)).await;
    let expected = objects.difference(gained, Some(mine));
    let in_gained = objects.in_range(gained).len();
    delivers_exactly(&b, made, &expected, without, in_gained).await;
    drop(b.process.kill());
    let b = Stateful::start(cluster, dir, "b").await;
    delivers_exactly(&b, 0, &[], without, in_gained).await;
    drop(b.process.kill());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_sharded_replica_delivers_the_difference_for_its_own_objects_only() {
    restarted_with_changes_while_down(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sharded_replica_restarted_after_a_member_joined_compares_its_new_ranges() {
    restarted_with_changes_while_down(true).await;
}
