//! Several replicas in sharded mode on one simulated cluster, each daemon through an API
//! server of its own (so one can be cut off): three replicas split 3,000 ConfigMaps with
//! every object handled by exactly one; a replica cut off from the API gives up its share
//! and the survivors handle its objects within about a lease duration; a replica that
//! joins takes its share, and no hand-over is ever delivered as `deleted`. Each scenario
//! runs with the simulator's `ShardedListAndWatch` gate on (the API server filters) and off
//! (the informers filter).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard::sim::faults::RequestFailure;
use switchyard::sim::{Cluster, SimOptions, Simulator, resources};

use crate::support::{TestDaemon, eventually};

mod lapsed;
mod restart;

/// Lease 6s, renew deadline 4s, retry 0.3s. A replica gives up its share once its last
/// successful renewal was sent a renew deadline ago, and each renewal is two requests: the
/// deadline leaves room for them on a loaded machine.
const LEASE: Duration = Duration::from_secs(6);

fn config(identity: &str) -> String {
    format!(
        "ha:
  mode: sharded
  lease_namespace: default
  lease_name: shard
  lease_duration: 6s
  renew_deadline: 4s
  retry_period: 300ms
  identity: {identity}
handlers:
  log-events: {{concurrency: 8}}
routes:
  - name: configmaps
    resource: configmaps
    namespace: work
    handler: log-events
"
    )
}

/// What one replica's handler was called with: per object name, the kinds of change; and
/// the objects it was called with a `v` data key for.
#[derive(Default)]
struct Seen {
    calls: HashMap<String, Vec<String>>,
    patched: HashSet<String>,
    lagged: u64,
}

type Handled = Arc<Mutex<Seen>>;

/// A replica and what its plugin logged.
struct Replica {
    daemon: TestDaemon,
    handled: Handled,
}

impl Replica {
    async fn start(cluster: &Arc<Cluster>, gate: bool, identity: &str) -> Self {
        let sim = Simulator::serve(
            cluster.clone(),
            SimOptions {
                sharded_list_and_watch: gate,
                ..SimOptions::default()
            },
        )
        .await
        .expect("a server on the cluster");
        let mut daemon = TestDaemon::builder(&config(identity))
            .sim(sim)
            .start()
            .await;
        // The fixture's feed starts before the first list: nothing handled is missed.
        let fresh = daemon.daemon().plugin_logs().subscribe();
        let mut logs = std::mem::replace(&mut daemon.logs, fresh);
        let handled: Handled = Arc::default();
        let sink = handled.clone();
        tokio::spawn(async move {
            loop {
                match logs.recv().await {
                    Ok(line) => {
                        let mut words = line.message.split_whitespace();
                        let kind = words.next().unwrap_or_default().to_string();
                        let key = words.nth(1).unwrap_or_default();
                        let name = key.rsplit('/').next().unwrap_or_default().to_string();
                        let mut seen = sink.lock().unwrap();
                        if line.message.ends_with(" data=[v]") {
                            seen.patched.insert(name.clone());
                        }
                        seen.calls.entry(name).or_default().push(kind);
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        sink.lock().unwrap().lagged += n;
                    }
                    Err(_) => return,
                }
            }
        });
        Self { daemon, handled }
    }

    fn names(&self) -> HashSet<String> {
        self.handled.lock().unwrap().calls.keys().cloned().collect()
    }

    fn deletions(&self) -> usize {
        let seen = self.handled.lock().unwrap();
        assert_eq!(seen.lagged, 0, "the log feed lagged");
        seen.calls
            .values()
            .flatten()
            .filter(|k| k.starts_with("deleted"))
            .count()
    }

    async fn replica_status(&self) -> Value {
        self.daemon.status_json().await["replica"].clone()
    }
}

/// A simulated cluster with the namespace `work`.
/// A replica as a child process: `switchyard run` in `dir` with `extra` before the
/// sharded config of `identity` (JSON logs, the admin token [`crate::support::TOKEN`]),
/// through a server of its own on `cluster` (sharded list and watch on). Returns the
/// process, its admin URL and the server.
async fn start_child(
    cluster: &Arc<Cluster>,
    dir: &std::path::Path,
    identity: &str,
    extra: &str,
) -> (crate::support::process::Process, String, Simulator) {
    let sim = Simulator::serve(
        cluster.clone(),
        SimOptions {
            sharded_list_and_watch: true,
            ..SimOptions::default()
        },
    )
    .await
    .expect("a server on the cluster");
    let kubeconfig = dir.join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let yaml = format!(
        "{extra}admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\n  token_file: admin-token\n{}",
        config(identity)
    );
    let config = crate::support::write_config(dir, &yaml);
    let process = crate::support::process::Process::start(
        &[
            "run",
            "--config",
            config.to_str().unwrap(),
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
        &[("SWITCHYARD_LOG_FORMAT", "json")],
        &["RUST_LOG", "NO_COLOR"],
    );
    let started = process
        .wait_for_line(Duration::from_secs(60), |l| {
            l.contains("switchyard started")
        })
        .await;
    let started: Value = serde_json::from_str(&started).expect("a JSON line");
    let admin = started["admin"].as_str().expect("the admin address");
    (process, format!("http://{admin}"), sim)
}

fn work_cluster() -> Arc<Cluster> {
    let cluster = Arc::new(Cluster::new(100_000));
    cluster
        .create(
            resources::find("", "v1", "namespaces").unwrap(),
            "",
            json!({"metadata": {"name": "work"}}),
        )
        .expect("the namespace");
    cluster
}

fn create(cluster: &Cluster, prefix: &str, count: usize) -> Vec<String> {
    let configmaps = resources::find("", "v1", "configmaps").unwrap();
    (0..count)
        .map(|i| {
            let name = format!("{prefix}-{i}");
            cluster
                .create(configmaps, "work", json!({"metadata": {"name": name}}))
                .expect("create a ConfigMap");
            name
        })
        .collect()
}

/// Waits until every replica sees exactly `members`.
async fn members_are(replicas: &[&Replica], members: &[&str]) {
    eventually(
        "the members agree",
        LEASE + Duration::from_secs(10),
        async || {
            for r in replicas {
                let status = r.replica_status().await;
                if status["shards"]["members"] != json!(members) {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

/// Waits until the replicas' caches hold `total` objects between them.
async fn caches_partition(replicas: &[&Replica], total: u64) {
    let mut last = Vec::new();
    let settled = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            last.clear();
            for r in replicas {
                let status = r.daemon.status_json().await;
                last.push(status["informers"][0]["objects"].as_u64().unwrap_or(0));
            }
            if last.iter().sum::<u64>() == total {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        settled.is_ok(),
        "the caches hold {last:?} objects, not {total} in all"
    );
}

/// Which replica handled each of `names` (by index), waiting until all are handled.
async fn owners(
    replicas: &[&Replica],
    names: &[String],
    within: Duration,
) -> BTreeMap<String, Vec<usize>> {
    eventually("every object is handled", within, async || {
        let mut owners: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, r) in replicas.iter().enumerate() {
            let seen = r.names();
            for n in names.iter().filter(|n| seen.contains(*n)) {
                owners.entry(n.clone()).or_default().push(i);
            }
        }
        (owners.len() == names.len()).then_some(owners)
    })
    .await
}

async fn three_replicas_then_one_cut_off_then_one_added(gate: bool) {
    let cluster = work_cluster();
    let (a, b, c) = tokio::join!(
        Replica::start(&cluster, gate, "a"),
        Replica::start(&cluster, gate, "b"),
        Replica::start(&cluster, gate, "c"),
    );
    members_are(&[&a, &b, &c], &["a", "b", "c"]).await;
    let filtering = if gate { "server" } else { "client" };
    let status = a.daemon.status_json().await;
    assert_eq!(
        status["informers"][0]["shard"]["filtering"], filtering,
        "{status}"
    );
    assert_eq!(status["replica"]["mode"], "sharded", "{status}");
    let of_c = split_3000(&cluster, [&a, &b, &c]).await;
    cut_off(gate, &cluster, [&a, &b], &c, &of_c).await;
    let d = Replica::start(&cluster, gate, "d").await;
    joined(&cluster, [&a, &b, &d]).await;
    for (r, name) in [(&a, "a"), (&b, "b"), (&c, "c"), (&d, "d")] {
        assert_eq!(r.deletions(), 0, "{name} delivered a hand-over as deleted");
    }
    replica_metrics(&d).await;
    for r in [a, b, c, d] {
        r.daemon.stop_within(Duration::from_secs(1)).await;
    }
}

/// Three replicas, 3,000 objects: each handled by exactly one, the counts add up, the
/// caches split them exactly. Returns the names the third replica handled.
async fn split_3000(cluster: &Cluster, replicas: [&Replica; 3]) -> Vec<String> {
    let first = create(cluster, "cm", 3000);
    let owned = owners(&replicas, &first, Duration::from_secs(60)).await;
    let twice: Vec<_> = owned.iter().filter(|(_, o)| o.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "handled by two replicas: {:?}",
        &twice[..twice.len().min(5)]
    );
    let counts: Vec<usize> = replicas.iter().map(|r| r.names().len()).collect();
    assert_eq!(counts.iter().sum::<usize>(), 3000, "{counts:?}");
    assert!(
        counts.iter().all(|n| (700..1300).contains(n)),
        "uneven split: {counts:?}"
    );
    caches_partition(&replicas, 3000).await;
    owned
        .iter()
        .filter(|(_, o)| o == &&vec![2])
        .map(|(n, _)| n.clone())
        .collect()
}

/// `c` is cut off from the API: it gives up its share, and the survivors own its range
/// once its Lease has gone unrenewed for a lease duration (plus a poll), then handle its
/// objects as `added`; what is created afterwards goes to one survivor each.
async fn cut_off(
    gate: bool,
    cluster: &Cluster,
    survivors: [&Replica; 2],
    c: &Replica,
    of_c: &[String],
) {
    c.daemon
        .sim()
        .faults()
        .fail_next_requests(RequestFailure::internal_error(u64::MAX / 2))
        .expect("a valid fault");
    c.daemon.sim().close_watches();
    let cut = Instant::now();
    members_are(&survivors, &["a", "b"]).await;
    let owned_after = cut.elapsed();
    owners(&survivors, of_c, LEASE + Duration::from_secs(10)).await;
    let handled_after = cut.elapsed();
    eprintln!(
        "gate {gate}: the survivors owned c's range {owned_after:?} and had handled its objects {handled_after:?} after the cut"
    );
    // Within lease_duration and two polls (docs/replicas.md's bound), with room for a loaded machine.
    assert!(
        owned_after < LEASE + Duration::from_secs(3),
        "the survivors took over after {owned_after:?}"
    );
    assert!(
        handled_after < LEASE + Duration::from_secs(6),
        "the survivors handled c's objects after {handled_after:?}"
    );
    eventually("c gives up its share", Duration::from_secs(5), async || {
        let status = c.replica_status().await;
        (status["losses"] == 1 && status["shards"]["ranges"] == json!([])).then_some(())
    })
    .await;
    let later = create(cluster, "after-cut", 300);
    let owned = owners(&survivors, &later, Duration::from_secs(20)).await;
    assert!(
        owned.values().all(|o| o.len() == 1),
        "an object created after the cut went to both survivors"
    );
}

/// The third replica joined: the ranges rebalance, it takes its share as `added`, the
/// others let theirs go (the caches split the objects exactly again), and new objects go
/// to one replica each.
async fn joined(cluster: &Cluster, replicas: [&Replica; 3]) {
    let d = replicas[2];
    members_are(&replicas, &["a", "b", "d"]).await;
    eventually("d handles its share", Duration::from_secs(20), async || {
        (d.names().len() > 800).then_some(())
    })
    .await;
    let last = create(cluster, "after-join", 300);
    let owned = owners(&replicas, &last, Duration::from_secs(20)).await;
    assert!(
        owned.values().all(|o| o.len() == 1),
        "an object created after the join went to two replicas"
    );
    assert!(
        owned.values().any(|o| o == &vec![2]),
        "d got none of the new objects"
    );
    caches_partition(&replicas, 3600).await;
}

/// `/metrics` of the replica that joined last, third of three.
async fn replica_metrics(d: &Replica) {
    let metrics = reqwest::get(d.daemon.probes_url("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    for line in [
        "switchyard_replica_info{identity=\"d\",mode=\"sharded\"} 1",
        "\nswitchyard_shard_members 3\n",
        "switchyard_shard_owned_range{range=\"[0xaaaaaaaaaaaaaaaa, 0x10000000000000000)\"} 1",
        // Its value counts this replica's losses, which a loaded machine can cause.
        "\nswitchyard_lease_losses_total ",
    ] {
        assert!(metrics.contains(line), "{line} not in {metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_split_the_objects_and_hand_over_with_the_server_filtering() {
    three_replicas_then_one_cut_off_then_one_added(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_split_the_objects_and_hand_over_with_the_informers_filtering() {
    three_replicas_then_one_cut_off_then_one_added(false).await;
}

/// A replica the API server refuses its member Lease (its Role lost create and update on
/// leases) can no longer own a range: it is not ready, and says why.
#[tokio::test]
async fn a_replica_refused_its_member_lease_is_not_ready_and_says_why() {
    let daemon = TestDaemon::start(&config("a")).await;
    let refused = RequestFailure::forbidden(u64::MAX)
        .only(&["get", "create", "update"])
        .on(&["leases"]);
    daemon.sim().faults().fail_next_requests(refused).unwrap();
    let text = eventually(
        "readyz to fail naming the refused Lease",
        Duration::from_secs(10),
        async || {
            let response = reqwest::get(daemon.url("/readyz?verbose")).await.ok()?;
            let code = response.status().as_u16();
            let text = response.text().await.ok()?;
            (code == 503 && text.contains("[-]lease")).then_some(text)
        },
    )
    .await;
    assert!(
        text.contains(
            "[-]lease: cannot renew Lease default/shard-a: forbidden: injected fault (403)"
        ),
        "{text}"
    );
    daemon.sim().faults().clear();
    eventually("ready", Duration::from_secs(10), async || {
        let ready = reqwest::get(daemon.url("/readyz")).await.ok()?.status() == 200;
        ready.then_some(())
    })
    .await;
    daemon.stop().await;
}
