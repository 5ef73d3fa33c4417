//! Quarantine of a plugin that keeps failing: after `after` failed calls in a row (on at
//! least two objects, so one poisoned object cannot trip it) within `window`, the handler
//! stops taking work. Its events wait in the queue (they are neither retried nor dead
//! lettered meanwhile); after a backoff one call is let through as a try: a success lifts
//! the quarantine, a failure doubles the backoff (up to ten minutes). Calls that began
//! before the quarantine and fail after it are not tries: they leave the backoff alone (with
//! eight workers, eight such failures would otherwise stretch a 5 s backoff to ten minutes).
//! A new plugin version or `POST /handlers/NAME/resume` lifts it at once.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::config::QuarantineSpec;
use crate::util::rfc3339;

/// The failures in a row so far.
#[derive(Debug, Default)]
struct Streak {
    count: u32,
    objects: HashSet<String>,
    first: Option<Instant>,
}

/// A quarantine in force.
#[derive(Debug, Clone)]
struct Tripped {
    since: SystemTime,
    /// When the next try may start.
    next_try: Instant,
    next_try_at: SystemTime,
    backoff: Duration,
    /// Whether a try is running now.
    trying: bool,
    last_error: String,
}

/// The quarantine state of one handler.
#[derive(Debug)]
pub(super) struct Breaker {
    spec: QuarantineSpec,
    streak: Streak,
    tripped: Option<Tripped>,
    /// How often it tripped, over the handler's life.
    pub(super) trips: u64,
}

/// A quarantine as `/status` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QuarantineView {
    /// Since when (RFC 3339).
    pub since: String,
    /// When the plugin is tried next (RFC 3339).
    pub next_try: String,
    /// The wait before that try.
    pub backoff_seconds: f64,
    /// The error of the call that tripped it or of the last failed try.
    pub last_error: String,
}

/// What a worker may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// Not quarantined: work.
    Open,
    /// Quarantined; this worker makes the try.
    Try,
    /// Quarantined: wait this long, then ask again.
    Wait(Duration),
}

impl Breaker {
    /// A closed breaker with these settings.
    pub(super) fn new(spec: QuarantineSpec) -> Self {
        Self {
            spec,
            streak: Streak::default(),
            tripped: None,
            trips: 0,
        }
    }

    /// Whether a worker may call the plugin now.
    pub(super) fn gate(&mut self) -> Gate {
        let Some(tripped) = &mut self.tripped else {
            return Gate::Open;
        };
        let now = Instant::now();
        if tripped.trying {
            // Another worker is making the try; look again after a backoff.
            return Gate::Wait(tripped.backoff);
        }
        if now >= tripped.next_try {
            tripped.trying = true;
            return Gate::Try;
        }
        Gate::Wait(tripped.next_try - now)
    }

    /// A call succeeded: the streak ends and a quarantine is lifted. True if one was.
    pub(super) fn succeeded(&mut self) -> bool {
        self.streak = Streak::default();
        self.tripped.take().is_some()
    }

    /// A try let through by [`Breaker::gate`] made no call (its key had nothing owed, or
    /// the replica lost its ranges): another worker may try.
    pub(super) fn give_back_try(&mut self) {
        if let Some(tripped) = &mut self.tripped {
            tripped.trying = false;
        }
    }

    /// A call on `object` failed with `error`; `was_try` if [`Breaker::gate`] let it through
    /// as the try. True if this trips the quarantine now.
    pub(super) fn failed(&mut self, object: &str, error: &str, was_try: bool) -> bool {
        if let Some(tripped) = &mut self.tripped {
            if !was_try {
                // A call begun before the quarantine: not a try, the backoff stays.
                return false;
            }
            // A failed try: wait twice as long.
            tripped.backoff = (tripped.backoff * 2).min(QuarantineSpec::MAX_BACKOFF);
            tripped.next_try = Instant::now() + tripped.backoff;
            tripped.next_try_at = SystemTime::now() + tripped.backoff;
            tripped.trying = false;
            tripped.last_error = error.to_string();
            return false;
        }
        if self.spec.after == 0 {
            return false;
        }
        let now = Instant::now();
        if self
            .streak
            .first
            .is_some_and(|first| now.duration_since(first) > self.spec.window)
        {
            self.streak = Streak::default();
        }
        self.streak.first.get_or_insert(now);
        self.streak.count += 1;
        if self.streak.objects.len() < 2 {
            self.streak.objects.insert(object.to_string());
        }
        if self.streak.count < self.spec.after || self.streak.objects.len() < 2 {
            return false;
        }
        self.streak = Streak::default();
        self.trips += 1;
        self.tripped = Some(Tripped {
            since: SystemTime::now(),
            next_try: now + self.spec.backoff,
            next_try_at: SystemTime::now() + self.spec.backoff,
            backoff: self.spec.backoff,
            trying: false,
            last_error: error.to_string(),
        });
        true
    }

    /// Lifts a quarantine (a new plugin version, a resume). True if one was in force.
    pub(super) fn lift(&mut self) -> bool {
        self.streak = Streak::default();
        self.tripped.take().is_some()
    }

    /// The quarantine in force, if any.
    pub(super) fn view(&self) -> Option<QuarantineView> {
        self.tripped.as_ref().map(|t| QuarantineView {
            since: rfc3339(t.since),
            next_try: rfc3339(t.next_try_at),
            backoff_seconds: t.backoff.as_secs_f64(),
            last_error: t.last_error.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(after: u32) -> Breaker {
        Breaker::new(QuarantineSpec {
            after,
            window: Duration::from_secs(60),
            backoff: Duration::from_millis(20),
        })
    }

    #[test]
    fn failures_on_two_objects_trip_it_one_poisoned_object_does_not() {
        let mut b = breaker(3);
        for _ in 0..10 {
            assert!(!b.failed("a", "boom", false));
        }
        assert_eq!(b.gate(), Gate::Open);
        assert!(b.failed("b", "boom", false));
        assert!(matches!(b.gate(), Gate::Wait(_)));
        assert_eq!(b.view().unwrap().last_error, "boom");
        assert!(b.lift());
        assert_eq!(b.gate(), Gate::Open);
    }

    #[test]
    fn a_success_ends_the_streak_and_zero_never_trips() {
        let mut b = breaker(3);
        b.failed("a", "x", false);
        b.failed("b", "x", false);
        b.succeeded();
        assert!(!b.failed("c", "x", false));
        let mut never = breaker(0);
        for i in 0..50 {
            assert!(!never.failed(&i.to_string(), "x", false));
        }
    }

    #[test]
    fn one_try_after_the_backoff_a_failed_try_doubles_it_a_good_one_lifts() {
        let mut b = breaker(2);
        b.failed("a", "x", false);
        assert!(b.failed("b", "x", false));
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(b.gate(), Gate::Try);
        assert!(matches!(b.gate(), Gate::Wait(_)), "one try at a time");
        assert!(!b.failed("a", "still broken", true));
        assert_eq!(b.view().unwrap().backoff_seconds, 0.04);
        assert!(matches!(b.gate(), Gate::Wait(_)));
        std::thread::sleep(Duration::from_millis(45));
        assert_eq!(b.gate(), Gate::Try);
        assert!(b.succeeded());
        assert_eq!(b.gate(), Gate::Open);
        assert_eq!(b.trips, 1);
    }

    #[test]
    fn calls_begun_before_the_quarantine_do_not_stretch_the_backoff() {
        let mut b = breaker(2);
        b.failed("a", "x", false);
        assert!(b.failed("b", "x", false));
        // Seven more workers' calls, in flight when it tripped, fail afterwards.
        for i in 0..7 {
            assert!(!b.failed(&i.to_string(), "x", false));
        }
        assert_eq!(b.view().unwrap().backoff_seconds, 0.02);
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(b.gate(), Gate::Try, "the try comes after the first backoff");
    }

    #[test]
    fn a_try_given_back_lets_another_worker_try() {
        let mut b = breaker(2);
        b.failed("a", "x", false);
        assert!(b.failed("b", "x", false));
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(b.gate(), Gate::Try);
        assert!(matches!(b.gate(), Gate::Wait(_)));
        b.give_back_try();
        assert_eq!(b.gate(), Gate::Try);
    }
}
