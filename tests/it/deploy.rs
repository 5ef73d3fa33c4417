//! Running in a cluster: `switchyard rbac` applied with kubectl and read back, the Helm
//! chart's default install (one replica) applied (dry run, then for real) to the simulator,
//! and its manifests checked as the pod runs them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use switchyard::config::HaMode;

use crate::chart::helm::{rendered, stream};
use crate::support::process::switchyard;
use crate::support::sim::{Kubectl, blocking};
use crate::support::spawned;
use crate::support::{self, start_sim};

/// A kubectl run that must succeed; its stdout.
fn ok(kubectl: &Kubectl, args: &[&str]) -> String {
    let out = kubectl.run(args);
    assert!(out.ok, "kubectl {args:?} failed: {}", out.stderr);
    out.stdout
}

/// `kubectl get ... -o json`, parsed.
fn get_json(kubectl: &Kubectl, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    serde_json::from_str(&ok(kubectl, &args)).expect("kubectl prints JSON")
}

/// The verbs of the rule on `plural` in a (Cluster)Role read back with kubectl.
fn verbs_on(role: &Value, plural: &str) -> Vec<String> {
    let rules = role["rules"].as_array().expect("rules");
    let rule = rules
        .iter()
        .find(|r| r["resources"][0] == plural)
        .unwrap_or_else(|| panic!("no rule on {plural}: {role:#}"));
    assert_eq!(rule["resources"].as_array().unwrap().len(), 1);
    rule["verbs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the file");
    path
}

const ROUTER_CONFIG: &str = "\
handlers:
  guard:
    capabilities:
      configmaps: [apply, event]
      v1/pods: [delete]
  reader: {}
routes:
  - {name: team-cms, resource: configmaps, namespace: team-a, handler: guard}
  - {name: all-pods, resource: v1/pods, handler: guard}
  - {name: secrets, resource: secrets, namespaces: [team-a, team-b], handler: reader}
";

#[tokio::test]
async fn rbac_output_applied_with_kubectl_grants_what_the_config_needs() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "router.yaml", ROUTER_CONFIG);
    let (code, yaml, err) = switchyard(&[
        "rbac",
        "--config",
        config.to_str().unwrap(),
        "--namespace",
        "ops",
        "--name",
        "router",
    ]);
    assert_eq!(code, 0, "{err}");
    let sim = start_sim().await;
    let kubectl = Kubectl::new(&sim);
    let (roles, cluster_role, bindings, account) = blocking(move || {
        for ns in ["ops", "team-a", "team-b"] {
            ok(&kubectl, &["create", "namespace", ns]);
        }
        let applied = kubectl.run_with_input(&["apply", "-f", "-"], &yaml);
        assert!(applied.ok, "{}\n{yaml}", applied.stderr);
        let roles: Vec<Value> = ["team-a", "team-b"]
            .iter()
            .map(|ns| get_json(&kubectl, &["get", "role", "router", "-n", ns]))
            .collect();
        let bindings: Vec<Value> = ["team-a", "team-b"]
            .iter()
            .map(|ns| get_json(&kubectl, &["get", "rolebinding", "router", "-n", ns]))
            .chain([get_json(&kubectl, &["get", "clusterrolebinding", "router"])])
            .collect();
        let cluster_role = get_json(&kubectl, &["get", "clusterrole", "router"]);
        let account = get_json(&kubectl, &["get", "serviceaccount", "router", "-n", "ops"]);
        (roles, cluster_role, bindings, account)
    })
    .await;
    assert_eq!(account["metadata"]["namespace"], "ops");
    // team-a: the guard's configmaps (apply: create + patch; event: create on events) and
    // the reader's secrets; team-b: secrets only.
    assert_eq!(
        verbs_on(&roles[0], "configmaps"),
        ["create", "get", "list", "patch", "watch"]
    );
    assert_eq!(verbs_on(&roles[0], "events"), ["create"]);
    assert_eq!(verbs_on(&roles[0], "secrets"), ["get", "list", "watch"]);
    assert_eq!(roles[0]["rules"].as_array().unwrap().len(), 3);
    assert_eq!(verbs_on(&roles[1], "secrets"), ["get", "list", "watch"]);
    assert_eq!(roles[1]["rules"].as_array().unwrap().len(), 1);
    // Pods are watched in every namespace: a ClusterRole, with the guard's delete.
    assert_eq!(
        verbs_on(&cluster_role, "pods"),
        ["delete", "get", "list", "watch"]
    );
    assert_eq!(cluster_role["rules"].as_array().unwrap().len(), 1);
    for binding in &bindings {
        let subject = &binding["subjects"][0];
        assert_eq!(
            (&subject["kind"], &subject["name"], &subject["namespace"]),
            (&"ServiceAccount".into(), &"router".into(), &"ops".into()),
            "{binding:#}"
        );
        assert_eq!(binding["roleRef"]["name"], "router");
    }
    assert_eq!(bindings[0]["roleRef"]["kind"], "Role");
    assert_eq!(bindings[2]["roleRef"]["kind"], "ClusterRole");
}

/// Regression: with no `ha.lease_namespace`, the Role for the Lease went to the namespace
/// of the machine running `switchyard rbac` (`default`), not to the one the daemon elects
/// in: its pod's, which is the ServiceAccount's.
#[tokio::test]
async fn rbac_puts_the_lease_role_in_the_service_accounts_namespace_when_the_config_names_none() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "ha.yaml",
        "ha:\n  mode: leader\nhandlers:\n  h: {}\nroutes:\n  - {name: a, resource: configmaps, namespace: team-a, handler: h}\n",
    );
    let output = spawned::output(
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["rbac", "--namespace", "ops", "--config"])
            .arg(&config)
            .env_remove("POD_NAMESPACE"),
        "switchyard rbac",
    );
    assert!(output.status.success(), "{output:?}");
    let yaml = String::from_utf8(output.stdout).unwrap();
    let sim = start_sim().await;
    let kubectl = Kubectl::new(&sim);
    let (in_ops, in_default) = blocking(move || {
        for ns in ["ops", "team-a"] {
            ok(&kubectl, &["create", "namespace", ns]);
        }
        let applied = kubectl.run_with_input(&["apply", "-f", "-"], &yaml);
        assert!(applied.ok, "{}\n{yaml}", applied.stderr);
        let in_ops = get_json(&kubectl, &["get", "role", "switchyard", "-n", "ops"]);
        let in_default = kubectl.run(&["get", "role", "switchyard", "-n", "default"]);
        (in_ops, in_default)
    })
    .await;
    assert_eq!(verbs_on(&in_ops, "leases"), ["create", "get", "update"]);
    assert!(!in_default.ok, "a Role in default: {}", in_default.stdout);
    sim.stop().await;
}

#[test]
fn rbac_on_a_config_with_mistakes_exits_2_listing_them_and_prints_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "bad.yaml",
        "handlers:\n  h:\n    capabilities:\n      configmaps: [pach]\nroutes:\n  - {name: a, resource: configmaps, handler: g}\n",
    );
    let (code, out, err) = switchyard(&["rbac", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    let shown = config.display();
    assert!(
        err.contains(&format!(
            "{shown}:4:20: handlers.h.capabilities.configmaps[0]: unknown capability \"pach\": did you mean \"patch\"?"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{shown}:6:46: routes[0].handler: unknown handler \"g\"; did you mean \"h\"?"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("{shown}: 3 problem(s); nothing was printed")),
        "{err}"
    );
}

/// Names of the objects of the default install kubectl can get, as `kind/name` with namespace.
const OVERLAY_OBJECTS: [(&str, &str); 5] = [
    ("serviceaccount/switchyard", "switchyard"),
    ("deployment/switchyard", "switchyard"),
    ("clusterrole/switchyard", ""),
    ("clusterrolebinding/switchyard", ""),
    ("configmaps", "switchyard"),
];

/// Which of [`OVERLAY_OBJECTS`] exist (for configmaps: whether any is in the namespace).
fn stored(kubectl: &Kubectl) -> Vec<bool> {
    OVERLAY_OBJECTS
        .iter()
        .map(|(what, ns)| {
            let mut args = vec!["get", what, "-o", "name"];
            if !ns.is_empty() {
                args.extend(["-n", ns]);
            }
            let out = kubectl.run(&args);
            out.ok && !out.stdout.trim().is_empty()
        })
        .collect()
}

#[tokio::test]
async fn the_default_install_passes_a_server_dry_run_that_stores_nothing_then_applies() {
    let sim = start_sim().await;
    let kubectl = Kubectl::new(&sim);
    let manifests = kubectl.file("switchyard.yaml", &stream(&built_default()));
    let manifests = manifests.to_str().unwrap().to_string();
    blocking(move || {
        // A server dry run cannot create objects in a namespace it only pretends to create,
        // on a real API server as here: the namespace exists first.
        ok(&kubectl, &["create", "namespace", "switchyard"]);
        let dry = ok(&kubectl, &["apply", "--dry-run=server", "-f", &manifests]);
        for line in [
            "serviceaccount/switchyard created (server dry run)",
            "clusterrole.rbac.authorization.k8s.io/switchyard created (server dry run)",
            "clusterrolebinding.rbac.authorization.k8s.io/switchyard created (server dry run)",
            "deployment.apps/switchyard created (server dry run)",
            "service/switchyard-metrics created (server dry run)",
            "networkpolicy.networking.k8s.io/switchyard created (server dry run)",
        ] {
            assert!(dry.contains(line), "{dry}");
        }
        assert_eq!(stored(&kubectl), [false; 5], "a dry run stored something");

        let applied = ok(&kubectl, &["apply", "-f", &manifests]);
        assert!(
            applied.contains("deployment.apps/switchyard created"),
            "{applied}"
        );
        assert_eq!(stored(&kubectl), [true; 5]);

        // A dry-run change to a stored object answers with the change and keeps the object.
        let labelled = ok(
            &kubectl,
            &[
                "label",
                "deployment",
                "switchyard",
                "-n",
                "switchyard",
                "tier=dry",
                "--dry-run=server",
                "-o",
                "json",
            ],
        );
        let answer: Value = serde_json::from_str(&labelled).unwrap();
        assert_eq!(answer["metadata"]["labels"]["tier"], "dry");
        let deployment = get_json(
            &kubectl,
            &["get", "deployment", "switchyard", "-n", "switchyard"],
        );
        assert!(deployment["metadata"]["labels"].get("tier").is_none());
        assert_eq!(deployment["spec"]["replicas"], 1);
    })
    .await;
}

/// The documents the chart renders with its default values (one replica, release and
/// namespace `switchyard`).
pub(crate) fn built_default() -> Vec<Value> {
    rendered(json!({}))
}

/// The first document of `kind`.
pub(crate) fn find<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} rendered"))
}

/// The restricted container security context every container has.
fn assert_restricted(container: &Value) {
    let sc = &container["securityContext"];
    let name = &container["name"];
    assert_eq!(sc["runAsNonRoot"], true, "{name}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{name}"
    );
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{name}");
    assert!(container["resources"]["requests"].is_object(), "{name}");
    assert!(
        container["resources"]["limits"]["memory"].is_string(),
        "{name}"
    );
}

#[test]
fn the_default_install_runs_switchyard_restricted_with_probes_and_its_checked_config() {
    let documents = built_default();
    let deployment = find(&documents, "Deployment");
    assert_eq!(deployment["metadata"]["namespace"], "switchyard");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let pod = &deployment["spec"]["template"];
    for label in ["name", "instance", "component", "part-of", "version"] {
        let key = format!("app.kubernetes.io/{label}");
        assert!(pod["metadata"]["labels"][&key].is_string(), "{key}");
        assert!(deployment["metadata"]["labels"][&key].is_string(), "{key}");
    }
    for (key, value) in deployment["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&pod["metadata"]["labels"][key], value, "selector {key}");
    }
    let spec = &pod["spec"];
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &spec["containers"][0];
    assert_restricted(container);
    assert_restricted(&spec["initContainers"][0]);
    let ports = container["ports"].as_array().unwrap();
    let probes = ports
        .iter()
        .find(|p| p["name"] == "probes")
        .expect("a container port named probes");
    assert_eq!(probes["containerPort"], 9471);
    for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(get["port"], "probes", "{probe}");
    }

    // The service account exists and the ClusterRoleBinding binds it where it lives.
    let account = find(&documents, "ServiceAccount");
    assert_eq!(spec["serviceAccountName"], account["metadata"]["name"]);
    let binding = find(&documents, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["namespace"], "switchyard");

    // The config volume is the generated ConfigMap, mounted where the image reads it.
    let configmap = find(&documents, "ConfigMap");
    let volumes = spec["volumes"].as_array().unwrap();
    let config_volume = volumes.iter().find(|v| v["name"] == "config").unwrap();
    assert_eq!(
        config_volume["configMap"]["name"],
        configmap["metadata"]["name"]
    );
    let mounts = container["volumeMounts"].as_array().unwrap();
    let mounted = |name: &str| {
        mounts
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no {name} mount"))["mountPath"]
            .clone()
    };
    assert_eq!(mounted("config"), "/etc/switchyard");
    assert_eq!(mounted("plugins"), "/plugins");
    // The root filesystem is read-only: compiled plugins are cached in an emptyDir, and the
    // init container fills the plugins emptyDir.
    let empty_dir = |name: &str| {
        let volume = volumes.iter().find(|v| v["name"] == name).unwrap();
        assert!(volume["emptyDir"].is_object(), "{name}: {volume}");
    };
    empty_dir("cache");
    empty_dir("plugins");
    let env = container["env"].as_array().unwrap();
    let cache = env.iter().find(|e| e["name"] == "XDG_CACHE_HOME").unwrap();
    assert_eq!(cache["value"], mounted("cache"));
    assert_eq!(
        spec["initContainers"][0]["volumeMounts"][0]["name"],
        "plugins"
    );
    let dockerfile = std::fs::read_to_string(support::root().join("deploy/Dockerfile")).unwrap();
    assert!(dockerfile.contains("\"--config\", \"/etc/switchyard/config.yaml\"]"));

    // The config passes `switchyard check` with the example plugins the image carries in
    // /plugins (here: the same plugins built locally).
    let text = configmap["data"]["config.yaml"].as_str().unwrap();
    assert!(text.contains("\nplugins_dir: /plugins\n"), "{text}");
    let local = text.replace(
        "\nplugins_dir: /plugins\n",
        &format!("\nplugins_dir: {}\n", support::plugins_dir().display()),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "config.yaml", &local);
    let (code, out, err) = switchyard(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok (1 handler(s), 2 route(s)"), "{out}");
    // In-cluster credentials (no kubeconfig), and an admin API on the pod's loopback only.
    let loaded = switchyard::config::load(&config).unwrap();
    assert_eq!(loaded.kubeconfig, None);
    assert!(loaded.admin_listen.ip().is_loopback());
    // The kubelet reaches the probes listener: on every address, on the probes port.
    let probes_listen = loaded.probes_listen.expect("a probes listener");
    assert!(probes_listen.ip().is_unspecified(), "{probes_listen}");
    assert_eq!(
        probes["containerPort"].as_u64(),
        Some(u64::from(probes_listen.port()))
    );
}

#[test]
fn leader_mode_runs_two_replicas_electing_a_leader_with_the_lease_rbac_they_need() {
    several_replicas("leader", 2, HaMode::Leader, &["create", "get", "update"]);
}

#[test]
fn sharded_mode_runs_three_replicas_sharing_the_objects_with_the_lease_rbac_they_need() {
    several_replicas(
        "sharded",
        3,
        HaMode::Sharded,
        &["create", "delete", "get", "list", "update"],
    );
}

/// Checks the chart in `mode` with `replicas`: pods named by the downward API, a config in
/// `ha_mode`, and a Role with `verbs` on leases in the release's namespace.
fn several_replicas(mode: &str, replicas: u64, ha_mode: HaMode, verbs: &[&str]) {
    let documents = rendered(json!({"mode": mode, "replicas": replicas}));
    let kind = if mode == "sharded" {
        "StatefulSet"
    } else {
        "Deployment"
    };
    let workload = find(&documents, kind);
    assert_eq!(workload["spec"]["replicas"], replicas);
    let env = workload["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env");
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let var = env.iter().find(|v| v["name"] == name).expect(name);
        assert_eq!(var["valueFrom"]["fieldRef"]["fieldPath"], field, "{name}");
    }
    let text = find(&documents, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml in the ConfigMap");
    let config = switchyard::config::validate(Path::new("/etc/switchyard/config.yaml"), text)
        .expect("the rendered config is valid");
    assert_eq!(config.ha.mode, ha_mode);
    let role = find(&documents, "Role");
    assert_eq!(role["metadata"]["namespace"], "switchyard");
    assert_eq!(verbs_on(role, "leases"), verbs);
}
