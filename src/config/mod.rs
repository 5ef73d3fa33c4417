//! The routing config, the bottom floor of the crate: the YAML schema ([`schema`]), its
//! validation into a [`Config`] with errors that name file, line, column and path, and the
//! values every stage reads (units, field paths, selectors, resource names). It imports no
//! other module of the crate, so any stage may depend on it.

pub mod builtin;
pub mod capabilities;
mod checked;
pub mod crds;
mod document;
pub mod egress;
mod error;
pub mod expand;
pub mod field_path;
pub mod host;
pub mod limits;
pub mod oci;
pub mod pointer;
pub mod resource;
pub mod schema;
pub mod selector;
mod spec;
pub mod tenancy;
mod token;
pub mod units;
mod validate;
pub mod value_from;

use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;

use error::SourceError;

pub use capabilities::{Capabilities, Verb};
pub use checked::{Checked, check, check_in};
pub use egress::{Egress, EgressRule, HttpScheme};
pub use error::{ConfigError, ConfigErrors};
pub use field_path::FieldPath;
pub use host::{HostPattern, HostPort};
pub use pointer::validate_pointer;
pub use resource::ResourceName;
pub use schema::{InstanceMode, OnCorrupt};
pub use selector::Selector;
pub use spec::{
    BatchSpec, Condition, Config, Delivery, EventFilter, HaMode, HaSpec, HandlerSpec, InformerSpec,
    Initial, LogLimits, OutboundSpec, Owner, QuarantineSpec, ResourceRef, RouteFilter, RouteSource,
    RouteSpec, ShardBy, StateSpec, TenancySpec, Test, TracingSpec,
};
pub use token::{TokenError, TokenSource};
pub use validate::{nearest, validate};

/// Where the admin API listens when the config does not say.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9470);

/// Where the probes and metrics listener listens when the config does not say.
pub const DEFAULT_PROBES_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9471);

/// The built-in cache index of objects by namespace: reserved, a config cannot define an
/// index by this name.
pub const NAMESPACE_INDEX: &str = "namespace";

/// Prefix of the informer a route's own `resource:` defines (`route:NAME`): reserved, no
/// name under `informers:` can have it.
pub const ROUTE_INFORMER_PREFIX: &str = "route:";

/// What `finalizer: true` on a route puts before the route's name to make its finalizer.
pub const DEFAULT_FINALIZER_PREFIX: &str = "switchyard.dev/";

/// Reads and validates a config file, reading at most [`limits::MAX_CONFIG_BYTES`] of it.
///
/// This blocks: it reads the file (and the admin token), and parsing and checking are CPU
/// work, bounded by [`limits`]. Async code calls it through `tokio::task::spawn_blocking`.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let text =
        read_bounded(path).map_err(|e| ConfigErrors(vec![ConfigError::whole_file(path, e)]))?;
    validate(path, &text)
}

/// The text of the file at `path`, if it is no larger than a config may be.
fn read_bounded(path: &Path) -> Result<String, SourceError> {
    let file = std::fs::File::open(path).map_err(SourceError::Read)?;
    let mut bytes = Vec::new();
    file.take(limits::MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(SourceError::Read)?;
    if bytes.len() > limits::MAX_CONFIG_BYTES {
        return Err(SourceError::TooLarge);
    }
    String::from_utf8(bytes)
        .map_err(|e| SourceError::Read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}
