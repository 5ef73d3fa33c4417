//! Who the replicas are, through one `coordination.k8s.io/v1` Lease per replica: each
//! renews its own Lease (`LEASE_NAME-IDENTITY`, labelled as a shard member) every
//! `retry_period`, lists the others' and counts a replica live while its Lease keeps
//! changing: a Lease not renewed for `lease_duration`, measured on the local clock from
//! when this replica last saw it change (so clocks of different machines are never
//! compared), is dead. From the sorted live identities each replica computes its own
//! contiguous range ([`super::split`]) and publishes it as an [`Assignment`].
//!
//! A replica that cannot renew its own Lease for `renew_deadline` gives up its range (owns
//! nothing) before the others may take it over, as a leader steps down: its
//! [`Tenure`] checks the deadline before each plugin call, not only at each poll. On
//! shutdown it deletes its Lease, so the others take over at their next poll; a replica
//! that counts another dead deletes that one's Lease (if it has not changed since), so a
//! replica started later never counts a dead one live. A poll the API server refuses (403:
//! a Role missing or in another namespace) is recorded, and the daemon is not ready.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Preconditions};
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::HashRange;
use super::tenure::{Stamp, Tenure};
use crate::config::HaSpec;
use crate::util::identity::{FIELD_MANAGER, post_params};
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
    /// Why the API server refused the last poll the Leases, if it did.
    refused: Mutex<Option<String>>,
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

    /// Counts a successful renewal.
    pub(super) fn count_renewal(&self) {
        self.renewals.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a range given up because the Lease was not renewed in time.
    pub(super) fn count_loss(&self) {
        self.losses.fetch_add(1, Ordering::Relaxed);
    }

    /// Why the API server refuses this replica the member Leases (a Role missing, or in
    /// another namespace): such a replica can never own a range, so it is not ready.
    pub fn refused(&self) -> Option<String> {
        lock(&self.refused).clone()
    }

    /// Records why the last poll was refused, or `None`.
    fn set_refused(&self, why: Option<String>) {
        *lock(&self.refused) = why;
    }

    /// Records a new assignment, counting the change.
    pub(super) fn set_assignment(&self, next: Assignment) {
        self.changes.fetch_add(1, Ordering::Relaxed);
        *lock(&self.assignment) = next;
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

/// A running membership: the assignment as it changes, this replica's hold on it, and
/// its counters.
pub struct Membership {
    assignment: watch::Receiver<Option<Assignment>>,
    tenure: Arc<Tenure>,
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
        let tenure = Arc::new(Tenure::new(
            &spec.identity,
            spec.renew_deadline,
            tx,
            status.clone(),
        ));
        let poller = Poller::new(client, &spec);
        let task = tokio::spawn(run(spec, poller, tenure.clone(), stop));
        (
            Self {
                assignment,
                tenure,
                status,
            },
            task,
        )
    }

    /// This replica's hold on its ranges, which workers check before each call.
    pub fn tenure(&self) -> Arc<Tenure> {
        self.tenure.clone()
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
    tenure: Arc<Tenure>,
    mut stop: watch::Receiver<bool>,
) {
    let mut polls = 0u32;
    loop {
        polls = polls.saturating_add(1);
        if *stop.borrow() {
            break;
        }
        // Polls start every retry period, or at once when one took longer.
        let next = Instant::now() + spec.retry_period;
        // Taken before the request: the renewal counts from when it was sent, so a pause
        // while it is under way cannot make an old renewal look new.
        let sent = Stamp::now();
        let mut refused = None;
        match poller.renew().await {
            Ok(()) => {
                tenure.renewed(sent);
                tenure.status().count_renewal();
            }
            Err(e) => {
                let shown = crate::util::kube_error(&e);
                tracing::warn!(lease = %poller.own, error = %shown, "cannot renew this replica's shard lease");
                if crate::util::is_refusal(&e) {
                    let lease = format!("{}/{}", spec.lease_namespace, poller.own);
                    refused = Some(format!("cannot renew Lease {lease}: {shown}"));
                }
            }
        }
        let members = match poller.live_members(spec.lease_duration).await {
            Ok(members) => Some(members),
            Err(e) => {
                // The current ranges are kept until the renew deadline passes.
                let shown = crate::util::kube_error(&e);
                tracing::warn!(error = %shown, "cannot list the shard leases");
                if crate::util::is_refusal(&e) && refused.is_none() {
                    let ns = &spec.lease_namespace;
                    refused = Some(format!("cannot list the Leases in {ns}: {shown}"));
                }
                None
            }
        };
        tenure.status().set_refused(refused);
        // The first poll only announces this replica: replicas starting together see each
        // other at the second one, before any claims a range.
        tenure.settle(members, polls == 1);
        if sleep_or_stop(next, &mut stop).await {
            break;
        }
    }
    poller.delete().await;
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
    /// This replica's Lease as it last wrote it.
    written: Option<Lease>,
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
            written: None,
        }
    }

    /// Creates this replica's Lease, or writes a new renew time into it: straight over the
    /// version it last wrote (one request, as client-go's leader renews), or after reading
    /// it when that fails with a conflict or the Lease is gone.
    async fn renew(&mut self) -> Result<(), kube::Error> {
        let now = MicroTime(Timestamp::now());
        if let Some(last) = self.written.take() {
            let lease = self.renewed(last, &now);
            match self
                .api
                .replace(&self.own, &post_params(FIELD_MANAGER), &lease)
                .await
            {
                Ok(written) => {
                    self.written = Some(written);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        let written = match self.api.get_opt(&self.own).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.own.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: None,
                };
                let lease = self.renewed(lease, &now);
                self.api.create(&post_params(FIELD_MANAGER), &lease).await
            }
            Some(current) => {
                let lease = self.renewed(current, &now);
                self.api
                    .replace(&self.own, &post_params(FIELD_MANAGER), &lease)
                    .await
            }
        };
        self.written = Some(written?);
        Ok(())
    }

    /// `lease` as this replica renews it at `now`: held by it, labelled as a member.
    fn renewed(&self, mut lease: Lease, now: &MicroTime) -> Lease {
        let old = lease.spec.take().unwrap_or_default();
        let mut labels = std::collections::BTreeMap::new();
        labels.insert(MEMBER_LABEL.to_string(), self.group.clone());
        lease.metadata.labels = Some(labels);
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration_seconds),
            renew_time: Some(now.clone()),
            acquire_time: old.acquire_time.or(Some(now.clone())),
            ..LeaseSpec::default()
        });
        lease
    }

    /// The identities whose Lease changed within `duration`, sorted. The Leases of others
    /// that did not are deleted (see [`Poller::forget`]).
    async fn live_members(&mut self, duration: Duration) -> Result<Vec<String>, kube::Error> {
        let params = ListParams::default().labels(&format!("{MEMBER_LABEL}={}", self.group));
        let list = self.api.list(&params).await?;
        let now = Instant::now();
        let mut live = Vec::new();
        let mut names = Vec::new();
        let mut dead = Vec::new();
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
            self.seen.insert(name.clone(), (rv.clone(), seen_at));
            names.push(name.clone());
            let lapsed = now.duration_since(seen_at) >= duration;
            match holder {
                Some(holder) if !lapsed => live.push(holder),
                _ if lapsed && name != self.own => dead.push((name, rv)),
                _ => {}
            }
        }
        self.seen.retain(|name, _| names.contains(name));
        for (name, rv) in dead {
            self.forget(&name, rv).await;
        }
        live.sort();
        live.dedup();
        Ok(live)
    }

    /// Deletes the Lease `name` of a replica counted dead, if it is still at `rv` (a
    /// replica that came back and renewed it keeps it): a replica started later then never
    /// sees it, rather than counting it live for a lease duration of its own.
    async fn forget(&mut self, name: &str, rv: String) {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(rv),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &params).await {
            Ok(_) => {
                self.seen.remove(name);
                tracing::info!(lease = %name, "deleted the shard lease of a replica counted dead");
            }
            Err(e) => {
                tracing::debug!(lease = %name, error = %crate::util::kube_error(&e), "did not delete the shard lease of a replica counted dead")
            }
        }
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

/// Sleeps until `until`; true if `stop` turned true (or its sender went away) meanwhile.
async fn sleep_or_stop(until: Instant, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep_until(until) => None,
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
