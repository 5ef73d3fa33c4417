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
//! [`capabilities`]), [`routes`], [`traces`], with the watch settings informers and routes share in
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
mod tenancy;
#[cfg(test)]
mod tests;
mod traces;
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
    let validated = validate_all(file, text);
    match validated.config {
        Some(config) if validated.errors.is_empty() => Ok(config),
        _ => Err(ConfigErrors(validated.errors)),
    }
}

/// A config as far as validation got, with everything it found.
pub(super) struct Validated {
    /// The document, unless the YAML is broken.
    pub document: Option<Document>,
    /// The config as far as it could be built (also when it has mistakes: what could not
    /// be read is left out).
    pub config: Option<Config>,
    /// Every mistake, sorted by place.
    pub errors: Vec<ConfigError>,
    /// Probable mistakes `run` accepts, sorted by place.
    pub warnings: Vec<ConfigError>,
}

impl Validated {
    fn failed(document: Option<Document>, error: ConfigError) -> Self {
        Self {
            document,
            config: None,
            errors: vec![error],
            warnings: Vec::new(),
        }
    }
}

/// Parses and checks the config in `text`, finding every mistake in one pass.
pub(super) fn validate_all(file: &Path, text: &str) -> Validated {
    validate_all_in(file, text, None)
}

/// [`validate_all`], with the plugins looked for in `plugins_dir` instead of the config's
/// `plugins_dir` when it is given (`switchyard check --plugins-dir`).
pub(super) fn validate_all_in(file: &Path, text: &str, plugins_dir: Option<&Path>) -> Validated {
    if text.len() > limits::MAX_CONFIG_BYTES {
        let error = ConfigError::whole_file(file, SourceError::TooLarge);
        return Validated::failed(None, error);
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
            return Validated::failed(None, error);
        }
    };
    validate_document(file, document, plugins_dir, &HashSet::new())
}

/// Checks a parsed config. `tenant_handlers` are the names under `handlers:` that come from
/// team `Handler` resources (`NAMESPACE.NAME`, a name the file's own handlers cannot take).
pub(super) fn validate_document(
    file: &Path,
    document: Document,
    plugins_dir: Option<&Path>,
    tenant_handlers: &HashSet<String>,
) -> Validated {
    let mut errors = Errors::new(file.to_path_buf(), &document);
    let config = errors
        .read::<ConfigFile>("", &document.root)
        .map(|top| build(file, top, plugins_dir, tenant_handlers, &mut errors));
    let (errors, warnings) = errors.into_sorted();
    Validated {
        document: Some(document),
        config,
        errors,
        warnings,
    }
}

/// The names defined in a section, including those whose entries could not be read.
struct Defined<T> {
    /// Each entry read (perhaps with parts left out), and whether it was read whole.
    read: Vec<(String, T, bool)>,
    names: Vec<String>,
}

/// Reads each entry of the section `informers` or `handlers`.
fn read_section<T: DeserializeOwned>(
    section: &str,
    entries: Option<BTreeMap<String, Value>>,
    tenant_names: &HashSet<String>,
    errors: &mut Errors,
) -> Defined<T> {
    let mut defined = Defined {
        read: Vec::new(),
        names: Vec::new(),
    };
    for (name, value) in entries.unwrap_or_default() {
        let path = join(section, &name);
        if !names::is_valid_name(&name) && !tenant_names.contains(&name) {
            errors.at_key(
                path.clone(),
                format!("invalid name {name:?}: use lower case letters, digits, '-' and '_'"),
            );
        }
        defined.names.push(name.clone());
        let before = errors.count();
        if let Some(read) = errors.read::<T>(&path, &value) {
            let whole = errors.count() == before;
            defined.read.push((name, read, whole));
        }
    }
    defined
}

/// Builds the config from its top level, each section in turn, then the cross-checks.
fn build(
    file: &Path,
    top: ConfigFile,
    plugins_dir: Option<&Path>,
    tenant_handlers: &HashSet<String>,
    errors: &mut Errors,
) -> Config {
    let given = plugins_dir;
    let base = file.parent().unwrap_or(Path::new("."));
    let admin_file = admin::read_admin(top.admin.as_ref(), errors);
    let ha = ha::build_ha(top.ha.as_ref(), errors);
    let oci = oci::build_oci(top.oci.as_ref(), base, errors);
    let tracing = traces::build_tracing(top.tracing.as_ref(), errors);
    let tenancy = tenancy::build_tenancy(top.tenancy.as_ref(), errors);
    let sections = Sections {
        informers: top.informers,
        handlers: top.handlers,
        routes: top.routes,
        tenant_handlers,
        routes_optional: tenancy.is_some(),
    };
    let (informers, handlers, routes) = build_sections(sections, base, errors);
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
    let plugins_dir = match given {
        Some(dir) => dir.to_path_buf(),
        None => expand_at(&plugins_dir, "plugins_dir", base, errors)
            .unwrap_or_else(|| base.join(plugins_dir)),
    };
    handlers::check_shadows(&handlers, &plugins_dir, errors);
    Config {
        state,
        plugin_slots: top.plugin_slots.unwrap_or_default(),
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
        tracing,
        tenancy,
        informers,
        handlers,
        routes,
    }
}

/// The informers, handlers and routes of a config, as written.
struct Sections<'a> {
    informers: Option<BTreeMap<String, Value>>,
    handlers: Option<BTreeMap<String, Value>>,
    routes: Option<Vec<Value>>,
    /// The names under `handlers:` that come from team resources.
    tenant_handlers: &'a HashSet<String>,
    /// Whether a config without routes is fine (team resources bring theirs).
    routes_optional: bool,
}

/// The valid informers, handlers and routes (the informers of the routes' own watches
/// among the informers), and each handler's capabilities checked against what its routes
/// watch, routes with mistakes included.
fn build_sections(
    sections: Sections,
    base: &Path,
    errors: &mut Errors,
) -> (Vec<InformerSpec>, Vec<HandlerSpec>, Vec<RouteSpec>) {
    let Sections {
        informers,
        handlers,
        routes,
        tenant_handlers,
        routes_optional,
    } = sections;
    let none = HashSet::new();
    let informer_files = read_section::<InformerFile>("informers", informers, &none, errors);
    let handler_files = read_section::<HandlerFile>("handlers", handlers, tenant_handlers, errors);
    let mut informers: Vec<InformerSpec> = Vec::new();
    for (name, f, whole) in informer_files.read {
        let before = errors.count();
        let informer = informers::build_informer(&name, f, errors);
        if whole && errors.count() == before {
            informers.extend(informer);
        }
    }
    let handlers: Vec<HandlerSpec> = handler_files
        .read
        .into_iter()
        .map(|(name, h, _)| handlers::build_handler(name, h, base, errors))
        .collect();
    handlers::check_workers(&handlers, errors);
    let known = Known {
        names: informer_files.names.iter().map(String::as_str).collect(),
        read: &informers,
        complete: !errors.left_out("informers"),
    };
    for handler in &handlers {
        check_reads(handler, &known, errors);
    }
    let handler_names: Vec<&str> = handler_files.names.iter().map(String::as_str).collect();
    let handlers_known = (!errors.left_out("handlers")).then_some(handler_names.as_slice());
    let routes = routes.unwrap_or_default();
    let mut built = build_routes(&routes, handlers_known, &known, errors);
    if routes.is_empty() && !routes_optional && errors.count() == 0 {
        errors.at(
            "routes",
            "no routes: add at least one route from a resource to a handler",
        );
    }
    if errors.left_out("routes") {
        built.unbuilt.push(None);
    }
    check_grants(
        &handlers,
        &known,
        built.all.as_slice(),
        built.unbuilt,
        errors,
    );
    let mut routes = Vec::new();
    for (route, own, valid) in built.all {
        if valid {
            informers.extend(own);
            routes.push(route);
        }
    }
    (informers, handlers, routes)
}

/// Each informer a handler `reads:` is defined under `informers:` (unless that section could
/// not be read).
fn check_reads(handler: &HandlerSpec, known: &Known, errors: &mut Errors) {
    if !known.complete {
        return;
    }
    for (i, name) in handler.reads.iter().enumerate() {
        if handler.reads[..i].contains(name) {
            errors.at(
                format!("handlers.{}.reads[{i}]", handler.name),
                format!("{name:?} is read already"),
            );
            continue;
        }
        if known.names.contains(&name.as_str()) {
            continue;
        }
        let hint = match names::nearest(name, &known.names) {
            Some(near) => format!("; did you mean {near:?}?"),
            None if known.names.is_empty() => "; there are none".to_string(),
            None => format!(" ({})", known.names.join(", ")),
        };
        errors.at(
            format!("handlers.{}.reads[{i}]", handler.name),
            format!("{name:?} is not an informer under `informers:`{hint}"),
        );
    }
}

/// Checks each handler's capabilities against the resources its routes watch: every route
/// whose source is known (`all`, with mistakes or not), unless a route of the handler, or
/// an informer feeding one, could not be built.
fn check_grants(
    handlers: &[HandlerSpec],
    known: &Known,
    all: &[(RouteSpec, Option<InformerSpec>, bool)],
    unbuilt_routes: Vec<Option<String>>,
    errors: &mut Errors,
) {
    let unbuilt = capabilities::Unbuilt {
        invalid_informers: known.complete.then(|| {
            let valid = |name: &&str| known.read.iter().any(|i| i.name == *name);
            known
                .names
                .iter()
                .filter(|n| !valid(n))
                .map(|n| n.to_string())
                .collect()
        }),
        routes_of: unbuilt_routes,
    };
    let mut informers = known.read.to_vec();
    informers.extend(all.iter().filter_map(|(_, own, _)| own.clone()));
    let routes: Vec<RouteSpec> = all.iter().map(|(r, ..)| r.clone()).collect();
    for handler in handlers {
        capabilities::check_resources(handler, &routes, &informers, &unbuilt, errors);
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

/// The routes of the config.
struct BuiltRoutes {
    /// Each route whose source is known, with its own watch's informer, and whether it is
    /// valid.
    all: Vec<(RouteSpec, Option<InformerSpec>, bool)>,
    /// The handler of each route whose source is not known (`None` where even that cannot
    /// be told).
    unbuilt: Vec<Option<String>>,
}

/// Reads and builds every route, and the informers of those with their own watch.
fn build_routes(
    values: &[Value],
    handlers: Option<&[&str]>,
    informers: &Known,
    errors: &mut Errors,
) -> BuiltRoutes {
    let mut names = HashSet::new();
    let mut built = BuiltRoutes {
        all: Vec::new(),
        unbuilt: Vec::new(),
    };
    for (i, value) in values.iter().enumerate() {
        let path = format!("routes[{i}]");
        let before = errors.count();
        let Some(file) = errors.read::<RouteFile>(&path, value) else {
            let handler = value.get("handler").and_then(Value::as_str);
            built.unbuilt.push(handler.map(String::from));
            continue;
        };
        let handler = file.handler.clone();
        let context = RouteContext {
            at: path,
            handlers,
            informers,
        };
        match routes::build_route(&context, file, &mut names, errors) {
            Some((route, own)) => built.all.push((route, own, errors.count() == before)),
            None => built.unbuilt.push(Some(handler)),
        }
    }
    built
}
