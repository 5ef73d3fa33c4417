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

    /// Capabilities granting each set of verbs, by resource as written.
    pub(super) fn from_grants(grants: BTreeMap<String, BTreeSet<Verb>>) -> Self {
        Self { grants }
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

#[cfg(test)]
mod tests {
    use super::*;

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
