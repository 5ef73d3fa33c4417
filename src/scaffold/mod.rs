//! A plugin author's tools outside this repository: `switchyard new plugin` writes a
//! standalone project (the WIT contract and, for Rust, the SDK inside it, a first handler, a
//! first test, a sample event and a replay config); `switchyard build` turns such a project
//! into `NAME.wasm` with the language's own tool.
//!
//! - [`templates`]: the files of a new project, per language;
//! - [`recipes`]: the recipes a project can start from (`--from-recipe`), built in;
//! - [`build`]: building a project;
//! - [`cache`]: the components built before, by what they were built from.

pub mod build;
pub mod cache;
pub mod recipes;
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
    /// No recipe has that name.
    #[error(
        "there is no recipe {name:?}{}; the recipes: {}",
        nearest.map(|n| format!(" (did you mean {n:?}?)")).unwrap_or_default(),
        available.join(", ")
    )]
    UnknownRecipe {
        /// The name asked for.
        name: String,
        /// The nearest recipe's name, if one is close.
        nearest: Option<&'static str>,
        /// Every recipe's name.
        available: Vec<&'static str>,
    },
    /// `--lang` asks for another language than the recipe's plugin is written in.
    #[error(
        "recipe {recipe:?} has a plugin written in {lang}, not {asked}: leave --lang out (or give --lang {})",
        lang.flag()
    )]
    RecipeLang {
        /// The recipe.
        recipe: &'static str,
        /// The language of its plugin.
        lang: Lang,
        /// The language asked for.
        asked: Lang,
    },
    /// `--lang` given for a recipe without a plugin of its own.
    #[error(
        "recipe {0:?} has no plugin of its own (its switchyard.yaml runs plugins shipped with switchyard), so --lang does not apply: leave it out"
    )]
    RecipeWithoutPlugin(&'static str),
    /// Writing failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Lang {
    /// The value `--lang` takes for it.
    pub fn flag(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Js => "js",
            Lang::Python => "python",
        }
    }
}

impl std::fmt::Display for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Lang::Rust => "Rust",
            Lang::Js => "JavaScript",
            Lang::Python => "Python",
        })
    }
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
    write_project(name, parent, templates::files(name, lang))
}

/// The recipe `name`; an unknown name is an error listing the recipes, with the nearest.
pub fn recipe(name: &str) -> Result<&'static recipes::Recipe, NewError> {
    recipes::find(name).ok_or_else(|| {
        let available = recipes::names();
        NewError::UnknownRecipe {
            name: name.to_string(),
            nearest: crate::config::nearest(name, &available),
            available,
        }
    })
}

/// Writes project `name` started from `recipe` into `parent/NAME` (see
/// [`templates::recipe_files`]); returns its folder. `lang`, when given, must be the language
/// of the recipe's plugin; a recipe without one takes none. Refuses as [`new_plugin`] does.
pub fn new_from_recipe(
    name: &str,
    recipe: &recipes::Recipe,
    lang: Option<Lang>,
    parent: &Path,
) -> Result<PathBuf, NewError> {
    match (&recipe.plugin, lang) {
        (None, Some(_)) => return Err(NewError::RecipeWithoutPlugin(recipe.name)),
        (Some(plugin), Some(asked)) if asked != plugin.lang => {
            return Err(NewError::RecipeLang {
                recipe: recipe.name,
                lang: plugin.lang,
                asked,
            });
        }
        _ => {}
    }
    write_project(name, parent, templates::recipe_files(name, recipe))
}

/// Writes `files` into `parent/NAME`, unless the name is bad or the folder holds files.
fn write_project(
    name: &str,
    parent: &Path,
    files: Vec<(String, String)>,
) -> Result<PathBuf, NewError> {
    if !valid_name(name) {
        return Err(NewError::BadName(name.to_string()));
    }
    let dir = parent.join(name);
    if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(NewError::Exists(dir));
    }
    for (relative, contents) in files {
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

    /// The files under `dir`, relative to it, sorted.
    fn listing(dir: &Path) -> Vec<String> {
        let mut files = Vec::new();
        let mut folders = vec![dir.to_path_buf()];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    folders.push(path);
                } else {
                    let relative = path.strip_prefix(dir).unwrap();
                    files.push(relative.to_string_lossy().into_owned());
                }
            }
        }
        files.sort();
        files
    }

    #[test]
    fn a_project_from_a_recipe_holds_its_plugin_fragment_and_readme() {
        let parent = tempfile::tempdir().unwrap();
        let janitor = recipe("janitor").unwrap();
        let dir = new_from_recipe("sweeper", janitor, None, parent.path()).unwrap();
        let read = |path: &str| std::fs::read_to_string(dir.join(path)).unwrap();
        let plugin = janitor.plugin.as_ref().unwrap();
        assert_eq!(read("src/lib.rs"), plugin.source);
        let fragment = read("switchyard.yaml");
        assert!(fragment.contains("\nplugins_dir: .\n"), "{fragment}");
        assert!(fragment.contains("\n    plugin: sweeper\n"), "{fragment}");
        // Otherwise the recipe's own.
        assert!(
            fragment
                .replace("plugin: sweeper", "plugin: janitor")
                .ends_with(janitor.fragment)
        );
        let readme = read("README.md");
        assert!(readme.starts_with(janitor.readme), "{readme}");
        assert!(
            readme.contains("`switchyard new plugin sweeper --from-recipe janitor` wrote it"),
            "{readme}"
        );
        let manifest = read("Cargo.toml");
        assert!(manifest.contains("name = \"sweeper\""), "{manifest}");
        assert!(manifest.contains("kube-janitor"), "{manifest}");
        assert!(!manifest.contains("workspace = true"), "{manifest}");
        let files = listing(&dir);
        for absent in ["replay.yaml", "events.jsonl"] {
            assert!(!files.contains(&absent.to_string()), "{files:?}");
        }
        for present in [
            "wit/world.wit",
            "switchyard-sdk/src/testing.rs",
            ".gitignore",
        ] {
            assert!(files.contains(&present.to_string()), "{files:?}");
        }
    }

    #[test]
    fn a_recipe_without_a_plugin_gives_its_fragment_and_readme_only() {
        let recipe = recipes::Recipe {
            name: "warnings",
            plugin: None,
            fragment: "handlers:\n  alerts:\n    plugin: webhook\n",
            readme: "# Recipe: warnings\n",
        };
        let parent = tempfile::tempdir().unwrap();
        let dir = new_from_recipe("my-warnings", &recipe, None, parent.path()).unwrap();
        assert_eq!(listing(&dir), ["README.md", "switchyard.yaml"]);
        assert_eq!(
            std::fs::read_to_string(dir.join("switchyard.yaml")).unwrap(),
            recipe.fragment
        );
        let error = new_from_recipe("other", &recipe, Some(Lang::Rust), parent.path()).unwrap_err();
        assert!(
            error.to_string().contains("has no plugin of its own"),
            "{error}"
        );
    }

    #[test]
    fn an_unknown_recipe_or_another_language_is_refused_with_what_there_is() {
        let error = recipe("janitr").unwrap_err().to_string();
        assert!(
            error.starts_with(
                "there is no recipe \"janitr\" (did you mean \"janitor\"?); the recipes: "
            ),
            "{error}"
        );
        assert!(error.contains("namespace-defaults"), "{error}");
        let error = recipe("zzzzzzzz").unwrap_err().to_string();
        assert!(!error.contains("did you mean"), "{error}");
        let parent = tempfile::tempdir().unwrap();
        let error = new_from_recipe(
            "x",
            recipe("janitor").unwrap(),
            Some(Lang::Js),
            parent.path(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            error,
            "recipe \"janitor\" has a plugin written in Rust, not JavaScript: leave --lang out (or give --lang rust)"
        );
        assert!(!parent.path().join("x").exists());
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
