//! Row (r): a relist of N objects while the churn goes on. The daemon routes every
//! ConfigMap in `default` to the `log-events` plugin (one log line per call: kind, name,
//! resourceVersion). Once it has handled the first list and run steadily for a while, the
//! simulator ends every watch and answers the next one 410 Expired, so the informer's
//! resume fails and it lists again. Measured: the relist's length, the daemon's peak RSS
//! during it against its steady RSS before, `/readyz` sampled every 25 ms against the
//! informer's `synced` in `/status`, and from the log, per object, that no call went
//! backwards in resourceVersion and that every object's state as the simulator has it was
//! delivered (nothing lost).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{Running, peak_rss, reset_peak_rss, rss};
use super::{Admin, Plan, Row, TOKEN, free_port, start_daemon, start_sim};

/// One relist at `n` objects; prints its report (markdown). The daemon runs steadily for
/// the plan's churn time before the relist, and again after it. Panics, after printing the
/// report, if a call went backwards or an object was not delivered.
pub async fn run(plan: &Plan, n: usize) {
    let steady_for = plan.churn;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let (_sim, url) = start_sim(plan, Row::Relist, n, plan.rate, dir.path()).await;
    let port = free_port();
    let mut daemon = start_daemon(plan, Row::Relist, dir.path(), port);
    let admin = Admin {
        client: reqwest::Client::new(),
        base: format!("http://127.0.0.1:{port}"),
    };
    let pid = daemon.pid();
    wait_for_first_list(&admin, &mut daemon, n).await;
    let steady = steady_rss(&pid, steady_for).await;
    reset_peak_rss(&pid);
    let before = Instant::now();
    // The watch ends, and its resume is answered 410 Expired: the informer lists again.
    for (fault, body) in [("expire-watches", r#"{"count": 1}"#), ("close-watches", "")] {
        reqwest::Client::new()
            .post(format!("{url}/_switchyard/faults/{fault}"))
            .body(body)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("the fault is injected");
    }
    let samples = sample_relist(&admin, &mut daemon, steady_for).await;
    let peak = peak_rss(&pid) as f64;
    let delivery = check_delivery(&url, &dir.path().join("daemon.log")).await;
    daemon.check_alive("the daemon");
    let readiness = Readiness::of(&samples);
    let report = format!(
        "- relist: {:.2} s (from the faults to `synced` again), {} restarts of the watch\n\
         - daemon RSS: steady {:.1} MiB (median over {} s), peak during the relist and {} s after {:.1} MiB = {:.2}× steady\n\
         - `/readyz`: {} samples every 25 ms; during the relist {} of {} answered 503; outside it {} of {} did (should be 0)\n\
         - delivery: {} calls logged for {} objects; {} went backwards in resourceVersion, {} repeated one; every one of the {} objects the simulator holds delivered at its version or later: {}; {} objects the simulator no longer holds last delivered as present\n\
         - from the faults to the check: {:.1} s",
        readiness.relist_seconds,
        samples.last().map_or(0, |s| s.restarts),
        steady / f64::from(1 << 20),
        steady_for.as_secs_f64(),
        steady_for.as_secs_f64(),
        peak / f64::from(1 << 20),
        peak / steady,
        samples.len(),
        readiness.during_503,
        readiness.during,
        readiness.outside_503,
        readiness.outside,
        delivery.calls,
        delivery.objects,
        delivery.backwards,
        delivery.repeated,
        delivery.held,
        if delivery.missing == 0 {
            "yes".to_string()
        } else {
            format!("no, {} behind", delivery.missing)
        },
        delivery.stale_present,
        before.elapsed().as_secs_f64(),
    );
    println!("\n**{n} ConfigMaps, a relist under churn**\n\n{report}");
    assert!(
        delivery.backwards == 0 && delivery.missing == 0 && delivery.stale_present == 0,
        "the relist lost or reordered changes"
    );
    assert_eq!(readiness.outside_503, 0, "/readyz 503 outside the relist");
}

/// Waits until the daemon has handled `n` calls and answers `/readyz` 200.
async fn wait_for_first_list(admin: &Admin, daemon: &mut Running, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(1_800);
    loop {
        daemon.check_alive("the daemon");
        assert!(Instant::now() < deadline, "{n} objects not handled in time");
        if admin
            .handled(Row::Relist)
            .await
            .is_some_and(|h| h >= n as u64)
            && admin.ready().await == Some(200)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The median of the daemon's RSS sampled every 100 ms for `steady_for`.
async fn steady_rss(pid: &str, steady_for: Duration) -> f64 {
    let until = Instant::now() + steady_for;
    let mut samples = Vec::new();
    while Instant::now() < until {
        samples.push(rss(pid) as f64);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// One look at the daemon during the relist.
struct Sample {
    at: Duration,
    ready: Option<u16>,
    synced: Option<bool>,
    restarts: u64,
}

/// `/readyz`, then `/status`, every 25 ms, until the informer has been unsynced and synced
/// again and `steady_for` more has passed.
async fn sample_relist(admin: &Admin, daemon: &mut Running, steady_for: Duration) -> Vec<Sample> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(1_800);
    let (mut samples, mut unsynced, mut resynced) = (Vec::new(), false, None::<Instant>);
    while resynced.is_none_or(|at| at.elapsed() < steady_for) {
        daemon.check_alive("the daemon");
        assert!(Instant::now() < deadline, "the relist did not finish");
        let ready = admin.ready().await;
        let status: Option<Value> = admin
            .get("/status")
            .await
            .and_then(|s| serde_json::from_str(&s).ok());
        let informer = status.as_ref().map(|s| &s["informers"][0]);
        let synced = informer.and_then(|i| i["synced"].as_bool());
        unsynced |= synced == Some(false);
        if unsynced && synced == Some(true) && resynced.is_none() {
            resynced = Some(Instant::now());
        }
        samples.push(Sample {
            at: started.elapsed(),
            ready,
            synced,
            restarts: informer.and_then(|i| i["restarts"].as_u64()).unwrap_or(0),
        });
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    samples
}

/// What the samples say about `/readyz` during and outside the relist.
struct Readiness {
    relist_seconds: f64,
    during: usize,
    during_503: usize,
    outside: usize,
    outside_503: usize,
}

impl Readiness {
    /// The relist runs from the first sample whose informer is unsynced to the first synced
    /// one after it (both included: `/readyz` is read just before `/status`).
    fn of(samples: &[Sample]) -> Self {
        let start = samples.iter().position(|s| s.synced == Some(false));
        let end = start.and_then(|s| {
            samples[s..]
                .iter()
                .position(|x| x.synced == Some(true))
                .map(|e| s + e)
        });
        let (start, end) = (start.unwrap_or(0), end.unwrap_or(samples.len() - 1));
        let mut readiness = Readiness {
            relist_seconds: samples[end].at.as_secs_f64(),
            during: 0,
            during_503: 0,
            outside: 0,
            outside_503: 0,
        };
        for (i, sample) in samples.iter().enumerate() {
            let unready = usize::from(sample.ready == Some(503));
            if (start..=end).contains(&i) {
                readiness.during += 1;
                readiness.during_503 += unready;
            } else {
                readiness.outside += 1;
                readiness.outside_503 += unready;
            }
        }
        readiness
    }
}

/// One call the plugin logged.
struct Call {
    rv: u64,
    deleted: bool,
}

/// What the log says about the delivery.
struct Delivery {
    calls: usize,
    objects: usize,
    backwards: usize,
    repeated: usize,
    held: usize,
    missing: usize,
    stale_present: usize,
}

/// Takes the simulator's state, then reads the log until every object in it has been
/// delivered at its version or later (or 120 s pass), and checks each object's calls.
async fn check_delivery(url: &str, log: &Path) -> Delivery {
    let (list_rv, held) = snapshot(url).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let calls = read_calls(log);
        let behind = held
            .iter()
            .filter(|(name, rv)| {
                calls
                    .get(*name)
                    .is_none_or(|c| c.iter().all(|call| call.rv < **rv))
            })
            .count();
        if behind == 0 || Instant::now() > deadline {
            return judge(&calls, &held, list_rv, behind);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Counts what went backwards or repeated, and what the simulator no longer holds but the
/// last call (at or before the snapshot) still showed.
fn judge(
    calls: &HashMap<String, Vec<Call>>,
    held: &HashMap<String, u64>,
    list_rv: u64,
    missing: usize,
) -> Delivery {
    let (mut backwards, mut repeated, mut stale_present) = (0, 0, 0);
    for (name, list) in calls {
        for pair in list.windows(2) {
            // A delete whose final state is unknown repeats the last version seen.
            if pair[1].rv < pair[0].rv {
                backwards += 1;
            } else if pair[1].rv == pair[0].rv && !pair[1].deleted {
                repeated += 1;
            }
        }
        let last = list.iter().rev().find(|c| c.rv <= list_rv);
        if !held.contains_key(name) && last.is_some_and(|c| !c.deleted) {
            let later = list.iter().any(|c| c.rv > list_rv);
            stale_present += usize::from(!later);
        }
    }
    Delivery {
        calls: calls.values().map(Vec::len).sum(),
        objects: calls.len(),
        backwards,
        repeated,
        held: held.len(),
        missing,
        stale_present,
    }
}

/// The ConfigMaps in `default` now: the list's resourceVersion, and each name's version.
async fn snapshot(url: &str) -> (u64, HashMap<String, u64>) {
    let list: Value = reqwest::get(format!("{url}/api/v1/namespaces/default/configmaps"))
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("a list")
        .json()
        .await
        .expect("a list's JSON");
    let version = |v: &Value| v.as_str().and_then(|s| s.parse().ok()).expect("a version");
    let held = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| {
            let meta = &item["metadata"];
            let name = meta["name"].as_str().expect("a name").to_string();
            (name, version(&meta["resourceVersion"]))
        })
        .collect();
    (version(&list["metadata"]["resourceVersion"]), held)
}

/// The calls in the daemon's log, per object name, in the order they were logged.
fn read_calls(log: &Path) -> HashMap<String, Vec<Call>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut calls: HashMap<String, Vec<Call>> = HashMap::new();
    for line in text.lines() {
        let Some((before, after)) = line.split_once(" ConfigMap default/") else {
            continue;
        };
        let Some((name, rest)) = after.split_once(" rv=") else {
            continue;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(rv) = digits.parse() else { continue };
        let deleted = before.ends_with("deleted") || before.ends_with("(final state unknown)");
        calls
            .entry(name.to_string())
            .or_default()
            .push(Call { rv, deleted });
    }
    calls
}

impl Admin {
    /// `/readyz`'s status code.
    async fn ready(&self) -> Option<u16> {
        let response = self
            .client
            .get(format!("{}/readyz", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .ok()?;
        Some(response.status().as_u16())
    }
}
