//! The daemon's side of `ha.mode: sharded`: the channel the membership publishes this
//! replica's share on (the informers read it), and the share in `/status` and `/metrics`.

use tokio::sync::watch;

use crate::config::{Config, HaMode, HaSpec};
use crate::election::ReplicaStatus;
use crate::metrics::{Metrics, RangeLabel, ReplicaLabel, set_counter};
use crate::sharding::{Assignment, Membership, ShardStatus};

/// What the informers read this replica's share from.
pub(super) type AssignmentRx = watch::Receiver<Option<Assignment>>;

/// Where the membership publishes this replica's share.
pub(super) type AssignmentTx = watch::Sender<Option<Assignment>>;

/// The membership's channel in sharded mode; nothing otherwise.
pub(super) fn channel(config: &Config) -> (Option<AssignmentTx>, Option<AssignmentRx>) {
    if config.ha.mode != HaMode::Sharded {
        return (None, None);
    }
    let (tx, rx) = Membership::channel();
    (Some(tx), Some(rx))
}

/// `/status`'s `replica` in sharded mode: `leader` says whether this replica owns a range.
pub(super) fn replica(ha: &HaSpec, shards: &ShardStatus) -> ReplicaStatus {
    let view = shards.view();
    ReplicaStatus {
        identity: ha.identity.clone(),
        mode: ha.mode.as_str(),
        leader: !view.ranges.is_empty(),
        lease: Some(format!(
            "{}/{}",
            ha.lease_namespace,
            crate::sharding::members::member_lease_name(&ha.lease_name, &ha.identity)
        )),
        holder: Some(ha.identity.clone()),
        renewals: shards.renewals(),
        losses: shards.losses(),
        transitions: view.rebalances,
        shards: Some(view),
    }
}

/// Fills the replica's metric families from `replica`.
pub(super) fn set_metrics(metrics: &Metrics, replica: &ReplicaStatus) {
    let st = &metrics.stages;
    st.replica_info
        .get_or_create(&ReplicaLabel {
            identity: replica.identity.clone(),
            mode: replica.mode.to_string(),
        })
        .set(1);
    set_counter(&st.lease_losses, replica.losses);
    let Some(shards) = &replica.shards else {
        return;
    };
    st.shard_members.set(shards.members.len() as i64);
    st.shard_owned.clear();
    for range in &shards.ranges {
        st.shard_owned
            .get_or_create(&RangeLabel {
                range: range.clone(),
            })
            .set(1);
    }
}
