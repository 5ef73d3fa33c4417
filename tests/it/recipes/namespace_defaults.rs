//! The namespace-defaults recipe, in place of Kyverno's generate rules with
//! `synchronize: true` (its samples add-networkpolicy and add-ns-quota): a labelled
//! namespace gets a default-deny NetworkPolicy and a ResourceQuota, which come back when
//! deleted or changed; an unlabelled one gets nothing. Everything is done and read with
//! kubectl, as a cluster's user would.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::sim::{Kubectl, Output, blocking};
use crate::support::{TestDaemon, eventually, wait_for_log};

const WAIT: Duration = Duration::from_secs(30);

/// Runs kubectl with `args` on a blocking thread.
async fn kubectl(k: &Arc<Kubectl>, args: &[&str]) -> Output {
    let (k, args) = (
        k.clone(),
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    );
    blocking(move || k.run(&args.iter().map(String::as_str).collect::<Vec<_>>())).await
}

/// Runs kubectl with `args`, failing the test unless it succeeds; its standard output.
async fn ok(k: &Arc<Kubectl>, args: &[&str]) -> String {
    let output = kubectl(k, args).await;
    assert!(output.ok, "kubectl {args:?}: {}", output.stderr);
    output.stdout
}

/// The object kubectl gets with `args` (`-o json` added), once it is there.
async fn eventually_get(k: &Arc<Kubectl>, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    eventually(&format!("kubectl get {args:?}"), WAIT, async || {
        let output = kubectl(k, &args).await;
        output
            .ok
            .then(|| serde_json::from_str(&output.stdout).expect("kubectl prints JSON"))
    })
    .await
}

/// The recipe's NetworkPolicy and ResourceQuota in `ns`, once both are there.
async fn defaults(k: &Arc<Kubectl>, ns: &str) -> (Value, Value) {
    let policy = eventually_get(k, &["get", "networkpolicy", "default-deny", "-n", ns]).await;
    let quota = eventually_get(
        k,
        &["get", "resourcequota", "default-resourcequota", "-n", ns],
    )
    .await;
    for object in [&policy, &quota] {
        assert_eq!(
            object["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "switchyard-namespace-defaults",
            "{object:#}"
        );
    }
    assert_eq!(
        policy["spec"],
        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    );
    assert_eq!(
        quota["spec"]["hard"],
        json!({"requests.cpu": "4", "requests.memory": "16Gi", "limits.cpu": "4", "limits.memory": "16Gi"})
    );
    (policy, quota)
}

/// A namespace made with its label, as a manifest would.
const TEAM_B: &str = "
apiVersion: v1
kind: Namespace
metadata:
  name: team-b
  labels: {switchyard.dev/defaults: \"true\"}
";

#[tokio::test]
async fn labelled_namespaces_get_their_defaults_back_when_deleted_or_changed() {
    let mut daemon = TestDaemon::start(&super::fragment("namespace-defaults")).await;
    let k = Arc::new(Kubectl::new(daemon.sim()));
    ok(&k, &["create", "namespace", "plain"]).await;
    ok(&k, &["create", "namespace", "team-a"]).await;
    ok(
        &k,
        &[
            "label",
            "namespace",
            "team-a",
            "switchyard.dev/defaults=true",
        ],
    )
    .await;
    let applied = {
        let (k, manifest) = (k.clone(), TEAM_B);
        blocking(move || k.run_with_input(&["apply", "-f", "-"], manifest)).await
    };
    assert!(applied.ok, "{}", applied.stderr);

    // Labelled afterwards, or made with the label: both get the two objects.
    let (policy, _) = defaults(&k, "team-a").await;
    defaults(&k, "team-b").await;
    // Unlabelled: nothing (it was made before team-a, whose objects are there now).
    let none = ok(
        &k,
        &[
            "get",
            "networkpolicies,resourcequotas",
            "-n",
            "plain",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(none, "");

    put_back_when_deleted_or_changed(&k, &policy).await;
    left_alone_without_the_label(&mut daemon, &k).await;
    let (_, handler) = daemon.get("/handlers/namespace-defaults").await;
    assert_eq!(handler["failed"], 0, "{handler:#}");
    // Its own writes come back as events once each and write nothing more: 11 calls in
    // all, fewer when changes coalesce, thousands if it kept answering itself.
    assert!(handler["processed"].as_u64().unwrap() <= 15, "{handler:#}");
    daemon.stop().await;
}

/// A default deleted is made again (another object, the same as configured); one changed
/// is put back as configured.
async fn put_back_when_deleted_or_changed(k: &Arc<Kubectl>, policy: &Value) {
    let k = k.clone();
    // Deleted: made again (another object, the same as configured).
    ok(
        &k,
        &["delete", "networkpolicy", "default-deny", "-n", "team-a"],
    )
    .await;
    let uid = &policy["metadata"]["uid"];
    eventually("the NetworkPolicy made again", WAIT, async || {
        let output = kubectl(
            &k,
            &[
                "get",
                "networkpolicy",
                "default-deny",
                "-n",
                "team-a",
                "-o",
                "json",
            ],
        )
        .await;
        let again: Value = output
            .ok
            .then(|| serde_json::from_str(&output.stdout).unwrap())?;
        (again["metadata"]["uid"] != *uid).then_some(())
    })
    .await;
    defaults(&k, "team-a").await;

    // Changed (`kubectl edit` would do the same): put back as configured.
    let raise = r#"{"spec":{"hard":{"requests.cpu":"100"}}}"#;
    ok(
        &k,
        &[
            "patch",
            "resourcequota",
            "default-resourcequota",
            "-n",
            "team-a",
            "--type",
            "merge",
            "-p",
            raise,
        ],
    )
    .await;
    eventually("the ResourceQuota put back", WAIT, async || {
        let quota = eventually_get(
            &k,
            &[
                "get",
                "resourcequota",
                "default-resourcequota",
                "-n",
                "team-a",
            ],
        )
        .await;
        (quota["spec"]["hard"]["requests.cpu"] == "4").then_some(())
    })
    .await;
}

/// Without the label, what the namespace has stays as it is, deleted included.
async fn left_alone_without_the_label(daemon: &mut TestDaemon, k: &Arc<Kubectl>) {
    let k = k.clone();
    let skipped = || async {
        let (_, routes) = daemon.get("/routes").await;
        let route = routes["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "labelled-namespaces")
            .cloned()
            .unwrap();
        route["skipped"].as_u64().unwrap()
    };
    let before = skipped().await;
    ok(
        &k,
        &["label", "namespace", "team-a", "switchyard.dev/defaults-"],
    )
    .await;
    // The route leaves the namespace's way out of it aside: the daemon's cache has it.
    eventually("the label's removal seen", WAIT, async || {
        (skipped().await > before).then_some(())
    })
    .await;
    ok(
        &k,
        &["delete", "networkpolicy", "default-deny", "-n", "team-a"],
    )
    .await;
    wait_for_log(&mut daemon.logs, WAIT, |l| {
        l.message
            == "NetworkPolicy team-a/default-deny was deleted; namespace team-a does not carry switchyard.dev/defaults=true, so it is not put back"
    })
    .await;
    let gone = kubectl(
        &k,
        &["get", "networkpolicy", "default-deny", "-n", "team-a"],
    )
    .await;
    assert!(gone.stderr.contains("NotFound"), "{gone:?}");
    ok(
        &k,
        &[
            "get",
            "resourcequota",
            "default-resourcequota",
            "-n",
            "team-a",
        ],
    )
    .await;
}

#[test]
fn rbac_grants_reading_namespaces_and_applying_the_two_resources_only() {
    assert_eq!(
        super::granted("namespace-defaults"),
        [
            "ClusterRole core namespaces get,list,watch",
            "ClusterRole core resourcequotas create,get,list,patch,watch",
            "ClusterRole networking.k8s.io networkpolicies create,get,list,patch,watch",
        ]
    );
}
