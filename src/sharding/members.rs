//! Who the replicas are, through one `coordination.k8s.io/v1` Lease per replica: each
//! renews its own Lease (`LEASE_NAME-IDENTITY`, labelled as a shard member) every
//! `retry_period`, lists the others' and counts a replica live while its Lease keeps
//! changing: a Lease not renewed for `lease_duration`, measured on the local clock from
//! when this replica last saw it change (so clocks of different machines are never
//! compared), is dead. From the sorted live identities each replica computes its own
//! contiguous range ([`super::split`]) and publishes it as an [`Assignment`].
//!
//! A replica that cannot renew its own Lease for `renew_deadline` gives up its range (owns
//! nothing) before the others may take it over, as a leader steps down; on shutdown it
//! deletes its Lease, so the others take over at their next poll.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::HashRange;
use crate::config::HaSpec;
use crate::util::lock;

/// The label every member Lease carries (its value: the group's `lease_name`).
pub const MEMBER_LABEL: &str = "switchyard.dev/shard-group";

/// What this replica owns, from the members it saw.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// Live members' identities, sorted.
    pub members: Vec<String>,
    /// The ranges this replica owns; empty when it owns nothing (not a member yet, or it
    /// could not renew its Lease).
    pub ranges: Vec<HashRange>,
}

/// Counters of one replica's membership, for `/status` and `/metrics`.
#[derive(Debug, Default)]
pub struct ShardStatus {
    assignment: Mutex<Assignment>,
    renewals: AtomicU64,
    losses: AtomicU64,
    changes: AtomicU64,
}

/// `/status`'s `replica.shards`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ShardView {
    /// Live members seen, sorted.
    pub members: Vec<String>,
    /// The ranges owned, as `[0x…, 0x…)`.
    pub ranges: Vec<String>,
    /// The share of objects owned, 0 to 1.
    pub owned_fraction: f64,
    /// Times the assignment changed.
    pub rebalances: u64,
}

impl ShardStatus {
    /// The assignment now.
    pub fn assignment(&self) -> Assignment {
        lock(&self.assignment).clone()
    }

    /// Successful renewals of this replica's Lease.
    pub fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// Times this replica gave up its range because it could not renew its Lease.
    pub fn losses(&self) -> u64 {
        self.losses.load(Ordering::Relaxed)
    }

    /// The `/status` view.
    pub fn view(&self) -> ShardView {
        let a = self.assignment();
        ShardView {
            owned_fraction: a.ranges.iter().map(HashRange::fraction).sum(),
            ranges: a.ranges.iter().map(ToString::to_string).collect(),
            members: a.members,
            rebalances: self.changes.load(Ordering::Relaxed),
        }
    }
}

/// A running membership: the assignment as it changes, and its counters.
pub struct Membership {
    assignment: watch::Receiver<Option<Assignment>>,
    status: Arc<ShardStatus>,
}

impl Membership {
    /// A channel for the assignment, empty (`None`) until the first poll: informers built
    /// before the membership starts wait on it.
    pub fn channel() -> (
        watch::Sender<Option<Assignment>>,
        watch::Receiver<Option<Assignment>>,
    ) {
        watch::channel(None)
    }

    /// Starts renewing this replica's Lease and polling the others', publishing the
    /// assignment on `tx`; runs until `stop` turns true, then deletes its Lease.
    pub fn start(
        spec: HaSpec,
        client: kube::Client,
        tx: watch::Sender<Option<Assignment>>,
        stop: watch::Receiver<bool>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let status = Arc::new(ShardStatus::default());
        let assignment = tx.subscribe();
        let poller = Poller::new(client, &spec);
        let task = tokio::spawn(run(spec, poller, tx, status.clone(), stop));
        (Self { assignment, status }, task)
    }

    /// The assignment and its changes.
    pub fn assignment(&self) -> watch::Receiver<Option<Assignment>> {
        self.assignment.clone()
    }

    /// The counters.
    pub fn status(&self) -> Arc<ShardStatus> {
        self.status.clone()
    }
}

/// The name of the Lease of replica `identity` in group `lease_name`: `LEASE_NAME-IDENTITY`
/// when that is a valid name, else the identity's hash stands in for it.
pub fn member_lease_name(lease_name: &str, identity: &str) -> String {
    let plain = format!("{lease_name}-{identity}");
    let valid = plain.len() <= 253
        && plain
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && plain.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        plain
    } else {
        format!("{lease_name}-{:016x}", super::fnv1a64(identity.as_bytes()))
    }
}

/// The ranges `identity` owns among `members` (sorted).
pub fn ranges_of(members: &[String], identity: &str) -> Vec<HashRange> {
    members
        .iter()
        .position(|m| m == identity)
        .and_then(|i| super::split(members.len(), i))
        .into_iter()
        .collect()
}

/// Renews, polls and publishes until stopped.
async fn run(
    spec: HaSpec,
    mut poller: Poller,
    tx: watch::Sender<Option<Assignment>>,
    status: Arc<ShardStatus>,
    mut stop: watch::Receiver<bool>,
) {
    let mut renewed: Option<Instant> = None;
    let mut polls = 0u32;
    loop {
        polls = polls.saturating_add(1);
        if *stop.borrow() {
            break;
        }
        match poller.renew().await {
            Ok(()) => {
                renewed = Some(Instant::now());
                status.renewals.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(lease = %poller.own, error = %e, "cannot renew this replica's shard lease")
            }
        }
        let holding = renewed.is_some_and(|at| at.elapsed() < spec.renew_deadline);
        let next = match poller.live_members(spec.lease_duration).await {
            Ok(mut members) => {
                if holding && !members.contains(&spec.identity) {
                    members.push(spec.identity.clone());
                    members.sort();
                }
                let ranges = if holding {
                    ranges_of(&members, &spec.identity)
                } else {
                    Vec::new()
                };
                Some(Assignment { members, ranges })
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the shard leases");
                // Keep the current ranges until the renew deadline passes.
                let current = tx.borrow().clone();
                current.map(|mut a| {
                    if !holding {
                        a.ranges.clear();
                    }
                    a
                })
            }
        };
        // The first poll only announces this replica: replicas starting together see each
        // other at the second one, before any claims a range.
        if let Some(next) = next.filter(|_| polls > 1) {
            publish(&tx, &status, next, &spec.identity);
        }
        if sleep_or_stop(spec.retry_period, &mut stop).await {
            break;
        }
    }
    poller.delete().await;
}

/// Sends `next` when it differs from what was sent, counting the change (and a loss when
/// ranges were given up).
fn publish(
    tx: &watch::Sender<Option<Assignment>>,
    status: &ShardStatus,
    next: Assignment,
    identity: &str,
) {
    if tx.borrow().as_ref() == Some(&next) {
        return;
    }
    let had = tx.borrow().as_ref().is_some_and(|a| !a.ranges.is_empty());
    if had && next.ranges.is_empty() {
        status.losses.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            identity,
            "gave up this replica's shard: its lease was not renewed within the renew deadline"
        );
    }
    tracing::info!(
        identity,
        members = %next.members.join(","),
        ranges = %next.ranges.iter().map(ToString::to_string).collect::<Vec<_>>().join(" "),
        "shard assignment changed"
    );
    status.changes.fetch_add(1, Ordering::Relaxed);
    *lock(&status.assignment) = next.clone();
    tx.send_replace(Some(next));
}

/// This replica's Lease and what it saw of the others'.
struct Poller {
    api: Api<Lease>,
    group: String,
    own: String,
    identity: String,
    duration_seconds: i32,
    /// Per Lease name: its resourceVersion when last seen changed, and when (local clock).
    seen: HashMap<String, (String, Instant)>,
}

impl Poller {
    fn new(client: kube::Client, spec: &HaSpec) -> Self {
        Self {
            api: Api::namespaced(client, &spec.lease_namespace),
            group: spec.lease_name.clone(),
            own: member_lease_name(&spec.lease_name, &spec.identity),
            identity: spec.identity.clone(),
            duration_seconds: i32::try_from(spec.lease_duration.as_secs().max(1))
                .unwrap_or(i32::MAX),
            seen: HashMap::new(),
        }
    }

    /// Creates this replica's Lease, or writes a new renew time into it.
    async fn renew(&mut self) -> Result<(), String> {
        let now = MicroTime(Timestamp::now());
        let shown = |e: kube::Error| crate::util::kube_error(&e).to_string();
        let current = self.api.get_opt(&self.own).await.map_err(shown)?;
        let mut labels = std::collections::BTreeMap::new();
        labels.insert(MEMBER_LABEL.to_string(), self.group.clone());
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration_seconds),
            renew_time: Some(now.clone()),
            ..LeaseSpec::default()
        };
        match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.own.clone()),
                        labels: Some(labels),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        acquire_time: Some(now),
                        ..spec
                    }),
                };
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map_err(shown)?;
            }
            Some(mut lease) => {
                let old = lease.spec.take().unwrap_or_default();
                lease.metadata.labels = Some(labels);
                lease.spec = Some(LeaseSpec {
                    acquire_time: old.acquire_time.or(Some(now)),
                    ..spec
                });
                self.api
                    .replace(&self.own, &PostParams::default(), &lease)
                    .await
                    .map_err(shown)?;
            }
        }
        Ok(())
    }

    /// The identities whose Lease changed within `duration`, sorted.
    async fn live_members(&mut self, duration: Duration) -> Result<Vec<String>, String> {
        let params = ListParams::default().labels(&format!("{MEMBER_LABEL}={}", self.group));
        let list = self
            .api
            .list(&params)
            .await
            .map_err(|e| crate::util::kube_error(&e).to_string())?;
        let now = Instant::now();
        let mut live = Vec::new();
        let mut names = Vec::new();
        for lease in list.items {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            let holder = lease
                .spec
                .and_then(|s| s.holder_identity)
                .filter(|h| !h.is_empty());
            let seen_at = match self.seen.get(&name) {
                Some((seen_rv, at)) if *seen_rv == rv => *at,
                _ => now,
            };
            self.seen.insert(name.clone(), (rv, seen_at));
            names.push(name);
            if let Some(holder) = holder
                && now.duration_since(seen_at) < duration
            {
                live.push(holder);
            }
        }
        self.seen.retain(|name, _| names.contains(name));
        live.sort();
        live.dedup();
        Ok(live)
    }

    /// Deletes this replica's Lease, so the others take its range at their next poll.
    async fn delete(&self) {
        match self.api.delete(&self.own, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(lease = %self.own, "deleted this replica's shard lease"),
            Err(e) => {
                tracing::warn!(lease = %self.own, error = %crate::util::kube_error(&e), "could not delete this replica's shard lease")
            }
        }
    }
}

/// Sleeps for `period`; true if `stop` turned true (or its sender went away) meanwhile.
async fn sleep_or_stop(period: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(period) => None,
        _ = stop.wait_for(|s| *s) => Some(true),
    };
    stopped.unwrap_or_else(|| *stop.borrow())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_member_owns_its_slice_of_the_sorted_list() {
        let members: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let b = ranges_of(&members, "b");
        assert_eq!(b, vec![super::super::split(3, 1).unwrap()]);
        assert!(ranges_of(&members, "d").is_empty());
    }

    #[test]
    fn a_member_lease_is_named_after_the_identity_when_it_can_be() {
        assert_eq!(member_lease_name("router", "pod-a"), "router-pod-a");
        let odd = member_lease_name("router", "Pod_A");
        assert!(
            odd.starts_with("router-") && odd.len() == "router-".len() + 16,
            "{odd}"
        );
    }
}
