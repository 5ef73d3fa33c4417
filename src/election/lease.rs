//! One attempt on the Lease: read it, and create, take over or renew it when this replica
//! may, with optimistic concurrency on `resourceVersion`.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use tokio::time::Instant;

use super::status::ElectionStatus;
use crate::config::HaSpec;
use crate::util::identity::{FIELD_MANAGER, post_params};

/// What an attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Attempt {
    /// This replica holds the Lease (acquired or renewed).
    Held,
    /// Another replica holds a Lease that has not expired, or won a race for it.
    Taken,
    /// The API could not be reached or refused the request (a refusal is recorded in the
    /// status: see [`ElectionStatus::refused`]).
    Failed,
}

/// The Lease of one election, and the record as this replica last saw it change.
pub(super) struct LeaseClient {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration_seconds: i32,
    /// The spec last read and when (local clock) it was first seen so.
    observed: Option<(LeaseSpec, Instant)>,
}

impl LeaseClient {
    /// A client for the Lease `spec` names.
    pub(super) fn new(client: kube::Client, spec: &HaSpec) -> Self {
        Self {
            api: Api::namespaced(client, &spec.lease_namespace),
            name: spec.lease_name.clone(),
            identity: spec.identity.clone(),
            duration_seconds: i32::try_from(spec.lease_duration.as_secs().max(1))
                .unwrap_or(i32::MAX),
            observed: None,
        }
    }

    /// client-go's `tryAcquireOrRenew`: creates the Lease if absent; otherwise takes it if
    /// this replica holds it, nobody does, or its holder's lease expired as seen here.
    pub(super) async fn try_acquire_or_renew(&mut self, status: &ElectionStatus) -> Attempt {
        let now = MicroTime(Timestamp::now());
        let current = match self.api.get_opt(&self.name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return self.create(now, status).await,
            Err(e) => {
                tracing::warn!(lease = %status.lease(), error = %crate::util::kube_error(&e), "cannot read the lease");
                refused(&e, "read", status);
                return Attempt::Failed;
            }
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        status.saw_holder(holder.clone());
        let changed = self.observed.as_ref().is_none_or(|(seen, _)| *seen != spec);
        if changed {
            self.observed = Some((spec.clone(), Instant::now()));
        }
        let (_, seen_at) = self.observed.as_ref().expect("observed just above");
        let ours = holder.as_deref() == Some(self.identity.as_str());
        let duration = std::time::Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        if holder.is_some() && !ours && *seen_at + duration > Instant::now() {
            status.set_refused(None);
            return Attempt::Taken;
        }
        let mut next = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration_seconds),
            renew_time: Some(now.clone()),
            ..spec.clone()
        };
        if !ours {
            next.acquire_time = Some(now);
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        let lease = Lease {
            metadata: current.metadata.clone(),
            spec: Some(next),
        };
        self.replace(lease, status).await
    }

    /// client-go's release on cancel: empties the holder and shortens the lease to a
    /// second, so another replica takes it at its next attempt.
    pub(super) async fn release(&mut self, status: &ElectionStatus) {
        let Ok(Some(current)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        let now = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: current.metadata.clone(),
            spec: Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                renew_time: Some(now.clone()),
                acquire_time: Some(now),
                ..spec
            }),
        };
        match self.replace(lease, status).await {
            Attempt::Held => tracing::info!(lease = %status.lease(), "released the lease"),
            _ => tracing::warn!(lease = %status.lease(), "could not release the lease"),
        }
    }

    /// Creates the Lease held by this replica.
    async fn create(&mut self, now: MicroTime, status: &ElectionStatus) -> Attempt {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.duration_seconds),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&post_params(FIELD_MANAGER), &lease).await {
            Ok(created) => self.won(created, status),
            Err(e) => self.lost(&e, status),
        }
    }

    /// Writes `lease` over the version it was read at.
    async fn replace(&mut self, lease: Lease, status: &ElectionStatus) -> Attempt {
        match self
            .api
            .replace(&self.name, &post_params(FIELD_MANAGER), &lease)
            .await
        {
            Ok(written) => self.won(written, status),
            Err(e) => self.lost(&e, status),
        }
    }

    /// Records a write that went through.
    fn won(&mut self, written: Lease, status: &ElectionStatus) -> Attempt {
        let spec = written.spec.unwrap_or_default();
        status.set_refused(None);
        status.saw_holder(spec.holder_identity.clone().filter(|h| !h.is_empty()));
        self.observed = Some((spec, Instant::now()));
        Attempt::Held
    }

    /// Sorts a refused write: a conflict means another replica wrote first.
    fn lost(&self, e: &kube::Error, status: &ElectionStatus) -> Attempt {
        match e {
            kube::Error::Api(s) if s.code == 409 => {
                status.set_refused(None);
                Attempt::Taken
            }
            _ => {
                tracing::warn!(lease = %status.lease(), error = %crate::util::kube_error(e), "cannot write the lease");
                refused(e, "write", status);
                Attempt::Failed
            }
        }
    }
}

/// Records `e` in `status` when it is a refusal of the API server (see
/// [`crate::util::is_refusal`]) to `verb` the Lease; an API server that cannot be reached
/// leaves the record as it was.
fn refused(e: &kube::Error, verb: &str, status: &ElectionStatus) {
    if crate::util::is_refusal(e) {
        status.set_refused(Some(format!(
            "cannot {verb} Lease {}: {}",
            status.lease(),
            crate::util::kube_error(e)
        )));
    }
}
