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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
        }
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
        flow.held.fetch_add(1, Ordering::Relaxed);
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
