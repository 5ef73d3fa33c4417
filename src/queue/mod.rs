//! The generic work queue: the [`WorkQueue`] of keys (de-duplication, one worker per key,
//! delays, rate-limited retries) and its [`RateLimits`]. It knows nothing of what a key
//! stands for; the handler stage keeps that.

pub mod rate_limit;
pub mod work_queue;

pub use rate_limit::RateLimits;
pub use work_queue::WorkQueue;
