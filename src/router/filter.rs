//! A route's filter on the objects it delivers: namespaces, label and field selectors, and
//! field conditions (`equals`, `exists`, `changed`, `newer_than`, `older_than`).
//!
//! The namespaces and selectors say which objects belong to the route; an update that moves
//! an object in or out becomes `added` or `deleted`. The conditions look at the object the
//! delta carries: the new state of an update, the last known state of a deletion. `changed`
//! compares the old and new states of an update (an
//! update whose old state is unknown counts as a change); additions, deletions and resyncs
//! pass a `changed` test, as they are not updates of the value. `newer_than` and
//! `older_than` compare a timestamp with the clock when the change reaches the route (an
//! Event's age, as kubernetes-event-exporter's `maxEventAgeSeconds`); a condition may name
//! several paths, of which the first that has a value is tested (`lastTimestamp`, else
//! `eventTime`). The object's JSON is parsed
//! only when a label, field or condition test needs it, and then only the parts those tests
//! read ([`Wanted`]).

use serde_json::Value;

use super::pruned::Wanted;
use crate::config::selector::{Selector, SelectorError};
use crate::config::{Condition, RouteFilter, Test};
use crate::informer::{CachedObject, Delta};

/// A [`RouteFilter`] ready to test deltas.
#[derive(Debug, Clone)]
pub struct ObjectFilter {
    namespaces: Vec<String>,
    labels: Option<Selector>,
    fields: Option<Selector>,
    when: Vec<Condition>,
    /// The paths the selectors and conditions read.
    wanted: Wanted,
}

impl ObjectFilter {
    /// Compiles a validated filter. Selectors were checked by validation; one that fails to
    /// parse here selects nothing rather than everything.
    pub fn new(filter: &RouteFilter) -> Self {
        let compile = |text: &Option<String>,
                       parse: fn(&str) -> Result<Selector, SelectorError>| {
            text.as_deref().map(|t| {
                parse(t).unwrap_or_else(|_| Selector::parse("switchyard.invalid/never").unwrap())
            })
        };
        let labels = compile(&filter.labels, Selector::parse);
        let fields = compile(&filter.fields, Selector::parse_fields);
        let mut wanted = Wanted::default();
        if labels.is_some() {
            wanted.add(["metadata", "labels"]);
        }
        for path in fields.iter().flat_map(Selector::keys) {
            wanted.add(path.split('.'));
        }
        for path in filter.when.iter().flat_map(|c| &c.paths) {
            wanted.add(path.parts());
        }
        Self {
            namespaces: filter.namespaces.clone(),
            labels,
            fields,
            when: filter.when.clone(),
            wanted,
        }
    }

    /// Whether it lets every delta through.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
            && self.labels.is_none()
            && self.fields.is_none()
            && self.when.is_empty()
    }

    /// What the route should deliver for `delta`, if anything. The namespaces and selectors
    /// say which objects belong to the route: an update that moves an object in is
    /// delivered as `added`, one that moves it out as `deleted` (with the state before), as
    /// client-go's filtering handler does. The `when` conditions then decide whether the
    /// change is delivered at all.
    pub fn apply(&self, delta: &Delta) -> Option<Delta> {
        if self.is_empty() {
            return Some(delta.clone());
        }
        let Delta::Updated { old, new } = delta else {
            let object = delta.object()?;
            let parsed = self.parse_if_needed(object);
            return (self.contains(object, parsed.as_ref())
                && self.conditions_hold(parsed.as_ref(), None))
            .then(|| delta.clone());
        };
        let (old_parsed, new_parsed) = (self.parse_if_needed(old), self.parse_if_needed(new));
        let delta = match (
            self.contains(old, old_parsed.as_ref()),
            self.contains(new, new_parsed.as_ref()),
        ) {
            (true, true) => delta.clone(),
            (false, true) => Delta::Added(new.clone()),
            (true, false) => Delta::Deleted {
                last_known: old.clone(),
                final_state_unknown: false,
            },
            (false, false) => return None,
        };
        let before = match &delta {
            Delta::Updated { .. } => Some(old_parsed.as_ref()),
            _ => None,
        };
        let object = match &delta {
            Delta::Deleted { .. } => old_parsed.as_ref(),
            _ => new_parsed.as_ref(),
        };
        self.conditions_hold(object, before).then_some(delta)
    }

    /// The parts of the object a selector or condition looks at, when one does.
    fn parse_if_needed(&self, object: &CachedObject) -> Option<Value> {
        if self.wanted.is_empty() {
            return None;
        }
        self.wanted.parse(object.json_str()).ok()
    }

    /// Whether the object is in one of the namespaces and matches the selectors.
    fn contains(&self, object: &CachedObject, parsed: Option<&Value>) -> bool {
        if !self.namespaces.is_empty() {
            let key = object.key().as_str();
            let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
            if !self.namespaces.iter().any(|ns| ns == namespace) {
                return false;
            }
        }
        if self.labels.is_none() && self.fields.is_none() {
            return true;
        }
        let Some(object) = parsed else {
            return false;
        };
        !(self
            .labels
            .as_ref()
            .is_some_and(|s| !s.matches_labels(object))
            || self
                .fields
                .as_ref()
                .is_some_and(|s| !s.matches_fields(object)))
    }

    /// Whether every `when` condition holds for `object`; `before` is the state before an
    /// update (`Some(None)` when it could not be read).
    fn conditions_hold(&self, object: Option<&Value>, before: Option<Option<&Value>>) -> bool {
        if self.when.is_empty() {
            return true;
        }
        let Some(object) = object else {
            return false;
        };
        let now = jiff::Timestamp::now();
        self.when.iter().all(|c| {
            let value = c.lookup(object);
            match &c.test {
                Test::Equals(wanted) => value.is_some_and(|v| equal(v, wanted)),
                Test::Exists(exists) => value.is_some() == *exists,
                Test::Changed(changed) => match before {
                    Some(Some(old)) => (c.lookup(old) != value) == *changed,
                    // The old state is unknown: count it as changed.
                    Some(None) => *changed,
                    None => true,
                },
                Test::NewerThan(limit) => age(value, now).is_some_and(|age| age < *limit),
                Test::OlderThan(limit) => age(value, now).is_some_and(|age| age > *limit),
            }
        })
    }
}

/// How long before `now` the timestamp `value` (RFC 3339, as Kubernetes writes them) is;
/// zero for one in the future, `None` for a value that is not a timestamp.
fn age(value: Option<&Value>, now: jiff::Timestamp) -> Option<std::time::Duration> {
    let then: jiff::Timestamp = value?.as_str()?.parse().ok()?;
    let span = now.duration_since(then);
    Some(std::time::Duration::try_from(span).unwrap_or_default())
}

/// JSON equality, where a YAML scalar written as text also matches a number or boolean with
/// the same text (`equals: "3"` matches 3).
fn equal(value: &Value, wanted: &Value) -> bool {
    value == wanted
        || match (value, wanted) {
            (Value::Number(n), Value::String(s)) | (Value::String(s), Value::Number(n)) => {
                n.to_string() == *s
            }
            (Value::Bool(b), Value::String(s)) | (Value::String(s), Value::Bool(b)) => {
                b.to_string() == *s
            }
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FieldPath;
    use kube::api::DynamicObject;
    use serde_json::json;
    use std::sync::Arc;

    fn object(json: Value) -> Arc<CachedObject> {
        let object: DynamicObject = serde_json::from_value(json).unwrap();
        Arc::new(CachedObject::new(object))
    }

    fn deployment(ns: &str, replicas: u64, ready: u64, app: &str) -> Arc<CachedObject> {
        object(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns, "labels": {"app": app}},
            "spec": {"replicas": replicas},
            "status": {"readyReplicas": ready},
        }))
    }

    fn condition(path: &str, test: Test) -> Condition {
        Condition::new(FieldPath::parse(path).unwrap(), test)
    }

    fn event(last: Option<&str>, event_time: Option<&str>) -> Arc<CachedObject> {
        object(json!({
            "apiVersion": "v1", "kind": "Event", "type": "Warning",
            "metadata": {"name": "e", "namespace": "a"},
            "lastTimestamp": last, "eventTime": event_time,
        }))
    }

    #[test]
    fn newer_than_passes_recent_timestamps_from_the_first_path_that_has_one() {
        let paths = ["lastTimestamp", "eventTime"].map(|p| FieldPath::parse(p).unwrap());
        let filter = ObjectFilter::new(&RouteFilter {
            when: vec![Condition {
                paths: paths.to_vec(),
                test: Test::NewerThan(std::time::Duration::from_secs(3600)),
            }],
            ..RouteFilter::default()
        });
        let now = jiff::Timestamp::now();
        let ago = |secs: i64| (now - jiff::SignedDuration::from_secs(secs)).to_string();
        let passes = |e| filter.apply(&Delta::Added(e)).is_some();
        assert!(passes(event(Some(&ago(60)), None)));
        assert!(!passes(event(Some(&ago(7200)), None)));
        assert!(passes(event(None, Some(&ago(60)))));
        assert!(!passes(event(None, Some(&ago(7200)))));
        // The first path with a value decides, even when a later one is recent.
        assert!(!passes(event(Some(&ago(7200)), Some(&ago(60)))));
        // No timestamp, or text that is not one: not newer than anything.
        assert!(!passes(event(None, None)));
        assert!(!passes(event(Some("yesterday"), None)));
        // A timestamp in the future (clock skew) is new.
        assert!(passes(event(Some(&ago(-60)), None)));
    }

    #[test]
    fn older_than_passes_only_timestamps_past_the_limit() {
        let filter = ObjectFilter::new(&RouteFilter {
            when: vec![condition(
                "lastTimestamp",
                Test::OlderThan(std::time::Duration::from_secs(3600)),
            )],
            ..RouteFilter::default()
        });
        let now = jiff::Timestamp::now();
        let ago = |secs: i64| (now - jiff::SignedDuration::from_secs(secs)).to_string();
        assert!(
            filter
                .apply(&Delta::Added(event(Some(&ago(7200)), None)))
                .is_some()
        );
        assert!(
            filter
                .apply(&Delta::Added(event(Some(&ago(60)), None)))
                .is_none()
        );
        assert!(filter.apply(&Delta::Added(event(None, None))).is_none());
    }

    #[test]
    fn spec_changes_pass_and_status_only_updates_do_not() {
        let filter = ObjectFilter::new(&RouteFilter {
            when: vec![condition(".spec", Test::Changed(true))],
            ..RouteFilter::default()
        });
        let status_only = Delta::Updated {
            old: deployment("a", 2, 1, "web"),
            new: deployment("a", 2, 2, "web"),
        };
        let scaled = Delta::Updated {
            old: deployment("a", 2, 2, "web"),
            new: deployment("a", 3, 2, "web"),
        };
        assert!(filter.apply(&status_only).is_none());
        assert!(filter.apply(&scaled).is_some());
        assert!(
            filter
                .apply(&Delta::Added(deployment("a", 1, 0, "web")))
                .is_some()
        );
    }

    #[test]
    fn an_update_that_moves_an_object_in_or_out_is_an_addition_or_a_deletion() {
        let filter = ObjectFilter::new(&RouteFilter {
            labels: Some("app=web".into()),
            ..RouteFilter::default()
        });
        let (web, db) = (deployment("a", 1, 0, "web"), deployment("a", 1, 0, "db"));
        let joined = filter.apply(&Delta::Updated {
            old: db.clone(),
            new: web.clone(),
        });
        assert!(matches!(joined, Some(Delta::Added(o)) if Arc::ptr_eq(&o, &web)));
        let left = filter.apply(&Delta::Updated {
            old: web.clone(),
            new: db.clone(),
        });
        assert!(matches!(
            left,
            Some(Delta::Deleted { last_known, final_state_unknown: false }) if Arc::ptr_eq(&last_known, &web)
        ));
        let stayed = filter.apply(&Delta::Updated {
            old: web.clone(),
            new: web.clone(),
        });
        assert!(matches!(stayed, Some(Delta::Updated { .. })));
        let outside = filter.apply(&Delta::Updated {
            old: db.clone(),
            new: db,
        });
        assert!(outside.is_none());
    }

    #[test]
    fn namespaces_labels_equals_and_exists_all_apply() {
        let filter = ObjectFilter::new(&RouteFilter {
            namespaces: vec!["a".into(), "b".into()],
            labels: Some("app in (web,api)".into()),
            fields: Some("metadata.name=web".into()),
            when: vec![
                condition("spec.replicas", Test::Equals(json!("3"))),
                condition("/status/readyReplicas", Test::Exists(true)),
                condition("metadata.annotations", Test::Exists(false)),
            ],
        });
        assert!(
            filter
                .apply(&Delta::Added(deployment("a", 3, 0, "web")))
                .is_some()
        );
        assert!(
            filter
                .apply(&Delta::Added(deployment("c", 3, 0, "web")))
                .is_none()
        );
        assert!(
            filter
                .apply(&Delta::Added(deployment("b", 3, 0, "db")))
                .is_none()
        );
        assert!(
            filter
                .apply(&Delta::Added(deployment("b", 2, 0, "api")))
                .is_none()
        );
        assert!(
            filter
                .apply(&Delta::Added(deployment("b", 3, 0, "api")))
                .is_some()
        );
    }
}
