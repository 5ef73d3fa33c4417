//! Small helpers every stage uses: locks that survive a poisoned mutex and RFC 3339 times.
//! Imports nothing else of the crate, so any stage may use it.

mod sync;
mod time;

pub use sync::{lock, read, write};
pub use time::rfc3339;
