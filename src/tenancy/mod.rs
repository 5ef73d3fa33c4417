//! Team-owned `Route` and `Handler` resources (switchyard.dev/v1alpha1) at run time: their
//! watch ([`watch`]), the API server's word on what a team's ServiceAccount may read
//! ([`access`], SubjectAccessReviews), the client a team's handler writes through
//! ([`impersonate`]: every request made as its ServiceAccount) and what the daemon tells
//! the team ([`status`]: conditions and Events on each resource).
//!
//! How a resource becomes a handler or a route is the config's business
//! ([`crate::config::tenancy`]); the daemon merges and applies (src/daemon/tenancy.rs).
//! Imports config and util only.

pub mod access;
pub mod impersonate;
pub mod status;
pub mod watch;

pub use access::may_watch;
pub use impersonate::impersonating;
pub use status::{Counts, StatusWriter};
pub use watch::TeamWatch;
