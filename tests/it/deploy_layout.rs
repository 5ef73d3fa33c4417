//! The shipped pod's file layout, run: the chart's Deployment read for its volumes
//! (the plugins folder mounted read-only, a writable cache), its ConfigMap's config run by
//! the switchyard binary in a folder laid out the same way, in-cluster against the
//! simulator (HTTPS, a service account token), with an `oci://` handler pulled from a real
//! registry. The plugins folder is made read-only as the kubelet makes it: a read-only bind
//! mount in a mount namespace of the daemon's own (as root), or its permissions otherwise.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use switchyard::sim::{SimOptions, Simulator};

use crate::deploy::{built_default, find};
use crate::oci::{WAIT, push, sha256_hex};
use crate::support::process::Process;
use crate::support::registry::Registry;
use crate::support::{self, create_configmap};

/// The service account token the simulator wants.
const TOKEN: &str = "layout-test-token";

/// The switchyard container's mount named `name`.
fn mount<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["volumeMounts"]
        .as_array()
        .and_then(|all| all.iter().find(|m| m["name"] == name))
        .unwrap_or_else(|| panic!("no mount {name} in {container:#}"))
}

/// Runs `switchyard ARGS` with `dir` mounted read-only for it alone (root), or with `dir`'s
/// permissions taking writes away (anyone else, whom permissions hold).
fn start_with_read_only(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Process {
    let unset = ["KUBECONFIG", "RUST_LOG", "SWITCHYARD_LOG_FORMAT"];
    let probe = tempfile::tempdir().unwrap();
    if std::fs::metadata(probe.path()).unwrap().uid() != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        return Process::start(args, env, &unset);
    }
    let dir = dir.to_str().unwrap();
    let script = r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@""#;
    let wrapper = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        dir,
    ];
    Process::start_under(&wrapper, args, env, &unset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_layout_runs_an_oci_plugin_with_the_plugins_folder_read_only() {
    let documents = built_default();
    let pod = &find(&documents, "Deployment")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let text = find(&documents, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml");
    let shipped = switchyard::config::validate(Path::new("/etc/switchyard/config.yaml"), text)
        .expect("the shipped config is valid");
    // The plugins folder is read-only; the OCI cache lies in a writable volume.
    let plugins = mount(container, "plugins");
    assert_eq!(plugins["readOnly"], true, "{plugins:#}");
    assert_eq!(
        shipped.plugins_dir,
        Path::new(plugins["mountPath"].as_str().unwrap())
    );
    let cache = shipped.oci.cache_dir(&shipped.plugins_dir);
    let mounts = container["volumeMounts"].as_array().unwrap();
    let cache_mount = mounts
        .iter()
        .find(|m| cache.starts_with(m["mountPath"].as_str().unwrap()))
        .unwrap_or_else(|| panic!("oci.cache_dir {} is in no volume", cache.display()));
    assert_ne!(cache_mount["readOnly"], true, "{cache_mount:#}");

    // The pod's file system in a folder: each mount where the Deployment puts it.
    let root = tempfile::tempdir().unwrap();
    let at = |path: &str| root.path().join(path.trim_start_matches('/'));
    let mut paths: Vec<&str> = mounts
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in &paths {
        std::fs::create_dir_all(at(path)).unwrap();
    }
    // What the init container copies in.
    let plugins_dir = at(plugins["mountPath"].as_str().unwrap());
    std::fs::copy(
        support::built_plugin("log-events"),
        plugins_dir.join("log-events.wasm"),
    )
    .unwrap();

    // The handler's plugin from a registry instead; free ports for the listeners; every
    // mounted path moved under the folder.
    let registry = Registry::start().await;
    let reference = registry.reference("plugins/log-events:v1");
    let built = support::built_plugin("log-events");
    let (code, out, err) = push(built.to_str().unwrap(), &reference);
    assert_eq!(code, 0, "{out}{err}");
    let mut local = text
        .replace("plugin: log-events\n", &format!("plugin: {reference}\n"))
        .replace("listen: 127.0.0.1:9470", "listen: 127.0.0.1:0")
        .replace("probes_listen: 0.0.0.0:9471", "probes_listen: 127.0.0.1:0");
    for path in &paths {
        local = local.replace(&format!(": {path}"), &format!(": {}", at(path).display()));
    }
    assert!(local.contains(&format!("plugin: {reference}")), "{local}");
    let config_file = at("/etc/switchyard").join("config.yaml");
    std::fs::write(&config_file, &local).unwrap();
    let env_var = |name: &str| {
        container["env"]
            .as_array()
            .and_then(|all| all.iter().find(|e| e["name"] == name))
            .and_then(|e| e["value"].as_str())
            .map(at)
    };
    let xdg_cache: PathBuf = env_var("XDG_CACHE_HOME").expect("XDG_CACHE_HOME");

    // In-cluster: the simulator over HTTPS, the service account's token and CA.
    let sim = Simulator::start(SimOptions {
        tls: true,
        token: Some(TOKEN.into()),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let account = at("/var/run/secrets/kubernetes.io/serviceaccount");
    std::fs::create_dir_all(&account).unwrap();
    std::fs::write(account.join("token"), TOKEN).unwrap();
    std::fs::write(account.join("ca.crt"), sim.ca_pem().unwrap()).unwrap();
    std::fs::write(account.join("namespace"), "switchyard").unwrap();
    let port = sim.addr().port().to_string();
    let daemon = start_with_read_only(
        &plugins_dir,
        &["run", "--config", config_file.to_str().unwrap()],
        &[
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", &port),
            ("SWITCHYARD_SERVICEACCOUNT_DIR", account.to_str().unwrap()),
            ("XDG_CACHE_HOME", xdg_cache.to_str().unwrap()),
            ("HOME", root.path().to_str().unwrap()),
        ],
    );
    create_configmap(
        &sim.client().unwrap(),
        "default",
        json!({"metadata": {"name": "in-the-pod"}}),
    )
    .await;
    daemon
        .wait_for_line(WAIT, |l| l.contains("default/in-the-pod "))
        .await;

    // The component is cached where oci.cache_dir says, and nothing in the plugins folder.
    let layer = sha256_hex(&std::fs::read(&built).unwrap());
    let local_cache = at(cache.to_str().unwrap());
    assert!(
        local_cache.join(format!("blobs/{layer}.wasm")).is_file(),
        "{}",
        local_cache.display()
    );
    let entries: Vec<String> = std::fs::read_dir(&plugins_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries, ["log-events.wasm"]);
    drop(daemon);
    std::fs::set_permissions(&plugins_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}
