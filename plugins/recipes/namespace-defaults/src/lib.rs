//! namespace-defaults: every namespace carrying a label gets the objects the config lists
//! (a default-deny NetworkPolicy and a ResourceQuota, say), by server-side apply, and gets
//! them back when someone deletes or changes them: what Kyverno's generate rules with
//! `synchronize: true` do (its sample policies `add-networkpolicy` and `add-ns-quota`).
//!
//! ```yaml
//! config:
//!   label: switchyard.dev/defaults=true     # the namespaces' label: KEY=VALUE, or KEY
//!   managed_by: switchyard-namespace-defaults   # optional: the value of the
//!                                           # app.kubernetes.io/managed-by label put on each object
//!   objects:                                # applied in each labelled namespace
//!     - apiVersion: networking.k8s.io/v1
//!       kind: NetworkPolicy
//!       metadata: {name: default-deny}
//!       spec: {podSelector: {}, policyTypes: [Ingress, Egress]}
//! ```
//!
//! Its routes deliver the namespaces (all of them cached: the plugin reads the label there)
//! and the objects it made (their watches select `app.kubernetes.io/managed-by`):
//!
//! - a namespace that carries the label (added, or labelled since): each object is applied
//!   unless the cache holds it already as the config has it;
//! - one of its objects deleted or changed: applied again if its namespace still carries the
//!   label and is not being deleted (read from the cache, not from the event, which may be
//!   older); a namespace without the label keeps what it has, as it is.
//!
//! An object is "as the config has it" when every field the config gives has that value
//! (fields others added are left alone, as server-side apply leaves them). Applying takes
//! `apply` on each object's resource; the field manager is `switchyard-HANDLER`.
//!
//! Right after a restart the namespaces may not be listed yet; an event that needs one is
//! then looked at again a second later.

use std::cell::RefCell;

use serde_json::{Map, Value};
use switchyard_sdk::{
    Event, EventKind, Handler, Level, Outcome, cache, export_handler, kube, log, metrics,
};

/// The label each applied object carries, which the routes' watches select.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Its value unless the config's `managed_by` says otherwise.
pub const DEFAULT_MANAGER: &str = "switchyard-namespace-defaults";
/// How soon an event is looked at again while the namespaces are not listed.
const NOT_LISTED_MS: u64 = 1000;

/// The namespaces' label: `key=value`, or `key` with any value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Label {
    key: String,
    value: Option<String>,
}

impl Label {
    fn parse(text: &str) -> Result<Self, String> {
        let (key, value) = match text.split_once('=') {
            Some((key, value)) => (key.trim(), Some(value.trim().to_string())),
            None => (text.trim(), None),
        };
        if key.is_empty() || key.contains([',', '!', ' ']) {
            return Err(format!(
                "label {text:?} must be KEY=VALUE or KEY, such as switchyard.dev/defaults=true"
            ));
        }
        Ok(Self {
            key: key.to_string(),
            value,
        })
    }

    fn on(&self, object: &Value) -> bool {
        match object["metadata"]["labels"].get(&self.key) {
            None => false,
            Some(found) => self.value.as_deref().is_none_or(|v| found == v),
        }
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{}={value}", self.key),
            None => f.write_str(&self.key),
        }
    }
}

/// What the handler's config asks for.
#[derive(Debug, Clone)]
struct Settings {
    label: Label,
    managed_by: String,
    objects: Vec<Value>,
}

impl Settings {
    fn parse(config: &str) -> Result<Self, String> {
        let config: Value =
            serde_json::from_str(config).map_err(|e| format!("config is not JSON: {e}"))?;
        let map = config
            .as_object()
            .ok_or("config needs label and objects (see the recipe's README)")?;
        if let Some(other) = map
            .keys()
            .find(|k| !["label", "managed_by", "objects"].contains(&k.as_str()))
        {
            return Err(format!(
                "config has no {other:?}: it takes label, managed_by and objects"
            ));
        }
        let label = map
            .get("label")
            .and_then(Value::as_str)
            .ok_or("config needs label: the namespaces' label, KEY=VALUE or KEY")?;
        let managed_by = match map.get("managed_by") {
            None => DEFAULT_MANAGER.to_string(),
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => return Err("config managed_by must be a label value".into()),
        };
        let objects = map
            .get("objects")
            .and_then(Value::as_array)
            .filter(|o| !o.is_empty())
            .ok_or("config needs objects: the objects to apply in each labelled namespace")?;
        for (i, object) in objects.iter().enumerate() {
            let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
            let (Some(_), Some(kind), Some(name)) =
                (text("/apiVersion"), text("/kind"), text("/metadata/name"))
            else {
                return Err(format!(
                    "config objects[{i}] needs apiVersion, kind and metadata.name"
                ));
            };
            if object.pointer("/metadata/namespace").is_some() {
                return Err(format!(
                    "config objects[{i}] ({kind} {name}) names a namespace: it is applied in each labelled namespace"
                ));
            }
        }
        Ok(Self {
            label: Label::parse(label)?,
            managed_by,
            objects: objects.clone(),
        })
    }

    /// The configured object of this kind and name, if it is one.
    fn object(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }
}

thread_local! {
    // Per thread: a component runs on one, and `cargo test` runs each test on its own.
    static SETTINGS: RefCell<Option<Settings>> = const { RefCell::new(None) };
}

/// A namespace as the cache holds it now.
enum Namespace {
    /// It carries the label and is not being deleted.
    Labelled,
    /// It does not carry the label.
    NotLabelled,
    /// It is being deleted, or gone.
    Going,
    /// The namespaces are not listed yet (the daemon just started).
    NotListed,
}

fn namespace(name: &str, label: &Label) -> Result<Namespace, String> {
    Ok(match cache::get("namespaces", None, name)? {
        Some(ns) if ns["metadata"]["deletionTimestamp"].is_string() => Namespace::Going,
        Some(ns) if label.on(&ns) => Namespace::Labelled,
        Some(_) => Namespace::NotLabelled,
        // Every cluster has namespaces: none at all means they are not listed yet.
        None if cache::list("namespaces", None)?.is_empty() => Namespace::NotListed,
        None => Namespace::Going,
    })
}

/// Why an object is applied, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// Its namespace carries the label.
    Namespace,
    /// Someone deleted it.
    Deleted,
    /// Someone changed it (or made one of that name).
    Changed,
}

struct NamespaceDefaults;

impl Handler for NamespaceDefaults {
    fn init(config: String) -> Result<(), String> {
        let settings = Settings::parse(&config)?;
        SETTINGS.with(|s| *s.borrow_mut() = Some(settings));
        Ok(())
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        let settings = SETTINGS
            .with(|s| s.borrow().clone())
            .ok_or("init did not run")?;
        let object: Value =
            serde_json::from_str(&event.object).map_err(|e| format!("object is not JSON: {e}"))?;
        let kind = object["kind"].as_str().ok_or("object has no kind")?;
        let meta = &object["metadata"];
        let name = meta["name"].as_str().ok_or("object has no name")?;
        if kind == "Namespace" {
            if event.kind == EventKind::Deleted {
                // It lost the label, or is gone: what it has stays as it is.
                return Ok(Outcome::Done);
            }
            return match namespace(name, &settings.label)? {
                Namespace::Labelled => {
                    for template in &settings.objects {
                        ensure(name, template, &settings, Cause::Namespace)?;
                    }
                    Ok(Outcome::Done)
                }
                Namespace::NotListed => Ok(Outcome::RequeueAfter(NOT_LISTED_MS)),
                Namespace::NotLabelled | Namespace::Going => Ok(Outcome::Done),
            };
        }
        // One of the objects it made, unless someone copied the label onto another.
        let Some(ns) = meta["namespace"].as_str() else {
            return Ok(Outcome::Done);
        };
        let Some(template) = settings.object(kind, name) else {
            return Ok(Outcome::Done);
        };
        let cause = if event.kind == EventKind::Deleted {
            Cause::Deleted
        } else {
            Cause::Changed
        };
        match namespace(ns, &settings.label)? {
            Namespace::Labelled => ensure(ns, template, &settings, cause)?,
            Namespace::NotListed => return Ok(Outcome::RequeueAfter(NOT_LISTED_MS)),
            Namespace::NotLabelled if cause == Cause::Deleted => log(
                Level::Info,
                &format!(
                    "{kind} {ns}/{name} was deleted; namespace {ns} does not carry {}, so it is not put back",
                    settings.label
                ),
            ),
            Namespace::NotLabelled | Namespace::Going => {}
        }
        Ok(Outcome::Done)
    }
}

export_handler!(NamespaceDefaults);

/// The configured object `template` as it belongs in namespace `ns`.
fn desired(ns: &str, template: &Value, settings: &Settings) -> Value {
    let mut object = template.clone();
    let meta = object["metadata"]
        .as_object_mut()
        .expect("checked by init: metadata is a map");
    meta.insert("namespace".into(), ns.into());
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    labels[MANAGED_BY] = settings.managed_by.clone().into();
    object
}

/// Applies `template` in `ns` unless the cache holds it already as the config has it.
fn ensure(ns: &str, template: &Value, settings: &Settings, cause: Cause) -> Result<(), String> {
    let desired = desired(ns, template, settings);
    let kind = desired["kind"].as_str().unwrap_or_default();
    let name = desired["metadata"]["name"].as_str().unwrap_or_default();
    if let Some(current) = cache::get(kind, Some(ns), name)?
        && contains(&current, &desired)
    {
        return Ok(());
    }
    kube::apply(kind, Some(ns), name, &desired)?;
    let done = match cause {
        Cause::Namespace => format!("applied {kind} {ns}/{name}"),
        Cause::Deleted => format!("restored {kind} {ns}/{name}: it was deleted"),
        Cause::Changed => format!("restored {kind} {ns}/{name}: it was changed"),
    };
    log(Level::Info, &done);
    let _ = metrics::counter("namespace_defaults_applied", 1.0, &[("kind", kind)]);
    Ok(())
}

/// Whether `have` holds every field of `want` with its value. Lists must match item by item;
/// a number and a string match when they read the same (the API server stores a quantity
/// given as `4` as `"4"`); an empty map wanted matches one left out.
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(have), Value::Object(want)) => {
            want.iter().all(|(key, want)| match have.get(key) {
                Some(have) => contains(have, want),
                None => want.as_object().is_some_and(Map::is_empty) || want.is_null(),
            })
        }
        (Value::Array(have), Value::Array(want)) => {
            have.len() == want.len() && have.iter().zip(want).all(|(h, w)| contains(h, w))
        }
        (Value::Number(n), Value::String(s)) | (Value::String(s), Value::Number(n)) => {
            n.to_string() == *s
        }
        _ => have == want,
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::{Value, json};
    use switchyard_sdk::testing::{Report, TestHost, Write, event, updated};
    use switchyard_sdk::{EventKind, Outcome};

    use super::*;

    fn config() -> Value {
        json!({
            "label": "switchyard.dev/defaults=true",
            "objects": [
                {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                 "metadata": {"name": "default-deny"},
                 "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
                {"apiVersion": "v1", "kind": "ResourceQuota",
                 "metadata": {"name": "default-resourcequota"},
                 "spec": {"hard": {"requests.cpu": "4", "limits.memory": "16Gi"}}},
            ],
        })
    }

    fn namespace(name: &str, labelled: bool) -> Value {
        let labels = if labelled {
            json!({"switchyard.dev/defaults": "true"})
        } else {
            json!({})
        };
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    }

    /// The NetworkPolicy as the plugin applies it in `ns`.
    fn policy(ns: &str) -> Value {
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "default-deny", "namespace": ns,
                         "labels": {"app.kubernetes.io/managed-by": "switchyard-namespace-defaults"}},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        })
    }

    fn host<const N: usize>(namespaces: [Value; N]) -> TestHost {
        namespaces
            .into_iter()
            .fold(TestHost::new().config(config()), |host, ns| {
                host.object("namespaces", ns)
            })
    }

    fn applied(report: &Report) -> Vec<(String, String, Value)> {
        report
            .writes
            .iter()
            .map(|w| match w {
                Write::Apply {
                    resource,
                    namespace,
                    name,
                    body,
                } => (
                    resource.clone(),
                    format!("{}/{name}", namespace.as_deref().unwrap_or_default()),
                    body.clone(),
                ),
                other => panic!("not an apply: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_labelled_namespace_gets_each_object_with_the_managed_by_label() {
        let team = namespace("team-a", true);
        let report =
            host([team.clone()]).handle::<NamespaceDefaults>(event(EventKind::Added, team));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let writes = applied(&report);
        assert_eq!(writes.len(), 2, "{writes:?}");
        assert_eq!(
            (writes[0].0.as_str(), writes[0].1.as_str(), &writes[0].2),
            ("NetworkPolicy", "team-a/default-deny", &policy("team-a"))
        );
        assert_eq!(
            (writes[1].0.as_str(), writes[1].1.as_str()),
            ("ResourceQuota", "team-a/default-resourcequota")
        );
        assert_eq!(
            report.lines(),
            [
                "applied NetworkPolicy team-a/default-deny",
                "applied ResourceQuota team-a/default-resourcequota"
            ]
        );
    }

    #[test]
    fn objects_already_as_configured_are_not_applied_again() {
        let team = namespace("team-a", true);
        let mut quota = json!({
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "default-resourcequota", "namespace": "team-a",
                         "labels": {"app.kubernetes.io/managed-by": "switchyard-namespace-defaults"}},
            // Stored by the API server with a field someone added.
            "spec": {"hard": {"requests.cpu": "4", "limits.memory": "16Gi", "pods": "10"}},
        });
        let report = host([team.clone()])
            .object("NetworkPolicy", policy("team-a"))
            .object("ResourceQuota", quota.clone())
            .handle::<NamespaceDefaults>(event(EventKind::Added, team.clone()));
        assert_eq!((report.outcome, report.writes), (Ok(Outcome::Done), vec![]));
        // Changed: put back.
        quota["spec"]["hard"]["requests.cpu"] = "100".into();
        let report = host([team])
            .object("ResourceQuota", quota.clone())
            .handle::<NamespaceDefaults>(updated(quota.clone(), quota));
        let writes = applied(&report);
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].2["spec"]["hard"]["requests.cpu"], "4");
        assert_eq!(
            report.lines(),
            ["restored ResourceQuota team-a/default-resourcequota: it was changed"]
        );
    }

    #[test]
    fn a_deleted_object_comes_back_only_while_its_namespace_carries_the_label() {
        let deleted = || event(EventKind::Deleted, policy("team-a"));
        let report = host([namespace("team-a", true)]).handle::<NamespaceDefaults>(deleted());
        assert_eq!(applied(&report).len(), 1);
        assert_eq!(
            report.lines(),
            ["restored NetworkPolicy team-a/default-deny: it was deleted"]
        );
        let report = host([namespace("team-a", false)]).handle::<NamespaceDefaults>(deleted());
        assert_eq!(
            (report.outcome, report.writes.len()),
            (Ok(Outcome::Done), 0)
        );
        // Being deleted, or gone (other namespaces are listed).
        let mut going = namespace("team-a", true);
        going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        let report = host([going]).handle::<NamespaceDefaults>(deleted());
        assert!(report.writes.is_empty());
        let report = host([namespace("other", true)]).handle::<NamespaceDefaults>(deleted());
        assert!(report.writes.is_empty());
    }

    #[test]
    fn before_the_namespaces_are_listed_an_event_waits() {
        let report =
            host([]).handle::<NamespaceDefaults>(event(EventKind::Deleted, policy("team-a")));
        assert_eq!(report.outcome, Ok(Outcome::RequeueAfter(NOT_LISTED_MS)));
        assert!(report.writes.is_empty());
    }

    #[test]
    fn unlabelled_namespaces_and_objects_not_in_the_config_are_left_alone() {
        let plain = namespace("plain", false);
        let report =
            host([plain.clone()]).handle::<NamespaceDefaults>(event(EventKind::Added, plain));
        assert!(report.writes.is_empty());
        let mut other = policy("team-a");
        other["metadata"]["name"] = "someone-elses".into();
        let report = host([namespace("team-a", true)])
            .handle::<NamespaceDefaults>(event(EventKind::Deleted, other));
        assert!(report.writes.is_empty());
    }

    #[test]
    fn values_compare_as_the_api_server_stores_them() {
        assert!(contains(&json!({"a": "4", "b": 1}), &json!({"a": 4})));
        assert!(contains(
            &json!({"spec": {}}),
            &json!({"spec": {"podSelector": {}}})
        ));
        assert!(!contains(
            &json!({"l": ["Ingress"]}),
            &json!({"l": ["Ingress", "Egress"]})
        ));
        assert!(!contains(&json!({"a": "5"}), &json!({"a": 4})));
    }

    #[test]
    fn a_config_without_what_it_needs_is_refused_at_init() {
        for (config, error) in [
            (json!({"objects": []}), "config needs label"),
            (json!({"label": "a=b"}), "config needs objects"),
            (
                json!({"label": "a=b", "objects": [{"kind": "X"}]}),
                "needs apiVersion, kind and metadata.name",
            ),
            (
                json!({"label": "a=b", "objects": [{"apiVersion": "v1", "kind": "X", "metadata": {"name": "x", "namespace": "y"}}]}),
                "names a namespace",
            ),
            (
                json!({"label": "a=b", "objects": [], "extra": 1}),
                "config has no \"extra\"",
            ),
            (
                json!({"label": "a,b", "objects": [{"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}}]}),
                "must be KEY=VALUE or KEY",
            ),
        ] {
            let report = TestHost::new()
                .config(config)
                .handle::<NamespaceDefaults>(event(EventKind::Added, namespace("a", true)));
            assert!(
                matches!(&report.outcome, Err(e) if e.contains(error)),
                "{error}: {:?}",
                report.outcome
            );
        }
    }
}
