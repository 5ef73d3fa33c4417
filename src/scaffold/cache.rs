//! Components `switchyard build` made, kept by the hash of what they were made from, so an
//! unchanged JavaScript or Python project is not built again: componentize-js takes about
//! 40 s and componentize-py about 10 s each time, while copying the component takes
//! milliseconds. (cargo keeps its own cache for Rust projects.)
//!
//! The key covers every file of the project that can reach the component, by relative path
//! and content, and the tools' versions. Left out: `node_modules/` (the tool itself, named
//! by its version instead), the tests (`test/`, `tests/`), hidden files and folders (`.git`,
//! the build's temporary files), `__pycache__/` and built `.wasm` files. A handler that
//! imports from its tests would need them in the key: `--no-cache` builds anyway.
//!
//! The cache lives in `$XDG_CACHE_HOME/switchyard/builds` (else `~/.cache/...`) and keeps
//! the [`KEEP`] components used most recently: a component is 12 to 18 MB.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// How many components the cache keeps; the least recently used go first.
pub const KEEP: usize = 16;

/// Names in a project that never reach its component.
const LEFT_OUT: [&str; 4] = ["node_modules", "test", "tests", "__pycache__"];

/// The cache folder: `$XDG_CACHE_HOME/switchyard/builds`, else `$HOME/.cache/...`; none
/// when neither variable is set.
pub fn folder() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))?;
    Some(base.join("switchyard").join("builds"))
}

/// The virtual environment `switchyard demo` installs componentize-py into, and where
/// `switchyard build` looks for it when none is on the `PATH`:
/// `$XDG_CACHE_HOME/switchyard/python-venv-VERSION` (or under `~/.cache`).
pub fn python_venv() -> Option<PathBuf> {
    let switchyard = folder()?.parent()?.to_path_buf();
    Some(switchyard.join(format!("python-venv-{}", super::templates::COMPONENTIZE_PY)))
}

/// The key of project `dir` built with `tools` (each tool's name and version): a hex
/// SHA-256 of the tools and of every file that can reach the component.
pub fn key(dir: &Path, tools: &[(&str, &str)]) -> std::io::Result<String> {
    let mut hash = Sha256::new();
    hash.update(b"switchyard build, cache format 1\n");
    for (tool, version) in tools {
        hash.update(format!("tool {tool} {}\n", version.trim()).as_bytes());
    }
    let mut files = Vec::new();
    sources(dir, Path::new(""), &mut files)?;
    files.sort();
    for relative in files {
        let bytes = std::fs::read(dir.join(&relative))?;
        let name = relative.to_string_lossy().replace('\\', "/");
        hash.update(format!("file {name} {}\n", bytes.len()).as_bytes());
        hash.update(&bytes);
    }
    Ok(hash.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Appends the files under `dir/relative` that can reach the component.
fn sources(dir: &Path, relative: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir.join(relative))? {
        let entry = entry?;
        let name = entry.file_name();
        let text = name.to_string_lossy();
        if text.starts_with('.') || LEFT_OUT.contains(&text.as_ref()) || text.ends_with(".wasm") {
            continue;
        }
        let path = relative.join(&name);
        // Follows symbolic links, as the tools do.
        let meta = std::fs::metadata(dir.join(&path))?;
        if meta.is_dir() {
            sources(dir, &path, files)?;
        } else if meta.is_file() {
            files.push(path);
        }
    }
    Ok(())
}

/// The cached component for `key` in `folder`, if there is one; marks it used.
pub fn get(folder: &Path, key: &str) -> Option<PathBuf> {
    let path = folder.join(format!("{key}.wasm"));
    if !path.is_file() {
        return None;
    }
    // Its time of last use, for pruning; a cache on a read-only disk still answers.
    if let Ok(file) = std::fs::File::options().append(true).open(&path) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
    Some(path)
}

/// Copies `component` into `folder` as the one for `key` (through a temporary name, so a
/// concurrent build never reads half of it), then drops all but the [`KEEP`] most recently
/// used.
pub fn put(folder: &Path, key: &str, component: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(folder)?;
    let tmp = folder.join(format!(".{key}.{}.tmp", std::process::id()));
    std::fs::copy(component, &tmp)?;
    std::fs::rename(&tmp, folder.join(format!("{key}.wasm")))?;
    prune(folder, KEEP)
}

/// Removes all but the `keep` most recently used components in `folder`.
fn prune(folder: &Path, keep: usize) -> std::io::Result<()> {
    let mut components: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(folder)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    components.sort_by_key(|(used, _)| std::cmp::Reverse(*used));
    for (_, path) in components.into_iter().skip(keep) {
        // Another build may have removed it already.
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in [
            ("handler.js", "export function handle() {}"),
            ("lib/util.js", "export const x = 1;"),
            ("wit/world.wit", "package switchyard:plugin@0.1.0;"),
            ("package-lock.json", "{}"),
            ("node_modules/x/index.js", "tool"),
            ("test/handler.test.mjs", "test"),
            (".git/HEAD", "ref"),
            ("hello.wasm", "built"),
        ] {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn the_key_changes_with_the_sources_the_contract_the_lock_and_the_tools_only() {
        let dir = project();
        let tools = [("componentize-js", "0.23.0"), ("node", "v20.1.0")];
        let first = key(dir.path(), &tools).unwrap();
        assert_eq!(first.len(), 64);
        assert_eq!(key(dir.path(), &tools).unwrap(), first);

        // What never reaches the component leaves the key alone.
        for path in [
            "node_modules/x/index.js",
            "test/handler.test.mjs",
            ".git/HEAD",
            "hello.wasm",
        ] {
            std::fs::write(dir.path().join(path), "changed").unwrap();
        }
        std::fs::write(dir.path().join(".hello.wasm.tmp"), "half").unwrap();
        assert_eq!(key(dir.path(), &tools).unwrap(), first);

        let other_tool = [("componentize-js", "0.24.0"), ("node", "v20.1.0")];
        assert_ne!(key(dir.path(), &other_tool).unwrap(), first);
        let mut seen = vec![first];
        for path in [
            "handler.js",
            "lib/util.js",
            "wit/world.wit",
            "package-lock.json",
        ] {
            std::fs::write(dir.path().join(path), format!("changed {path}")).unwrap();
            let next = key(dir.path(), &tools).unwrap();
            assert!(!seen.contains(&next), "{path} changes the key");
            seen.push(next);
        }
        // A file moved to another name is another project.
        std::fs::rename(dir.path().join("lib/util.js"), dir.path().join("lib/u.js")).unwrap();
        assert!(!seen.contains(&key(dir.path(), &tools).unwrap()));
    }

    #[test]
    fn the_cache_answers_what_was_put_and_keeps_the_most_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("builds");
        let component = dir.path().join("c.wasm");
        assert_eq!(get(&folder, "a"), None);
        for (i, key) in ["a", "b", "c"].iter().enumerate() {
            std::fs::write(&component, format!("component {i}")).unwrap();
            put(&folder, key, &component).unwrap();
            let old = std::time::SystemTime::now() - std::time::Duration::from_secs(100 - i as u64);
            let file = std::fs::File::options()
                .append(true)
                .open(folder.join(format!("{key}.wasm")))
                .unwrap();
            file.set_modified(old).unwrap();
        }
        let a = get(&folder, "a").expect("a is cached");
        assert_eq!(std::fs::read_to_string(a).unwrap(), "component 0");
        prune(&folder, 2).unwrap();
        assert!(get(&folder, "a").is_some(), "a was used last");
        assert!(get(&folder, "b").is_none(), "b was the least recently used");
        assert!(get(&folder, "c").is_some());
    }
}
