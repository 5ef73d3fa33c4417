//! The demo's plugins, built on first use. The built-in demo config names four plugins:
//! `log-events`, `label-guard` and the `slack` sink (Rust) and `event-summary` (Python). Their sources are
//! built into the binary; the first `switchyard demo` writes each as a standalone project
//! (the files `switchyard new plugin` writes, with the example's code) and builds it, into a
//! cache folder: `$XDG_CACHE_HOME/switchyard/demo/KEY` (else `~/.cache/...`), where KEY
//! covers every file built, so a later run starts at once and a new version builds afresh.
//!
//! Why build rather than embed the components: they are build outputs, not sources, and a
//! plain `cargo build` of switchyard must not need the wasm toolchain. Building needs what
//! installing switchyard with cargo needed (cargo), the `wasm32-wasip2` target (added with
//! rustup when it is missing, as `scripts/demo.sh` does) and componentize-py (taken from
//! the `PATH` at the version `switchyard build` expects, else installed with pip into a
//! virtual environment in the cache folder). Each step is printed before it runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::scaffold::Lang;
use crate::scaffold::templates::{self, COMPONENTIZE_PY};

/// A plugin of the demo and where its code comes from.
struct Source {
    /// The plugin's name (`NAME.wasm`).
    name: &'static str,
    /// Its language.
    lang: Lang,
    /// Its code: the project files it writes over the scaffold's, by path.
    files: &'static [(&'static str, &'static str)],
    /// Lines added to the scaffold's `[dependencies]` (which has `serde`, with `derive`, and
    /// `serde_json`).
    dependencies: &'static str,
}

/// The plugins the built-in demo config names.
const SOURCES: [Source; 4] = [
    Source {
        name: "log-events",
        lang: Lang::Rust,
        files: &[(
            "src/lib.rs",
            include_str!("../../plugins/examples/log-events/src/lib.rs"),
        )],
        dependencies: "",
    },
    Source {
        name: "label-guard",
        lang: Lang::Rust,
        files: &[(
            "src/lib.rs",
            include_str!("../../plugins/examples/label-guard/src/lib.rs"),
        )],
        dependencies: "",
    },
    Source {
        name: "slack",
        lang: Lang::Rust,
        files: &[
            (
                "src/lib.rs",
                include_str!("../../plugins/sinks/slack/src/lib.rs"),
            ),
            (
                "src/message.rs",
                include_str!("../../plugins/sinks/slack/src/message.rs"),
            ),
        ],
        dependencies: "",
    },
    Source {
        name: "event-summary",
        lang: Lang::Python,
        files: &[(
            "app.py",
            include_str!("../../plugins/python/event-summary/app.py"),
        )],
        dependencies: "",
    },
];

/// Why the demo's plugins could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Neither `XDG_CACHE_HOME` nor `HOME` is set.
    #[error(
        "no folder to build the demo's plugins in: set XDG_CACHE_HOME or HOME, or run the demo from a checkout with `--config config/demo.yaml` after scripts/build-plugins.sh"
    )]
    NoCache,
    /// A tool the build needs is not installed.
    #[error("{tool} was not found: {hint}; then run `switchyard demo` again")]
    Missing {
        /// The program.
        tool: String,
        /// What to install.
        hint: String,
    },
    /// A tool failed; its own output (above) says why.
    #[error("{what} failed (its output is above){hint}")]
    Failed {
        /// The step.
        what: String,
        /// What may help, with a leading separator, or empty.
        hint: String,
    },
    /// A file could not be written or moved.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The folder holding the demo's built plugins (`NAME.wasm` each), building those not
/// built yet; `say` prints a step.
pub fn prepare(say: impl Fn(&str)) -> Result<PathBuf> {
    let projects: Vec<(&Source, Vec<(String, String)>)> =
        SOURCES.iter().map(|s| (s, project(s))).collect();
    let root = cache_root()?.join(key(&projects));
    let out = root.join("plugins");
    let missing: Vec<_> = projects
        .iter()
        .filter(|(s, _)| !out.join(format!("{}.wasm", s.name)).is_file())
        .collect();
    if missing.is_empty() {
        say(&format!(
            "the demo's plugins, built earlier: {}",
            out.display()
        ));
        return Ok(out);
    }
    say(&format!(
        "building the demo's plugins once, into {} (Rust with cargo, Python with componentize-py; the first build takes a few minutes)",
        root.display()
    ));
    create_dir(&out)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let mut wasm_target_checked = false;
    let mut componentize_py = None;
    for (source, files) in missing {
        let dir = root.join("src").join(source.name);
        write_project(&dir, files)?;
        let built = match source.lang {
            Lang::Rust => {
                if !wasm_target_checked {
                    ensure_wasm_target(&say)?;
                    wasm_target_checked = true;
                }
                say(&format!("building {} (Rust)", source.name));
                build_rust(&dir, source.name, &target)?
            }
            _ => {
                if componentize_py.is_none() {
                    componentize_py = Some(find_componentize_py(&root, &say)?);
                }
                say(&format!("building {} (Python)", source.name));
                build_python(&dir, componentize_py.as_deref().unwrap_or(Path::new("")))?
            }
        };
        let wasm = out.join(format!("{}.wasm", source.name));
        let tmp = out.join(format!(".{}.wasm.tmp", source.name));
        std::fs::copy(&built, &tmp).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &wasm).map_err(io(&wasm))?;
    }
    Ok(out)
}

/// The files of `source`'s project: what `switchyard new plugin` writes, with its code.
fn project(source: &Source) -> Vec<(String, String)> {
    let mut files = templates::files(source.name, source.lang);
    for (path, text) in &mut files {
        if let Some((_, code)) = source.files.iter().find(|(p, _)| p == path) {
            *text = code.to_string();
        } else if path == "Cargo.toml" {
            *text = text.replace(
                "[dependencies]\n",
                &format!("[dependencies]\n{}", source.dependencies),
            );
        }
    }
    for (path, code) in source.files {
        if !files.iter().any(|(p, _)| p == path) {
            files.push((path.to_string(), code.to_string()));
        }
    }
    files
}

/// A short hash of every file of every project and of the componentize-py version.
fn key(projects: &[(&Source, Vec<(String, String)>)]) -> String {
    let mut hash = Sha256::new();
    hash.update(COMPONENTIZE_PY);
    for (source, files) in projects {
        for (path, text) in files {
            for part in [source.name, path, text] {
                hash.update((part.len() as u64).to_le_bytes());
                hash.update(part);
            }
        }
    }
    let digest = hash.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// `$XDG_CACHE_HOME/switchyard/demo`, else `$HOME/.cache/switchyard/demo`.
fn cache_root() -> Result<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".cache"))
        })
        .ok_or(Error::NoCache)?;
    Ok(base.join("switchyard").join("demo"))
}

/// Writes `files` into `dir`, replacing what an earlier, interrupted build left there.
fn write_project(dir: &Path, files: &[(String, String)]) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    for (relative, text) in files {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            create_dir(parent)?;
        }
        std::fs::write(&path, text).map_err(io(&path))?;
    }
    Ok(())
}

/// Adds the `wasm32-wasip2` target with rustup when rustup is there and lacks it.
fn ensure_wasm_target(say: &impl Fn(&str)) -> Result<()> {
    let Ok(listed) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .stderr(Stdio::null())
        .output()
    else {
        // No rustup: cargo says so if the target is missing.
        return Ok(());
    };
    if String::from_utf8_lossy(&listed.stdout)
        .lines()
        .any(|l| l.trim() == "wasm32-wasip2")
    {
        return Ok(());
    }
    say("adding the wasm32-wasip2 target (rustup target add wasm32-wasip2)");
    let mut rustup = Command::new("rustup");
    rustup.args(["target", "add", "wasm32-wasip2"]);
    run(rustup, "rustup target add wasm32-wasip2", "")
}

/// `cargo build --release --target wasm32-wasip2` in `dir`; returns the component.
fn build_rust(dir: &Path, name: &str, target: &Path) -> Result<PathBuf> {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(dir)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(target);
    run(
        cargo,
        &format!("cargo build of {name}"),
        " (a missing target: `rustup target add wasm32-wasip2`)",
    )?;
    Ok(target
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", name.replace('-', "_"))))
}

/// `componentize-py` at the expected version: on the `PATH`, else in the cache's virtual
/// environment, installed there with pip when it is not.
fn find_componentize_py(root: &Path, say: &impl Fn(&str)) -> Result<PathBuf> {
    let wanted = format!("componentize-py {COMPONENTIZE_PY}");
    let version = |program: &Path| {
        Command::new(program)
            .arg("--version")
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let on_path = PathBuf::from("componentize-py");
    if version(&on_path).as_deref() == Some(wanted.as_str()) {
        return Ok(on_path);
    }
    // Where `switchyard build` finds it too.
    let venv = crate::scaffold::cache::python_venv().unwrap_or_else(|| {
        root.parent()
            .unwrap_or(root)
            .join(format!("python-venv-{COMPONENTIZE_PY}"))
    });
    let installed = venv.join("bin/componentize-py");
    if version(&installed).as_deref() == Some(wanted.as_str()) {
        return Ok(installed);
    }
    say(&format!(
        "installing componentize-py {COMPONENTIZE_PY} with pip into {}",
        venv.display()
    ));
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let hint = "the demo's summary handler is Python, built with componentize-py: install Python 3 with venv and pip (Debian: apt-get install python3-venv)";
    let mut make = Command::new(&python);
    make.arg("-m").arg("venv").arg(&venv);
    run(make, "python3 -m venv", &format!("; {hint}")).map_err(|e| match e {
        Error::Missing { tool, .. } => Error::Missing {
            tool,
            hint: hint.into(),
        },
        other => other,
    })?;
    let mut pip = Command::new(venv.join("bin/python"));
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ])
    .arg(format!("componentize-py=={COMPONENTIZE_PY}"));
    run(pip, "pip install componentize-py", "")?;
    Ok(installed)
}

/// `componentize-py -d wit -w handler componentize -p . app` in `dir`; returns the
/// component.
fn build_python(dir: &Path, componentize_py: &Path) -> Result<PathBuf> {
    let out = dir.join("component.wasm");
    let mut command = Command::new(componentize_py);
    command
        .current_dir(dir)
        .args(crate::plugin::contract::componentize_py_args())
        .arg(&out)
        .stdout(Stdio::null());
    run(command, "componentize-py", "")?;
    Ok(out)
}

/// Runs `command` with the terminal's standard error as its output.
fn run(mut command: Command, what: &str, hint: &str) -> Result<()> {
    let program = command.get_program().to_string_lossy().into_owned();
    let status = command.stdin(Stdio::null()).status().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Missing {
                hint: match program.as_str() {
                    "cargo" => "the demo builds its Rust plugins with cargo: install Rust from https://rustup.rs".into(),
                    _ => format!("{what} needs it"),
                },
                tool: program.clone(),
            }
        } else {
            Error::Failed {
                what: format!("{what} ({e})"),
                hint: hint.into(),
            }
        }
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::Failed {
            what: what.into(),
            hint: hint.into(),
        })
    }
}

/// Creates `dir` and its parents.
fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io(dir))
}

/// An I/O error at `path`.
fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_project_carries_its_examples_code_and_the_key_follows_it() {
        let projects: Vec<_> = SOURCES.iter().map(|s| (s, project(s))).collect();
        for (source, files) in &projects {
            for (path, code) in source.files {
                let text = files.iter().find(|(p, _)| p == path);
                assert_eq!(text.map(|(_, t)| t.as_str()), Some(*code), "{path}");
            }
            let manifest = files.iter().find(|(p, _)| p == "Cargo.toml");
            if let Some((_, manifest)) = manifest {
                assert!(manifest.contains(source.dependencies), "{}", source.name);
            }
        }
        let before = key(&projects);
        let mut changed = projects.clone();
        changed[0].1[0].1.push(' ');
        assert_ne!(before, key(&changed));
        assert_eq!(before.len(), 16);
    }
}
