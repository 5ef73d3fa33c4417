//! A handler's `capabilities:`: which Kubernetes writes its plugin may make, per resource.
//!
//! ```yaml
//! handlers:
//!   label-guard:
//!     capabilities:
//!       configmaps: [patch]          # by plural, as routes name it
//!       Pod: [apply, delete, event]  # or by kind, or by the full resource (v1/pods)
//! ```
//!
//! A handler without `capabilities:` may write nothing; reading the caches of its routes'
//! resources needs no capability. A resource is granted only if one of the handler's own
//! routes watches it, because writes use the resource as that route's informer resolved it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::validate::Errors;
use super::{HandlerSpec, InformerSpec, RouteSource, RouteSpec};

/// `handlers.NAME.capabilities:` as written: resource → list of verbs.
pub type CapabilitiesFile = BTreeMap<String, Vec<String>>;

/// A write a handler may be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// Server-side apply.
    Apply,
    /// JSON merge patch.
    Patch,
    /// Delete.
    Delete,
    /// Record a core v1 Event about an object of the resource.
    Event,
}

impl Verb {
    /// Every verb, in the order the docs list them.
    pub const ALL: [Verb; 4] = [Verb::Apply, Verb::Patch, Verb::Delete, Verb::Event];

    /// The verb as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Apply => "apply",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::Event => "event",
        }
    }

    /// Parses a verb as written in the config.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == text)
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The writes a handler may make: verbs per resource, the resource named as in the config
/// (plural, kind or full resource string). Empty by default: no writes at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    grants: BTreeMap<String, BTreeSet<Verb>>,
}

impl Capabilities {
    /// Capabilities granting `verbs` on each resource.
    pub fn new<'a>(grants: impl IntoIterator<Item = (&'a str, &'a [Verb])>) -> Self {
        Self {
            grants: grants
                .into_iter()
                .map(|(r, v)| (r.to_string(), v.iter().copied().collect()))
                .collect(),
        }
    }

    /// Whether `verb` is granted on a resource known by any of `names` (its plural, kind
    /// and full resource string).
    pub fn allows(&self, names: &[&str], verb: Verb) -> bool {
        names
            .iter()
            .filter_map(|n| self.grants.get(*n))
            .any(|verbs| verbs.contains(&verb))
    }

    /// Whether nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.grants.values().all(BTreeSet::is_empty)
    }

    /// The resources named, as written, with their verbs.
    pub fn grants(&self) -> impl Iterator<Item = (&str, &BTreeSet<Verb>)> {
        self.grants.iter().map(|(r, v)| (r.as_str(), v))
    }
}

/// Builds a handler's capabilities, reporting each unknown verb at its line and column.
pub(super) fn build(
    handler: &str,
    file: Option<&CapabilitiesFile>,
    errors: &mut Errors,
) -> Capabilities {
    let mut grants = BTreeMap::new();
    for (resource, verbs) in file.into_iter().flatten() {
        let path = format!("handlers.{handler}.capabilities.{resource}");
        if resource.trim().is_empty() {
            errors.at_key(
                path,
                "name a resource: plural, kind or full resource such as v1/pods".into(),
            );
            continue;
        }
        let mut granted = BTreeSet::new();
        for (i, verb) in verbs.iter().enumerate() {
            match Verb::parse(verb) {
                Some(v) => {
                    granted.insert(v);
                }
                None => {
                    let known: Vec<&str> = Verb::ALL.iter().map(|v| v.as_str()).collect();
                    let hint = super::validate::nearest(verb, &known)
                        .map(|near| format!("did you mean {near:?}? "))
                        .unwrap_or_default();
                    errors.at(
                        format!("{path}[{i}]"),
                        format!(
                            "unknown capability {verb:?}: {hint}a handler may be granted {}",
                            known.join(", ")
                        ),
                    );
                }
            }
        }
        grants.insert(resource.clone(), granted);
    }
    Capabilities { grants }
}

/// The informers that feed `route`, as far as the config alone tells (a route by kinds is
/// fed by every informer that answers to one of them).
fn feeding<'a>(route: &RouteSpec, informers: &'a [InformerSpec]) -> Vec<&'a InformerSpec> {
    informers
        .iter()
        .filter(|i| match &route.source {
            RouteSource::Informer(name) => i.name == *name,
            RouteSource::Kinds(kinds) => kinds.iter().any(|k| i.resource.answers_to(k)),
        })
        .collect()
}

/// Reports capabilities on resources none of the handler's routes watch: such a grant could
/// never be used.
pub(super) fn check_resources(
    handler: &HandlerSpec,
    routes: &[RouteSpec],
    informers: &[InformerSpec],
    errors: &mut Errors,
) {
    let watched: Vec<&InformerSpec> = routes
        .iter()
        .filter(|r| r.handler == handler.name)
        .flat_map(|r| feeding(r, informers))
        .collect();
    for (key, _) in handler.capabilities.grants() {
        if key.trim().is_empty() || watched.iter().any(|i| i.resource.answers_to(key)) {
            continue;
        }
        let mut names: Vec<String> = watched.iter().map(|i| i.resource.to_string()).collect();
        names.sort();
        names.dedup();
        let names = if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        };
        errors.at_key(
            format!("handlers.{}.capabilities.{key}", handler.name),
            format!(
                "handler {:?} has no route watching {key:?}: capabilities apply to the resources its routes watch ({names})",
                handler.name
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_host_imports_example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/host-imports.yaml");
        let config = crate::config::load(&path).unwrap();
        let guard = &config.handlers[0];
        assert_eq!(guard.name, "label-guard");
        assert!(guard.capabilities.allows(&["configmaps"], Verb::Patch));
    }

    #[test]
    fn handlers_have_no_capabilities_unless_granted() {
        let text = "\
handlers:
  a: {}
  b:
    capabilities:
      configmaps: [patch, event]
      v1/pods: [delete]
      Pod: [apply]
routes:
  - {name: cms, resource: configmaps, handler: a}
  - {name: b-cms, resource: configmaps, handler: b}
  - {name: b-pods, resource: v1/pods, handler: b}
";
        let config = crate::config::validate(Path::new("c.yaml"), text).unwrap();
        assert!(config.handlers[0].capabilities.is_empty());
        let b = &config.handlers[1].capabilities;
        assert!(b.allows(&["configmaps"], Verb::Event));
        assert!(b.allows(&["pods", "Pod", "v1/pods"], Verb::Delete));
        assert!(b.allows(&["pods", "Pod", "v1/pods"], Verb::Apply));
        assert!(!b.allows(&["pods", "Pod", "v1/pods"], Verb::Patch));
    }

    #[test]
    fn an_unknown_verb_is_reported_at_its_line_and_column() {
        let text = "\
handlers:
  h:
    capabilities:
      configmaps: [patch, pach, write]
      secrets: [delete]
routes:
  - {name: cms, resource: configmaps, handler: h}
";
        let errors = crate::config::validate(Path::new("c.yaml"), text)
            .unwrap_err()
            .0;
        let found: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(found.len(), 3, "{found:#?}");
        assert_eq!(
            found[0],
            "c.yaml:4:27: handlers.h.capabilities.configmaps[1]: unknown capability \"pach\": did you mean \"patch\"? a handler may be granted apply, patch, delete, event"
        );
        assert!(
            found[1].starts_with("c.yaml:4:33: handlers.h.capabilities.configmaps[2]: unknown capability \"write\": a handler"),
            "{}",
            found[1]
        );
        assert!(
            found[2].starts_with("c.yaml:5:7: handlers.h.capabilities.secrets: handler \"h\" has no route watching \"secrets\""),
            "{}",
            found[2]
        );
    }

    #[test]
    fn a_grant_matches_any_name_of_the_resource() {
        let caps = Capabilities::new([
            ("configmaps", &[Verb::Patch][..]),
            ("Pod", &[Verb::Event][..]),
        ]);
        assert!(caps.allows(&["configmaps", "ConfigMap", "v1/configmaps"], Verb::Patch));
        assert!(!caps.allows(&["configmaps", "ConfigMap", "v1/configmaps"], Verb::Delete));
        assert!(caps.allows(&["pods", "Pod", "v1/pods"], Verb::Event));
        assert!(!Capabilities::default().allows(&["pods"], Verb::Apply));
    }
}
