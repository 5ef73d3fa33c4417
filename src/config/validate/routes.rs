//! `routes[i]:`: where a route's changes come from (an informer by name, informers by kind,
//! or its own watch), which of them it delivers, how, and to which handler.

use std::collections::HashSet;

use super::errors::Errors;
use super::names::nearest;
use super::watch::{
    check_built_in, check_drop_fields, check_indexes, check_namespace, check_namespaces,
    check_selectors,
};
use crate::config::schema::{
    ConditionFile, DeliveryFile, EventKindFile, FinalizerFile, InitialFile, RouteFile,
};
use crate::config::{
    Condition, DEFAULT_FINALIZER_PREFIX, Delivery, EventFilter, FieldPath, InformerSpec, Initial,
    ROUTE_INFORMER_PREFIX, ResourceName, ResourceRef, RouteFilter, RouteSource, RouteSpec, Test,
};

/// Events kept per object by an `every` route when the config does not say.
pub const DEFAULT_BACKLOG: usize = 100;

/// The informers routes can name.
pub(super) struct Known<'a> {
    /// Every name under `informers:`, read or not.
    pub names: Vec<&'a str>,
    /// Those that were read and are valid.
    pub read: &'a [InformerSpec],
    /// Whether `informers:` itself could be read (else no name can be called unknown).
    pub complete: bool,
}

/// What a route is checked against, and where it is.
pub(super) struct RouteContext<'a> {
    /// The route's path (`routes[2]`).
    pub at: String,
    /// Every handler name, read or not; `None` when `handlers:` itself could not be read.
    pub handlers: Option<&'a [&'a str]>,
    /// The informers it can name.
    pub informers: &'a Known<'a>,
}

impl RouteContext<'_> {
    fn at(&self, field: &str) -> String {
        format!("{}.{field}", self.at)
    }
}

/// Builds a route and, when it has its own `resource:`, the informer for it, reporting
/// each problem; `None` when where its changes come from cannot be told. A route built
/// despite problems is only good for the checks across items (what its handler's
/// capabilities may name).
pub(super) fn build_route(
    cx: &RouteContext,
    mut r: RouteFile,
    names: &mut HashSet<String>,
    errors: &mut Errors,
) -> Option<(RouteSpec, Option<InformerSpec>)> {
    check_name(cx, &r.name, names, errors);
    if let Some(handlers) = cx.handlers {
        check_handler(cx, handlers, &r.handler, errors);
    }
    check_one_source(cx, &r, errors);
    let namespaces = namespaces(cx, &r, errors);
    let prefix = format!("{}.", cx.at);
    check_selectors(&prefix, r.labels.as_deref(), r.fields.as_deref(), errors);
    let when = build_conditions(cx, r.when.take().unwrap_or_default(), errors);
    let delivery = delivery(cx, r.delivery, r.backlog, errors);
    let events = event_filter(r.events.as_deref());
    let finalizer = finalizer(cx, &r, events, errors);
    let mut filter = RouteFilter {
        namespaces,
        labels: r.labels.clone(),
        fields: r.fields.clone(),
        when,
    };
    let (source, own) = match r.resource.take() {
        Some(text) => {
            let (source, own) = own_watch(cx, &mut r, &text, &mut filter, errors);
            (own.is_some().then_some(source), own)
        }
        None if r.informer.is_none() && r.kinds.is_none() => (None, None),
        None => (Some(shared_source(cx, &r, errors)), None),
    };
    let route = RouteSpec {
        name: r.name,
        source: source?,
        filter,
        events,
        delivery,
        handler: r.handler,
        finalizer,
        owner: None,
        initial: match r.initial.unwrap_or_default() {
            InitialFile::Deliver => Initial::Deliver,
            InitialFile::Skip => Initial::Skip,
        },
    };
    Some((route, own))
}

/// The finalizer a route holds its objects with: `switchyard.dev/ROUTE` for `true`, the name
/// given, or none. The route must deliver deletions (else nothing would remove it) and keep
/// the metadata that says whether an object holds it and is being deleted.
fn finalizer(
    cx: &RouteContext,
    r: &RouteFile,
    events: EventFilter,
    errors: &mut Errors,
) -> Option<String> {
    let name = match r.finalizer.as_ref()? {
        FinalizerFile::On(false) => return None,
        FinalizerFile::On(true) => {
            let name = format!("{DEFAULT_FINALIZER_PREFIX}{}", r.name);
            if !r.name.is_empty() && finalizer_name_problem(&name).is_some() {
                errors.at(
                    cx.at("finalizer"),
                    format!("the route name {:?} cannot end a finalizer name (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit); name one: `finalizer: example.com/NAME`", r.name),
                );
            }
            name
        }
        FinalizerFile::Named(name) => {
            if let Some(problem) = finalizer_name_problem(name) {
                errors.at(
                    cx.at("finalizer"),
                    format!("invalid finalizer name {name:?}: {problem}"),
                );
            }
            name.clone()
        }
    };
    if !events.deleted {
        errors.at(
            cx.at("finalizer"),
            "a route with a finalizer must deliver `deleted` events (add `deleted` to `events`): its handler's success on the deletion is what removes the finalizer",
        );
    }
    const WHY: &str = "the route reads metadata.finalizers and metadata.deletionTimestamp";
    for pointer in r.drop_fields.iter().flatten() {
        if drops_held_metadata(pointer) {
            errors.at(
                cx.at("drop_fields"),
                format!("{pointer:?} cannot be dropped from the cache of a route with a finalizer: {WHY}"),
            );
        }
    }
    for informer in feeding_informers(cx, r) {
        if let Some(pointer) = informer.drop_fields.iter().find(|p| drops_held_metadata(p)) {
            errors.at(
                cx.at("finalizer"),
                format!("informers.{}.transform.drop_fields drops {pointer:?} from the cache this route reads, which a route with a finalizer cannot do without: {WHY}", informer.name),
            );
        }
    }
    Some(name)
}

/// Whether dropping `pointer` takes away what a finalizer route reads of an object.
fn drops_held_metadata(pointer: &str) -> bool {
    [
        "/metadata",
        "/metadata/finalizers",
        "/metadata/deletionTimestamp",
    ]
    .contains(&pointer)
}

/// The shared informers a route without a watch of its own reads: the one it names, or
/// every one watching a kind it lists.
fn feeding_informers<'a>(cx: &RouteContext<'a>, r: &RouteFile) -> Vec<&'a InformerSpec> {
    let read = cx.informers.read;
    read.iter()
        .filter(|i| {
            r.informer.as_deref() == Some(i.name.as_str())
                || r.kinds
                    .iter()
                    .flatten()
                    .any(|kind| i.resource.has_kind(kind))
        })
        .collect()
}

/// What is wrong with a finalizer name, if anything: it must be a qualified name with a
/// domain prefix (`example.com/cleanup`), as the API server expects of finalizers that are
/// not its own.
fn finalizer_name_problem(name: &str) -> Option<String> {
    let Some((prefix, last)) = name.split_once('/') else {
        return Some("a finalizer needs a domain prefix, as in `example.com/cleanup`".into());
    };
    let part = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if prefix.len() > 253 || !prefix.split('.').all(label) {
        return Some(format!(
            "the prefix {prefix:?} must be a DNS subdomain (lowercase letters, digits, '-' and '.')"
        ));
    }
    if !part(last) {
        return Some(format!(
            "the name after the prefix, {last:?}, must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ));
    }
    None
}

/// A route's name is set and unique.
fn check_name(cx: &RouteContext, name: &str, names: &mut HashSet<String>, errors: &mut Errors) {
    if name.is_empty() {
        errors.at(cx.at("name"), "a route needs a name");
    } else if !names.insert(name.to_string()) {
        errors.at(cx.at("name"), format!("duplicate route name {name:?}"));
    }
}

/// A route's handler is one of `handlers`.
fn check_handler(cx: &RouteContext, handlers: &[&str], handler: &str, errors: &mut Errors) {
    if handlers.contains(&handler) {
        return;
    }
    let message = match nearest(handler, handlers) {
        Some(near) => format!("unknown handler {handler:?}; did you mean {near:?}?"),
        None if handlers.is_empty() => {
            format!("unknown handler {handler:?}: no handlers are defined under `handlers:`")
        }
        None => format!(
            "unknown handler {handler:?}; defined handlers: {}",
            handlers.join(", ")
        ),
    };
    errors.at(cx.at("handler"), message);
}

/// A route has exactly one of `informer`, `kinds` and `resource`.
fn check_one_source(cx: &RouteContext, r: &RouteFile, errors: &mut Errors) {
    let sources: Vec<&str> = [
        r.informer.as_ref().map(|_| "informer"),
        r.kinds.as_ref().map(|_| "kinds"),
        r.resource.as_ref().map(|_| "resource"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let unreadable = ["informer", "kinds", "resource"]
        .iter()
        .any(|field| errors.unreadable(&cx.at(field)));
    match sources.as_slice() {
        // The source that could not be read was reported already.
        [] if unreadable => {}
        [] => errors.at(
            cx.at.clone(),
            "a route needs one of `informer` (a name under `informers:`), `kinds` or `resource`",
        ),
        [_] => {}
        [_, second, ..] => errors.at_key(
            cx.at(second),
            format!("set only one of {}", sources.join(", ")),
        ),
    }
}

/// The namespaces a route selects, from `namespace` or `namespaces`, each checked.
fn namespaces(cx: &RouteContext, r: &RouteFile, errors: &mut Errors) -> Vec<String> {
    if r.namespace.is_some() && r.namespaces.is_some() {
        errors.at_key(
            cx.at("namespace"),
            "set `namespace` or `namespaces`, not both",
        );
    }
    match (&r.namespace, &r.namespaces) {
        (Some(ns), _) => check_namespace(cx.at("namespace"), ns, errors),
        (None, Some(list)) => check_namespaces(&cx.at("namespaces"), list, errors),
        (None, None) => {}
    }
    r.namespace
        .clone()
        .map(|ns| vec![ns])
        .or_else(|| r.namespaces.clone())
        .unwrap_or_default()
}

/// How a route delivers: `latest`, or `every` with its backlog.
fn delivery(
    cx: &RouteContext,
    mode: Option<DeliveryFile>,
    backlog: Option<usize>,
    errors: &mut Errors,
) -> Delivery {
    match (mode, backlog) {
        (Some(DeliveryFile::Every), backlog) => {
            let backlog = match backlog {
                Some(0) => {
                    errors.at(cx.at("backlog"), "backlog must be at least 1");
                    1
                }
                Some(b) => b,
                None => DEFAULT_BACKLOG,
            };
            Delivery::Every { backlog }
        }
        (None, Some(_)) if errors.unreadable(&cx.at("delivery")) => Delivery::Latest,
        (_, Some(_)) => {
            errors.at(
                cx.at("backlog"),
                "backlog applies only to `delivery: every`",
            );
            Delivery::Latest
        }
        (_, None) => Delivery::Latest,
    }
}

/// The kinds of change a route delivers; all when `events` is not set.
fn event_filter(events: Option<&[EventKindFile]>) -> EventFilter {
    match events {
        None => EventFilter::default(),
        Some(kinds) => EventFilter {
            added: kinds.contains(&EventKindFile::Added),
            updated: kinds.contains(&EventKindFile::Updated),
            deleted: kinds.contains(&EventKindFile::Deleted),
        },
    }
}

/// The route's own watch of `resource`: its namespaces and selectors move from the filter
/// to the watch, so the API server applies them.
fn own_watch(
    cx: &RouteContext,
    r: &mut RouteFile,
    resource: &str,
    filter: &mut RouteFilter,
    errors: &mut Errors,
) -> (RouteSource, Option<InformerSpec>) {
    let resource = ResourceName::parse(resource)
        .map_err(|e| errors.at(cx.at("resource"), e))
        .ok();
    if let Some(name) = &resource {
        check_built_in(
            &cx.at("resource"),
            &ResourceRef::Plural(name.clone()),
            errors,
        );
    }
    let drop_fields = check_drop_fields(&cx.at("drop_fields"), r.drop_fields.take(), errors);
    let indexes = check_indexes(&cx.at("indexes"), r.indexes.take(), errors);
    let name = format!("{ROUTE_INFORMER_PREFIX}{}", r.name);
    let own = resource.map(|resource| InformerSpec {
        name: name.clone(),
        resource: ResourceRef::Plural(resource),
        namespaces: std::mem::take(&mut filter.namespaces),
        label_selector: filter.labels.take(),
        field_selector: filter.fields.take(),
        indexes,
        keep_managed_fields: r.keep_managed_fields.unwrap_or(false),
        drop_fields,
        shard_by: crate::config::ShardBy::Uid,
    });
    (RouteSource::Informer(name), own)
}

/// The informers a route without its own watch reads: one by name, or every one of some
/// kinds. Watch settings on such a route are reported: they belong to the informer.
fn shared_source(cx: &RouteContext, r: &RouteFile, errors: &mut Errors) -> RouteSource {
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
            check_informer(cx, name, errors);
            RouteSource::Informer(name.clone())
        }
        (None, Some(kinds)) => {
            check_kinds(cx, kinds, errors);
            RouteSource::Kinds(kinds.clone())
        }
        (None, None) => RouteSource::Kinds(Vec::new()),
    }
}

/// The informer a route names is defined under `informers:`.
fn check_informer(cx: &RouteContext, name: &str, errors: &mut Errors) {
    let names = &cx.informers.names;
    if names.contains(&name) || !cx.informers.complete {
        return;
    }
    let message = match nearest(name, names) {
        Some(near) => format!("unknown informer {name:?}; did you mean {near:?}?"),
        None if names.is_empty() => {
            format!("unknown informer {name:?}: no informers are defined under `informers:`")
        }
        None => format!(
            "unknown informer {name:?}; defined informers: {}",
            names.join(", ")
        ),
    };
    errors.at(cx.at("informer"), message);
}

/// Each kind a route names is watched by an informer (unless an informer could not be read,
/// which might have been the one).
fn check_kinds(cx: &RouteContext, kinds: &[String], errors: &mut Errors) {
    if kinds.is_empty() && !errors.unreadable(&cx.at("kinds")) {
        errors.at(cx.at("kinds"), "list at least one kind, such as [Pod]");
    }
    let read = cx.informers.read;
    if cx.informers.names.len() > read.len() || !cx.informers.complete {
        return;
    }
    let known: Vec<&str> = read
        .iter()
        .filter_map(|i| i.resource.known_kind())
        .collect();
    for (j, kind) in kinds.iter().enumerate() {
        // As `run` matches them: the kind exactly as the API server spells it.
        if read.iter().any(|i| i.resource.has_kind(kind)) {
            continue;
        }
        let watching: Vec<String> = read
            .iter()
            .map(|i| format!("{} ({})", i.name, i.resource))
            .collect();
        let message = match nearest(kind, &known) {
            Some(near) => format!("no informer watches kind {kind:?}; did you mean {near:?}?"),
            None if watching.is_empty() => {
                format!("no informer watches kind {kind:?}: define one under `informers:`")
            }
            None => format!(
                "no informer watches kind {kind:?}; informers: {}",
                watching.join(", ")
            ),
        };
        errors.at(format!("{}.kinds[{j}]", cx.at), message);
    }
}

/// A route's `when:` conditions, each with valid paths and exactly one test.
fn build_conditions(
    cx: &RouteContext,
    conditions: Vec<ConditionFile>,
    errors: &mut Errors,
) -> Vec<Condition> {
    let mut built = Vec::new();
    for (j, c) in conditions.into_iter().enumerate() {
        let at = format!("{}.when[{j}]", cx.at);
        let paths = condition_paths(&at, &c.path.0, errors);
        let tests: Vec<Test> = [
            c.equals.map(Test::Equals),
            c.exists.map(Test::Exists),
            c.changed.map(Test::Changed),
            c.newer_than.map(|d| Test::NewerThan(d.0)),
            c.older_than.map(|d| Test::OlderThan(d.0)),
        ]
        .into_iter()
        .flatten()
        .collect();
        // A test that could not be read (or was misspelt) was reported already.
        if tests.len() != 1 && !(tests.is_empty() && errors.unreadable(&at)) {
            errors.at(
                at,
                "a condition has a `path` and exactly one of `equals`, `exists`, `changed`, `newer_than` or `older_than`",
            );
            continue;
        }
        if let (Some(paths), Some(test)) = (paths, tests.into_iter().next()) {
            built.push(Condition { paths, test });
        }
    }
    built
}

/// A condition's paths, each parsed; `None` when one is invalid (reported at
/// `AT.path`, or `AT.path[k]` in a list).
fn condition_paths(at: &str, texts: &[String], errors: &mut Errors) -> Option<Vec<FieldPath>> {
    if texts.is_empty() {
        let at = format!("{at}.path");
        if !errors.unreadable(&at) {
            errors.at(at, "an empty list: name at least one field path");
        }
        return None;
    }
    let mut paths = Vec::new();
    for (k, text) in texts.iter().enumerate() {
        match FieldPath::parse(text) {
            Ok(path) => paths.push(path),
            Err(e) if texts.len() == 1 => errors.at(format!("{at}.path"), e),
            Err(e) => errors.at(format!("{at}.path[{k}]"), e),
        }
    }
    (paths.len() == texts.len()).then_some(paths)
}
