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

/// The shell block of docs/cluster.md's "Install with Helm" that follows `heading`.
fn install_block(heading: &str) -> String {
    let doc = std::fs::read_to_string(support::root().join("docs/cluster.md")).unwrap();
    let after = &doc[doc
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"))..];
    let start = after.find("```sh\n").expect("a shell block") + "```sh\n".len();
    after[start..start + after[start..].find("```").unwrap()].to_string()
}

/// Runs a shell `block` with bash in `dir`, the built switchyard first on PATH.
fn run_block(block: &str, dir: &std::path::Path, env: &[(&str, &std::path::Path)]) {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_switchyard"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", block])
        .current_dir(dir)
        .env("PATH", path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{block}\nfailed: {err}");
}

/// A loopback address with a port nothing listens on now.
fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// docs/cluster.md's "Install with Helm", against the simulator: the values and the RBAC
/// made by the doc's own commands from the recipe's config, the Secret made by its kubectl
/// commands, then the chart installed from `oci://` as its `helm install` says (Helm's engine
/// instead of the helm binary), and the daemon run with the config the chart made, in the
/// daemon's namespace, until it is ready.
#[tokio::test]
async fn the_warning_events_recipe_installs_from_oci_as_the_docs_say() {
    let registry = Registry::start().await;
    let sim = start_sim().await;
    let kubectl = Kubectl::new(&sim);
    let host = registry.host.clone();
    let dir = tempfile::tempdir().unwrap();
    let (probes, admin) = (free_address(), free_address());
    let config = blocking({
        let dir = dir.path().to_path_buf();
        move || {
            // A release folder's recipe config, and the doc's steps 1 and 2 run as written.
            std::fs::create_dir(dir.join("recipes")).unwrap();
            let recipe = support::root().join("plugins/recipes/warning-events/switchyard.yaml");
            std::fs::copy(recipe, dir.join("recipes/warning-events.yaml")).unwrap();
            run_block(&install_block("**1. The values.**"), &dir, &[]);
            let kubeconfig = kubectl.kubeconfig();
            let secret = install_block("**2. Where the Warnings go.**");
            run_block(&secret, &dir, &[("KUBECONFIG", &kubeconfig)]);

            let archive =
                helm(json!({"action": "package", "chart": chart(), "destination": &dir}))
                    .expect("package");
            helm(json!({"action": "push", "archive": archive,
                "remote": format!("oci://{host}/charts")}))
            .unwrap_or_else(|e| panic!("push: {e:?}"));
            // Step 3: the two values files and the --set values of the doc's helm install.
            let install = install_block("**3. Install**");
            for set in [
                "-f warning-events-values.yaml -f rbac-values.json",
                "--set image.repository=REGISTRY/switchyard",
                "--set image.digest=",
                "--set plugins.initImage.enabled=false",
                "oci://REGISTRY/charts/switchyard --version 0.1.0 -n switchyard",
            ] {
                assert!(install.contains(set), "{set:?} is not in {install}");
            }
            let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
            let mut values: Value = serde_saphyr::from_str(&read("warning-events-values.yaml"))
                .expect("the values file is YAML");
            let rbac: Value = serde_json::from_str(&read("rbac-values.json")).unwrap();
            values["rbac"] = rbac["rbac"].clone();
            let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
            values["image"] = json!({"repository": format!("{host}/switchyard"), "digest": digest});
            values["plugins"] = json!({"initImage": {"enabled": false}});
            release(
                &kubectl,
                json!({"action": "install", "chart": format!("oci://{host}/charts/switchyard"),
                    "version": "0.1.0", "plain_http": true, "name": "switchyard", "values": values}),
            );
            let spec = get(&kubectl, "deployment/switchyard")["spec"]["template"]["spec"].clone();
            assert_eq!(spec["containers"][0]["image"], format!("{host}/switchyard@{digest}"));
            assert!(spec["initContainers"].is_null(), "{spec:#}");
            let config = get(&kubectl, "configmap/switchyard-config");
            config["data"]["config.yaml"].as_str().unwrap().to_string()
        }
    })
    .await;
    assert!(config.contains("plugin: builtin:webhook"), "{config}");

    // The pod's config, its listeners and volumes moved to this test's own.
    let config = config
        .replace("127.0.0.1:9470", &admin)
        .replace("0.0.0.0:9471", &probes)
        .replace(
            "/var/cache/switchyard",
            &dir.path().join("cache").display().to_string(),
        )
        .replace(
            "plugins_dir: /plugins",
            &format!("plugins_dir: {}", dir.path().display()),
        );
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).unwrap();
    let outside = Kubectl::new(&sim); // its kubeconfig file lives as long as it does
    let kubeconfig = outside.kubeconfig();
    let daemon = crate::support::process::Process::start(
        &["run", "--config", path.to_str().unwrap()],
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("POD_NAMESPACE", "switchyard"),
        ],
        &[],
    );
    // Ready: the Secret read, the Events informer synced.
    let url = format!("http://{probes}/readyz");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let status = reqwest::get(&url).await.map(|r| r.status().as_u16());
        if matches!(status, Ok(200)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not ready ({status:?}): {}",
            daemon.lines().join("\n")
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    daemon.terminate(std::time::Duration::from_secs(10));
}
