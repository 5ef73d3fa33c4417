//! What a plugin call costs, in one run: the `noop` test plugin (returns `done` without
//! parsing the event) called with a fresh instance per call and with one instance reused
//! across calls, each on an engine that allocates instances on demand and on one with the
//! pooling allocator; a native async Rust function doing the same work as the baseline; and
//! instantiation (with `init`) alone; and the `noop` plugin reading every page of its memory
//! in `init` (`plugin_call_pre_read`), which shows what a slot reset in place costs when it
//! resets only the pages an instance wrote. Then the Python example handler `event-summary`
//! and the JavaScript one `event-log` (each parses the object and logs a line), fresh
//! instance per call, and their instantiation.
//!
//! Run: `scripts/build-plugins.sh && cargo bench --bench plugin`

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use switchyard::plugin::host::SlotReset;
use switchyard::plugin::{
    CallLimits, Event, EventKind, HostOptions, Outcome, Plugin, PluginHost, PluginLogs,
    PoolOptions, loader,
};
use tokio::runtime::Runtime;

const MEMORY: u64 = 64 << 20;

fn event() -> Event {
    let object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "bench",
            "namespace": "default",
            "resourceVersion": "12345",
            "uid": "0f6c6a0e-8f0d-4a53-9d43-0a4a5d3c2b11",
            "labels": {"app": "web"},
        },
        "data": {"greeting": "hello", "target": "world"},
    });
    Event {
        kind: EventKind::Updated,
        route: "configmaps".into(),
        object: object.to_string(),
        old_object: Some(object.to_string()),
        attempt: 1,
        final_state_unknown: false,
    }
}

/// The native baseline: what the `noop` plugin does, as a plain async function.
async fn native_noop(event: &Event) -> Result<Outcome, String> {
    black_box(event.object.len());
    Ok(Outcome::Done)
}

fn limits() -> CallLimits {
    CallLimits {
        timeout: Duration::from_secs(5),
        memory: MEMORY,
    }
}

/// The `noop` plugin compiled on a host with `options`.
fn noop_on(rt: &Runtime, options: HostOptions) -> (Arc<PluginHost>, Plugin) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins");
    assert!(
        dir.join("noop.wasm").exists(),
        "plugins/noop.wasm is missing: run scripts/build-plugins.sh first"
    );
    let host = PluginHost::with_options(options).expect("a plugin host");
    let plugin = rt
        .block_on(loader::load(&host, &dir, "noop"))
        .expect("the noop plugin compiles");
    (host, plugin)
}

/// The pooling engines compared: wasmtime's default reset (decommit), the daemon's resident
/// reset (what `plugin_slots: auto` picks where the kernel's scan is exact), and slots
/// kept resident with the initial memory mapped copy-on-write or copied in, and with less
/// of each memory kept resident (64 KiB, 256 KiB, 1 MiB).
const RESETS: [(&str, SlotReset); 6] = [
    ("pooling", SlotReset::Decommit),
    (
        "pooling_resident",
        switchyard::plugin::host::RESIDENT_SLOT_RESET,
    ),
    (
        "pooling_resident_64k",
        SlotReset::KeepResident {
            bytes: 64 << 10,
            copy_on_write: true,
        },
    ),
    (
        "pooling_resident_256k",
        SlotReset::KeepResident {
            bytes: 256 << 10,
            copy_on_write: true,
        },
    ),
    (
        "pooling_resident_1m",
        SlotReset::KeepResident {
            bytes: 1 << 20,
            copy_on_write: true,
        },
    ),
    (
        "pooling_resident_copied",
        SlotReset::KeepResident {
            bytes: 16 << 20,
            copy_on_write: false,
        },
    ),
];

fn pool(reset: SlotReset) -> Option<PoolOptions> {
    Some(PoolOptions {
        instances: 16,
        max_memory: MEMORY,
        reset,
    })
}

fn engines(rt: &Runtime) -> Vec<(&'static str, Arc<PluginHost>, Plugin)> {
    let (on_demand_host, on_demand) = noop_on(rt, HostOptions::default());
    let mut engines = vec![("on_demand", on_demand_host, on_demand)];
    for (name, reset) in RESETS {
        let (host, plugin) = noop_on(
            rt,
            HostOptions {
                cache_dir: None,
                pool: pool(reset),
            },
        );
        engines.push((name, host, plugin));
    }
    engines
}

fn per_call(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let event = event();
    let logs = PluginLogs::default();
    let handler: Arc<str> = Arc::from("bench");
    let engines = engines(&rt);

    let mut group = c.benchmark_group("plugin_call");
    group.bench_function("native", |b| {
        b.iter(|| rt.block_on(native_noop(black_box(&event))).unwrap());
    });
    for (engine, _host, plugin) in &engines {
        group.bench_function(BenchmarkId::new("wasm_fresh_instance", engine), |b| {
            b.iter(|| {
                rt.block_on(plugin.call(handler.clone(), &logs, &limits(), "null", &event))
                    .unwrap()
            });
        });
        let mut instance = rt
            .block_on(plugin.instantiate(handler.clone(), &logs, &limits(), "null"))
            .unwrap();
        group.bench_function(BenchmarkId::new("wasm_reused_instance", engine), |b| {
            b.iter(|| rt.block_on(instance.handle(&event)).unwrap());
        });
    }
    group.finish();
    pre_read(c, &rt, &event);

    let mut group = c.benchmark_group("plugin_instantiate");
    for (engine, _host, plugin) in &engines {
        group.bench_function(BenchmarkId::new("instantiate_and_init", engine), |b| {
            b.iter(|| {
                rt.block_on(plugin.instantiate(handler.clone(), &logs, &limits(), "null"))
                    .unwrap()
            });
        });
    }
    group.finish();
}

/// The `noop` plugin's config that has its `init` read every page of its memory, so the
/// pages it never writes map the kernel's zero page: a slot's in-place reset (`resident`)
/// then finds only the pages the instance wrote.
const PRE_READ: &str = r#"{"pre_read_memory": true}"#;

/// A fresh instance per call with [`PRE_READ`], on the daemon's pool and with 64 KiB kept
/// resident: what an in-place reset costs when it resets only the written pages
/// (BENCHMARKS.md, "Plugin call cost"). Each on an engine of its own: a slot that an instance
/// without the pre-read has used keeps, resident, the pages its reset wrote.
fn pre_read(c: &mut Criterion, rt: &Runtime, event: &Event) {
    let logs = PluginLogs::default();
    let handler: Arc<str> = Arc::from("bench");
    let mut group = c.benchmark_group("plugin_call_pre_read");
    let compared = ["pooling", "pooling_resident_64k"];
    for (engine, reset) in RESETS.iter().filter(|(e, _)| compared.contains(e)) {
        let options = HostOptions {
            cache_dir: None,
            pool: pool(*reset),
        };
        let (_host, plugin) = noop_on(rt, options);
        group.bench_function(BenchmarkId::new("wasm_fresh_instance", engine), |b| {
            b.iter(|| {
                rt.block_on(plugin.call(handler.clone(), &logs, &limits(), PRE_READ, event))
                    .unwrap()
            });
        });
    }
    group.finish();
}

/// The Python example handler, per call and per instantiation.
fn python_call(c: &mut Criterion) {
    interpreted_call(c, "python_plugin", "event-summary");
}

/// The JavaScript example handler, per call and per instantiation.
fn js_call(c: &mut Criterion) {
    interpreted_call(c, "js_plugin", "event-log");
}

/// A handler whose component carries an interpreter, per call and per instantiation, on both
/// engines (compiled code cached as the daemon caches it).
fn interpreted_call(c: &mut Criterion, group: &str, name: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins");
    assert!(
        dir.join(format!("{name}.wasm")).exists(),
        "plugins/{name}.wasm is missing: run scripts/build-plugins.sh first"
    );
    let cache_dir = switchyard::plugin::host::default_cache_dir();
    let on_demand = HostOptions {
        cache_dir: cache_dir.clone(),
        pool: None,
    };
    let pooled = RESETS.iter().map(|(engine, reset)| {
        let options = HostOptions {
            cache_dir: cache_dir.clone(),
            pool: pool(*reset),
        };
        (*engine, options)
    });
    let event = event();
    let logs = PluginLogs::default();
    let handler: Arc<str> = Arc::from("bench");
    let mut group = c.benchmark_group(group);
    for (engine, options) in std::iter::once(("on_demand", on_demand)).chain(pooled) {
        let host = PluginHost::with_options(options).expect("a plugin host");
        let plugin = rt
            .block_on(loader::load(&host, &dir, name))
            .unwrap_or_else(|e| panic!("the {name} plugin compiles: {e}"));
        group.bench_function(BenchmarkId::new("call_fresh_instance", engine), |b| {
            b.iter(|| {
                rt.block_on(plugin.call(handler.clone(), &logs, &limits(), "null", &event))
                    .unwrap()
            });
        });
        group.bench_function(BenchmarkId::new("instantiate_and_init", engine), |b| {
            b.iter(|| {
                rt.block_on(plugin.instantiate(handler.clone(), &logs, &limits(), "null"))
                    .unwrap()
            });
        });
    }
    group.finish();
}

criterion_group!(benches, per_call, python_call, js_call);
criterion_main!(benches);
