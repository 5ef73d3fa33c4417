//! The rules derived from configs: scope by the watches' namespaces, verbs by capabilities.

use std::path::Path;

use super::*;

fn config(text: &str) -> Config {
    crate::config::validate(Path::new("c.yaml"), text).expect("a valid config")
}

/// The permissions `config` needs run as ServiceAccount `default/switchyard`.
fn permissions(config: &Config) -> Permissions {
    super::permissions(config, &subject_in("default"))
}

fn subject_in(namespace: &str) -> Subject {
    Subject {
        name: "switchyard".into(),
        namespace: namespace.into(),
        source: "c.yaml".into(),
    }
}

fn core(plural: &str) -> Resource {
    Resource {
        group: String::new(),
        plural: plural.into(),
    }
}

fn ns(name: &str) -> Scope {
    Scope::Namespace(name.into())
}

fn verbs(permissions: &Permissions, scope: &Scope, resource: &Resource) -> Vec<&'static str> {
    permissions
        .rule(scope, resource)
        .map(|r| r.verbs.iter().copied().collect())
        .unwrap_or_default()
}

#[test]
fn watches_limited_to_namespaces_get_a_role_in_each() {
    let p = permissions(&config(
        "\
handlers:
  h: {}
routes:
  - {name: a, resource: configmaps, namespaces: [team-a, team-b], handler: h}
  - {name: b, resource: configmaps, namespace: team-c, handler: h}
",
    ));
    for namespace in ["team-a", "team-b", "team-c"] {
        assert_eq!(
            verbs(&p, &ns(namespace), &core("configmaps")),
            ["get", "list", "watch"]
        );
    }
    assert!(p.rule(&Scope::Cluster, &core("configmaps")).is_none());
    assert_eq!(p.scopes().count(), 3);
}

#[test]
fn one_watch_of_every_namespace_makes_the_resource_cluster_wide() {
    let p = permissions(&config(
        "\
informers:
  pods: {resource: v1/pods}
handlers:
  h: {}
routes:
  - {name: a, resource: v1/pods, namespace: team-a, handler: h}
  - {name: b, informer: pods, handler: h}
  - {name: c, resource: apps/v1/deployments, namespace: team-a, handler: h}
",
    ));
    assert_eq!(
        verbs(&p, &Scope::Cluster, &core("pods")),
        ["get", "list", "watch"]
    );
    assert!(p.rule(&ns("team-a"), &core("pods")).is_none());
    let deployments = Resource {
        group: "apps".into(),
        plural: "deployments".into(),
    };
    assert_eq!(
        verbs(&p, &ns("team-a"), &deployments),
        ["get", "list", "watch"]
    );
    let reasons = &p.rule(&Scope::Cluster, &core("pods")).unwrap().reasons;
    assert!(reasons.contains("watched by informer pods"), "{reasons:?}");
}

#[test]
fn an_informer_no_route_reads_needs_nothing() {
    let p = permissions(&config(
        "\
informers:
  secrets: {resource: secrets}
handlers:
  h: {}
routes:
  - {name: a, resource: configmaps, handler: h}
",
    ));
    assert!(p.rule(&Scope::Cluster, &core("secrets")).is_none());
    assert!(p.rule(&Scope::Cluster, &core("configmaps")).is_some());
}

#[test]
fn capabilities_grant_exactly_their_verbs_where_the_routes_watch() {
    let p = permissions(&config(
        "\
handlers:
  reader: {}
  guard:
    capabilities:
      configmaps: [apply, event]
      Pod: [delete]
  labeller:
    capabilities:
      v1/pods: [patch]
routes:
  - {name: cms, resource: configmaps, namespace: team-a, handler: guard}
  - {name: pods, resource: v1/pods, handler: guard}
  - {name: pods-b, resource: v1/pods, namespace: team-b, handler: labeller}
  - {name: read, resource: secrets, handler: reader}
",
    ));
    assert_eq!(
        verbs(&p, &ns("team-a"), &core("configmaps")),
        ["create", "get", "list", "patch", "watch"]
    );
    assert_eq!(verbs(&p, &ns("team-a"), &core("events")), ["create"]);
    assert_eq!(
        verbs(&p, &Scope::Cluster, &core("pods")),
        ["delete", "get", "list", "watch"]
    );
    assert_eq!(verbs(&p, &ns("team-b"), &core("pods")), ["patch"]);
    assert_eq!(
        verbs(&p, &Scope::Cluster, &core("secrets")),
        ["get", "list", "watch"]
    );
    assert!(p.rule(&Scope::Cluster, &core("events")).is_none());
    let reasons = &p.rule(&ns("team-a"), &core("events")).unwrap().reasons;
    assert!(reasons.contains("handler guard: event about configmaps"));
}

#[test]
fn informers_by_kind_are_all_watched_with_a_guessed_plural() {
    let p = permissions(&config(
        "\
informers:
  policies: {group: example.com, version: v1, kind: Policy, namespaces: [team-a]}
  ingresses: {group: networking.k8s.io, version: v1, kind: Ingress}
handlers:
  h:
    capabilities:
      Policy: [patch]
routes:
  - {name: a, kinds: [Policy], handler: h}
",
    ));
    let policies = Resource {
        group: "example.com".into(),
        plural: "policies".into(),
    };
    assert_eq!(
        verbs(&p, &ns("team-a"), &policies),
        ["get", "list", "patch", "watch"]
    );
    let ingresses = Resource {
        group: "networking.k8s.io".into(),
        plural: "ingresses".into(),
    };
    assert_eq!(
        verbs(&p, &Scope::Cluster, &ingresses),
        ["get", "list", "watch"]
    );
    for (kind, plural) in [
        ("Gateway", "gateways"),
        ("Ingress", "ingresses"),
        ("NetworkPolicy", "networkpolicies"),
        ("Endpoints", "endpoints"),
        ("EndpointSlice", "endpointslices"),
        ("Box", "boxes"),
        ("Patch", "patches"),
        ("Mesh", "meshes"),
        ("Key", "keys"),
    ] {
        assert_eq!(guess_plural(kind), plural);
    }
}

#[test]
fn the_yaml_names_every_object_after_the_subject_in_a_stable_order() {
    let p = permissions(&config(
        "\
handlers:
  h:
    capabilities:
      configmaps: [delete]
routes:
  - {name: b, resource: configmaps, namespace: team-b, handler: h}
  - {name: a, resource: configmaps, namespace: team-a, handler: h}
  - {name: pods, resource: v1/pods, handler: h}
",
    ));
    let subject = Subject {
        name: "router".into(),
        namespace: "ops".into(),
        source: "c.yaml".into(),
    };
    let text = render(&p, &subject);
    let reordered = permissions(&config(
        "\
handlers:
  h:
    capabilities:
      configmaps: [delete]
routes:
  - {name: pods, resource: v1/pods, handler: h}
  - {name: a, resource: configmaps, namespace: team-a, handler: h}
  - {name: b, resource: configmaps, namespace: team-b, handler: h}
",
    ));
    assert_eq!(render(&reordered, &subject), text);
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding"
        ]
    );
    let team_a = text.find("namespace: \"team-a\"").unwrap();
    let team_b = text.find("namespace: \"team-b\"").unwrap();
    assert!(team_a < team_b);
    assert!(
        text.contains(
            "  # handler h: delete\n  # watched by route a\n  - apiGroups: [\"\"]\n    resources: [\"configmaps\"]\n    verbs: [\"delete\", \"get\", \"list\", \"watch\"]\n"
        ),
        "{text}"
    );
    assert!(text.contains(
        "subjects:\n  - kind: ServiceAccount\n    name: \"router\"\n    namespace: \"ops\"\n"
    ));
}

#[test]
fn leader_mode_may_get_create_and_update_leases_in_the_lease_namespace_only() {
    let routes = "handlers:\n  h: {}\nroutes:\n  - {name: a, resource: configmaps, handler: h}\n";
    let leases = Resource {
        group: "coordination.k8s.io".to_string(),
        plural: "leases".to_string(),
    };
    let single = permissions(&config(routes));
    assert!(
        single
            .scopes()
            .all(|(_, rules)| rules.iter().all(|r| r.resource != leases))
    );
    let leader = permissions(&config(&format!(
        "ha:\n  mode: leader\n  lease_namespace: ops\n{routes}"
    )));
    assert_eq!(
        verbs(&leader, &ns("ops"), &leases),
        ["create", "get", "update"]
    );
    assert!(leader.rule(&Scope::Cluster, &leases).is_none());
    let sharded = permissions(&config(&format!(
        "ha:\n  mode: sharded\n  lease_namespace: ops\n{routes}"
    )));
    assert_eq!(
        verbs(&sharded, &ns("ops"), &leases),
        ["create", "delete", "get", "list", "update"]
    );
}

#[test]
fn the_leases_are_in_the_service_accounts_namespace_unless_the_config_names_one() {
    let routes = "handlers:\n  h: {}\nroutes:\n  - {name: a, resource: configmaps, handler: h}\n";
    let leases = Resource {
        group: "coordination.k8s.io".to_string(),
        plural: "leases".to_string(),
    };
    let leader = config(&format!("ha:\n  mode: leader\n{routes}"));
    let in_ops = super::permissions(&leader, &subject_in("ops"));
    assert_eq!(
        verbs(&in_ops, &ns("ops"), &leases),
        ["create", "get", "update"]
    );
    assert!(in_ops.rule(&ns("default"), &leases).is_none());
    let named = config(&format!(
        "ha:\n  mode: leader\n  lease_namespace: elect\n{routes}"
    ));
    let in_ops = super::permissions(&named, &subject_in("ops"));
    assert_eq!(verbs(&in_ops, &ns("elect"), &leases).len(), 3);
    assert!(in_ops.rule(&ns("ops"), &leases).is_none());
}

#[test]
fn a_route_with_a_finalizer_may_patch_what_it_watches_where_it_watches() {
    let p = permissions(&config(
        "\
informers:
  cms: {resource: configmaps, namespaces: [team-a]}
handlers:
  h: {}
routes:
  - {name: a, informer: cms, handler: h, finalizer: true}
  - {name: b, resource: secrets, handler: h}
",
    ));
    assert_eq!(
        verbs(&p, &ns("team-a"), &core("configmaps")),
        ["get", "list", "patch", "watch"]
    );
    let rule = p.rule(&ns("team-a"), &core("configmaps")).unwrap();
    assert!(
        rule.reasons
            .iter()
            .any(|r| r == "route a: finalizer switchyard.dev/a"),
        "{:?}",
        rule.reasons
    );
    assert_eq!(
        verbs(&p, &Scope::Cluster, &core("secrets")),
        ["get", "list", "watch"]
    );
}

#[test]
fn an_informer_a_handler_reads_is_watched_and_its_grants_apply_there() {
    let p = permissions(&config(
        "\
informers:
  deployments: {resource: apps/v1/deployments, namespaces: [web]}
  unused: {resource: v1/secrets}
handlers:
  h:
    reads: [deployments]
    capabilities: {deployments: [patch]}
routes:
  - {name: a, resource: configmaps, namespace: web, handler: h}
",
    ));
    let deployments = Resource {
        group: "apps".into(),
        plural: "deployments".into(),
    };
    assert_eq!(
        verbs(&p, &ns("web"), &deployments),
        ["get", "list", "patch", "watch"]
    );
    assert!(p.rule(&Scope::Cluster, &deployments).is_none());
    assert!(p.rule(&ns("web"), &core("secrets")).is_none());
    assert!(p.rule(&Scope::Cluster, &core("secrets")).is_none());
}

#[test]
fn tenancy_reads_team_resources_and_allowed_kinds_reviews_access_and_impersonates_service_accounts_only()
 {
    let p = permissions(&config(
        "tenancy: {resources: [configmaps, apps/v1/deployments], namespaces: team=yes}\n",
    ));
    let cluster = Scope::Cluster;
    let group = |g: &str, plural: &str| Resource {
        group: g.into(),
        plural: plural.into(),
    };
    assert_eq!(
        verbs(&p, &cluster, &group("switchyard.dev", "routes")),
        ["get", "list", "watch"]
    );
    assert_eq!(
        verbs(&p, &cluster, &group("switchyard.dev", "handlers/status")),
        ["patch"]
    );
    assert_eq!(
        verbs(&p, &cluster, &core("configmaps")),
        ["get", "list", "watch"]
    );
    assert_eq!(
        verbs(&p, &cluster, &group("apps", "deployments")),
        ["get", "list", "watch"]
    );
    assert_eq!(
        verbs(&p, &cluster, &core("namespaces")),
        ["get", "list", "watch"]
    );
    assert_eq!(
        verbs(
            &p,
            &cluster,
            &group("authorization.k8s.io", "subjectaccessreviews")
        ),
        ["create"]
    );
    assert_eq!(
        verbs(&p, &cluster, &core("serviceaccounts")),
        ["impersonate"]
    );
    assert!(
        verbs(&p, &cluster, &core("users")).is_empty()
            && verbs(&p, &cluster, &core("groups")).is_empty()
    );
    let none = permissions(&config(
        "handlers: {a: {}}\nroutes: [{name: a, resource: pods, handler: a}]\n",
    ));
    assert!(verbs(&none, &cluster, &core("serviceaccounts")).is_empty());
}
