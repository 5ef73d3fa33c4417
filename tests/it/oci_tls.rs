//! A registry signed by a CA of its own (Debian's docker-registry serving HTTPS on
//! loopback with a test CA's certificate): trusted through `oci.registries.HOST.ca_file`
//! and `switchyard push --ca-file`, for that registry only.

use serde_json::json;

use crate::oci::{WAIT, check_plugins, loaded, switchyard_within};
use crate::support::registry::Registry;
use crate::support::{self, TestDaemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_with_its_own_ca_is_trusted_through_its_ca_file_and_only_so() {
    let registry = Registry::start_tls().await;
    let ca = registry.ca_file().to_str().unwrap().to_string();
    let built = support::built_plugin("log-events");
    let reference = registry.reference("private/log-events:v1");

    // Without the CA, the push does not get through; with it, it does.
    let (code, out) = switchyard_within(&["push", built.to_str().unwrap(), &reference], &[]).await;
    assert_eq!(code, 1, "{out}");
    let (code, out) = switchyard_within(
        &[
            "push",
            built.to_str().unwrap(),
            &reference,
            "--ca-file",
            &ca,
        ],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let pinned = out
        .trim()
        .strip_prefix("pushed ")
        .expect("the pinned reference")
        .to_string();

    // A pull trusts the CA the config gives for that registry.
    let dir = tempfile::tempdir().unwrap();
    let trusted = format!(
        "oci:\n  registries:\n    \"{}\":\n      ca_file: {ca}\n",
        registry.host
    );
    let (code, out) = check_plugins(dir.path(), &trusted, &[("log", &reference)], &[]).await;
    assert_eq!(code, 0, "{out}");

    // Another CA is no use: the registry's certificate is refused, naming why.
    let other = Registry::start_tls().await;
    let wrong = format!(
        "oci:\n  registries:\n    \"{}\":\n      ca_file: {}\n",
        registry.host,
        other.ca_file().display()
    );
    let (code, out) = check_plugins(dir.path(), &wrong, &[("log", &pinned)], &[]).await;
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "handlers.log.plugin: cannot pull plugin {pinned}: cannot reach the registry {}",
            registry.host
        )) && out.contains("invalid peer certificate: UnknownIssuer"),
        "{out}"
    );

    // The daemon pulls from it too, and handles events with what it pulled.
    let plugins = tempfile::tempdir().unwrap();
    let yaml = format!(
        "plugins_dir: {}\n{trusted}handlers:\n  log:\n    plugin: {pinned}\nroutes:\n  - name: cms\n    resource: configmaps\n    handler: log\n",
        plugins.path().display()
    );
    let mut t = TestDaemon::start(&yaml).await;
    loaded(&t, &pinned).await;
    t.create_configmap(json!({"metadata": {"name": "over-tls"}}))
        .await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.contains("default/over-tls")
    })
    .await;
    t.stop().await;
}
