//! The shipped manifests as a platform engineer reads them, rendered from the Helm chart in
//! each mode: the NetworkPolicy, and the image's user as the pod runs it. (Rollouts, spread,
//! budgets and monitoring: tests/it/chart/render.rs.)

use serde_json::{Value, json};

use crate::chart::helm::rendered;
use crate::deploy::find;

/// The chart's documents in mode `name` (`single`, `leader` or `sharded`).
fn built(name: &str) -> Vec<Value> {
    let replicas = match name {
        "single" => 1,
        "leader" => 2,
        _ => 3,
    };
    rendered(json!({"mode": name, "replicas": replicas}))
}

/// Whether the label selector `selector` (`matchLabels` only) selects `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let wanted = selector["matchLabels"].as_object().expect("matchLabels");
    !wanted.is_empty() && wanted.iter().all(|(key, value)| &labels[key] == value)
}

/// The labels of the workload's pods.
fn pod_labels(documents: &[Value]) -> &Value {
    let workload = documents
        .iter()
        .find(|d| d["kind"] == "Deployment" || d["kind"] == "StatefulSet")
        .expect("a workload");
    &workload["spec"]["template"]["metadata"]["labels"]
}

#[test]
fn the_network_policy_lets_in_only_the_probes_port_and_out_only_the_api_server_and_dns() {
    for name in ["single", "leader", "sharded"] {
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
fn the_plugins_image_is_built_without_the_daemon_and_has_the_steps_buildah_builds_it_with() {
    let root = crate::support::root();
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let dockerfile = read("deploy/Dockerfile");
    // The stage the plugins image copies from builds the plugins' workspace alone.
    let build = stage(&dockerfile, "FROM rust:1.99-bookworm AS plugin-build").join("\n");
    let cargo_builds: Vec<&str> = build.matches("cargo build").collect();
    assert_eq!(cargo_builds.len(), 1, "{build}");
    assert!(
        build.contains("cargo build --release --locked --manifest-path plugins/Cargo.toml"),
        "{build}"
    );
    let docker = stage(&dockerfile, "FROM scratch AS plugins");
    assert!(
        docker
            .iter()
            .all(|l| !l.starts_with("COPY") || l.contains("--from=plugin-build")),
        "the plugins image copies from the build of the daemon: {docker:?}"
    );
    // The same steps as scripts/release.sh's buildah build, from another layout of the files.
    let buildah = stage(&read("deploy/image/Containerfile.plugins"), "FROM scratch");
    let docker_rest: Vec<&String> = docker.iter().filter(|l| !l.starts_with("COPY")).collect();
    let buildah_rest: Vec<&String> = buildah.iter().filter(|l| !l.starts_with("COPY")).collect();
    assert_eq!(
        docker_rest.len(),
        buildah_rest.len(),
        "{docker:?} {buildah:?}"
    );
    for (d, b) in docker_rest.iter().zip(&buildah_rest) {
        assert_eq!(d.replace("FROM scratch AS plugins", "FROM scratch"), **b);
    }
    assert!(
        buildah.contains(&"ENTRYPOINT [\"/usr/local/bin/copy-plugins\"]".to_string()),
        "{buildah:?}"
    );
}
