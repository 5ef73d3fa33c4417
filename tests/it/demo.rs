//! `switchyard demo` as an installed binary runs it: from a folder outside the repository,
//! with no config given. It builds its plugins on first use into its cache folder, runs the
//! tour, and prints an admin token that the API takes (without it, the status page's
//! buttons would answer 401); a second run takes the plugins from the cache.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{self, spawned::Spawned};

/// `switchyard demo ARGS` started in `dir` with `XDG_CACHE_HOME=cache`, its standard
/// output collected line by line (and its standard error, where cargo writes, drained).
struct Demo {
    spawned: Spawned,
    lines: Arc<Mutex<Vec<String>>>,
    /// Dropped after the demo is stopped.
    _port: std::sync::MutexGuard<'static, ()>,
}

impl Demo {
    fn start(dir: &Path, cache: &Path, args: &[&str]) -> Self {
        let port = support::default_admin_port();
        let root = support::root();
        // componentize-py as the repository's build installed it, and the plugins'
        // compiled dependencies shared with it, so the first build is quick here.
        let venv = root.join("plugins/target/python-venv/bin");
        let path = std::env::join_paths(std::iter::once(venv).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))
        .expect("a PATH");
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
        command
            .arg("demo")
            .args(args)
            .current_dir(dir)
            .env("XDG_CACHE_HOME", cache)
            .env("PATH", path)
            .env("CARGO_TARGET_DIR", root.join("plugins/target"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut spawned = Spawned::start(&mut command, "switchyard demo");
        let stdout = spawned
            .child()
            .stdout
            .take()
            .expect("piped standard output");
        let mut stderr = spawned.child().stderr.take().expect("piped standard error");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                sink.lock().unwrap().push(line);
            }
        });
        let errors = lines.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            errors
                .lock()
                .unwrap()
                .extend(text.lines().map(|l| format!("stderr: {l}")));
        });
        Self {
            spawned,
            lines,
            _port: port,
        }
    }

    fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The first line starting with `prefix`, waiting up to `timeout` for it.
    async fn line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.starts_with(prefix))
                .cloned();
            if let Some(line) = found {
                return line;
            }
            let exited = self.spawned.child().try_wait().expect("wait").is_some();
            assert!(
                !exited && Instant::now() < deadline,
                "no line {prefix:?}; the demo printed:\n{}",
                self.text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for it to end by itself; returns its exit code and what it printed.
    async fn finish(mut self, timeout: Duration) -> (i32, String) {
        let deadline = Instant::now() + timeout;
        let code = loop {
            if let Some(status) = self.spawned.child().try_wait().expect("wait") {
                break status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "the demo did not stop; it printed:\n{}",
                self.text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // Let the readers take the last lines.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let text = self.text();
        self.spawned.stop();
        (code, text)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_from_any_folder_building_its_plugins_once_with_a_token_its_api_takes() {
    // The Python build tool and the plugins' dependencies, as the repository builds them.
    support::plugins_dir();
    let home = tempfile::tempdir().unwrap();
    let (cache, elsewhere) = (home.path().join("cache"), home.path().join("elsewhere"));
    std::fs::create_dir(&elsewhere).unwrap();

    let mut demo = Demo::start(&elsewhere, &cache, &["--seconds", "15"]);
    let token_line = demo.line("  token:       ", Duration::from_secs(900)).await;
    let token = token_line
        .trim_start_matches("  token:       ")
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(token.len(), 32, "{token_line}");
    let status = demo.line("  admin API:   ", Duration::from_secs(5)).await;
    let admin = status
        .trim_start_matches("  admin API:   ")
        .trim_end_matches("/status")
        .to_string();
    let pause = format!("{admin}/handlers/log-events/pause");
    let client = reqwest::Client::new();
    let refused = client.post(&pause).send().await.expect("POST");
    assert_eq!(refused.status().as_u16(), 401);
    let paused = client
        .post(&pause)
        .bearer_auth(&token)
        .send()
        .await
        .expect("POST");
    assert_eq!(paused.status().as_u16(), 200);
    let resumed = client
        .post(format!("{admin}/handlers/log-events/resume"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("POST");
    assert_eq!(resumed.status().as_u16(), 200);

    let (code, out) = demo.finish(Duration::from_secs(60)).await;
    assert_eq!(code, 0, "{out}");
    for wanted in [
        "==> building the demo's plugins once, into ",
        "==> building log-events (Rust)",
        "==> building label-guard (Rust)",
        "==> building slack (Rust)",
        "==> building event-summary (Python)",
        "[label-guard] info: labelled ConfigMap default/app-settings owner=unknown",
        "[summary] info: summary added ConfigMap default/app-settings ",
        "handler summary: processed ",
    ] {
        assert!(out.contains(wanted), "missing {wanted:?} in:\n{out}");
    }
    let built = cache.join("switchyard/demo");
    let plugins: Vec<_> = std::fs::read_dir(&built)
        .unwrap()
        .map(|e| e.unwrap().path().join("plugins"))
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(plugins.len(), 1, "{plugins:?}");
    for name in ["log-events", "label-guard", "slack", "event-summary"] {
        assert!(plugins[0].join(format!("{name}.wasm")).is_file(), "{name}");
    }

    // The second run builds nothing.
    let demo = Demo::start(&elsewhere, &cache, &["--seconds", "2"]);
    let (code, out) = demo.finish(Duration::from_secs(120)).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("==> the demo's plugins, built earlier: "),
        "{out}"
    );
    assert!(!out.contains("==> building"), "{out}");
    // Nothing was written where it ran.
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}
