//! A handler's `capabilities:` as validation reads them: each verb known, and each resource
//! watched by one of the handler's own routes or an informer it `reads:` (writes use the
//! resource as that informer resolved it, so a grant on anything else could never be used).

use std::collections::{BTreeMap, BTreeSet};

use super::errors::Errors;
use super::names::nearest;
use crate::config::capabilities::CapabilitiesFile;
use crate::config::{
    Capabilities, HandlerSpec, InformerSpec, ROUTE_INFORMER_PREFIX, ResourceRef, RouteSource,
    RouteSpec, Verb,
};

/// Builds a handler's capabilities, reporting each unknown verb at its line and column.
pub(super) fn build(
    handler: &str,
    file: Option<&CapabilitiesFile>,
    errors: &mut Errors,
) -> Capabilities {
    let mut grants = BTreeMap::new();
    for (resource, verbs) in file.into_iter().flatten() {
        if resource == super::outbound::HTTP_KEY {
            continue;
        }
        let path = format!("handlers.{handler}.capabilities.{resource}");
        if resource.trim().is_empty() {
            errors.at_key(
                path,
                "name a resource: plural, kind or full resource such as v1/pods",
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
                    let hint = nearest(verb, &known)
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
    Capabilities::from_grants(grants)
}

/// What could not be built, so the resources a handler's routes watch may not all be known.
pub(super) struct Unbuilt {
    /// The informers under `informers:` that are not valid (the resource one names may be
    /// a mistake for the one a grant names); `None` when the section itself could not be
    /// read.
    pub invalid_informers: Option<Vec<String>>,
    /// The handler of each route whose source is not known; `None` where it cannot be told.
    pub routes_of: Vec<Option<String>>,
}

impl Unbuilt {
    /// Whether the resources every route of `handler` watches are known.
    fn knows_all_of(&self, handler: &str, routes: &[RouteSpec]) -> bool {
        let route_missing = self
            .routes_of
            .iter()
            .any(|h| h.as_deref().is_none_or(|h| h == handler));
        let informer_missing = routes.iter().filter(|r| r.handler == handler).any(|r| {
            match (&r.source, &self.invalid_informers) {
                // A route's own watch was built with the route.
                (RouteSource::Informer(name), _) if name.starts_with(ROUTE_INFORMER_PREFIX) => {
                    false
                }
                (_, None) => true,
                (RouteSource::Informer(name), Some(invalid)) => invalid.contains(name),
                (RouteSource::Kinds(_), Some(invalid)) => !invalid.is_empty(),
            }
        });
        !route_missing && !informer_missing
    }
}

/// The informers that feed `route`, as far as the config alone tells (a route by kinds is
/// fed by every informer of one of them).
fn feeding<'a>(route: &RouteSpec, informers: &'a [InformerSpec]) -> Vec<&'a InformerSpec> {
    informers
        .iter()
        .filter(|i| match &route.source {
            RouteSource::Informer(name) => i.name == *name,
            RouteSource::Kinds(kinds) => kinds.iter().any(|k| i.resource.has_kind(k)),
        })
        .collect()
}

/// Reports capabilities on resources none of the handler's routes watch and no informer it
/// reads caches, each named as the
/// daemon matches it (plural, full resource or kind, spelt exactly): such a grant could
/// never be used. Quiet when a route of the handler, or an informer feeding it, could not
/// be built (its mistake is reported; the grant may be meant for it).
pub(super) fn check_resources(
    handler: &HandlerSpec,
    routes: &[RouteSpec],
    informers: &[InformerSpec],
    unbuilt: &Unbuilt,
    errors: &mut Errors,
) {
    let unknown_read = (handler.reads.iter()).any(|r| !informers.iter().any(|i| i.name == *r));
    if !unbuilt.knows_all_of(&handler.name, routes) || unknown_read {
        return;
    }
    let mut watched: Vec<&InformerSpec> = routes
        .iter()
        .filter(|r| r.handler == handler.name)
        .flat_map(|r| feeding(r, informers))
        .collect();
    watched.extend(informers.iter().filter(|i| handler.reads.contains(&i.name)));
    for (key, _) in handler.capabilities.grants() {
        if key.trim().is_empty() || watched.iter().any(|i| i.resource.answers_to(key)) {
            continue;
        }
        let mut names: Vec<String> = watched.iter().map(|i| i.resource.to_string()).collect();
        names.sort();
        names.dedup();
        let path = format!("handlers.{}.capabilities.{key}", handler.name);
        let spellings: Vec<String> = watched.iter().flat_map(|i| spellings(i)).collect();
        let spellings: Vec<&str> = spellings.iter().map(String::as_str).collect();
        let message = match nearest(key, &spellings) {
            Some(near) => format!(
                "handler {:?} neither watches nor reads {key:?}, so it grants nothing; did you mean {near:?}?",
                handler.name
            ),
            None if names.is_empty() => format!(
                "handler {:?} neither watches nor reads {key:?}, so it grants nothing: capabilities apply to the resources its routes watch and its reads: name (none)",
                handler.name
            ),
            None => format!(
                "handler {:?} neither watches nor reads {key:?}, so it grants nothing: capabilities apply to the resources its routes watch and its reads: name ({})",
                handler.name,
                names.join(", ")
            ),
        };
        errors.at_key(path, message);
    }
}

/// The names a capability on `informer`'s resource may use, as far as they are known
/// offline: its plural, its full name, and its kind when known.
fn spellings(informer: &InformerSpec) -> Vec<String> {
    let mut names = Vec::new();
    if let ResourceRef::Plural(r) = &informer.resource {
        names.push(r.plural.clone());
        names.push(r.to_string());
    }
    names.extend(informer.resource.known_kind().map(String::from));
    names
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Verb;

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
            found[2].starts_with("c.yaml:5:7: handlers.h.capabilities.secrets: handler \"h\" neither watches nor reads \"secrets\""),
            "{}",
            found[2]
        );
    }
}
