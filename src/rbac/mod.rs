//! The Kubernetes permissions a config needs, as a ServiceAccount and least-privilege
//! (Cluster)Roles with their bindings (`switchyard rbac`). It reads a validated config only.
//!
//! Each rule set ([`RULE_SETS`]) adds the permissions one part of the daemon needs: the
//! watches (get, list, watch on every resource an informer watches) and the handlers'
//! writes (exactly the verbs their `capabilities:` grant), and patch where a route holds
//! objects with a finalizer. A new part of the daemon that
//! talks to the API server adds its own rule set there.
//!
//! Scope: a resource whose every watch is limited to named namespaces gets a Role in each of
//! them; one watched in every namespace gets a ClusterRole. The Leases of several replicas
//! are in `ha.lease_namespace`, or, when the config does not name one, in the namespace the
//! daemon runs in: its ServiceAccount's (`--namespace`), as the daemon in its pod finds it. Writes follow the watches of the
//! handler's routes the same way: a plugin writes objects it saw, which are in the
//! namespaces watched. API discovery (which resolves a kind to its plural) needs no rule:
//! Kubernetes grants it to every authenticated user (ClusterRole `system:discovery`).

mod tenancy;
mod values;
mod yaml;

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{
    Config, HaMode, HandlerSpec, InformerSpec, ROUTE_INFORMER_PREFIX, ResourceRef, RouteSource,
    RouteSpec, Verb,
};

pub use values::helm_values;
pub use yaml::{Subject, render};

/// Where a rule applies: every namespace (a ClusterRole) or one (a Role there).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every namespace, and cluster-scoped resources.
    Cluster,
    /// One namespace.
    Namespace(String),
}

/// A resource as RBAC rules name it: API group and plural.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resource {
    /// API group; empty for the core group.
    pub group: String,
    /// Plural name (`configmaps`).
    pub plural: String,
}

/// One rule of a (Cluster)Role: the verbs allowed on one resource (or on the objects of
/// it named), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The resource.
    pub resource: Resource,
    /// The objects the rule is limited to (`resourceNames`); empty for every object.
    pub names: BTreeSet<String>,
    /// Kubernetes verbs, sorted.
    pub verbs: BTreeSet<&'static str>,
    /// What in the config needs the rule, sorted.
    pub reasons: BTreeSet<String>,
}

/// Everything a config needs, by scope; each scope's rules sorted by resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    /// Rules by scope, then by resource and whether they are limited to named objects.
    by_scope: BTreeMap<Scope, BTreeMap<(Resource, bool), Rule>>,
}

impl Permissions {
    /// Allows `verbs` on `resource` in every scope of `scopes`, recording `reason`.
    pub fn allow(
        &mut self,
        scopes: &[Scope],
        resource: &Resource,
        verbs: &[&'static str],
        reason: &str,
    ) {
        for scope in scopes {
            self.entry(scope, resource, false, verbs, reason);
        }
    }

    /// Allows `verbs` on the object `name` of `resource` in `scope` only (`resourceNames`),
    /// recording `reason`. Names allowed so merge into one rule per resource and scope.
    pub fn allow_named(
        &mut self,
        scope: &Scope,
        resource: &Resource,
        name: &str,
        verbs: &[&'static str],
        reason: &str,
    ) {
        let rule = self.entry(scope, resource, true, verbs, reason);
        rule.names.insert(name.to_string());
    }

    fn entry(
        &mut self,
        scope: &Scope,
        resource: &Resource,
        named: bool,
        verbs: &[&'static str],
        reason: &str,
    ) -> &mut Rule {
        let rule = self
            .by_scope
            .entry(scope.clone())
            .or_default()
            .entry((resource.clone(), named))
            .or_insert_with(|| Rule {
                resource: resource.clone(),
                names: BTreeSet::new(),
                verbs: BTreeSet::new(),
                reasons: BTreeSet::new(),
            });
        rule.verbs.extend(verbs.iter().copied());
        rule.reasons.insert(reason.to_string());
        rule
    }

    /// The rules of each scope: the cluster first, then namespaces by name.
    pub fn scopes(&self) -> impl Iterator<Item = (&Scope, Vec<&Rule>)> {
        self.by_scope
            .iter()
            .map(|(scope, rules)| (scope, rules.values().collect()))
    }

    /// The rule on every object of `resource` in `scope`, if any.
    pub fn rule(&self, scope: &Scope, resource: &Resource) -> Option<&Rule> {
        self.by_scope.get(scope)?.get(&(resource.clone(), false))
    }

    /// The rule on named objects of `resource` in `scope`, if any.
    pub fn named_rule(&self, scope: &Scope, resource: &Resource) -> Option<&Rule> {
        self.by_scope.get(scope)?.get(&(resource.clone(), true))
    }
}

/// A part of the daemon that talks to the API server, and the permissions it needs when it
/// runs as `subject`.
pub type RuleSet = fn(&Config, &Subject, &mut Permissions);

/// Every rule set, by name: what each part of the daemon needs.
pub const RULE_SETS: &[(&str, RuleSet)] = &[
    ("watches", watches),
    ("writes", writes),
    ("finalizers", finalizers),
    ("election", election),
    ("secrets", secrets),
    ("tenancy", tenancy::tenancy),
];

/// Reading the Secrets handlers' configs name (`valueFrom: {secretKeyRef: …}`): get, list
/// and watch on each by name. A list or watch is allowed by `resourceNames` when it selects
/// the one object by `metadata.name`, which is how the daemon watches each Secret.
fn secrets(config: &Config, subject: &Subject, permissions: &mut Permissions) {
    use crate::config::value_from::ValueSource;
    let resource = Resource {
        group: String::new(),
        plural: "secrets".into(),
    };
    for handler in &config.handlers {
        for value in &handler.value_refs {
            let ValueSource::Secret(secret) = &value.source else {
                continue;
            };
            let namespace = secret.namespace.as_deref().unwrap_or(&subject.namespace);
            let reason = format!(
                "handlers.{}.config.{}: Secret {namespace}/{}",
                handler.name, value.path, secret.name
            );
            permissions.allow_named(
                &Scope::Namespace(namespace.to_string()),
                &resource,
                &secret.name,
                READ_VERBS,
                &reason,
            );
        }
    }
}

/// The verbs leader election uses on its Lease: read it, create it, take it over or renew it.
pub const ELECTION_VERBS: &[&str] = &["create", "get", "update"];

/// The verbs sharded mode uses on the member Leases: renew its own, list the others',
/// delete its own on shutdown.
pub const SHARD_VERBS: &[&str] = &["create", "delete", "get", "list", "update"];

/// The namespace of the Leases of several replicas: the config's `ha.lease_namespace`, else
/// the namespace the daemon runs in (its ServiceAccount's), as the daemon in a pod finds it.
pub fn lease_namespace<'a>(config: &'a Config, subject: &'a Subject) -> &'a str {
    if config.ha.lease_namespace_written {
        &config.ha.lease_namespace
    } else {
        &subject.namespace
    }
}

/// Leader election (get, create and update) or shard membership (also list and delete) on
/// leases in the Lease's namespace, unless the daemon runs as a single replica.
fn election(config: &Config, subject: &Subject, permissions: &mut Permissions) {
    if config.ha.mode == HaMode::Single {
        return;
    }
    let namespace = lease_namespace(config, subject);
    let lease = Resource {
        group: "coordination.k8s.io".to_string(),
        plural: "leases".to_string(),
    };
    let (reason, verbs) = if config.ha.mode == HaMode::Sharded {
        let reason = format!(
            "ha: shard membership through Leases {namespace}/{}-*",
            config.ha.lease_name
        );
        (reason, SHARD_VERBS)
    } else {
        let reason = format!(
            "ha: leader election on Lease {namespace}/{}",
            config.ha.lease_name
        );
        (reason, ELECTION_VERBS)
    };
    permissions.allow(
        &[Scope::Namespace(namespace.to_string())],
        &lease,
        verbs,
        &reason,
    );
}

/// The permissions `config` needs, run as `subject`: every rule set's.
pub fn permissions(config: &Config, subject: &Subject) -> Permissions {
    let mut permissions = Permissions::default();
    for (_, rule_set) in RULE_SETS {
        rule_set(config, subject, &mut permissions);
    }
    permissions
}

/// The verbs an informer uses: a list, then a watch (get for a single object).
pub const READ_VERBS: &[&str] = &["get", "list", "watch"];

/// The Kubernetes verbs a capability needs. Server-side apply creates an object that is not
/// there yet, so it needs create beside patch.
pub fn verbs_of(verb: Verb) -> &'static [&'static str] {
    match verb {
        Verb::Apply => &["create", "patch"],
        Verb::Patch => &["patch"],
        Verb::Delete => &["delete"],
        Verb::Event => &["create"],
    }
}

/// Where the `event` capability writes: core v1 Events (the plugin host records
/// `core/v1` Events, in the object's namespace).
pub fn events_resource() -> Resource {
    Resource {
        group: String::new(),
        plural: "events".into(),
    }
}

/// The resource an informer watches, as RBAC names it. An informer named by kind has its
/// plural found by discovery when the daemon starts; here it is guessed by the English rule
/// most kinds follow (see `guess_plural`), and the rule's comment says so.
pub fn resource_of(informer: &InformerSpec) -> Resource {
    match &informer.resource {
        ResourceRef::Plural(name) => Resource {
            group: name.group.clone(),
            plural: name.plural.clone(),
        },
        ResourceRef::Kind { group, kind, .. } => Resource {
            group: group.clone(),
            plural: guess_plural(kind),
        },
    }
}

/// The plural Kubernetes clients guess for a kind: `Endpoints` is its own plural; `-s`,
/// `-x`, `-z`, `-ch` and `-sh` take `-es`; a consonant and `-y` take `-ies`; the rest `-s`.
fn guess_plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower == "endpoints" {
        lower
    } else if lower.ends_with(['s', 'x', 'z']) || lower.ends_with("ch") || lower.ends_with("sh") {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

/// The informers the daemon starts watches for: those a route names or a handler reads,
/// and, when a route picks informers by kind, every informer under `informers:` (their
/// kinds are looked up).
pub fn watched(config: &Config) -> Vec<&InformerSpec> {
    let by_kind = config
        .routes
        .iter()
        .any(|r| matches!(r.source, RouteSource::Kinds(_)));
    config
        .informers
        .iter()
        .filter(|spec| {
            config
                .routes
                .iter()
                .any(|r| matches!(&r.source, RouteSource::Informer(n) if *n == spec.name))
                || (by_kind && !spec.name.starts_with(ROUTE_INFORMER_PREFIX))
                || config.handlers.iter().any(|h| h.reads.contains(&spec.name))
        })
        .collect()
}

/// The informers that feed one route.
pub fn feeding_route<'a>(config: &'a Config, route: &RouteSpec) -> Vec<&'a InformerSpec> {
    config
        .informers
        .iter()
        .filter(|i| match &route.source {
            RouteSource::Informer(name) => i.name == *name,
            RouteSource::Kinds(kinds) => kinds.iter().any(|k| i.resource.has_kind(k)),
        })
        .collect()
}

/// Rule set: patch on the resources a route with a finalizer (`finalizer:`) watches, to
/// put its finalizer on the objects it delivers and take it off again (get, which the
/// removal reads the object with, comes with the watch).
fn finalizers(config: &Config, _: &Subject, permissions: &mut Permissions) {
    for route in config.routes.iter().filter(|r| r.finalizer.is_some()) {
        let mut by_resource: BTreeMap<Resource, Vec<&InformerSpec>> = BTreeMap::new();
        for informer in feeding_route(config, route) {
            by_resource
                .entry(resource_of(informer))
                .or_default()
                .push(informer);
        }
        let finalizer = route.finalizer.as_deref().unwrap_or_default();
        for (resource, informers) in by_resource {
            allow_where_watched(permissions, &informers, &resource, &["patch"], |_| {
                format!("route {}: finalizer {finalizer}", route.name)
            });
        }
    }
}

/// The informers that feed a handler's routes, and those it reads.
fn feeding<'a>(config: &'a Config, handler: &HandlerSpec) -> Vec<&'a InformerSpec> {
    config
        .informers
        .iter()
        .filter(|i| {
            handler.reads.contains(&i.name)
                || config.routes.iter().any(|r| {
                    r.handler == handler.name
                        && match &r.source {
                            RouteSource::Informer(name) => i.name == *name,
                            RouteSource::Kinds(kinds) => {
                                kinds.iter().any(|k| i.resource.has_kind(k))
                            }
                        }
                })
        })
        .collect()
}

/// Allows `verbs` on `resource` where `informers` watch: in each of their namespaces when
/// every one is limited to named namespaces, in the cluster otherwise. `reason` says why,
/// per informer.
fn allow_where_watched(
    permissions: &mut Permissions,
    informers: &[&InformerSpec],
    resource: &Resource,
    verbs: &[&'static str],
    reason: impl Fn(&InformerSpec) -> String,
) {
    let cluster_wide = informers.iter().any(|i| i.namespaces.is_empty());
    for informer in informers {
        let scopes: Vec<Scope> = if cluster_wide {
            vec![Scope::Cluster]
        } else {
            informer
                .namespaces
                .iter()
                .map(|ns| Scope::Namespace(ns.clone()))
                .collect()
        };
        permissions.allow(&scopes, resource, verbs, &reason(informer));
    }
}

/// The name an informer is shown by in a rule's reasons.
fn shown(informer: &InformerSpec) -> String {
    match informer.name.strip_prefix(ROUTE_INFORMER_PREFIX) {
        Some(route) => format!("route {route}"),
        None => format!("informer {}", informer.name),
    }
}

/// Rule set: get, list and watch on every watched resource.
fn watches(config: &Config, _: &Subject, permissions: &mut Permissions) {
    let mut by_resource: BTreeMap<Resource, Vec<&InformerSpec>> = BTreeMap::new();
    for informer in watched(config) {
        by_resource
            .entry(resource_of(informer))
            .or_default()
            .push(informer);
    }
    for (resource, informers) in by_resource {
        allow_where_watched(permissions, &informers, &resource, READ_VERBS, |i| {
            format!("watched by {}{}", shown(i), guessed(i))
        });
    }
}

/// A note on a reason when the plural was guessed from a kind.
fn guessed(informer: &InformerSpec) -> String {
    match &informer.resource {
        ResourceRef::Kind { kind, .. } => {
            format!(" (plural guessed from kind {kind}: check it with kubectl api-resources)")
        }
        ResourceRef::Plural(_) => String::new(),
    }
}

/// Rule set: the verbs each handler's capabilities grant, on the resources its routes
/// watch, and create on Events for `event`.
fn writes(config: &Config, _: &Subject, permissions: &mut Permissions) {
    for handler in &config.handlers {
        let informers = feeding(config, handler);
        let mut granted: BTreeMap<Resource, (BTreeSet<Verb>, Vec<&InformerSpec>)> = BTreeMap::new();
        for informer in &informers {
            for (name, verbs) in handler.capabilities.grants() {
                if informer.resource.answers_to(name) {
                    let entry = granted.entry(resource_of(informer)).or_default();
                    entry.0.extend(verbs.iter().copied());
                    entry.1.push(informer);
                }
            }
        }
        for (resource, (verbs, informers)) in granted {
            for verb in verbs {
                let reason = format!("handler {}: {verb}", handler.name);
                let (target, reason) = if verb == Verb::Event {
                    (
                        events_resource(),
                        format!("{reason} about {}", resource.plural),
                    )
                } else {
                    (resource.clone(), reason)
                };
                allow_where_watched(permissions, &informers, &target, verbs_of(verb), |_| {
                    reason.clone()
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
