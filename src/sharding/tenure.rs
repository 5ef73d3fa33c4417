//! This replica's hold on its ranges: when its Lease was last renewed, whether it claims
//! ranges now, and the assignment it publishes. The membership task records renewals and
//! publishes what each poll finds; the handlers' workers ask [`Tenure::holds`] right
//! before each plugin call.
//!
//! Why the workers ask themselves rather than trust the published assignment: a process
//! paused past its renew deadline (SIGSTOP, a frozen VM, a stalled node) wakes up with its
//! old ranges still published and events for them already read from the socket, while
//! another replica has taken those ranges over. Whichever task runs first after the pause
//! must find the deadline passed, and a timer task that would give the ranges up is not
//! guaranteed to run before the workers. So the deadline is checked where the call is
//! made, on the clocks, and the first to find it passed gives the ranges up (a loss).
//!
//! The time since a renewal is the longer of the monotonic and the wall clock's: the
//! monotonic clock may stand still while a machine sleeps, the wall clock may be set back;
//! a wall clock set forward can only make this replica give up early, never hold too long.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use super::members::{Assignment, ShardStatus, ranges_of};
use crate::util::lock;

/// When a renewal was sent, on both clocks.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    monotonic: Instant,
    wall: SystemTime,
}

impl Stamp {
    /// Now.
    pub fn now() -> Self {
        Self {
            monotonic: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// The time since this stamp: the longer of the two clocks'.
    fn elapsed(&self) -> Duration {
        let wall = SystemTime::now()
            .duration_since(self.wall)
            .unwrap_or_default();
        self.monotonic.elapsed().max(wall)
    }
}

/// This replica's hold on its ranges; see the module docs.
pub struct Tenure {
    identity: String,
    renew_deadline: Duration,
    hold: Mutex<Hold>,
    tx: watch::Sender<Option<Assignment>>,
    status: Arc<ShardStatus>,
}

/// What [`Tenure`] guards.
#[derive(Debug, Default)]
struct Hold {
    /// When the last successful renewal was sent.
    renewed: Option<Stamp>,
    /// Successful renewals in a row, each sent within the renew deadline of the one before.
    streak: u32,
}

impl Tenure {
    /// The tenure of `identity`, publishing on `tx` and counting in `status`.
    pub fn new(
        identity: &str,
        renew_deadline: Duration,
        tx: watch::Sender<Option<Assignment>>,
        status: Arc<ShardStatus>,
    ) -> Self {
        Self {
            identity: identity.to_string(),
            renew_deadline,
            hold: Mutex::new(Hold::default()),
            tx,
            status,
        }
    }

    /// The counters this tenure keeps.
    pub(super) fn status(&self) -> &ShardStatus {
        &self.status
    }

    /// Whether this replica may handle its ranges now: it claims some and its Lease was
    /// renewed within the renew deadline. When the deadline has passed it gives them up
    /// first (counted as a loss), so no call is made for a range another replica may own.
    pub fn holds(&self) -> bool {
        let mut hold = lock(&self.hold);
        self.expire(&mut hold);
        self.fresh(&hold) && self.claims()
    }

    /// Waits until this replica claims ranges again (at once if it does now).
    pub async fn claimed(&self) {
        let mut rx = self.tx.subscribe();
        let claims = |a: &Option<Assignment>| a.as_ref().is_some_and(|a| !a.ranges.is_empty());
        // The sender lives in self: the wait cannot fail while self does.
        let _ = rx.wait_for(claims).await;
    }

    /// Records a successful renewal, sent at `sent`. One sent after the renew deadline had
    /// passed starts a new streak, the ranges given up first.
    pub(super) fn renewed(&self, sent: Stamp) {
        let mut hold = lock(&self.hold);
        self.expire(&mut hold);
        hold.streak = hold.streak.saturating_add(1);
        hold.renewed = Some(sent);
    }

    /// Publishes what a poll found: the live `members` (`None` when they could not be
    /// listed: the current ones are kept), with this replica's range among them when it
    /// holds its Lease and has renewed it at two polls in a row (the first only announces
    /// it, so the others see it before it claims). `announce` publishes nothing yet.
    pub(super) fn settle(&self, members: Option<Vec<String>>, announce: bool) {
        let mut hold = lock(&self.hold);
        self.expire(&mut hold);
        if announce {
            return;
        }
        let holding = self.fresh(&hold);
        let next = match members {
            Some(mut members) => {
                if holding && !members.contains(&self.identity) {
                    members.push(self.identity.clone());
                    members.sort();
                }
                let ranges = if holding && hold.streak > 1 {
                    ranges_of(&members, &self.identity)
                } else {
                    Vec::new()
                };
                Assignment { members, ranges }
            }
            None => match self.tx.borrow().clone() {
                Some(current) => current,
                None => return,
            },
        };
        self.publish(next);
    }

    /// Whether the last renewal is within the renew deadline.
    fn fresh(&self, hold: &Hold) -> bool {
        hold.renewed
            .is_some_and(|r| r.elapsed() < self.renew_deadline)
    }

    /// Whether the published assignment has ranges.
    fn claims(&self) -> bool {
        self.tx
            .borrow()
            .as_ref()
            .is_some_and(|a| !a.ranges.is_empty())
    }

    /// When the renew deadline has passed: ends the streak and gives up the ranges, if any,
    /// counting a loss.
    fn expire(&self, hold: &mut Hold) {
        if self.fresh(hold) {
            return;
        }
        hold.streak = 0;
        let Some(current) = self.tx.borrow().clone() else {
            return;
        };
        if current.ranges.is_empty() {
            return;
        }
        self.status.count_loss();
        tracing::warn!(
            identity = %self.identity,
            since = ?hold.renewed.map(|r| r.elapsed()),
            "gave up this replica's shard: its lease was not renewed within the renew deadline"
        );
        self.publish(Assignment {
            members: current.members,
            ranges: Vec::new(),
        });
    }

    /// Sends `next` when it differs from what was sent, counting the change.
    fn publish(&self, next: Assignment) {
        if self.tx.borrow().as_ref() == Some(&next) {
            return;
        }
        tracing::info!(
            identity = %self.identity,
            members = %next.members.join(","),
            ranges = %next.ranges.iter().map(ToString::to_string).collect::<Vec<_>>().join(" "),
            "shard assignment changed"
        );
        self.status.set_assignment(next.clone());
        self.tx.send_replace(Some(next));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenure() -> (Tenure, watch::Receiver<Option<Assignment>>) {
        let (tx, rx) = watch::channel(None);
        let status = Arc::new(ShardStatus::default());
        (Tenure::new("b", Duration::from_secs(4), tx, status), rx)
    }

    fn members() -> Vec<String> {
        ["a", "b"].map(String::from).to_vec()
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_claims_at_its_second_renewal_in_a_row() {
        let (t, rx) = tenure();
        t.renewed(Stamp::now());
        t.settle(Some(members()), true);
        assert!(rx.borrow().is_none(), "the first poll only announces");
        assert!(!t.holds());
        t.renewed(Stamp::now());
        t.settle(Some(members()), false);
        assert_eq!(rx.borrow().as_ref().unwrap().ranges.len(), 1);
        assert!(t.holds());
        assert_eq!(t.status.losses(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_after_the_renew_deadline_finds_the_ranges_given_up() {
        let (t, rx) = tenure();
        t.renewed(Stamp::now());
        t.renewed(Stamp::now());
        t.settle(Some(members()), false);
        assert!(t.holds());
        // A pause: nothing ran meanwhile, not even the membership task's timer.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!t.holds(), "the deadline passed");
        assert!(rx.borrow().as_ref().unwrap().ranges.is_empty());
        assert_eq!(t.status.losses(), 1);
        assert!(!t.holds());
        assert_eq!(t.status.losses(), 1, "one loss, counted once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_after_the_deadline_announces_again_before_claiming() {
        let (t, rx) = tenure();
        t.renewed(Stamp::now());
        t.renewed(Stamp::now());
        t.settle(Some(members()), false);
        tokio::time::advance(Duration::from_secs(5)).await;
        // The membership task wakes first and its renewal goes through.
        t.renewed(Stamp::now());
        assert_eq!(t.status.losses(), 1);
        t.settle(Some(members()), false);
        assert!(rx.borrow().as_ref().unwrap().ranges.is_empty());
        assert!(
            !t.holds(),
            "the first renewal after the loss only announces"
        );
        t.renewed(Stamp::now());
        t.settle(Some(members()), false);
        assert!(t.holds());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_list_keeps_the_ranges_until_the_deadline() {
        let (t, rx) = tenure();
        t.renewed(Stamp::now());
        t.renewed(Stamp::now());
        t.settle(Some(members()), false);
        tokio::time::advance(Duration::from_secs(3)).await;
        t.settle(None, false);
        assert!(t.holds());
        tokio::time::advance(Duration::from_secs(2)).await;
        t.settle(None, false);
        assert!(rx.borrow().as_ref().unwrap().ranges.is_empty());
        assert_eq!(t.status.losses(), 1);
    }
}
