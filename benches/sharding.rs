//! Server-side against client-side sharding: N replicas (N = 1, 2, 3) each cache their
//! share of the same ConfigMaps through a sharded informer, once against an API server
//! that applies `shardSelector` (the simulator with `ShardedListAndWatch` on) and once
//! against one that ignores it (gate off: every replica receives and decodes everything and
//! drops what is not its share). Per replica it measures the bytes the API server sent
//! (through a counting TCP proxy in front of the server) and the CPU time of the replica's
//! own runtime thread (a current-thread runtime, so decoding and caching run there), from
//! the informer's start through its initial list and a watch of a batch of updates.
//!
//! Run: `cargo bench --bench sharding` (`SWITCHYARD_BENCH_OBJECTS` sets the ConfigMaps,
//! default 20000; a quarter of them are updated while the replicas watch; three rounds).

#![allow(missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard::config::ResourceName;
use switchyard::informer::{CacheOptions, Delta, DeltaSink, InformerFactory, WatchKey};
use switchyard::sharding::{Assignment, HashRange, fnv1a64, split};
use switchyard::sim::{ObjectRef, SimOptions, Simulator, resources};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ROUNDS: usize = 3;

/// A TCP proxy to `target` counting the bytes sent back to clients.
async fn counting_proxy(target: SocketAddr) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let count = Arc::new(AtomicU64::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(target).await.expect("connect");
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
            });
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 << 10];
                while let Ok(n) = server_read.read(&mut buf).await {
                    if n == 0 || client_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    counted.fetch_add(n as u64, Ordering::Relaxed);
                }
            });
        }
    });
    (addr, count)
}

/// CPU time (user + system) of the calling thread, from `/proc/thread-self/stat`, in
/// clock ticks of 10 ms.
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let after_name = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// Counts the updates an informer delivers.
#[derive(Default)]
struct Updates(AtomicUsize);

impl DeltaSink for Updates {
    fn deliver(&self, delta: &Delta) {
        if matches!(delta, Delta::Updated { .. }) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What one replica measured.
struct Measured {
    bytes: u64,
    cpu: Duration,
    objects: usize,
}

/// One replica on a thread of its own: caches `range` through `url`, reports when synced
/// on `synced`, returns once it has seen `expected` updates.
fn replica(
    url: String,
    range: HashRange,
    expected: usize,
    synced: tokio::sync::mpsc::Sender<()>,
) -> std::thread::JoinHandle<(Duration, usize)> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let start = thread_cpu();
            let config = kube::Config::new(url.parse().expect("url"));
            let client = kube::Client::try_from(config).expect("client");
            let assignment = Assignment {
                members: Vec::new(),
                ranges: vec![range],
            };
            let (_tx, rx) = tokio::sync::watch::channel(Some(assignment));
            let factory = InformerFactory::new(client).sharded(rx);
            let key = WatchKey {
                resource: ResourceName::parse("configmaps").unwrap(),
                namespace: Some("bench".into()),
                label_selector: None,
                field_selector: None,
            };
            let informer = factory
                .informer(key, CacheOptions::default())
                .await
                .expect("informer");
            informer.wait_until_synced().await;
            let updates = Arc::new(Updates::default());
            informer.subscribe(updates.clone());
            synced.send(()).await.expect("report synced");
            while updates.0.load(Ordering::Relaxed) < expected {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let objects = informer.store().len();
            factory.shutdown();
            (thread_cpu() - start, objects)
        })
    })
}

/// N replicas against `target`, the `updated` objects changed once all have synced.
async fn run(
    target: SocketAddr,
    sim: &Simulator,
    n: usize,
    uids: &[(String, String)],
    updated: usize,
    round: usize,
) -> Vec<Measured> {
    let (synced_tx, mut synced_rx) = tokio::sync::mpsc::channel(n);
    let mut running = Vec::new();
    for i in 0..n {
        let range = split(n, i).unwrap();
        let expected = uids[..updated]
            .iter()
            .filter(|(_, uid)| range.contains(fnv1a64(uid.as_bytes())))
            .count();
        let (addr, bytes) = counting_proxy(target).await;
        let handle = replica(format!("http://{addr}"), range, expected, synced_tx.clone());
        running.push((handle, bytes));
    }
    for _ in 0..n {
        synced_rx.recv().await.expect("a replica synced");
    }
    let configmaps = resources::find("", "v1", "configmaps").unwrap();
    for (name, _) in &uids[..updated] {
        let at = ObjectRef {
            resource: configmaps,
            namespace: "bench".into(),
            name: name.clone(),
        };
        sim.cluster()
            .modify(&at, |o: &Value| {
                let mut o = o.clone();
                o["data"]["round"] = json!(format!("{round}"));
                Ok(o)
            })
            .expect("update");
    }
    let mut measured = Vec::new();
    for (handle, bytes) in running {
        let (cpu, objects) = tokio::task::spawn_blocking(move || handle.join().expect("replica"))
            .await
            .expect("join");
        measured.push(Measured {
            bytes: bytes.load(Ordering::Relaxed),
            cpu,
            objects,
        });
    }
    measured
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo test --all-targets` runs this without `--bench`: then a quick smoke run only.
    let measuring = std::env::args().any(|a| a == "--bench");
    let objects: usize = std::env::var("SWITCHYARD_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if measuring { 20_000 } else { 300 });
    let updated = objects / 4;
    let server_side = Simulator::start(SimOptions {
        sharded_list_and_watch: true,
        history: objects * 8,
        ..SimOptions::default()
    })
    .await
    .expect("simulator");
    let client_side = Simulator::serve(server_side.cluster().clone(), SimOptions::default())
        .await
        .expect("a second server without the gate");
    let cluster = server_side.cluster();
    cluster
        .create(
            resources::find("", "v1", "namespaces").unwrap(),
            "",
            json!({"metadata": {"name": "bench"}}),
        )
        .expect("namespace");
    let configmaps = resources::find("", "v1", "configmaps").unwrap();
    let payload = "x".repeat(900);
    let uids: Vec<(String, String)> = (0..objects)
        .map(|i| {
            let name = format!("cm-{i}");
            let created = cluster
                .create(
                    configmaps,
                    "bench",
                    json!({"metadata": {"name": name}, "data": {"payload": payload}}),
                )
                .expect("create");
            (
                name,
                created["metadata"]["uid"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    println!(
        "{objects} ConfigMaps of about 1.1 KB, {updated} updated while watching, {ROUNDS} rounds; medians per replica"
    );
    println!();
    println!(
        "| N | filtering | MiB received | CPU ms | objects cached | bytes vs client-side | CPU vs client-side |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut round = 0;
    for n in 1..=3 {
        let mut results: Vec<(&str, f64, f64, f64)> = Vec::new();
        for (label, target) in [
            ("server", server_side.addr()),
            ("client", client_side.addr()),
        ] {
            let mut bytes = Vec::new();
            let mut cpu = Vec::new();
            let mut cached = Vec::new();
            for _ in 0..ROUNDS {
                round += 1;
                let started = Instant::now();
                let measured = run(target, &server_side, n, &uids, updated, round).await;
                eprintln!("N={n} {label} round took {:?}", started.elapsed());
                for m in measured {
                    bytes.push(m.bytes as f64 / (1 << 20) as f64);
                    cpu.push(m.cpu.as_secs_f64() * 1000.0);
                    cached.push(m.objects as f64);
                }
            }
            results.push((label, median(bytes), median(cpu), median(cached)));
        }
        let (_, client_bytes, client_cpu, _) = results[1];
        for (label, bytes, cpu, cached) in results {
            println!(
                "| {n} | {label} | {bytes:.1} | {cpu:.0} | {cached:.0} | {:.2} | {:.2} |",
                bytes / client_bytes,
                cpu / client_cpu
            );
        }
    }
}
