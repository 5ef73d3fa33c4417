//! The shell examples of README.md and docs/*.md, run: every ```sh, ```bash and ```console
//! block is run with bash (`-euo pipefail`) against the built `switchyard`, so an example
//! that drifts from what the commands do fails here.
//!
//! Each page's blocks run in order in a temporary folder of its own holding copies of
//! `config/` and `deploy/`, the recipes' configs at `recipes/NAME.yaml` (as in a release
//! folder) and the built plugins, with `switchyard` first on `PATH` and the
//! repository's pinned toolchain. An HTML comment on the line before a block says how it
//! runs; items are separated by `;`:
//!
//! - `<!-- example: skip: REASON -->`: not run, for the reason given (the rest of the
//!   comment: a block that needs a cluster, a registry or minutes, and the test that covers
//!   it instead);
//! - `<!-- example: serves -->`: its last command runs until stopped (a daemon, a watch):
//!   it passes if it is still running [`SERVES_FOR`] after it started and has logged no
//!   `ERROR` line;
//! - `<!-- example: in DIR -->`: runs in `DIR`, a folder an earlier block made;
//! - before any fenced block, `<!-- example: file PATH -->`: the block is written to `PATH`
//!   for the blocks after it (a config the text says to write).
//!
//! Each block runs in a process group of its own ([`Spawned`]): whatever it starts in the
//! background is stopped once it is done. Pages run one after another: the Rust projects
//! the examples make share one cargo target folder (`target/doc-examples`, their own: two
//! cargo runs of different projects on one target folder at once can each remove what the
//! other built), so their dependencies are built once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::spawned::Spawned;

/// How long a `serves` block must keep running.
const SERVES_FOR: Duration = Duration::from_secs(5);

/// The longest any block may take.
const BLOCK_LIMIT: Duration = Duration::from_secs(240);

/// How a block is run, from the comment before it.
#[derive(Debug, Default, Clone, PartialEq)]
struct Marker {
    skip: Option<String>,
    serves: bool,
    dir: Option<String>,
    file: Option<String>,
}

/// A fenced block of a page: where it is, its language, how to run it and its text.
#[derive(Debug)]
struct Block {
    at: String,
    lang: String,
    marker: Marker,
    text: String,
}

/// Reads the marker comment `line`, if it is one; an item it does not know is an error.
fn marker(line: &str) -> Result<Option<Marker>, String> {
    let Some(items) = line
        .trim()
        .strip_prefix("<!-- example:")
        .and_then(|rest| rest.strip_suffix("-->"))
    else {
        return Ok(None);
    };
    let mut marker = Marker::default();
    // A skip's reason is the rest of the comment, `;` and all.
    if let Some(reason) = items.trim().strip_prefix("skip:") {
        marker.skip = Some(reason.trim().to_string()).filter(|r| !r.is_empty());
        return match marker.skip {
            Some(_) => Ok(Some(marker)),
            None => Err("`skip:` needs a reason".into()),
        };
    }
    for item in items.split(';').map(str::trim).filter(|i| !i.is_empty()) {
        if item == "serves" {
            marker.serves = true;
        } else if let Some(dir) = item.strip_prefix("in ") {
            marker.dir = Some(dir.trim().to_string());
        } else if let Some(path) = item.strip_prefix("file ") {
            marker.file = Some(path.trim().to_string());
        } else {
            return Err(format!("unknown item {item:?}"));
        }
    }
    Ok(Some(marker))
}

/// The fenced blocks of `text` (the page `name`) that run or are written: shell blocks,
/// and blocks marked `file`.
fn blocks(name: &str, text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```").filter(|l| !l.is_empty()) else {
            i += 1;
            continue;
        };
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].starts_with("```"))
            .ok_or_else(|| format!("{name}:{}: a block that never ends", i + 1))?;
        let at = format!("{name}:{}", i + 1);
        let marker = match i.checked_sub(1).map(|p| marker(lines[p])) {
            Some(Err(e)) => return Err(format!("{at}: the comment before the block: {e}")),
            Some(Ok(m)) => m.unwrap_or_default(),
            None => Marker::default(),
        };
        let shell = matches!(lang.trim(), "sh" | "bash" | "console" | "shell");
        if shell || marker.file.is_some() {
            found.push(Block {
                at,
                lang: lang.trim().to_string(),
                marker,
                text: lines[i + 1..end].join("\n") + "\n",
            });
        }
        i = end + 1;
    }
    Ok(found)
}

/// The pages whose examples run.
fn pages() -> Vec<PathBuf> {
    let root = support::root();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages.insert(0, root.join("README.md"));
    pages
}

/// A folder to run `page`'s examples in: copies of `config/` and `deploy/`, the built
/// plugins in `plugins/`.
fn workspace(page: &Path) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!(
            "doc-{}-",
            page.file_stem().unwrap().to_string_lossy()
        ))
        .tempdir()
        .unwrap();
    let root = support::root();
    for folder in ["config", "deploy"] {
        let status = Command::new("cp")
            .args(["-r"])
            .arg(root.join(folder))
            .arg(dir.path())
            .status()
            .expect("cp");
        assert!(status.success(), "copy {folder}");
    }
    // Each recipe's config at recipes/NAME.yaml, as a release folder holds them.
    let recipes = dir.path().join("recipes");
    std::fs::create_dir(&recipes).unwrap();
    for entry in std::fs::read_dir(root.join("plugins/recipes")).expect("plugins/recipes") {
        let config = entry.unwrap().path().join("switchyard.yaml");
        if config.exists() {
            let name = config.parent().unwrap().file_name().unwrap().to_owned();
            std::fs::copy(&config, recipes.join(name).with_extension("yaml")).unwrap();
        }
    }
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    for entry in std::fs::read_dir(support::plugins_dir()).expect("the built plugins") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wasm") {
            std::os::unix::fs::symlink(&path, plugins.join(path.file_name().unwrap())).unwrap();
        }
    }
    dir
}

/// The toolchain rust-toolchain.toml pins, so a project outside the checkout builds with it.
fn pinned_toolchain() -> String {
    let text = std::fs::read_to_string(support::root().join("rust-toolchain.toml")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("channel = "))
        .map(|c| c.trim_matches('"').to_string())
        .expect("a channel in rust-toolchain.toml")
}

/// Runs one block in `dir`; the reason it failed, if it did.
fn run(block: &Block, dir: &Path) -> Result<(), String> {
    let bin = Path::new(env!("CARGO_BIN_EXE_switchyard"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let cwd = match &block.marker.dir {
        Some(sub) => dir.join(sub),
        None => dir.to_path_buf(),
    };
    let target = support::root().join("target/doc-examples");
    let log = dir.join(format!(".block-{}.log", block.at.replace([':', '/'], "-")));
    let out = std::fs::File::create(&log).unwrap();
    let mut command = Command::new("bash");
    command
        .args(["-euo", "pipefail", "-c", &block.text])
        .current_dir(&cwd)
        .env("PATH", path)
        .env("RUSTUP_TOOLCHAIN", pinned_toolchain())
        .env("CARGO_TARGET_DIR", target)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    let mut spawned = Spawned::start(&mut command, &block.at);
    let limit = if block.marker.serves {
        SERVES_FOR
    } else {
        BLOCK_LIMIT
    };
    let started = Instant::now();
    let status = loop {
        if let Some(status) = spawned.child().try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > limit {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Its process group: what it left in the background, or all of it.
    spawned.stop();
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    // A server that logs errors while it runs is not serving as the page says.
    let logged_error = output.lines().any(|l| l.contains(" ERROR "));
    let failed = match (status, block.marker.serves) {
        (Some(s), false) if s.success() => return Ok(()),
        (None, true) if !logged_error => return Ok(()),
        (None, true) => "logged an error while serving".to_string(),
        (Some(s), true) => format!("ended ({s}) before {SERVES_FOR:?}, where it should serve"),
        (Some(s), false) => format!("failed ({s})"),
        (None, false) => format!("still running after {BLOCK_LIMIT:?}"),
    };
    Err(format!(
        "{}: {failed}:\n{}\n--- output ---\n{output}",
        block.at, block.text
    ))
}

/// Runs `page`'s blocks in order; every failure.
fn run_page(page: &Path) -> Vec<String> {
    let root = support::root();
    let name = page.strip_prefix(&root).unwrap().display().to_string();
    let text = std::fs::read_to_string(page).unwrap();
    let blocks = match blocks(&name, &text) {
        Ok(blocks) => blocks,
        Err(e) => return vec![e],
    };
    if blocks.iter().all(|b| b.marker.skip.is_some()) {
        return Vec::new();
    }
    let dir = workspace(page);
    let mut failures = Vec::new();
    for block in &blocks {
        if block.marker.skip.is_some() {
            continue;
        }
        if let Some(file) = &block.marker.file {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &block.text).unwrap();
            continue;
        }
        if block.lang == "console" {
            failures.push(format!(
                "{}: a console block (with its output) cannot run: mark it skip with the reason",
                block.at
            ));
            continue;
        }
        if let Err(e) = run(block, dir.path()) {
            failures.push(e);
        }
    }
    failures
}

#[test]
fn markers_are_read_and_a_skip_without_reason_or_an_unknown_item_is_refused() {
    assert_eq!(marker("plain text"), Ok(None));
    assert_eq!(
        marker("<!-- example: serves; in hello -->"),
        Ok(Some(Marker {
            serves: true,
            dir: Some("hello".into()),
            ..Marker::default()
        }))
    );
    assert_eq!(
        marker("<!-- example: skip: needs a cluster; tests/it/deploy.rs covers it -->")
            .unwrap()
            .unwrap()
            .skip,
        Some("needs a cluster; tests/it/deploy.rs covers it".into())
    );
    assert!(marker("<!-- example: skip: -->").is_err());
    assert!(marker("<!-- example: sometimes -->").is_err());
    let text = "<!-- example: file a.yaml -->\n```yaml\nk: v\n```\n\n```sh\necho hi\n```\n\n```rust\nfn main() {}\n```\n";
    let found = blocks("t.md", text).unwrap();
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].marker.file.as_deref(), Some("a.yaml"));
    assert_eq!(
        (found[1].at.as_str(), found[1].text.as_str()),
        ("t.md:6", "echo hi\n")
    );
}

#[test]
fn a_failing_example_and_a_server_that_stops_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let block = |text: &str, serves: bool| Block {
        at: "t.md:1".into(),
        lang: "sh".into(),
        marker: Marker {
            serves,
            ..Marker::default()
        },
        text: text.into(),
    };
    assert_eq!(
        run(&block("switchyard --version\n", false), dir.path()),
        Ok(())
    );
    let failed = run(&block("switchyard no-such-command\n", false), dir.path()).unwrap_err();
    assert!(failed.contains("failed (exit status: 2)"), "{failed}");
    let stopped = run(&block("true\n", true), dir.path()).unwrap_err();
    assert!(
        stopped.contains("before 5s, where it should serve"),
        "{stopped}"
    );
    // A background process is stopped with its block.
    let pid = dir.path().join("pid");
    let started = format!("sleep 300 & echo $! > {}\nsleep 600\n", pid.display());
    assert_eq!(run(&block(&started, true), dir.path()), Ok(()));
    let pid = std::fs::read_to_string(&pid).unwrap();
    // Gone, or a zombie nobody has reaped yet (where the container's first process reaps
    // none).
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
    assert!(matches!(state, None | Some('Z')), "{stat}");
}

#[test]
fn the_shell_examples_of_the_readme_and_the_docs_run() {
    // The README's `switchyard run` takes 127.0.0.1:9470, as the demo does.
    let _port = support::default_admin_port();
    let started = Instant::now();
    let failures: Vec<String> = pages().iter().flat_map(|page| run_page(page)).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    println!("the examples ran in {:?}", started.elapsed());
}
