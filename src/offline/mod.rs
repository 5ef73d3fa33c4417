//! Testing plugins without a cluster: `switchyard record` writes the events a config's
//! routes deliver to a file, `switchyard replay` hands them to the handlers' plugins with
//! every Kubernetes write captured instead of sent.
//!
//! - [`events`]: the events file, one JSON object a line;
//! - [`record`]: the route sink that writes what a route delivers;
//! - [`replay`]: calling the plugins on recorded events, and what each call did;
//! - [`print`]: that, as text.

pub mod events;
pub mod print;
pub mod record;
pub mod replay;

pub use events::{EventsError, RecordedEvent, RecordedKind, read_events};
pub use record::record;
pub use replay::{EventReport, Mismatch, ReplayOutcome, check_events, replay};
