//! Work queues: the [`WorkQueue`] of keys every handler has, and the coalesced
//! [`PendingEvent`] each queued key stands for.

pub mod pending;
pub mod work_queue;

pub use pending::{ChangeKind, PendingEvent};
pub use work_queue::WorkQueue;
