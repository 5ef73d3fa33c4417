//! The shipped manifests as a platform engineer reads them, built with `kubectl kustomize`:
//! how each overlay rolls, spreads and survives a drain, the metrics Service and the
//! optional ServiceMonitor, and the NetworkPolicy.

use serde_json::Value;

use crate::deploy::{build, find, overlay};

/// The documents of the overlay `name`.
fn built(name: &str) -> Vec<Value> {
    build(overlay(name).to_str().unwrap())
}

/// Every document of `kind`.
fn all<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

/// Whether the label selector `selector` (`matchLabels` only) selects `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let wanted = selector["matchLabels"].as_object().expect("matchLabels");
    !wanted.is_empty() && wanted.iter().all(|(key, value)| &labels[key] == value)
}

/// The labels of the Deployment's pods.
fn pod_labels(documents: &[Value]) -> &Value {
    &find(documents, "Deployment")["spec"]["template"]["metadata"]["labels"]
}

#[test]
fn one_replica_is_replaced_by_stopping_it_first_and_several_roll_one_more_at_a_time() {
    let single = built("single");
    let strategy = &find(&single, "Deployment")["spec"]["strategy"];
    assert_eq!(strategy["type"], "Recreate", "{strategy:#}");
    assert!(strategy.get("rollingUpdate").is_none(), "{strategy:#}");
    for name in ["ha", "sharded"] {
        let documents = built(name);
        let strategy = &find(&documents, "Deployment")["spec"]["strategy"];
        assert_eq!(strategy["type"], "RollingUpdate", "{name}: {strategy:#}");
        assert_eq!(strategy["rollingUpdate"]["maxUnavailable"], 0, "{name}");
        assert_eq!(strategy["rollingUpdate"]["maxSurge"], 1, "{name}");
    }
}

#[test]
fn several_replicas_are_spread_over_nodes_and_a_drain_takes_one_at_a_time() {
    assert!(all(&built("single"), "PodDisruptionBudget").is_empty());
    for name in ["ha", "sharded"] {
        let documents = built(name);
        let labels = pod_labels(&documents);
        let budget = find(&documents, "PodDisruptionBudget");
        assert_eq!(budget["metadata"]["namespace"], "switchyard", "{name}");
        assert_eq!(budget["spec"]["maxUnavailable"], 1, "{name}");
        assert!(selects(&budget["spec"]["selector"], labels), "{name}");
        let spread =
            find(&documents, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"]
                .as_array()
                .unwrap_or_else(|| panic!("{name}: no topologySpreadConstraints"));
        let by = |key: &str| {
            spread
                .iter()
                .find(|c| c["topologyKey"] == key)
                .unwrap_or_else(|| panic!("{name}: no spread over {key}"))
        };
        let nodes = by("kubernetes.io/hostname");
        assert_eq!(nodes["whenUnsatisfiable"], "DoNotSchedule", "{name}");
        assert_eq!(nodes["maxSkew"], 1, "{name}");
        assert!(selects(&nodes["labelSelector"], labels), "{name}");
        assert!(selects(
            &by("topology.kubernetes.io/zone")["labelSelector"],
            labels
        ));
    }
}

#[test]
fn the_metrics_service_reaches_the_probes_port_and_the_optional_servicemonitor_scrapes_it() {
    let documents = built("sharded");
    let labels = pod_labels(&documents);
    let service = find(&documents, "Service");
    assert_eq!(service["metadata"]["namespace"], "switchyard");
    let selector = &service["spec"]["selector"];
    for (key, value) in selector.as_object().unwrap() {
        assert_eq!(&labels[key], value, "selector {key}");
    }
    let port = &service["spec"]["ports"][0];
    assert_eq!(port["name"], "metrics");
    let container = &find(&documents, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let probes = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == port["targetPort"])
        .expect("the Service's targetPort is a container port");
    assert_eq!(probes["containerPort"], 9471);

    // The component, added to an overlay, scrapes that Service's port in its namespace.
    let dir = tempfile::tempdir().unwrap();
    let up = "../".repeat(dir.path().components().count() - 1);
    let repo = crate::support::root();
    let repo = repo.to_str().unwrap().trim_start_matches('/');
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: switchyard\nresources:\n  - {up}{repo}/deploy/kustomize/overlays/sharded\ncomponents:\n  - {up}{repo}/deploy/kustomize/components/servicemonitor\n"
        ),
    )
    .unwrap();
    let with_monitor = build(dir.path().to_str().unwrap());
    let monitor = find(&with_monitor, "ServiceMonitor");
    assert_eq!(monitor["metadata"]["namespace"], "switchyard");
    assert!(selects(
        &monitor["spec"]["selector"],
        &service["metadata"]["labels"]
    ));
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["path"], "/metrics");
}

#[test]
fn the_network_policy_lets_in_only_the_probes_port_and_out_only_the_api_server_and_dns() {
    for name in ["single", "ha", "sharded"] {
        let documents = built(name);
        let policy = find(&documents, "NetworkPolicy");
        let spec = &policy["spec"];
        assert!(
            selects(&spec["podSelector"], pod_labels(&documents)),
            "{name}"
        );
        assert_eq!(
            spec["policyTypes"],
            serde_json::json!(["Ingress", "Egress"])
        );
        let ingress = spec["ingress"].as_array().unwrap();
        assert_eq!(ingress.len(), 1, "{name}");
        assert_eq!(
            ingress[0]["ports"],
            serde_json::json!([{"port": "probes", "protocol": "TCP"}]),
            "{name}"
        );
        let mut out: Vec<(String, u64)> = spec["egress"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|rule| rule["ports"].as_array().unwrap().clone())
            .map(|p| {
                (
                    p["protocol"].as_str().unwrap().to_string(),
                    p["port"].as_u64().unwrap(),
                )
            })
            .collect();
        out.sort();
        let expected = [("TCP", 53), ("TCP", 443), ("TCP", 6443), ("UDP", 53)]
            .map(|(protocol, port)| (protocol.to_string(), port));
        assert_eq!(out, expected, "{name}");
    }
}

/// The instructions of a Dockerfile-syntax text from its line `from` on (comments and blank
/// lines left out), up to the next `FROM` after it.
fn stage(text: &str, from: &str) -> Vec<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let start = lines
        .iter()
        .position(|l| *l == from)
        .unwrap_or_else(|| panic!("no line {from:?} in\n{text}"));
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.starts_with("FROM "))
        .map_or(lines.len(), |i| start + 1 + i);
    lines[start..end].iter().map(|l| l.to_string()).collect()
}

#[test]
fn the_image_built_without_docker_has_the_steps_of_the_dockerfiles_runtime_stage() {
    let root = crate::support::root();
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let docker = stage(&read("deploy/Dockerfile"), "FROM scratch AS switchyard");
    let buildah = stage(&read("deploy/image/Containerfile"), "FROM scratch");
    // The same steps; only where the laid-out file system comes from differs.
    let docker: Vec<String> = docker
        .iter()
        .map(|l| {
            l.replace("FROM scratch AS switchyard", "FROM scratch")
                .replace("COPY --from=build /out/rootfs /", "COPY rootfs /")
        })
        .collect();
    assert_eq!(docker, buildah);
    assert_eq!(buildah[1], "COPY rootfs /");
    // The user the Deployment runs as, and no other file than rootfs.sh lays out.
    assert!(
        buildah.contains(&"USER 65532:65532".to_string()),
        "{buildah:?}"
    );
    let deployment = find(&built("single"), "Deployment").clone();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"],
        65532
    );
    assert_eq!(buildah.len(), 4, "{buildah:?}");
}

#[test]
fn the_state_volume_component_mounts_a_claim_where_the_documented_state_dir_is() {
    let dir = tempfile::tempdir().unwrap();
    let up = "../".repeat(dir.path().components().count() - 1);
    let repo = crate::support::root();
    let repo = repo.to_str().unwrap().trim_start_matches('/');
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: switchyard\nresources:\n  - {up}{repo}/deploy/kustomize/overlays/single\ncomponents:\n  - {up}{repo}/deploy/kustomize/components/state-volume\n"
        ),
    )
    .unwrap();
    let documents = build(dir.path().to_str().unwrap());
    let claim = find(&documents, "PersistentVolumeClaim");
    assert_eq!(claim["metadata"]["namespace"], "switchyard");
    assert_eq!(
        claim["spec"]["accessModes"],
        serde_json::json!(["ReadWriteOnce"])
    );
    let deployment = find(&documents, "Deployment");
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    let pod = &deployment["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "state")
        .expect("a state volume");
    assert_eq!(
        volume["persistentVolumeClaim"]["claimName"],
        claim["metadata"]["name"]
    );
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "state")
        .expect("the state volume mounted in switchyard's container");
    assert_eq!(mount["mountPath"], "/var/lib/switchyard");
    assert!(mount.get("readOnly").is_none_or(|r| r == false));
    // The single overlay alone has no claim.
    assert!(all(&built("single"), "PersistentVolumeClaim").is_empty());
}
