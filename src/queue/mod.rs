//! Work queues and what their keys stand for: the [`WorkQueue`] of keys (de-duplication,
//! one worker per key, delays, rate-limited retries), the events owed per key by delivery
//! mode ([`Owed`]), and the [`DeadLetters`] given up on.

pub mod dead_letter;
pub mod pending;
pub mod rate_limit;
pub mod work_queue;

pub use dead_letter::{DeadLetter, DeadLetterView, DeadLetters};
pub use pending::{ChangeKind, Owed, PendingEvent};
pub use rate_limit::RateLimits;
pub use work_queue::WorkQueue;
