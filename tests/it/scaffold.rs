//! A plugin author's loop outside the repository, from an empty folder: `switchyard new
//! plugin` for each language, the project's own tests against its test host, `switchyard
//! build` (and, for JavaScript and Python, the build cache), and `switchyard replay` running
//! the built component on the sample event; and a project started from a recipe
//! (`--from-recipe`), tested, built and checked with its config fragment.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{self, spawned};

/// Runs `program` with `args` in `dir`, with `env` added.
fn run(dir: &Path, program: &str, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(program);
    command.args(args).current_dir(dir);
    for (key, value) in env {
        command.env(key, value);
    }
    spawned::output(&mut command, program)
}

/// Panics with the output unless `output` succeeded; returns its stdout.
fn ok(what: &str, output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    stdout
}

const SWITCHYARD: &str = env!("CARGO_BIN_EXE_switchyard");

/// Writes project `name` in `lang` into a new empty folder; returns (the folder kept alive,
/// the project folder).
fn new_project(name: &str, lang: &str) -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::tempdir().unwrap();
    let stdout = ok(
        "switchyard new plugin",
        run(
            parent.path(),
            SWITCHYARD,
            &["new", "plugin", name, "--lang", lang, "--dir", "."],
            &[],
        ),
    );
    assert!(stdout.contains("switchyard build"), "{stdout}");
    let project = parent.path().join(name);
    assert!(project.join("wit/world.wit").is_file());
    (parent, project)
}

/// Runs `switchyard build` in the project; returns the line naming the component.
fn build(project: &Path, name: &str, env: &[(&str, &Path)]) -> String {
    let stdout = ok(
        "switchyard build",
        run(project, SWITCHYARD, &["build"], env),
    );
    // After the language tool's own output, the line naming the component.
    let last = stdout.lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with(&format!("built ./{name}.wasm (")),
        "{stdout}"
    );
    assert!(project.join(format!("{name}.wasm")).is_file());
    last
}

/// What `switchyard build` says of a component copied from the build cache.
const FROM_CACHE: &str = "taken from the build cache";

/// Builds the project (asserting it was built, not taken from the cache) and replays its
/// sample event; checks the component's log line and the metrics it recorded (`metrics`:
/// each line's start, in order).
fn build_and_replay(project: &Path, name: &str, env: &[(&str, &Path)], metrics: &[&str]) {
    let line = build(project, name, env);
    assert!(!line.contains(FROM_CACHE), "{line}");
    let stdout = ok(
        "switchyard replay",
        run(
            project,
            SWITCHYARD,
            &[
                "replay",
                "--config",
                "replay.yaml",
                "--events",
                "events.jsonl",
            ],
            // Not the build's environment: replay keeps its compiled code in the usual
            // cache, where the next run finds it.
            &[],
        ),
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..2],
        [
            format!("line 1: added default/demo (route configmaps, handler {name}) -> done"),
            "  log info: added ConfigMap default/demo".to_string(),
        ],
        "{stdout}"
    );
    assert_eq!(lines.len(), 2 + metrics.len(), "{stdout}");
    for (line, start) in lines[2..].iter().zip(metrics) {
        assert!(
            line.starts_with(start),
            "{line:?} does not start {start:?}:\n{stdout}"
        );
    }
}

/// What the JavaScript and Python handlers record for the sample event, with no API
/// server (an empty cache).
const SAMPLE_METRICS: [&str; 3] = [
    "  metric counter events{change=\"added\"} 1",
    "  metric histogram object_kib 0.",
    "  metric gauge cached_objects{namespace=\"default\"} 0",
];

/// Builds the unchanged project again: the same component, from the build cache.
fn build_again_from_the_cache(project: &Path, name: &str, env: &[(&str, &Path)]) {
    let component = project.join(format!("{name}.wasm"));
    let first = std::fs::read(&component).unwrap();
    std::fs::remove_file(&component).unwrap();
    let line = build(project, name, env);
    assert!(line.contains(FROM_CACHE), "{line}");
    assert!(
        std::fs::read(&component).unwrap() == first,
        "the component built first"
    );
}

/// Where the repository keeps build output the tests may reuse across runs.
fn repo_target(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(sub)
}

#[test]
fn a_rust_plugin_project_tests_natively_builds_and_replays() {
    let (_parent, project) = new_project("failed-pods", "rust");
    assert!(project.join("switchyard-sdk/src/testing.rs").is_file());
    // Its own target folder would be cold every run; the dependencies are the same each time.
    let target = repo_target("scaffold-rust");
    let env = [("CARGO_TARGET_DIR", target.as_path())];
    let stdout = ok("cargo test", run(&project, "cargo", &["test"], &env));
    for test in [
        "logs_the_change_and_the_object",
        "the_config_s_prefix_starts_each_line_and_a_misspelt_field_is_refused",
    ] {
        assert!(
            stdout.contains(&format!("test tests::{test} ... ok")),
            "{stdout}"
        );
    }
    // Regression: a new project had no lock file, and cargo took the latest of everything.
    let locked = |path: &Path| {
        let text = std::fs::read_to_string(path).unwrap();
        ["wit-bindgen", "serde_json", "serde"].map(|crate_name| {
            let entry = format!("name = \"{crate_name}\"\nversion = ");
            let at = text
                .find(&entry)
                .unwrap_or_else(|| panic!("{crate_name} in {path:?}"));
            text[at + entry.len()..].lines().next().unwrap().to_string()
        })
    };
    assert_eq!(
        locked(&project.join("Cargo.lock")),
        locked(&support::root().join("plugins/Cargo.lock")),
        "the project's versions are not the ones the repository's plugins are tested with"
    );
    build_and_replay(&project, "failed-pods", &env, &[]);

    // A second project in the same place is refused; the first is kept.
    let output = run(
        project.parent().unwrap(),
        SWITCHYARD,
        &["new", "plugin", "failed-pods", "--dir", "."],
        &[],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("already exists and is not empty"),
        "{stderr}"
    );
    assert!(project.join("failed-pods.wasm").is_file());
}

#[test]
fn a_javascript_plugin_project_tests_in_node_builds_and_replays() {
    let (_parent, project) = new_project("hello-js", "js");
    ok(
        "npm install",
        run(
            &project,
            "npm",
            &["install", "--no-audit", "--no-fund"],
            &[],
        ),
    );
    let stdout = ok("npm test", run(&project, "npm", &["test"], &[]));
    // The example tests assert through the test host: log lines, the counter, gauge (from
    // a cache read) and histogram, a merge patch, each kind of write recorded, and requests
    // sent with `fetch` answered from stubs.
    for test in [
        "ok 1 - logs the change and the object",
        "ok 2 - adds the configured label to an object without it, and only then",
        "ok 3 - a refused write and a bad config are errors the daemon retries",
        "ok 4 - what the host records of each write, and what it refuses",
        "ok 5 - what the host answers and records of requests sent with fetch",
        "# pass 5",
        "# fail 0",
    ] {
        assert!(stdout.contains(test), "{test}:\n{stdout}");
    }
    // A build cache of this test's own: the first build is a build.
    let cache = tempfile::tempdir().unwrap();
    let env = [("XDG_CACHE_HOME", cache.path())];
    build_and_replay(&project, "hello-js", &env, &SAMPLE_METRICS);
    build_again_from_the_cache(&project, "hello-js", &env);
    // A changed source is built again.
    let handler = project.join("handler.js");
    let source = std::fs::read_to_string(&handler).unwrap();
    std::fs::write(&handler, source + "// changed\n").unwrap();
    let line = build(&project, "hello-js", &env);
    assert!(!line.contains(FROM_CACHE), "{line}");
}

#[test]
fn a_python_plugin_project_tests_with_unittest_builds_and_replays() {
    let (_parent, project) = new_project("hello-py", "python");
    let output = run(&project, "python3", &["-m", "unittest", "-v"], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    // The example tests assert through the test host: log lines, the counter, gauge (from
    // a cache read) and histogram, a merge patch, each kind of write recorded, and requests
    // sent with switchyard_http answered from stubs.
    for test in [
        "test_logs_the_change_and_the_object",
        "test_adds_the_configured_label_to_an_object_without_it_and_only_then",
        "test_a_refused_write_and_a_bad_config_are_errors_the_daemon_retries",
        "test_what_the_host_records_of_each_write_and_what_it_refuses",
        "test_what_the_host_answers_and_records_of_http_requests",
        "Ran 5 tests",
    ] {
        assert!(stderr.contains(test), "{test}:\n{stderr}");
    }
    // componentize-py as the repository's build script installs it, found on PATH.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-python-plugins.sh");
    let tool = ok(
        "build-python-plugins.sh --print-tool",
        run(&project, script.to_str().unwrap(), &["--print-tool"], &[]),
    );
    let tool_dir = Path::new(tool.trim()).parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(tool_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let path = PathBuf::from(path);
    let cache = tempfile::tempdir().unwrap();
    let env = [("PATH", path.as_path()), ("XDG_CACHE_HOME", cache.path())];
    build_and_replay(&project, "hello-py", &env, &SAMPLE_METRICS);
    build_again_from_the_cache(&project, "hello-py", &env);

    // Not on the PATH: the one the demo installs in the cache is used.
    let cache = tempfile::tempdir().unwrap();
    let venv = cache.path().join(format!(
        "switchyard/python-venv-{}/bin",
        switchyard::scaffold::templates::COMPONENTIZE_PY
    ));
    std::fs::create_dir_all(&venv).unwrap();
    std::os::unix::fs::symlink(tool.trim(), venv.join("componentize-py")).unwrap();
    let path = std::env::var_os("PATH").unwrap();
    let dirs = std::env::split_paths(&path).filter(|dir| !dir.join("componentize-py").exists());
    let without = PathBuf::from(std::env::join_paths(dirs).unwrap());
    let env = [
        ("XDG_CACHE_HOME", cache.path()),
        ("PATH", without.as_path()),
    ];
    build(&project, "hello-py", &env);
}

#[test]
fn a_rust_project_without_the_wasm_target_is_refused_before_cargo_builds_anything() {
    let (parent, project) = new_project("no-target", "rust");
    // A toolchain whose wasm32-wasip2 library folder is not there.
    let rustc = parent.path().join("rustc");
    std::fs::write(
        &rustc,
        "#!/bin/sh\necho /nonexistent/lib/rustlib/wasm32-wasip2/lib\n",
    )
    .unwrap();
    std::fs::set_permissions(&rustc, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let output = run(
        &project,
        SWITCHYARD,
        &["build"],
        &[("RUSTC", rustc.as_path())],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the wasm32-wasip2 target was not found: add it to the toolchain this project builds with: rustup target add wasm32-wasip2"),
        "{stderr}"
    );
    assert!(!project.join("target").exists(), "cargo ran");
}

#[test]
fn a_project_from_the_janitor_recipe_tests_builds_and_checks_with_its_fragment() {
    let parent = tempfile::tempdir().unwrap();
    let stdout = ok(
        "switchyard new plugin --from-recipe",
        run(
            parent.path(),
            SWITCHYARD,
            &[
                "new",
                "plugin",
                "my-janitor",
                "--from-recipe",
                "janitor",
                "--dir",
                ".",
            ],
            &[],
        ),
    );
    assert!(stdout.contains("from the recipe janitor"), "{stdout}");
    let project = parent.path().join("my-janitor");
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/recipes/janitor");
    let read = |path: &Path| std::fs::read_to_string(path).unwrap();
    // The recipe's plugin with its tests, its README first, its fragment running this plugin.
    assert_eq!(
        read(&project.join("src/lib.rs")),
        read(&recipe.join("src/lib.rs"))
    );
    assert!(read(&project.join("README.md")).starts_with(&read(&recipe.join("README.md"))));
    let fragment = read(&project.join("switchyard.yaml"));
    assert!(
        fragment.contains("\n    plugin: my-janitor\n"),
        "{fragment}"
    );
    assert!(!project.join("replay.yaml").exists());

    let target = repo_target("scaffold-rust");
    let env = [("CARGO_TARGET_DIR", target.as_path())];
    let stdout = ok("cargo test", run(&project, "cargo", &["test"], &env));
    for test in [
        "test tests::an_object_past_its_ttl_is_deleted_with_a_normal_event ... ok",
        "test tests::the_cache_decides_over_an_older_event ... ok",
        "test result: ok. 8 passed",
    ] {
        assert!(stdout.contains(test), "{test}:\n{stdout}");
    }
    build(&project, "my-janitor", &env);
    // The fragment as the project has it is a valid config, its plugin the one just built.
    let stdout = ok(
        "switchyard check",
        run(
            &project,
            SWITCHYARD,
            &["check", "--config", "switchyard.yaml"],
            &[],
        ),
    );
    assert_eq!(
        stdout.trim(),
        "switchyard.yaml: ok (1 handler(s), 1 route(s))"
    );
}

#[test]
fn an_unknown_recipe_or_another_language_writes_nothing_and_says_why() {
    let parent = tempfile::tempdir().unwrap();
    for (args, error) in [
        (
            &["--from-recipe", "janitr"][..],
            "error: there is no recipe \"janitr\" (did you mean \"janitor\"?); the recipes: ",
        ),
        (
            &["--from-recipe", "janitor", "--lang", "js"][..],
            "error: recipe \"janitor\" has a plugin written in Rust, not JavaScript: leave --lang out (or give --lang rust)",
        ),
    ] {
        let mut all = vec!["new", "plugin", "p", "--dir", "."];
        all.extend(args);
        let output = run(parent.path(), SWITCHYARD, &all, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.starts_with(error), "{stderr}");
        assert!(!parent.path().join("p").exists());
    }
}

/// Regression: `switchyard build plugins/sinks/webhook` in a checkout looked for the
/// component in the project's own `target/`, while cargo built it into the workspace's.
#[test]
fn a_rust_plugin_inside_a_workspace_is_taken_from_where_cargo_built_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/testing/noop");
    let out = dir.join("noop.wasm");
    let _ = std::fs::remove_file(&out);
    let output = run(&dir, SWITCHYARD, &["build"], &[]);
    let built = std::fs::read(&out);
    let _ = std::fs::remove_file(&out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        built.is_ok_and(|b| b.starts_with(b"\0asm")),
        "no component at {}: {stderr}",
        out.display()
    );
    assert!(
        !dir.join("target").exists(),
        "cargo built into the project's own folder"
    );
}
