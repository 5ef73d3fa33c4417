//! How `switchyard run` finds its cluster, end to end with the binary: inside a pod (the
//! service account's token and CA, HTTPS, against a simulator that demands the token),
//! `--kubeconfig` and `--context`, and `~` and variables in the config's paths.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use serde_json::json;
use switchyard::sim::{SimOptions, Simulator};

use crate::support::process::Process;
use crate::support::{self, create_configmap};

const TOKEN: &str = "sa-token-for-the-test";
const WAIT: Duration = Duration::from_secs(60);

/// A config for the log-events plugin on ConfigMaps, admin and probes on free ports, with
/// `extra` at the top.
fn write_config(dir: &Path, extra: &str) -> String {
    let path = support::write_config(
        dir,
        &format!(
            "{extra}admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\nhandlers:\n  log-events: {{}}\nroutes:\n  - name: configmaps\n    resource: configmaps\n    handler: log-events\n"
        ),
    );
    path.to_str().unwrap().to_string()
}

/// Waits until the daemon's plugin has handled the ConfigMap `name` (its log line names it).
async fn handled(daemon: &Process, name: &str) {
    let wanted = format!("default/{name} ");
    daemon.wait_for_line(WAIT, |l| l.contains(&wanted)).await;
}

#[tokio::test]
async fn in_a_pod_the_daemon_uses_the_service_account_token_and_ca_over_https() {
    let sim = Simulator::start(SimOptions {
        tls: true,
        token: Some(TOKEN.into()),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    assert!(sim.url().starts_with("https://127.0.0.1:"), "{}", sim.url());
    // Without the token the simulator answers 401, as kube-apiserver does.
    let mut anonymous = kube::Config::new(sim.url().parse().unwrap());
    anonymous.root_cert = Some(vec![
        pem::parse(sim.ca_pem().unwrap()).unwrap().into_contents(),
    ]);
    let anonymous = kube::Client::try_from(anonymous).unwrap();
    let refused = Api::<ConfigMap>::namespaced(anonymous, "default")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 401 && s.message == "Unauthorized"),
        "{refused:?}"
    );

    let home = tempfile::tempdir().unwrap();
    let account = tempfile::tempdir().unwrap();
    std::fs::write(account.path().join("token"), format!("{TOKEN}\n")).unwrap();
    std::fs::write(account.path().join("ca.crt"), sim.ca_pem().unwrap()).unwrap();
    std::fs::write(account.path().join("namespace"), "default").unwrap();
    let config = write_config(home.path(), "");
    let port = sim.addr().port().to_string();
    let in_pod = |dir: &Path| {
        Process::start(
            &["run", "--config", &config, "--log-format", "json"],
            &[
                ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
                ("KUBERNETES_SERVICE_PORT", &port),
                ("SWITCHYARD_SERVICEACCOUNT_DIR", dir.to_str().unwrap()),
                ("HOME", home.path().to_str().unwrap()),
            ],
            &["KUBECONFIG", "RUST_LOG"],
        )
    };
    let daemon = in_pod(account.path());
    create_configmap(
        &sim.client().unwrap(),
        "default",
        json!({"metadata": {"name": "in-pod"}}),
    )
    .await;
    handled(&daemon, "in-pod").await;
    drop(daemon);

    // A wrong token is refused by the API server, and the daemon says so.
    let wrong = tempfile::tempdir().unwrap();
    std::fs::write(wrong.path().join("token"), "not-the-token").unwrap();
    std::fs::write(wrong.path().join("ca.crt"), sim.ca_pem().unwrap()).unwrap();
    let daemon = in_pod(wrong.path());
    daemon
        .wait_for_line(WAIT, |l| l.contains("Unauthorized"))
        .await;
    drop(daemon);

    // A CA the server's certificate does not chain to: no connection at all.
    let other = Simulator::start(SimOptions {
        tls: true,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    std::fs::write(wrong.path().join("token"), TOKEN).unwrap();
    std::fs::write(wrong.path().join("ca.crt"), other.ca_pem().unwrap()).unwrap();
    let daemon = in_pod(wrong.path());
    daemon
        .wait_for_line(WAIT, |l| l.contains("invalid peer certificate"))
        .await;
    drop(daemon);
    other.stop().await;
    sim.stop().await;
}

/// A kubeconfig whose current context points at a closed port and whose `good` context
/// points at `sim`.
fn two_contexts(sim: &Simulator) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: good
  cluster: {{server: {}}}
- name: bad
  cluster: {{server: 'http://127.0.0.1:1'}}
users:
- name: anyone
  user: {{}}
contexts:
- name: good
  context: {{cluster: good, user: anyone}}
- name: bad
  context: {{cluster: bad, user: anyone}}
current-context: bad
",
        sim.url()
    )
}

#[tokio::test]
async fn kubeconfig_and_context_flags_and_expanded_config_paths_pick_the_cluster() {
    let sim = support::start_sim().await;
    let client = sim.client().unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("kc.yaml"), two_contexts(&sim)).unwrap();
    let kubeconfig = home.path().join("kc.yaml");
    let home_str = home.path().to_str().unwrap();
    let env = [("HOME", home_str), ("KC_NAME", "kc")];
    let unset = ["KUBECONFIG", "KUBERNETES_SERVICE_HOST", "RUST_LOG"];

    // --kubeconfig and --context on the command line.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let flags = [
        "run",
        "--config",
        &config,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--context",
        "good",
    ];
    let daemon = Process::start(&flags, &env, &unset);
    create_configmap(
        &client,
        "default",
        json!({"metadata": {"name": "by-flags"}}),
    )
    .await;
    handled(&daemon, "by-flags").await;
    drop(daemon);

    // The config's `kubeconfig` with `~` and a variable, and --context.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "kubeconfig: ~/${KC_NAME}.yaml\n");
    let daemon = Process::start(
        &["run", "--config", &config, "--context", "good"],
        &env,
        &unset,
    );
    create_configmap(
        &client,
        "default",
        json!({"metadata": {"name": "by-config"}}),
    )
    .await;
    handled(&daemon, "by-config").await;
    drop(daemon);

    // Without --context, the current context's closed port: named, and the failure said
    // once, each cause once, without kube's own request log.
    let daemon = Process::start(&["run", "--config", &config], &env, &unset);
    daemon
        .wait_for_line(WAIT, |l| {
            l.contains("API server server=http://127.0.0.1:1/")
        })
        .await;
    let error = daemon
        .wait_for_line(WAIT, |l| l.starts_with("error: "))
        .await;
    assert_eq!(
        error.matches("client error (Connect)").count(),
        1,
        "{error}"
    );
    assert!(
        error.ends_with("Connection refused (os error 111)"),
        "{error}"
    );
    let lines = daemon.lines();
    assert!(
        !lines.iter().any(|l| l.contains("kube_client")),
        "{lines:#?}"
    );
    drop(daemon);
    sim.stop().await;
}

/// Regression: outside a cluster the Lease went to `default` while Secrets used the
/// kubeconfig context's namespace, and `switchyard rbac` granted the Lease in the namespace
/// it was given (default `default`): a daemon on a context in `team` could not read its
/// Lease. One rule now: the pod's namespace, else the context's, else `default`; the
/// Lease lands in the context's namespace and `rbac` (with the same kubeconfig) grants it
/// there.
#[tokio::test]
async fn out_of_a_cluster_the_lease_lands_in_the_contexts_namespace_and_rbac_grants_it_there() {
    let sim = support::start_sim().await;
    let client = sim.client().unwrap();
    support::create_namespaces(&client, &["team"]).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let yaml = switchyard::sim::kubeconfig::kubeconfig_yaml(&sim.url())
        .replace("namespace: default", "namespace: team");
    assert!(yaml.contains("namespace: team"), "{yaml}");
    std::fs::write(&kubeconfig, yaml).unwrap();
    let config = write_config(dir.path(), "ha:\n  mode: leader\n  lease_name: router\n");
    let no_pod = dir.path().join("no-service-account");
    std::fs::create_dir(&no_pod).unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let env = [("SWITCHYARD_SERVICEACCOUNT_DIR", no_pod.to_str().unwrap())];
    let unset = ["POD_NAMESPACE", "KUBERNETES_SERVICE_HOST", "KUBECONFIG"];
    let args = ["run", "--config", &config, "--kubeconfig", kubeconfig];
    let daemon = Process::start(&args, &env, &unset);
    let leases =
        |ns: &str| Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), ns);
    support::eventually("the Lease in team", WAIT, async || {
        leases("team").get_opt("router").await.unwrap()
    })
    .await;
    assert!(leases("default").get_opt("router").await.unwrap().is_none());
    daemon.kill();

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["rbac", "--config", &config, "--kubeconfig", kubeconfig])
        .envs(env)
        .env_remove("POD_NAMESPACE")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let lease_role = out
        .split("---")
        .find(|doc| doc.contains("\nkind: Role\n") && doc.contains("\"leases\""))
        .unwrap_or_else(|| panic!("no Role for the Lease: {out}"));
    assert!(lease_role.contains("namespace: \"team\""), "{lease_role}");
    let account = out
        .split("---")
        .find(|doc| doc.contains("\nkind: ServiceAccount\n"))
        .unwrap_or_else(|| panic!("no ServiceAccount: {out}"));
    assert!(account.contains("namespace: \"team\""), "{account}");
}
