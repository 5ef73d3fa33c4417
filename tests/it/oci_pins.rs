//! Digest pins against a real registry (Debian's docker-registry on loopback): a reload that
//! names a pin the registry does not have keeps the running version, and a pin is checked
//! against the repository it names, not only against what the cache holds.

use serde_json::{Value, json};

use crate::oci::{WAIT, check_plugins, loaded, plugin_view, push};
use crate::support::registry::Registry;
use crate::support::{self, TestDaemon};

/// Pushes the built plugin `built` to `registry` as `repository:v1`; the pinned reference.
fn push_pinned(registry: &Registry, built: &str, repository: &str) -> String {
    let file = support::built_plugin(built);
    let (code, out, err) = push(
        file.to_str().unwrap(),
        &registry.reference(&format!("{repository}:v1")),
    );
    assert_eq!(code, 0, "{out}{err}");
    out.trim()
        .strip_prefix("pushed ")
        .expect("the pinned reference")
        .to_string()
}

/// A config whose handler `log` runs `plugin` on ConfigMaps, with its plugins folder.
fn config(plugins: &std::path::Path, plugin: &str) -> String {
    format!(
        "plugins_dir: {}\nhandlers:\n  log:\n    plugin: {plugin}\nroutes:\n  - name: cms\n    resource: configmaps\n    handler: log\n",
        plugins.display()
    )
}

/// The `/status` entry of the handler `log`.
async fn handler(t: &TestDaemon) -> Value {
    let status = t.status_json().await;
    status["handlers"]
        .as_array()
        .and_then(|all| all.iter().find(|h| h["name"] == "log").cloned())
        .unwrap_or_else(|| panic!("no handler log in {status:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_a_pin_the_registry_lacks_keeps_the_running_version_and_says_why() {
    let registry = Registry::start().await;
    let good = push_pinned(&registry, "log-events", "team/log");
    let plugins = tempfile::tempdir().unwrap();
    let mut t = TestDaemon::start(&config(plugins.path(), &good)).await;
    loaded(&t, &good).await;

    // The same repository, a digest it does not hold: the reload is applied, the pull
    // fails, and the version running before it keeps handling events.
    let bad = format!(
        "{}@sha256:{}",
        registry.reference("team/log"),
        "0".repeat(64)
    );
    t.write_config(&config(plugins.path(), &bad));
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 200, "{body:#}");
    let status = support::eventually("the failed pull to be reported", WAIT, async || {
        let status = handler(&t).await;
        status["plugin_error"].is_string().then_some(status)
    })
    .await;
    let error = status["plugin_error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("cannot pull plugin {bad}: manifest of")),
        "{status:#}"
    );
    assert!(
        error.ends_with(&format!(
            "; still running {good}, the plugin before the config changed, until this one loads"
        )),
        "{status:#}"
    );
    assert_eq!(status["plugin"], bad.as_str(), "{status:#}");
    assert_eq!(status["plugin_loaded"], true, "{status:#}");
    t.create_configmap(json!({"metadata": {"name": "after-the-reload"}}))
        .await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.contains("default/after-the-reload")
    })
    .await;
    let readyz = reqwest::get(t.probes_url("/readyz")).await.unwrap();
    assert_eq!(readyz.status(), 200);
    assert_eq!(plugin_view(&t, &bad).await["loaded"], false);

    // Another pin it lacks: the version still running is still the first one's.
    let worse = format!(
        "{}@sha256:{}",
        registry.reference("team/log"),
        "1".repeat(64)
    );
    t.write_config(&config(plugins.path(), &worse));
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 200, "{body:#}");
    let status = support::eventually("the second failed pull", WAIT, async || {
        let status = handler(&t).await;
        let error = status["plugin_error"].as_str()?;
        error.contains(&worse).then_some(status)
    })
    .await;
    assert!(
        status["plugin_error"]
            .as_str()
            .unwrap()
            .contains(&format!("; still running {good}, the plugin before")),
        "{status:#}"
    );
    assert_eq!(status["plugin_loaded"], true, "{status:#}");

    // A pin that loads replaces the stand-in and clears the error. (A Rust plugin: a
    // JavaScript one takes long to compile beside the other tests.)
    let other = push_pinned(&registry, "noop", "team/events");
    t.write_config(&config(plugins.path(), &other));
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 200, "{body:#}");
    loaded(&t, &other).await;
    let status = support::eventually("the new plugin to run", WAIT, async || {
        let status = handler(&t).await;
        status["plugin_error"].is_null().then_some(status)
    })
    .await;
    assert_eq!(status["plugin_loaded"], true, "{status:#}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_is_looked_up_in_the_repository_it_names_not_in_another_ones_cache() {
    let registry = Registry::start().await;
    let js = push_pinned(&registry, "log-events", "team-js");
    let digest = js.split_once('@').unwrap().1;
    let dir = tempfile::tempdir().unwrap();
    // The first check pulls team-js and caches it in the plugins folder.
    let (code, out) = check_plugins(dir.path(), "", &[("js", &js)], &[]).await;
    assert_eq!(code, 0, "{out}");
    // team-rs never held that manifest: the registry is asked, and says so.
    let rs = format!("{}@{digest}", registry.reference("team-rs"));
    let (code, out) = check_plugins(dir.path(), "", &[("rs", &rs)], &[]).await;
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "handlers.rs.plugin: cannot pull plugin {rs}: manifest of {rs}: the registry answered 404 Not Found"
        )),
        "{out}"
    );
    // team-js's pin still loads from the cache, with the registry gone.
    drop(registry);
    let (code, out) = check_plugins(dir.path(), "", &[("js", &js)], &[]).await;
    assert_eq!(code, 0, "{out}");
}
