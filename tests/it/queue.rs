//! Properties of the work queue: no key is handed to two workers at once, no added key is
//! lost, a waiting key is held once, and `every` delivery keeps per-key order.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use proptest::prelude::*;
use switchyard::config::Delivery;
use switchyard::handler::{Owed, PendingEvent};
use switchyard::informer::{CachedObject, Delta};
use switchyard::queue::WorkQueue;

use crate::support;

#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    Get(usize),
    Done(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        (0u8..6).prop_map(Op::Add),
        (0usize..3).prop_map(Op::Get),
        (0usize..3).prop_map(Op::Done),
    ];
    prop::collection::vec(op, 1..200)
}

proptest! {
    /// Drives the queue with random adds, gets and dones from three workers and checks it
    /// against a model of client-go's semantics.
    #[test]
    fn the_queue_never_doubles_or_loses_a_key(ops in ops()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let q = WorkQueue::<u8>::new();
            let mut held: [Option<u8>; 3] = [None; 3];
            // Keys added since they were last handed out: the queue owes each one delivery.
            let mut owed: HashSet<u8> = HashSet::new();
            for op in ops {
                match op {
                    Op::Add(k) => {
                        q.add(k);
                        owed.insert(k);
                    }
                    Op::Get(w) if held[w].is_none() => {
                        if let Some(Some(k)) = q.get().now_or_never() {
                            prop_assert!(!held.contains(&Some(k)), "key {k} handed to two workers");
                            prop_assert!(owed.remove(&k), "key {k} handed out without being added");
                            held[w] = Some(k);
                        } else {
                            // Nothing to hand out: everything owed must be held by a worker.
                            for k in &owed {
                                prop_assert!(held.contains(&Some(*k)), "key {k} owed but not queued");
                            }
                        }
                    }
                    Op::Done(w) => {
                        if let Some(k) = held[w].take() {
                            q.done(&k);
                        }
                    }
                    Op::Get(_) => {}
                }
                // De-duplication: the queue holds each waiting key once.
                prop_assert!(q.len() <= 6);
            }
            for slot in held.iter_mut() {
                if let Some(k) = slot.take() {
                    q.done(&k);
                }
            }
            let mut drained = Vec::new();
            while let Some(Some(k)) = q.get().now_or_never() {
                drained.push(k);
                q.done(&k);
            }
            let drained_set: HashSet<u8> = drained.iter().copied().collect();
            prop_assert_eq!(drained.len(), drained_set.len(), "a key was queued twice");
            prop_assert_eq!(drained_set, owed, "keys owed at the end must each be handed out once");
            Ok(())
        })?;
    }
}

/// Many workers on two threads, a producer adding keys at random: a key is never held by two
/// workers at once, and every add is followed by a processing that saw it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_workers_never_share_a_key_and_lose_no_add() {
    const KEYS: u32 = 20;
    const ADDS: u32 = 20_000;
    let q = WorkQueue::<u32>::new();
    let in_flight = Arc::new(Mutex::new(HashSet::new()));
    // Per key: the sequence number of the last add, and the last add a worker saw start.
    let last_added = Arc::new(Mutex::new(HashMap::<u32, u32>::new()));
    let last_seen = Arc::new(Mutex::new(HashMap::<u32, u32>::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (q, in_flight, last_added, last_seen) = (
                q.clone(),
                in_flight.clone(),
                last_added.clone(),
                last_seen.clone(),
            );
            tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    assert!(
                        in_flight.lock().unwrap().insert(k),
                        "key {k} held by two workers"
                    );
                    let seen = last_added.lock().unwrap().get(&k).copied().unwrap_or(0);
                    last_seen.lock().unwrap().insert(k, seen);
                    tokio::task::yield_now().await;
                    in_flight.lock().unwrap().remove(&k);
                    q.done(&k);
                }
            })
        })
        .collect();
    for seq in 1..=ADDS {
        let k = rand_key(seq) % KEYS;
        // Record before adding, so a worker that takes the key sees this add.
        last_added.lock().unwrap().insert(k, seq);
        q.add(k);
        if seq % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    // Let the workers drain, then stop them.
    support::eventually("the queue to drain", Duration::from_secs(20), async || {
        (q.is_empty() && q.in_flight() == 0).then_some(())
    })
    .await;
    q.shut_down();
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(
        *last_seen.lock().unwrap(),
        *last_added.lock().unwrap(),
        "an add was never processed"
    );
}

/// A cheap deterministic scramble, so the test needs no random generator.
fn rand_key(seq: u32) -> u32 {
    seq.wrapping_mul(2_654_435_761).rotate_left(7)
}

mod every_mode {
    use super::*;
    use kube::api::{ApiResource, DynamicObject};

    fn updated(from: u32, to: u32) -> PendingEvent {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let object = |rv: u32| {
            let mut o = DynamicObject::new("a", &ar);
            o.metadata.resource_version = Some(rv.to_string());
            Arc::new(CachedObject::new(o))
        };
        PendingEvent::from_delta(&Delta::Updated {
            old: object(from),
            new: object(to),
        })
        .unwrap()
    }

    proptest! {
        /// Whatever the interleaving of pushes and takes, events come out in the order they
        /// went in, the last one is the newest, and without overflow none is merged.
        #[test]
        fn every_keeps_per_key_order(backlog in 1usize..8, steps in prop::collection::vec(any::<bool>(), 1..100)) {
            let delivery = Delivery::Every { backlog };
            let mut owed: Option<Owed> = None;
            let (mut next_rv, mut taken) = (1u32, Vec::new());
            let mut overflowed = false;
            for push in steps {
                if push {
                    let event = updated(next_rv, next_rv + 1);
                    next_rv += 1;
                    match owed.as_mut() {
                        Some(o) => overflowed |= o.push(delivery, event),
                        None => owed = Some(Owed::new(delivery, event)),
                    }
                } else if let Some(e) = owed.as_mut().and_then(Owed::take_next) {
                    taken.push(e.object.resource_version().parse::<u32>().unwrap());
                }
            }
            while let Some(e) = owed.as_mut().and_then(Owed::take_next) {
                taken.push(e.object.resource_version().parse::<u32>().unwrap());
            }
            prop_assert!(taken.windows(2).all(|w| w[0] < w[1]), "out of order: {taken:?}");
            prop_assert_eq!(taken.last().copied(), (next_rv > 1).then_some(next_rv));
            if !overflowed {
                prop_assert_eq!(taken, (2..=next_rv).collect::<Vec<_>>());
            }
        }
    }
}
