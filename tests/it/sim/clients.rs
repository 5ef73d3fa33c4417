//! The simulator against independent clients: kubectl and kube-rs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use switchyard::sim::{ObjectRef, SimOptions, Simulator, resources};

use crate::support;
use crate::support::spawned;

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let output = spawned::output(
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args),
        "kubectl",
    );
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn configmaps() -> usize {
    resources::find("", "v1", "configmaps").unwrap()
}

/// Rows of a kubectl table: each line split on runs of spaces.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_and_creates_configmaps() {
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let cluster = sim.cluster().clone();
    cluster
        .create(
            configmaps(),
            "kube-system",
            json!({"metadata": {"name": "cluster-info"}, "data": {"a": "1", "b": "2"}}),
        )
        .unwrap();
    cluster
        .create(
            configmaps(),
            "default",
            json!({"metadata": {"name": "settings"}, "data": {"x": "1"}}),
        )
        .unwrap();

    let kc = kubeconfig.clone();
    let (ok, out, err) =
        tokio::task::spawn_blocking(move || kubectl(&kc, &["get", "configmaps", "-A"]))
            .await
            .unwrap();
    assert!(ok, "kubectl get failed: {err}");
    let table = rows(&out);
    assert_eq!(table[0], ["NAMESPACE", "NAME", "DATA", "AGE"]);
    assert_eq!(table[1][..3], ["default", "settings", "1"]);
    assert_eq!(table[2][..3], ["kube-system", "cluster-info", "2"]);
    assert_eq!(table.len(), 3);

    let kc = kubeconfig.clone();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        kubectl(
            &kc,
            &[
                "create",
                "configmap",
                "made-by-kubectl",
                "--from-literal=color=blue",
                "-n",
                "default",
            ],
        )
    })
    .await
    .unwrap();
    assert!(ok, "kubectl create failed: {err}");
    assert_eq!(out.trim(), "configmap/made-by-kubectl created");
    let stored = cluster
        .get(&ObjectRef {
            resource: configmaps(),
            namespace: "default".into(),
            name: "made-by-kubectl".into(),
        })
        .unwrap();
    assert_eq!(stored["data"], json!({"color": "blue"}));

    // Creating it again is refused with the API server's message.
    let kc = kubeconfig.clone();
    let (ok, _, err) = tokio::task::spawn_blocking(move || {
        kubectl(
            &kc,
            &["create", "configmap", "made-by-kubectl", "-n", "default"],
        )
    })
    .await
    .unwrap();
    assert!(!ok);
    assert!(
        err.contains(r#"configmaps "made-by-kubectl" already exists"#),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_labels_patches_and_deletes() {
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    sim.cluster()
        .create(
            configmaps(),
            "default",
            json!({"metadata": {"name": "c"}, "data": {"a": "1"}}),
        )
        .unwrap();
    let kc = kubeconfig.clone();
    let outputs = tokio::task::spawn_blocking(move || {
        [
            kubectl(&kc, &["label", "configmap", "c", "tier=web"]),
            kubectl(
                &kc,
                &[
                    "patch",
                    "configmap",
                    "c",
                    "--type=merge",
                    "-p",
                    r#"{"data":{"b":"2"}}"#,
                ],
            ),
            kubectl(
                &kc,
                &[
                    "patch",
                    "configmap",
                    "c",
                    "--type=json",
                    "-p",
                    r#"[{"op":"remove","path":"/data/a"}]"#,
                ],
            ),
            kubectl(
                &kc,
                &[
                    "get",
                    "configmaps",
                    "-l",
                    "tier=web",
                    "-o",
                    "jsonpath={.items[*].data}",
                ],
            ),
            kubectl(&kc, &["delete", "configmap", "c"]),
            kubectl(&kc, &["get", "configmap", "c"]),
        ]
    })
    .await
    .unwrap();
    assert_eq!(
        outputs[0].1.trim(),
        "configmap/c labeled",
        "{:?}",
        outputs[0]
    );
    assert_eq!(
        outputs[1].1.trim(),
        "configmap/c patched",
        "{:?}",
        outputs[1]
    );
    assert_eq!(
        outputs[2].1.trim(),
        "configmap/c patched",
        "{:?}",
        outputs[2]
    );
    assert_eq!(outputs[3].1.trim(), r#"{"b":"2"}"#, "{:?}", outputs[3]);
    assert_eq!(
        outputs[4].1.trim(),
        r#"configmap "c" deleted"#,
        "{:?}",
        outputs[4]
    );
    assert!(!outputs[5].0);
    assert!(
        outputs[5].2.contains(r#"configmaps "c" not found"#),
        "{:?}",
        outputs[5]
    );
}

#[tokio::test]
async fn a_watch_resumes_from_a_resource_version_without_gaps() {
    let sim = support::start_sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let cm = |name: &str| support::configmap(json!({"metadata": {"name": name}}));
    let first = api
        .create(&PostParams::default(), &cm("one"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("two"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("three"))
        .await
        .unwrap();

    let rv = first.metadata.resource_version.unwrap();
    let mut events = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    let mut names = Vec::new();
    while names.len() < 2 {
        match events.next().await.unwrap().unwrap() {
            WatchEvent::Added(o) => names.push(o.metadata.name.unwrap()),
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert_eq!(names, ["two", "three"]);
    // And it follows live changes.
    api.create(&PostParams::default(), &cm("four"))
        .await
        .unwrap();
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("four")),
        other => panic!("unexpected event {other:?}"),
    }
}

#[tokio::test]
async fn a_watch_from_a_compacted_version_gets_410_expired() {
    let sim = Simulator::start(SimOptions {
        history: 2,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    for name in ["a", "b", "c", "d"] {
        let cm = support::configmap(json!({"metadata": {"name": name}}));
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let mut events = api
        .watch(&WatchParams::default().timeout(5), "1")
        .await
        .unwrap()
        .boxed();
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stale_update_is_a_409_conflict() {
    let sim = support::start_sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let cm = support::configmap(json!({"metadata": {"name": "c"}, "data": {"v": "1"}}));
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    let mut newer = created.clone();
    newer.data = Some([("v".to_string(), "2".to_string())].into());
    api.replace("c", &PostParams::default(), &newer)
        .await
        .unwrap();
    let err = api
        .replace("c", &PostParams::default(), &created)
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "Conflict");
        }
        other => panic!("expected a conflict, got {other}"),
    }
}

#[tokio::test]
async fn closing_watches_ends_open_streams() {
    let sim = support::start_sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let mut events = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    sim.close_watches();
    let end = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap();
    assert!(end.is_none(), "the stream should end, got {end:?}");
}
