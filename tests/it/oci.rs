//! Plugins from an OCI registry (a real one, Debian's docker-registry, on loopback):
//! `switchyard push`, a handler whose `plugin:` is an `oci://` reference, the digest in
//! `/plugins`, the cache in the plugins folder, and the errors that keep the running version.
//! Then registries that misbehave ([`Hostile`]): bodies without end, no answer at all, and a
//! proxy that must never see credentials.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::hostile::{Hostile, Reply, STREAM_BUDGET};
use crate::support::registry::Registry;
use crate::support::spawned;
use crate::support::{self, TestDaemon};

pub(crate) const WAIT: Duration = Duration::from_secs(60);
/// How long a `switchyard` command may run before the test gives up on it (and kills it).
const COMMAND_LIMIT: Duration = Duration::from_secs(60);
/// The variables that point HTTP clients at a proxy.
const PROXY_VARIABLES: [&str; 8] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// `switchyard push FILE REFERENCE`: exit code, stdout, stderr.
pub(crate) fn push(file: &str, reference: &str) -> (i32, String, String) {
    crate::support::process::switchyard(&["push", file, reference])
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
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

/// `switchyard ARGS` run to its end with `env` set (no proxy variables but those given, no
/// credentials file but one given), within [`COMMAND_LIMIT`] or killed: exit code and
/// output (stdout then stderr).
pub(crate) async fn switchyard_within(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let home = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"));
    for name in PROXY_VARIABLES {
        command.env_remove(name);
    }
    command
        .args(args)
        .env("HOME", home.path())
        .env_remove("DOCKER_CONFIG")
        .env_remove("SWITCHYARD_REGISTRY_AUTH")
        .envs(env.iter().copied())
        .kill_on_drop(true);
    let output = tokio::time::timeout(COMMAND_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("switchyard {args:?} did not finish within {COMMAND_LIMIT:?}"))
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    )
}

/// `switchyard check` of a config whose handlers NAME use the plugins given, each routed
/// ConfigMaps, with `extra` at the top; runs as [`switchyard_within`].
pub(crate) async fn check_plugins(
    dir: &std::path::Path,
    extra: &str,
    plugins: &[(&str, &str)],
    env: &[(&str, &str)],
) -> (i32, String) {
    let mut yaml = format!(
        "plugins_dir: {}
{extra}handlers:
",
        dir.join("plugins").display()
    );
    for (name, plugin) in plugins {
        yaml.push_str(&format!(
            "  {name}:
    plugin: {plugin}
"
        ));
    }
    yaml.push_str(
        "routes:
",
    );
    for (name, _) in plugins {
        yaml.push_str(&format!(
            "  - name: {name}
    resource: configmaps
    handler: {name}
"
        ));
    }
    let config = support::write_config(dir, &yaml);
    switchyard_within(&["check", "--config", config.to_str().unwrap()], env).await
}

/// A wasm artifact's manifest whose one layer is `digest`, `size` bytes.
fn wasm_manifest(digest: &str, size: u64) -> Vec<u8> {
    json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": digest, "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": digest, "size": size}],
    })
    .to_string()
    .into_bytes()
}

/// The `/plugins` entry named `name`.
pub(crate) async fn plugin_view(t: &TestDaemon, name: &str) -> Value {
    let (code, body) = t.get("/plugins").await;
    assert_eq!(code, 200);
    body["plugins"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no plugin {name} in {body:#}"))
}

/// The `/plugins` entry named `name` once it is loaded (pulls run in the background).
pub(crate) async fn loaded(t: &TestDaemon, name: &str) -> Value {
    support::eventually("the plugin to load", WAIT, async || {
        let view = plugin_view(t, name).await;
        (view["loaded"] == true).then_some(view)
    })
    .await
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
    let view = loaded(&t, &reference).await;
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
    loaded(&t, &pinned).await;
    t.stop().await;

    // Pulled once: with the registry gone, a new daemon loads it from the plugins folder.
    registry.stop();
    let mut t = TestDaemon::start(&yaml).await;
    let view = loaded(&t, &pinned).await;
    assert_eq!(view["last_error"], Value::Null);
    assert_eq!(view["pull_failures"], 0);
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
    let view = support::eventually("the pull to fail", WAIT, async || {
        let view = plugin_view(&t, &unknown).await;
        view["last_error"].is_string().then_some(view)
    })
    .await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_or_error_body_without_end_is_cut_off_at_its_cap() {
    let registry = Hostile::start(|line| match line {
        l if l.starts_with("GET /v2/plugins/endless/manifests/") => Reply::Endless { status: 200 },
        _ => Reply::Endless { status: 404 },
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let endless = registry.reference("plugins/endless:v1");
    let missing = registry.reference("plugins/missing:v1");
    let (code, out) = check_plugins(
        dir.path(),
        "",
        &[("endless", &endless), ("missing", &missing)],
        &[],
    )
    .await;
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "handlers.endless.plugin: cannot pull plugin {endless}: the manifest of {endless} is larger than 4194304 bytes (4 MiB), the most a manifest may be"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "handlers.missing.plugin: cannot pull plugin {missing}: manifest of {missing}: the registry answered 404 Not Found"
        )),
        "{out}"
    );
    // Cut off near the cap, not read on to the end the server allows. The server counts
    // what it wrote into its sockets: past what the client read, each of the two
    // connections holds up to a send buffer and an autotuned receive window (loopback's
    // `tcp_rmem` allows 32 MiB), 17 MiB in all once on a loaded machine.
    assert!(
        registry.streamed() < STREAM_BUDGET / 2,
        "{} bytes streamed",
        registry.streamed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_longer_than_its_manifest_says_or_over_the_cap_is_refused() {
    let bytes = vec![7u8; 1000];
    let digest = format!("sha256:{}", sha256_hex(&bytes));
    let (small, huge) = (
        wasm_manifest(&digest, 1000),
        wasm_manifest(&digest, 2 << 30),
    );
    let registry = Hostile::start(move |line| match line {
        l if l.contains("/blobs/") => Reply::Endless { status: 200 },
        l if l.contains("/longer/manifests/") => {
            Reply::ok("application/vnd.oci.image.manifest.v1+json", small.clone())
        }
        _ => Reply::ok("application/vnd.oci.image.manifest.v1+json", huge.clone()),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let longer = registry.reference("plugins/longer:v1");
    let huge = registry.reference("plugins/huge:v1");
    let (code, out) =
        check_plugins(dir.path(), "", &[("longer", &longer), ("huge", &huge)], &[]).await;
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "cannot pull plugin {longer}: the layer {digest} of {longer} is larger than 1000 bytes, the size its manifest gives"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "cannot pull plugin {huge}: its component is 2147483648 bytes (2048 MiB), more than oci.max_layer_size (67108864 bytes)"
        )),
        "{out}"
    );
    assert!(registry.streamed() < STREAM_BUDGET / 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_never_answers_times_out_as_configured() {
    let registry = Hostile::start(|_| Reply::Never).await;
    let dir = tempfile::tempdir().unwrap();
    let silent = registry.reference("plugins/silent:v1");
    let (code, out) = check_plugins(
        dir.path(),
        "oci:\n  connect_timeout: 1s\n  timeout: 2s\n",
        &[("silent", &silent)],
        &[],
    )
    .await;
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "cannot pull plugin {silent}: the pull did not finish within 2s (oci.timeout) while fetching the manifest"
        )),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_never_answers_holds_neither_the_start_nor_other_handlers_nor_the_shutdown()
{
    let registry = Hostile::start(|_| Reply::Never).await;
    let remote = registry.reference("plugins/silent:v1");
    let yaml = format!(
        "handlers:\n  local:\n    plugin: log-events\n  remote:\n    plugin: {remote}\nroutes:\n  - name: local\n    resource: configmaps\n    handler: local\n  - name: remote\n    resource: configmaps\n    handler: remote\n"
    );
    let start = TestDaemon::builder(&yaml)
        .plugin_file("log-events", "log-events")
        .start();
    let mut t = tokio::time::timeout(WAIT, start)
        .await
        .expect("the daemon starts while a registry never answers");
    // The handler with a plugin at hand runs; the other waits, shown as pulling.
    t.create_configmap(json!({"metadata": {"name": "while-pulling"}}))
        .await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.contains("default/while-pulling")
    })
    .await;
    let status = t.status_json().await;
    let handler = status["handlers"]
        .as_array()
        .and_then(|all| all.iter().find(|h| h["name"] == "remote").cloned())
        .unwrap();
    assert_eq!(handler["plugin_pulling"], true, "{handler:#}");
    assert_eq!(handler["plugin_loaded"], false, "{handler:#}");
    assert_eq!(plugin_view(&t, &remote).await["pulling"], true);
    let livez = reqwest::get(t.probes_url("/livez")).await.unwrap();
    assert_eq!(livez.status(), 200);
    // A reload of the plugin hangs too (behind the pull that hangs on the registry), until
    // the shutdown abandons it.
    support::eventually("the pull to reach the registry", WAIT, async || {
        (registry.accepted() >= 1).then_some(())
    })
    .await;
    let encoded = remote.replace(':', "%3A").replace('/', "%2F");
    let reload = tokio::spawn(
        t.request(reqwest::Method::POST, &format!("/plugins/{encoded}/reload"))
            .send(),
    );
    // The reload must reach the daemon before it stops listening: a request still being
    // connected when the listener closes is reset, and then nothing answers it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::time::timeout(WAIT, t.stop())
        .await
        .expect("the shutdown keeps to its grace while a pull hangs");
    let response = reload.await.unwrap().expect("an answer to the reload");
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .ends_with("was abandoned: the daemon is shutting down"),
        "{body:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pull_is_tried_again_and_its_handler_starts_once_it_succeeds() {
    let mut registry = Registry::start().await;
    let built = support::built_plugin("log-events");
    let reference = registry.reference("plugins/later:v1");
    let (code, out, err) = push(built.to_str().unwrap(), &reference);
    assert_eq!(code, 0, "{out}{err}");
    registry.stop();
    let plugins = tempfile::tempdir().unwrap();
    let yaml = format!(
        "plugins_dir: {}\nhandlers:\n  log:\n    plugin: {reference}\nroutes:\n  - name: cms\n    resource: configmaps\n    handler: log\n",
        plugins.path().display()
    );
    let mut t = TestDaemon::start(&yaml).await;
    t.create_configmap(json!({"metadata": {"name": "queued"}}))
        .await;
    let view = support::eventually("a failed try", WAIT, async || {
        let view = plugin_view(&t, &reference).await;
        (view["pull_failures"].as_u64() >= Some(1)).then_some(view)
    })
    .await;
    assert_eq!(view["pulling"], true, "{view:#}");
    assert!(
        view["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("cannot reach the registry {}", registry.host)),
        "{view:#}"
    );
    // The registry is back: a later try loads the plugin and the queued event is handled.
    registry.restart().await;
    support::wait_for_log(&mut t.logs, WAIT, |l| l.message.contains("default/queued")).await;
    let view = plugin_view(&t, &reference).await;
    assert_eq!(
        (&view["loaded"], &view["pulling"]),
        (&json!(true), &json!(false))
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_goes_only_to_loopback_and_no_proxy_sees_credentials() {
    // A proxy that asks for Basic credentials on every plain request (as the registry
    // would) and refuses every tunnel, recording all it is sent.
    let proxy = Hostile::start(|line| match line {
        l if l.starts_with("CONNECT ") => Reply::Full {
            status: 403,
            headers: Vec::new(),
            body: Vec::new(),
        },
        _ => Reply::Full {
            status: 401,
            headers: vec![("www-authenticate", "Basic realm=\"proxy\"".to_string())],
            body: Vec::new(),
        },
    })
    .await;
    let registry = Registry::start_with_login("ci", "s3cret-pw").await;
    let port = proxy.host.rsplit_once(':').unwrap().1.to_string();
    let lookalike = format!("127.adv-test.invalid:{port}");
    let insecure = format!("insecure.adv-test.invalid:{port}");
    let dir = tempfile::tempdir().unwrap();
    let auth = dir.path().join("auth.json");
    let login = json!({"username": "ci", "password": "s3cret-pw"});
    std::fs::write(
        &auth,
        json!({"auths": {&registry.host: login, &lookalike: login, &insecure: login}}).to_string(),
    )
    .unwrap();
    let mut env = vec![("SWITCHYARD_REGISTRY_AUTH", auth.to_str().unwrap())];
    let proxy_url = proxy.url();
    for name in &PROXY_VARIABLES[..6] {
        env.push((name, &proxy_url));
    }
    // The registry on loopback is reached directly, past the proxy, with its credentials.
    let direct = registry.reference("private/log-events:v1");
    let built = support::built_plugin("log-events");
    let (code, out) = switchyard_within(&["push", built.to_str().unwrap(), &direct], &env).await;
    assert_eq!(code, 0, "{out}");
    // A name that only looks like loopback goes over HTTPS: the proxy gets a tunnel request.
    let dir = tempfile::tempdir().unwrap();
    let fake = format!("oci://{lookalike}/plugins/x:v1");
    let (code, out) = check_plugins(
        dir.path(),
        "",
        &[("direct", &direct), ("lookalike", &fake)],
        &env,
    )
    .await;
    assert_eq!(code, 2, "{out}");
    assert!(!out.contains("handlers.direct.plugin"), "{out}");
    assert!(
        out.contains(&format!(
            "handlers.lookalike.plugin: cannot pull plugin {fake}: cannot reach the registry {lookalike}"
        )),
        "{out}"
    );
    // A registry listed as insecure is spoken to over plain HTTP (through the proxy here),
    // and never given the credentials it asks for.
    let plain = format!("oci://{insecure}/plugins/x:v1");
    let (code, out) = check_plugins(
        dir.path(),
        &format!("oci:\n  insecure_registries: [\"{insecure}\"]\n"),
        &[("insecure", &plain)],
        &env,
    )
    .await;
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "cannot pull plugin {plain}: {insecure} wants credentials, and they are never sent over plain HTTP to a registry that is not this machine"
        )),
        "{out}"
    );
    assert!(!out.contains("s3cret"), "{out}");
    let seen = proxy.requests();
    assert!(
        seen.iter()
            .any(|r| r.starts_with(&format!("CONNECT {lookalike} "))),
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|r| r.starts_with(&format!("GET http://{insecure}/v2/"))),
        "{seen:#?}"
    );
    for request in &seen {
        let lower = request.to_ascii_lowercase();
        assert!(!lower.contains("\r\nauthorization:"), "{seen:#?}");
        assert!(!request.contains(&registry.host), "{seen:#?}");
        assert!(
            !request.starts_with(&format!("GET http://{lookalike}")),
            "{seen:#?}"
        );
    }
}
