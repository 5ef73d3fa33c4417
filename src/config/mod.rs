//! The routing config, the bottom floor of the crate: the YAML schema ([`schema`]), its
//! validation into a [`Config`] with errors that name file, line, column and path, and the
//! values every stage reads (units, field paths, selectors, resource names). It imports no
//! other module of the crate, so any stage may depend on it.

pub mod capabilities;
mod document;
mod error;
pub mod field_path;
pub mod pointer;
pub mod resource;
pub mod schema;
pub mod selector;
mod spec;
mod token;
pub mod units;
mod validate;

use std::net::SocketAddr;
use std::path::Path;

pub use capabilities::{Capabilities, Verb};
pub use error::{ConfigError, ConfigErrors};
pub use field_path::FieldPath;
pub use pointer::validate_pointer;
pub use resource::ResourceName;
pub use selector::Selector;
pub use spec::{
    Condition, Config, Delivery, EventFilter, HandlerSpec, InformerSpec, ResourceRef, RouteFilter,
    RouteSource, RouteSpec, Test,
};
pub use token::{TokenError, TokenSource};
pub use validate::validate;

/// Where the admin API listens when the config does not say.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9470);

/// The built-in cache index of objects by namespace: reserved, a config cannot define an
/// index by this name.
pub const NAMESPACE_INDEX: &str = "namespace";

/// Prefix of the informer a route's own `resource:` defines (`route:NAME`): reserved, no
/// name under `informers:` can have it.
pub const ROUTE_INFORMER_PREFIX: &str = "route:";

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            path: String::new(),
            message: format!("cannot read the config file: {e}"),
        }])
    })?;
    validate(path, &text)
}
