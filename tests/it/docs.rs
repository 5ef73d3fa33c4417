//! The documentation stays true to itself and to the code: every relative link in
//! README.md, docs/, plugins/README.md, each recipe's README (plugins/recipes/NAME) and
//! BENCHMARKS.md names a file that exists, and every
//! `#anchor` a heading of its target (as GitHub makes anchors: lower case, punctuation
//! dropped, spaces as '-'); the config reference documents exactly the keys the config
//! types accept (taken from the types themselves, through the "expected one of" of an
//! unknown key), its example is a valid config and its `check` example prints what
//! `check` prints; the README's tour config is a valid config; and lib.rs's `# Layout`
//! names every module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support;

/// The Markdown files whose links are checked, relative to the repository.
fn markdown_files() -> Vec<PathBuf> {
    let root = support::root();
    let mut files: Vec<PathBuf> = ["README.md", "BENCHMARKS.md", "plugins/README.md"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut recipes: Vec<PathBuf> = std::fs::read_dir(root.join("plugins/recipes"))
        .expect("plugins/recipes/")
        .map(|e| {
            e.expect("a plugins/recipes/ entry")
                .path()
                .join("README.md")
        })
        .filter(|p| p.is_file())
        .collect();
    recipes.sort();
    files.extend(recipes);
    files
}

/// The lines of `text` outside fenced code blocks, with their line numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push((i + 1, line));
        }
    }
    lines
}

/// The anchor GitHub gives a heading: lower case, every character but letters, digits,
/// spaces, '-' and '_' dropped, spaces as '-'.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a Markdown text's headings (a repeated heading gets `-1`, `-2`, ...).
pub(crate) fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut all = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor(&line[hashes..]);
        let n = seen.entry(base.clone()).or_default();
        all.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    all
}

/// The targets of the inline links `[text](target)` on a line, code spans left out.
fn link_targets(line: &str) -> Vec<String> {
    // Code spans may hold `](` that is no link.
    let mut text = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            text.push_str(part);
        } else {
            text.push_str("code");
        }
    }
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            targets.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    targets
}

/// Every broken relative link of `file`: `file:line: target: why`.
fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("a Markdown file");
    let dir = file.parent().expect("a folder");
    let shown = file
        .strip_prefix(support::root())
        .unwrap_or(file)
        .display()
        .to_string();
    let mut broken = Vec::new();
    for (line_no, line) in prose(&text) {
        for target in link_targets(line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.to_path_buf()
            } else {
                dir.join(path)
            };
            let mut fail = |why: String| broken.push(format!("{shown}:{line_no}: {target}: {why}"));
            if !resolved.exists() {
                fail("no such file".into());
                continue;
            }
            let Some(fragment) = fragment else { continue };
            match std::fs::read_to_string(&resolved) {
                Ok(target_text) if resolved.extension().is_some_and(|e| e == "md") => {
                    if !anchors(&target_text).contains(fragment) {
                        fail(format!("no heading with the anchor #{fragment}"));
                    }
                }
                _ => fail("an anchor into a file that is not Markdown".into()),
            }
        }
    }
    broken
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(
        anchor(" Restarts and `state_dir`"),
        "restarts-and-state_dir"
    );
    assert_eq!(
        anchor(" Probes, logs and metrics"),
        "probes-logs-and-metrics"
    );
    assert_eq!(
        anchor(" Testing a Rust handler with `cargo test`"),
        "testing-a-rust-handler-with-cargo-test"
    );
    assert_eq!(
        anchors("# A\n```\n# not a heading\n```\n## A\n"),
        BTreeSet::from(["a".to_string(), "a-1".to_string()])
    );
    assert_eq!(
        link_targets("see [x](a.md#b), `[y](not-a-link)` and [`z`](c/d.md)"),
        ["a.md#b", "c/d.md"]
    );
}

#[test]
fn every_relative_link_and_anchor_in_the_documentation_resolves() {
    let files = markdown_files();
    assert!(files.len() > 5, "the docs/ pages were not found: {files:?}");
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(f)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The first ```yaml block of `text` after `after`.
pub(crate) fn yaml_block<'a>(text: &'a str, after: &str) -> &'a str {
    text.split(after)
        .nth(1)
        .and_then(|s| s.split("```yaml\n").nth(1))
        .and_then(|s| s.split("\n```").next())
        .unwrap_or_else(|| panic!("no ```yaml block after {after:?}"))
}

/// The config reference's YAML, with its commented-out keys (a comment that starts with
/// `KEY:` at the indentation of the key above it, such as `# informer: deployments`, an
/// alternative to that key) taken in.
fn reference_yaml() -> String {
    let text = std::fs::read_to_string(support::root().join("docs/configuration.md"))
        .expect("docs/configuration.md");
    let block = yaml_block(&text, "# Configuration reference");
    let mut out = Vec::new();
    let mut key_indent = 0;
    for line in block.lines() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        if let Some(commented) = trimmed.strip_prefix("# ") {
            let key_like = commented.split_once(": ").is_some_and(|(k, _)| {
                !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            });
            if key_like && indent == key_indent {
                out.push(format!("{}{commented}", " ".repeat(indent)));
            }
            continue;
        }
        if !trimmed.is_empty() {
            key_indent = indent + if trimmed.starts_with("- ") { 2 } else { 0 };
        }
        out.push(line.to_string());
    }
    out.join("\n")
}

/// Where a mapping of the config sits, as the key sets below name it.
const SECTIONS: [&str; 11] = [
    "",
    "admin",
    "ha",
    "oci",
    "tracing",
    "tenancy",
    "informers.*",
    "informers.*.transform",
    "handlers.*",
    "routes[]",
    "routes[].when[]",
];

/// The values of a mapping or the items of a list.
fn values(v: &Value) -> Vec<&Value> {
    match v {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        _ => Vec::new(),
    }
}

/// The keys each section of `value` (a config as YAML) has.
fn documented_keys(value: &Value) -> BTreeMap<&'static str, BTreeSet<String>> {
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let union =
        |items: Vec<&Value>| -> BTreeSet<String> { items.into_iter().flat_map(keys).collect() };
    let informers = values(&value["informers"]);
    let routes = values(&value["routes"]);
    let mut found = BTreeMap::new();
    found.insert("", keys(value));
    found.insert("admin", keys(&value["admin"]));
    found.insert("ha", keys(&value["ha"]));
    found.insert("oci", keys(&value["oci"]));
    found.insert("tracing", keys(&value["tracing"]));
    found.insert("tenancy", keys(&value["tenancy"]));
    found.insert(
        "informers.*.transform",
        union(informers.iter().map(|i| &i["transform"]).collect()),
    );
    found.insert("informers.*", union(informers));
    found.insert("handlers.*", union(values(&value["handlers"])));
    found.insert(
        "routes[].when[]",
        union(routes.iter().flat_map(|r| values(&r["when"])).collect()),
    );
    found.insert("routes[]", union(routes));
    found
}

/// The keys the config types accept in `section`, from the validator's answer to an
/// unknown key there ("unknown field `zz`, expected one of `a`, `b`, ...").
fn schema_keys(section: &str) -> BTreeSet<String> {
    let config = match section {
        "" => "zz_unknown: 1\n".to_string(),
        "admin" | "ha" | "oci" | "tracing" | "tenancy" => {
            format!("{section}:\n  zz_unknown: 1\n")
        }
        "informers.*" => "informers:\n  i:\n    resource: v1/pods\n    zz_unknown: 1\n".into(),
        "informers.*.transform" => {
            "informers:\n  i:\n    resource: v1/pods\n    transform: {zz_unknown: 1}\n".into()
        }
        "handlers.*" => "handlers:\n  h:\n    zz_unknown: 1\n".into(),
        "routes[]" => "handlers:\n  h: {}\nroutes:\n  - name: r\n    resource: configmaps\n    handler: h\n    zz_unknown: 1\n".into(),
        "routes[].when[]" => "handlers:\n  h: {}\nroutes:\n  - name: r\n    resource: configmaps\n    handler: h\n    when:\n      - path: a\n        exists: true\n        zz_unknown: 1\n".into(),
        other => panic!("no config for section {other:?}"),
    };
    let errors = switchyard::config::validate(Path::new("/nonexistent/config.yaml"), &config)
        .err()
        .unwrap_or_else(|| panic!("{section}: an unknown key was accepted"));
    let message = errors
        .0
        .iter()
        .map(|e| e.message.as_str())
        .find(|m| m.contains("unknown field `zz_unknown`"))
        .unwrap_or_else(|| panic!("{section}: no unknown-field error in {errors}"));
    let expected = message
        .split_once("expected ")
        .map(|(_, rest)| rest.split(';').next().unwrap_or(rest))
        .unwrap_or_else(|| panic!("{section}: no expected keys in {message:?}"));
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

#[test]
fn the_config_reference_documents_exactly_the_keys_the_config_types_accept() {
    let yaml = reference_yaml();
    let reference: Value = serde_saphyr::from_str(&yaml).expect("the reference is YAML");
    let documented = documented_keys(&reference);
    let mut wrong = Vec::new();
    for section in SECTIONS {
        let schema = schema_keys(section);
        let docs = &documented[section];
        for key in docs.difference(&schema) {
            wrong.push(format!(
                "{section}: `{key}` is documented but the config does not accept it"
            ));
        }
        for key in schema.difference(docs) {
            wrong.push(format!(
                "{section}: `{key}` is accepted but not in docs/configuration.md"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_readmes_tour_config_is_valid() {
    let readme = std::fs::read_to_string(support::root().join("README.md")).expect("README.md");
    let config = yaml_block(&readme, "## A five-minute tour");
    let dir = tempfile::tempdir().unwrap();
    let loaded = switchyard::config::validate(&dir.path().join("switchyard.yaml"), config);
    assert!(loaded.is_ok(), "{config}\n{}", loaded.err().unwrap());
}

#[test]
fn the_config_references_example_is_a_valid_config() {
    let text = std::fs::read_to_string(support::root().join("docs/configuration.md"))
        .expect("docs/configuration.md");
    let config = yaml_block(&text, "# Configuration reference");
    let dir = tempfile::tempdir().unwrap();
    let loaded = switchyard::config::validate(&dir.path().join("switchyard.yaml"), config);
    // The files it names (a token, a CA, a shadow plugin) are not here; nothing else fails.
    if let Err(errors) = loaded {
        let errors = errors.to_string();
        let other: Vec<&str> = errors
            .lines()
            .filter(|l| {
                !l.contains("No such file or directory (os error 2)")
                    && !l.contains("not found: there is no ")
            })
            .collect();
        assert!(other.is_empty(), "{}", other.join("\n"));
    }
}

#[test]
fn the_config_references_check_example_prints_what_check_prints() {
    let text = std::fs::read_to_string(support::root().join("docs/configuration.md"))
        .expect("docs/configuration.md");
    let marker = "For example, `bad.yaml`";
    let config = yaml_block(&text, marker);
    let shown = text
        .split(marker)
        .nth(1)
        .and_then(|s| s.split("$ switchyard check --config bad.yaml\n").nth(1))
        .and_then(|s| s.split("\n```").next())
        .expect("the example's output");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.yaml"), format!("{config}\n")).unwrap();
    std::fs::create_dir(dir.path().join("plugins")).unwrap();
    let built = support::plugins_dir().join("log-events.wasm");
    std::fs::copy(built, dir.path().join("plugins/log-events.wasm")).unwrap();
    let output = crate::support::spawned::output(
        std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["check", "--config", "bad.yaml"])
            .current_dir(dir.path()),
        "switchyard check",
    );
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&output.stderr).trim_end(), shown);
}

#[test]
fn lib_rs_layout_names_every_module() {
    let lib = std::fs::read_to_string(support::root().join("src/lib.rs")).expect("src/lib.rs");
    let layout: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let missing: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .filter(|module| !layout.contains(&format!("[`{module}`]")))
        .collect();
    assert!(
        missing.is_empty(),
        "src/lib.rs's # Layout does not name: {missing:?}"
    );
}
