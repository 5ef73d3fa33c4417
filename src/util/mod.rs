//! Small helpers every stage uses: locks that survive a poisoned mutex, RFC 3339 times,
//! bearer tokens, which file events mean a change, errors on one line, and how the daemon
//! names itself to the API server ([`identity`]).
//! Imports nothing else of the crate, so any stage may use it.

mod error_chain;
mod file_events;
pub mod identity;
mod kube_error;
pub mod redact;
mod sync;
mod time;
mod token;

pub use error_chain::chain_text;
pub use file_events::changes_content;
pub use kube_error::{is_refusal, kube_error};
pub use sync::{lock, read, write};
pub use time::rfc3339;
pub use token::{bearer_token, token_matches};

/// A `HashMap` with foldhash's fast hasher (randomly seeded per process): for the maps
/// every event passes through, where std's SipHash was a measurable share of the CPU.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A `HashSet` with foldhash's fast hasher, as [`FastMap`].
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
