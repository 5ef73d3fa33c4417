//! Informer memory and initial sync time: RSS growth while caching N ConfigMaps of about
//! 1 KB each, against the JSON bytes held, next to a baseline that keeps the same list as
//! typed k8s-openapi objects in a map. Each measurement runs in a fresh child process (so
//! freed memory of one never hides the growth of the other), against one `switchyard sim`
//! process serving the objects.
//!
//! Run: `cargo bench --bench informer_memory` (`SWITCHYARD_BENCH_OBJECTS` sets N, default
//! 100000).

#![allow(missing_docs)]

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use switchyard::config::ResourceName;
use switchyard::informer::{CacheOptions, InformerFactory, WatchKey};

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

async fn client(kubeconfig: &str) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// Child: caches every ConfigMap with a switchyard informer; prints
/// `objects json_bytes rss_growth sync_ms`.
async fn measure_informer(kubeconfig: &str) {
    let client = client(kubeconfig).await;
    let before = rss_bytes();
    let started = Instant::now();
    let factory = InformerFactory::new(client);
    let key = WatchKey {
        resource: ResourceName::parse("configmaps").unwrap(),
        namespace: None,
        label_selector: None,
        field_selector: None,
    };
    let informer = factory
        .informer(key, CacheOptions::default())
        .await
        .expect("informer");
    informer.wait_until_synced().await;
    let sync = started.elapsed();
    let objects = informer.store().list();
    let json: usize = objects.iter().map(|o| o.json().len()).sum();
    let count = objects.len();
    drop(objects);
    let growth = rss_bytes().saturating_sub(before);
    println!("{count} {json} {growth} {}", sync.as_millis());
    factory.shutdown();
}

/// Child: keeps the same list as typed objects in a map, as a typed reflector would.
async fn measure_typed(kubeconfig: &str) {
    let client = client(kubeconfig).await;
    let before = rss_bytes();
    let started = Instant::now();
    let api: Api<ConfigMap> = Api::all(client);
    let mut map: HashMap<String, ConfigMap> = HashMap::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.expect("list");
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        for cm in page.items {
            let key = format!(
                "{}/{}",
                cm.metadata.namespace.clone().unwrap_or_default(),
                cm.metadata.name.clone().unwrap_or_default()
            );
            map.insert(key, cm);
        }
        match next {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let sync = started.elapsed();
    let json: usize = map
        .values()
        .map(|cm| serde_json::to_string(cm).unwrap().len())
        .sum();
    let growth = rss_bytes().saturating_sub(before);
    println!("{} {json} {growth} {}", map.len(), sync.as_millis());
}

fn child(mode: &str, kubeconfig: &str) -> (u64, u64, u64, u64) {
    let output = Command::new(std::env::current_exe().unwrap())
        .env("SWITCHYARD_BENCH_CHILD", mode)
        .env("SWITCHYARD_BENCH_KUBECONFIG", kubeconfig)
        .output()
        .expect("run the measuring child");
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().last().unwrap_or_else(|| {
        panic!(
            "no result from {mode}: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
    (v[0], v[1], v[2], v[3])
}

fn main() {
    if let Ok(mode) = std::env::var("SWITCHYARD_BENCH_CHILD") {
        let kubeconfig = std::env::var("SWITCHYARD_BENCH_KUBECONFIG").unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        match mode.as_str() {
            "informer" => rt.block_on(measure_informer(&kubeconfig)),
            _ => rt.block_on(measure_typed(&kubeconfig)),
        }
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` passes --bench; under `cargo test` this runs as a quick smoke test.
    let full = std::env::args().any(|a| a == "--bench");
    let objects: usize = std::env::var("SWITCHYARD_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 100_000 } else { 200 });
    let rounds = if full { 3 } else { 1 };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut sim = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "sim",
            "--prefill",
            &objects.to_string(),
            "--churn-size",
            "900",
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start switchyard sim");
    let deadline = Instant::now() + Duration::from_secs(300);
    while !kubeconfig.exists() {
        assert!(Instant::now() < deadline, "the simulator did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let kc = kubeconfig.to_str().unwrap();
    println!(
        "informer memory: {objects} ConfigMaps of about 1 KB, each measurement in its own process"
    );
    for round in 1..=rounds {
        let (n, json, growth, ms) = child("informer", kc);
        let (tn, tjson, tgrowth, tms) = child("typed", kc);
        assert_eq!(
            (n, tn),
            (objects as u64, objects as u64),
            "both must see every object"
        );
        println!(
            "round {round}: switchyard informer: {n} objects, JSON {:.1} MiB, RSS growth {:.1} MiB ({:.2}x JSON, {:.0} B/object), initial sync {ms} ms",
            json as f64 / 1048576.0,
            growth as f64 / 1048576.0,
            growth as f64 / json as f64,
            growth as f64 / n as f64
        );
        println!(
            "round {round}: typed map baseline:  {tn} objects, JSON {:.1} MiB, RSS growth {:.1} MiB ({:.2}x JSON, {:.0} B/object), list {tms} ms; informer/typed growth {:.2}",
            tjson as f64 / 1048576.0,
            tgrowth as f64 / 1048576.0,
            tgrowth as f64 / tjson as f64,
            tgrowth as f64 / tn as f64,
            growth as f64 / tgrowth as f64
        );
    }
    let _ = sim.kill();
    let _ = sim.wait();
}
