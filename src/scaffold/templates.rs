//! The files of a new plugin project. The WIT contract, the Rust SDK and the JavaScript
//! build script are this repository's own, built into the binary, so a project carries the
//! contract the daemon that wrote it speaks.

use serde_json::{Value, json};

use super::Lang;
use super::recipes::Recipe;
use crate::plugin::contract::{self, WIT};

/// The Rust SDK's source.
const SDK_LIB: &str = include_str!("../../plugins/sdk/src/lib.rs");
/// The Rust SDK's outbound HTTP.
const SDK_HTTP: &str = include_str!("../../plugins/sdk/src/http.rs");
/// The Rust SDK's helpers for sinks.
const SDK_SINK: &str = include_str!("../../plugins/sdk/src/sink.rs");
/// The Rust SDK's templates.
const SDK_TEMPLATE: &str = include_str!("../../plugins/sdk/src/template.rs");
/// The Rust SDK's test host.
const SDK_TESTING: &str = include_str!("../../plugins/sdk/src/testing.rs");
/// The JavaScript build script and the pinned componentize-js.
/// The lock file the plugins this repository tests are built with: a new Rust project starts
/// from the same versions (cargo drops the entries it does not need and adds the project).
const RUST_LOCK: &str = include_str!("../../plugins/Cargo.lock");
const JS_BUILD: &str = include_str!("../../plugins/js/build.mjs");
const JS_PACKAGE: &str = include_str!("../../plugins/js/package.json");
const JS_LOCK: &str = include_str!("../../plugins/js/package-lock.json");
/// What the README says of the build cache, for JavaScript and Python.
const BUILD_CACHE: &str = "

A project unchanged since a build is not built again: its component is copied from the
build cache (`~/.cache/switchyard/builds`; `switchyard build --no-cache` builds anyway).";
/// The componentize-py version `switchyard build` expects.
pub const COMPONENTIZE_PY: &str = "0.25.1";

/// The files of project `name` in `lang`, as paths relative to its folder and contents.
pub fn files(name: &str, lang: Lang) -> Vec<(String, String)> {
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{sdk_version}}", env!("CARGO_PKG_VERSION"))
            .replace("{{wit_version}}", &contract::version().to_string())
    };
    let mut files = vec![
        ("wit/world.wit", WIT.to_string()),
        ("replay.yaml", fill(include_str!("templates/replay.yaml"))),
        ("events.jsonl", sample_event(name)),
    ];
    let (language, test, needs, test_host) = match lang {
        Lang::Rust => {
            files.extend([
                (
                    "Cargo.toml",
                    fill(include_str!("templates/rust/Cargo.toml")),
                ),
                ("src/lib.rs", fill(include_str!("templates/rust/lib.rs"))),
                (
                    "switchyard-sdk/Cargo.toml",
                    fill(include_str!("templates/rust/sdk.Cargo.toml")),
                ),
                ("switchyard-sdk/src/lib.rs", SDK_LIB.to_string()),
                ("switchyard-sdk/src/testing.rs", SDK_TESTING.to_string()),
                ("switchyard-sdk/src/http.rs", SDK_HTTP.to_string()),
                ("switchyard-sdk/src/sink.rs", SDK_SINK.to_string()),
                ("switchyard-sdk/src/template.rs", SDK_TEMPLATE.to_string()),
                ("Cargo.lock", RUST_LOCK.to_string()),
                (".gitignore", "/target\n*.wasm\n".to_string()),
            ]);
            (
                "Rust",
                "cargo test",
                "cargo and the wasm32-wasip2 target (`rustup target add wasm32-wasip2`)",
                "switchyard-sdk/src/testing.rs",
            )
        }
        Lang::Js => {
            files.extend(js_files(name));
            (
                "JavaScript",
                "npm install && npm test",
                "Node.js 20 or later and npm (`npm install` fetches componentize-js)",
                "test/host.mjs",
            )
        }
        Lang::Python => {
            files.extend(python_files(name));
            (
                "Python",
                "python3 -m unittest",
                "componentize-py (`pip install componentize-py==0.25.1`)",
                "tests/host/switchyard_testing.py",
            )
        }
    };
    let readme = fill(include_str!("templates/README.md"))
        .replace("{{language}}", language)
        .replace("{{test_command}}", test)
        .replace("{{needs}}", needs)
        .replace("{{test_host}}", test_host)
        .replace(
            "{{build_cache}}",
            if lang == Lang::Rust { "" } else { BUILD_CACHE },
        );
    files.push(("README.md", readme));
    let deps = contract::WIT_DEPS
        .iter()
        .map(|(name, text)| (format!("wit/deps/{name}/package.wit"), text.to_string()));
    files
        .into_iter()
        .map(|(path, text)| (path.to_string(), text))
        .chain(deps)
        .collect()
}

/// The file holding a project's handler in `lang`.
pub fn handler_file(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "src/lib.rs",
        Lang::Js => "handler.js",
        Lang::Python => "app.py",
    }
}

/// The files of project `name` started from `recipe`: for a recipe with a plugin, the
/// language's project with the recipe's source (and tests) as its handler and the recipe's
/// dependencies, without the sample event and replay config (the recipe's routes are not
/// the template's); then the recipe's fragment, its plugin renamed `name`, and its README
/// followed by how to work on the project.
pub fn recipe_files(name: &str, recipe: &Recipe) -> Vec<(String, String)> {
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{recipe}}", recipe.name)
            .replace("{{wit_version}}", &contract::version().to_string())
    };
    let (mut project, about) = match &recipe.plugin {
        None => (Vec::new(), fill(include_str!("templates/recipe/config.md"))),
        Some(plugin) => {
            let source = handler_file(plugin.lang);
            let project = files(name, plugin.lang)
                .into_iter()
                .filter(|(path, _)| {
                    !["README.md", "replay.yaml", "events.jsonl"].contains(&path.as_str())
                })
                .map(|(path, text)| {
                    let text = if path == source {
                        plugin.source.to_string()
                    } else if path == "Cargo.toml" {
                        recipe_manifest(&text, recipe)
                    } else {
                        text
                    };
                    (path, text)
                })
                .collect();
            let (test, needs) = match plugin.lang {
                Lang::Rust => (
                    "cargo test",
                    "cargo and the wasm32-wasip2 target (`rustup target add wasm32-wasip2`)",
                ),
                Lang::Js => ("npm install && npm test", "Node.js 20 or later and npm"),
                Lang::Python => ("python3 -m unittest", "componentize-py"),
            };
            let about = fill(include_str!("templates/recipe/plugin.md"))
                .replace("{{source}}", source)
                .replace("{{test_command}}", test)
                .replace("{{needs}}", needs);
            (project, about)
        }
    };
    project.push(("switchyard.yaml".into(), recipe.fragment_for(name)));
    project.push(("README.md".into(), format!("{}{about}", recipe.readme)));
    project
}

/// The template's `Cargo.toml` with the recipe's description and dependencies.
fn recipe_manifest(template: &str, recipe: &Recipe) -> String {
    let (dependencies, description) = recipe.dependencies();
    let mut text = template.replace(
        "serde_json = \"1\"\n",
        &dependencies
            .iter()
            .map(|d| format!("{d}\n"))
            .collect::<String>(),
    );
    if let Some(description) = description {
        text = text.replace(
            "description = \"A switchyard handler plugin\"",
            &format!("description = \"{description}\""),
        );
    }
    text
}

/// The JavaScript project's own files.
fn js_files(name: &str) -> Vec<(&'static str, String)> {
    let mut package: Value = serde_json::from_str(JS_PACKAGE).expect("package.json is JSON");
    package["name"] = name.into();
    package["description"] = "A switchyard handler plugin".into();
    package["scripts"] = json!({
        "build": format!("node build.mjs handler.js wit {name}.wasm"),
        "test": "node --import ./test/register.mjs --test test/handler.test.mjs",
    });
    let mut lock: Value = serde_json::from_str(JS_LOCK).expect("package-lock.json is JSON");
    lock["name"] = name.into();
    lock["packages"][""]["name"] = name.into();
    let pretty = |v: &Value| serde_json::to_string_pretty(v).expect("JSON prints") + "\n";
    vec![
        ("package.json", pretty(&package)),
        ("package-lock.json", pretty(&lock)),
        ("build.mjs", JS_BUILD.to_string()),
        (
            "handler.js",
            include_str!("templates/js/handler.js").replace("{{name}}", name),
        ),
        (
            "test/register.mjs",
            include_str!("templates/js/test/register.mjs").into(),
        ),
        (
            "test/host.mjs",
            include_str!("templates/js/test/host.mjs").into(),
        ),
        (
            "test/handler.test.mjs",
            include_str!("templates/js/test/handler.test.mjs").into(),
        ),
        (".gitignore", "node_modules/\n*.wasm\n".into()),
    ]
}

/// The Python project's own files.
fn python_files(name: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "app.py",
            include_str!("templates/python/app.py").replace("{{name}}", name),
        ),
        (
            "pyproject.toml",
            format!(
                "[project]\nname = \"{name}\"\nversion = \"0.1.0\"\ndescription = \"A switchyard handler plugin\"\n\n# Built by `switchyard build` with componentize-py {COMPONENTIZE_PY}.\n"
            ),
        ),
        (
            "switchyard_http.py",
            include_str!("../../plugins/python/sdk/switchyard_http.py").into(),
        ),
        ("tests/__init__.py", String::new()),
        (
            "tests/test_app.py",
            include_str!("templates/python/tests/test_app.py").into(),
        ),
        (
            "tests/host/switchyard_testing.py",
            include_str!("templates/python/tests/host/switchyard_testing.py").into(),
        ),
        (
            "tests/host/componentize_py_types.py",
            include_str!("templates/python/tests/host/componentize_py_types.py").into(),
        ),
        (
            "tests/host/wit_world/__init__.py",
            include_str!("templates/python/tests/host/wit_world/__init__.py").into(),
        ),
        ("tests/host/wit_world/imports/__init__.py", String::new()),
        (
            "tests/host/wit_world/imports/types.py",
            include_str!("templates/python/tests/host/wit_world/imports/types.py").into(),
        ),
        (
            "tests/host/wit_world/imports/host.py",
            include_str!("templates/python/tests/host/wit_world/imports/host.py").into(),
        ),
        (
            "tests/host/wit_world/imports/metrics.py",
            include_str!("templates/python/tests/host/wit_world/imports/metrics.py").into(),
        ),
        (
            "tests/host/wit_world/imports/cache.py",
            include_str!("templates/python/tests/host/wit_world/imports/cache.py").into(),
        ),
        (
            "tests/host/wit_world/imports/kube.py",
            include_str!("templates/python/tests/host/wit_world/imports/kube.py").into(),
        ),
        (
            "tests/host/wit_world/imports/http_types.py",
            include_str!("templates/python/tests/host/wit_world/imports/http_types.py").into(),
        ),
        (
            "tests/host/wit_world/imports/outgoing_handler.py",
            include_str!("templates/python/tests/host/wit_world/imports/outgoing_handler.py")
                .into(),
        ),
        (
            "tests/host/wit_world/imports/streams.py",
            include_str!("templates/python/tests/host/wit_world/imports/streams.py").into(),
        ),
        (
            "tests/host/wit_world/imports/poll.py",
            include_str!("templates/python/tests/host/wit_world/imports/poll.py").into(),
        ),
        (".gitignore", "__pycache__/\n*.wasm\n".into()),
    ]
}

/// One `added` ConfigMap event for project `name`, as `switchyard record` writes it.
fn sample_event(name: &str) -> String {
    let event = json!({
        "route": "configmaps",
        "handler": name,
        "kind": "added",
        "object": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "demo", "namespace": "default", "resourceVersion": "1", "uid": "0b7c5a8e-0000-4000-8000-000000000001"},
            "data": {"greeting": "hello"},
        },
    });
    event.to_string() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_gets_the_contract_a_test_and_a_replay_config_naming_the_plugin() {
        for (lang, test) in [
            (Lang::Rust, "src/lib.rs"),
            (Lang::Js, "test/handler.test.mjs"),
            (Lang::Python, "tests/test_app.py"),
        ] {
            let files = files("failed-pods", lang);
            let file = |path: &str| {
                files
                    .iter()
                    .find(|(p, _)| p == path)
                    .map(|(_, text)| text.as_str())
                    .unwrap_or_else(|| panic!("{lang:?}: no {path}"))
            };
            assert_eq!(file("wit/world.wit"), WIT);
            assert!(
                file(test).contains("added ConfigMap default/demo"),
                "{lang:?}"
            );
            assert!(file("replay.yaml").contains("plugin: failed-pods"));
            assert!(file("README.md").contains("failed-pods.wasm"));
            // The SDK is copied as it is (its template module speaks `{{`); every other file
            // is filled in.
            let unfilled = files
                .iter()
                .find(|(path, text)| !path.starts_with("switchyard-sdk/") && text.contains("{{"));
            assert!(unfilled.is_none(), "{lang:?}: {unfilled:?}");
        }
    }
}
