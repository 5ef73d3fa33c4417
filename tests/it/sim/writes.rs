//! Writes against the simulator as kube-apiserver does them: server-set identity (uid,
//! creationTimestamp, generation), DELETE answers, finalizers, preconditions, the status
//! subresource, and every error a `Status`.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent, WatchParams,
};
use serde_json::{Value, json};
use switchyard::sim::resources;

use crate::support::sim::{Kubectl, blocking, start_with_config};

fn cm(value: Value) -> ConfigMap {
    serde_json::from_value(value).unwrap()
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "nginx"}]},
    }))
    .unwrap()
}

#[tokio::test]
async fn the_server_sets_identity_and_generation_bumps_only_on_spec_changes() {
    let sim = start_with_config("").await;
    let api: Api<Pod> = Api::namespaced(sim.client().unwrap(), "default");
    let created = api.create(&PostParams::default(), &pod("p")).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    assert_eq!(uid.len(), 36);
    let created_at = created.metadata.creation_timestamp.clone().unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));

    // A label is metadata: same generation. A client cannot change uid or creationTimestamp.
    let labelled = api
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}, "uid": "forged", "creationTimestamp": "2000-01-01T00:00:00Z"}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(1));
    assert_eq!(labelled.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(labelled.metadata.creation_timestamp, Some(created_at));

    // The status subresource changes only the status, and not the generation.
    let running = api
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"nodeName": "ignored"}})),
        )
        .await
        .unwrap();
    assert_eq!(running.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(running.spec.unwrap().node_name, None);
    assert_eq!(running.metadata.generation, Some(1));

    let moved = api
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": "node-a"}})),
        )
        .await
        .unwrap();
    assert_eq!(moved.metadata.generation, Some(2));
}

#[tokio::test]
async fn deleting_a_pod_returns_it_and_deleting_a_configmap_returns_a_success_status() {
    let sim = start_with_config("").await;
    let client = sim.client().unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();
    let deleted = pods.delete("p", &DeleteParams::default()).await.unwrap();
    let pod = deleted
        .left()
        .expect("kube-apiserver returns a deleted pod");
    assert_eq!(pod.metadata.name.as_deref(), Some("p"));

    let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = configmaps
        .create(
            &PostParams::default(),
            &cm(json!({"metadata": {"name": "c"}})),
        )
        .await
        .unwrap();
    let deleted = configmaps
        .delete("c", &DeleteParams::default())
        .await
        .unwrap();
    let status = deleted
        .right()
        .expect("a ConfigMap delete answers with a Status");
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
    let details = status.details.unwrap();
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("c", "configmaps")
    );
    assert_eq!(Some(details.uid), created.metadata.uid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_deletes_objects_and_then_cannot_find_them() {
    let sim = start_with_config("").await;
    let pods = resources::find("", "v1", "pods").unwrap();
    let configmaps = resources::find("", "v1", "configmaps").unwrap();
    let cluster = sim.cluster();
    cluster
        .create(
            pods,
            "default",
            json!({"metadata": {"name": "p"}, "spec": {"containers": []}}),
        )
        .unwrap();
    for name in ["c1", "c2"] {
        cluster
            .create(
                configmaps,
                "default",
                json!({"metadata": {"name": name, "labels": {"batch": "x"}}}),
            )
            .unwrap();
    }
    let kubectl = Kubectl::new(&sim);
    let outputs = blocking(move || {
        [
            kubectl.run(&["delete", "pod", "p"]),
            kubectl.run(&["get", "pod", "p"]),
            kubectl.run(&["delete", "configmaps", "-l", "batch=x"]),
            kubectl.run(&["get", "configmaps", "-o", "name"]),
        ]
    })
    .await;
    assert_eq!(
        outputs[0].stdout.trim(),
        r#"pod "p" deleted"#,
        "{:?}",
        outputs[0]
    );
    assert!(!outputs[1].ok);
    assert!(
        outputs[1]
            .stderr
            .contains(r#"Error from server (NotFound): pods "p" not found"#),
        "{:?}",
        outputs[1]
    );
    assert_eq!(
        outputs[2].stdout.trim(),
        "configmap \"c1\" deleted\nconfigmap \"c2\" deleted",
        "{:?}",
        outputs[2]
    );
    assert_eq!(outputs[3].stdout.trim(), "");
}

#[tokio::test]
async fn an_object_with_a_finalizer_goes_once_the_finalizer_is_removed() {
    let sim = start_with_config("").await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let held = cm(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}));
    api.create(&PostParams::default(), &held).await.unwrap();
    let rv = sim.cluster().resource_version().to_string();
    let mut events = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    };

    let answer = api.delete("held", &DeleteParams::default()).await.unwrap();
    let marked = answer.left().expect("a finalizing object is returned");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(api.get("held").await.is_ok());
    match next().await {
        WatchEvent::Modified(o) => assert!(o.metadata.deletion_timestamp.is_some()),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    // Adding a finalizer to an object being deleted is refused.
    let err = api
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err}"
    );

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("held").await.unwrap().is_none());
    match next().await {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("held")),
        other => panic!("expected DELETED, got {other:?}"),
    }
}

#[tokio::test]
async fn a_delete_whose_precondition_fails_is_a_conflict() {
    let sim = start_with_config("").await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let created = api
        .create(
            &PostParams::default(),
            &cm(json!({"metadata": {"name": "c"}})),
        )
        .await
        .unwrap();
    let stale = DeleteParams::default().preconditions(Preconditions {
        uid: Some("00000000-0000-0000-0000-000000000000".into()),
        resource_version: None,
    });
    let err = api.delete("c", &stale).await.unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
            assert!(
                status
                    .message
                    .contains("Precondition failed: UID in precondition")
            );
        }
        other => panic!("expected a conflict, got {other}"),
    }
    let right = DeleteParams::default().preconditions(Preconditions {
        uid: created.metadata.uid,
        resource_version: created.metadata.resource_version,
    });
    api.delete("c", &right).await.unwrap();
}

#[tokio::test]
async fn every_error_is_a_status_with_the_api_servers_reason() {
    let sim = start_with_config("").await;
    let base = format!("{}/api/v1/namespaces/default/configmaps", sim.url());
    let http = reqwest::Client::new();
    http.post(&base)
        .json(&json!({"metadata": {"name": "c"}}))
        .send()
        .await
        .unwrap();
    let cases = [
        (http.get(format!("{base}/missing")), 404, "NotFound"),
        (
            http.get(format!("{}/api/v1/widgets", sim.url())),
            404,
            "NotFound",
        ),
        (
            http.post(&base).json(&json!({"metadata": {"name": "c"}})),
            409,
            "AlreadyExists",
        ),
        (
            http.post(&base)
                .json(&json!({"metadata": {"name": "Bad_Name"}})),
            422,
            "Invalid",
        ),
        (http.post(&base).body("{not json"), 400, "BadRequest"),
        (
            http.patch(format!("{base}/c"))
                .header("Content-Type", "application/yaml")
                .body("{}"),
            415,
            "UnsupportedMediaType",
        ),
        (http.put(&base).json(&json!({})), 405, "MethodNotAllowed"),
        (
            http.post(format!(
                "{}/api/v1/namespaces/nowhere/configmaps",
                sim.url()
            ))
            .json(&json!({"metadata": {"name": "x"}})),
            404,
            "NotFound",
        ),
    ];
    for (request, code, reason) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), code);
        let status: Value = response.json().await.unwrap();
        assert_eq!(status["kind"], "Status", "{status}");
        assert_eq!(status["status"], "Failure", "{status}");
        assert_eq!(
            (status["code"].as_u64(), status["reason"].as_str()),
            (Some(code.into()), Some(reason)),
            "{status}"
        );
    }
}

#[tokio::test]
async fn server_side_apply_creates_a_missing_object_then_merges_into_it() {
    let sim = start_with_config("").await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let params = PatchParams::apply("test").force();
    let applied = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "applied", "labels": {"a": "1"}},
        "data": {"k": "v"},
    });
    let created = api
        .patch("applied", &params, &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(created.data.unwrap()["k"], "v");
    assert!(created.metadata.uid.is_some());

    let label_only = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "applied", "labels": {"b": "2"}},
    });
    let merged = api
        .patch("applied", &params, &Patch::Apply(&label_only))
        .await
        .unwrap();
    let labels = merged.metadata.labels.unwrap();
    assert_eq!((labels["a"].as_str(), labels["b"].as_str()), ("1", "2"));
    assert_eq!(
        merged.data.unwrap()["k"],
        "v",
        "fields it does not name stay"
    );
    assert_eq!(merged.metadata.uid, created.metadata.uid);

    let wrong_name = json!({"metadata": {"name": "other"}});
    let err = api
        .patch("applied", &params, &Patch::Apply(&wrong_name))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400),
        "{err}"
    );
}

#[tokio::test]
async fn a_namespace_has_a_status_subresource_too() {
    use k8s_openapi::api::core::v1::Namespace;
    let sim = start_with_config("").await;
    let api: Api<Namespace> = Api::all(sim.client().unwrap());
    let patched = api
        .patch_status(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Terminating"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
}

#[tokio::test]
async fn a_dry_run_write_answers_as_if_written_and_stores_nothing() {
    let sim = start_with_config("").await;
    let client = sim.client().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let answered = api
        .create(
            &dry,
            &cm(json!({"metadata": {"name": "a"}, "data": {"k": "v"}})),
        )
        .await
        .unwrap();
    assert_eq!(answered.metadata.namespace.as_deref(), Some("default"));
    assert!(answered.metadata.uid.is_some());
    assert_eq!(answered.metadata.resource_version, None);
    let rv = sim.cluster().resource_version();
    assert!(api.get_opt("a").await.unwrap().is_none());

    // Checked as a real create is: a dry run in a missing namespace is refused the same way.
    let elsewhere: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "nowhere");
    let refused = elsewhere
        .create(&dry, &cm(json!({"metadata": {"name": "a"}})))
        .await
        .unwrap_err();
    assert!(matches!(refused, kube::Error::Api(s) if s.code == 404));

    let stored = api
        .create(
            &PostParams::default(),
            &cm(json!({"metadata": {"name": "a"}, "data": {"k": "v"}})),
        )
        .await
        .unwrap();
    let patch = Patch::Merge(json!({"data": {"k": "w"}}));
    let dry_patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let patched = api.patch("a", &dry_patch, &patch).await.unwrap();
    assert_eq!(patched.data.unwrap()["k"], "w");
    assert_eq!(
        patched.metadata.resource_version,
        stored.metadata.resource_version
    );
    let applied = api
        .patch(
            "b",
            &PatchParams::apply("test").dry_run(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.metadata.name.as_deref(), Some("b"));
    assert!(api.get_opt("b").await.unwrap().is_none());
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["k"], "v");
    assert_eq!(
        sim.cluster().resource_version(),
        rv + 1,
        "only the real create counted"
    );

    let url = format!(
        "{}/api/v1/namespaces/default/configmaps?dryRun=Some",
        sim.url()
    );
    let (code, status) =
        crate::support::sim::post_json(&url, &json!({"metadata": {"name": "c"}})).await;
    assert_eq!(code, 400);
    assert_eq!(
        status["message"],
        "dryRun: Unsupported value: \"Some\": supported values: \"All\""
    );
}

#[tokio::test]
async fn kubectl_finds_the_rbac_kinds_with_their_scopes() {
    let sim = start_with_config("").await;
    let kubectl = Kubectl::new(&sim);
    let out = blocking(move || {
        kubectl.run(&[
            "api-resources",
            "--api-group=rbac.authorization.k8s.io",
            "--no-headers",
        ])
    })
    .await;
    assert!(out.ok, "{}", out.stderr);
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let scope = |name: &str| {
        rows.iter()
            .find(|r| r[0] == name)
            .map(|r| r[r.len() - 2])
            .unwrap_or_else(|| panic!("{name} missing: {rows:?}"))
    };
    assert_eq!(scope("roles"), "true");
    assert_eq!(scope("rolebindings"), "true");
    assert_eq!(scope("clusterroles"), "false");
    assert_eq!(scope("clusterrolebindings"), "false");
}
