//! Python virtual environments with packages from PyPI, for the tests that drive a real
//! implementation written in Python (Helm's SDK for the chart, moto for the AWS sinks):
//! made under the build's temporary folder on first use, in a folder beside their place
//! first, so that an interrupted install leaves nothing half made.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::support::spawned;

/// The Python of the virtual environment `name` (under `CARGO_TARGET_TMPDIR`) with
/// `packages` (pip requirement specifiers, pinned) installed, made if it is not there yet.
/// Name a new environment when the packages change.
pub fn python(name: &str, packages: &[&str]) -> PathBuf {
    // Two tests making the same environment at once would each remove the other's.
    static MAKING: Mutex<()> = Mutex::new(());
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = venv.join("bin/python");
    if !python.exists() {
        install(&venv, packages);
    }
    python
}

/// Makes the virtual environment at `venv` with `packages`.
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
