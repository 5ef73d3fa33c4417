//! Work queue throughput: add, get and done for distinct keys with 1 and 2 worker threads,
//! next to a plain tokio mpsc channel moving the same items in the same run.
//!
//! Run: `cargo bench --bench queue`

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use switchyard::queue::WorkQueue;
use tokio::runtime::Runtime;

const ITEMS: u64 = 20_000;

fn runtime(threads: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Adds `ITEMS` distinct keys while `threads` workers get and done them; returns when all
/// are done.
async fn work_queue(threads: usize) {
    let q = WorkQueue::<u64>::new();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let mut handled = 0u64;
                while let Some(k) = q.get().await {
                    std::hint::black_box(k);
                    q.done(&k);
                    handled += 1;
                }
                handled
            })
        })
        .collect();
    for k in 0..ITEMS {
        q.add(k);
    }
    q.shut_down();
    let mut total = 0;
    for w in workers {
        total += w.await.expect("worker");
    }
    assert_eq!(total, ITEMS);
}

/// Sends `ITEMS` items through an unbounded tokio mpsc channel to one consumer task.
async fn mpsc_channel() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let consumer = tokio::spawn(async move {
        let mut handled = 0u64;
        while let Some(k) = rx.recv().await {
            std::hint::black_box(k);
            handled += 1;
        }
        handled
    });
    for k in 0..ITEMS {
        tx.send(k).expect("consumer alive");
    }
    drop(tx);
    assert_eq!(consumer.await.expect("consumer"), ITEMS);
}

fn throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue_throughput");
    group.throughput(Throughput::Elements(ITEMS));
    group.sample_size(30);
    for threads in [1usize, 2] {
        let rt = runtime(threads);
        group.bench_with_input(
            BenchmarkId::new("work_queue", threads),
            &threads,
            |b, &t| {
                b.iter(|| rt.block_on(work_queue(t)));
            },
        );
        group.bench_with_input(BenchmarkId::new("tokio_mpsc", threads), &threads, |b, _| {
            b.iter(|| rt.block_on(mpsc_channel()));
        });
    }
    group.finish();
}

criterion_group!(benches, throughput);
criterion_main!(benches);
