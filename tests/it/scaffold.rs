//! A plugin author's loop outside the repository, from an empty folder: `switchyard new
//! plugin` for each language, the project's own first test, `switchyard build`, and
//! `switchyard replay` running the built component on the sample event.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::spawned;

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

/// Builds the project and replays its sample event; checks the component's log line.
fn build_and_replay(project: &Path, name: &str, env: &[(&str, &Path)]) {
    let stdout = ok(
        "switchyard build",
        run(project, SWITCHYARD, &["build"], env),
    );
    // After the language tool's own output, the line naming the component.
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("built ./{name}.wasm (")),
        "{stdout}"
    );
    assert!(project.join(format!("{name}.wasm")).is_file());
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
            env,
        ),
    );
    assert_eq!(
        stdout,
        format!(
            "line 1: added default/demo (route configmaps, handler {name}) -> done\n  log info: added ConfigMap default/demo\n"
        )
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
    assert!(
        stdout.contains("test tests::logs_the_change_and_the_object ... ok"),
        "{stdout}"
    );
    build_and_replay(&project, "failed-pods", &env);

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
    assert!(stdout.contains("# pass 1"), "{stdout}");
    assert!(stdout.contains("# fail 0"), "{stdout}");
    build_and_replay(&project, "hello-js", &[]);
}

#[test]
fn a_python_plugin_project_tests_with_unittest_builds_and_replays() {
    let (_parent, project) = new_project("hello-py", "python");
    let output = run(&project, "python3", &["-m", "unittest", "-v"], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("test_logs_the_change_and_the_object"),
        "{stderr}"
    );
    assert!(stderr.contains("Ran 1 test"), "{stderr}");
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
    build_and_replay(&project, "hello-py", &[("PATH", path.as_path())]);
}
