//! Support for the simulator's tests: kubectl as an independent client (with a private
//! discovery cache), kubectl watches read line by line, raw HTTP watches, and JSON over HTTP.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::spawned::{self, Spawned};

use serde_json::Value;
use switchyard::sim::{SimConfig, SimOptions, Simulator};

pub use super::get_json;

/// A simulator on a free loopback port, with `yaml` as its sim config.
pub async fn start_with_config(yaml: &str) -> Simulator {
    let config = SimConfig::from_yaml(yaml, "test config").expect("a valid sim config");
    Simulator::start(SimOptions {
        config,
        ..SimOptions::default()
    })
    .await
    .expect("start the simulator")
}

/// kubectl pointed at one simulator, with its own discovery cache (so that a port reused
/// by another test's simulator never shows stale resources).
pub struct Kubectl {
    dir: tempfile::TempDir,
}

/// What a kubectl run printed.
#[derive(Debug)]
pub struct Output {
    /// Whether it exited 0.
    pub ok: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Kubectl {
    /// kubectl for `sim`.
    pub fn new(sim: &Simulator) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        sim.write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("write the kubeconfig");
        Self { dir }
    }

    /// kubectl for a kubeconfig written by someone else (`switchyard sim --kubeconfig-out`).
    pub fn with_kubeconfig(path: &Path) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::copy(path, dir.path().join("kubeconfig")).expect("copy the kubeconfig");
        Self { dir }
    }

    /// The kubeconfig this kubectl uses (for other clients of the same simulator).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// A file in this kubectl's private directory (for manifests).
    pub fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).expect("write the file");
        path
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(self.dir.path().join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args);
        command
    }

    /// Runs kubectl to the end (blocking; call it from `spawn_blocking` in async tests).
    pub fn run(&self, args: &[&str]) -> Output {
        let output = spawned::output(&mut self.command(args), "kubectl");
        Output {
            ok: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs kubectl to the end with `input` on its standard input (`apply -f -`).
    pub fn run_with_input(&self, args: &[&str], input: &str) -> Output {
        let mut child = Spawned::start(
            self.command(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
            "kubectl",
        );
        let mut stdin = child.child().stdin.take().expect("stdin is piped");
        let input = input.to_string();
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let output = child.wait_with_output();
        writer
            .join()
            .expect("the stdin writer")
            .expect("write kubectl's stdin");
        Output {
            ok: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Starts a long-running kubectl (such as `get -w`) whose output lines can be awaited.
    pub fn spawn(&self, args: &[&str]) -> Lines {
        Lines::start(
            self.command(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
            "kubectl",
        )
    }
}

/// The output lines of a running process, read on a thread.
pub struct Lines {
    lines: mpsc::Receiver<String>,
    errors: mpsc::Receiver<String>,
    seen: Vec<String>,
    _child: Spawned,
}

impl Lines {
    /// Starts `command` (named `what` in failures) with its standard output and error piped
    /// and reads them; it is ended, with what it started, when this is dropped.
    pub fn start(command: &mut Command, what: &str) -> Self {
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        Self::follow(Spawned::start(command, what))
    }

    /// Reads the piped stdout and stderr of `child`, which is ended when this is dropped.
    pub fn follow(mut child: Spawned) -> Self {
        let (tx, lines) = mpsc::channel();
        let stdout = child.child().stdout.take().expect("stdout is piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (etx, errors) = mpsc::channel();
        if let Some(stderr) = child.child().stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if etx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Self {
            lines,
            errors,
            seen: Vec::new(),
            _child: child,
        }
    }

    /// Waits (blocking) for the next line that satisfies `wanted`; panics after `timeout`
    /// with everything printed so far.
    pub fn wait_for(&mut self, timeout: Duration, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if wanted(&line) {
                        return line;
                    }
                }
                Err(_) => {
                    let errors: Vec<String> = self.errors.try_iter().collect();
                    panic!(
                        "no matching line within {timeout:?}; stdout so far: {:#?}; stderr: {errors:#?}",
                        self.seen
                    );
                }
            }
        }
    }

    /// Reads whatever arrives for `period` (blocking); every line read so far.
    pub fn read_for(&mut self, period: Duration) -> &[String] {
        let deadline = Instant::now() + period;
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line);
        }
        &self.seen
    }

    /// Every line read so far.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }
}

/// Runs `f` with a kubectl on a blocking thread.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("the blocking task")
}

/// POST a JSON body to `url` and parse the JSON answer.
pub async fn post_json(url: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("POST");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// A raw watch over HTTP: every event line as JSON.
pub struct RawWatch {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl RawWatch {
    /// Opens a watch at `url` (which includes `watch=true`).
    pub async fn open(url: &str) -> Self {
        Self::from_response(reqwest::get(url).await.expect("GET watch"))
    }

    /// Reads the watch a request already opened.
    pub fn from_response(response: reqwest::Response) -> Self {
        assert_eq!(response.status().as_u16(), 200, "watch {}", response.url());
        Self {
            response,
            buffer: Vec::new(),
        }
    }

    /// The next event, `None` when the server ends the stream; panics after 5 seconds.
    pub async fn next(&mut self) -> Option<Value> {
        tokio::time::timeout(Duration::from_secs(5), self.next_event())
            .await
            .expect("a watch event within 5 seconds")
    }

    async fn next_event(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Some(serde_json::from_slice(&line).expect("a JSON event line"));
            }
            match self.response.chunk().await.expect("read the watch") {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => return None,
            }
        }
    }
}
