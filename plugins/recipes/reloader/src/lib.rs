//! Rolling restarts for workloads whose ConfigMaps or Secrets changed, with stakater/Reloader's
//! annotations. A Deployment, StatefulSet or DaemonSet annotated
//!
//! - `reloader.stakater.com/auto: "true"` follows every ConfigMap and Secret its pod template
//!   mounts or imports (`configmap.reloader.stakater.com/auto` and
//!   `secret.reloader.stakater.com/auto` follow only one of the two kinds);
//! - `configmap.reloader.stakater.com/reload: "a,b"` or
//!   `secret.reloader.stakater.com/reload: "s"` follows the ones named.
//!
//! When a followed object's `data` or `binaryData` changes, the workload's pod template gets
//! the annotation `reloader.switchyard.dev/last-reloaded-from: KIND/NAME@HASH` (a hash of the
//! new content) by merge patch, and its controller rolls the pods. A patch that would write
//! the value already there is skipped, so a retried event restarts nothing twice.

use serde_json::{Value, json};
use switchyard_sdk::{
    Event, EventKind, Handler, Level, Outcome, cache, export_handler, kube, log, metrics,
};

/// The workload resources followed (each an informer under the handler's `reads:`).
const WORKLOADS: [&str; 3] = ["deployments", "statefulsets", "daemonsets"];
/// The pod template annotation written.
const STAMP: &str = "reloader.switchyard.dev/last-reloaded-from";

struct Reloader;

/// What changed: `configmap` or `secret`, and the object.
struct Source<'a> {
    kind: &'static str,
    namespace: &'a str,
    name: &'a str,
}

impl Handler for Reloader {
    fn handle(event: Event) -> Result<Outcome, String> {
        let new: Value = serde_json::from_str(&event.object).map_err(|e| e.to_string())?;
        let old: Option<Value> = event
            .old_object
            .as_deref()
            .and_then(|o| serde_json::from_str(o).ok());
        // Reloader acts on updates only: an object first seen restarts nothing.
        if event.kind != EventKind::Updated
            || old.as_ref().is_some_and(|o| content(o) == content(&new))
        {
            return Ok(Outcome::Done);
        }
        let kind = match new["kind"].as_str() {
            Some("ConfigMap") => "configmap",
            Some("Secret") => "secret",
            other => {
                return Err(switchyard_sdk::permanent(&format!(
                    "not a ConfigMap or Secret: {other:?}"
                )));
            }
        };
        let source = Source {
            kind,
            namespace: new["metadata"]["namespace"].as_str().unwrap_or_default(),
            name: new["metadata"]["name"].as_str().unwrap_or_default(),
        };
        let stamp = format!(
            "{kind}/{}@{:016x}",
            source.name,
            fnv1a(content(&new).to_string().as_bytes())
        );
        for resource in WORKLOADS {
            for workload in followers(resource, &source)? {
                restart(resource, &workload, &stamp)?;
            }
        }
        Ok(Outcome::Done)
    }
}

/// What a change to the object is judged by.
fn content(object: &Value) -> Value {
    json!([object["data"], object["binaryData"]])
}

/// The workloads of `resource` in the source's namespace that follow it.
fn followers(resource: &str, source: &Source) -> Result<Vec<Value>, String> {
    let index = format!("{}s", source.kind);
    let mut found: Vec<Value> = cache::list_by_index(resource, &index, source.name)?
        .into_iter()
        .filter(|w| w["metadata"]["namespace"] == source.namespace && auto(w, source.kind))
        .collect();
    let named = cache::list(resource, Some(source.namespace))?
        .into_iter()
        .filter(|w| names(w, source.kind, source.name) && !found.contains(w));
    found.extend(named.collect::<Vec<_>>());
    Ok(found)
}

fn annotation<'a>(workload: &'a Value, key: &str) -> Option<&'a str> {
    workload["metadata"]["annotations"][key].as_str()
}

/// Whether the workload follows everything of `kind` its pod template references.
fn auto(workload: &Value, kind: &str) -> bool {
    let on = |key: &str| annotation(workload, key) == Some("true");
    on("reloader.stakater.com/auto") || on(&format!("{kind}.reloader.stakater.com/auto"))
}

/// Whether the workload names `name` in its `KIND.reloader.stakater.com/reload` list.
fn names(workload: &Value, kind: &str, name: &str) -> bool {
    annotation(workload, &format!("{kind}.reloader.stakater.com/reload"))
        .is_some_and(|list| list.split(',').any(|n| n.trim() == name))
}

/// Stamps the workload's pod template, unless it carries the stamp already; a restart is
/// logged (which workload, for which change) and counted (`reloader_restarts`).
fn restart(resource: &str, workload: &Value, stamp: &str) -> Result<(), String> {
    if workload["spec"]["template"]["metadata"]["annotations"][STAMP] == stamp {
        return Ok(());
    }
    let meta = &workload["metadata"];
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {STAMP: stamp}}}}});
    kube::merge_patch(
        resource,
        meta["namespace"].as_str(),
        meta["name"].as_str().unwrap_or_default(),
        &patch,
    )?;
    log(
        Level::Info,
        &format!(
            "restarted {resource} {}/{}: {stamp} changed",
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default()
        ),
    );
    let _ = metrics::counter("reloader_restarts", 1.0, &[("resource", resource)]);
    Ok(())
}

/// FNV-1a, 64 bits: a short, stable digest of the content (not a secret's protection).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

export_handler!(Reloader);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::{Value, json};
    use switchyard_sdk::testing::{TestHost, Write, updated};

    use super::*;

    fn configmap(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "app-config", "namespace": "default"}, "data": data})
    }

    fn deployment(name: &str, namespace: &str, annotations: Value, mounts: &str) -> Value {
        json!({"kind": "Deployment",
               "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
               "spec": {"template": {"spec": {"volumes": [{"configMap": {"name": mounts}}]}}}})
    }

    /// A host caching `deployments`, with the `configmaps` index over their volumes.
    fn host(deployments: Vec<Value>) -> TestHost {
        let volumes = |d: &Value| -> Vec<String> {
            (d["spec"]["template"]["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten())
            .filter_map(|v| v["configMap"]["name"].as_str().map(String::from))
            .collect()
        };
        let mut host = TestHost::new()
            .index("configmaps", volumes)
            .index("secrets", |_| Vec::new());
        for d in deployments {
            host = host.object("deployments", d);
        }
        host
    }

    fn patched(writes: &[Write]) -> Vec<(String, String)> {
        (writes.iter())
            .map(|w| match w {
                Write::MergePatch { name, patch, .. } => {
                    let stamp = &patch["spec"]["template"]["metadata"]["annotations"][STAMP];
                    (
                        name.clone(),
                        stamp
                            .as_str()
                            .unwrap()
                            .split('@')
                            .next()
                            .unwrap()
                            .to_string(),
                    )
                }
                other => panic!("only merge patches: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_data_change_stamps_the_workloads_that_follow_the_configmap_and_no_others() {
        let auto = json!({"reloader.stakater.com/auto": "true"});
        let host = host(vec![
            deployment("web", "default", auto.clone(), "app-config"),
            deployment(
                "named",
                "default",
                json!({"configmap.reloader.stakater.com/reload": "x, app-config"}),
                "other",
            ),
            deployment("plain", "default", json!({}), "app-config"),
            deployment("elsewhere", "other", auto.clone(), "app-config"),
            deployment(
                "secrets-only",
                "default",
                json!({"secret.reloader.stakater.com/auto": "true"}),
                "app-config",
            ),
        ]);
        let report = host.handle::<Reloader>(updated(
            configmap(json!({"k": "1"})),
            configmap(json!({"k": "2"})),
        ));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let mut stamped = patched(&report.writes);
        stamped.sort();
        let expected = [
            ("named", "configmap/app-config"),
            ("web", "configmap/app-config"),
        ];
        assert_eq!(
            stamped,
            expected.map(|(a, b)| (a.to_string(), b.to_string()))
        );
        let restarts: Vec<&str> = report
            .lines()
            .into_iter()
            .filter(|l| l.starts_with("restarted deployments default/"))
            .collect();
        assert_eq!(restarts.len(), 2, "{:?}", report.logs);
        let counted: f64 = report
            .metrics
            .iter()
            .filter(|m| m.name == "reloader_restarts")
            .map(|m| m.value)
            .sum();
        assert_eq!(counted, 2.0);
    }

    #[test]
    fn unchanged_data_and_a_stamp_already_there_write_nothing() {
        let mut web = deployment(
            "web",
            "default",
            json!({"reloader.stakater.com/auto": "true"}),
            "app-config",
        );
        let new = configmap(json!({"k": "2"}));
        let stamp = format!(
            "configmap/app-config@{:016x}",
            fnv1a(content(&new).to_string().as_bytes())
        );
        let host = host(vec![web.clone()]);
        let mut relabelled = new.clone();
        relabelled["metadata"]["labels"] = json!({"touched": "yes"});
        assert!(
            host.handle::<Reloader>(updated(new.clone(), relabelled))
                .writes
                .is_empty()
        );
        web["spec"]["template"]["metadata"] = json!({"annotations": {STAMP: stamp}});
        let report =
            self::host(vec![web]).handle::<Reloader>(updated(configmap(json!({"k": "1"})), new));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        assert!(report.writes.is_empty(), "{:?}", report.writes);
    }
}
