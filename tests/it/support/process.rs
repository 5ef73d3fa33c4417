//! `switchyard run` as a child process, its standard error read line by line, killed when
//! dropped (with anything it started: see [`super::spawned`]): for what only the binary
//! does (flags, environment, the log it writes); and any other switchyard command run to
//! the end.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::spawned::{self, Spawned};

/// A running `switchyard` and every line it has written to standard error so far.
pub struct Process {
    child: Spawned,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Process {
    /// Starts `switchyard ARGS` with the variables `unset` removed and `env` set.
    pub fn start(args: &[&str], env: &[(&str, &str)], unset: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
        // Removed first: a variable both removed and given keeps the value given.
        for name in unset {
            command.env_remove(name);
        }
        command
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = Spawned::start(&mut command, "switchyard run");
        let stderr = child.child().stderr.take().expect("piped standard error");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            lines,
            reader: Some(reader),
        }
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Kills it with SIGKILL and returns every line it wrote, to the last.
    pub fn kill(mut self) -> Vec<String> {
        self.child.stop();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.lines()
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits up to `timeout` for a line that `wanted` accepts; panics listing what was
    /// written otherwise.
    pub async fn wait_for_line(&self, timeout: Duration, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.lines().into_iter().find(|l| wanted(l)) {
                return line;
            }
            if Instant::now() > deadline {
                panic!(
                    "no such line within {timeout:?}; saw:\n{}",
                    self.lines().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Runs the switchyard binary to the end: exit code, stdout, stderr.
pub fn switchyard(args: &[&str]) -> (i32, String, String) {
    switchyard_with_env(args, &[])
}

/// Like [`switchyard`], with `env` added to the environment.
pub fn switchyard_with_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let output = spawned::output(
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(args)
            .envs(env.iter().copied()),
        "switchyard",
    );
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
