//! The `switchyard` binary: `check` on good and bad configs and plugins (and, with a cluster,
//! against what the API server serves), the demo end to end, and `run`'s threads.

use std::time::Duration;

use crate::support;
use crate::support::process::{Process, switchyard, switchyard_with_env};

#[test]
fn check_accepts_the_demo_config_with_its_built_plugin() {
    support::plugins_dir();
    let config = support::root().join("config/demo.yaml");
    let (code, out, err) = switchyard(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok (4 handler(s), 5 route(s)"), "{out}");
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
    // The plugin is looked for in the same run.
    assert!(
        err.contains(&format!(
            "{shown}:2:15: handlers.log-events.plugin: cannot read plugin"
        )),
        "{err}"
    );
    assert!(err.contains("3 problem(s)"), "{err}");
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

#[test]
fn check_refuses_batch_for_a_plugin_without_handle_batch_at_its_place() {
    let plugins = support::plugins_dir();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("batch.yaml");
    std::fs::write(
        &path,
        format!(
            "plugins_dir: {}\nhandlers:\n  sink:\n    plugin: noop\n    batch:\n      max_events: 10\n  bulk:\n    plugin: batcher\n    batch: {{}}\nroutes:\n  - name: a\n    resource: configmaps\n    handler: sink\n  - name: b\n    resource: configmaps\n    handler: bulk\n",
            plugins.display()
        ),
    )
    .unwrap();
    let (code, _, err) = switchyard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "batch.yaml:6:7: handlers.sink.batch: plugin \"noop\" does not export handle-batch"
        ),
        "{err}"
    );
    assert!(!err.contains("handlers.bulk"), "{err}");
}

#[test]
fn check_and_run_list_every_value_run_would_refuse_each_at_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.yaml");
    std::fs::write(
        &path,
        "\
admin:
  token_env: SWITCHYARD_CLI_TEST_EMPTY_TOKEN
handlers:
  big:
    memory: 1000Gi
    concurrency: 100000
    timeout: 0s
  small:
    memory: 0
    concurrency: lots
    max_retries: -1
routes:
  - {name: a, resource: configmaps, handler: big}
  - {name: b, resource: configmaps, handler: small}
",
    )
    .unwrap();
    let shown = path.display();
    let expected = [
        "2:14: admin.token_env: the admin token variable SWITCHYARD_CLI_TEST_EMPTY_TOKEN is empty",
        "5:13: handlers.big.memory: memory of 1073741824000 bytes is more than a plugin instance can address",
        "6:18: handlers.big.concurrency: concurrency 100000 is more than the plugin instance pool can hold",
        "7:14: handlers.big.timeout: timeout must be longer than 0s",
        "9:13: handlers.small.memory: memory must be at least 64Ki",
        "10:18: handlers.small.concurrency: ",
        "11:18: handlers.small.max_retries: ",
    ];
    for command in ["check", "run"] {
        let (code, out, err) = switchyard_with_env(
            &[command, "--config", path.to_str().unwrap()],
            &[("SWITCHYARD_CLI_TEST_EMPTY_TOKEN", "")],
        );
        assert_eq!(code, 2, "{command}: {err}");
        assert!(out.is_empty(), "{command}: {out}");
        for line in expected {
            assert!(
                err.contains(&format!("error: {shown}:{line}")),
                "{command}: {line}\n{err}"
            );
        }
        // `check` also looks for the plugins of handlers with wrong values.
        let problems = if command == "check" { 9 } else { 7 };
        assert!(
            err.contains(&format!("{problems} problem(s)")),
            "{command}: {err}"
        );
    }
}

#[test]
fn check_refuses_an_admin_api_beyond_loopback_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("open.yaml");
    std::fs::write(
        &path,
        "admin:\n  listen: 0.0.0.0:9470\nhandlers:\n  h: {}\nroutes:\n  - {name: a, resource: configmaps, handler: h}\n",
    )
    .unwrap();
    let (code, _, err) = switchyard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{}:2:11: admin.listen: the admin API would listen on 0.0.0.0:9470, beyond loopback, without a token",
            path.display()
        )),
        "{err}"
    );
}

#[test]
fn check_reports_a_bad_probes_address_and_an_unset_path_variable_at_their_places() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probes.yaml");
    std::fs::write(
        &path,
        "plugins_dir: ${SWITCHYARD_CLI_TEST_NEVER_SET}/plugins\nadmin:\n  probes_listen: 0.0.0.0:http\nhandlers:\n  h: {}\nroutes:\n  - {name: a, resource: configmaps, handler: h}\n",
    )
    .unwrap();
    let (code, _, err) = switchyard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    let shown = path.display();
    assert!(
        err.contains(&format!("{shown}:1:14: plugins_dir: the variable SWITCHYARD_CLI_TEST_NEVER_SET in this path is not set")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{shown}:3:18: admin.probes_listen: ")),
        "{err}"
    );
    assert!(err.contains("2 problem(s)"), "{err}");
}

/// A config with one mistake of every kind `check` finds, each with where it is reported.
/// Some items hold several (route `b`: a value of the wrong type beside two names that
/// name nothing), so that a mistake found early cannot hide one found later.
const EVERY_MISTAKE: &str = "\
admin:
  listen: 0.0.0.0:9470
informers:
  pods:
    resource: v1/pod
  deployments:
    group: apps
    version: v1
    kind: Deploymnt
  old:
    resource: apps/v1beta1/deployments
handlers:
  h1:
    concurrency: lots
    timeout: forever
  missing-plugin: {}
  writer:
    capabilities:
      configmap: [patch]
routes:
  - name: a
    resource: v1/configmapz
    handler: h1
  - name: b
    informer: nope
    handler: h3
    delivery: 7
  - name: a
    kinds: [Pod]
    handler: missing-plugin
    when:
      - path: /metadata/~2x
        equals: 1
  - name: w
    resource: configmaps
    handler: writer
";

/// What `check` reports for [`EVERY_MISTAKE`]; `plugin` marks what only `check` looks at
/// (`run` loads plugins after the config is accepted).
const EVERY_MISTAKE_FOUND: &[(&str, bool)] = &[
    (
        "error: {}:2:11: admin.listen: the admin API would listen on 0.0.0.0:9470, beyond loopback, without a token",
        false,
    ),
    (
        "error: {}:5:15: informers.pods.resource: v1 has no resource \"pod\"; did you mean \"pods\"?",
        false,
    ),
    (
        "error: {}:9:11: informers.deployments.kind: apps/v1 has no kind \"Deploymnt\"; did you mean \"Deployment\"?",
        false,
    ),
    (
        "warning: {}:11:15: informers.old.resource: Kubernetes serves no apps/v1beta1; apps has: v1",
        false,
    ),
    (
        "error: {}:14:5: handlers.h1.plugin: cannot read plugin",
        true,
    ),
    ("error: {}:14:18: handlers.h1.concurrency: ", false),
    (
        "error: {}:15:14: handlers.h1.timeout: invalid duration \"forever\"",
        false,
    ),
    (
        "error: {}:16:19: handlers.missing-plugin.plugin: cannot read plugin",
        true,
    ),
    (
        "error: {}:18:5: handlers.writer.plugin: cannot read plugin",
        true,
    ),
    (
        "error: {}:19:7: handlers.writer.capabilities.configmap: handler \"writer\" neither watches nor reads \"configmap\", so it grants nothing; did you mean \"configmaps\"?",
        false,
    ),
    (
        "error: {}:22:15: routes[0].resource: v1 has no resource \"configmapz\"; did you mean \"configmaps\"?",
        false,
    ),
    (
        "error: {}:25:15: routes[1].informer: unknown informer \"nope\"",
        false,
    ),
    (
        "error: {}:26:14: routes[1].handler: unknown handler \"h3\"",
        false,
    ),
    (
        "error: {}:27:15: routes[1].delivery: invalid type: integer `7`",
        false,
    ),
    (
        "error: {}:28:11: routes[2].name: duplicate route name \"a\"",
        false,
    ),
    (
        "error: {}:32:15: routes[2].when[0].path: invalid JSON pointer \"/metadata/~2x\"",
        false,
    ),
];

#[test]
fn check_reports_a_mistake_of_every_kind_in_one_run_and_run_refuses_the_same() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("plugins")).unwrap();
    let path = dir.path().join("every.yaml");
    std::fs::write(&path, EVERY_MISTAKE).unwrap();
    let (code, out, err) = switchyard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    let shown = path.display().to_string();
    for (line, _) in EVERY_MISTAKE_FOUND {
        let line = line.replace("{}", &shown);
        assert!(err.contains(&line), "missing {line}\nin:\n{err}");
    }
    assert!(err.contains("15 problem(s), 1 warning(s)"), "{err}");

    // `run` refuses the config for the same mistakes, in one go, before it loads plugins.
    let (code, out, run_err) = switchyard(&["run", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{run_err}");
    assert!(out.is_empty(), "{out}");
    for (line, plugin) in EVERY_MISTAKE_FOUND {
        if *plugin || line.starts_with("warning") {
            continue;
        }
        let line = line.replace("{}", &shown);
        assert!(
            run_err.contains(&line),
            "run: missing {line}\nin:\n{run_err}"
        );
    }
    assert!(run_err.contains("12 problem(s)"), "{run_err}");

    // The same as one JSON object for CI.
    let (code, out, err) = switchyard(&["check", "--json", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(report["ok"], false);
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 16, "{report:#}");
    assert_eq!(findings[1]["severity"], "error");
    assert_eq!(findings[1]["path"], "informers.pods.resource");
    assert_eq!(findings[1]["line"], 5);
    assert_eq!(findings[3]["severity"], "warning");
    assert_eq!(findings[3]["path"], "informers.old.resource");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_with_cluster_asks_the_api_server_which_resources_it_serves() {
    let plugins = support::plugins_dir();
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let path = dir.path().join("cluster.yaml");
    std::fs::write(
        &path,
        format!(
            "plugins_dir: {}\nhandlers:\n  log-events: {{}}\nroutes:\n  - {{name: a, resource: configmaps, handler: log-events}}\n  - {{name: b, resource: example.com/v1/widgets, handler: log-events}}\n",
            plugins.display()
        ),
    )
    .unwrap();
    let args: Vec<String> = [
        "check",
        "--cluster",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--config",
        path.to_str().unwrap(),
    ]
    .map(String::from)
    .into();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        switchyard(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    // Not served is a warning (the route would wait), not an error.
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("ok (1 handler(s), 2 route(s)), 1 warning(s)"),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "warning: {}:6:25: routes[1].resource: cannot discover example.com/v1/widgets: ",
            path.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("its routes would wait until it is served"),
        "{err}"
    );
    assert!(
        !err.contains("Status {"),
        "a Status shown as a debug dump: {err}"
    );
    assert!(!err.contains("configmaps"), "{err}");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_prints_every_event_and_shows_retries_dead_letters_writes_reloads_and_swaps() {
    support::plugins_dir();
    let config = support::root().join("config/demo.yaml");
    let args = [
        "demo",
        "--seconds",
        "22",
        "--config",
        config.to_str().unwrap(),
    ];
    let args: Vec<String> = args.map(String::from).into();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        switchyard(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    for wanted in [
        "  status page: http://127.0.0.1:",
        "[log-events] info: added Pod default/web-0 ",
        "[label-guard] info: labelled ConfigMap default/app-settings owner=unknown",
        "[summary] info: summary added ConfigMap default/app-settings ",
        "==> handler summary (Python) failed 3 time(s); after its retries it keeps 1 dead letter(s)",
        "==> reloaded: routes ~pods",
        "==> a Warning Event about Pod default/web-1: handler alerts (the slack sink) posts it to the receiver",
        "[receiver] request 1 to /hooks/alerts: answered 503",
        "[receiver] request 2 to /hooks/alerts: answered 200: Warning BackOff on Pod default/web-1: Back-off restarting failed container main in pod web-1",
        "==> retrying 1 dead letter(s) with the new plugin",
        "[summary] info: added ConfigMap default/broken-settings ",
        "handler summary: processed ",
    ] {
        assert!(out.contains(wanted), "missing {wanted:?} in:\n{out}");
    }
    // Every event log-events handled was printed, the first ones included.
    let printed = out
        .lines()
        .filter(|l| l.starts_with("[log-events] "))
        .count();
    let processed: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("handler log-events: processed "))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .expect("log-events' count");
    assert_eq!(printed, processed, "{out}");
}

/// `run` works on one runtime thread unless `--threads` or `SWITCHYARD_THREADS` says
/// otherwise (the flag winning), and logs the runtime's worker count at start (read from
/// the runtime, not the flag); it refuses a value that is not a count of threads before it
/// starts anything.
#[tokio::test]
async fn run_works_on_the_threads_it_is_given() {
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let config = support::write_config(
        dir.path(),
        "admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\nhandlers:\n  log-events: {}\nroutes:\n  - name: configmaps\n    resource: configmaps\n    handler: log-events\n",
    );
    let run = [
        "run",
        "--config",
        config.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ];
    let unset = ["RUST_LOG", "SWITCHYARD_LOG_FORMAT", "SWITCHYARD_THREADS"];
    /// Flags, environment, and the threads the runtime should have.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], usize);
    let cases: [Case; 3] = [
        (&[], &[], 1),
        (&[], &[("SWITCHYARD_THREADS", "3")], 3),
        (&["--threads", "2"], &[("SWITCHYARD_THREADS", "3")], 2),
    ];
    for (flags, env, threads) in cases {
        let args: Vec<&str> = run.iter().chain(flags).copied().collect();
        let daemon = Process::start(&args, env, &unset);
        let started = daemon
            .wait_for_line(Duration::from_secs(60), |l| {
                l.contains("switchyard started")
            })
            .await;
        assert!(
            started.contains(&format!("threads={threads}")),
            "{flags:?} {env:?}: {started}"
        );
        drop(daemon);
    }
    sim.stop().await;

    let (code, _, err) = switchyard(&[
        "run",
        "--config",
        config.to_str().unwrap(),
        "--threads",
        "0",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("'0' for '--threads <THREADS>': \"0\" is not a number of threads (1 or more)"),
        "{err}"
    );
    let (code, _, err) = switchyard_with_env(
        &["run", "--config", config.to_str().unwrap()],
        &[("SWITCHYARD_THREADS", "many")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("SWITCHYARD_THREADS: \"many\" is not a number of threads (1 or more)"),
        "{err}"
    );
}

/// Regression: a config written for a cluster (`plugins_dir: /plugins`) could not be checked
/// against a local build of its plugins.
#[test]
fn check_looks_for_the_plugins_in_the_folder_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.yaml");
    std::fs::write(
        &path,
        "plugins_dir: /nonexistent-plugins
handlers:
  noop: {}
routes:
  - name: cms
    resource: configmaps
    handler: noop
",
    )
    .unwrap();
    let config = path.to_str().unwrap();
    let (code, _, err) = switchyard(&["check", "--config", config]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent-plugins"), "{err}");
    let local = support::plugins_dir();
    let (code, out, err) = switchyard(&[
        "check",
        "--config",
        config,
        "--plugins-dir",
        local.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
}
