//! Leader election among replicas through a `coordination.k8s.io/v1` Lease, as client-go's
//! `tools/leaderelection` does it. A candidate takes the Lease when it is absent, released
//! (no holder) or expired: its holder has not renewed it for `lease_duration`, measured on
//! the local clock from when this replica last saw the record change, so clocks of
//! different machines are never compared. Every write carries the `resourceVersion` read,
//! so of two candidates writing at once one gets a 409 and loses. The leader renews every
//! `retry_period` and steps down at once when `renew_deadline` passes without a renewal,
//! before the others may take over; on shutdown it releases the Lease, so a successor
//! takes over at the next retry.
//!
//! A replica the API server refuses its Lease (403: its Role is missing or in another
//! namespace) can never lead; the status says why until an attempt goes through, and the
//! daemon answers `/readyz` 503 with it, rather than wait as a follower for good.

mod lease;
mod status;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

pub use status::{ElectionStatus, ReplicaStatus};

use crate::config::HaSpec;
use lease::{Attempt, LeaseClient};

/// A running election: whether this replica leads, and its counters.
pub struct Election {
    leading: watch::Receiver<bool>,
    status: Arc<ElectionStatus>,
}

impl Election {
    /// Starts campaigning for the Lease `spec` names; runs until `stop` turns true, then
    /// releases the Lease if it holds it.
    /// `leading` is set to whether this replica leads, the moment that changes.
    pub fn start(
        spec: HaSpec,
        client: kube::Client,
        leading_tx: watch::Sender<bool>,
        stop: watch::Receiver<bool>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let leading = leading_tx.subscribe();
        let status = Arc::new(ElectionStatus::new(&spec));
        let lease = LeaseClient::new(client, &spec);
        let task = tokio::spawn(campaign(spec, lease, leading_tx, status.clone(), stop));
        (Self { leading, status }, task)
    }

    /// Whether this replica leads, and its changes.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// The election's counters.
    pub fn status(&self) -> Arc<ElectionStatus> {
        self.status.clone()
    }
}

/// Acquires the Lease, renews it while it can, steps down when it cannot, and tries again;
/// releases it when `stop` turns true.
async fn campaign(
    spec: HaSpec,
    mut lease: LeaseClient,
    leading: watch::Sender<bool>,
    status: Arc<ElectionStatus>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        // Candidate: try every retry period until the Lease is ours.
        loop {
            if *stop.borrow() {
                return;
            }
            let attempt = lease.try_acquire_or_renew(&status).await;
            if attempt == Attempt::Held {
                break;
            }
            if sleep_or_stop(spec.retry_period, &mut stop).await {
                return;
            }
        }
        let mut renewed = Instant::now();
        status.set_leading(true);
        leading.send_replace(true);
        tracing::info!(identity = %spec.identity, lease = %status.lease(), "became the leader");
        // Leader: renew every retry period; step down once the renew deadline passes.
        loop {
            if sleep_or_stop(spec.retry_period, &mut stop).await {
                lease.release(&status).await;
                leading.send_replace(false);
                status.set_leading(false);
                return;
            }
            let deadline = renewed + spec.renew_deadline;
            match renew_until(&mut lease, &status, deadline, spec.retry_period).await {
                true => renewed = Instant::now(),
                false => break,
            }
        }
        leading.send_replace(false);
        status.set_leading(false);
        status.count_loss();
        tracing::warn!(
            identity = %spec.identity,
            lease = %status.lease(),
            "lost the leadership: not renewed within the renew deadline"
        );
    }
}

/// Tries to renew until it succeeds (true) or `deadline` passes (false); an attempt still
/// running at the deadline is cut off.
async fn renew_until(
    lease: &mut LeaseClient,
    status: &ElectionStatus,
    deadline: Instant,
    retry: Duration,
) -> bool {
    let attempts = async {
        loop {
            if lease.try_acquire_or_renew(status).await == Attempt::Held {
                status.count_renewal();
                return;
            }
            tokio::time::sleep(retry).await;
        }
    };
    tokio::time::timeout_at(deadline, attempts).await.is_ok()
}

/// Sleeps for `period`; true if `stop` turned true (or its sender went away) meanwhile.
async fn sleep_or_stop(period: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(period) => None,
        r = stop.wait_for(|s| *s) => Some(r.is_ok() || r.is_err()),
    };
    stopped.unwrap_or_else(|| *stop.borrow())
}
