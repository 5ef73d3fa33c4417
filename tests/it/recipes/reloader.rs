//! The reloader recipe, played through stakater/Reloader's own scenario: workloads annotated
//! `reloader.stakater.com/auto: "true"` (or naming their ConfigMaps and Secrets in
//! `configmap.reloader.stakater.com/reload`) get a rolling restart when one they follow
//! changes its data; the others, a same-named ConfigMap in another namespace, and a change
//! that leaves the data alone restart nothing. Objects are written and read with kubectl.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::fragment;
use crate::support::sim::{Kubectl, blocking};
use crate::support::{TestDaemon, eventually};

const WAIT: Duration = Duration::from_secs(30);
const STAMP: &str = "reloader.switchyard.dev/last-reloaded-from";

/// A workload of `kind` named `name` in `namespace` with these annotations, whose one
/// container mounts ConfigMap `volume` (if any) and imports `env_from` (a ConfigMap or a
/// Secret: `configMapRef` or `secretRef`).
fn workload(
    kind: &str,
    namespace: &str,
    name: &str,
    annotations: &str,
    volume: Option<&str>,
    env_from: &str,
) -> String {
    let volumes = match volume {
        Some(cm) => format!("      volumes: [{{name: config, configMap: {{name: {cm}}}}}]\n"),
        None => String::new(),
    };
    format!(
        "---
apiVersion: apps/v1
kind: {kind}
metadata:
  name: {name}
  namespace: {namespace}
  annotations: {{{annotations}}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
        - name: main
          image: example.com/app:1
          envFrom: [{env_from}]
{volumes}"
    )
}

const AUTO: &str = "reloader.stakater.com/auto: \"true\"";

fn manifests() -> String {
    let mut all = String::from(
        "apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config, namespace: default}
data: {mode: blue}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config, namespace: other}
data: {mode: blue}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated, namespace: default}
data: {x: '1'}
---
apiVersion: v1
kind: Secret
metadata: {name: app-secret, namespace: default}
stringData: {token: one}
",
    );
    let secret = "{secretRef: {name: app-secret}}";
    for w in [
        // Follows everything it references: the volume and the Secret.
        workload(
            "Deployment",
            "default",
            "web",
            AUTO,
            Some("app-config"),
            secret,
        ),
        workload(
            "StatefulSet",
            "default",
            "db",
            AUTO,
            None,
            "{configMapRef: {name: app-config}}",
        ),
        // Names its ConfigMaps, references none.
        workload(
            "DaemonSet",
            "default",
            "agent",
            "configmap.reloader.stakater.com/reload: \"unrelated, app-config\"",
            None,
            "",
        ),
        // References app-config, follows nothing.
        workload(
            "Deployment",
            "default",
            "plain",
            "",
            Some("app-config"),
            secret,
        ),
        // Follows only what it references, which is not app-config.
        workload(
            "Deployment",
            "default",
            "bystander",
            AUTO,
            Some("unrelated"),
            "",
        ),
        // Follows its own namespace's app-config.
        workload("Deployment", "other", "web", AUTO, Some("app-config"), ""),
    ] {
        all.push_str(&w);
    }
    // References in an init container's env and in a projected volume.
    all.push_str(
        "---
apiVersion: apps/v1
kind: Deployment
metadata: {name: init, namespace: default, annotations: {reloader.stakater.com/auto: 'true'}}
spec:
  selector: {matchLabels: {app: init}}
  template:
    metadata: {labels: {app: init}}
    spec:
      initContainers:
        - name: setup
          image: example.com/setup:1
          env: [{name: MODE, valueFrom: {configMapKeyRef: {name: app-config, key: mode}}}]
      containers: [{name: main, image: example.com/app:1}]
      volumes: [{name: token, projected: {sources: [{secret: {name: app-secret}}]}}]
",
    );
    all
}

/// Each workload's stamp (`kind/namespace/name` → the annotation, or "" without one).
fn stamps(kubectl: &Kubectl) -> Vec<(String, String)> {
    let out = kubectl.run(&[
        "get",
        "deployments,statefulsets,daemonsets",
        "-A",
        "-o",
        "json",
    ]);
    assert!(out.ok, "{}", out.stderr);
    let list: Value = serde_json::from_str(&out.stdout).unwrap();
    let mut found: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let m = &w["metadata"];
            let stamp = w["spec"]["template"]["metadata"]["annotations"][STAMP].as_str();
            (
                format!(
                    "{}/{}/{}",
                    w["kind"].as_str().unwrap(),
                    m["namespace"].as_str().unwrap(),
                    m["name"].as_str().unwrap()
                ),
                stamp.unwrap_or_default().to_string(),
            )
        })
        .collect();
    found.sort();
    found
}

/// Waits until the workloads' stamps, without their hashes, are `expected` (key, `KIND/NAME`).
async fn wait_for_stamps(
    kubectl: &Arc<Kubectl>,
    expected: &[(&str, &str)],
) -> Vec<(String, String)> {
    let mut expected: Vec<(String, String)> = expected
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    expected.sort();
    eventually(&format!("stamps {expected:?}"), WAIT, async || {
        let kubectl = kubectl.clone();
        let found = blocking(move || stamps(&kubectl)).await;
        let sources: Vec<(String, String)> = (found.iter())
            .map(|(k, v)| (k.clone(), v.split('@').next().unwrap().to_string()))
            .collect();
        (sources == expected).then_some(found)
    })
    .await
}

/// The handler's processed count, from `/status`.
async fn processed(t: &TestDaemon) -> u64 {
    let status = t.status_json().await;
    status["handlers"][0]["processed"].as_u64().unwrap()
}

/// Runs kubectl with `args`, asserting it succeeds.
async fn run(kubectl: &Arc<Kubectl>, args: &'static [&'static str]) {
    let k = kubectl.clone();
    let out = blocking(move || k.run(args)).await;
    assert!(out.ok, "kubectl {args:?}: {}", out.stderr);
}

/// Each workload's resourceVersion, by `kind/namespace/name`.
async fn versions(kubectl: &Arc<Kubectl>) -> Vec<(String, String)> {
    let k = kubectl.clone();
    let out = blocking(move || {
        k.run(&["get", "deployments,statefulsets,daemonsets", "-A", "-o",
                "jsonpath={range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name} {.metadata.resourceVersion}{\"\\n\"}{end}"])
    })
    .await;
    assert!(out.ok, "{}", out.stderr);
    let mut found: Vec<(String, String)> = (out.stdout.lines())
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    found.sort();
    found
}

const NONE: [(&str, &str); 7] = [
    ("DaemonSet/default/agent", ""),
    ("Deployment/default/bystander", ""),
    ("Deployment/default/init", ""),
    ("Deployment/default/plain", ""),
    ("Deployment/default/web", ""),
    ("Deployment/other/web", ""),
    ("StatefulSet/default/db", ""),
];

const AFTER_CONFIGMAP: [(&str, &str); 7] = [
    ("DaemonSet/default/agent", "configmap/app-config"),
    ("Deployment/default/bystander", ""),
    ("Deployment/default/init", "configmap/app-config"),
    ("Deployment/default/plain", ""),
    ("Deployment/default/web", "configmap/app-config"),
    ("Deployment/other/web", ""),
    ("StatefulSet/default/db", "configmap/app-config"),
];

/// The daemon with the recipe, the manifests applied and cached, nothing restarted.
async fn started() -> (TestDaemon, Arc<Kubectl>) {
    let t = TestDaemon::builder(&fragment("reloader"))
        .plugin_file("reloader", "reloader")
        .start()
        .await;
    let kubectl = Arc::new(Kubectl::new(t.sim()));
    let k = kubectl.clone();
    let out = blocking(move || k.run_with_input(&["apply", "-f", "-"], &manifests())).await;
    assert!(out.ok, "{}", out.stderr);
    // The caches the plugin reads hold the workloads before anything changes.
    eventually("the workloads cached", WAIT, async || {
        let status = t.status_json().await;
        let objects = |resource: &str| {
            (status["informers"].as_array().unwrap().iter())
                .find(|i| i["resource"] == resource)
                .map(|i| {
                    // Listed by a streaming list, as /status says.
                    assert_eq!(i["list_mode"], "streaming", "{i}");
                    (i["objects"].as_u64().unwrap(), i["synced"] == true)
                })
        };
        (objects("apps/v1/deployments") == Some((5, true))
            && objects("apps/v1/statefulsets") == Some((1, true))
            && objects("apps/v1/daemonsets") == Some((1, true)))
        .then_some(())
    })
    .await;
    // Creating them restarts nothing.
    assert_eq!(wait_for_stamps(&kubectl, &NONE).await.len(), 7);
    (t, kubectl)
}

#[tokio::test]
async fn a_changed_configmap_or_secret_restarts_exactly_the_workloads_that_follow_it() {
    let (t, kubectl) = started().await;
    run(
        &kubectl,
        &[
            "patch",
            "configmap",
            "app-config",
            "-p",
            r#"{"data":{"mode":"green"}}"#,
        ],
    )
    .await;
    let first = wait_for_stamps(&kubectl, &AFTER_CONFIGMAP).await;
    // Regression: the restarts' merge patches named no field manager (`managedFields` said
    // `unknown`); they name the handler's.
    let restarts: Vec<_> = (t.sim().writes().all().into_iter())
        .filter(|w| w.verb == "patch" && !["configmaps", "secrets"].contains(&w.resource.as_str()))
        .collect();
    assert!(!restarts.is_empty());
    for write in &restarts {
        assert_eq!(
            write.field_manager.as_deref(),
            Some("switchyard-reloader"),
            "{write:?}"
        );
    }

    run(
        &kubectl,
        &[
            "patch",
            "secret",
            "app-secret",
            "-p",
            r#"{"stringData":{"token":"two"}}"#,
        ],
    )
    .await;
    let mut after_secret = AFTER_CONFIGMAP;
    after_secret[2].1 = "secret/app-secret";
    after_secret[4].1 = "secret/app-secret";
    wait_for_stamps(&kubectl, &after_secret).await;

    // A change that leaves the data alone writes no workload.
    let written = versions(&kubectl).await;
    let before = processed(&t).await;
    run(
        &kubectl,
        &["label", "configmap", "app-config", "touched=yes"],
    )
    .await;
    eventually("the label change handled", WAIT, async || {
        (processed(&t).await > before).then_some(())
    })
    .await;
    assert_eq!(versions(&kubectl).await, written);

    // The same data again gives the same stamp.
    run(
        &kubectl,
        &[
            "patch",
            "configmap",
            "app-config",
            "-p",
            r#"{"data":{"mode":"blue"}}"#,
        ],
    )
    .await;
    wait_for_stamps(&kubectl, &AFTER_CONFIGMAP).await;
    run(
        &kubectl,
        &[
            "patch",
            "configmap",
            "app-config",
            "-p",
            r#"{"data":{"mode":"green"}}"#,
        ],
    )
    .await;
    eventually("green's stamp again", WAIT, async || {
        let k = kubectl.clone();
        let now = blocking(move || stamps(&k)).await;
        (now == first).then_some(())
    })
    .await;
    t.stop().await;
}

#[test]
fn rbac_reads_the_sources_and_patches_only_the_workloads() {
    assert_eq!(
        super::granted("reloader"),
        [
            "ClusterRole apps daemonsets get,list,patch,watch",
            "ClusterRole apps deployments get,list,patch,watch",
            "ClusterRole apps statefulsets get,list,patch,watch",
            "ClusterRole core configmaps get,list,watch",
            "ClusterRole core secrets get,list,watch",
        ]
    );
}
