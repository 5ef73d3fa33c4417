//! Small helpers every stage uses: locks that survive a poisoned mutex, RFC 3339 times and
//! bearer tokens.
//! Imports nothing else of the crate, so any stage may use it.

mod kube_error;
mod sync;
mod time;
mod token;

pub use kube_error::kube_error;
pub use sync::{lock, read, write};
pub use time::rfc3339;
pub use token::{bearer_token, token_matches};
