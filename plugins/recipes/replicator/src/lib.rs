//! Copies Secrets and ConfigMaps into other namespaces and keeps the copies in sync, with
//! mittwald/kubernetes-replicator's push annotations on the source:
//!
//! - `replicator.v1.mittwald.de/replicate-to: "team-a,team-b,stage-*"`: namespaces by name,
//!   `*` matching any run of characters;
//! - `replicator.v1.mittwald.de/replicate-to-matching: "env=prod,tier=web"`: namespaces whose
//!   labels have all these values.
//!
//! A copy carries the label `replicator.switchyard.dev/source-uid` (the source's uid, which the
//! `replicas` index finds copies by) and the annotation `replicator.switchyard.dev/replicated-from`
//! (`NAMESPACE/NAME`). A copy edited or deleted by hand is restored; one whose source is gone,
//! or no longer names its namespace, is deleted; a namespace created (or relabelled) later gets
//! its copies. An object of the same name that is not a copy is never overwritten: the source
//! gets a Warning event instead.

use serde_json::{Value, json};
use switchyard_sdk::kube::EventType;
use switchyard_sdk::{
    Event, EventKind, Handler, Level, Outcome, cache, export_handler, kube, log, metrics,
};

const TO: &str = "replicator.v1.mittwald.de/replicate-to";
const TO_MATCHING: &str = "replicator.v1.mittwald.de/replicate-to-matching";
const SOURCE_UID: &str = "replicator.switchyard.dev/source-uid";
const FROM: &str = "replicator.switchyard.dev/replicated-from";
/// The index (on both informers) of copies by their source's uid.
const REPLICAS: &str = "replicas";

struct Replicator;

impl Handler for Replicator {
    fn handle(event: Event) -> Result<Outcome, String> {
        let object: Value = serde_json::from_str(&event.object).map_err(|e| e.to_string())?;
        let deleted = event.kind == EventKind::Deleted;
        match object["kind"].as_str() {
            Some("Namespace") if !deleted => namespace_seen(&object)?,
            Some("Namespace") => {}
            Some("Secret") => object_changed("secrets", &object, deleted)?,
            Some("ConfigMap") => object_changed("configmaps", &object, deleted)?,
            other => {
                return Err(switchyard_sdk::permanent(&format!(
                    "unexpected kind {other:?}"
                )));
            }
        }
        Ok(Outcome::Done)
    }
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][key].as_str()
}

/// A new or relabelled namespace gets the copies of every source that targets it.
fn namespace_seen(namespace: &Value) -> Result<(), String> {
    for resource in ["secrets", "configmaps"] {
        for source in cache::list(resource, None)? {
            if is_source(&source) && targets(&source, namespace) {
                copy(resource, &source, text(namespace, "/metadata/name"))?;
            }
        }
    }
    Ok(())
}

fn is_source(object: &Value) -> bool {
    annotation(object, TO).is_some() || annotation(object, TO_MATCHING).is_some()
}

fn object_changed(resource: &str, object: &Value, deleted: bool) -> Result<(), String> {
    match annotation(object, FROM) {
        Some(from) => copy_changed(resource, object, from, deleted),
        None => source_changed(resource, object, deleted),
    }
}

/// Copies the source where it points now, and deletes its copies everywhere else (all of
/// them once it is gone or points nowhere).
fn source_changed(resource: &str, source: &Value, deleted: bool) -> Result<(), String> {
    let mut wanted = Vec::new();
    if !deleted && is_source(source) {
        for namespace in cache::list("namespaces", None)? {
            let name = text(&namespace, "/metadata/name");
            if name != text(source, "/metadata/namespace") && targets(source, &namespace) {
                copy(resource, source, name)?;
                wanted.push(name.to_string());
            }
        }
    }
    for replica in cache::list_by_index(resource, REPLICAS, text(source, "/metadata/uid"))? {
        let namespace = text(&replica, "/metadata/namespace");
        if !wanted.iter().any(|w| w == namespace) {
            delete_copy(resource, namespace, text(&replica, "/metadata/name"))?;
        }
    }
    Ok(())
}

/// Restores a copy changed or deleted by hand, or deletes it when its source no longer wants it.
fn copy_changed(resource: &str, replica: &Value, from: &str, deleted: bool) -> Result<(), String> {
    let namespace = text(replica, "/metadata/namespace");
    let (source_ns, source_name) = from.split_once('/').unwrap_or_default();
    let source = cache::get(resource, Some(source_ns), source_name)?;
    let target = cache::get("namespaces", None, namespace)?;
    match (source, target) {
        (Some(source), Some(target)) if is_source(&source) && targets(&source, &target) => {
            copy(resource, &source, namespace)
        }
        _ if deleted => Ok(()),
        _ => delete_copy(resource, namespace, text(replica, "/metadata/name")),
    }
}

/// Whether the source names this namespace, by name or pattern or by its labels (a
/// namespace being deleted takes no copies).
fn targets(source: &Value, namespace: &Value) -> bool {
    if !namespace["metadata"]["deletionTimestamp"].is_null() {
        return false;
    }
    let name = text(namespace, "/metadata/name");
    let by_name =
        annotation(source, TO).is_some_and(|list| list.split(',').any(|p| glob(p.trim(), name)));
    let by_labels = annotation(source, TO_MATCHING).is_some_and(|selector| {
        selector.split(',').all(|term| match term.split_once('=') {
            Some((k, v)) => namespace["metadata"]["labels"][k.trim()] == v.trim(),
            None => !namespace["metadata"]["labels"][term.trim()].is_null(),
        })
    });
    by_name || by_labels
}

/// `pattern` with `*` for any run of characters, matched against the whole of `name`.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, rest)) => {
            let Some(tail) = name.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len()).any(|i| tail.is_char_boundary(i) && glob(rest, &tail[i..]))
        }
    }
}

/// Writes the source's content into `namespace` by server-side apply, unless the copy there
/// is up to date; refuses (with a Warning event on the source) to overwrite an object that is
/// not a copy of it.
fn copy(resource: &str, source: &Value, namespace: &str) -> Result<(), String> {
    let name = text(source, "/metadata/name");
    let from = format!("{}/{name}", text(source, "/metadata/namespace"));
    if let Some(there) = cache::get(resource, Some(namespace), name)? {
        if annotation(&there, FROM) != Some(from.as_str()) {
            let message = format!(
                "not copied to {namespace}: a {} of that name is there and is not a copy",
                source["kind"].as_str().unwrap_or_default()
            );
            return kube::event(source, EventType::Warning, "ReplicationRefused", &message);
        }
        let same = ["data", "binaryData", "type"]
            .iter()
            .all(|f| there[f] == source[f]);
        if same && there["metadata"]["labels"][SOURCE_UID] == source["metadata"]["uid"] {
            return Ok(());
        }
    }
    let mut body = json!({
        "apiVersion": "v1",
        "kind": source["kind"],
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {SOURCE_UID: source["metadata"]["uid"]},
            "annotations": {FROM: from},
        },
    });
    for field in ["data", "binaryData", "type"] {
        if !source[field].is_null() {
            body[field] = source[field].clone();
        }
    }
    kube::apply(resource, Some(namespace), name, &body)?;
    log(
        Level::Info,
        &format!(
            "replicated {resource} {}/{name} to {namespace}",
            text(source, "/metadata/namespace")
        ),
    );
    let _ = metrics::counter("replicator_copies", 1.0, &[("resource", resource)]);
    Ok(())
}

/// Deletes the copy `namespace/name`, logged and counted (`replicator_deletions`).
fn delete_copy(resource: &str, namespace: &str, name: &str) -> Result<(), String> {
    kube::delete(resource, Some(namespace), name)?;
    log(
        Level::Info,
        &format!("deleted the copy {resource} {namespace}/{name}: its source no longer wants it"),
    );
    let _ = metrics::counter("replicator_deletions", 1.0, &[("resource", resource)]);
    Ok(())
}

export_handler!(Replicator);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::{Value, json};
    use switchyard_sdk::testing::{TestHost, Write, event};
    use switchyard_sdk::{EventKind, Outcome};

    use super::*;

    fn namespace(name: &str, labels: Value) -> Value {
        json!({"kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    }

    fn source() -> Value {
        json!({"kind": "Secret", "type": "Opaque", "data": {"token": "b25l"},
               "metadata": {"name": "registry", "namespace": "default", "uid": "u-1",
                            "annotations": {TO: "team-a, stage-*", TO_MATCHING: "env=prod"}}})
    }

    fn host() -> TestHost {
        let by_uid = |o: &Value| {
            o["metadata"]["labels"][SOURCE_UID]
                .as_str()
                .map(String::from)
                .into_iter()
                .collect()
        };
        let mut host = TestHost::new().index(REPLICAS, by_uid);
        for (name, labels) in [
            ("default", json!({})),
            ("team-a", json!({})),
            ("team-b", json!({})),
            ("stage-1", json!({})),
            ("p", json!({"env": "prod"})),
        ] {
            host = host.object("namespaces", namespace(name, labels));
        }
        host
    }

    #[test]
    fn a_source_is_applied_where_its_names_globs_and_labels_point_and_nowhere_else() {
        let report = host().handle::<Replicator>(event(EventKind::Added, source()));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let mut applied: Vec<(String, Value)> = (report.writes.iter())
            .map(|w| match w {
                Write::Apply {
                    namespace, body, ..
                } => (namespace.clone().unwrap(), body.clone()),
                other => panic!("only applies: {other:?}"),
            })
            .collect();
        applied.sort_by(|a, b| a.0.cmp(&b.0));
        let namespaces: Vec<&str> = applied.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(namespaces, ["p", "stage-1", "team-a"]);
        let body = &applied[0].1;
        assert_eq!(body["data"], json!({"token": "b25l"}));
        assert_eq!(body["metadata"]["labels"][SOURCE_UID], "u-1");
        assert_eq!(body["metadata"]["annotations"][FROM], "default/registry");
        assert!(
            body["metadata"]["annotations"][TO].is_null(),
            "a copy is no source"
        );
        assert!(
            report
                .lines()
                .contains(&"replicated secrets default/registry to team-a"),
            "{:?}",
            report.logs
        );
        let copies = report
            .metrics
            .iter()
            .filter(|m| m.name == "replicator_copies");
        assert_eq!(copies.count(), 3);
    }

    #[test]
    fn an_object_that_is_not_a_copy_is_left_alone_and_a_gone_source_takes_its_copies() {
        let mine = json!({"kind": "Secret", "metadata": {"name": "registry", "namespace": "team-a"}, "data": {"token": "bWluZQ=="}});
        let report = host()
            .object("secrets", mine)
            .handle::<Replicator>(event(EventKind::Added, source()));
        assert!(report.writes.iter().any(|w| matches!(w, Write::Event { reason, event_type, .. } if reason == "ReplicationRefused" && event_type == "Warning")));
        assert!(!report.writes.iter().any(|w| matches!(w, Write::Apply { namespace, .. } if namespace.as_deref() == Some("team-a"))));

        let copy = json!({"kind": "Secret", "metadata": {"name": "registry", "namespace": "stage-1",
                          "labels": {SOURCE_UID: "u-1"}, "annotations": {FROM: "default/registry"}}});
        let report = host()
            .object("secrets", copy)
            .handle::<Replicator>(event(EventKind::Deleted, source()));
        let deleted = Write::Delete {
            resource: "secrets".into(),
            namespace: Some("stage-1".into()),
            name: "registry".into(),
        };
        assert_eq!(report.writes, [deleted]);
        assert!(
            report.lines().contains(
                &"deleted the copy secrets stage-1/registry: its source no longer wants it"
            ),
            "{:?}",
            report.logs
        );
    }

    #[test]
    fn globs_match_whole_names() {
        assert!(glob("stage-*", "stage-1") && glob("*-prod", "web-prod") && glob("a*b*c", "aXbYc"));
        assert!(!glob("stage-*", "prestage-1") && !glob("team-a", "team-ab") && !glob("a*b", "ba"));
    }
}
