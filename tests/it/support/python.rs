//! Python packages from PyPI for the tests that check against them (Helm's engine, the
//! OpenTelemetry protobuf definitions): a virtual environment per set of requirements under
//! the build's temporary folder, made with pip on first use and kept across runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::spawned;

/// The opentelemetry-proto release OTLP requests are decoded with.
const OTEL_PROTO: &str = "1.45.2";

/// The Python of a virtual environment with OpenTelemetry's protobuf definitions.
pub fn opentelemetry_proto() -> PathBuf {
    venv(
        &format!("opentelemetry-proto-{OTEL_PROTO}"),
        &[&format!("opentelemetry-proto=={OTEL_PROTO}")],
    )
}

/// The Python of the virtual environment `name` (under `CARGO_TARGET_TMPDIR`) with
/// `requirements` (pip's `NAME==VERSION`) installed, made if it is not there yet. Name each
/// set of requirements differently, with its versions, so a changed set is a new one.
pub fn venv(name: &str, requirements: &[&str]) -> PathBuf {
    // One install at a time: two tests making the same environment at once would share its
    // partial folder.
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = venv.join("bin/python");
    if !python.exists() {
        install(&venv, requirements);
    }
    python
}

/// Makes the virtual environment at `venv` with `requirements`, in a folder beside it
/// first, so that an interrupted install leaves nothing half made at `venv`.
fn install(venv: &Path, requirements: &[&str]) {
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
            .args(requirements),
        &format!("pip install {}", requirements.join(" ")),
    );
    std::fs::rename(&partial, venv).expect("move the virtual environment in place");
}
