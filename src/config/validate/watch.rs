//! The settings of a watch, shared by an informer under `informers:` and a route's own
//! `resource:` watch: the resource, namespaces, selectors, fields dropped before caching,
//! cache indexes.
//!
//! A resource of a built-in API group is checked against what Kubernetes serves: no CRD can
//! add to those groups, so `configmap` in `v1` is certainly a mistake (an error naming the
//! nearest resource), where `run` would otherwise wait for it forever. A version of such a
//! group that Kubernetes 1.34 does not serve is only a warning: a cluster may turn on an
//! alpha or beta version.

use std::collections::{BTreeMap, HashSet};

use super::errors::Errors;
use crate::config::document::join;
use crate::config::{NAMESPACE_INDEX, ResourceRef, Selector, builtin, validate_pointer};

/// Checks a resource of a built-in API group, written at `at`, against what Kubernetes
/// serves.
pub(super) fn check_built_in(at: &str, resource: &ResourceRef, errors: &mut Errors) {
    let (group, version, plural, kind) = match resource {
        ResourceRef::Plural(name) => (&name.group, &name.version, Some(&*name.plural), None),
        ResourceRef::Kind {
            group,
            version,
            kind,
        } => (group, version, None, Some(&**kind)),
    };
    if !builtin::is_built_in_group(group) {
        return;
    }
    let Some(why) = builtin::unknown(group, version, plural, kind) else {
        return;
    };
    if builtin::is_built_in_version(group, version) {
        errors.at(at, why);
    } else {
        errors.warn_at(at, why);
    }
}

/// Checks each namespace of a list at `at`, and that none is listed twice.
pub(super) fn check_namespaces(at: &str, namespaces: &[String], errors: &mut Errors) {
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

/// Checks one namespace name.
pub(super) fn check_namespace(at: String, ns: &str, errors: &mut Errors) {
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

/// Checks a label and a field selector; `prefix` is `informers.x.` or `routes[2].`.
pub(super) fn check_selectors(
    prefix: &str,
    labels: Option<&str>,
    fields: Option<&str>,
    errors: &mut Errors,
) {
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

/// The valid JSON pointers of a `drop_fields` list at `at`; each invalid one is reported.
pub(super) fn check_drop_fields(
    at: &str,
    pointers: Option<Vec<String>>,
    errors: &mut Errors,
) -> Vec<String> {
    let mut valid = Vec::new();
    for (j, pointer) in pointers.into_iter().flatten().enumerate() {
        match validate_pointer(&pointer) {
            Ok(()) => valid.push(pointer),
            Err(e) => errors.at(format!("{at}[{j}]"), e),
        }
    }
    valid
}

/// The valid cache indexes of an `indexes` mapping at `at`; the reserved name, an index
/// with no source and a malformed source are reported.
pub(super) fn check_indexes(
    at: &str,
    indexes: Option<BTreeMap<String, crate::config::schema::IndexFile>>,
    errors: &mut Errors,
) -> Vec<(String, Vec<String>)> {
    let mut valid = Vec::new();
    for (name, sources) in indexes.into_iter().flatten() {
        let sources = sources.0;
        if name == NAMESPACE_INDEX || sources.is_empty() {
            errors.at(
                join(at, &name),
                format!("index {name:?} needs a field path such as spec.nodeName or label:KEY, and `namespace` is built in"),
            );
            continue;
        }
        let mut ok = true;
        for (i, source) in sources.iter().enumerate() {
            if let Err(why) = index_source(source) {
                let at = join(at, &name);
                errors.at(
                    if sources.len() > 1 {
                        format!("{at}[{i}]")
                    } else {
                        at
                    },
                    why,
                );
                ok = false;
            }
        }
        if ok {
            valid.push((name, sources));
        }
    }
    valid
}

/// Whether `source` can feed an index: `label:KEY`, or a dotted field path whose segments
/// are names, each maybe ending in `[]` (every element of a list).
fn index_source(source: &str) -> Result<(), String> {
    if let Some(label) = source.strip_prefix("label:") {
        return match label.trim().is_empty() {
            true => Err("label: needs a label key, as in label:app".into()),
            false => Ok(()),
        };
    }
    let bad = source.split('.').find(|segment| {
        let name = segment.strip_suffix("[]").unwrap_or(segment);
        name.trim().is_empty() || name.contains(['[', ']'])
    });
    match bad {
        Some(segment) => Err(format!(
            "{source:?} is not a field path: segment {segment:?}; write names joined by '.', a name \
             ending in [] for each element of a list (spec.volumes[].configMap.name), or label:KEY"
        )),
        None => Ok(()),
    }
}
