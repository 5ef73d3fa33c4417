//! Turns the text of a config file into a [`Config`], collecting every problem with its
//! file, line, column and path before failing.
//!
//! The text is parsed once into a [`Document`] (only a YAML syntax error stops here). Then
//! each part (the top level, `admin`, every informer, handler and route) is read into its
//! schema type on its own, so a wrong type or an unknown field in one item does not hide
//! the mistakes in the others; then the values are checked and cross-checked (every name a
//! route or handler refers to exists). Items that could not be read still count as defined,
//! so a mistake inside one does not also show up as "unknown" wherever it is named.
//!
//! One file per section: [`admin`], [`ha`], [`oci`], [`informers`], [`handlers`] (and their
//! [`capabilities`]), [`routes`], with the watch settings informers and routes share in
//! [`watch`].

mod admin;
mod capabilities;
mod errors;
mod ha;
mod handlers;
mod informers;
mod names;
pub use names::nearest;
mod oci;
mod outbound;
mod routes;
#[cfg(test)]
mod tests;
mod watch;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::document::{Document, join};
use super::error::SourceError;
use super::expand::expand_path;
use super::limits;
use super::schema::{ConfigFile, HandlerFile, InformerFile, RouteFile};
use super::{Config, ConfigError, ConfigErrors, HandlerSpec, InformerSpec, RouteSpec};
use errors::Errors;
use routes::{Known, RouteContext};

/// Parses and checks the config in `text`, read from `file`.
///
/// Reads the admin token, if the config names one, to check that it is there. Blocking, like
/// [`super::load`].
pub fn validate(file: &Path, text: &str) -> Result<Config, ConfigErrors> {
    let (_, config, errors) = validate_all(file, text);
    match config {
        Some(config) if errors.is_empty() => Ok(config),
        _ => Err(ConfigErrors(errors)),
    }
}

/// Parses and checks the config in `text`: the document (unless the YAML is broken), the
/// config as far as it could be built (also when it has mistakes: items that could not be
/// read are left out), and every mistake, sorted by place.
pub(super) fn validate_all(
    file: &Path,
    text: &str,
) -> (Option<Document>, Option<Config>, Vec<ConfigError>) {
    if text.len() > limits::MAX_CONFIG_BYTES {
        let error = ConfigError::whole_file(file, SourceError::TooLarge);
        return (None, None, vec![error]);
    }
    let document = match Document::parse(text) {
        Ok(document) => document,
        Err(e) => {
            let error = ConfigError {
                file: file.to_path_buf(),
                line: e.place.line,
                column: e.place.column,
                path: String::new(),
                message: errors::first_line(&e.message),
            };
            return (None, None, vec![error]);
        }
    };
    let mut errors = Errors::new(file.to_path_buf(), &document);
    let config = errors
        .read::<ConfigFile>("", &document.root)
        .map(|top| build(file, top, &mut errors));
    let errors = errors.into_sorted();
    (Some(document), config, errors)
}

/// The names defined in a section, including those whose entries could not be read.
struct Defined<T> {
    read: Vec<(String, T)>,
    names: Vec<String>,
}

/// Reads each entry of the section `informers` or `handlers`.
fn read_section<T: DeserializeOwned>(
    section: &str,
    entries: Option<BTreeMap<String, Value>>,
    errors: &mut Errors,
) -> Defined<T> {
    let mut defined = Defined {
        read: Vec::new(),
        names: Vec::new(),
    };
    for (name, value) in entries.unwrap_or_default() {
        let path = join(section, &name);
        if !names::is_valid_name(&name) {
            errors.at_key(
                path.clone(),
                format!("invalid name {name:?}: use lower case letters, digits, '-' and '_'"),
            );
        }
        defined.names.push(name.clone());
        if let Some(read) = errors.read::<T>(&path, &value) {
            defined.read.push((name, read));
        }
    }
    defined
}

/// Builds the config from its top level, each section in turn, then the cross-checks.
fn build(file: &Path, top: ConfigFile, errors: &mut Errors) -> Config {
    let base = file.parent().unwrap_or(Path::new("."));
    let admin_file = admin::read_admin(top.admin.as_ref(), errors);
    let ha = ha::build_ha(top.ha.as_ref(), errors);
    let oci = oci::build_oci(top.oci.as_ref(), base, errors);
    let informer_files = read_section::<InformerFile>("informers", top.informers, errors);
    let handler_files = read_section::<HandlerFile>("handlers", top.handlers, errors);
    let mut informers: Vec<InformerSpec> = informer_files
        .read
        .into_iter()
        .filter_map(|(name, f)| informers::build_informer(&name, f, errors))
        .collect();
    let handlers: Vec<HandlerSpec> = handler_files
        .read
        .into_iter()
        .map(|(name, h)| handlers::build_handler(name, h, base, errors))
        .collect();
    handlers::check_workers(&handlers, errors);
    let known = Known {
        names: informer_files.names.iter().map(String::as_str).collect(),
        read: &informers,
    };
    let handler_names: Vec<&str> = handler_files.names.iter().map(String::as_str).collect();
    let (routes, own_informers) = build_routes(
        &top.routes.unwrap_or_default(),
        &handler_names,
        &known,
        errors,
    );
    informers.extend(own_informers);
    for handler in &handlers {
        capabilities::check_resources(handler, &routes, &informers, errors);
    }
    let admin = admin::build_admin(admin_file, base, errors);
    let kubeconfig = top
        .kubeconfig
        .and_then(|p| expand_at(&p, "kubeconfig", base, errors));
    let plugins_dir = top.plugins_dir.unwrap_or_else(|| PathBuf::from("plugins"));
    let state = top
        .state_dir
        .and_then(|dir| expand_at(&dir, "state_dir", base, errors))
        .map(|dir| crate::config::StateSpec {
            dir,
            on_corrupt: top.state_on_corrupt.unwrap_or_default(),
            max_pending_writes: top
                .state_max_pending_writes
                .unwrap_or(crate::config::schema::DEFAULT_STATE_MAX_PENDING_WRITES),
        });
    if top.state_max_pending_writes == Some(0) {
        errors.at(
            "state_max_pending_writes",
            "state_max_pending_writes must be at least 1 (the changes the state store may hold uncommitted)",
        );
    }
    if state.is_some() && ha.mode == crate::config::HaMode::Sharded {
        // A restart's difference would take objects another replica owns now for deleted.
        errors.at(
            "state_dir",
            "state_dir cannot be used with ha.mode sharded in this version (after a restart, objects another replica owns now would be delivered as deleted): use ha.mode single or leader with state_dir",
        );
    }
    let plugins_dir = expand_at(&plugins_dir, "plugins_dir", base, errors)
        .unwrap_or_else(|| base.join(plugins_dir));
    handlers::check_shadows(&handlers, &plugins_dir, errors);
    Config {
        state,
        source: file.to_path_buf(),
        admin_token: admin.token,
        kubeconfig,
        plugins_dir,
        admin_listen: admin.listen,
        probes_listen: admin.probes_listen,
        admin_allowed_hosts: admin.allowed_hosts,
        header_read_timeout: admin.header_read_timeout,
        admin_max_connections: admin.max_connections,
        probes_max_connections: admin.probes_max_connections,
        ha,
        oci,
        informers,
        handlers,
        routes,
    }
}

/// The path written at `at`, `~` and variables expanded ([`expand_path`]) and made relative
/// to `base` (the config's folder); `None`, with the error recorded at its place, when a
/// variable is not set.
fn expand_at(path: &Path, at: &str, base: &Path, errors: &mut Errors) -> Option<PathBuf> {
    match expand_path(path) {
        Ok(p) if p.is_absolute() => Some(p),
        Ok(p) => Some(base.join(p)),
        Err(e) => {
            errors.at(at, e);
            None
        }
    }
}

/// Reads and builds every route, and the informers of those with their own watch.
fn build_routes(
    values: &[Value],
    handlers: &[&str],
    informers: &Known,
    errors: &mut Errors,
) -> (Vec<RouteSpec>, Vec<InformerSpec>) {
    let mut names = HashSet::new();
    let mut routes = Vec::new();
    let mut own_informers = Vec::new();
    for (i, value) in values.iter().enumerate() {
        let path = format!("routes[{i}]");
        let Some(file) = errors.read::<RouteFile>(&path, value) else {
            continue;
        };
        let context = RouteContext {
            at: path,
            handlers,
            informers,
        };
        if let Some((route, own)) = routes::build_route(&context, file, &mut names, errors) {
            own_informers.extend(own);
            routes.push(route);
        }
    }
    if values.is_empty() && errors.count() == 0 {
        errors.at(
            "routes",
            "no routes: add at least one route from a resource to a handler",
        );
    }
    (routes, own_informers)
}
