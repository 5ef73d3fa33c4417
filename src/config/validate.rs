//! Turns the text of a config file into a [`Config`], collecting every problem with its
//! file, line, column and path before failing.
//!
//! The text is parsed once into a [`Document`] (only a YAML syntax error stops here). Then
//! each part (the top level, `admin`, every informer, handler and route) is read into its
//! schema type on its own, so a wrong type or an unknown field in one item does not hide
//! the mistakes in the others; then the values are checked and cross-checked (every name a
//! route or handler refers to exists). Items that could not be read still count as defined,
//! so a mistake inside one does not also show up as "unknown" wherever it is named.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::document::{Document, join};
use super::schema::{
    AdminFile, ConditionFile, ConfigFile, DeliveryFile, EventKindFile, HandlerFile, InformerFile,
    RouteFile,
};
use super::{
    Condition, Config, ConfigError, ConfigErrors, DEFAULT_ADMIN_LISTEN, EventFilter, FieldPath,
    HandlerSpec, InformerSpec, ResourceName, ResourceRef, RouteFilter, RouteSource, RouteSpec,
    Test,
};
use crate::handler::Delivery;
use crate::selector::Selector;

/// Events kept per object by an `every` route when the config does not say.
pub const DEFAULT_BACKLOG: usize = 100;

/// Prefix of the informer a route's own `resource:` defines.
pub const ROUTE_INFORMER_PREFIX: &str = "route:";

/// Parses and checks the config in `text`, read from `file`.
pub fn validate(file: &Path, text: &str) -> Result<Config, ConfigErrors> {
    let document = Document::parse(text).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: file.to_path_buf(),
            line: e.place.line,
            column: e.place.column,
            path: String::new(),
            message: first_line(&e.message),
        }])
    })?;
    let mut errors = Errors {
        file: file.to_path_buf(),
        document: &document,
        found: Vec::new(),
    };
    let config = errors
        .read::<ConfigFile>("", &document.root)
        .map(|top| build(file, top, &mut errors));
    match config {
        Some(config) if errors.found.is_empty() => Ok(config),
        _ => {
            let mut found = errors.found;
            found.sort_by_key(|e| (e.line == 0, e.line, e.column));
            Err(ConfigErrors(found))
        }
    }
}

/// The parser's message, without what the error line already says (the word "error" and
/// the location) and with the nearest valid name for an unknown field.
fn first_line(message: &str) -> String {
    let mut text = message.lines().next().unwrap_or_default().trim();
    text = text.strip_prefix("error:").unwrap_or(text).trim();
    if let Some(rest) = text.strip_prefix("line ")
        && let Some((_, after)) = rest.split_once(": ")
    {
        text = after;
    }
    let mut text = text.to_string();
    if let Some(hint) = unknown_field_hint(&text) {
        text.push_str(&hint);
    }
    text
}

/// For serde's "unknown field `x`, expected one of a, b, c": the field.
fn unknown_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("unknown field `")?
        .split_once('`')
        .map(|(field, _)| field)
}

/// For serde's "unknown field `x`, expected one of a, b, c": "; did you mean `b`?".
fn unknown_field_hint(message: &str) -> Option<String> {
    let field = unknown_field(message)?;
    let rest = message.split_once(&format!("`{field}`"))?.1;
    let expected = rest
        .split_once("expected one of ")
        .map(|(_, list)| list)
        .or_else(|| rest.split_once("expected ").map(|(_, one)| one))?;
    let candidates: Vec<&str> = expected
        .split(',')
        .map(|c| c.trim().trim_matches('`'))
        .filter(|c| !c.is_empty())
        .collect();
    nearest(field, &candidates).map(|near| format!("; did you mean `{near}`?"))
}

/// The problems found so far.
pub(super) struct Errors<'a> {
    file: PathBuf,
    document: &'a Document,
    found: Vec<ConfigError>,
}

impl Errors<'_> {
    /// A problem with the value at `path`.
    pub(super) fn at(&mut self, path: String, message: String) {
        let place = self.document.value_place(&path);
        self.push(place, path, message);
    }

    /// A problem with the key of the entry at `path` (a name, or a field that must not be
    /// there).
    pub(super) fn at_key(&mut self, path: String, message: String) {
        let place = self.document.key_place(&path);
        self.push(place, path, message);
    }

    fn push(&mut self, place: super::document::Place, path: String, message: String) {
        self.found.push(ConfigError {
            file: self.file.clone(),
            line: place.line,
            column: place.column,
            path,
            message,
        });
    }

    /// Reads the value at `path` into `T`, or records why it cannot be (with the place of
    /// the offending value or key inside it).
    fn read<T: DeserializeOwned>(&mut self, path: &str, value: &Value) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(read) => Some(read),
            Err(e) => {
                let mut at = path.to_string();
                for segment in e.path().iter() {
                    match segment {
                        serde_path_to_error::Segment::Seq { index } => {
                            at.push_str(&format!("[{index}]"));
                        }
                        serde_path_to_error::Segment::Map { key } => at = join(&at, key),
                        _ => {}
                    }
                }
                let message = first_line(&e.inner().to_string());
                match unknown_field(&message) {
                    Some(field) => {
                        // The path may or may not already name the unknown field.
                        let field_path = if at.ends_with(&format!(".{field}")) || at == field {
                            at
                        } else {
                            join(&at, field)
                        };
                        self.at_key(field_path, message);
                    }
                    None => self.at(at, message),
                }
                None
            }
        }
    }
}

/// The names defined in a section, including those whose entries could not be read.
struct Defined<T> {
    read: Vec<(String, T)>,
    names: Vec<String>,
}

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
        if !is_valid_name(&name) {
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

fn build(file: &Path, top: ConfigFile, errors: &mut Errors) -> Config {
    let base = file.parent().unwrap_or(Path::new("."));
    let relative = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    let admin: AdminFile = match &top.admin {
        Some(value) => errors.read("admin", value).unwrap_or_default(),
        None => AdminFile::default(),
    };
    let informer_files = read_section::<InformerFile>("informers", top.informers, errors);
    let handler_files = read_section::<HandlerFile>("handlers", top.handlers, errors);
    let mut informers = Vec::new();
    for (name, f) in informer_files.read {
        if let Some(spec) = build_informer(&name, f, errors) {
            informers.push(spec);
        }
    }
    let mut handlers = Vec::new();
    for (name, h) in handler_files.read {
        handlers.push(build_handler(name, h, errors));
    }

    let known_handlers: Vec<&str> = handler_files.names.iter().map(String::as_str).collect();
    let known_informers = Known {
        names: informer_files.names.iter().map(String::as_str).collect(),
        read: &informers,
    };
    let mut route_names = HashSet::new();
    let mut routes = Vec::new();
    let mut own_informers = Vec::new();
    let route_values = top.routes.unwrap_or_default();
    for (i, value) in route_values.iter().enumerate() {
        let path = format!("routes[{i}]");
        let Some(file) = errors.read::<RouteFile>(&path, value) else {
            continue;
        };
        let context = RouteContext {
            at: path,
            handlers: &known_handlers,
            informers: &known_informers,
        };
        if let Some((route, own)) = build_route(&context, file, &mut route_names, errors) {
            own_informers.extend(own);
            routes.push(route);
        }
    }
    if route_values.is_empty() && errors.found.is_empty() {
        errors.at(
            "routes".into(),
            "no routes: add at least one route from a resource to a handler".into(),
        );
    }
    informers.extend(own_informers);
    for handler in &handlers {
        super::capabilities::check_resources(handler, &routes, &informers, errors);
    }
    let admin_token = match (admin.token_file, admin.token_env) {
        (Some(_), Some(_)) => {
            errors.at(
                "admin.token_env".into(),
                "set token_file or token_env, not both".into(),
            );
            None
        }
        (Some(path), None) => Some(super::TokenSource::File(relative(path))),
        (None, Some(var)) => Some(super::TokenSource::Env(var)),
        (None, None) => None,
    };
    Config {
        source: file.to_path_buf(),
        admin_token,
        kubeconfig: top.kubeconfig.map(relative),
        plugins_dir: relative(top.plugins_dir.unwrap_or_else(|| PathBuf::from("plugins"))),
        admin_listen: admin.listen.unwrap_or(DEFAULT_ADMIN_LISTEN),
        informers,
        handlers,
        routes,
    }
}

fn build_handler(name: String, h: HandlerFile, errors: &mut Errors) -> HandlerSpec {
    let at = |field: &str| format!("handlers.{name}.{field}");
    let plugin = match h.plugin {
        Some(p) if !is_valid_name(&p) => {
            errors.at(
                at("plugin"),
                format!(
                    "invalid plugin name {p:?}: name the file NAME.wasm in the plugins folder by NAME (lower case letters, digits and '-')"
                ),
            );
            p
        }
        Some(p) => p,
        None => name.clone(),
    };
    let concurrency = match h.concurrency {
        Some(0) => {
            errors.at(at("concurrency"), "concurrency must be at least 1".into());
            1
        }
        Some(c) => c,
        None => 2,
    };
    let backoff_base = h.backoff_base.map_or(Duration::from_millis(100), |d| d.0);
    let backoff_cap = h.backoff_cap.map_or(Duration::from_secs(30), |d| d.0);
    if backoff_cap < backoff_base {
        errors.at(
            at("backoff_cap"),
            "backoff_cap must not be shorter than backoff_base".into(),
        );
    }
    let capabilities = super::capabilities::build(&name, h.capabilities.as_ref(), errors);
    let qps = match h.qps {
        Some(q) if !(q.is_finite() && q >= 0.0) => {
            errors.at(
                at("qps"),
                "qps must be a non-negative number (0 turns the retry bucket off)".into(),
            );
            None
        }
        Some(0.0) => None,
        Some(q) => Some(q),
        None => Some(10.0),
    };
    HandlerSpec {
        capabilities,
        resync: h.resync.map(|d| d.0).filter(|d| !d.is_zero()),
        qps,
        burst: h.burst.unwrap_or(100).max(1),
        plugin,
        concurrency,
        timeout: h.timeout.map_or(Duration::from_secs(5), |d| d.0),
        memory: h.memory.map_or(64 << 20, |m| m.0),
        max_retries: h.max_retries.unwrap_or(5),
        backoff_base,
        backoff_cap,
        config: h.config.unwrap_or(Value::Null),
        name,
    }
}

fn build_informer(name: &str, f: InformerFile, errors: &mut Errors) -> Option<InformerSpec> {
    let at = |field: &str| format!("informers.{name}.{field}");
    let before = errors.found.len();
    let resource = match (&f.resource, &f.kind) {
        (Some(_), Some(_)) => {
            errors.at_key(
                at("kind"),
                "name the resource by `resource` or by `group`/`version`/`kind`, not both".into(),
            );
            None
        }
        (Some(text), None) => {
            for field in ["group", "version"] {
                let set = if field == "group" {
                    f.group.is_some()
                } else {
                    f.version.is_some()
                };
                if set {
                    errors.at_key(
                        at(field),
                        format!("`{field}` goes with `kind`; `resource` already names the version"),
                    );
                }
            }
            ResourceName::parse(text)
                .map_err(|e| errors.at(at("resource"), e))
                .ok()
                .map(ResourceRef::Plural)
        }
        (None, Some(kind)) => match &f.version {
            None => {
                errors.at_key(
                    at("kind"),
                    "`kind` needs a `version` (and a `group` unless it is a core kind)".into(),
                );
                None
            }
            Some(version) => Some(ResourceRef::Kind {
                group: f.group.clone().unwrap_or_default(),
                version: version.clone(),
                kind: kind.clone(),
            }),
        },
        (None, None) => {
            errors.at_key(
                format!("informers.{name}"),
                "an informer needs `resource` (such as apps/v1/deployments) or `group`, `version` and `kind`".into(),
            );
            None
        }
    };
    let namespaces = f.namespaces.unwrap_or_default();
    check_namespaces(&at("namespaces"), &namespaces, errors);
    check_selectors(&at(""), f.labels.as_deref(), f.fields.as_deref(), errors);
    let transform = f.transform.unwrap_or_default();
    let drop_fields =
        check_drop_fields(&at("transform.drop_fields"), transform.drop_fields, errors);
    let indexes = check_indexes(&at("indexes"), f.indexes, errors);
    if errors.found.len() > before {
        return None;
    }
    Some(InformerSpec {
        name: name.to_string(),
        resource: resource?,
        namespaces,
        label_selector: f.labels,
        field_selector: f.fields,
        indexes,
        keep_managed_fields: transform.keep_managed_fields.unwrap_or(false),
        drop_fields,
    })
}

fn check_namespaces(at: &str, namespaces: &[String], errors: &mut Errors) {
    let mut seen = HashSet::new();
    for (j, ns) in namespaces.iter().enumerate() {
        check_namespace(format!("{at}[{j}]"), ns, errors);
        if !seen.insert(ns) {
            errors.at(
                format!("{at}[{j}]"),
                format!("namespace {ns:?} is listed twice"),
            );
        }
    }
}

fn check_namespace(at: String, ns: &str, errors: &mut Errors) {
    let valid = !ns.is_empty()
        && ns
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        errors.at(
            at,
            format!("invalid namespace {ns:?}: lower case letters, digits and '-'"),
        );
    }
}

/// `prefix` is `informers.x.` or `routes[2].`.
fn check_selectors(prefix: &str, labels: Option<&str>, fields: Option<&str>, errors: &mut Errors) {
    if let Some(s) = labels
        && let Err(e) = Selector::parse(s)
    {
        errors.at(format!("{prefix}labels"), e);
    }
    if let Some(s) = fields
        && let Err(e) = Selector::parse_fields(s)
    {
        errors.at(format!("{prefix}fields"), e);
    }
}

fn check_drop_fields(at: &str, pointers: Option<Vec<String>>, errors: &mut Errors) -> Vec<String> {
    let mut valid = Vec::new();
    for (j, pointer) in pointers.into_iter().flatten().enumerate() {
        match crate::informer::transform::validate_pointer(&pointer) {
            Ok(()) => valid.push(pointer),
            Err(e) => errors.at(format!("{at}[{j}]"), e),
        }
    }
    valid
}

fn check_indexes(
    at: &str,
    indexes: Option<BTreeMap<String, String>>,
    errors: &mut Errors,
) -> Vec<(String, String)> {
    let mut valid = Vec::new();
    for (name, path) in indexes.into_iter().flatten() {
        if name == crate::informer::store::NAMESPACE_INDEX || path.trim().is_empty() {
            errors.at(
                join(at, &name),
                format!("index {name:?} needs a field path such as spec.nodeName or label:KEY, and `namespace` is built in"),
            );
        } else {
            valid.push((name, path));
        }
    }
    valid
}

/// The informers routes can name.
struct Known<'a> {
    /// Every name under `informers:`, read or not.
    names: Vec<&'a str>,
    /// Those that were read and are valid.
    read: &'a [InformerSpec],
}

struct RouteContext<'a> {
    at: String,
    handlers: &'a [&'a str],
    informers: &'a Known<'a>,
}

impl RouteContext<'_> {
    fn at(&self, field: &str) -> String {
        format!("{}.{field}", self.at)
    }
}

fn build_route(
    cx: &RouteContext,
    r: RouteFile,
    names: &mut HashSet<String>,
    errors: &mut Errors,
) -> Option<(RouteSpec, Option<InformerSpec>)> {
    let before = errors.found.len();
    if r.name.is_empty() {
        errors.at(cx.at("name"), "a route needs a name".into());
    } else if !names.insert(r.name.clone()) {
        errors.at(cx.at("name"), format!("duplicate route name {:?}", r.name));
    }
    if !cx.handlers.contains(&r.handler.as_str()) {
        let message = match nearest(&r.handler, cx.handlers) {
            Some(near) => format!("unknown handler {:?}; did you mean {near:?}?", r.handler),
            None if cx.handlers.is_empty() => format!(
                "unknown handler {:?}: no handlers are defined under `handlers:`",
                r.handler
            ),
            None => format!(
                "unknown handler {:?}; defined handlers: {}",
                r.handler,
                cx.handlers.join(", ")
            ),
        };
        errors.at(cx.at("handler"), message);
    }
    let sources: Vec<&str> = [
        r.informer.as_ref().map(|_| "informer"),
        r.kinds.as_ref().map(|_| "kinds"),
        r.resource.as_ref().map(|_| "resource"),
    ]
    .into_iter()
    .flatten()
    .collect();
    match sources.as_slice() {
        [] => errors.at(
            cx.at.clone(),
            "a route needs one of `informer` (a name under `informers:`), `kinds` or `resource`"
                .into(),
        ),
        [_] => {}
        [_, second, ..] => errors.at_key(
            cx.at(second),
            format!("set only one of {}", sources.join(", ")),
        ),
    }
    if r.namespace.is_some() && r.namespaces.is_some() {
        errors.at_key(
            cx.at("namespace"),
            "set `namespace` or `namespaces`, not both".into(),
        );
    }
    let namespaces: Vec<String> = r
        .namespace
        .clone()
        .map(|ns| vec![ns])
        .or_else(|| r.namespaces.clone())
        .unwrap_or_default();
    match (&r.namespace, &r.namespaces) {
        (Some(ns), _) => check_namespace(cx.at("namespace"), ns, errors),
        (None, Some(list)) => check_namespaces(&cx.at("namespaces"), list, errors),
        (None, None) => {}
    }
    check_selectors(
        &format!("{}.", cx.at),
        r.labels.as_deref(),
        r.fields.as_deref(),
        errors,
    );
    let when = build_conditions(cx, r.when.unwrap_or_default(), errors);
    let delivery = match (r.delivery, r.backlog) {
        (Some(DeliveryFile::Every), backlog) => {
            let backlog = match backlog {
                Some(0) => {
                    errors.at(cx.at("backlog"), "backlog must be at least 1".into());
                    1
                }
                Some(b) => b,
                None => DEFAULT_BACKLOG,
            };
            Delivery::Every { backlog }
        }
        (_, Some(_)) => {
            errors.at(
                cx.at("backlog"),
                "backlog applies only to `delivery: every`".into(),
            );
            Delivery::Latest
        }
        (_, None) => Delivery::Latest,
    };
    let events = match &r.events {
        None => EventFilter::default(),
        Some(kinds) => EventFilter {
            added: kinds.contains(&EventKindFile::Added),
            updated: kinds.contains(&EventKindFile::Updated),
            deleted: kinds.contains(&EventKindFile::Deleted),
        },
    };
    let mut filter = RouteFilter {
        namespaces: namespaces.clone(),
        labels: r.labels.clone(),
        fields: r.fields.clone(),
        when,
    };
    let mut own = None;
    let source = if let Some(text) = &r.resource {
        // The route's own watch: its namespaces and selectors go to the API server.
        let resource = ResourceName::parse(text)
            .map_err(|e| errors.at(cx.at("resource"), e))
            .ok();
        let drop_fields = check_drop_fields(&cx.at("drop_fields"), r.drop_fields, errors);
        let indexes = check_indexes(&cx.at("indexes"), r.indexes, errors);
        let name = format!("{ROUTE_INFORMER_PREFIX}{}", r.name);
        own = resource.map(|resource| InformerSpec {
            name: name.clone(),
            resource: ResourceRef::Plural(resource),
            namespaces: std::mem::take(&mut filter.namespaces),
            label_selector: filter.labels.take(),
            field_selector: filter.fields.take(),
            indexes,
            keep_managed_fields: r.keep_managed_fields.unwrap_or(false),
            drop_fields,
        });
        RouteSource::Informer(name)
    } else {
        for (field, set) in [
            ("indexes", r.indexes.is_some()),
            ("keep_managed_fields", r.keep_managed_fields.is_some()),
            ("drop_fields", r.drop_fields.is_some()),
        ] {
            if set {
                errors.at_key(
                    cx.at(field),
                    format!("`{field}` belongs to the informer (informers.NAME); on a route it applies only with `resource`"),
                );
            }
        }
        match (&r.informer, &r.kinds) {
            (Some(name), _) => {
                if !cx.informers.names.contains(&name.as_str()) {
                    let message = match nearest(name, &cx.informers.names) {
                        Some(near) => format!("unknown informer {name:?}; did you mean {near:?}?"),
                        None if cx.informers.names.is_empty() => format!(
                            "unknown informer {name:?}: no informers are defined under `informers:`"
                        ),
                        None => format!(
                            "unknown informer {name:?}; defined informers: {}",
                            cx.informers.names.join(", ")
                        ),
                    };
                    errors.at(cx.at("informer"), message);
                }
                RouteSource::Informer(name.clone())
            }
            (None, Some(kinds)) => {
                if kinds.is_empty() {
                    errors.at(
                        cx.at("kinds"),
                        "list at least one kind, such as [Pod]".into(),
                    );
                }
                let unread = cx.informers.names.len() > cx.informers.read.len();
                for (j, kind) in kinds.iter().enumerate() {
                    let watched = cx
                        .informers
                        .read
                        .iter()
                        .any(|i| i.resource.answers_to(kind));
                    if !watched && !unread {
                        let watching: Vec<String> = cx
                            .informers
                            .read
                            .iter()
                            .map(|i| format!("{} ({})", i.name, i.resource))
                            .collect();
                        let message = if watching.is_empty() {
                            format!(
                                "no informer watches kind {kind:?}: define one under `informers:`"
                            )
                        } else {
                            format!(
                                "no informer watches kind {kind:?}; informers: {}",
                                watching.join(", ")
                            )
                        };
                        errors.at(format!("{}.kinds[{j}]", cx.at), message);
                    }
                }
                RouteSource::Kinds(kinds.clone())
            }
            (None, None) => RouteSource::Kinds(Vec::new()),
        }
    };
    if errors.found.len() > before {
        return None;
    }
    Some((
        RouteSpec {
            name: r.name,
            source,
            filter,
            events,
            delivery,
            handler: r.handler,
        },
        own,
    ))
}

fn build_conditions(
    cx: &RouteContext,
    conditions: Vec<ConditionFile>,
    errors: &mut Errors,
) -> Vec<Condition> {
    let mut built = Vec::new();
    for (j, c) in conditions.into_iter().enumerate() {
        let at = format!("{}.when[{j}]", cx.at);
        let path = FieldPath::parse(&c.path).map_err(|e| errors.at(format!("{at}.path"), e));
        let tests: Vec<Test> = [
            c.equals.map(Test::Equals),
            c.exists.map(Test::Exists),
            c.changed.map(Test::Changed),
        ]
        .into_iter()
        .flatten()
        .collect();
        if tests.len() != 1 {
            errors.at(
                at.clone(),
                "a condition has a `path` and exactly one of `equals`, `exists` or `changed`"
                    .into(),
            );
            continue;
        }
        if let (Ok(path), Some(test)) = (path, tests.into_iter().next()) {
            built.push(Condition { path, test });
        }
    }
    built
}

fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
pub(crate) fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(row[j + 1])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
handlers:
  log-events:
    concurrency: 3
    timeout: 2s
routes:
  - name: cms
    resource: configmaps
    namespace: default
    events: [added, deleted]
    handler: log-events
";

    #[test]
    fn a_valid_config_gets_its_defaults() {
        let config = validate(Path::new("/etc/sy/c.yaml"), GOOD).unwrap();
        assert_eq!(config.plugins_dir, PathBuf::from("/etc/sy/plugins"));
        assert_eq!(config.admin_listen, DEFAULT_ADMIN_LISTEN);
        let h = &config.handlers[0];
        assert_eq!(
            (h.plugin.as_str(), h.concurrency, h.max_retries),
            ("log-events", 3, 5)
        );
        assert_eq!(h.timeout, Duration::from_secs(2));
        let r = &config.routes[0];
        assert!(r.events.added && !r.events.updated && r.events.deleted);
    }

    #[test]
    fn every_mistake_is_reported_with_its_line_column_and_path() {
        let text = "\
handlers:
  log-events: {}
routes:
  - name: a
    resource: configmaps
    handler: log-event
  - name: a
    resource: Apps/V1
    handler: nope
";
        let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
        let found: Vec<(u64, u64, &str)> = errors
            .iter()
            .map(|e| (e.line, e.column, e.path.as_str()))
            .collect();
        assert_eq!(
            found,
            vec![
                (6, 14, "routes[0].handler"),
                (7, 11, "routes[1].name"),
                (8, 15, "routes[1].resource"),
                (9, 14, "routes[1].handler"),
            ]
        );
        assert!(errors[0].message.contains("did you mean \"log-events\""));
        assert!(
            errors[0]
                .to_string()
                .starts_with("c.yaml:6:14: routes[0].handler: ")
        );
    }

    #[test]
    fn a_yaml_error_names_its_line() {
        let text = "handlers:\n  a: {}\nroutes:\n  - name: x\n    bogus: 1\n";
        let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].line, 5, "{}", errors[0]);
        assert!(errors[0].message.contains("bogus"), "{}", errors[0]);
    }

    #[test]
    fn informer_and_delivery_settings_are_checked() {
        let text = "\
handlers:
  h:
    resync: 1m
routes:
  - name: a
    resource: configmaps
    handler: h
    backlog: 5
  - name: b
    resource: configmaps
    handler: h
    delivery: every
    drop_fields: [metadata/annotations/x]
    indexes:
      by-node: spec.nodeName
";
        let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
        let found: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.path.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, "routes[0].backlog");
        assert!(found[0].1.contains("only to `delivery: every`"));
        assert_eq!(found[1].0, "routes[1].drop_fields[0]");
        assert!(found[1].1.contains("must start with '/'"));
        let good = text
            .replace("    backlog: 5\n", "")
            .replace("[metadata/", "[/metadata/");
        let config = validate(Path::new("c.yaml"), &good).unwrap();
        assert_eq!(config.handlers[0].resync, Some(Duration::from_secs(60)));
        assert_eq!(
            config.routes[1].delivery,
            Delivery::Every {
                backlog: DEFAULT_BACKLOG
            }
        );
        let own = config
            .informers
            .iter()
            .find(|i| i.name == "route:b")
            .unwrap();
        assert_eq!(
            own.indexes,
            vec![("by-node".to_string(), "spec.nodeName".to_string())]
        );
    }

    #[test]
    fn an_unknown_field_gets_the_nearest_valid_name() {
        let text =
            "handlers:\n  a: {}\nroutes:\n  - name: x\n    resource: configmaps\n    handlr: a\n";
        let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
        assert_eq!((errors[0].line, errors[0].column), (6, 5));
        assert!(
            errors[0].message.starts_with("unknown field `handlr`")
                && errors[0].message.ends_with("did you mean `handler`?"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn mistakes_of_every_kind_in_every_section_are_reported_together() {
        let text = "\
informers:
  pods:
    resource: v1/pods
    indexes:
      node: spec.nodeName
  deploys:
    group: apps
    version: v1
    kind: Deployment
    namespaces: [web]
handlers:
  h:
    concurrency: lots
  g:
    timeout: 5x
routes:
  - name: a
    informer: pod
    handler: h
  - name: b
    kinds: [Deployment, Service]
    handler: g
    when:
      - path: spec
        changed: true
        exists: true
  - name: c
    resource: configmaps
    handler: g
    delivery: sometimes
";
        let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
        let found: Vec<(u64, u64, &str)> = errors
            .iter()
            .map(|e| (e.line, e.column, e.path.as_str()))
            .collect();
        let all = errors
            .iter()
            .map(|e| e.to_string() + "\n")
            .collect::<String>();
        assert_eq!(
            found,
            vec![
                (13, 18, "handlers.h.concurrency"),
                (15, 14, "handlers.g.timeout"),
                (18, 15, "routes[0].informer"),
                (21, 25, "routes[1].kinds[1]"),
                (24, 9, "routes[1].when[0]"),
                (30, 15, "routes[2].delivery"),
            ],
            "{all}"
        );
        assert!(errors[2].message.contains("did you mean \"pods\""), "{all}");
        assert!(
            errors[3]
                .message
                .contains("no informer watches kind \"Service\""),
            "{all}"
        );
    }

    #[test]
    fn informers_routes_and_conditions_are_read_into_the_config() {
        let text = "\
informers:
  pods:
    resource: v1/pods
    namespaces: [a, b]
    labels: app=web
    transform:
      drop_fields: [/metadata/annotations]
    indexes:
      node: spec.nodeName
handlers:
  h: {}
routes:
  - name: spec-changes
    kinds: [Pod]
    namespaces: [a]
    events: [updated]
    when:
      - path: .spec
        changed: true
      - path: /metadata/labels/tier
        equals: db
    handler: h
";
        let config = validate(Path::new("c.yaml"), text).unwrap();
        let pods = &config.informers[0];
        assert_eq!(pods.namespaces, ["a", "b"]);
        assert_eq!(pods.drop_fields, ["/metadata/annotations"]);
        let route = &config.routes[0];
        assert_eq!(route.source, RouteSource::Kinds(vec!["Pod".into()]));
        assert_eq!(route.filter.namespaces, ["a"]);
        assert_eq!(route.filter.when.len(), 2);
        assert_eq!(route.filter.when[1].test, Test::Equals("db".into()));
        assert!(!route.events.added && route.events.updated);
    }

    #[test]
    fn nearest_suggests_only_close_names() {
        assert_eq!(
            nearest("log-event", &["log-events", "x"]),
            Some("log-events")
        );
        assert_eq!(nearest("zzzzzz", &["log-events"]), None);
    }
}
