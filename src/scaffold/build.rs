//! `switchyard build`: a plugin project into `NAME.wasm` in its folder, with the language's
//! own tool: cargo for a `Cargo.toml` (refused at once without the `wasm32-wasip2` target),
//! componentize-js (through the project's `build.mjs`) for a `package.json`,
//! componentize-py (on the `PATH`, or the demo's) for an `app.py`. The tool's own output goes to the
//! terminal; the component is written through a temporary name, so a daemon watching the
//! folder never loads half a file. A JavaScript or Python project unchanged since a build
//! is not built again: its component comes from the build cache ([`super::cache`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::templates::COMPONENTIZE_PY;
use super::{Lang, cache};

/// Why a project did not build.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// No project file in the folder.
    #[error(
        "{}: no Cargo.toml, package.json or app.py here: not a plugin project (`switchyard new plugin NAME` writes one)",
        .0.display()
    )]
    NotAProject(PathBuf),
    /// The project file does not name the plugin.
    #[error("{}: {reason}", path.display())]
    Project {
        /// The project file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The tool is not installed.
    #[error("{tool} was not found: {hint}")]
    Missing {
        /// The program.
        tool: String,
        /// How to get it.
        hint: String,
    },
    /// The tool failed; its own output says why.
    #[error("{0} failed (its output is above)")]
    Failed(String),
    /// The tool finished but the component is not where expected, or cannot be moved.
    #[error("{0}")]
    Output(String),
}

/// What a build made.
#[derive(Debug)]
pub struct Built {
    /// The component: `dir/NAME.wasm`.
    pub path: PathBuf,
    /// The cached component it is a copy of, when the project was unchanged since a build.
    pub from_cache: Option<PathBuf>,
    /// Why the build cache could not be read or written, if it could not; the build
    /// itself succeeded.
    pub cache_warning: Option<String>,
}

/// Builds the project in `dir` into `dir/NAME.wasm`. A JavaScript or Python project is
/// taken from the build cache when unchanged, unless `use_cache` is false.
pub fn build(dir: &Path, use_cache: bool) -> Result<Built, BuildError> {
    let (lang, name) = detect(dir)?;
    let mut built = Built {
        path: dir.join(format!("{name}.wasm")),
        from_cache: None,
        cache_warning: None,
    };
    let cache = use_cache.then(cache::folder).flatten();
    match lang {
        Lang::Rust => build_rust(dir, &name, &built.path)?,
        Lang::Js => build_js(dir, cache.as_deref(), &mut built)?,
        Lang::Python => build_python(dir, cache.as_deref(), &mut built)?,
    }
    Ok(built)
}

/// The project's language and plugin name.
fn detect(dir: &Path) -> Result<(Lang, String), BuildError> {
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok();
    let project = |file: &str, reason: String| BuildError::Project {
        path: dir.join(file),
        reason,
    };
    if let Some(text) = read("Cargo.toml") {
        let name = toml_name(&text, "[package]")
            .ok_or_else(|| project("Cargo.toml", "no name in [package]".into()))?;
        return Ok((Lang::Rust, name));
    }
    if let Some(text) = read("package.json") {
        let package: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| project("package.json", format!("not JSON: {e}")))?;
        let name = package["name"]
            .as_str()
            .ok_or_else(|| project("package.json", "no \"name\"".into()))?;
        return Ok((Lang::Js, name.to_string()));
    }
    if dir.join("app.py").is_file() {
        let name = read("pyproject.toml")
            .and_then(|text| toml_name(&text, "[project]"))
            .ok_or_else(|| project("pyproject.toml", "no name in [project]".into()))?;
        return Ok((Lang::Python, name));
    }
    Err(BuildError::NotAProject(dir.to_path_buf()))
}

/// The `name = "..."` of `section` in a TOML file (the form the templates write).
fn toml_name(text: &str, section: &str) -> Option<String> {
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == section;
        } else if inside && let Some(value) = line.strip_prefix("name") {
            let value = value.trim_start().strip_prefix('=')?.trim();
            return Some(value.trim_matches('"').to_string());
        }
    }
    None
}

/// Runs `command` in `dir` with the terminal as its output.
fn run(mut command: Command, dir: &Path, what: &str, hint: &str) -> Result<(), BuildError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let status = command
        .current_dir(dir)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BuildError::Missing {
                tool: program.clone(),
                hint: hint.to_string(),
            },
            _ => BuildError::Failed(format!("{what}: {e}")),
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(BuildError::Failed(what.to_string()))
    }
}

/// `cargo build --release --target wasm32-wasip2`, then the cdylib copied to `out`. Where the
/// component is comes from cargo itself (its `compiler-artifact` message): a project inside
/// a workspace builds into the workspace's target folder, not its own.
fn build_rust(dir: &Path, name: &str, out: &Path) -> Result<(), BuildError> {
    check_wasm_target(dir)?;
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo.args([
        "build",
        "--release",
        "--target",
        "wasm32-wasip2",
        "--message-format=json-render-diagnostics",
    ]);
    let output = cargo
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BuildError::Missing {
                tool: "cargo".into(),
                hint: "install Rust from https://rustup.rs".into(),
            },
            _ => BuildError::Failed(format!("cargo build: {e}")),
        })?;
    if !output.status.success() {
        return Err(BuildError::Failed("cargo build".into()));
    }
    let wanted = format!("{}.wasm", name.replace('-', "_"));
    let built =
        built_component(&String::from_utf8_lossy(&output.stdout), &wanted).ok_or_else(|| {
            BuildError::Failed(format!(
                "cargo build: cargo named no {wanted} among what it built (is the crate a cdylib?)"
            ))
        })?;
    move_into_place(&built, out, true)
}

/// The file named `wanted` among the artifacts cargo's JSON messages (`stdout`) report.
fn built_component(stdout: &str, wanted: &str) -> Option<PathBuf> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .flat_map(|m| {
            m["filenames"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|f| f.as_str().map(PathBuf::from))
        })
        .rfind(|f| f.file_name().and_then(|n| n.to_str()) == Some(wanted))
}

/// Refuses at once, rather than after cargo has built the project's dependencies, when
/// the toolchain the project builds with has no `wasm32-wasip2` target. A `rustc` that
/// cannot say leaves it to cargo.
fn check_wasm_target(dir: &Path) -> Result<(), BuildError> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let asked = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", "wasm32-wasip2"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let Ok(output) = asked.map_err(drop).and_then(|o| {
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .ok_or(())
    }) else {
        return Ok(());
    };
    if Path::new(&output).is_dir() {
        return Ok(());
    }
    Err(BuildError::Missing {
        tool: "the wasm32-wasip2 target".into(),
        hint: "add it to the toolchain this project builds with: rustup target add wasm32-wasip2"
            .into(),
    })
}

/// The project's `build.mjs` (componentize-js), after `npm install` if it never ran.
fn build_js(dir: &Path, cache: Option<&Path>, built: &mut Built) -> Result<(), BuildError> {
    let hint = "install Node.js 20 or later with npm";
    if !dir.join("node_modules").is_dir() {
        let mut npm = Command::new("npm");
        npm.args(["install", "--no-audit", "--no-fund"]);
        run(npm, dir, "npm install", hint)?;
    }
    let node = tool_version("node", dir, hint)?;
    let componentize_js = installed_componentize_js(dir);
    let tools = [
        ("componentize-js", componentize_js.as_str()),
        ("node", &node),
    ];
    cached(dir, &tools, cache, built, |tmp| {
        let mut node = Command::new("node");
        node.arg("build.mjs").arg("handler.js").arg("wit").arg(tmp);
        run(node, dir, "componentize-js (node build.mjs)", hint)
    })
}

/// The version of componentize-js in the project's `node_modules`, as its package.json
/// gives it (`not installed` when it is not there: the build then fails).
fn installed_componentize_js(dir: &Path) -> String {
    let package = dir.join("node_modules/@bytecodealliance/componentize-js/package.json");
    std::fs::read_to_string(package)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|package| package["version"].as_str().map(str::to_string))
        .unwrap_or_else(|| "not installed".into())
}

/// `componentize-py ... componentize app`.
fn build_python(dir: &Path, cache: Option<&Path>, built: &mut Built) -> Result<(), BuildError> {
    let hint = format!("pip install componentize-py=={COMPONENTIZE_PY}");
    let program = componentize_py();
    let version = tool_version(&program, dir, &hint)?;
    let tools = [("componentize-py", version.as_str())];
    cached(dir, &tools, cache, built, |tmp| {
        let mut componentize = Command::new(&program);
        componentize
            .args(crate::plugin::contract::componentize_py_args())
            .arg(tmp);
        run(componentize, dir, "componentize-py", &hint)
    })
}

/// `componentize-py` on the `PATH`, else the one `switchyard demo` installed into its
/// virtual environment in the cache (`~/.cache/switchyard/python-venv-VERSION`).
fn componentize_py() -> String {
    let on_path = "componentize-py".to_string();
    let found = |program: &str| {
        Command::new(program)
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if found(&on_path) {
        return on_path;
    }
    let venv = cache::python_venv().and_then(|venv| {
        venv.join("bin/componentize-py")
            .to_str()
            .map(str::to_string)
    });
    venv.filter(|program| found(program)).unwrap_or(on_path)
}

/// What `PROGRAM --version` prints, for the build cache's key.
fn tool_version(program: &str, dir: &Path, hint: &str) -> Result<String, BuildError> {
    let output = Command::new(program)
        .arg("--version")
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BuildError::Missing {
                tool: program.to_string(),
                hint: hint.to_string(),
            },
            _ => BuildError::Failed(format!("{program} --version: {e}")),
        })?;
    if !output.status.success() {
        return Err(BuildError::Failed(format!(
            "{program} --version ({})",
            output.status
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Puts the component for the project in `dir` at `built.path`: a copy of the cached one
/// when the cache in `cache` has the project's key, else what `make` writes at the path
/// it is given, which then goes into the cache. A cache that cannot be read or written
/// makes a build as if there were none, with a warning.
fn cached(
    dir: &Path,
    tools: &[(&str, &str)],
    cache: Option<&Path>,
    built: &mut Built,
    make: impl FnOnce(&Path) -> Result<(), BuildError>,
) -> Result<(), BuildError> {
    let out = built.path.clone();
    let key = match cache.map(|folder| cache::key(dir, tools).map(|key| (folder, key))) {
        Some(Ok(key)) => Some(key),
        Some(Err(e)) => {
            built.cache_warning = Some(format!(
                "cannot read the project to key the build cache: {e}"
            ));
            None
        }
        None => None,
    };
    // A component another build pruned since `get` found it is built again.
    if let Some((folder, key)) = &key
        && let Some(hit) = cache::get(folder, key)
        && move_into_place(&hit, &out, true).is_ok()
    {
        built.from_cache = Some(hit);
        return Ok(());
    }
    let tmp = temporary(&out);
    make(&tmp)?;
    if let Some((folder, key)) = &key
        && let Err(e) = cache::put(folder, key, &tmp)
    {
        built.cache_warning = Some(format!(
            "cannot keep the component in the build cache {}: {e}",
            folder.display()
        ));
    }
    move_into_place(&tmp, &out, false)
}

/// A name beside `out` that the daemon's folder watcher ignores.
fn temporary(out: &Path) -> PathBuf {
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned());
    out.with_file_name(format!(".{}.tmp", name.unwrap_or_default()))
}

/// Puts `from` at `out` (copied through a temporary name when `copy`, else renamed).
fn move_into_place(from: &Path, out: &Path, copy: bool) -> Result<(), BuildError> {
    let fail = |e: std::io::Error| {
        BuildError::Output(format!(
            "cannot put {} at {}: {e}",
            from.display(),
            out.display()
        ))
    };
    if copy {
        let tmp = temporary(out);
        std::fs::copy(from, &tmp).map_err(fail)?;
        std::fs::rename(&tmp, out).map_err(fail)
    } else {
        std::fs::rename(from, out).map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_name_comes_from_the_project_file() {
        let toml = "[package]\nname = \"failed-pods\"\n[dependencies]\nname = \"x\"\n";
        assert_eq!(toml_name(toml, "[package]").as_deref(), Some("failed-pods"));
        assert_eq!(
            toml_name("[dependencies]\nname = \"x\"\n", "[package]"),
            None
        );
    }

    #[test]
    fn a_folder_without_a_project_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let error = build(dir.path(), true).unwrap_err();
        assert!(matches!(error, BuildError::NotAProject(_)), "{error}");
        assert!(error.to_string().contains("not a plugin project"));

        std::fs::write(dir.path().join("package.json"), "{\"version\": 1}").unwrap();
        let error = build(dir.path(), true).unwrap_err().to_string();
        assert!(error.ends_with("package.json: no \"name\""), "{error}");
    }
}
