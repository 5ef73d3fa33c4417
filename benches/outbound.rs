//! Outbound delivery end to end: every ConfigMap change posted to an HTTP receiver, by the
//! `webhook` sink plugin in `switchyard run` beside what a user would write instead, each
//! in a process of its own against a `switchyard sim` process prefilled with N ConfigMaps.
//!
//! Rows:
//! - (w) `switchyard run`: one route of every added or updated ConfigMap in `default` to a
//!   handler running the `webhook` sink (`concurrency: 8`, `quarantine_backoff: 5s`, the
//!   other settings their defaults: a failing receiver quarantines the handler, its events
//!   wait in the queue, and one call every 5 s tries it again), posting `{"name", "serial"}`
//!   through its body template, a fresh plugin instance for each event (the default);
//! - (r) the same with `instance: reuse` (each worker keeps its instance: the webhook sink
//!   keeps nothing from one event to the next);
//! - (b) the same as (w) in batches: `batch: {max_events: 100, max_wait: 50ms}` and
//!   `batch_format: ndjson`, one request carrying up to 100 changes' bodies;
//! - (b0) row (b) run by another build's binary, `SWITCHYARD_OUTBOUND_BASELINE` (only in
//!   `SWITCHYARD_OUTBOUND_ROWS`), so a change is measured before and after in one run;
//! - (e) a kube-rs `Controller` on the same ConfigMaps whose reconcile posts the same body
//!   with reqwest (one pooled client) and, on any failure, is requeued after a second (its
//!   `error_policy`): this bench binary run again as a child.
//!
//! The receiver runs in this process on a thread of its own. Phases, one after the other:
//! 1. list: until the receiver has every `prefill-*` object (wall time, CPU per object);
//! 2. churn: this process updates 1,000 ConfigMaps `bench-N` at 2,000 changes a second
//!    (merge patches setting `data.serial`, up to 64 in flight) for
//!    `SWITCHYARD_OUTBOUND_CHURN_SECS`: CPU per delivered request and per change made,
//!    change → receiver latency p50/p99 (from the patch being sent to the request arriving,
//!    both timed in this process), requests delivered a second;
//! 3. outage: the receiver answers 503 for `SWITCHYARD_OUTBOUND_OUTAGE_SECS` while the
//!    changes go on, then 200 again: how long after recovery until every object was
//!    delivered in the state it had at recovery or a newer one;
//! 4. end: the changes stop; once every object's final state (its serial as the API
//!    server has it after the last patch was answered) arrived (or 60 s passed;
//!    for (w) and (r) also every change, or `SWITCHYARD_OUTBOUND_EVERY_CHANGE_SECS` more,
//!    default 60), changes never delivered (a change is
//!    delivered when a request carrying its serial was answered 200) and objects whose
//!    last change was never delivered.
//!
//! A kube-rs controller reconciles the latest state of an object, not each change, so (e)
//! skips changes by design; its "objects whose last change was lost" is what it promises.
//!
//! Run: `scripts/build-plugins.sh && cargo bench --bench outbound`. Environment:
//! `SWITCHYARD_OUTBOUND_SIZE` (N, default 20000), `SWITCHYARD_OUTBOUND_CHURN_SECS`
//! (default 20), `SWITCHYARD_OUTBOUND_OUTAGE_SECS` (default 30), `SWITCHYARD_OUTBOUND_ROUNDS`
//! (default 3), `SWITCHYARD_OUTBOUND_ROWS` (e.g. `w,b`; default `w,r,b,e`),
//! `SWITCHYARD_OUTBOUND_LATENCY_FILE` (a CSV file each churn phase's deliveries are appended
//! to: row, arrival in s since the churn began, latency ms, ms after the API server's answer).
//! A second table splits the latency at the API server's answer to the patch.
//! Without `--bench` (as `cargo test --all-targets` runs it) a smoke run with 200 objects.

#![allow(missing_docs)]

#[path = "common/mod.rs"]
mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::{Value, json};

use common::{Running, SimSpec, cell, env_or, free_port, median_of, peak_rss, process_cpu, ratio};

/// The variable that makes this binary the controller row's child.
const ROLE: &str = "SWITCHYARD_OUTBOUND_ROLE";
/// The receiver's URL, for the controller row.
const RECEIVER: &str = "SWITCHYARD_OUTBOUND_RECEIVER";
const TOKEN: &str = "outbound-bench-token";
const OBJECT_SIZE: usize = 1_100;
const CHANGED_OBJECTS: usize = 1_000;
const IN_FLIGHT: usize = 64;

/// What one run is made of.
#[derive(Clone)]
struct Plan {
    size: usize,
    rate: f64,
    churn: Duration,
    outage: Duration,
    /// How long a switchyard row may take, once every object's final state arrived, to
    /// deliver every change (none in the smoke run: `latest` delivery coalesces them).
    every_change: Duration,
    rounds: usize,
    rows: Vec<Row>,
    binary: PathBuf,
    /// `SWITCHYARD_OUTBOUND_BASELINE`: another build's binary, for row (b0).
    baseline: Option<PathBuf>,
    plugins: PathBuf,
}

impl Plan {
    fn from_env() -> Self {
        let measuring = std::env::args().any(|a| a == "--bench");
        let plugins = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins");
        assert!(
            plugins.join("webhook.wasm").exists(),
            "plugins/webhook.wasm is missing: run scripts/build-plugins.sh first"
        );
        let secs = |name, default: f64, smoke: f64| {
            Duration::from_secs_f64(if measuring {
                env_or(name, default)
            } else {
                smoke
            })
        };
        Plan {
            size: if measuring {
                env_or("SWITCHYARD_OUTBOUND_SIZE", 20_000)
            } else {
                200
            },
            rate: if measuring { 2_000.0 } else { 200.0 },
            churn: secs("SWITCHYARD_OUTBOUND_CHURN_SECS", 20.0, 1.0),
            outage: secs("SWITCHYARD_OUTBOUND_OUTAGE_SECS", 30.0, 1.0),
            every_change: secs("SWITCHYARD_OUTBOUND_EVERY_CHANGE_SECS", 60.0, 0.0),
            rounds: if measuring {
                env_or("SWITCHYARD_OUTBOUND_ROUNDS", 3)
            } else {
                1
            },
            rows: match std::env::var("SWITCHYARD_OUTBOUND_ROWS") {
                Ok(list) => list
                    .split(',')
                    .map(|n| Row::named(n.trim()).expect("SWITCHYARD_OUTBOUND_ROWS: w, r, e"))
                    .collect(),
                Err(_) => vec![Row::Webhook, Row::Reuse, Row::Batch, Row::KubeRs],
            },
            binary: PathBuf::from(env!("CARGO_BIN_EXE_switchyard")),
            baseline: std::env::var_os("SWITCHYARD_OUTBOUND_BASELINE").map(PathBuf::from),
            plugins,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Row {
    Webhook,
    Reuse,
    Batch,
    /// (b) run by `SWITCHYARD_OUTBOUND_BASELINE`.
    BatchBaseline,
    KubeRs,
}

impl Row {
    fn label(self) -> &'static str {
        match self {
            Row::Webhook => "(w) switchyard, webhook sink",
            Row::Reuse => "(r) switchyard, webhook sink, instance: reuse",
            Row::Batch => "(b) switchyard, webhook sink in batches of up to 100 (ndjson)",
            Row::BatchBaseline => "(b0) row (b) run by the baseline build",
            Row::KubeRs => "(e) kube-rs Controller posting with reqwest",
        }
    }

    fn named(name: &str) -> Option<Row> {
        [
            Row::Webhook,
            Row::Reuse,
            Row::Batch,
            Row::BatchBaseline,
            Row::KubeRs,
        ]
        .into_iter()
        .find(|r| r.label().starts_with(&format!("({name})")))
    }
}

/// What the receiver has seen.
#[derive(Default)]
struct Seen {
    /// `prefill-*` objects delivered.
    prefill: HashSet<String>,
    /// Serials delivered.
    delivered: HashSet<u64>,
    /// The newest serial delivered of each object.
    newest: HashMap<String, u64>,
    /// (arrival, latency in seconds, serial) of each serial's first delivery.
    latencies: Vec<(Instant, f64, u64)>,
    /// Changes' bodies answered 200: one a request, or each line of a batch.
    ok: u64,
    /// Requests answered 503.
    refused: u64,
}

/// The receiver's state, shared with the bench.
#[derive(Default)]
struct Receiver {
    failing: AtomicBool,
    /// When each serial's change was sent, by the writer.
    made: Mutex<HashMap<u64, Instant>>,
    /// When the API server answered each serial's patch.
    answered: Mutex<HashMap<u64, Instant>>,
    seen: Mutex<Seen>,
}

/// Answers one request: 503 while failing, else records it and answers 200.
async fn receive(State(receiver): State<Arc<Receiver>>, body: axum::body::Bytes) -> StatusCode {
    let now = Instant::now();
    let mut seen = receiver.seen.lock().unwrap();
    if receiver.failing.load(Ordering::Relaxed) {
        seen.refused += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    // One body, or a batch: one body a line (ndjson).
    for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        seen.ok += 1;
        if let Ok(body) = serde_json::from_slice::<Value>(line) {
            record(&receiver, &mut seen, &body, now);
        }
    }
    StatusCode::OK
}

/// Records one change's body `{"name", "serial"}`, received at `now`.
fn record(receiver: &Receiver, seen: &mut Seen, body: &Value, now: Instant) {
    let name = body["name"].as_str().unwrap_or_default();
    if name.starts_with("prefill-") {
        seen.prefill.insert(name.to_string());
    }
    let serial = body["serial"].as_str().and_then(|s| s.parse::<u64>().ok());
    if let Some(serial) = serial {
        let newest = seen.newest.entry(name.to_string()).or_default();
        *newest = (*newest).max(serial);
    }
    if let Some(serial) = serial.filter(|s| *s > 0)
        && seen.delivered.insert(serial)
        && let Some(made) = receiver.made.lock().unwrap().get(&serial)
    {
        seen.latencies
            .push((now, (now - *made).as_secs_f64(), serial));
    }
}

/// Starts the receiver on a thread of its own; returns its state and URL.
fn start_receiver() -> (Arc<Receiver>, String) {
    let receiver = Arc::new(Receiver::default());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let state = receiver.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let app = axum::Router::new().fallback(receive).with_state(state);
            axum::serve(listener, app).await.expect("serve");
        });
    });
    (receiver, url)
}

/// The changes this process makes: merge patches to `bench-N`, each setting a new serial.
struct Writer {
    stop: Arc<AtomicBool>,
    serial: Arc<AtomicU64>,
    /// The last serial sent to each object.
    last: Arc<Mutex<HashMap<String, u64>>>,
    /// One per patch in flight.
    permits: Arc<tokio::sync::Semaphore>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    /// Creates the objects `bench-0` … (serial 0, so not counted).
    async fn create_objects(client: &reqwest::Client, sim: &str) {
        for i in 0..CHANGED_OBJECTS {
            let object =
                json!({"metadata": {"name": format!("bench-{i}")}, "data": {"serial": "0"}});
            client
                .post(format!("{sim}/api/v1/namespaces/default/configmaps"))
                .json(&object)
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .expect("create a bench object");
        }
    }

    /// Starts changing at `rate` a second.
    fn start(client: reqwest::Client, sim: String, rate: f64, receiver: Arc<Receiver>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let serial = Arc::new(AtomicU64::new(0));
        let last = Arc::new(Mutex::new(HashMap::new()));
        let (s, n, l) = (stop.clone(), serial.clone(), last.clone());
        let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        let permits_task = permits.clone();
        let task = tokio::spawn(async move {
            let permits = permits_task;
            let started = Instant::now();
            let mut ticker = tokio::time::interval(Duration::from_millis(1));
            let mut done = 0u64;
            while !s.load(Ordering::Relaxed) {
                ticker.tick().await;
                let due = (started.elapsed().as_secs_f64() * rate) as u64;
                while done < due {
                    done += 1;
                    let serial = n.fetch_add(1, Ordering::Relaxed) + 1;
                    let name = format!("bench-{}", rand::random_range(0..CHANGED_OBJECTS));
                    l.lock().unwrap().insert(name.clone(), serial);
                    let permit = permits.clone().acquire_owned().await.expect("permits");
                    receiver.made.lock().unwrap().insert(serial, Instant::now());
                    let request = client
                        .patch(format!("{sim}/api/v1/namespaces/default/configmaps/{name}"))
                        .header("content-type", "application/merge-patch+json")
                        .body(json!({"data": {"serial": serial.to_string()}}).to_string());
                    let receiver = receiver.clone();
                    tokio::spawn(async move {
                        if request.send().await.is_ok() {
                            let now = Instant::now();
                            receiver.answered.lock().unwrap().insert(serial, now);
                        }
                        drop(permit);
                    });
                }
            }
        });
        Writer {
            stop,
            serial,
            last,
            permits,
            task,
        }
    }

    fn made(&self) -> u64 {
        self.serial.load(Ordering::Relaxed)
    }

    /// The last serial sent to each object so far.
    fn last(&self) -> HashMap<String, u64> {
        self.last.lock().unwrap().clone()
    }

    /// Stops, waits for the patches in flight, and returns how many changes were made and
    /// each object's serial as the API server has it now: two patches of one object in
    /// flight at once may be applied in either order, so the last one sent need not be the
    /// object's final state.
    async fn stop(self, client: &reqwest::Client, sim: &str) -> (u64, HashMap<String, u64>) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let _all = self.permits.acquire_many(IN_FLIGHT as u32).await;
        let list: Value = client
            .get(format!("{sim}/api/v1/namespaces/default/configmaps"))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .expect("list the ConfigMaps")
            .json()
            .await
            .expect("a list");
        let last = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| {
                let name = o["metadata"]["name"].as_str()?;
                let serial = o["data"]["serial"].as_str()?.parse::<u64>().ok()?;
                (name.starts_with("bench-") && serial > 0).then(|| (name.to_string(), serial))
            })
            .collect();
        (self.serial.load(Ordering::Relaxed), last)
    }
}

/// `switchyard run` with the webhook sink posting to `receiver`, with `instance`
/// (`per-event` or `reuse`), in batches with `batched`.
fn start_daemon(
    plan: &Plan,
    dir: &Path,
    port: u16,
    receiver: &str,
    (instance, batched): (&str, bool),
) -> Running {
    std::fs::write(dir.join("token"), TOKEN).expect("write the token");
    let config = format!(
        "plugins_dir: {plugins}\nadmin:\n  listen: 127.0.0.1:{port}\n  token_file: token\n\
         handlers:\n  hook:\n    plugin: webhook\n    instance: {instance}\n    concurrency: 8\n\
         \x20   quarantine_backoff: 5s\n{batch}\
         \x20   config:\n      url: {receiver}/hook\n{format}\
         \x20     body: {{name: \"{{{{object.metadata.name}}}}\", serial: \"{{{{object.data.serial}}}}\"}}\n\
         \x20   capabilities:\n      http: [\"{receiver}\"]\n\
         routes:\n  - name: all\n    resource: configmaps\n    namespaces: [default]\n\
         \x20   events: [added, updated]\n    handler: hook\n",
        plugins = plan.plugins.display(),
        batch = if batched {
            "    batch: {max_events: 100, max_wait: 50ms}\n"
        } else {
            ""
        },
        format = if batched {
            "      batch_format: ndjson\n"
        } else {
            ""
        },
    );
    std::fs::write(dir.join("switchyard.yaml"), config).expect("write the config");
    let mut command = Command::new(&plan.binary);
    command
        .current_dir(dir)
        .env_remove("SWITCHYARD_THREADS")
        .args([
            "run",
            "--config",
            "switchyard.yaml",
            "--kubeconfig",
            "kubeconfig",
        ])
        .stderr(std::fs::File::create(dir.join("daemon.log")).expect("a log file"));
    Running::start(command)
}

/// This bench binary again, as the controller row's child.
fn start_controller(dir: &Path, receiver: &str) -> Running {
    let mut command = Command::new(std::env::current_exe().expect("this binary"));
    command
        .env(ROLE, "controller")
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env(RECEIVER, receiver)
        .stderr(Stdio::null());
    Running::start(command)
}

/// What one row measured in one round.
#[derive(Default, Clone)]
struct Measured {
    list_wall: f64,
    list_cpu_per_object: f64,
    churn_cpu: f64,
    churn_made: f64,
    churn_delivered: f64,
    churn_wall: f64,
    latency: Option<(f64, f64)>,
    /// Latency p50/p99 from the API server's answer to the patch (negative where the
    /// request arrived first).
    after_answer: Option<(f64, f64)>,
    /// The share of delivered changes that took over 20 ms.
    over_20ms: f64,
    drained: Option<f64>,
    lost_changes: f64,
    lost_objects: f64,
    peak_rss: f64,
}

/// The `q` quantile of `values` (sorted in place).
fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let last = values.len().checked_sub(1)?;
    Some(values[((last as f64) * q).round() as usize])
}

/// Waits until `done` holds or `limit` passes; returns how long it took, if it held.
async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> Option<f64> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if done() {
            return Some(started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Whether every object of `last` was delivered at its serial there or a newer one.
fn caught_up(seen: &Seen, last: &HashMap<String, u64>) -> bool {
    last.iter()
        .all(|(name, serial)| seen.newest.get(name).is_some_and(|n| n >= serial))
}

/// Keeps the daemon's log of a round that did not drain (the temporary folder goes with
/// the round) as `target/outbound-bench/daemon-N.log`, and says where.
fn keep_log(dir: &Path, row: Row) {
    if row == Row::KubeRs {
        return;
    }
    let kept = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/outbound-bench");
    let _ = std::fs::create_dir_all(&kept);
    let n = std::fs::read_dir(&kept).map_or(0, |d| d.count());
    let to = kept.join(format!("daemon-{n}.log"));
    if std::fs::copy(dir.join("daemon.log"), &to).is_ok() {
        eprintln!(
            "{}: did not drain; its log is {}",
            row.label(),
            to.display()
        );
    }
}

/// The churn phase's latencies: change → receiver, and from the API server's answer on.
struct Latencies {
    total: Option<(f64, f64)>,
    after_answer: Option<(f64, f64)>,
    over_20ms: f64,
}

impl Latencies {
    /// From the first deliveries that arrived since `since` (arrival, latency, serial);
    /// with `SWITCHYARD_OUTBOUND_LATENCY_FILE` set, also appends each as a CSV line
    /// `row,arrival s since the churn began,latency ms,ms after the API server's answer`.
    fn of(window: &[(Instant, f64, u64)], receiver: &Receiver, since: Instant, row: Row) -> Self {
        let answered = receiver.answered.lock().unwrap();
        let signed = |a: Instant, b: Instant| {
            a.saturating_duration_since(b).as_secs_f64()
                - b.saturating_duration_since(a).as_secs_f64()
        };
        let lines: Vec<(f64, f64, Option<f64>)> = window
            .iter()
            .map(|(at, l, serial)| {
                (
                    signed(*at, since),
                    *l,
                    answered.get(serial).map(|a| signed(*at, *a)),
                )
            })
            .collect();
        if let Ok(path) = std::env::var("SWITCHYARD_OUTBOUND_LATENCY_FILE") {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("open the latency file");
            for (at, l, a) in &lines {
                let a = a.map_or(String::new(), |a| format!("{:.3}", a * 1e3));
                let _ = writeln!(file, "{},{at:.4},{:.3},{a}", row.label(), l * 1e3);
            }
        }
        let mut total: Vec<f64> = lines.iter().map(|l| l.1).collect();
        let mut after: Vec<f64> = lines.iter().filter_map(|l| l.2).collect();
        let over = total.iter().filter(|l| **l > 0.020).count() as f64;
        Latencies {
            over_20ms: over / total.len().max(1) as f64,
            total: quantile(&mut total, 0.5).zip(quantile(&mut total, 0.99)),
            after_answer: quantile(&mut after, 0.5).zip(quantile(&mut after, 0.99)),
        }
    }
}

/// One row on a fresh simulator and receiver.
async fn run_row(plan: &Plan, row: Row) -> Measured {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let spec = SimSpec {
        binary: &plan.binary,
        prefill: plan.size,
        rate: 0.0,
        churn_objects: 1,
        object_size: OBJECT_SIZE,
        feature_gates: None,
    };
    let (_sim, sim) = common::start_sim(&spec, dir.path()).await;
    let client = reqwest::Client::new();
    Writer::create_objects(&client, &sim).await;
    let (receiver, url) = start_receiver();
    let started = Instant::now();
    let mut child = match row {
        Row::Webhook => start_daemon(plan, dir.path(), free_port(), &url, ("per-event", false)),
        Row::Reuse => start_daemon(plan, dir.path(), free_port(), &url, ("reuse", false)),
        Row::Batch => start_daemon(plan, dir.path(), free_port(), &url, ("per-event", true)),
        Row::BatchBaseline => {
            let baseline = plan
                .baseline
                .as_ref()
                .expect("row (b0) needs SWITCHYARD_OUTBOUND_BASELINE");
            let plan = Plan {
                binary: baseline.clone(),
                ..plan.clone()
            };
            start_daemon(&plan, dir.path(), free_port(), &url, ("per-event", true))
        }
        Row::KubeRs => start_controller(dir.path(), &url),
    };
    let pid = child.pid();
    let n = plan.size;
    let listed = wait_for(Duration::from_secs(600), || {
        child.check_alive(row.label());
        receiver.seen.lock().unwrap().prefill.len() >= n
    })
    .await;
    assert!(
        listed.is_some(),
        "{}: {n} objects not delivered",
        row.label()
    );
    let list_wall = started.elapsed().as_secs_f64();
    let list_cpu = process_cpu(&pid);

    let writer = Writer::start(client.clone(), sim.clone(), plan.rate, receiver.clone());
    let (ok_before, churn_started) = (receiver.seen.lock().unwrap().ok, Instant::now());
    tokio::time::sleep(plan.churn).await;
    let churn_cpu = process_cpu(&pid) - list_cpu;
    let churn_wall = churn_started.elapsed().as_secs_f64();
    let churn_made = writer.made() as f64;
    let (churn_delivered, window) = {
        let seen = receiver.seen.lock().unwrap();
        let window = seen
            .latencies
            .iter()
            .filter(|(at, ..)| *at >= churn_started);
        (
            (seen.ok - ok_before) as f64,
            window.copied().collect::<Vec<_>>(),
        )
    };
    let latencies = Latencies::of(&window, &receiver, churn_started, row);

    receiver.failing.store(true, Ordering::Relaxed);
    tokio::time::sleep(plan.outage).await;
    receiver.failing.store(false, Ordering::Relaxed);
    // Drained: every object delivered at least as new as it was at recovery (a
    // controller's promise; the changes in between are counted at the end).
    let at_recovery = writer.last();
    let drained = wait_for(Duration::from_secs(120), || {
        caught_up(&receiver.seen.lock().unwrap(), &at_recovery)
    })
    .await;
    let (made, last) = writer.stop(&client, &sim).await;
    let _ = wait_for(Duration::from_secs(60), || {
        caught_up(&receiver.seen.lock().unwrap(), &last)
    })
    .await;
    if row != Row::KubeRs {
        let _ = wait_for(plan.every_change, || {
            let seen = receiver.seen.lock().unwrap();
            (1..=made).all(|s| seen.delivered.contains(&s))
        })
        .await;
    }
    child.check_alive(row.label());
    let seen = receiver.seen.lock().unwrap();
    let lost_changes = (1..=made).filter(|s| !seen.delivered.contains(s)).count();
    let lost_objects = last
        .iter()
        .filter(|(name, serial)| seen.newest.get(*name).is_none_or(|n| n < *serial))
        .count();
    if drained.is_none() || lost_objects > 0 {
        keep_log(dir.path(), row);
        let lost: Vec<String> = last
            .iter()
            .filter(|(name, serial)| seen.newest.get(*name).is_none_or(|n| n < *serial))
            .take(5)
            .map(|(name, serial)| format!("{name}: {serial}, seen {:?}", seen.newest.get(name)))
            .collect();
        eprintln!("{}: last changes never delivered: {lost:?}", row.label());
    }
    Measured {
        list_wall,
        list_cpu_per_object: list_cpu.as_secs_f64() / n as f64 * 1e6,
        churn_cpu: churn_cpu.as_secs_f64(),
        churn_made,
        churn_delivered,
        churn_wall,
        latency: latencies.total,
        after_answer: latencies.after_answer,
        over_20ms: latencies.over_20ms,
        drained,
        lost_changes: lost_changes as f64,
        lost_objects: lost_objects as f64,
        peak_rss: peak_rss(&pid) as f64,
    }
}

/// The controller row's child: a kube-rs `Controller` on the ConfigMaps of `default` whose
/// reconcile posts `{"name", "serial"}` to the receiver, requeued after a second on failure.
async fn controller_child() {
    let client = kube::Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    let context = Arc::new(Poster {
        client: reqwest::Client::new(),
        url: format!(
            "{}/hook",
            std::env::var(RECEIVER).expect("the receiver's URL")
        ),
    });
    Controller::new(api, watcher::Config::default())
        .run(post, requeue, context)
        .for_each(|_| async {})
        .await;
}

struct Poster {
    client: reqwest::Client,
    url: String,
}

async fn post(object: Arc<ConfigMap>, poster: Arc<Poster>) -> Result<Action, reqwest::Error> {
    let serial = object
        .data
        .as_ref()
        .and_then(|d| d.get("serial"))
        .cloned()
        .unwrap_or_default();
    let body = json!({"name": object.metadata.name, "serial": serial});
    poster
        .client
        .post(&poster.url)
        .json(&body)
        .send()
        .await?
        .error_for_status()?;
    Ok(Action::await_change())
}

fn requeue(_object: Arc<ConfigMap>, _error: &reqwest::Error, _poster: Arc<Poster>) -> Action {
    Action::requeue(Duration::from_secs(1))
}

fn churn_cpu_per_delivered(m: &Measured) -> Option<f64> {
    (m.churn_delivered > 0.0).then(|| m.churn_cpu / m.churn_delivered * 1e6)
}

fn churn_cpu_per_change(m: &Measured) -> Option<f64> {
    (m.churn_made > 0.0).then(|| m.churn_cpu / m.churn_made * 1e6)
}

/// The markdown table.
fn print_table(plan: &Plan, results: &[(Row, Vec<Measured>)]) {
    let none = Vec::new();
    let kube = results
        .iter()
        .find(|r| r.0 == Row::KubeRs)
        .map_or(&none, |r| &r.1);
    println!(
        "\n**{} ConfigMaps, {} changes/s, {:?} outage** (median (min–max) of {} rounds)\n",
        plan.size,
        plan.rate,
        plan.outage,
        results.first().map_or(0, |r| r.1.len())
    );
    println!(
        "| row | list: wall s | list: delivered/s | list: CPU µs/object | churn: CPU µs/delivered | churn: CPU µs/change made | churn: delivered/s | latency p50 / p99 ms | outage: drained s after recovery | changes never delivered | objects whose last change was never delivered | peak RSS MiB | churn CPU/delivered vs (e) | churn CPU/change vs (e) | churn CPU/delivered vs (w) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let webhook = results
        .iter()
        .find(|r| r.0 == Row::Webhook)
        .map_or(&none, |r| &r.1);
    for (row, rounds) in results {
        let ms = |m: &Measured, which: usize| {
            m.latency.map(|p| if which == 0 { p.0 } else { p.1 } * 1e3)
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} |",
            row.label(),
            cell(rounds, 2, |m: &Measured| Some(m.list_wall)),
            cell(rounds, 0, |m: &Measured| Some(
                plan.size as f64 / m.list_wall
            )),
            cell(rounds, 1, |m: &Measured| Some(m.list_cpu_per_object)),
            cell(rounds, 1, churn_cpu_per_delivered),
            cell(rounds, 1, churn_cpu_per_change),
            cell(rounds, 0, |m: &Measured| Some(
                m.churn_delivered / m.churn_wall
            )),
            cell(rounds, 1, |m: &Measured| ms(m, 0)),
            cell(rounds, 1, |m: &Measured| ms(m, 1)),
            cell(rounds, 1, |m: &Measured| m.drained),
            cell(rounds, 0, |m: &Measured| Some(m.lost_changes)),
            cell(rounds, 0, |m: &Measured| Some(m.lost_objects)),
            cell(rounds, 1, |m: &Measured| Some(
                m.peak_rss / f64::from(1 << 20)
            )),
            ratio(
                median_of(rounds, churn_cpu_per_delivered),
                median_of(kube, churn_cpu_per_delivered)
            ),
            ratio(
                median_of(rounds, churn_cpu_per_change),
                median_of(kube, churn_cpu_per_change)
            ),
            ratio(
                median_of(rounds, churn_cpu_per_delivered),
                median_of(webhook, churn_cpu_per_delivered)
            ),
        );
    }
}

/// Where the latency goes: from the API server's answer to the patch on (the daemon or
/// controller, the receiver), and how many changes took over 20 ms.
fn print_latency_table(results: &[(Row, Vec<Measured>)]) {
    println!(
        "\n| row | latency p50 / p99 ms | from the API server's answer p50 / p99 ms | changes over 20 ms, % |"
    );
    println!("|---|---|---|---|");
    for (row, rounds) in results {
        let ms = |p: Option<(f64, f64)>, which: usize| {
            p.map(|p| if which == 0 { p.0 } else { p.1 } * 1e3)
        };
        println!(
            "| {} | {} / {} | {} / {} | {} |",
            row.label(),
            cell(rounds, 1, |m: &Measured| ms(m.latency, 0)),
            cell(rounds, 1, |m: &Measured| ms(m.latency, 1)),
            cell(rounds, 1, |m: &Measured| ms(m.after_answer, 0)),
            cell(rounds, 1, |m: &Measured| ms(m.after_answer, 1)),
            cell(rounds, 2, |m: &Measured| Some(m.over_20ms * 100.0)),
        );
    }
}

fn main() {
    if std::env::var(ROLE).as_deref() == Ok("controller") {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        return runtime.block_on(controller_child());
    }
    let plan = Plan::from_env();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "{} ConfigMaps of {OBJECT_SIZE} bytes in `default`; {} changes/s to {CHANGED_OBJECTS} of them for {:?}, then a {:?} outage; {} CPUs; {}",
        plan.size,
        plan.rate,
        plan.churn,
        plan.outage,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        plan.binary.display()
    );
    let mut results: Vec<(Row, Vec<Measured>)> =
        plan.rows.iter().map(|&r| (r, Vec::new())).collect();
    for round in 1..=plan.rounds {
        for (row, rounds) in &mut results {
            let took = Instant::now();
            let measured = runtime.block_on(run_row(&plan, *row));
            eprintln!(
                "round {round} {}: {:.1} s",
                row.label(),
                took.elapsed().as_secs_f64()
            );
            rounds.push(measured);
        }
    }
    print_table(&plan, &results);
    print_latency_table(&results);
}
