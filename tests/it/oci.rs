//! Plugins from an OCI registry (a real one, Debian's docker-registry, on loopback):
//! `switchyard push`, a handler whose `plugin:` is an `oci://` reference, the digest in
//! `/plugins`, the cache in the plugins folder, and the errors that keep the running version.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::registry::Registry;
use crate::support::spawned;
use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

/// `switchyard push FILE REFERENCE`: exit code, stdout, stderr.
fn push(file: &str, reference: &str) -> (i32, String, String) {
    crate::support::process::switchyard(&["push", file, reference])
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Puts a manifest under `tag` whose one layer has the media type `layer_type`.
async fn put_manifest_with_layer_type(
    registry: &Registry,
    repo: &str,
    tag: &str,
    layer_type: &str,
) {
    let http = reqwest::Client::new();
    let base = format!("http://{}/v2/{repo}", registry.host);
    let blob = b"not a component".to_vec();
    let digest = format!("sha256:{}", sha256_hex(&blob));
    let start = http
        .post(format!("{base}/blobs/uploads/"))
        .send()
        .await
        .unwrap();
    let location = start.headers()["location"].to_str().unwrap().to_string();
    let mut url = reqwest::Url::parse(&format!("http://{}", registry.host))
        .unwrap()
        .join(&location)
        .unwrap();
    url.query_pairs_mut().append_pair("digest", &digest);
    let put = http.put(url).body(blob.clone()).send().await.unwrap();
    assert!(put.status().is_success(), "{}", put.status());
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": digest, "size": blob.len()},
        "layers": [{"mediaType": layer_type, "digest": digest, "size": blob.len()}],
    });
    let put = http
        .put(format!("{base}/manifests/{tag}"))
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(manifest.to_string())
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.text().await.unwrap());
}

/// The `/plugins` entry named `name`.
async fn plugin_view(t: &TestDaemon, name: &str) -> Value {
    let (code, body) = t.get("/plugins").await;
    assert_eq!(code, 200);
    body["plugins"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no plugin {name} in {body:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_plugin_is_pulled_by_tag_verified_cached_and_run_and_failures_keep_it() {
    let mut registry = Registry::start().await;
    let built = support::built_plugin("log-events");
    let reference = registry.reference("plugins/log-events:v1");
    let (code, out, err) = push(built.to_str().unwrap(), &reference);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with(&format!("pushed {reference}@sha256:")),
        "{out}"
    );
    let layer = sha256_hex(&std::fs::read(&built).unwrap());

    let plugins = tempfile::tempdir().unwrap();
    let yaml = format!(
        "plugins_dir: {}\nhandlers:\n  log:\n    plugin: {reference}\nroutes:\n  - name: cms\n    resource: configmaps\n    handler: log\n",
        plugins.path().display()
    );
    let mut t = TestDaemon::start(&yaml).await;
    t.create_configmap(json!({"metadata": {"name": "from-registry"}}))
        .await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.contains("default/from-registry")
    })
    .await;
    let view = plugin_view(&t, &reference).await;
    assert_eq!(view["sha256"], layer, "{view:#}");
    assert_eq!(view["file"], reference.as_str());
    assert!(
        plugins
            .path()
            .join(format!(".oci/blobs/{layer}.wasm"))
            .is_file()
    );

    // The tag now names something that is not a wasm component: the reload is refused
    // with the reason and the running version keeps handling events.
    put_manifest_with_layer_type(
        &registry,
        "plugins/log-events",
        "v1",
        "application/octet-stream",
    )
    .await;
    let encoded = reference.replace(':', "%3A").replace('/', "%2F");
    let (code, body) = t.post(&format!("/plugins/{encoded}/reload")).await;
    assert_ne!(code, 200, "{body:#}");
    let view = plugin_view(&t, &reference).await;
    let error = view["last_error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.contains("its layer's media type is application/octet-stream, not application/wasm"),
        "{view:#}"
    );
    assert_eq!(view["sha256"], layer);

    // The registry gone: the reload says so, and events are still handled.
    registry.stop();
    let (code, _) = t.post(&format!("/plugins/{encoded}/reload")).await;
    assert_ne!(code, 200);
    let view = plugin_view(&t, &reference).await;
    assert!(
        view["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("cannot reach the registry {}", registry.host)),
        "{view:#}"
    );
    t.create_configmap(json!({"metadata": {"name": "still-running"}}))
        .await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.contains("default/still-running")
    })
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_pinned_by_digest_loads_from_the_cache_without_the_registry() {
    let mut registry = Registry::start().await;
    let built = support::built_plugin("log-events");
    let (code, out, err) = push(
        built.to_str().unwrap(),
        &registry.reference("plugins/pinned:v1"),
    );
    assert_eq!(code, 0, "{out}{err}");
    let pinned = out.trim().strip_prefix("pushed ").unwrap().to_string();
    let plugins = tempfile::tempdir().unwrap();
    let yaml = format!(
        "plugins_dir: {}\nhandlers:\n  log:\n    plugin: {pinned}\nroutes:\n  - name: cms\n    resource: configmaps\n    handler: log\n",
        plugins.path().display()
    );
    let t = TestDaemon::start(&yaml).await;
    assert_eq!(plugin_view(&t, &pinned).await["loaded"], true);
    t.stop().await;

    // Pulled once: with the registry gone, a new daemon loads it from the plugins folder.
    registry.stop();
    let mut t = TestDaemon::start(&yaml).await;
    let view = plugin_view(&t, &pinned).await;
    assert_eq!(view["loaded"], true, "{view:#}");
    assert_eq!(view["last_error"], Value::Null);
    t.create_configmap(json!({"metadata": {"name": "offline"}}))
        .await;
    support::wait_for_log(&mut t.logs, WAIT, |l| l.message.contains("default/offline")).await;
    t.stop().await;

    // A digest the registry does not have: the handler has no plugin and says why.
    let registry = Registry::start().await;
    let unknown = format!(
        "{}@sha256:{}",
        registry.reference("plugins/pinned"),
        "0".repeat(64)
    );
    let yaml = format!(
        "plugins_dir: {}\nhandlers:\n  log:\n    plugin: {unknown}\nroutes:\n  - name: cms\n    resource: configmaps\n    handler: log\n",
        plugins.path().display()
    );
    let t = TestDaemon::start(&yaml).await;
    let view = plugin_view(&t, &unknown).await;
    assert_eq!(view["loaded"], false);
    let error = view["last_error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with(&format!("cannot pull plugin {unknown}: manifest of")),
        "{error}"
    );
    assert!(error.contains("404"), "{error}");
    t.stop().await;
}

#[tokio::test]
async fn credentials_come_from_a_docker_config_file_and_never_show_in_errors() {
    let registry = Registry::start_with_login("ci", "s3cret-pw").await;
    let dir = tempfile::tempdir().unwrap();
    let built = support::built_plugin("log-events");
    let reference = registry.reference("private/log-events:v1");
    let run = |args: &[&str], auth: Option<&std::path::Path>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
        command
            .args(args)
            .env("HOME", dir.path())
            .env_remove("DOCKER_CONFIG");
        match auth {
            Some(file) => command.env("SWITCHYARD_REGISTRY_AUTH", file),
            None => command.env_remove("SWITCHYARD_REGISTRY_AUTH"),
        };
        let output = spawned::output(&mut command, "switchyard");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned()
                + &String::from_utf8_lossy(&output.stderr),
        )
    };
    // No credentials: refused, saying none are configured.
    let (code, out) = run(&["push", built.to_str().unwrap(), &reference], None);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("wants credentials and none are configured"),
        "{out}"
    );
    // Wrong ones: refused without showing them.
    let wrong = dir.path().join("wrong.json");
    std::fs::write(
        &wrong,
        format!(
            r#"{{"auths": {{"{}": {{"username": "ci", "password": "not-the-pw"}}}}}}"#,
            registry.host
        ),
    )
    .unwrap();
    let (code, out) = run(&["push", built.to_str().unwrap(), &reference], Some(&wrong));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("refused the credentials"), "{out}");
    assert!(!out.contains("not-the-pw"), "{out}");
    // The right ones, as a mounted .dockerconfigjson would hold them: push, then a check of
    // a config naming the artifact pulls and compiles it.
    let auth = dir.path().join(".dockerconfigjson");
    let encoded =
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "ci:s3cret-pw");
    std::fs::write(
        &auth,
        format!(
            r#"{{"auths": {{"{}": {{"auth": "{encoded}"}}}}}}"#,
            registry.host
        ),
    )
    .unwrap();
    let (code, out) = run(&["push", built.to_str().unwrap(), &reference], Some(&auth));
    assert_eq!(code, 0, "{out}");
    let config = support::write_config(
        dir.path(),
        &format!(
            "plugins_dir: {}\nhandlers:\n  log:\n    plugin: {reference}\nroutes:\n  - name: cms\n    resource: configmaps\n    handler: log\n",
            dir.path().join("plugins").display()
        ),
    );
    let (code, out) = run(
        &["check", "--config", config.to_str().unwrap()],
        Some(&auth),
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = run(&["check", "--config", config.to_str().unwrap()], None);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("wants credentials and none are configured"),
        "{out}"
    );
    assert!(!out.contains("s3cret"), "{out}");
}
