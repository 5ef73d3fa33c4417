//! The cluster's writes and resets, against its state.

use super::*;

fn cm(name: &str) -> Value {
    json!({"metadata": {"name": name}, "data": {"k": "v"}})
}

fn configmaps() -> usize {
    builtin_index("", "v1", "configmaps")
}

#[test]
fn create_assigns_identity_and_increasing_versions() {
    let cluster = Cluster::default();
    let a = cluster.create(configmaps(), "default", cm("a")).unwrap();
    let b = cluster.create(configmaps(), "default", cm("b")).unwrap();
    assert!(object_rv(&b) > object_rv(&a));
    assert_eq!(a["kind"], "ConfigMap");
    assert_eq!(a["metadata"]["namespace"], "default");
    assert!(a["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    let err = cluster
        .create(configmaps(), "default", cm("a"))
        .unwrap_err();
    assert_eq!(err.code, 409);
    assert_eq!(err.reason, "AlreadyExists");
}

#[test]
fn create_in_a_missing_namespace_is_not_found() {
    let cluster = Cluster::default();
    let err = cluster
        .create(configmaps(), "nowhere", cm("a"))
        .unwrap_err();
    assert_eq!(err.code, 404);
}

#[test]
fn update_with_a_stale_resource_version_conflicts() {
    let cluster = Cluster::default();
    let created = cluster.create(configmaps(), "default", cm("a")).unwrap();
    let at = ref_of(configmaps(), &created);
    let mut next = (*created).clone();
    next["data"]["k"] = "w".into();
    let updated = cluster.update(&at, next.clone()).unwrap();
    assert_eq!(updated["metadata"]["generation"], 2);
    let err = cluster.update(&at, next).unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
}

#[test]
fn a_status_only_change_keeps_the_generation() {
    let cluster = Cluster::default();
    let pods = builtin_index("", "v1", "pods");
    let pod = cluster
        .create(
            pods,
            "default",
            json!({"metadata": {"name": "p"}, "spec": {"containers": []}}),
        )
        .unwrap();
    assert_eq!(pod["status"]["phase"], "Pending");
    let at = ref_of(pods, &pod);
    let running = cluster
        .modify(&at, |p| {
            let mut p = p.clone();
            p["status"]["phase"] = "Running".into();
            Ok(p)
        })
        .unwrap();
    assert_eq!(running["metadata"]["generation"], 1);
    assert_eq!(running["metadata"]["uid"], pod["metadata"]["uid"]);
    assert_eq!(
        running["metadata"]["creationTimestamp"],
        pod["metadata"]["creationTimestamp"]
    );
}

#[test]
fn deleting_a_namespace_deletes_its_objects() {
    let cluster = Cluster::default();
    let ns = builtin_index("", "v1", "namespaces");
    cluster
        .create(ns, "", json!({"metadata": {"name": "team"}}))
        .unwrap();
    cluster.create(configmaps(), "team", cm("a")).unwrap();
    let at = ObjectRef {
        resource: ns,
        namespace: String::new(),
        name: "team".into(),
    };
    cluster.delete(&at).unwrap();
    assert!(cluster.list(configmaps(), Some("team")).items.is_empty());
}

#[test]
fn an_object_with_finalizers_stays_until_the_last_one_is_removed() {
    let cluster = Cluster::default();
    let mut object = cm("held");
    object["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let created = cluster.create(configmaps(), "default", object).unwrap();
    let at = ref_of(configmaps(), &created);
    let deletion = cluster.delete_with(&at, &Preconditions::default()).unwrap();
    let Deletion::Finalizing(marked) = deletion else {
        panic!("an object with finalizers must not be deleted at once");
    };
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert!(cluster.get(&at).is_ok());
    let mut changes = cluster.changes();
    cluster
        .modify(&at, |o| {
            let mut o = o.clone();
            o["metadata"]["finalizers"] = json!([]);
            Ok(o)
        })
        .unwrap();
    assert!(cluster.get(&at).is_err());
    let change = changes.try_recv().unwrap();
    assert_eq!(change.change_type, ChangeType::Deleted);
}

#[test]
fn a_reset_cluster_forgets_its_objects_and_counts_versions_from_zero_again() {
    let cluster = Cluster::default();
    let first = cluster.create(configmaps(), "default", cm("a")).unwrap();
    for name in ["b", "c", "d"] {
        cluster.create(configmaps(), "default", cm(name)).unwrap();
    }
    let before = cluster.resource_version();
    cluster.reset();
    assert!(cluster.list(configmaps(), None).items.is_empty());
    let namespaces = builtin_index("", "v1", "namespaces");
    assert_eq!(cluster.list(namespaces, None).items.len(), 4);
    assert!(cluster.resource_version() < before);
    let again = cluster.create(configmaps(), "default", cm("a")).unwrap();
    assert_eq!(object_rv(&again), object_rv(&first), "versions start over");
    assert_ne!(again["metadata"]["uid"], first["metadata"]["uid"]);
}

#[test]
fn a_delete_precondition_that_does_not_hold_conflicts() {
    let cluster = Cluster::default();
    let created = cluster.create(configmaps(), "default", cm("a")).unwrap();
    let at = ref_of(configmaps(), &created);
    let wrong = Preconditions {
        uid: Some("not-the-uid".into()),
        resource_version: None,
    };
    let err = cluster.delete_with(&at, &wrong).unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message.contains("Precondition failed"),
        "{}",
        err.message
    );
}

#[test]
fn a_crd_serves_its_resource_until_it_is_deleted() {
    let cluster = Cluster::default();
    let config = SimConfig::from_yaml(
        "crds: [{group: example.com, version: v1, kind: Widget}]\nobjects: [{apiVersion: example.com/v1, kind: Widget, metadata: {name: w}}]",
        "test",
    )
    .unwrap();
    cluster.apply_config(&config).unwrap();
    let widgets = cluster
        .find_resource("example.com", "v1", "widgets")
        .unwrap();
    assert_eq!(cluster.list(widgets, None).items.len(), 1);
    assert_eq!(
        cluster
            .groups()
            .iter()
            .filter(|(g, _)| g == "example.com")
            .count(),
        1
    );
    let crds = builtin_index("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let crd = ObjectRef {
        resource: crds,
        namespace: String::new(),
        name: "widgets.example.com".into(),
    };
    assert_eq!(
        cluster.get(&crd).unwrap()["status"]["conditions"][1]["type"],
        "Established"
    );
    cluster.delete(&crd).unwrap();
    assert_eq!(cluster.find_resource("example.com", "v1", "widgets"), None);
    assert!(cluster.list(widgets, None).items.is_empty());
}

#[test]
fn a_secrets_string_data_is_stored_in_data_on_create_and_update_and_never_returned() {
    let cluster = Cluster::default();
    let secrets = builtin_index("", "v1", "secrets");
    let secret = json!({"metadata": {"name": "s"}, "data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "two"}});
    let created = cluster.create(secrets, "default", secret).unwrap();
    assert_eq!(created["data"], json!({"a": "eA==", "b": "dHdv"}));
    assert!(created.get("stringData").is_none(), "{created}");
    let at = ref_of(secrets, &created);
    let updated = cluster
        .modify(&at, |s| {
            let mut s = s.clone();
            s["stringData"] = json!({"c": "three"});
            Ok(s)
        })
        .unwrap();
    assert_eq!(
        updated["data"],
        json!({"a": "eA==", "b": "dHdv", "c": "dGhyZWU="})
    );
    assert!(updated.get("stringData").is_none(), "{updated}");
    // A ConfigMap's fields are its own.
    let odd = json!({"metadata": {"name": "c"}, "stringData": {"k": "v"}});
    let kept = cluster.create(configmaps(), "default", odd).unwrap();
    assert_eq!(kept["stringData"], json!({"k": "v"}));
}
