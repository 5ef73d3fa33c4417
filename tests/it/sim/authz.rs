//! The simulator authorizing as kube-apiserver does (`authorization: RBAC`), with kubectl as
//! the independent client: ServiceAccounts with tokens, Roles and bindings stored in the
//! simulator, impersonation, `kubectl auth can-i` through SelfSubjectAccessReviews,
//! SubjectAccessReviews, and the status subresource authorized on its own.

use serde_json::{Value, json};

use switchyard::sim::{SimConfig, SimOptions, Simulator};

use crate::support::sim::{Kubectl, Output, blocking};

/// Two teams, each with a ServiceAccount `runner`; a `switchyard` user that may impersonate
/// the ServiceAccounts of team-a only. team-a's runner may write ConfigMaps in team-a and
/// patch Widgets there (and read, not patch, their status), and, as all of team-a's
/// ServiceAccounts (a group), list Leases everywhere; team-b's runner may read Widgets in team-b and
/// patch only their status.
const CONFIG: &str = r#"
authorization: RBAC
users:
  - {name: "system:serviceaccount:team-a:runner", token: runner-a-token}
  - {name: "system:serviceaccount:team-b:runner", token: runner-b-token}
  - {name: switchyard, token: switchyard-token}
crds:
  - {group: example.com, version: v1, kind: Widget}
objects:
  - {apiVersion: v1, kind: Namespace, metadata: {name: team-a}}
  - {apiVersion: v1, kind: Namespace, metadata: {name: team-b}}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata: {name: writer, namespace: team-a}
    rules:
      - {apiGroups: [""], resources: [configmaps], verbs: [get, list, create, update]}
      - {apiGroups: [example.com], resources: [widgets], verbs: [get, patch]}
      - {apiGroups: [example.com], resources: [widgets/status], verbs: [get]}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {name: writers, namespace: team-a}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: writer}
    subjects: [{kind: ServiceAccount, name: runner, namespace: team-a}]
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata: {name: status-writer, namespace: team-b}
    rules:
      - {apiGroups: [example.com], resources: [widgets], verbs: [get]}
      - {apiGroups: [example.com], resources: [widgets/status], verbs: [get, patch]}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {name: status-writers, namespace: team-b}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: status-writer}
    subjects: [{kind: ServiceAccount, name: runner, namespace: team-b}]
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRole
    metadata: {name: impersonator}
    rules:
      - {apiGroups: [""], resources: [serviceaccounts], verbs: [impersonate]}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {name: impersonators, namespace: team-a}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: impersonator}
    subjects: [{kind: User, name: switchyard}]
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRole
    metadata: {name: lease-reader}
    rules:
      - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [list]}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRoleBinding
    metadata: {name: team-a-lease-readers}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lease-reader}
    subjects: [{kind: Group, name: "system:serviceaccounts:team-a"}]
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: shared, namespace: team-b}, data: {a: "1"}}
  - {apiVersion: example.com/v1, kind: Widget, metadata: {name: w, namespace: team-a}, spec: {size: 1}}
  - {apiVersion: example.com/v1, kind: Widget, metadata: {name: w, namespace: team-b}, spec: {size: 1}}
"#;

const RUNNER_A: &str = "system:serviceaccount:team-a:runner";
const RUNNER_B: &str = "system:serviceaccount:team-b:runner";

/// The simulator with [`CONFIG`], over HTTPS: kubectl sends a bearer token only over TLS.
async fn start() -> Simulator {
    Simulator::start(SimOptions {
        config: SimConfig::from_yaml(CONFIG, "test config").expect("a valid sim config"),
        tls: true,
        ..SimOptions::default()
    })
    .await
    .expect("start the simulator")
}

/// kubectl runs of `args`, each with its own leading flags, in order.
async fn kubectl_runs(kubectl: Kubectl, runs: Vec<Vec<String>>) -> Vec<Output> {
    blocking(move || {
        runs.iter()
            .map(|args| {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                kubectl.run(&args)
            })
            .collect()
    })
    .await
}

fn args(text: &str) -> Vec<String> {
    text.split_whitespace().map(String::from).collect()
}

/// The server's message in kubectl's error output (after kubectl's own prefix, `Error from
/// server (Forbidden): ` or `error: failed to create configmap: `).
fn forbidden(out: &Output) -> &str {
    assert!(!out.ok, "expected a refusal: {out:?}");
    let text = out.stderr.trim();
    [
        "Error from server (Forbidden): ",
        "error: failed to create configmap: ",
    ]
    .iter()
    .find_map(|prefix| text.strip_prefix(prefix))
    .unwrap_or_else(|| panic!("not a Forbidden error: {out:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_lets_a_service_account_write_in_its_namespace_and_nowhere_else() {
    let sim = start().await;
    let kubectl = Kubectl::new(&sim);
    let replace = kubectl.file(
        "shared.json",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "shared", "namespace": "team-b"}, "data": {"a": "2"}})
        .to_string(),
    );
    let replace = format!("--token runner-a-token replace -f {}", replace.display());
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "creator", "namespace": "team-b"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "team-a-creates", "namespace": "team-b"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "creator"},
        "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": "team-a"}]});
    let grant = kubectl.file("grant.json", &format!("{role}\n{binding}\n"));
    let grant = format!("apply -f {}", grant.display());
    let outs = kubectl_runs(
        kubectl,
        vec![
            args("--token runner-a-token create configmap mine -n team-a --from-literal=a=1"),
            args("--token runner-a-token get configmap mine -n team-a -o name"),
            args(&replace),
            args("--token runner-a-token create configmap mine -n team-b"),
            args("--token runner-a-token get pods -n team-a"),
            args("--token wrong-token get configmaps -n team-a"),
            args("get configmap mine -n team-a -o name"),
            args(&grant),
            args("--token runner-a-token create configmap mine -n team-b"),
        ],
    )
    .await;
    assert!(outs[0].ok, "{:?}", outs[0]);
    assert_eq!(outs[1].stdout.trim(), "configmap/mine", "{:?}", outs[1]);
    assert_eq!(
        forbidden(&outs[2]),
        format!(
            r#"error when replacing "{}": configmaps "shared" is forbidden: User "{RUNNER_A}" cannot update resource "configmaps" in API group "" in the namespace "team-b""#,
            replace.rsplit(' ').next().unwrap()
        )
    );
    assert_eq!(
        forbidden(&outs[3]),
        format!(
            r#"configmaps is forbidden: User "{RUNNER_A}" cannot create resource "configmaps" in API group "" in the namespace "team-b""#
        )
    );
    assert_eq!(
        forbidden(&outs[4]),
        format!(
            r#"pods is forbidden: User "{RUNNER_A}" cannot list resource "pods" in API group "" in the namespace "team-a""#
        )
    );
    assert!(
        outs[5].stderr.contains("Unauthorized"),
        "a token nobody has is 401: {:?}",
        outs[5]
    );
    assert_eq!(
        outs[6].stdout.trim(),
        "configmap/mine",
        "the admin: {:?}",
        outs[6]
    );
    assert!(outs[7].ok, "{:?}", outs[7]);
    assert!(
        outs[8].ok,
        "a binding created through the API counts at once: {:?}",
        outs[8]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_needs_the_impersonate_verb_and_acts_as_the_impersonated() {
    let sim = start().await;
    let kubectl = Kubectl::new(&sim);
    let outs = kubectl_runs(
        kubectl,
        vec![
            args(&format!("--as={RUNNER_A} get configmaps -n team-a -o name")),
            args(&format!("--as={RUNNER_A} get configmaps -n team-b")),
            args(&format!(
                "--token switchyard-token --as={RUNNER_A} create configmap via-sa -n team-a"
            )),
            args(&format!(
                "--token switchyard-token --as={RUNNER_B} get widgets -n team-b"
            )),
            args("--token switchyard-token --as=alice get configmaps -n team-a"),
            args(&format!(
                "--token runner-b-token --as={RUNNER_A} get configmaps -n team-a"
            )),
            args("--token runner-b-token --as=someone --as-group=system:masters get nodes"),
            args(&format!(
                "--token switchyard-token --as={RUNNER_A} --as-group=system:masters get nodes"
            )),
            args(&format!("--as={RUNNER_A} get leases -n team-b")),
            args(&format!(
                "--token switchyard-token --as={RUNNER_A} --as-uid=42 get configmaps -n team-a"
            )),
            args("--as=alice --as-uid=42 get configmaps -n team-a"),
        ],
    )
    .await;
    assert!(outs[0].ok, "the admin may impersonate: {:?}", outs[0]);
    assert_eq!(
        forbidden(&outs[1]),
        format!(
            r#"configmaps is forbidden: User "{RUNNER_A}" cannot list resource "configmaps" in API group "" in the namespace "team-b""#
        ),
        "the request is authorized as the impersonated"
    );
    assert!(outs[2].ok, "{:?}", outs[2]);
    assert_eq!(
        forbidden(&outs[3]),
        r#"serviceaccounts "runner" is forbidden: User "switchyard" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team-b""#
    );
    assert_eq!(
        forbidden(&outs[4]),
        r#"users "alice" is forbidden: User "switchyard" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    assert_eq!(
        forbidden(&outs[5]),
        format!(
            r#"serviceaccounts "runner" is forbidden: User "{RUNNER_B}" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team-a""#
        )
    );
    assert_eq!(
        forbidden(&outs[6]),
        format!(
            r#"users "someone" is forbidden: User "{RUNNER_B}" cannot impersonate resource "users" in API group "" at the cluster scope"#
        )
    );
    assert_eq!(
        forbidden(&outs[7]),
        r#"groups "system:masters" is forbidden: User "switchyard" cannot impersonate resource "groups" in API group "" at the cluster scope"#
    );
    assert!(
        outs[8].ok,
        "an impersonated ServiceAccount is in its namespace's group: {:?}",
        outs[8]
    );
    assert_eq!(
        forbidden(&outs[9]),
        r#"uids "42" is forbidden: User "switchyard" cannot impersonate resource "uids" in API group "" at the cluster scope"#
    );
    assert_eq!(
        forbidden(&outs[10]),
        r#"configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "team-a""#,
        "the admin may impersonate a user with a uid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_known_token_or_with_groups_but_no_user_is_refused() {
    let sim = start().await;
    let url = format!("{}/api/v1/namespaces/team-a/configmaps", sim.url());
    let admin = sim.token().expect("an admin token made at start");
    let anonymous = https(&sim).get(&url).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let groups_only = https(&sim)
        .get(&url)
        .bearer_auth(admin)
        .header("Impersonate-Group", "system:masters")
        .send()
        .await
        .unwrap();
    assert_eq!(groups_only.status().as_u16(), 400);
    let status: Value = groups_only.json().await.unwrap();
    assert_eq!(
        status["message"],
        "Impersonate-Group and Impersonate-Uid need Impersonate-User"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_answers_with_the_same_rules() {
    let sim = start().await;
    let kubectl = Kubectl::new(&sim);
    let outs = kubectl_runs(
        kubectl,
        vec![
            args(&format!(
                "auth can-i --as={RUNNER_A} list configmaps -n team-a"
            )),
            args(&format!(
                "auth can-i --as={RUNNER_A} list configmaps -n team-b"
            )),
            args("--token runner-b-token auth can-i patch widgets.example.com --subresource=status -n team-b"),
            args("--token runner-b-token auth can-i patch widgets.example.com -n team-b"),
            args("auth can-i delete nodes"),
        ],
    )
    .await;
    let answers: Vec<(bool, &str)> = outs.iter().map(|o| (o.ok, o.stdout.trim())).collect();
    assert_eq!(
        answers,
        [
            (true, "yes"),
            (false, "no"),
            (true, "yes"),
            (false, "no"),
            (true, "yes")
        ],
        "{outs:?}"
    );
}

/// An HTTP client that trusts the simulator's CA.
fn https(sim: &Simulator) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(sim.ca_pem().unwrap().as_bytes()).unwrap();
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .unwrap()
}

/// POSTs a SubjectAccessReview with `token`.
async fn review(sim: &Simulator, token: &str, spec: Value) -> (u16, Value) {
    let response = https(sim)
        .post(format!(
            "{}/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sim.url()
        ))
        .bearer_auth(token)
        .json(&json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}))
        .send()
        .await
        .expect("POST");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_access_review_says_whether_and_why() {
    let sim = start().await;
    let admin = sim.token().expect("an admin token").to_string();
    let groups = json!(["system:serviceaccounts", "system:serviceaccounts:team-a"]);
    let attributes =
        |ns: &str| json!({"verb": "update", "resource": "configmaps", "namespace": ns});
    let spec =
        |ns| json!({"user": RUNNER_A, "groups": groups, "resourceAttributes": attributes(ns)});
    let (code, allowed) = review(&sim, &admin, spec("team-a")).await;
    assert_eq!(code, 201, "{allowed}");
    assert_eq!(
        allowed["status"],
        json!({"allowed": true, "reason": r#"RBAC: allowed by RoleBinding "writers/team-a" of Role "writer" to ServiceAccount "runner/team-a""#})
    );
    let (_, denied) = review(&sim, &admin, spec("team-b")).await;
    assert_eq!(denied["status"], json!({"allowed": false}));
    let (code, refused) = review(&sim, "runner-a-token", spec("team-a")).await;
    assert_eq!(code, 403, "{refused}");
    assert_eq!(
        refused["message"],
        format!(
            r#"subjectaccessreviews.authorization.k8s.io is forbidden: User "{RUNNER_A}" cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope"#
        )
    );
    let (code, invalid) =
        review(&sim, &admin, json!({"resourceAttributes": attributes("a")})).await;
    assert_eq!(code, 422, "{invalid}");
    assert!(
        invalid["message"]
            .as_str()
            .unwrap()
            .contains("spec.user: Invalid value"),
        "{invalid}"
    );
    let discovery: Value = https(&sim)
        .get(format!("{}/apis/authorization.k8s.io/v1", sim.url()))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("a JSON body");
    let names: Vec<&str> = discovery["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["subjectaccessreviews", "selfsubjectaccessreviews"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_subresource_is_authorized_on_its_own() {
    let sim = start().await;
    let kubectl = Kubectl::new(&sim);
    let status = r#"{"status":{"ready":true}}"#;
    let spec = r#"{"spec":{"size":2}}"#;
    let patch = |token: &str, ns: &str, body: &str, status: bool| {
        let mut run = args(&format!(
            "--token {token} patch widget w -n {ns} --type=merge"
        ));
        if status {
            run.push("--subresource=status".into());
        }
        run.extend(["-p".to_string(), body.to_string()]);
        run
    };
    let outs = kubectl_runs(
        kubectl,
        vec![
            patch("runner-b-token", "team-b", status, true),
            patch("runner-b-token", "team-b", spec, false),
            patch("runner-a-token", "team-a", spec, false),
            patch("runner-a-token", "team-a", status, true),
            args("get widget w -n team-b -o jsonpath={.status.ready}"),
        ],
    )
    .await;
    assert!(outs[0].ok, "{:?}", outs[0]);
    assert_eq!(
        forbidden(&outs[1]),
        format!(
            r#"widgets.example.com "w" is forbidden: User "{RUNNER_B}" cannot patch resource "widgets" in API group "example.com" in the namespace "team-b""#
        )
    );
    assert!(outs[2].ok, "{:?}", outs[2]);
    assert_eq!(
        forbidden(&outs[3]),
        format!(
            r#"widgets.example.com "w" is forbidden: User "{RUNNER_A}" cannot patch resource "widgets/status" in API group "example.com" in the namespace "team-a""#
        )
    );
    assert_eq!(outs[4].stdout, "true", "{:?}", outs[4]);
}
