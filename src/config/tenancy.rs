//! Team-owned `Route` and `Handler` resources, merged into the config file's routes and
//! handlers: each resource's spec is a config item, read and checked by the same validation
//! (so the same messages), then held to the file's `tenancy:` bounds.
//!
//! A Handler `NAME` in namespace `NS` becomes the handler `NS.NAME` (a name the file's own
//! handlers cannot take: they have no dots), a Route the route `NS.NAME` watching `NS` only.
//! A resource with a mistake is left out with its problems, each `spec.FIELD: what is wrong`,
//! and the others go on: a Route whose Handler is left out is left out too. Only the file's
//! own mistakes fail the merge, as they fail a reload.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde_json::{Map, Value};

use super::document::Document;
use super::oci::Reference;
use super::validate::validate_document;
use super::{Config, ConfigError, ConfigErrors, Owner, ResourceName, TenancySpec};

/// Which of the two kinds a resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TeamKind {
    /// `handlers.switchyard.dev`.
    Handler,
    /// `routes.switchyard.dev`.
    Route,
}

impl TeamKind {
    /// The kind's name, as in `kind:`.
    pub fn as_str(self) -> &'static str {
        match self {
            TeamKind::Handler => "Handler",
            TeamKind::Route => "Route",
        }
    }
}

/// A `Route` or `Handler` as read from the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamResource {
    /// Which kind.
    pub kind: TeamKind,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `spec`, as written.
    pub spec: Value,
}

impl TeamResource {
    /// The name of its handler or route in the merged config: `NAMESPACE.NAME`.
    pub fn config_name(&self) -> String {
        format!("{}.{}", self.namespace, self.name)
    }
}

/// What became of one resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The resource's kind.
    pub kind: TeamKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The generation looked at.
    pub generation: Option<i64>,
    /// Each problem, `spec.FIELD: what is wrong`; none when it runs.
    pub problems: Vec<String>,
}

/// The config file with the team resources that passed, and what became of each.
#[derive(Debug)]
pub struct Merged {
    /// The config to run.
    pub config: Config,
    /// One per resource, in the order given.
    pub verdicts: Vec<Verdict>,
}

/// Reads the config file at `path` and merges `resources` into it: see [`merge`].
pub fn load_with(path: &Path, resources: &[TeamResource]) -> Result<Merged, ConfigErrors> {
    let text = super::read_bounded(path)
        .map_err(|e| ConfigErrors(vec![ConfigError::whole_file(path, e)]))?;
    merge(path, &text, resources)
}

/// The config in `text` (from `file`) with every resource that passes its checks; fails only
/// when the file itself has mistakes.
pub fn merge(file: &Path, text: &str, resources: &[TeamResource]) -> Result<Merged, ConfigErrors> {
    let alone = super::validate::validate_all(file, text);
    let (Some(config), true) = (alone.config, alone.errors.is_empty()) else {
        return Err(ConfigErrors(alone.errors));
    };
    let mut problems: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let Some(tenancy) = config.tenancy.clone() else {
        for i in 0..resources.len() {
            problems.insert(
                i,
                vec!["the config has no `tenancy:` section: team resources are off".into()],
            );
        }
        return Ok(finish(config, resources, problems));
    };
    let prepared: Vec<Result<Value, Vec<String>>> =
        resources.iter().map(|r| prepare(r, &tenancy)).collect();
    for (i, p) in prepared.iter().enumerate() {
        if let Err(found) = p {
            problems.insert(i, found.clone());
        }
    }
    limit_per_namespace(resources, &tenancy, &mut problems);
    // Each pass leaves out at least one more resource, or ends.
    for _ in 0..=resources.len() {
        if routes_without_handler(resources, &mut problems) {
            continue;
        }
        let accepted: Vec<usize> = (0..resources.len())
            .filter(|i| !problems.contains_key(i))
            .collect();
        let mut document = Document::parse(text).map_err(|_| ConfigErrors(Vec::new()))?;
        let routes_before = insert(&mut document.root, resources, &prepared, &accepted);
        let names: HashSet<String> = accepted
            .iter()
            .filter(|&&i| resources[i].kind == TeamKind::Handler)
            .map(|&i| resources[i].config_name())
            .collect();
        let validated = validate_document(file, document, None, &names);
        let placed = Placed {
            resources,
            accepted: &accepted,
            routes_before,
        };
        if blame(&placed, &validated.errors, &mut problems) {
            continue;
        }
        let Some(mut merged) = validated.config else {
            break;
        };
        if bounds(&mut merged, resources, &accepted, &tenancy, &mut problems) {
            continue;
        }
        set_owners(&mut merged, resources, &accepted);
        return Ok(finish(merged, resources, problems));
    }
    for i in 0..resources.len() {
        problems
            .entry(i)
            .or_insert_with(|| vec!["could not be merged with the config".into()]);
    }
    Ok(finish(config, resources, problems))
}

/// The verdicts, with the config to run.
fn finish(
    config: Config,
    resources: &[TeamResource],
    problems: BTreeMap<usize, Vec<String>>,
) -> Merged {
    let verdicts = resources
        .iter()
        .enumerate()
        .map(|(i, r)| Verdict {
            kind: r.kind,
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            generation: r.generation,
            problems: problems.get(&i).cloned().unwrap_or_default(),
        })
        .collect();
    Merged { config, verdicts }
}

/// A resource's spec as the config item it becomes, or what keeps it out.
fn prepare(r: &TeamResource, tenancy: &TenancySpec) -> Result<Value, Vec<String>> {
    let Value::Object(spec) = &r.spec else {
        return Err(vec!["spec: must be an object".into()]);
    };
    let mut spec = spec.clone();
    let mut problems = Vec::new();
    match r.kind {
        TeamKind::Handler => prepare_handler(&mut spec, tenancy, &mut problems),
        TeamKind::Route => prepare_route(r, &mut spec, tenancy, &mut problems),
    }
    if problems.is_empty() {
        Ok(Value::Object(spec))
    } else {
        Err(problems)
    }
}

/// A Handler: its ServiceAccount taken out of the spec, its plugin and fields only teams
/// cannot use checked, its retry bucket held under the ceiling when it sets none.
fn prepare_handler(
    spec: &mut Map<String, Value>,
    tenancy: &TenancySpec,
    problems: &mut Vec<String>,
) {
    match spec.remove("service_account") {
        Some(Value::String(sa)) if is_dns_subdomain(&sa) => {}
        Some(other) => problems.push(format!(
            "spec.service_account: {other} is not a ServiceAccount name"
        )),
        None => problems.push(
            "spec.service_account: Required: the ServiceAccount, in this namespace, the handler's Kubernetes calls are made as".into(),
        ),
    }
    match spec.get("plugin").and_then(Value::as_str) {
        None => problems.push("spec.plugin: Required: an oci:// reference or builtin:NAME".into()),
        Some(plugin) => {
            if let Some(problem) = plugin_problem(plugin, tenancy) {
                problems.push(format!("spec.plugin: {problem}"));
            }
        }
    }
    for field in ["shadow", "reads"] {
        if spec.contains_key(field) {
            problems.push(format!(
                "spec.{field}: not for team Handlers (the config file's handlers only)"
            ));
        }
    }
    spec.entry("qps")
        .or_insert_with(|| tenancy.max_qps.min(10.0).into());
    team_outbound(spec, problems);
}

/// A team Handler's `outbound:` names no file of the daemon's and refuses private
/// addresses a name resolves to (an address its entries name stays reachable).
fn team_outbound(spec: &mut Map<String, Value>, problems: &mut Vec<String>) {
    let outbound = spec
        .entry("outbound")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(outbound) = outbound else {
        return;
    };
    for field in ["ca_bundle", "client_cert", "client_key"] {
        if outbound.contains_key(field) {
            problems.push(format!(
                "spec.outbound.{field}: names a file of the daemon's; not for team Handlers"
            ));
        }
    }
    match outbound.get("refuse_private") {
        Some(Value::Bool(false)) => problems.push(
            "spec.outbound.refuse_private: a team Handler always refuses private addresses its entries do not name".into(),
        ),
        _ => {
            outbound.insert("refuse_private".into(), true.into());
        }
    }
}

/// Whether a team may run `plugin`: a built-in (when allowed) or an `oci://` reference that
/// is pinned by digest or in one of the allowed repositories.
fn plugin_problem(plugin: &str, tenancy: &TenancySpec) -> Option<String> {
    if plugin.starts_with("builtin:") {
        return (!tenancy.builtin).then(|| {
            "built-in plugins are not allowed for team Handlers (tenancy.builtin: false)".into()
        });
    }
    if !Reference::is_oci(plugin) {
        return Some(format!(
            "{plugin:?}: a team Handler's plugin is an oci:// reference or builtin:NAME"
        ));
    }
    let reference = Reference::parse(plugin).ok()?;
    if reference.digest.is_some() {
        return None;
    }
    let repository = format!("{}/{}", reference.registry, reference.repository);
    let allowed = tenancy.registries.iter().any(|r| {
        repository == *r
            || repository
                .strip_prefix(r.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    });
    (!allowed).then(|| format!(
        "{plugin:?} is not pinned by digest (@sha256:...) and {repository} is not under tenancy.registries"
    ))
}

/// A Route: named after its resource, watching its own namespace (a resource the admin
/// allows, by a watch of its own), naming its namespace's Handler.
fn prepare_route(
    r: &TeamResource,
    spec: &mut Map<String, Value>,
    tenancy: &TenancySpec,
    problems: &mut Vec<String>,
) {
    for field in ["informer", "kinds"] {
        if spec.contains_key(field) {
            problems.push(format!(
                "spec.{field}: a team Route watches its own namespace with `resource:`, not the config file's informers"
            ));
        }
    }
    match spec.get("resource").and_then(Value::as_str) {
        None => problems.push(format!(
            "spec.resource: Required: one of tenancy.resources ({})",
            allowed_resources(tenancy)
        )),
        Some(resource) => {
            let allowed = ResourceName::parse(resource).is_ok_and(|name| {
                tenancy
                    .resources
                    .iter()
                    .any(|a| a.group == name.group && a.plural == name.plural)
            });
            if !allowed {
                problems.push(format!(
                    "spec.resource: {resource:?} is not among tenancy.resources ({})",
                    allowed_resources(tenancy)
                ));
            }
        }
    }
    let own = Value::String(r.namespace.clone());
    if spec.contains_key("name") {
        problems.push("spec.name: a Route's name is its metadata.name".into());
    }
    if let Some(namespace) = spec.get("namespace")
        && *namespace != own
    {
        problems.push(format!(
            "spec.namespace: a Route watches only its own namespace ({})",
            r.namespace
        ));
    }
    if let Some(namespaces) = spec.remove("namespaces")
        && namespaces != Value::Array(vec![own.clone()])
    {
        problems.push(format!(
            "spec.namespaces: a Route watches only its own namespace ({})",
            r.namespace
        ));
    }
    spec.insert("namespace".into(), own);
    spec.insert("name".into(), r.config_name().into());
    match spec.get("handler").and_then(Value::as_str) {
        Some(handler) => {
            let handler = format!("{}.{handler}", r.namespace);
            spec.insert("handler".into(), handler.into());
        }
        None => {
            problems.push("spec.handler: Required: the name of a Handler in this namespace".into())
        }
    }
}

/// The resources team Routes may watch, for a message.
fn allowed_resources(tenancy: &TenancySpec) -> String {
    if tenancy.resources.is_empty() {
        return "none".into();
    }
    let names: Vec<String> = tenancy.resources.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// Leaves out the Handlers past the per-namespace ceiling, by name order.
fn limit_per_namespace(
    resources: &[TeamResource],
    tenancy: &TenancySpec,
    problems: &mut BTreeMap<usize, Vec<String>>,
) {
    let mut handlers: Vec<(&str, &str, usize)> = resources
        .iter()
        .enumerate()
        .filter(|(_, r)| r.kind == TeamKind::Handler)
        .map(|(i, r)| (r.namespace.as_str(), r.name.as_str(), i))
        .collect();
    handlers.sort();
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    let mut total = 0;
    for (namespace, _, i) in handlers {
        let n = count.entry(namespace).or_default();
        *n += 1;
        if *n > tenancy.max_handlers_per_namespace {
            problems.entry(i).or_default().push(format!(
                "namespace {namespace} has more than {} Handlers (tenancy.max_handlers_per_namespace)",
                tenancy.max_handlers_per_namespace
            ));
        } else if !problems.contains_key(&i) {
            total += 1;
            if total > tenancy.max_handlers {
                problems.entry(i).or_default().push(format!(
                    "the cluster has more than {} team Handlers (tenancy.max_handlers)",
                    tenancy.max_handlers
                ));
            }
        }
    }
}

/// Leaves out the Routes whose Handler is missing or left out; whether any was.
fn routes_without_handler(
    resources: &[TeamResource],
    problems: &mut BTreeMap<usize, Vec<String>>,
) -> bool {
    let running: HashSet<(&str, &str)> = resources
        .iter()
        .enumerate()
        .filter(|(i, r)| r.kind == TeamKind::Handler && !problems.contains_key(i))
        .map(|(_, r)| (r.namespace.as_str(), r.name.as_str()))
        .collect();
    let mut any = false;
    for (i, r) in resources.iter().enumerate() {
        if r.kind != TeamKind::Route || problems.contains_key(&i) {
            continue;
        }
        let Some(handler) = r.spec.get("handler").and_then(Value::as_str) else {
            continue;
        };
        if !running.contains(&(r.namespace.as_str(), handler)) {
            let exists = resources.iter().any(|h| {
                h.kind == TeamKind::Handler && h.namespace == r.namespace && h.name == handler
            });
            let why = if exists {
                "is not valid"
            } else {
                "does not exist"
            };
            problems.entry(i).or_default().push(format!(
                "spec.handler: the Handler {handler:?} in namespace {} {why}",
                r.namespace
            ));
            any = true;
        }
    }
    any
}

/// Puts the accepted resources' items into the document; the number of routes before them.
fn insert(
    root: &mut Value,
    resources: &[TeamResource],
    prepared: &[Result<Value, Vec<String>>],
    accepted: &[usize],
) -> usize {
    let Value::Object(top) = root else {
        return 0;
    };
    let before = top
        .get("routes")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    for &i in accepted {
        let Ok(item) = &prepared[i] else { continue };
        match resources[i].kind {
            TeamKind::Handler => {
                let handlers = top
                    .entry("handlers")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(handlers) = handlers {
                    handlers.insert(resources[i].config_name(), item.clone());
                }
            }
            TeamKind::Route => {
                let routes = top
                    .entry("routes")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(routes) = routes {
                    routes.push(item.clone());
                }
            }
        }
    }
    before
}

/// Where the accepted resources' items are in the merged document.
struct Placed<'a> {
    resources: &'a [TeamResource],
    accepted: &'a [usize],
    routes_before: usize,
}

impl Placed<'_> {
    /// The resource a config path is in, and the path inside its `spec`.
    fn owner_of(&self, path: &str) -> Option<(usize, String)> {
        let mut route = self.routes_before;
        for &i in self.accepted {
            let r = &self.resources[i];
            let prefix = match r.kind {
                TeamKind::Handler => format!("handlers.{}", r.config_name()),
                TeamKind::Route => {
                    route += 1;
                    format!("routes[{}]", route - 1)
                }
            };
            if let Some(rest) = path.strip_prefix(&prefix)
                && (rest.is_empty() || rest.starts_with(['.', '[']))
            {
                return Some((i, format!("spec{rest}")));
            }
        }
        None
    }
}

/// Files each error under the resource it is in; whether any was. Errors outside every
/// resource (the file's own checks, made false by the resources together) leave every
/// accepted resource out.
fn blame(
    placed: &Placed,
    errors: &[ConfigError],
    problems: &mut BTreeMap<usize, Vec<String>>,
) -> bool {
    let mut outside = Vec::new();
    let mut any = false;
    for e in errors {
        match placed.owner_of(&e.path) {
            Some((i, path)) => {
                problems
                    .entry(i)
                    .or_default()
                    .push(format!("{path}: {}", e.message));
                any = true;
            }
            None => outside.push(e),
        }
    }
    if !any && !outside.is_empty() {
        for &i in placed.accepted {
            let found = problems.entry(i).or_default();
            found.extend(outside.iter().map(|e| format!("with the config file: {e}")));
        }
        return true;
    }
    any
}

/// Holds the accepted Handlers to the `tenancy:` ceilings; whether any was left out.
fn bounds(
    config: &mut Config,
    resources: &[TeamResource],
    accepted: &[usize],
    tenancy: &TenancySpec,
    problems: &mut BTreeMap<usize, Vec<String>>,
) -> bool {
    let mut any = false;
    for &i in accepted {
        let r = &resources[i];
        if r.kind != TeamKind::Handler {
            continue;
        }
        let Some(h) = config
            .handlers
            .iter_mut()
            .find(|h| h.name == r.config_name())
        else {
            continue;
        };
        let mut found = own_secrets_only(h, &r.namespace);
        if h.memory > tenancy.max_memory {
            found.push(format!(
                "spec.memory: {} bytes is above tenancy.max_memory ({} bytes)",
                h.memory, tenancy.max_memory
            ));
        }
        if h.timeout > tenancy.max_timeout {
            found.push(format!(
                "spec.timeout: {:?} is above tenancy.max_timeout ({:?})",
                h.timeout, tenancy.max_timeout
            ));
        }
        if h.concurrency > tenancy.max_concurrency {
            found.push(format!(
                "spec.concurrency: {} is above tenancy.max_concurrency ({})",
                h.concurrency, tenancy.max_concurrency
            ));
        }
        match h.qps {
            None => found.push(format!(
                "spec.qps: 0 (no bucket) is above tenancy.max_qps ({})",
                tenancy.max_qps
            )),
            Some(q) if q > tenancy.max_qps => found.push(format!(
                "spec.qps: {q} is above tenancy.max_qps ({})",
                tenancy.max_qps
            )),
            Some(_) => {}
        }
        for rule in &h.outbound.egress.rules {
            if !tenancy.http.iter().any(|outer| rule.within(outer)) {
                found.push(format!(
                    "spec.capabilities.http: {rule} is not within tenancy.http"
                ));
            }
        }
        if !found.is_empty() {
            problems.entry(i).or_default().extend(found);
            any = true;
        }
    }
    any
}

/// A team Handler's `valueFrom:` reads Secrets of its own namespace (the default there), never
/// the daemon's environment, files or other namespaces; what else it names.
fn own_secrets_only(handler: &mut super::HandlerSpec, namespace: &str) -> Vec<String> {
    use super::value_from::ValueSource;
    let mut found = Vec::new();
    for value in &mut handler.value_refs {
        match &mut value.source {
            ValueSource::Secret(secret) => match &secret.namespace {
                None => secret.namespace = Some(namespace.to_string()),
                Some(other) if other == namespace => {}
                Some(other) => found.push(format!(
                    "spec.config.{}.valueFrom: the Secret {other}/{} is not in this namespace ({namespace})",
                    value.path, secret.name
                )),
            },
            ValueSource::Env(_) | ValueSource::File(_) => found.push(format!(
                "spec.config.{}.valueFrom: a team Handler reads values only from Secrets of its namespace (secretKeyRef)",
                value.path
            )),
        }
    }
    found
}

/// Marks the handlers and routes that came from resources with their owner.
fn set_owners(config: &mut Config, resources: &[TeamResource], accepted: &[usize]) {
    let service_accounts: BTreeMap<(String, String), String> = resources
        .iter()
        .filter(|r| r.kind == TeamKind::Handler)
        .filter_map(|r| {
            let sa = r.spec.get("service_account")?.as_str()?;
            Some(((r.namespace.clone(), r.name.clone()), sa.to_string()))
        })
        .collect();
    for &i in accepted {
        let r = &resources[i];
        let handler = match r.kind {
            TeamKind::Handler => r.name.clone(),
            TeamKind::Route => r.spec["handler"].as_str().unwrap_or_default().to_string(),
        };
        let owner = Owner {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            service_account: service_accounts
                .get(&(r.namespace.clone(), handler))
                .cloned()
                .unwrap_or_default(),
        };
        let name = r.config_name();
        match r.kind {
            TeamKind::Handler => {
                if let Some(h) = config.handlers.iter_mut().find(|h| h.name == name) {
                    h.owner = Some(owner);
                }
            }
            TeamKind::Route => {
                if let Some(route) = config.routes.iter_mut().find(|route| route.name == name) {
                    route.owner = Some(owner);
                }
            }
        }
    }
}

/// Whether `name` is a DNS subdomain, as Kubernetes object names are.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.starts_with(|c: char| c.is_ascii_alphanumeric())
                && label.ends_with(|c: char| c.is_ascii_alphanumeric())
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

#[cfg(test)]
mod tests;
