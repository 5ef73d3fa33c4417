//! The recipes of `plugins/recipes/NAME`, built into the binary, for `switchyard new plugin
//! NAME --from-recipe RECIPE`: a project that starts from the recipe's plugin (its source and
//! tests in place of the template handler), with its config fragment and README.
//!
//! A recipe folder holds `switchyard.yaml` (the fragment: a config that `switchyard check` and
//! `switchyard rbac` take), `README.md`, and, for a recipe with a plugin of its own written
//! in Rust, the crate (`Cargo.toml`, `src/lib.rs` with its tests). Adding a recipe is one
//! line in [`RECIPES`]: `recipe!("NAME", rust)` or, for one whose fragment uses shipped
//! plugins only, `recipe!("NAME", config)`.

use super::Lang;

/// A recipe as the binary carries it.
#[derive(Debug)]
pub struct Recipe {
    /// Its name: the folder under `plugins/recipes`.
    pub name: &'static str,
    /// Its own plugin, unless its fragment uses shipped plugins only.
    pub plugin: Option<RecipePlugin>,
    /// `switchyard.yaml`: the config fragment.
    pub fragment: &'static str,
    /// `README.md`.
    pub readme: &'static str,
}

/// A recipe's own plugin.
#[derive(Debug)]
pub struct RecipePlugin {
    /// The language it is written in.
    pub lang: Lang,
    /// Its handler's source, with its tests (Rust: `src/lib.rs`).
    pub source: &'static str,
    /// Its package manifest (Rust: `Cargo.toml`), whose `[dependencies]` the project gets.
    pub manifest: &'static str,
}

/// A file of the recipe `name`'s folder, built in.
macro_rules! recipe_file {
    ($name:literal, $file:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/plugins/recipes/",
            $name,
            "/",
            $file
        ))
    };
}

/// The recipe `name`: `rust` for one with a Rust plugin of its own, `config` for one whose
/// fragment uses shipped plugins only.
macro_rules! recipe {
    ($name:literal, rust) => {
        Recipe {
            name: $name,
            plugin: Some(RecipePlugin {
                lang: Lang::Rust,
                source: recipe_file!($name, "src/lib.rs"),
                manifest: recipe_file!($name, "Cargo.toml"),
            }),
            fragment: recipe_file!($name, "switchyard.yaml"),
            readme: recipe_file!($name, "README.md"),
        }
    };
    ($name:literal, config) => {
        Recipe {
            name: $name,
            plugin: None,
            fragment: recipe_file!($name, "switchyard.yaml"),
            readme: recipe_file!($name, "README.md"),
        }
    };
}

/// Every recipe, by name. One line each.
pub static RECIPES: &[Recipe] = &[
    recipe!("janitor", rust),
    recipe!("namespace-defaults", rust),
    recipe!("pods-per-node", rust),
    recipe!("reloader", rust),
    recipe!("replicator", rust),
    recipe!("warning-events", config),
    recipe!("cloudevents-source", config),
];

/// The recipe `name`, if the binary has it.
pub fn find(name: &str) -> Option<&'static Recipe> {
    RECIPES.iter().find(|r| r.name == name)
}

/// The names of the recipes, sorted.
pub fn names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = RECIPES.iter().map(|r| r.name).collect();
    names.sort_unstable();
    names
}

impl Recipe {
    /// The fragment for project `name`: each `plugin:` naming the recipe's own plugin names
    /// `name` instead, and, when the recipe has a plugin, `plugins_dir: .` first, so the
    /// project's folder (where `switchyard build` writes `name.wasm`) is where it is found.
    pub fn fragment_for(&self, name: &str) -> String {
        let Some(_) = &self.plugin else {
            return self.fragment.to_string();
        };
        let mut text = format!(
            "# Written by `switchyard new plugin {name} --from-recipe {recipe}`: the handler runs\n\
             # {name}.wasm, which `switchyard build` writes into this folder. In a daemon's own\n\
             # config, leave plugins_dir out and copy {name}.wasm into its plugins folder.\n\
             plugins_dir: .\n\n",
            recipe = self.name
        );
        for line in self.fragment.lines() {
            text.push_str(&self.renamed(line, name).unwrap_or_else(|| line.to_string()));
            text.push('\n');
        }
        text
    }

    /// `line` with the recipe's plugin renamed `name`, if it is a `plugin:` line naming it.
    fn renamed(&self, line: &str, name: &str) -> Option<String> {
        let indent = &line[..line.len() - line.trim_start().len()];
        let rest = line.trim_start().strip_prefix("plugin:")?;
        // The comment keeps the spaces before it.
        let end = rest.find(" #").unwrap_or(rest.len());
        let end = rest[..end].trim_end().len();
        let (value, comment) = rest.split_at(end);
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        (value == self.name).then(|| format!("{indent}plugin: {name}{comment}"))
    }

    /// The `[dependencies]` lines of the plugin's manifest other than the SDK's, and its
    /// description.
    pub fn dependencies(&self) -> (Vec<&'static str>, Option<&'static str>) {
        let Some(plugin) = &self.plugin else {
            return (Vec::new(), None);
        };
        let mut section = "";
        let mut dependencies = Vec::new();
        let mut description = None;
        for line in plugin.manifest.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('[') {
                section = trimmed;
            } else if section == "[package]" && trimmed.starts_with("description") {
                description = trimmed
                    .split_once('=')
                    .map(|(_, v)| v.trim().trim_matches('"'));
            } else if section == "[dependencies]"
                && !trimmed.is_empty()
                && !trimmed.starts_with('#')
                && !trimmed.starts_with("switchyard-sdk")
            {
                dependencies.push(trimmed);
            }
        }
        (dependencies, description)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_recipe_can_start_a_standalone_project() {
        for recipe in RECIPES {
            let Some(plugin) = &recipe.plugin else {
                continue;
            };
            let name = recipe.name;
            // The fragment names the recipe's plugin, so the project's can take its place.
            let fragment = recipe.fragment_for("my-project");
            assert!(
                fragment.contains("plugin: my-project"),
                "{name}: its switchyard.yaml needs `plugin: {name}` for its handler"
            );
            assert!(!fragment.contains(&format!("plugin: {name}")), "{name}");
            // Its dependencies resolve outside the plugins workspace.
            let (dependencies, description) = recipe.dependencies();
            assert!(
                description.is_some(),
                "{name}: Cargo.toml has no description"
            );
            for dependency in dependencies {
                assert!(
                    !dependency.contains("workspace"),
                    "{name}: {dependency:?} comes from the plugins workspace, which a project does not have"
                );
            }
            let sections: Vec<&str> = plugin
                .manifest
                .lines()
                .filter(|l| l.starts_with('['))
                .collect();
            assert_eq!(
                sections,
                ["[package]", "[lib]", "[dependencies]"],
                "{name}: a project takes [dependencies] only"
            );
            assert!(
                plugin
                    .source
                    .contains("#[cfg(all(test, not(target_arch = \"wasm32\")))]"),
                "{name}: its tests come along"
            );
        }
    }

    #[test]
    fn only_the_recipe_s_own_plugin_is_renamed() {
        let recipe = Recipe {
            name: "tidy",
            plugin: Some(RecipePlugin {
                lang: Lang::Rust,
                source: "",
                manifest: "",
            }),
            fragment: "handlers:\n  tidy:\n    plugin: tidy   # ours\n  alerts:\n    plugin: webhook\n  q: {plugin: \"tidy\"}\n",
            readme: "",
        };
        let fragment = recipe.fragment_for("sweep");
        assert!(fragment.contains("\nplugins_dir: .\n"), "{fragment}");
        assert!(
            fragment.contains("\n    plugin: sweep   # ours\n"),
            "{fragment}"
        );
        assert!(fragment.contains("\n    plugin: webhook\n"), "{fragment}");
        // A flow mapping is left as it is.
        assert!(fragment.contains("q: {plugin: \"tidy\"}"), "{fragment}");
        let config_only = Recipe {
            plugin: None,
            ..recipe
        };
        assert_eq!(config_only.fragment_for("sweep"), config_only.fragment);
    }
}
