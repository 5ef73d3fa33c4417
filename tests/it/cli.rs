//! The `switchyard` binary: `check` on good and bad configs and plugins.

use std::process::Command;

use crate::support;

fn switchyard(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .output()
        .expect("run switchyard");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn check_accepts_the_demo_config_with_its_built_plugin() {
    support::plugins_dir();
    let config = support::root().join("config/demo.yaml");
    let (code, out, err) = switchyard(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok (1 handler(s), 2 route(s)"), "{out}");
}

#[test]
fn check_lists_every_config_error_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "handlers:\n  log-events: {}\nroutes:\n  - name: a\n    resource: configmaps\n    handler: log-event\n  - name: b\n    resource: Pods\n    handler: log-events\n",
    )
    .unwrap();
    let (code, out, err) = switchyard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    let shown = path.display();
    assert!(
        err.contains(&format!("{shown}:6:14: routes[0].handler: unknown handler \"log-event\"; did you mean \"log-events\"?")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{shown}:8:15: routes[1].resource: invalid resource \"Pods\""
        )),
        "{err}"
    );
    assert!(err.contains("2 problem(s); nothing was started"), "{err}");
}

#[test]
fn check_reports_a_plugin_that_is_not_a_component() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("plugins")).unwrap();
    std::fs::write(dir.path().join("plugins/junk.wasm"), b"this is not wasm").unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "handlers:\n  junk: {}\nroutes:\n  - name: a\n    resource: configmaps\n    handler: junk\n").unwrap();
    let (code, _, err) = switchyard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "handlers.junk.plugin: plugin \"junk\" is invalid: not a WebAssembly component"
        ),
        "{err}"
    );
}

#[test]
fn check_reports_an_unreadable_config_file() {
    let (code, _, err) = switchyard(&["check", "--config", "/nonexistent/switchyard.yaml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/nonexistent/switchyard.yaml: cannot read the config file"),
        "{err}"
    );
}

#[test]
fn check_accepts_the_python_example_handler() {
    let plugins = support::plugins_dir();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("python.yaml");
    std::fs::write(
        &path,
        format!(
            "plugins_dir: {}\nhandlers:\n  event-summary:\n    config:\n      prefix: py\nroutes:\n  - name: a\n    resource: configmaps\n    handler: event-summary\n",
            plugins.display()
        ),
    )
    .unwrap();
    let (code, out, err) = switchyard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok (1 handler(s), 1 route(s)"), "{out}");
}
