//! Rate limits for retries: per-key exponential backoff combined with a token bucket as a
//! max-of limiter, as client-go's default controller rate limiter does. Requeues a handler
//! asks for take a token from the same bucket.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// How retries are paced.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimits {
    /// First retry delay; doubles per failure of the same key.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_cap: Duration,
    /// Retries and requeues per second across all keys; `None` for no bucket.
    pub qps: Option<f64>,
    /// How many retries and requeues may go at once before `qps` applies.
    pub burst: u32,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_millis(100),
            backoff_cap: Duration::from_secs(30),
            qps: Some(10.0),
            burst: 100,
        }
    }
}

/// The delay before retry number `failures`: `base * 2^(failures-1)`, at most `cap`.
pub fn backoff(base: Duration, cap: Duration, failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1));
    base.saturating_mul(factor).min(cap)
}

/// The token bucket retries take a token from.
pub struct Bucket {
    limiter: DefaultDirectRateLimiter,
    clock: DefaultClock,
}

impl Bucket {
    /// A bucket refilled at `qps` tokens per second holding up to `burst`; `None` when
    /// `qps` is not a positive finite number.
    pub fn new(qps: f64, burst: u32) -> Option<Self> {
        if !(qps.is_finite() && qps > 0.0) {
            return None;
        }
        let quota = Quota::with_period(Duration::from_secs_f64(1.0 / qps))?
            .allow_burst(NonZeroU32::new(burst.max(1))?);
        Some(Self {
            limiter: RateLimiter::direct(quota),
            clock: DefaultClock::default(),
        })
    }

    /// Takes a token now (`None`), or says how long until one is available.
    pub fn try_take(&self) -> Option<Duration> {
        match self.limiter.check() {
            Ok(()) => None,
            Err(not_until) => Some(not_until.wait_time_from(self.clock.now())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let (base, cap) = (Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(backoff(base, cap, 1), Duration::from_millis(100));
        assert_eq!(backoff(base, cap, 3), Duration::from_millis(400));
        assert_eq!(backoff(base, cap, 10), cap);
        assert_eq!(backoff(base, cap, u32::MAX), cap);
    }

    #[test]
    fn the_bucket_allows_its_burst_then_asks_to_wait() {
        let bucket = Bucket::new(1.0, 3).unwrap();
        for _ in 0..3 {
            assert_eq!(bucket.try_take(), None);
        }
        let wait = bucket.try_take().expect("the fourth token must wait");
        assert!(
            wait > Duration::from_millis(500) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(Bucket::new(0.0, 1).is_none());
    }
}
