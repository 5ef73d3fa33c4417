//! The chart in a cluster (the simulator): rendered and applied with kubectl, installed,
//! upgraded and rolled back as a Helm release, and installed from an OCI registry.

use serde_json::{Value, json};

use super::helm::{chart, helm, rendered, stream};
use crate::support::process::switchyard;
use crate::support::registry::Registry;
use crate::support::sim::{Kubectl, blocking};
use crate::support::{self, start_sim};

/// The CustomResourceDefinitions of the Prometheus Operator kinds the chart can make, as
/// far as the simulator needs them to serve the kinds.
const MONITORING_CRDS: &str = "
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {plural: servicemonitors, singular: servicemonitor, kind: ServiceMonitor}
  versions:
    - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: prometheusrules.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {plural: prometheusrules, singular: prometheusrule, kind: PrometheusRule}
  versions:
    - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
";

/// A kubectl run that must succeed; its stdout.
fn ok(kubectl: &Kubectl, args: &[&str]) -> String {
    let out = kubectl.run(args);
    assert!(out.ok, "kubectl {args:?} failed: {}", out.stderr);
    out.stdout
}

/// `kubectl get ... -o json -n switchyard`, parsed.
fn get(kubectl: &Kubectl, what: &str) -> Value {
    let out = ok(kubectl, &["get", what, "-n", "switchyard", "-o", "json"]);
    serde_json::from_str(&out).expect("kubectl prints JSON")
}

/// Whether `what` exists in namespace switchyard.
fn exists(kubectl: &Kubectl, what: &str) -> bool {
    kubectl.run(&["get", what, "-n", "switchyard"]).ok
}

#[tokio::test]
async fn every_mode_rendered_applies_to_the_simulator_with_kubectl() {
    let sim = start_sim().await;
    let kubectl = Kubectl::new(&sim);
    blocking(move || {
        ok(&kubectl, &["create", "namespace", "switchyard"]);
        let out = kubectl.run_with_input(&["apply", "-f", "-"], MONITORING_CRDS);
        assert!(out.ok, "{}", out.stderr);
        let monitoring = json!({"serviceMonitor": {"enabled": true},
            "prometheusRule": {"enabled": true}, "grafanaDashboard": {"enabled": true}});
        for (mode, replicas, kind) in [
            ("single", 1, "deployment"),
            ("leader", 2, "deployment"),
            ("sharded", 3, "statefulset"),
        ] {
            let mut values = monitoring.clone();
            values["mode"] = json!(mode);
            values["replicas"] = json!(replicas);
            values["persistence"] = json!({"enabled": mode != "leader"});
            let documents = rendered(values);
            let out =
                kubectl.run_with_input(&["apply", "--server-side", "-f", "-"], &stream(&documents));
            assert!(out.ok, "{mode}: {}", out.stderr);
            let workload = get(&kubectl, &format!("{kind}/switchyard"));
            assert_eq!(workload["spec"]["replicas"], replicas, "{mode}");
            for what in [
                "servicemonitor/switchyard",
                "prometheusrule/switchyard",
                "configmap/switchyard-dashboard",
                "networkpolicy/switchyard",
                "service/switchyard-metrics",
                "serviceaccount/switchyard",
            ] {
                assert!(exists(&kubectl, what), "{mode}: no {what}");
            }
            assert_eq!(
                exists(&kubectl, "poddisruptionbudget/switchyard"),
                replicas > 1,
                "{mode}"
            );
        }
        let set = get(&kubectl, "statefulset/switchyard");
        assert_eq!(
            set["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
            "1Gi"
        );
        assert!(exists(&kubectl, "persistentvolumeclaim/switchyard-state"));
    })
    .await;
}

/// Runs `request` with the simulator's kubeconfig and namespace switchyard.
fn release(kubectl: &Kubectl, mut request: Value) -> Value {
    request["kubeconfig"] = json!(kubectl.kubeconfig());
    request["namespace"] = json!("switchyard");
    helm(request.clone()).unwrap_or_else(|(kind, message)| panic!("{request}: {kind}: {message}"))
}

/// The revisions of release switchyard: (revision, status).
fn revisions(kubectl: &Kubectl) -> Vec<(u64, String)> {
    let history = release(kubectl, json!({"action": "history", "name": "switchyard"}));
    history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["revision"].as_u64().unwrap(),
                r["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The daemon's pod spec as the API server stores it (the service account, the read-only
/// root, JSON logs), and its config checked by `switchyard check` against the built plugins.
fn check_pod(kubectl: &Kubectl, replicas: u64) {
    let deployment = get(kubectl, "deployment/switchyard");
    assert_eq!(deployment["spec"]["replicas"], replicas);
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(spec["serviceAccountName"], "switchyard");
    let container = &spec["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["env"][1],
        json!({"name": "SWITCHYARD_LOG_FORMAT", "value": "json"})
    );
    let config = get(kubectl, "configmap/switchyard-config");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config["data"]["config.yaml"].as_str().unwrap()).unwrap();
    let plugins = support::plugins_dir();
    let (code, _, err) = switchyard(&[
        "check",
        "--config",
        path.to_str().unwrap(),
        "--plugins-dir",
        plugins.to_str().unwrap(),
    ]);
    assert_eq!(
        code, 0,
        "the installed config fails switchyard check: {err}"
    );
}

#[tokio::test]
async fn install_upgrade_and_rollback_as_a_helm_release() {
    let sim = start_sim().await;
    let kubectl = Kubectl::new(&sim);
    blocking(move || {
        // A config the schema refuses installs nothing, and Helm names the field.
        let bad = json!({"config": {"handlers": {"h": {"concurency": 1}}}});
        let (kind, message) = helm(json!({"action": "install", "chart": chart(),
            "name": "switchyard", "create_namespace": true, "values": bad,
            "kubeconfig": kubectl.kubeconfig(), "namespace": "switchyard"}))
        .expect_err("the install of a bad config");
        assert_eq!(kind, "HelmReleaseError");
        let named = "at '/config/handlers/h': additional properties 'concurency' not allowed";
        assert!(message.contains(named), "{message}");
        assert!(!exists(&kubectl, "deployment/switchyard"));

        // A server dry run answers with the manifest and stores nothing, not even the release.
        let dry = release(
            &kubectl,
            json!({"action": "install", "chart": chart(), "name": "switchyard",
                   "create_namespace": true, "dry_run": "server"}),
        );
        assert!(
            dry["manifest"]
                .as_str()
                .unwrap()
                .contains("kind: Deployment")
        );
        assert!(!exists(&kubectl, "deployment/switchyard"));
        assert!(!exists(&kubectl, "secret/sh.helm.release.v1.switchyard.v1"));

        let installed = release(
            &kubectl,
            json!({"action": "install", "chart": chart(),
            "name": "switchyard", "create_namespace": true}),
        );
        assert_eq!(installed["status"], "deployed", "{installed:#}");
        check_pod(&kubectl, 1);
        assert!(!exists(&kubectl, "role/switchyard"));
        let cluster_role = ok(
            &kubectl,
            &["get", "clusterrole", "switchyard", "-o", "json"],
        );
        assert!(cluster_role.contains("configmaps"), "{cluster_role}");
        assert!(exists(&kubectl, "secret/sh.helm.release.v1.switchyard.v1"));

        let values = json!({"mode": "leader", "replicas": 2});
        let upgraded = release(
            &kubectl,
            json!({"action": "upgrade", "chart": chart(),
            "name": "switchyard", "values": values}),
        );
        assert_eq!(upgraded["revision"], 2);
        check_pod(&kubectl, 2);
        let role = get(&kubectl, "role/switchyard");
        assert_eq!(role["rules"][0]["resources"], json!(["leases"]));
        assert!(exists(&kubectl, "poddisruptionbudget/switchyard"));

        release(
            &kubectl,
            json!({"action": "rollback", "name": "switchyard", "version": 1}),
        );
        check_pod(&kubectl, 1);
        assert!(
            !exists(&kubectl, "role/switchyard"),
            "the rollback left the Lease Role"
        );
        assert!(!exists(&kubectl, "poddisruptionbudget/switchyard"));
        assert_eq!(
            revisions(&kubectl),
            [
                (1, "superseded".into()),
                (2, "superseded".into()),
                (3, "deployed".into())
            ]
        );

        // An uninstall deletes what the release made and its history (Helm deletes its
        // release Secrets with protobuf DeleteOptions).
        release(
            &kubectl,
            json!({"action": "uninstall", "name": "switchyard"}),
        );
        for what in [
            "deployment/switchyard",
            "configmap/switchyard-config",
            "secret/sh.helm.release.v1.switchyard.v1",
            "secret/sh.helm.release.v1.switchyard.v3",
        ] {
            assert!(!exists(&kubectl, what), "{what} is left");
        }
        assert!(!kubectl.run(&["get", "clusterrole", "switchyard"]).ok);
    })
    .await;
}

#[tokio::test]
async fn the_packaged_chart_pushed_to_a_registry_installs_from_oci() {
    let registry = Registry::start().await;
    let sim = start_sim().await;
    let kubectl = Kubectl::new(&sim);
    let host = registry.host.clone();
    blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let archive =
            helm(json!({"action": "package", "chart": chart(), "destination": dir.path()}))
                .expect("package");
        assert!(
            archive.as_str().unwrap().ends_with("switchyard-0.1.0.tgz"),
            "{archive}"
        );
        helm(json!({"action": "push", "archive": archive,
            "remote": format!("oci://{host}/charts")}))
        .unwrap_or_else(|e| panic!("push: {e:?}"));

        let installed = release(
            &kubectl,
            json!({"action": "install",
            "chart": format!("oci://{host}/charts/switchyard"), "version": "0.1.0",
            "plain_http": true, "name": "switchyard", "create_namespace": true}),
        );
        assert_eq!(installed["chart_version"], "0.1.0", "{installed:#}");
        check_pod(&kubectl, 1);
    })
    .await;
    // What the registry holds is a Helm chart artifact.
    let url = format!(
        "http://{}/v2/charts/switchyard/manifests/0.1.0",
        registry.host
    );
    let manifest: Value = reqwest::Client::new()
        .get(url)
        .header("Accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.cncf.helm.config.v1+json"
    );
    assert_eq!(
        manifest["layers"][0]["mediaType"],
        "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    );
}
