//! What the writer tells the stages, and what they wait on. Two waits, both on the writer's
//! progress, which it publishes after every commit:
//!
//! - **Write-ahead.** Each change sent gets a sequence number, in the order the writer
//!   receives it; a worker calls a plugin only once the change that recorded the event as
//!   owed (when the route queued it) is committed ([`super::State::committed`]). A crash
//!   can then never leave a plugin having seen an event the store does not hold: after a
//!   restart the event is delivered again or the object's record is there to compare.
//!   Under load the queue entry was committed long before a worker takes it, so only an
//!   idle handler waits, for one commit.
//! - **Backpressure.** The writer's queue is bounded (`state_max_pending_writes`): while it
//!   holds that many changes the informers stop reading their watches ([`Pressure::room`])
//!   until the writer has caught up to half of it. A store that cannot commit (a full disk)
//!   so stops the flow of new events instead of growing the queue without bound.
//! - **Demand.** A commit is due when someone waits on it: a stage names the change it
//!   waits for ([`Flow::want`]: a worker about to go idle, an event taken before its
//!   commit), a producer waits for room, or a flush is asked for. While nobody does (the
//!   workers have committed events enough to work on, as through a large list), the writer
//!   lets changes gather into fewer, larger commits, each at most [`Flow::MAX_DEFER`] old.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use tokio::sync::watch;

/// The writer's progress, shared by the writer thread and every sender.
pub(super) struct Flow {
    /// Changes sent and not committed yet.
    pub(super) pending: AtomicU64,
    /// At or above this many pending changes, producers wait.
    limit: u64,
    /// The sequence number of the last change committed.
    committed: watch::Sender<u64>,
    /// Times a producer had to wait for room.
    waits: AtomicU64,
    /// Producers waiting for room now.
    held: AtomicU64,
    /// The highest sequence number a stage waits to see committed.
    wanted: AtomicU64,
    /// Set while the writer holds back a commit nobody waits on; a stage that starts
    /// waiting then wakes it.
    deferring: AtomicBool,
    /// The writer thread, to wake.
    writer: OnceLock<Thread>,
}

impl Flow {
    /// A flow that holds producers at `limit` pending changes (at least 1).
    pub(super) fn new(limit: u64) -> Self {
        Self {
            pending: AtomicU64::new(0),
            limit: limit.max(1),
            committed: watch::channel(0).0,
            waits: AtomicU64::new(0),
            held: AtomicU64::new(0),
            wanted: AtomicU64::new(0),
            deferring: AtomicBool::new(false),
            writer: OnceLock::new(),
        }
    }

    /// The longest the writer holds back changes nobody waits on.
    pub(super) const MAX_DEFER: Duration = Duration::from_millis(100);

    /// Called once by the writer thread, so a stage that starts waiting can wake it.
    pub(super) fn set_writer(&self) {
        let _ = self.writer.set(std::thread::current());
    }

    /// A stage waits for the change `seq` to be committed: the writer commits it without
    /// holding it back (woken if it is holding back now).
    pub(super) fn want(&self, seq: u64) {
        if self.wanted.fetch_max(seq, Ordering::SeqCst) < seq {
            self.wake();
        }
    }

    /// Wakes the writer if it is holding back a commit.
    fn wake(&self) {
        if self.deferring.load(Ordering::SeqCst)
            && let Some(writer) = self.writer.get()
        {
            writer.unpark();
        }
    }

    /// Whether a stage waits on a change not committed yet, or a producer for room (or
    /// soon would: half the bound is pending).
    pub(super) fn waited_on(&self) -> bool {
        self.wanted.load(Ordering::SeqCst) > self.last_committed()
            || self.held.load(Ordering::SeqCst) > 0
            || self.pending.load(Ordering::Relaxed) >= self.limit / 2
    }

    /// The writer holds back its commit for up to `wait`, unless a stage waits on it or
    /// starts to meanwhile. Returns false (at once) if one waits.
    pub(super) fn defer(&self, wait: Duration) -> bool {
        self.deferring.store(true, Ordering::SeqCst);
        // Checked after the flag is up: a stage that wants a change either sees the flag
        // and wakes the writer, or is seen here.
        if self.waited_on() {
            self.deferring.store(false, Ordering::SeqCst);
            return false;
        }
        std::thread::park_timeout(wait);
        self.deferring.store(false, Ordering::SeqCst);
        true
    }

    /// Called by the writer once the changes up to `seq` are committed (`count` of them in
    /// this commit).
    pub(super) fn committed(&self, seq: u64, count: u64) {
        self.pending.fetch_sub(count, Ordering::Relaxed);
        self.committed.send_replace(seq);
    }

    /// Waits until the change `seq` is committed; false if the writer stopped first.
    pub(super) async fn wait_committed(&self, seq: u64) -> bool {
        if *self.committed.borrow() >= seq {
            return true;
        }
        self.want(seq);
        let mut rx = self.committed.subscribe();
        rx.wait_for(|c| *c >= seq).await.is_ok()
    }

    /// The sequence number of the last change committed.
    pub(super) fn last_committed(&self) -> u64 {
        *self.committed.borrow()
    }

    /// The last change committed, as it advances.
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.committed.subscribe()
    }

    /// The bound, times producers waited, and whether one waits now.
    pub(super) fn pressure(&self) -> (u64, u64, bool) {
        (
            self.limit,
            self.waits.load(Ordering::Relaxed),
            self.held.load(Ordering::Relaxed) > 0,
        )
    }
}

/// A producer's handle on the writer's room: the informers wait on it before they take
/// the next event from a watch. Clones share it.
#[derive(Clone)]
pub struct Pressure(pub(super) Arc<Flow>);

impl Pressure {
    /// Returns at once while the writer has room; otherwise waits until its queue is down
    /// to half the bound (or the writer stopped).
    pub async fn room(&self) {
        let flow = &self.0;
        if flow.pending.load(Ordering::Relaxed) < flow.limit {
            return;
        }
        flow.waits.fetch_add(1, Ordering::Relaxed);
        flow.held.fetch_add(1, Ordering::SeqCst);
        flow.wake();
        let low = flow.limit / 2;
        let mut rx = flow.committed.subscribe();
        while flow.pending.load(Ordering::Relaxed) > low {
            if rx.changed().await.is_err() {
                break;
            }
        }
        flow.held.fetch_sub(1, Ordering::Relaxed);
    }
}
