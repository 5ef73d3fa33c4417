//! The chart rendered by Helm's engine: lint, each mode's workload, the restricted pod, the
//! opt-in monitoring objects, and RBAC equal to `switchyard rbac`'s.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::helm::{all, chart, config_of, find, helm, render, rendered};
use crate::support::{self, process::switchyard};

#[test]
fn the_chart_lints_clean_in_strict_mode() {
    for values in [
        json!({}),
        json!({"mode": "leader", "replicas": 2, "serviceMonitor": {"enabled": true}}),
        json!({"mode": "sharded", "replicas": 3, "persistence": {"enabled": true},
               "prometheusRule": {"enabled": true}, "grafanaDashboard": {"enabled": true}}),
    ] {
        let report =
            helm(json!({"action": "lint", "chart": chart(), "values": values})).expect("lint runs");
        assert_eq!(report["errors"], json!([]), "{report:#}");
        let serious: Vec<&Value> = report["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["severity"].as_u64() > Some(1))
            .collect();
        assert!(serious.is_empty(), "{values}: {serious:#?}");
    }
}

/// The daemon's container and the pod spec of the workload of `kind`.
fn pod(documents: &[Value], kind: &str) -> (Value, Value) {
    let spec = find(documents, kind, "switchyard")["spec"]["template"]["spec"].clone();
    (spec["containers"][0].clone(), spec)
}

/// The value of the container's environment variable `name`.
fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
    let found = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name);
    &found.unwrap_or_else(|| panic!("no {name} in {container:#}"))["value"]
}

#[test]
fn one_replica_runs_restricted_with_json_logs_probes_and_its_config_filled_in() {
    let documents = rendered(json!({}));
    let deployment = find(&documents, "Deployment", "switchyard");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    let (container, spec) = pod(&documents, "Deployment");
    assert_eq!(spec["securityContext"]["runAsUser"], 65532);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    for c in [&container, &spec["initContainers"][0]] {
        let context = &c["securityContext"];
        assert_eq!(context["readOnlyRootFilesystem"], true, "{c:#}");
        assert_eq!(context["allowPrivilegeEscalation"], false);
        assert_eq!(context["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(context["seccompProfile"]["type"], "RuntimeDefault");
    }
    assert_eq!(container["image"], "switchyard:0.1.0");
    assert_eq!(
        spec["initContainers"][0]["image"],
        "switchyard-plugins:0.1.0"
    );
    assert_eq!(env(&container, "SWITCHYARD_LOG_FORMAT"), "json");
    assert_eq!(container["ports"][0]["containerPort"], 9471);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["resources"]["limits"]["memory"], "512Mi");

    let config = config_of(&documents);
    assert_eq!(config["plugins_dir"], "/plugins");
    assert_eq!(config["admin"]["probes_listen"], "0.0.0.0:9471");
    assert_eq!(config["oci"]["cache_dir"], "/var/cache/switchyard/oci");
    assert!(config.get("ha").is_none(), "{config:#}");
    assert_eq!(config["handlers"]["log-events"]["memory"], "32Mi");
    assert!(all(&documents, "PodDisruptionBudget").is_empty());
    assert!(spec.get("topologySpreadConstraints").is_none());
    let service = find(&documents, "Service", "switchyard-metrics");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "probes");
    let policy = find(&documents, "NetworkPolicy", "switchyard");
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], "probes");
}

#[test]
fn extra_env_and_volumes_reach_the_pod_for_a_private_registrys_credentials() {
    let values = json!({
        "imagePullSecrets": [{"name": "pull"}],
        "extraEnv": [{"name": "SWITCHYARD_REGISTRY_AUTH", "value": "/etc/registry/.dockerconfigjson"}],
        "extraVolumes": [{"name": "registry", "secret": {"secretName": "registry-auth"}}],
        "extraVolumeMounts": [{"name": "registry", "mountPath": "/etc/registry", "readOnly": true}],
    });
    let documents = rendered(values);
    let (container, spec) = pod(&documents, "Deployment");
    assert_eq!(
        env(&container, "SWITCHYARD_REGISTRY_AUTH"),
        "/etc/registry/.dockerconfigjson"
    );
    // The chart's own variables stay.
    assert_eq!(env(&container, "SWITCHYARD_LOG_FORMAT"), "json");
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "registry")
        .unwrap_or_else(|| panic!("no registry mount: {container:#}"));
    assert_eq!(mount["mountPath"], "/etc/registry");
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "registry")
        .unwrap_or_else(|| panic!("no registry volume: {spec:#}"));
    assert_eq!(volume["secret"]["secretName"], "registry-auth");
    assert!(
        spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "cache")
    );
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "pull"}]));
}

#[test]
fn several_replicas_roll_spread_and_keep_all_but_one_through_a_drain() {
    for (mode, kind) in [("leader", "Deployment"), ("sharded", "StatefulSet")] {
        let documents = rendered(json!({"mode": mode, "replicas": 3}));
        let workload = find(&documents, kind, "switchyard");
        assert_eq!(workload["spec"]["replicas"], 3, "{mode}");
        assert_eq!(config_of(&documents)["ha"]["mode"], mode);
        let budget = find(&documents, "PodDisruptionBudget", "switchyard");
        assert_eq!(budget["spec"]["maxUnavailable"], 1);
        let (container, spec) = pod(&documents, kind);
        let spread = spec["topologySpreadConstraints"].as_array().unwrap();
        let keys: Vec<&Value> = spread.iter().map(|c| &c["topologyKey"]).collect();
        assert_eq!(
            keys,
            ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
        );
        assert_eq!(spread[0]["whenUnsatisfiable"], "DoNotSchedule");
        let env_names: Vec<&Value> = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["name"])
            .collect();
        assert!(env_names.contains(&&json!("POD_NAME")), "{mode}");
    }
    let leader = rendered(json!({"mode": "leader", "replicas": 2}));
    let strategy = &find(&leader, "Deployment", "switchyard")["spec"]["strategy"];
    assert_eq!(
        strategy["rollingUpdate"],
        json!({"maxSurge": 1, "maxUnavailable": 0})
    );
}

#[test]
fn persistence_is_one_claim_or_one_per_replica_in_sharded_mode() {
    let single = rendered(json!({"persistence": {"enabled": true, "size": "2Gi"}}));
    let claim = find(&single, "PersistentVolumeClaim", "switchyard-state");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "2Gi");
    assert_eq!(config_of(&single)["state_dir"], "/var/lib/switchyard");
    let (container, spec) = pod(&single, "Deployment");
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "state");
    assert_eq!(
        volume.unwrap()["persistentVolumeClaim"]["claimName"],
        "switchyard-state"
    );
    assert!(
        container["volumeMounts"]
            .to_string()
            .contains("/var/lib/switchyard")
    );

    let sharded =
        rendered(json!({"mode": "sharded", "replicas": 3, "persistence": {"enabled": true}}));
    assert!(all(&sharded, "PersistentVolumeClaim").is_empty());
    let set = find(&sharded, "StatefulSet", "switchyard");
    assert_eq!(
        set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
        "state"
    );

    let refused =
        render(json!({"mode": "leader", "replicas": 2, "persistence": {"enabled": true}}));
    assert!(
        refused
            .unwrap_err()
            .contains("cannot share one state store")
    );
}

#[test]
fn a_config_contradicting_the_chart_is_refused_with_what_to_change() {
    let config = json!({"handlers": {"h": {"plugin": "oci://registry.example/plugins/h:1.0"}},
                        "routes": [{"name": "r", "resource": "configmaps", "handler": "h"}]});
    let message = render(json!({"config": config})).unwrap_err();
    assert!(
        message.contains(
            "config.handlers.h.plugin: oci://registry.example/plugins/h:1.0 is not pinned by digest"
        ),
        "{message}"
    );
    let pinned = format!("oci://registry.example/plugins/h@sha256:{}", "a".repeat(64));
    let mut config = config;
    config["handlers"]["h"]["plugin"] = json!(pinned);
    let documents =
        rendered(json!({"config": config, "plugins": {"initImage": {"enabled": false}}}));
    let (_, spec) = pod(&documents, "Deployment");
    assert!(spec.get("initContainers").is_none());
    assert_eq!(
        config_of(&documents)["handlers"]["h"]["plugin"],
        json!(pinned)
    );

    config["ha"] = json!({"mode": "sharded"});
    let message = render(json!({"config": config, "mode": "leader", "replicas": 2})).unwrap_err();
    assert!(
        message.contains("config.ha.mode is sharded but mode is leader"),
        "{message}"
    );
}

#[test]
fn monitoring_objects_are_opt_in_and_hold_the_shipped_rules_and_dashboard() {
    let plain = rendered(json!({}));
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(all(&plain, kind).is_empty(), "{kind}");
    }
    assert_eq!(all(&plain, "ConfigMap").len(), 1);
    let documents = rendered(json!({"serviceMonitor": {"enabled": true},
        "prometheusRule": {"enabled": true}, "grafanaDashboard": {"enabled": true}}));
    let monitor = find(&documents, "ServiceMonitor", "switchyard");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    let service = find(&documents, "Service", "switchyard-metrics");
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][key], value, "{key}");
    }
    let rules: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart().join("files/alerts.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        find(&documents, "PrometheusRule", "switchyard")["spec"],
        rules
    );
    let dashboard = find(&documents, "ConfigMap", "switchyard-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value = serde_json::from_str(dashboard["data"]["switchyard.json"].as_str().unwrap())
        .expect("the dashboard is JSON");
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(support::root().join("deploy/grafana/switchyard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(json, shipped);
}

#[test]
fn the_charts_dashboard_is_a_copy_of_deploy_grafana() {
    let copy = std::fs::read(chart().join("files/switchyard-dashboard.json")).unwrap();
    let shipped = std::fs::read(support::root().join("deploy/grafana/switchyard.json")).unwrap();
    assert!(
        copy == shipped,
        "deploy/chart/switchyard/files/switchyard-dashboard.json differs from deploy/grafana/switchyard.json: copy it over"
    );
}

#[test]
fn the_charts_alert_rules_are_a_copy_of_deploy_alerts() {
    let copy = std::fs::read(chart().join("files/alerts.yaml")).unwrap();
    let shipped =
        std::fs::read(support::root().join("deploy/alerts/switchyard.rules.yaml")).unwrap();
    assert!(
        copy == shipped,
        "deploy/chart/switchyard/files/alerts.yaml differs from deploy/alerts/switchyard.rules.yaml: copy it over"
    );
}

/// RBAC as a set: (namespace, or "" for the cluster; group; resource; names) → verbs.
type Grants = BTreeMap<(String, String, String, Vec<String>), BTreeSet<String>>;

/// The grants of the (Cluster)Roles among `documents`.
fn grants(documents: &[Value]) -> Grants {
    let mut grants = Grants::new();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().map_or_else(Vec::new, |a| {
            a.iter().map(|s| s.as_str().unwrap().to_string()).collect()
        })
    };
    for role in documents
        .iter()
        .filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole")
    {
        let namespace = role["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        for rule in role["rules"].as_array().unwrap() {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    let mut names = strings(&rule["resourceNames"]);
                    names.sort();
                    let key = (namespace.clone(), group.clone(), resource, names);
                    grants
                        .entry(key)
                        .or_default()
                        .extend(strings(&rule["verbs"]));
                }
            }
        }
    }
    grants
}

/// What `switchyard rbac` grants for `config` run in namespace `switchyard`.
fn switchyard_rbac(config: &Value) -> Grants {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, serde_json::to_string(config).unwrap()).unwrap();
    let path = path.to_str().unwrap();
    let (code, out, err) = switchyard(&["rbac", "--config", path, "--namespace", "switchyard"]);
    assert_eq!(code, 0, "{err}");
    grants(&serde_saphyr::from_multiple::<Value>(&out).unwrap())
}

/// `switchyard rbac --helm-values` for `config`.
fn helm_values(config: &Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, serde_json::to_string(config).unwrap()).unwrap();
    let (code, out, err) =
        switchyard(&["rbac", "--config", path.to_str().unwrap(), "--helm-values"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn the_default_rbac_values_are_what_switchyard_rbac_prints_for_the_default_config() {
    let config: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart().join("files/config.yaml")).unwrap(),
    )
    .unwrap();
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let mut fresh = helm_values(&config)["rbac"].clone();
    fresh["create"] = json!(true);
    assert_eq!(
        values["rbac"], fresh,
        "values.yaml's rbac is not what `switchyard rbac --config deploy/chart/switchyard/files/config.yaml --helm-values` prints"
    );
}

#[test]
fn the_charts_rbac_is_switchyard_rbacs_for_the_default_config_in_every_mode_and_each_recipe() {
    for (mode, replicas) in [("single", 1), ("leader", 2), ("sharded", 3)] {
        let documents = rendered(json!({"mode": mode, "replicas": replicas}));
        assert_eq!(
            grants(&documents),
            switchyard_rbac(&config_of(&documents)),
            "{mode}"
        );
    }
    let recipes = support::root().join("plugins/recipes");
    let mut seen = 0;
    for recipe in std::fs::read_dir(recipes).unwrap() {
        let path = recipe.unwrap().path().join("switchyard.yaml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let config: Value = serde_saphyr::from_str(&text).unwrap();
        let mut values = helm_values(&config);
        values["config"] = config;
        let documents = rendered(values);
        assert_eq!(
            grants(&documents),
            switchyard_rbac(&config_of(&documents)),
            "{}",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 5, "only {seen} recipes");
}
