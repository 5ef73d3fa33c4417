//! Python virtual environments for tests driven by a package from PyPI (Helm's engine,
//! OpenTelemetry's protobuf definitions): made with `python3 -m venv` and pip under the
//! build's temporary folder on first use, once per test run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use super::spawned;

/// The Python of the virtual environment `name` (under the build's temporary folder) with
/// `packages` (pip requirements, pinned) installed; made on first use.
pub fn python(name: &str, packages: &[&str]) -> PathBuf {
    static MADE: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let made = made.get_or_insert_with(HashMap::new);
    if let Some(python) = made.get(name) {
        return python.clone();
    }
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = venv.join("bin/python");
    if !python.exists() {
        install(&venv, packages);
    }
    made.insert(name.to_string(), python.clone());
    python
}

/// Makes the virtual environment at `venv` with `packages`, in a folder beside it first, so
/// that an interrupted install leaves nothing half made at `venv`.
fn install(venv: &Path, packages: &[&str]) {
    let partial = venv.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let run = |command: &mut Command, what: &str| {
        let output = spawned::output(command, what);
        assert!(
            output.status.success(),
            "{what} failed (Debian: apt-get install python3-venv; PyPI must be reachable): {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&partial),
        "python3 -m venv",
    );
    run(
        Command::new(partial.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(packages),
        &format!("pip install {}", packages.join(" ")),
    );
    std::fs::rename(&partial, venv).expect("move the virtual environment in place");
}
