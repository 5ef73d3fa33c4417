//! The replicator recipe, played through mittwald/kubernetes-replicator's push-based scenario:
//! a Secret annotated `replicate-to` (names and patterns) and a ConfigMap annotated
//! `replicate-to-matching` (namespace labels) are copied, kept in sync, restored when a copy is
//! edited or deleted by hand, copied into namespaces that appear later, withdrawn from
//! namespaces no longer named, and removed when the source goes. An object that is not a copy
//! is never overwritten. Everything is written and read with kubectl.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::fragment;
use crate::support::sim::{Kubectl, blocking};
use crate::support::{TestDaemon, eventually};

const WAIT: Duration = Duration::from_secs(30);

/// Runs kubectl with `args` (and `input` on stdin if given), asserting it succeeds.
async fn kubectl(k: &Arc<Kubectl>, args: &[&str], input: Option<&str>) -> String {
    let (k, args, input) = (
        k.clone(),
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        input.map(String::from),
    );
    let out = blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match input {
            Some(input) => k.run_with_input(&args, &input),
            None => k.run(&args),
        }
    })
    .await;
    assert!(out.ok, "kubectl: {}", out.stderr);
    out.stdout
}

/// Where copies of `kind` named `name` are, by namespace, with one data value each
/// (`key`, base64 for Secrets).
async fn copies(k: &Arc<Kubectl>, kind: &str, name: &str, key: &str) -> Vec<(String, String)> {
    let out = kubectl(k, &["get", kind, "-A", "-o", "json"], None).await;
    let list: Value = serde_json::from_str(&out).unwrap();
    let mut found: Vec<(String, String)> = (list["items"].as_array().unwrap().iter())
        .filter(|o| o["metadata"]["name"] == name && o["metadata"]["namespace"] != "default")
        .map(|o| {
            (
                o["metadata"]["namespace"].as_str().unwrap().to_string(),
                o["data"][key].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    found.sort();
    found
}

async fn wait_for(k: &Arc<Kubectl>, kind: &str, name: &str, key: &str, expected: &[(&str, &str)]) {
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    eventually(
        &format!("{kind} {name} copies {expected:?}"),
        WAIT,
        async || (copies(k, kind, name, key).await == expected).then_some(()),
    )
    .await;
}

const SETUP: &str = "
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: v1
kind: Namespace
metadata: {name: stage-1}
---
apiVersion: v1
kind: Namespace
metadata: {name: prod-1, labels: {env: prod}}
---
apiVersion: v1
kind: Namespace
metadata: {name: owned}
---
apiVersion: v1
kind: Secret
metadata: {name: registry, namespace: owned}
data: {token: bWluZQ==}
---
apiVersion: v1
kind: Secret
metadata:
  name: registry
  namespace: default
  annotations: {replicator.v1.mittwald.de/replicate-to: 'team-a, stage-*, owned'}
data: {token: b25l}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: default
  annotations: {replicator.v1.mittwald.de/replicate-to-matching: env=prod}
data: {level: info}
";

#[tokio::test]
async fn sources_are_copied_kept_in_sync_restored_and_withdrawn() {
    let t = TestDaemon::builder(&fragment("replicator"))
        .plugin_file("replicator", "replicator")
        .start()
        .await;
    let k = Arc::new(Kubectl::new(t.sim()));
    kubectl(&k, &["apply", "-f", "-"], Some(SETUP)).await;
    let one = "b25l"; // "one" in base64

    // team-b is not named; owned's Secret is not a copy and stays as it is.
    wait_for(
        &k,
        "secrets",
        "registry",
        "token",
        &[("owned", "bWluZQ=="), ("stage-1", one), ("team-a", one)],
    )
    .await;
    wait_for(&k, "configmaps", "settings", "level", &[("prod-1", "info")]).await;
    eventually("the refusal recorded on the source", WAIT, async || {
        let out = kubectl(&k, &["get", "events", "-n", "default", "-o", "json"], None).await;
        let events: Value = serde_json::from_str(&out).unwrap();
        (events["items"].as_array().unwrap().iter())
            .find(|e| {
                e["reason"] == "ReplicationRefused"
                    && e["type"] == "Warning"
                    && e["involvedObject"]["name"] == "registry"
            })
            .map(|e| {
                assert_eq!(
                    e["message"],
                    "not copied to owned: a Secret of that name is there and is not a copy"
                )
            })
    })
    .await;

    kept_in_sync_and_restored(&k).await;
    copied_where_namespaces_appear(&k).await;
    withdrawn(&k).await;
    t.stop().await;
}

/// A change to the source reaches its copies; a copy edited or deleted by hand comes back.
async fn kept_in_sync_and_restored(k: &Arc<Kubectl>) {
    let (k, two) = (k.clone(), "dHdv"); // "two" in base64
    // Kept in sync with the source.
    kubectl(
        &k,
        &[
            "patch",
            "secret",
            "registry",
            "-p",
            r#"{"data":{"token":"dHdv"}}"#,
        ],
        None,
    )
    .await;
    wait_for(
        &k,
        "secrets",
        "registry",
        "token",
        &[("owned", "bWluZQ=="), ("stage-1", two), ("team-a", two)],
    )
    .await;
    // A copy edited or deleted by hand comes back.
    kubectl(
        &k,
        &[
            "patch",
            "secret",
            "registry",
            "-n",
            "team-a",
            "-p",
            r#"{"data":{"token":"eA=="}}"#,
        ],
        None,
    )
    .await;
    kubectl(&k, &["delete", "secret", "registry", "-n", "stage-1"], None).await;
    wait_for(
        &k,
        "secrets",
        "registry",
        "token",
        &[("owned", "bWluZQ=="), ("stage-1", two), ("team-a", two)],
    )
    .await;
}

/// Namespaces that appear, or come to match, later get their copies.
async fn copied_where_namespaces_appear(k: &Arc<Kubectl>) {
    let (k, two) = (k.clone(), "dHdv"); // "two" in base64
    // Namespaces that appear, or come to match, later get their copies.
    kubectl(&k, &["create", "namespace", "stage-2"], None).await;
    kubectl(&k, &["label", "namespace", "team-b", "env=prod"], None).await;
    wait_for(
        &k,
        "secrets",
        "registry",
        "token",
        &[
            ("owned", "bWluZQ=="),
            ("stage-1", two),
            ("stage-2", two),
            ("team-a", two),
        ],
    )
    .await;
    wait_for(
        &k,
        "configmaps",
        "settings",
        "level",
        &[("prod-1", "info"), ("team-b", "info")],
    )
    .await;
}

/// Namespaces no longer named lose their copies; the source gone, every copy goes.
async fn withdrawn(k: &Arc<Kubectl>) {
    let (k, two) = (k.clone(), "dHdv"); // "two" in base64
    // Namespaces no longer named lose their copies; the source gone, every copy goes.
    kubectl(
        &k,
        &[
            "annotate",
            "--overwrite",
            "secret",
            "registry",
            "replicator.v1.mittwald.de/replicate-to=team-a",
        ],
        None,
    )
    .await;
    wait_for(
        &k,
        "secrets",
        "registry",
        "token",
        &[("owned", "bWluZQ=="), ("team-a", two)],
    )
    .await;
    kubectl(&k, &["delete", "configmap", "settings"], None).await;
    kubectl(&k, &["delete", "secret", "registry"], None).await;
    wait_for(&k, "configmaps", "settings", "level", &[]).await;
    wait_for(&k, "secrets", "registry", "token", &[("owned", "bWluZQ==")]).await;
}

#[test]
fn rbac_writes_only_secrets_configmaps_and_events() {
    assert_eq!(
        super::granted("replicator"),
        [
            "ClusterRole core configmaps create,delete,get,list,patch,watch",
            "ClusterRole core events create",
            "ClusterRole core namespaces get,list,watch",
            "ClusterRole core secrets create,delete,get,list,patch,watch",
        ]
    );
}

/// The `ReplicationRefused` Events about the Secret `registry` in `default`.
async fn refusals(k: &Arc<Kubectl>) -> Vec<Value> {
    let out = kubectl(k, &["get", "events", "-n", "default", "-o", "json"], None).await;
    let events: Value = serde_json::from_str(&out).unwrap();
    (events["items"].as_array().unwrap().iter())
        .filter(|e| {
            e["reason"] == "ReplicationRefused" && e["involvedObject"]["name"] == "registry"
        })
        .cloned()
        .collect()
}

/// Regression: every refusal made a new Event (4 `ReplicationRefused` in 30 s). A refusal
/// said again is counted into the one Event, as client-go's event recorder does: its
/// `count` goes up and its `lastTimestamp` is that of the last one.
#[tokio::test]
async fn a_refusal_said_again_is_counted_into_one_event() {
    let t = TestDaemon::builder(&fragment("replicator"))
        .plugin_file("replicator", "replicator")
        .start()
        .await;
    let k = Arc::new(Kubectl::new(t.sim()));
    kubectl(&k, &["apply", "-f", "-"], Some(SETUP)).await;
    let mut counted = 0;
    for bump in 0..3 {
        if bump > 0 {
            // The source changes: the replicator copies it again, and refuses `owned` again.
            let label = format!("bump={bump}");
            kubectl(
                &k,
                &["label", "secret", "registry", &label, "--overwrite"],
                None,
            )
            .await;
        }
        counted = eventually(
            &format!("one Event counting past {counted}"),
            WAIT,
            async || {
                let events = refusals(&k).await;
                let count = events.first()?["count"].as_u64()?;
                (events.len() == 1 && count > counted).then_some(count)
            },
        )
        .await;
    }
    assert!(counted >= 3, "{counted}");
    let events = refusals(&k).await;
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    assert!(
        event["lastTimestamp"].as_str() >= event["firstTimestamp"].as_str(),
        "{event:#}"
    );
    t.stop().await;
}
