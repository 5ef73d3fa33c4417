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
        Self::start_under(&[], args, env, unset)
    }

    /// Like [`Process::start`], run by the command `wrapper` (a program and its arguments,
    /// to which the switchyard binary and `args` are added; none for switchyard itself).
    pub fn start_under(
        wrapper: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
        unset: &[&str],
    ) -> Self {
        let binary = env!("CARGO_BIN_EXE_switchyard");
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(binary);
                command
            }
            None => Command::new(binary),
        };
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

    /// Stops it with SIGTERM (a clean stop), waits up to `timeout` for it to exit, and
    /// returns every line it wrote; panics if it did not exit in time.
    pub fn terminate(mut self, timeout: Duration) -> Vec<String> {
        spawned::signal(self.child.id(), "TERM");
        let deadline = Instant::now() + timeout;
        while self
            .child
            .child()
            .try_wait()
            .expect("wait for switchyard")
            .is_none()
        {
            assert!(
                Instant::now() < deadline,
                "switchyard did not stop within {timeout:?} of SIGTERM; it wrote:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// Runs the switchyard binary to the end, killing it if it runs longer than `limit`:
/// exit code, stdout, stderr. Panics (with what it wrote) when it had to be killed.
pub fn switchyard_within(args: &[&str], limit: Duration) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut spawned = Spawned::start(&mut command, "switchyard");
    let child = spawned.child();
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out = read(Box::new(
        child.stdout.take().expect("piped standard output"),
    ));
    let err = read(Box::new(child.stderr.take().expect("piped standard error")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = spawned.child().try_wait().expect("wait for switchyard") {
            break status;
        }
        if Instant::now() > deadline {
            spawned.stop();
            panic!(
                "switchyard {} was still running after {limit:?}; killed. It wrote:\n{}{}",
                args.join(" "),
                out.join().unwrap_or_default(),
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    spawned.stop();
    (
        status.code().unwrap_or(-1),
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}
