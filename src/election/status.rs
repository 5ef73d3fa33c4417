//! What an election reports: for `/status` and `/metrics`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::Serialize;

use crate::config::HaSpec;
use crate::util::lock;

/// Counters of one replica's election.
#[derive(Debug)]
pub struct ElectionStatus {
    identity: String,
    mode: &'static str,
    lease: String,
    leading: AtomicBool,
    holder: Mutex<Option<String>>,
    /// Why the API server refuses this replica its Lease, until an attempt goes through.
    refused: Mutex<Option<String>>,
    renewals: AtomicU64,
    losses: AtomicU64,
    transitions: AtomicU64,
}

/// `/status`'s `replica`: this replica and the Lease as it last saw it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReplicaStatus {
    /// This replica's name in the Lease.
    pub identity: String,
    /// `single` or `leader`.
    pub mode: &'static str,
    /// Whether this replica leads (always true in single mode).
    pub leader: bool,
    /// The Lease, as `namespace/name`; absent in single mode.
    pub lease: Option<String>,
    /// The holder of the Lease when last read; absent if none.
    pub holder: Option<String>,
    /// Successful renewals of the Lease by this replica.
    pub renewals: u64,
    /// Times this replica lost the leadership without giving it up.
    pub losses: u64,
    /// Times this replica became or stopped being the leader.
    pub transitions: u64,
    /// In sharded mode: the members seen and the ranges this replica owns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<crate::sharding::members::ShardView>,
}

impl ElectionStatus {
    /// Counters at zero for the Lease `spec` names.
    pub fn new(spec: &HaSpec) -> Self {
        Self {
            identity: spec.identity.clone(),
            mode: spec.mode.as_str(),
            lease: format!("{}/{}", spec.lease_namespace, spec.lease_name),
            leading: AtomicBool::new(false),
            holder: Mutex::new(None),
            refused: Mutex::new(None),
            renewals: AtomicU64::new(0),
            losses: AtomicU64::new(0),
            transitions: AtomicU64::new(0),
        }
    }

    /// The Lease, as `namespace/name`.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    /// Whether this replica leads.
    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// Records whether this replica leads, counting a change.
    pub(super) fn set_leading(&self, leading: bool) {
        if self.leading.swap(leading, Ordering::SeqCst) != leading {
            self.transitions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records the holder last read.
    pub(super) fn saw_holder(&self, holder: Option<String>) {
        *lock(&self.holder) = holder;
    }

    /// Records why the API server refused an attempt on the Lease, or, with `None`, that
    /// one went through (the Lease was read, and written or found held by another).
    pub(super) fn set_refused(&self, why: Option<String>) {
        *lock(&self.refused) = why;
    }

    /// Why the API server refuses this replica its Lease (a Role missing, or in another
    /// namespace): such a replica can never lead, so it is not ready.
    pub fn refused(&self) -> Option<String> {
        lock(&self.refused).clone()
    }

    /// Counts a successful renewal.
    pub(super) fn count_renewal(&self) {
        self.renewals.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a leadership lost without giving it up.
    pub(super) fn count_loss(&self) {
        self.losses.fetch_add(1, Ordering::Relaxed);
    }

    /// Successful renewals so far.
    pub fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// Leadership changes so far.
    pub fn transitions(&self) -> u64 {
        self.transitions.load(Ordering::Relaxed)
    }

    /// The `/status` view.
    pub fn snapshot(&self) -> ReplicaStatus {
        ReplicaStatus {
            identity: self.identity.clone(),
            mode: self.mode,
            leader: self.leading(),
            lease: Some(self.lease.clone()),
            holder: lock(&self.holder).clone(),
            renewals: self.renewals(),
            losses: self.losses.load(Ordering::Relaxed),
            transitions: self.transitions(),
            shards: None,
        }
    }
}
