use std::path::Path;

use serde_json::json;

use super::*;

const FILE: &str = "
tenancy:
  resources: [pods, configmaps]
  http: [\"https://*.example.com\"]
  registries: [registry.example.com/team-plugins]
  max_concurrency: 2
handlers:
  audit: {plugin: builtin:webhook, config: {url: \"https://audit.example.com\"}, capabilities: {http: [\"https://audit.example.com\"]}}
routes:
  - {name: audit, resource: configmaps, handler: audit}
";

fn handler(namespace: &str, name: &str, spec: Value) -> TeamResource {
    TeamResource {
        kind: TeamKind::Handler,
        namespace: namespace.into(),
        name: name.into(),
        generation: Some(1),
        spec,
    }
}

fn route(namespace: &str, name: &str, spec: Value) -> TeamResource {
    TeamResource {
        kind: TeamKind::Route,
        namespace: namespace.into(),
        name: name.into(),
        generation: Some(3),
        spec,
    }
}

fn notify() -> Value {
    json!({"plugin": "builtin:webhook", "service_account": "runner",
           "config": {"url": "https://hooks.example.com/a"},
           "capabilities": {"http": ["https://hooks.example.com"]}})
}

fn merged(resources: &[TeamResource]) -> Merged {
    merge(Path::new("switchyard.yaml"), FILE, resources).expect("the file is valid")
}

#[test]
fn a_teams_handler_and_route_join_the_files_own_with_their_owner() {
    let m = merged(&[
        handler("team-a", "notify", notify()),
        route(
            "team-a",
            "pods",
            json!({"resource": "pods", "handler": "notify"}),
        ),
    ]);
    assert!(
        m.verdicts.iter().all(|v| v.problems.is_empty()),
        "{:#?}",
        m.verdicts
    );
    let h = m
        .config
        .handlers
        .iter()
        .find(|h| h.name == "team-a.notify")
        .expect("merged");
    let owner = h.owner.as_ref().expect("a team handler has an owner");
    assert_eq!(owner.user(), "system:serviceaccount:team-a:runner");
    let r = m
        .config
        .routes
        .iter()
        .find(|r| r.name == "team-a.pods")
        .expect("merged");
    assert_eq!(r.handler, "team-a.notify");
    assert_eq!(r.owner.as_ref().unwrap().service_account, "runner");
    let own_watch = m
        .config
        .informers
        .iter()
        .find(|i| i.name == "route:team-a.pods")
        .unwrap();
    assert_eq!(own_watch.namespaces, ["team-a"]);
    assert!(
        m.config
            .handlers
            .iter()
            .any(|h| h.name == "audit" && h.owner.is_none())
    );
}

#[test]
fn a_malformed_handler_is_left_out_with_the_located_message_and_its_route_too() {
    let mut bad = notify();
    bad["timeout"] = json!("soon");
    let m = merged(&[
        handler("team-a", "notify", bad),
        route(
            "team-a",
            "pods",
            json!({"resource": "pods", "handler": "notify"}),
        ),
        handler("team-b", "notify", notify()),
        route(
            "team-b",
            "pods",
            json!({"resource": "pods", "handler": "notify"}),
        ),
    ]);
    let problems: Vec<&Vec<String>> = m.verdicts.iter().map(|v| &v.problems).collect();
    assert_eq!(problems[0].len(), 1, "{problems:#?}");
    assert!(
        problems[0][0].starts_with("spec.timeout: "),
        "{problems:#?}"
    );
    assert_eq!(
        problems[1],
        &["spec.handler: the Handler \"notify\" in namespace team-a is not valid"]
    );
    assert!(
        problems[2].is_empty() && problems[3].is_empty(),
        "{problems:#?}"
    );
    let names: Vec<&str> = m.config.routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["audit", "team-b.pods"]);
}

#[test]
fn a_route_on_another_namespace_is_refused() {
    let m = merged(&[
        handler("team-a", "notify", notify()),
        route(
            "team-a",
            "spy",
            json!({"resource": "pods", "namespace": "team-b", "handler": "notify"}),
        ),
        route(
            "team-a",
            "spy2",
            json!({"resource": "pods", "namespaces": ["team-a", "team-b"], "handler": "notify"}),
        ),
    ]);
    assert_eq!(
        m.verdicts[1].problems,
        ["spec.namespace: a Route watches only its own namespace (team-a)"]
    );
    assert_eq!(
        m.verdicts[2].problems,
        ["spec.namespaces: a Route watches only its own namespace (team-a)"]
    );
    assert!(
        m.config
            .routes
            .iter()
            .all(|r| !r.name.starts_with("team-a.spy"))
    );
}

#[test]
fn the_tenancy_ceilings_hold() {
    let mut outside = notify();
    outside["capabilities"] = json!({"http": ["https://evil.test"]});
    let mut big = notify();
    big["concurrency"] = json!(3);
    big["memory"] = json!("512Mi");
    let mut unpinned = notify();
    unpinned["plugin"] = json!("oci://ghcr.io/someone/sink:v1");
    let mut allowed = notify();
    allowed["plugin"] = json!("oci://registry.example.com/team-plugins/sink:v1");
    let m = merged(&[
        handler("team-a", "outside", outside),
        handler("team-a", "big", big),
        handler("team-a", "unpinned", unpinned),
        handler("team-a", "allowed", allowed),
        handler("team-a", "nosa", json!({"plugin": "builtin:webhook"})),
        handler(
            "team-a",
            "local",
            json!({"plugin": "notify", "service_account": "runner"}),
        ),
    ]);
    let p = |i: usize| m.verdicts[i].problems.join("\n");
    assert_eq!(
        p(0),
        "spec.capabilities.http: https://evil.test is not within tenancy.http"
    );
    assert!(
        p(1).contains("spec.concurrency: 3 is above tenancy.max_concurrency (2)"),
        "{}",
        p(1)
    );
    assert!(
        p(1).contains("spec.memory: 536870912 bytes is above tenancy.max_memory"),
        "{}",
        p(1)
    );
    assert!(p(2).contains("is not pinned by digest"), "{}", p(2));
    assert_eq!(p(3), "");
    assert!(
        p(4).starts_with("spec.service_account: Required"),
        "{}",
        p(4)
    );
    assert!(
        p(5).contains("an oci:// reference or builtin:NAME"),
        "{}",
        p(5)
    );
}

#[test]
fn without_a_tenancy_section_every_resource_is_refused_and_the_file_runs() {
    let file = "handlers: {a: {plugin: builtin:webhook}}\nroutes: [{name: a, resource: pods, handler: a}]\n";
    let m = merge(
        Path::new("f.yaml"),
        file,
        &[handler("team-a", "notify", notify())],
    )
    .unwrap();
    assert!(m.verdicts[0].problems[0].contains("no `tenancy:` section"));
    assert_eq!(m.config.handlers.len(), 1);
}

#[test]
fn the_files_own_mistakes_fail_the_merge() {
    let file = format!("{FILE}  - {{name: broken, resource: pods, handler: nowhere}}\n");
    let e = merge(Path::new("f.yaml"), &file, &[]).unwrap_err();
    assert!(e.to_string().contains("unknown handler \"nowhere\""), "{e}");
}

#[test]
fn with_tenancy_the_file_needs_no_routes_of_its_own() {
    let file = "tenancy: {}\n";
    let m = merge(Path::new("f.yaml"), file, &[]).expect("valid without routes");
    assert!(m.config.routes.is_empty());
}

#[test]
fn a_route_watches_only_the_resources_tenancy_allows_with_its_own_watch() {
    let m = merged(&[
        handler("team-a", "notify", notify()),
        route(
            "team-a",
            "secrets",
            json!({"resource": "secrets", "handler": "notify"}),
        ),
        route(
            "team-a",
            "shared",
            json!({"informer": "anything", "handler": "notify"}),
        ),
        route(
            "team-a",
            "cms",
            json!({"resource": "v1/configmaps", "handler": "notify"}),
        ),
    ]);
    assert_eq!(
        m.verdicts[1].problems,
        ["spec.resource: \"secrets\" is not among tenancy.resources (v1/pods, v1/configmaps)"]
    );
    assert!(
        m.verdicts[2].problems[0]
            .starts_with("spec.informer: a team Route watches its own namespace"),
        "{:?}",
        m.verdicts[2]
    );
    assert!(m.verdicts[3].problems.is_empty(), "{:?}", m.verdicts[3]);
}

#[test]
fn a_team_handler_reads_only_secrets_of_its_namespace() {
    let with = |value: Value| {
        let mut spec = notify();
        spec["config"]["headers"] = json!({"authorization": {"valueFrom": value}});
        spec
    };
    let m = merged(&[
        handler(
            "team-a",
            "own",
            with(json!({"secretKeyRef": {"name": "hook", "key": "token"}})),
        ),
        handler(
            "team-a",
            "theirs",
            with(json!({"secretKeyRef": {"namespace": "team-b", "name": "hook", "key": "token"}})),
        ),
        handler(
            "team-a",
            "env",
            with(json!({"env": "AWS_SECRET_ACCESS_KEY"})),
        ),
        handler(
            "team-a",
            "file",
            with(json!({"file": "/var/run/secrets/token"})),
        ),
    ]);
    assert!(m.verdicts[0].problems.is_empty(), "{:?}", m.verdicts[0]);
    let own = m
        .config
        .handlers
        .iter()
        .find(|h| h.name == "team-a.own")
        .unwrap();
    assert_eq!(
        own.value_refs[0].source.to_string(),
        "Secret team-a/hook key \"token\""
    );
    assert_eq!(
        m.verdicts[1].problems,
        [
            "spec.config.headers.authorization.valueFrom: the Secret team-b/hook is not in this namespace (team-a)"
        ]
    );
    for i in [2, 3] {
        assert_eq!(
            m.verdicts[i].problems,
            [
                "spec.config.headers.authorization.valueFrom: a team Handler reads values only from Secrets of its namespace (secretKeyRef)"
            ]
        );
    }
}

#[test]
fn a_team_handler_names_no_daemon_file_and_refuses_private_addresses() {
    let mut files = notify();
    files["outbound"] = json!({"ca_bundle": "/etc/ssl/private/ca.pem", "refuse_private": false});
    let m = merged(&[
        handler("team-a", "plain", notify()),
        handler("team-a", "files", files),
    ]);
    assert!(m.verdicts[0].problems.is_empty(), "{:?}", m.verdicts[0]);
    let plain = m
        .config
        .handlers
        .iter()
        .find(|h| h.name == "team-a.plain")
        .unwrap();
    assert!(plain.outbound.egress.refuse_private);
    assert_eq!(
        m.verdicts[1].problems,
        [
            "spec.outbound.ca_bundle: names a file of the daemon's; not for team Handlers",
            "spec.outbound.refuse_private: a team Handler always refuses private addresses its entries do not name",
        ]
    );
}

#[test]
fn the_recipes_team_resources_merge_as_written() {
    let tenancy =
        "tenancy:\n  resources: [v1/events, configmaps]\n  http: [\"https://hooks.example.com\"]\n";
    for recipe in ["warning-events", "janitor"] {
        let path = format!(
            "{}/plugins/recipes/{recipe}/team.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        // The release's registry and the janitor artifact's digest, as a team fills them in.
        let digest = format!("sha256:{}", "a".repeat(64));
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("REGISTRY", "registry.example.com")
            .replace("sha256:DIGEST", &digest);
        let objects: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML documents");
        let resources: Vec<TeamResource> = objects
            .iter()
            .map(|o| TeamResource {
                kind: if o["kind"] == "Route" {
                    TeamKind::Route
                } else {
                    TeamKind::Handler
                },
                namespace: "team-a".into(),
                name: o["metadata"]["name"].as_str().unwrap().into(),
                generation: Some(1),
                spec: o["spec"].clone(),
            })
            .collect();
        assert_eq!(resources.len(), 2, "{path}");
        let m = merge(Path::new("switchyard.yaml"), tenancy, &resources).unwrap();
        for v in &m.verdicts {
            assert!(v.problems.is_empty(), "{path}: {v:?}");
        }
        assert_eq!(m.config.routes.len(), 1, "{path}");
    }
}
