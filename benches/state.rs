//! What keeping state (`state_dir:`) costs a pipeline, in one run: a route hands 2,000
//! ConfigMap changes (distinct objects, ~300 bytes of JSON each) to a handler whose two
//! workers call the `noop` test plugin, and the time until every call is done is measured,
//! without a state store and with one (a redb file in a temporary folder, written by the
//! group-commit writer thread). CPU time (user + system, whole process, `getrusage`) per
//! event is printed at the end for both.
//!
//! Run: `scripts/build-plugins.sh && cargo bench --bench state`

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use kube::api::{ApiResource, DynamicObject};
use switchyard::config::{Config, OnCorrupt, StateSpec};
use switchyard::handler::Handler;
use switchyard::informer::{CachedObject, Delta, DeltaSink};
use switchyard::metrics::Metrics;
use switchyard::plugin::{HostOptions, PluginHost, PluginLogs, PoolOptions, loader};
use switchyard::router::{ObjectFilter, Route};
use switchyard::state::State;
use tokio::runtime::Runtime;

const EVENTS: usize = 2_000;

const CONFIG: &str = "handlers:\n  noop:\n    concurrency: 2\nroutes:\n  - name: configmaps\n    resource: configmaps\n    handler: noop\n";

/// CPU time and events delivered in each variant's iterations.
fn cpu_totals() -> &'static Mutex<HashMap<&'static str, (Duration, u64)>> {
    static TOTALS: OnceLock<Mutex<HashMap<&'static str, (Duration, u64)>>> = OnceLock::new();
    TOTALS.get_or_init(Default::default)
}

/// User + system CPU time of the process, from /proc/self/stat (clock ticks).
fn cpu_time() -> Duration {
    static TICK: OnceLock<f64> = OnceLock::new();
    let tick = *TICK.get_or_init(|| {
        let out = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .expect("getconf CLK_TCK");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(100.0)
    });
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The fields after the command name (which may hold spaces) in parentheses.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    Duration::from_secs_f64(ticks / tick)
}

fn config() -> Config {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.yaml");
    std::fs::write(&path, CONFIG).unwrap();
    switchyard::config::load(&path).expect("the bench config is valid")
}

/// A route feeding a handler that runs `noop`, keeping state in `state` if given.
fn pipeline(rt: &Runtime, state: Option<&State>) -> (Arc<Route>, Arc<Handler>) {
    let config = config();
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins");
    assert!(
        dir.join("noop.wasm").exists(),
        "plugins/noop.wasm is missing: run scripts/build-plugins.sh first"
    );
    let host = PluginHost::with_options(HostOptions {
        pool: Some(PoolOptions {
            instances: 8,
            max_memory: 64 << 20,
            reset: if switchyard::plugin::slots::decide(Default::default()).resident() {
                switchyard::plugin::host::RESIDENT_SLOT_RESET
            } else {
                switchyard::plugin::host::SlotReset::Decommit
            },
        }),
        ..HostOptions::default()
    })
    .expect("a plugin host");
    let plugin = rt
        .block_on(loader::load(&host, &dir, "noop"))
        .expect("the noop plugin compiles");
    let metrics = Metrics::new();
    let active = tokio::sync::watch::channel(true).1;
    let _guard = rt.enter();
    let handler = Handler::start(
        config.handlers[0].clone(),
        Ok(config.handlers[0].config.to_string()),
        PluginLogs::default(),
        &metrics,
        active,
    );
    if let Some(state) = state {
        handler.set_state(state.clone());
    }
    handler.install_plugin(Arc::new(plugin));
    let spec = &config.routes[0];
    let route = Route::new(
        &spec.name,
        spec.events,
        ObjectFilter::new(&spec.filter),
        spec.delivery,
        handler.clone(),
    );
    let route = match state {
        Some(state) => route.with_state(state.clone(), HashMap::new(), 1),
        None => route,
    };
    (Arc::new(route), handler)
}

/// `EVENTS` distinct ConfigMaps at resourceVersion `rv`.
fn objects(rv: u64) -> Vec<Delta> {
    let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    (0..EVENTS)
        .map(|i| {
            let mut o = DynamicObject::new(&format!("bench-{i}"), &resource).within("default");
            o.metadata.resource_version = Some(rv.to_string());
            o.metadata.uid = Some(format!("uid-{i}"));
            o.data = serde_json::json!({"data": {"greeting": "hello", "target": "world"}});
            Delta::Added(Arc::new(CachedObject::new(o)))
        })
        .collect()
}

/// Delivers one batch and waits until the handler has processed it; returns the wall time,
/// and records the CPU time per event under `variant`.
fn run_batch(
    rt: &Runtime,
    route: &Route,
    handler: &Handler,
    rv: u64,
    variant: &'static str,
) -> Duration {
    let deltas = objects(rv);
    let target = handler.status().processed + EVENTS as u64;
    let (cpu, started) = (cpu_time(), Instant::now());
    for delta in &deltas {
        route.deliver(delta);
    }
    rt.block_on(async {
        while handler.status().processed < target {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    });
    let took = started.elapsed();
    let spent = cpu_time().saturating_sub(cpu);
    let mut totals = cpu_totals().lock().unwrap();
    let total = totals.entry(variant).or_default();
    total.0 += spent;
    total.1 += EVENTS as u64;
    took
}

fn throughput(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = {
        let _guard = rt.enter();
        State::open(
            &StateSpec {
                dir: dir.path().to_path_buf(),
                on_corrupt: OnCorrupt::Refuse,
                max_pending_writes: 10_000,
            },
            None,
        )
        .expect("a state store")
    };
    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    for (variant, state) in [("no_state", None), ("state_dir", Some(&state))] {
        let (route, handler) = pipeline(&rt, state);
        let mut rv = 0;
        group.bench_function(BenchmarkId::new("events", variant), |b| {
            b.iter_custom(|iterations| {
                (0..iterations)
                    .map(|_| {
                        rv += 1;
                        run_batch(&rt, &route, &handler, rv, variant)
                    })
                    .sum()
            })
        });
        rt.block_on(handler.shut_down(Duration::from_secs(1)));
    }
    group.finish();
}

/// Prints the CPU time per event of each variant over all its iterations, and the ratio.
fn print_cpu() {
    let totals = cpu_totals().lock().unwrap();
    let per_event = |v: &str| {
        let (cpu, events) = totals.get(v).copied().unwrap_or_default();
        cpu.as_secs_f64() / events.max(1) as f64
    };
    let (off, on) = (per_event("no_state"), per_event("state_dir"));
    println!(
        "CPU per event (whole process, all iterations): no_state {:.1} µs, state_dir {:.1} µs, ratio {:.2}",
        off * 1e6,
        on * 1e6,
        on / off
    );
}

criterion_group!(benches, throughput);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    print_cpu();
}
