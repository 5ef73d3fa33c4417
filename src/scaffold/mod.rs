//! A plugin author's tools outside this repository: `switchyard new plugin` writes a
//! standalone project (the WIT contract and, for Rust, the SDK inside it, a first handler, a
//! first test, a sample event and a replay config); `switchyard build` turns such a project
//! into `NAME.wasm` with the language's own tool.
//!
//! - [`templates`]: the files of a new project, per language;
//! - [`build`]: building a project;
//! - [`cache`]: the components built before, by what they were built from.

pub mod build;
pub mod cache;
pub mod templates;

use std::path::{Path, PathBuf};

pub use build::{BuildError, Built, build};

/// A language a plugin can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with the switchyard SDK (cargo, the wasm32-wasip2 target).
    Rust,
    /// JavaScript, built with componentize-js (Node.js 20 and npm).
    Js,
    /// Python, built with componentize-py.
    Python,
}

/// Why a project could not be written.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    /// The name cannot name a plugin (and a package).
    #[error(
        "{0:?} cannot name a plugin: use lower-case letters, digits and '-', starting with a letter and not ending with '-'"
    )]
    BadName(String),
    /// The project folder is there and not empty.
    #[error("{} already exists and is not empty: nothing was written", .0.display())]
    Exists(PathBuf),
    /// Writing failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Whether `name` can name a plugin file, a cargo package, an npm package and a handler.
pub fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && !name.ends_with('-')
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// Writes a new plugin project `NAME` in `lang` into `parent/NAME`; returns its folder.
/// Refuses a bad name or a folder that exists and is not empty, writing nothing.
pub fn new_plugin(name: &str, lang: Lang, parent: &Path) -> Result<PathBuf, NewError> {
    if !valid_name(name) {
        return Err(NewError::BadName(name.to_string()));
    }
    let dir = parent.join(name);
    if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(NewError::Exists(dir));
    }
    for (relative, contents) in templates::files(name, lang) {
        let path = dir.join(relative);
        let write = |path: &Path| {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, &contents)
        };
        write(&path).map_err(|source| NewError::Write { path, source })?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_those_every_tool_accepts() {
        for good in ["a", "failed-pods", "x9", "a-b-c"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in [
            "",
            "9a",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "a/b",
            "é",
            &"a".repeat(64),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_project_is_not_written_over_a_folder_with_files() {
        let parent = tempfile::tempdir().unwrap();
        std::fs::create_dir(parent.path().join("taken")).unwrap();
        std::fs::write(parent.path().join("taken/keep.txt"), "mine").unwrap();
        let error = new_plugin("taken", Lang::Rust, parent.path()).unwrap_err();
        assert!(matches!(error, NewError::Exists(_)), "{error}");
        let names: Vec<_> = std::fs::read_dir(parent.path().join("taken"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["keep.txt"]);

        let error = new_plugin("Bad_Name", Lang::Js, parent.path()).unwrap_err();
        assert!(
            error.to_string().contains("cannot name a plugin"),
            "{error}"
        );
        assert!(!parent.path().join("Bad_Name").exists());
    }

    #[test]
    fn an_empty_folder_is_filled() {
        let parent = tempfile::tempdir().unwrap();
        std::fs::create_dir(parent.path().join("p")).unwrap();
        let dir = new_plugin("p", Lang::Python, parent.path()).unwrap();
        assert!(dir.join("app.py").is_file());
        assert!(dir.join("wit/world.wit").is_file());
    }
}
