//! End to end: the whole daemon beside a kube-rs controller, each in a process of its own,
//! against a `switchyard sim` process prefilled with N ConfigMaps of about 1.1 KB and
//! churning 2,000 changes per second (1,000 objects, 1,100 bytes each) in `default`.
//!
//! Rows, each a child process so that its CPU time (utime + stime from /proc/PID/stat) and
//! peak RSS (VmHWM) are its own:
//! - (a0) row (a) run by `SWITCHYARD_PIPELINE_BASELINE` (only when it is set);
//! - (a04) row (a4) run by `SWITCHYARD_PIPELINE_BASELINE` (only when it is set);
//! - (a) `switchyard run`, one route of every ConfigMap in `default` to the `noop` plugin;
//! - (a2) the same with `instance: reuse` (each worker keeps its plugin instance);
//! - (a3) row (a) on two runtime threads (`--threads 2`) instead of one;
//! - (a4) row (a) with `state_dir:` (a redb store in the row's temporary folder): each call
//!   waits for the group commit that holds its event (write-ahead);
//! - (a5) row (a) against a simulator without streaming lists (`--feature-gates
//!   WatchList=false`): the daemon lists in pages, as against an older API server;
//! - (b) the same with a `when:` condition no object meets: listed, decoded, skipped, no call;
//! - (c) a kube-rs `Controller` on ConfigMaps in `default` with a reconcile that does
//!   nothing (this bench binary run again as a child, reporting its reconciles on stdout),
//!   on tokio's default runtime (`Runtime::new`, as `#[tokio::main]`: a thread per core);
//! - (c2) the same controller on a runtime of one worker thread;
//! - (d) serde_json decoding the same list, fetched once in pages of 500 before the clock
//!   starts (no watch, no churn: its simulator does not churn).
//!
//! Each row gets a fresh simulator. The churn starts with the simulator, so the initial
//! list phase overlaps it; that phase ends when the row has handled N objects (handler
//! calls for (a), skipped deltas for (b), reconciles for (c)). Churn's changes count among
//! those N, so listed objects may still wait then: the churn phase begins once the row has
//! worked them off (a whole second in which it handled at most 1.25× the churn rate; at
//! most 60 s; the queue waits of that settling count with the list's), and lasts
//! `SWITCHYARD_PIPELINE_CHURN_SECS` seconds; its CPU time is divided by the changes the
//! simulator made in that time (the difference of its resourceVersion, which every change
//! advances by one). Queue wait quantiles are interpolated
//! within the buckets of `workqueue_queue_duration_seconds`, as Prometheus's
//! `histogram_quantile` does. Rows run interleaved (a, b, c, d, a, b, ...), three rounds.
//!
//! Run: `scripts/build-plugins.sh && cargo bench --bench pipeline`. Environment:
//! `SWITCHYARD_PIPELINE_SIZES` (N, comma-separated, default `20000,100000`),
//! `SWITCHYARD_PIPELINE_CHURN_SECS` (default 30), `SWITCHYARD_PIPELINE_ROUNDS` (default 3),
//! `SWITCHYARD_PIPELINE_ROWS` (the rows to run, e.g. `a,a4`; default all),
//! `SWITCHYARD_PIPELINE_DAEMON` (the `switchyard` binary rows (a)–(b) run, to measure another
//! build of it; default this build's, which also runs the simulator),
//! `SWITCHYARD_PIPELINE_BASELINE` (another build's binary: row (a0) runs row (a) with it,
//! taking turns with the others, so a change is measured before and after in one run).
//! Without `--bench` (as `cargo test --all-targets` runs it) a smoke run with 300 objects.

#![allow(missing_docs)]

#[path = "../common/mod.rs"]
mod common;
mod raw;
mod relist;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::Value;

use common::{
    Running, SimSpec, anon_rss, cell, env_or, free_port, last_line, median_of, peak_rss,
    process_cpu, ratio, reset_peak_rss, rss,
};

/// The variable that makes this binary a child row instead of the bench.
const ROLE: &str = "SWITCHYARD_PIPELINE_ROLE";
/// The simulator's URL, for the decode row.
const URL: &str = "SWITCHYARD_PIPELINE_URL";
const TOKEN: &str = "pipeline-bench-token";
const CHURN_OBJECTS: usize = 1_000;
const OBJECT_SIZE: usize = 1_100;

/// What one run is made of.
struct Plan {
    sizes: Vec<usize>,
    churn: Duration,
    rate: f64,
    rounds: usize,
    rows: Vec<Row>,
    binary: PathBuf,
    /// The binary of the daemon rows.
    daemon: PathBuf,
    /// The binary of row (a0), another build to compare with (before a change).
    baseline: Option<PathBuf>,
    plugins: PathBuf,
}

impl Plan {
    fn from_env() -> Self {
        // `cargo test --all-targets` runs this without `--bench`: then a quick smoke run.
        let measuring = std::env::args().any(|a| a == "--bench");
        let sizes = match std::env::var("SWITCHYARD_PIPELINE_SIZES") {
            Ok(list) if measuring => list
                .split(',')
                .map(|n| {
                    n.trim()
                        .parse()
                        .expect("SWITCHYARD_PIPELINE_SIZES: numbers")
                })
                .collect(),
            _ if measuring => vec![20_000, 100_000],
            _ => vec![300],
        };
        let plugins = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins");
        assert!(
            plugins.join("noop.wasm").exists(),
            "plugins/noop.wasm is missing: run scripts/build-plugins.sh first"
        );
        Plan {
            sizes,
            churn: Duration::from_secs_f64(if measuring {
                env_or("SWITCHYARD_PIPELINE_CHURN_SECS", 30.0)
            } else {
                1.0
            }),
            rate: if measuring { 2_000.0 } else { 200.0 },
            rounds: if measuring {
                env_or("SWITCHYARD_PIPELINE_ROUNDS", 3)
            } else {
                1
            },
            binary: PathBuf::from(env!("CARGO_BIN_EXE_switchyard")),
            daemon: std::env::var_os("SWITCHYARD_PIPELINE_DAEMON").map_or_else(
                || PathBuf::from(env!("CARGO_BIN_EXE_switchyard")),
                PathBuf::from,
            ),
            rows: match std::env::var("SWITCHYARD_PIPELINE_ROWS") {
                Ok(list) => list
                    .split(',')
                    .map(|name| {
                        Row::named(name.trim())
                            .expect("SWITCHYARD_PIPELINE_ROWS: a0, a04, a, a2, a3, a4, a5, b, c, c2, d, s, s5, r")
                    })
                    .collect(),
                // The relist row runs on its own, or in the smoke run.
                Err(_) => Row::ALL
                    .into_iter()
                    .filter(|r| {
                        !matches!(r, Row::Baseline | Row::BaselineState)
                            && (*r != Row::Relist || !measuring)
                    })
                    .collect(),
            },
            baseline: std::env::var_os("SWITCHYARD_PIPELINE_BASELINE").map(PathBuf::from),
            plugins,
        }
    }
}

/// The rows, in the order they take turns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Row {
    Baseline,
    BaselineState,
    Noop,
    Reuse,
    TwoThreads,
    State,
    Paged,
    Skip,
    KubeRs,
    KubeRsOneThread,
    Decode,
    RawStream,
    RawPaged,
    Relist,
}

impl Row {
    const ALL: [Row; 14] = [
        Row::Baseline,
        Row::BaselineState,
        Row::Noop,
        Row::Reuse,
        Row::TwoThreads,
        Row::State,
        Row::Paged,
        Row::Skip,
        Row::KubeRs,
        Row::KubeRsOneThread,
        Row::Decode,
        Row::RawStream,
        Row::RawPaged,
        Row::Relist,
    ];

    fn label(self) -> &'static str {
        match self {
            Row::Baseline => "(a0) row (a) run by the baseline binary",
            Row::BaselineState => "(a04) row (a4) run by the baseline binary",
            Row::Noop => "(a) switchyard, noop plugin",
            Row::Reuse => "(a2) switchyard, noop plugin, instance: reuse",
            Row::TwoThreads => "(a3) switchyard, noop plugin, --threads 2",
            Row::State => "(a4) switchyard, noop plugin, state_dir",
            Row::Paged => "(a5) switchyard, noop plugin, paged lists (server without WatchList)",
            Row::Skip => "(b) switchyard, route skips all",
            Row::KubeRs => "(c) kube-rs Controller, no-op reconcile",
            Row::KubeRsOneThread => "(c2) kube-rs Controller, one runtime thread",
            Row::Decode => "(d) serde_json decode of the list",
            Row::RawStream => "(s) the simulator alone: streaming list to a raw client",
            Row::RawPaged => "(s5) the simulator alone: paged list to a raw client",
            Row::Relist => "(r) switchyard, log-events plugin, a relist forced under churn",
        }
    }

    /// The row whose label starts with `(name)`.
    fn named(name: &str) -> Option<Row> {
        let prefix = format!("({name})");
        Row::ALL
            .into_iter()
            .find(|r| r.label().starts_with(&prefix))
    }
}

/// A simulator with `n` ConfigMaps, churning at `rate`; returns it and its URL.
async fn start_sim(plan: &Plan, row: Row, n: usize, rate: f64, dir: &Path) -> (Running, String) {
    let spec = SimSpec {
        binary: &plan.binary,
        prefill: n,
        rate,
        churn_objects: CHURN_OBJECTS,
        object_size: OBJECT_SIZE,
        // Row (a5): a server that refuses streaming lists, so the daemon lists in pages.
        feature_gates: (row == Row::Paged).then_some("WatchList=false"),
    };
    common::start_sim(&spec, dir).await
}

/// `switchyard run` for row (a), (a2), (a3) or (b), with its admin API on `port`.
fn start_daemon(plan: &Plan, row: Row, dir: &Path, port: u16) -> Running {
    std::fs::write(dir.join("token"), TOKEN).expect("write the token");
    let skip = if row == Row::Skip {
        "    when:\n      - path: metadata.annotations.pipeline-bench-never\n        exists: true\n"
    } else {
        ""
    };
    let instance = if row == Row::Reuse {
        "reuse"
    } else {
        "per-event"
    };
    let state = if matches!(row, Row::State | Row::BaselineState) {
        "state_dir: state\n"
    } else {
        ""
    };
    // Row (r) checks every call from the plugin's log lines.
    let plugin = if row == Row::Relist {
        "log-events"
    } else {
        "noop"
    };
    let config = format!(
        "{state}plugins_dir: {}\nadmin:\n  listen: 127.0.0.1:{port}\n  token_file: token\n\
         handlers:\n  noop:\n    plugin: {plugin}\n    concurrency: 2\n    instance: {instance}\n\
         routes:\n  - name: all\n    resource: configmaps\n    namespaces: [default]\n    handler: noop\n{skip}",
        plan.plugins.display()
    );
    std::fs::write(dir.join("switchyard.yaml"), config).expect("write the config");
    let threads = if row == Row::TwoThreads { "2" } else { "1" };
    let binary = match (row, &plan.baseline) {
        (Row::Baseline | Row::BaselineState, Some(baseline)) => baseline,
        (Row::Baseline | Row::BaselineState, None) => {
            panic!("rows (a0) and (a04) need SWITCHYARD_PIPELINE_BASELINE")
        }
        _ => &plan.daemon,
    };
    let mut command = Command::new(binary);
    command
        .current_dir(dir)
        .env_remove("SWITCHYARD_THREADS")
        .args([
            "run",
            "--config",
            "switchyard.yaml",
            "--kubeconfig",
            "kubeconfig",
            "--threads",
            threads,
        ])
        .stderr(std::fs::File::create(dir.join("daemon.log")).expect("a log file"));
    Running::start(command)
}

/// This bench binary again, as the child for `role`.
fn start_self(role: &str, dir: &Path, url: &str) -> Running {
    let mut command = Command::new(std::env::current_exe().expect("this binary"));
    command
        .env(ROLE, role)
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env(URL, url)
        .stderr(Stdio::inherit());
    Running::start(command)
}

/// The daemon's status and metrics, through its admin API.
struct Admin {
    client: reqwest::Client,
    base: String,
}

impl Admin {
    async fn get(&self, path: &str) -> Option<String> {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .ok()?;
        response.error_for_status().ok()?.text().await.ok()
    }

    /// Objects handled: handler calls done for (a), deltas skipped for (b).
    async fn handled(&self, row: Row) -> Option<u64> {
        let status: Value = serde_json::from_str(&self.get("/status").await?).ok()?;
        // A build that cannot load the bench's plugin (an older daemon's baseline, say)
        // would otherwise wait out the deadline.
        if let Some(error) = status["handlers"][0]["plugin_error"].as_str() {
            panic!("the daemon did not load its plugin: {error}");
        }
        match row {
            Row::Skip => status["routes"][0]["skipped"].as_u64(),
            _ => status["handlers"][0]["processed"].as_u64(),
        }
    }

    /// The cumulative buckets of the histogram `metric`: (upper bound, count).
    async fn buckets_of(&self, metric: &str) -> Vec<(f64, f64)> {
        let text = self.get("/metrics").await.unwrap_or_default();
        let prefix = format!("{metric}_bucket");
        text.lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| {
                let le = l.split("le=\"").nth(1)?.split('"').next()?;
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((bound, l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }
}

/// The `q` quantile of cumulative `buckets`, interpolated linearly within its bucket.
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return Some(lower);
            }
            let share = if count > below {
                (rank - below) / (count - below)
            } else {
                0.0
            };
            return Some(lower + (bound - lower) * share);
        }
        (lower, below) = (bound, count);
    }
    Some(lower)
}

/// `later` minus `earlier`, bucket by bucket.
fn bucket_difference(later: &[(f64, f64)], earlier: &[(f64, f64)]) -> Vec<(f64, f64)> {
    later
        .iter()
        .zip(earlier.iter().map(|e| e.1).chain(std::iter::repeat(0.0)))
        .map(|(&(bound, count), before)| (bound, count - before))
        .collect()
}

/// What one row measured in one round.
#[derive(Default, Clone)]
struct Measured {
    list_wall: f64,
    /// Seconds from the list phase's end until the row had worked off what it left queued.
    settle_wall: f64,
    list_cpu: f64,
    list_handled: f64,
    churn_cpu: f64,
    churn_changes: f64,
    churn_handled: f64,
    churn_wall: f64,
    peak_rss: f64,
    wait_list: Option<(f64, f64)>,
    wait_churn: Option<(f64, f64)>,
    /// With `state_dir`: the state store's commit time (write and sync) in the churn
    /// phase, p50 and p99.
    commits_churn: Option<(f64, f64)>,
    /// The simulator's CPU seconds in the list phase (its churn's included).
    sim_cpu: f64,
    /// How far the simulator's peak RSS in the list phase rose above its RSS before it.
    sim_growth: f64,
    /// Bytes of one object's JSON as a list sends it.
    json_object: f64,
    /// The row's anonymous RSS when the list phase ended (heap and stacks, without the
    /// binary's own pages).
    anon_at_list_end: f64,
}

/// The row's simulator: its URL, and its CPU time and RSS when the row started.
struct SimProcess {
    pid: String,
    url: String,
    cpu: Duration,
    rss: u64,
}

impl SimProcess {
    fn of(sim: &Running, url: &str) -> Self {
        let pid = sim.pid();
        reset_peak_rss(&pid);
        Self {
            cpu: process_cpu(&pid),
            rss: rss(&pid),
            pid,
            url: url.to_string(),
        }
    }

    /// CPU seconds since the row started, and how far the peak RSS rose above the start.
    fn since(&self) -> (f64, f64) {
        let cpu = (process_cpu(&self.pid) - self.cpu).as_secs_f64();
        (cpu, peak_rss(&self.pid).saturating_sub(self.rss) as f64)
    }
}

/// How a row's handled count is read.
enum Source<'a> {
    Admin(&'a Admin, Row),
    Lines(Arc<Mutex<Vec<String>>>),
}

impl Source<'_> {
    async fn handled(&self) -> Option<u64> {
        match self {
            Source::Admin(admin, row) => admin.handled(*row).await,
            Source::Lines(lines) => last_line(lines, "reconciled ")?.parse().ok(),
        }
    }

    /// The queue wait histogram's cumulative buckets.
    async fn buckets(&self) -> Vec<(f64, f64)> {
        self.buckets_of("workqueue_queue_duration_seconds").await
    }

    /// The cumulative buckets of the histogram `metric`, for the daemon's rows.
    async fn buckets_of(&self, metric: &str) -> Vec<(f64, f64)> {
        match self {
            Source::Admin(
                admin,
                Row::Baseline
                | Row::BaselineState
                | Row::Noop
                | Row::Reuse
                | Row::TwoThreads
                | Row::State
                | Row::Paged,
            ) => admin.buckets_of(metric).await,
            _ => Vec::new(),
        }
    }
}

/// The state store's commit histogram (one write and sync of the log per commit).
const STATE_WRITES: &str = "switchyard_state_write_duration_seconds";

fn quantiles(buckets: &[(f64, f64)]) -> Option<(f64, f64)> {
    Some((quantile(buckets, 0.5)?, quantile(buckets, 0.99)?))
}

/// Times a started row (a, b or c) through the list phase and the churn phase.
async fn measure(
    plan: &Plan,
    n: usize,
    child: &mut Running,
    source: Source<'_>,
    started: Instant,
    sim: &SimProcess,
) -> Measured {
    let pid = child.pid();
    let deadline = started + Duration::from_secs(1_800);
    let handled = loop {
        child.check_alive("the row's process");
        assert!(Instant::now() < deadline, "{n} objects not handled in time");
        match source.handled().await {
            Some(h) if h >= n as u64 => break h,
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    let list_wall = started.elapsed().as_secs_f64();
    let list_cpu = process_cpu(&pid);
    let anon_at_list_end = anon_rss(&pid) as f64;
    let (sim_cpu, sim_growth) = sim.since();
    let list_handled = handled as f64;
    let settle_wall = settle(&source, plan.rate, child).await;
    let settled_cpu = process_cpu(&pid);
    let handled = source.handled().await.unwrap_or(handled);
    let list_buckets = source.buckets().await;
    let list_commits = source.buckets_of(STATE_WRITES).await;
    let version_before = sim_version(&sim.url).await;
    let churn_started = Instant::now();
    tokio::time::sleep(plan.churn).await;
    child.check_alive("the row's process");
    let churn_cpu = process_cpu(&pid) - settled_cpu;
    let churn_wall = churn_started.elapsed().as_secs_f64();
    // Every change the simulator makes takes the next resourceVersion: the changes it made,
    // not the ones it was asked for.
    let made = match (version_before, sim_version(&sim.url).await) {
        (Some(before), Some(after)) => (after - before) as f64,
        _ => plan.rate * churn_wall,
    };
    let after = source.handled().await.unwrap_or(handled);
    let churn_buckets = bucket_difference(&source.buckets().await, &list_buckets);
    let churn_commits = bucket_difference(&source.buckets_of(STATE_WRITES).await, &list_commits);
    Measured {
        list_wall,
        list_cpu: list_cpu.as_secs_f64(),
        list_handled,
        settle_wall,
        churn_cpu: churn_cpu.as_secs_f64(),
        churn_changes: made,
        churn_handled: (after - handled) as f64,
        churn_wall,
        peak_rss: peak_rss(&pid) as f64,
        wait_list: quantiles(&list_buckets),
        wait_churn: quantiles(&churn_buckets),
        commits_churn: quantiles(&churn_commits),
        sim_cpu,
        sim_growth,
        json_object: 0.0,
        anon_at_list_end,
    }
}

/// Waits until the row has worked off what the list phase left queued (the list phase ends
/// at N objects handled, churn's changes among them, so up to a churn rate times the list's
/// wall of listed objects may still wait): until it handled at most 1.25× the churn
/// `rate` over a whole second, or 60 s passed. Returns the seconds waited.
async fn settle(source: &Source<'_>, rate: f64, child: &mut Running) -> f64 {
    let started = Instant::now();
    let mut samples = std::collections::VecDeque::new();
    while started.elapsed() < Duration::from_secs(60) {
        child.check_alive("the row's process");
        if let Some(handled) = source.handled().await {
            let now = Instant::now();
            samples.push_back((now, handled));
            while samples.len() > 2 && now - samples[1].0 >= Duration::from_secs(1) {
                samples.pop_front();
            }
            let (then, before) = samples[0];
            let span = (now - then).as_secs_f64();
            if span >= 1.0 && (handled - before) as f64 / span <= 1.25 * rate {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed().as_secs_f64()
}

/// Bytes of one object's JSON as a list sends it (the mean of the first 100).
async fn json_per_object(url: &str) -> f64 {
    let list: Value = reqwest::get(format!(
        "{url}/api/v1/namespaces/default/configmaps?limit=100"
    ))
    .await
    .expect("a list")
    .json()
    .await
    .expect("a list's JSON");
    let items = list["items"].as_array().expect("items");
    let bytes: usize = items
        .iter()
        .map(|i| serde_json::to_vec(i).expect("JSON").len())
        .sum();
    bytes as f64 / items.len().max(1) as f64
}

/// The simulator's current resourceVersion (a one-item list).
async fn sim_version(url: &str) -> Option<u64> {
    let list: Value = reqwest::get(format!(
        "{url}/api/v1/namespaces/default/configmaps?limit=1"
    ))
    .await
    .ok()?
    .json()
    .await
    .ok()?;
    list["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

/// One row at `n` objects, on a fresh simulator.
async fn run_row(plan: &Plan, row: Row, n: usize) -> Measured {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let rate = if row == Row::Decode { 0.0 } else { plan.rate };
    let (sim_process, url) = start_sim(plan, row, n, rate, dir.path()).await;
    let json_object = json_per_object(&url).await;
    let sim = SimProcess::of(&sim_process, &url);
    let started = Instant::now();
    let measured = match row {
        Row::Baseline
        | Row::BaselineState
        | Row::Noop
        | Row::Reuse
        | Row::TwoThreads
        | Row::State
        | Row::Paged
        | Row::Skip => {
            let port = free_port();
            let mut daemon = start_daemon(plan, row, dir.path(), port);
            let admin = Admin {
                client: reqwest::Client::new(),
                base: format!("http://127.0.0.1:{port}"),
            };
            let source = Source::Admin(&admin, row);
            let measured = measure(plan, n, &mut daemon, source, started, &sim).await;
            drop(daemon);
            measured
        }
        Row::KubeRs | Row::KubeRsOneThread => {
            let role = if row == Row::KubeRs {
                "controller"
            } else {
                "controller-one-thread"
            };
            let mut child = start_self(role, dir.path(), &url);
            let source = Source::Lines(child.lines.clone());
            measure(plan, n, &mut child, source, started, &sim).await
        }
        Row::Decode => decode_row(dir.path(), &url).await,
        Row::RawStream | Row::RawPaged => raw_row(row, &sim).await,
        Row::Relist => unreachable!("row (r) reports on its own"),
    };
    Measured {
        json_object,
        ..measured
    }
}

/// Rows (s) and (s5): the simulator's own figures, serving a raw client.
async fn raw_row(row: Row, sim: &SimProcess) -> Measured {
    let received = if row == Row::RawStream {
        raw::streaming(&sim.url).await
    } else {
        raw::paged(&sim.url).await
    };
    let (cpu, growth) = sim.since();
    Measured {
        list_wall: received.wall,
        list_cpu: cpu,
        list_handled: received.objects as f64,
        peak_rss: (sim.rss as f64) + growth,
        sim_cpu: cpu,
        sim_growth: growth,
        ..Measured::default()
    }
}

/// Row (d): the child fetches the list, decodes it, and reports what that took.
async fn decode_row(dir: &Path, url: &str) -> Measured {
    let mut child = start_self("decode", dir, url);
    let line = loop {
        if let Some(line) = child.last("decoded ") {
            break line;
        }
        child.check_alive("the decode row");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let numbers: Vec<f64> = line
        .split(' ')
        .map(|v| v.parse().expect("a number"))
        .collect();
    let [objects, cpu, wall, rss] = numbers[..] else {
        panic!("unexpected report {line:?}")
    };
    Measured {
        list_wall: wall,
        list_cpu: cpu,
        list_handled: objects,
        peak_rss: rss,
        ..Measured::default()
    }
}

/// CPU time the calling thread has run, from /proc/thread-self/schedstat (nanoseconds).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let nanos = stat.split(' ').next().and_then(|v| v.parse().ok());
    Duration::from_nanos(nanos.unwrap_or(0))
}

/// The decode row's child: fetches the ConfigMaps of `default` in pages of 500, then
/// decodes every page on this thread as kube-rs decodes a list, keeping the objects, and
/// prints `decoded OBJECTS CPU_SECONDS WALL_SECONDS PEAK_RSS_BYTES`.
fn decode_child() {
    let url = std::env::var(URL).expect("the simulator's URL");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let pages = runtime.block_on(fetch_pages(&url));
    let (cpu, started) = (thread_cpu(), Instant::now());
    let mut objects: Vec<ConfigMap> = Vec::new();
    for page in &pages {
        let list: kube::core::ObjectList<ConfigMap> =
            serde_json::from_slice(page).expect("a ConfigMap list");
        objects.extend(list.items);
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = (thread_cpu() - cpu).as_secs_f64();
    println!(
        "decoded {} {cpu} {wall} {}",
        objects.len(),
        peak_rss("self")
    );
}

/// A list page's continue token.
#[derive(serde::Deserialize)]
struct PageMeta {
    metadata: PageContinue,
}

#[derive(serde::Deserialize)]
pub(crate) struct PageContinue {
    #[serde(rename = "continue", default)]
    pub(crate) token: Option<String>,
}

/// Every page of the ConfigMaps in `default`, as sent.
async fn fetch_pages(url: &str) -> Vec<bytes::Bytes> {
    let mut pages = Vec::new();
    raw::each_page(url, |body| {
        let meta: PageMeta = serde_json::from_slice(&body).expect("a list");
        pages.push(body);
        meta.metadata.token
    })
    .await;
    pages
}

/// The controller row's child: a kube-rs `Controller` on the ConfigMaps of `default`
/// whose reconcile only counts; prints `reconciled COUNT` whenever the count changed
/// (checked every 20 ms).
async fn controller_child() {
    let client = kube::Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    let count = Arc::new(AtomicU64::new(0));
    let reported = count.clone();
    tokio::spawn(async move {
        let mut last = u64::MAX;
        loop {
            let now = reported.load(Ordering::Relaxed);
            if now != last {
                println!("reconciled {now}");
                last = now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    Controller::new(api, watcher::Config::default())
        .run(reconcile, error_policy, count)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(
    _object: Arc<ConfigMap>,
    count: Arc<AtomicU64>,
) -> Result<Action, std::convert::Infallible> {
    count.fetch_add(1, Ordering::Relaxed);
    Ok(Action::await_change())
}

fn error_policy(
    _object: Arc<ConfigMap>,
    _error: &std::convert::Infallible,
    _count: Arc<AtomicU64>,
) -> Action {
    Action::await_change()
}

fn list_cpu_per_event(m: &Measured) -> Option<f64> {
    Some(m.list_cpu / m.list_handled * 1e6)
}

fn churn_cpu_per_change(m: &Measured) -> Option<f64> {
    (m.churn_changes > 0.0).then(|| m.churn_cpu / m.churn_changes * 1e6)
}

/// The markdown table for `n` objects.
fn print_table(n: usize, results: &[(Row, Vec<Measured>)]) {
    let none = Vec::new();
    let of = |row: Row| results.iter().find(|r| r.0 == row).map_or(&none, |r| &r.1);
    let (kube, kube1, decode) = (of(Row::KubeRs), of(Row::KubeRsOneThread), of(Row::Decode));
    println!(
        "\n**{n} ConfigMaps** (median (min–max) of {} rounds)\n",
        results.first().map_or(0, |r| r.1.len())
    );
    println!(
        "| row | list: wall s | list: objects/s | list: CPU µs/object | churn: CPU µs/change | churn: changes/s made | churn: % of a core | churn: handled/s | peak RSS MiB | RSS KiB/object | queue wait p50 / p99 ms, list | queue wait p50 / p99 ms, churn | list CPU vs (c) | list CPU vs (c2) | list CPU vs (d) | churn CPU vs (c) | churn CPU vs (c2) | RSS vs (c) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (row, rounds) in results {
        let ms = |pair: Option<(f64, f64)>, which: usize| {
            pair.map(|p| if which == 0 { p.0 } else { p.1 } * 1e3)
        };
        let rss = |m: &Measured| Some(m.peak_rss);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} | {} |",
            row.label(),
            cell(rounds, 2, |m| Some(m.list_wall)),
            cell(rounds, 0, |m| Some(m.list_handled / m.list_wall)),
            cell(rounds, 1, list_cpu_per_event),
            cell(rounds, 1, churn_cpu_per_change),
            cell(rounds, 0, |m| (m.churn_changes > 0.0)
                .then(|| m.churn_changes / m.churn_wall)),
            cell(rounds, 1, |m| (m.churn_changes > 0.0)
                .then(|| m.churn_cpu / m.churn_wall * 100.0)),
            cell(rounds, 0, |m| (m.churn_changes > 0.0)
                .then(|| m.churn_handled / m.churn_wall)),
            cell(rounds, 1, |m| Some(m.peak_rss / f64::from(1 << 20))),
            cell(rounds, 2, |m| Some(m.peak_rss / 1024.0 / n as f64)),
            cell(rounds, 2, |m| ms(m.wait_list, 0)),
            cell(rounds, 2, |m| ms(m.wait_list, 1)),
            cell(rounds, 2, |m| ms(m.wait_churn, 0)),
            cell(rounds, 2, |m| ms(m.wait_churn, 1)),
            ratio(
                median_of(rounds, list_cpu_per_event),
                median_of(kube, list_cpu_per_event)
            ),
            ratio(
                median_of(rounds, list_cpu_per_event),
                median_of(kube1, list_cpu_per_event)
            ),
            ratio(
                median_of(rounds, list_cpu_per_event),
                median_of(decode, list_cpu_per_event)
            ),
            ratio(
                median_of(rounds, churn_cpu_per_change),
                median_of(kube, churn_cpu_per_change)
            ),
            ratio(
                median_of(rounds, churn_cpu_per_change),
                median_of(kube1, churn_cpu_per_change)
            ),
            ratio(median_of(rounds, rss), median_of(kube, rss)),
        );
    }
}

/// With `state_dir` rows: their store's commit times in the churn phase, and their CPU
/// beside row (a)'s (the same daemon without a store).
fn print_state_table(results: &[(Row, Vec<Measured>)]) {
    let none = Vec::new();
    let noop = results
        .iter()
        .find(|r| r.0 == Row::Noop)
        .map_or(&none, |r| &r.1);
    let with_state: Vec<_> = results
        .iter()
        .filter(|(_, rounds)| rounds.iter().any(|m| m.commits_churn.is_some()))
        .collect();
    if with_state.is_empty() {
        return;
    }
    println!("\n| row | state commit p50 / p99 ms, churn | list CPU vs (a) | churn CPU vs (a) |");
    println!("|---|---|---|---|");
    let ms =
        |w: Option<(f64, f64)>, which: usize| w.map(|p| if which == 0 { p.0 } else { p.1 } * 1e3);
    for (row, rounds) in with_state {
        println!(
            "| {} | {} / {} | {} | {} |",
            row.label(),
            cell(rounds, 2, |m| ms(m.commits_churn, 0)),
            cell(rounds, 2, |m| ms(m.commits_churn, 1)),
            ratio(
                median_of(rounds, list_cpu_per_event),
                median_of(noop, list_cpu_per_event)
            ),
            ratio(
                median_of(rounds, churn_cpu_per_change),
                median_of(noop, churn_cpu_per_change)
            ),
        );
    }
}

/// The list phase at `n` objects from both ends: the row's process and its simulator.
fn print_list_table(n: usize, results: &[(Row, Vec<Measured>)]) {
    let kube = results
        .iter()
        .find(|r| r.0 == Row::KubeRs)
        .map(|r| r.1.as_slice())
        .unwrap_or_default();
    println!("\n**{n} ConfigMaps, the list phase at both ends** (median (min–max))\n");
    println!(
        "| row | list: wall s | objects/s | CPU µs/object | peak RSS MiB | RSS KiB/object | RSS / JSON held | anonymous RSS / JSON held, at the list's end | JSON bytes/object | simulator: CPU µs/object | simulator: RSS rise MiB | CPU vs (c) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (row, rounds) in results.iter().filter(|r| r.0 != Row::Decode) {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.label(),
            cell(rounds, 2, |m| Some(m.list_wall)),
            cell(rounds, 0, |m| Some(m.list_handled / m.list_wall)),
            cell(rounds, 1, list_cpu_per_event),
            cell(rounds, 1, |m| Some(m.peak_rss / f64::from(1 << 20))),
            cell(rounds, 2, |m| Some(m.peak_rss / 1024.0 / n as f64)),
            cell(rounds, 2, |m| (m.json_object > 0.0)
                .then(|| m.peak_rss / (m.json_object * n as f64))),
            cell(rounds, 2, |m| (m.json_object > 0.0
                && m.anon_at_list_end > 0.0)
                .then(|| m.anon_at_list_end / (m.json_object * n as f64))),
            cell(rounds, 0, |m| Some(m.json_object)),
            cell(rounds, 1, |m| Some(m.sim_cpu / m.list_handled * 1e6)),
            cell(rounds, 1, |m| Some(m.sim_growth / f64::from(1 << 20))),
            ratio(
                median_of(rounds, list_cpu_per_event),
                median_of(kube, list_cpu_per_event)
            ),
        );
    }
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("controller") => {
            let runtime = tokio::runtime::Runtime::new().expect("a runtime");
            return runtime.block_on(controller_child());
        }
        Ok("controller-one-thread") => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a runtime");
            return runtime.block_on(controller_child());
        }
        Ok("decode") => return decode_child(),
        _ => {}
    }
    let plan = Plan::from_env();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "ConfigMaps of {OBJECT_SIZE} bytes of data in `default`; churn {} changes/s over {CHURN_OBJECTS} objects, {:?} after the list; {} CPUs; {}; daemon {}",
        plan.rate,
        plan.churn,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        plan.binary.display(),
        plan.daemon.display()
    );
    for &n in &plan.sizes {
        if plan.rows.contains(&Row::Relist) {
            for _ in 1..=plan.rounds {
                runtime.block_on(relist::run(&plan, n));
            }
        }
        let mut results: Vec<(Row, Vec<Measured>)> = plan
            .rows
            .iter()
            .filter(|r| **r != Row::Relist)
            .map(|&r| (r, Vec::new()))
            .collect();
        for round in 1..=plan.rounds {
            for (row, rounds) in &mut results {
                let took = Instant::now();
                let measured = runtime.block_on(run_row(&plan, *row, n));
                eprintln!(
                    "N={n} round {round} {}: {:.1} s (settled {:.1} s after the list)",
                    row.label(),
                    took.elapsed().as_secs_f64(),
                    measured.settle_wall,
                );
                rounds.push(measured);
            }
        }
        if !results.is_empty() {
            print_table(n, &results);
            print_state_table(&results);
            print_list_table(n, &results);
        }
    }
}
