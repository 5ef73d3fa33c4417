//! Every process the tests start is started here ([`Spawned`], [`output`], [`status`]):
//! in a process group of its own, with a marker in its environment
//! (`SWITCHYARD_TEST_SPAWN=PID-N`, PID the test binary's). Ending one ends everything it
//! started: its group is killed, what carries its marker outside the group is given a
//! moment to go and then killed, and if anything had to be killed that way, or is still
//! there, the test fails naming it.
//!
//! Why both the group and the marker: Chromium's zygote and renderers stay in
//! chromedriver's group but rewrite their environment (the marker is gone from
//! `/proc/PID/environ`), while its crash handlers keep the environment but leave the group
//! and session (they go by themselves about a second after the browser). Why a check as
//! each helper ends rather than once after the suite: the tests run in parallel threads of
//! one process, with no last test. And for a test binary that dies without running its
//! destructors (Ctrl-C, a `timeout`, SIGKILL), a watchdog started with the first helper
//! kills what carries the binary's markers, with their groups, once the binary is gone.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The environment variable every process the tests start carries.
pub const MARKER: &str = "SWITCHYARD_TEST_SPAWN";

/// How long what was killed, or left its group, may take to go.
const GRACE: Duration = Duration::from_secs(10);

/// A process the tests started, with everything it starts: ended together when dropped
/// (or by [`Spawned::stop`]), failing the test if anything is left.
pub struct Spawned {
    child: Option<Child>,
    what: String,
    marker: String,
    group: u32,
    grace: Duration,
}

impl Spawned {
    /// Starts `command` in a process group of its own; `what` names it in failures.
    pub fn start(command: &mut Command, what: &str) -> Self {
        watchdog();
        let marker = format!("{}-{}", std::process::id(), next());
        command.process_group(0).env(MARKER, &marker);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Self {
            group: child.id(),
            child: Some(child),
            what: what.to_string(),
            marker,
            grace: GRACE,
        }
    }

    /// How long what it started may take to go once it is ended ([`GRACE`] unless set).
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Its process id (also its process group's).
    pub fn id(&self) -> u32 {
        self.group
    }

    /// The child process: its pipes and exit status.
    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("the process was not ended yet")
    }

    /// Every live process it started, itself included.
    pub fn processes(&self) -> Vec<Started> {
        started(self.group, &self.marker)
    }

    /// Its process group and marker, to look for what it started after it has ended.
    pub fn trace(&self) -> (u32, String) {
        (self.group, self.marker.clone())
    }

    /// Ends it and everything it started; panics naming what was left.
    pub fn stop(&mut self) {
        let left = self.end();
        assert!(left.is_empty(), "{}", self.left_message(&left));
    }

    /// Waits for it to exit and collects its output (as [`Child::wait_with_output`]), then
    /// ends what it left running, failing if it left anything.
    pub fn wait_with_output(mut self) -> Output {
        let child = self.child.take().expect("the process was not ended yet");
        let output = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("wait for {}: {e}", self.what));
        self.stop();
        output
    }

    /// Kills its group (and again whatever of it turns up), waits for its child, then
    /// waits for what carries its marker to go; what is still there after the grace is
    /// killed and returned: what had left the group and did not go by itself.
    fn end(&mut self) -> Vec<Started> {
        if let Some(mut child) = self.child.take() {
            // The group id is still ours: the leader is not reaped until the wait below,
            // and a number stays taken while any process of its group lives.
            kill_group(self.group);
            let _ = child.kill();
            let _ = child.wait();
        }
        let deadline = Instant::now() + self.grace;
        loop {
            let live = started(self.group, &self.marker);
            if live.iter().any(|p| p.group == self.group) {
                kill_group(self.group);
            }
            if live.is_empty() {
                return Vec::new();
            }
            if Instant::now() > deadline {
                for p in &live {
                    kill_one(p.pid);
                }
                return live;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn left_message(&self, left: &[Started]) -> String {
        let listed: Vec<String> = left.iter().map(ToString::to_string).collect();
        format!(
            "{} left processes running after it ended (now killed): {}",
            self.what,
            listed.join("; ")
        )
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let left = self.end();
        if left.is_empty() {
            return;
        }
        let message = self.left_message(&left);
        if std::thread::panicking() {
            eprintln!("{message}");
        } else {
            panic!("{message}");
        }
    }
}

/// Runs `command` to the end with its output captured (as [`Command::output`]), then
/// checks it left nothing running.
pub fn output(command: &mut Command, what: &str) -> Output {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Spawned::start(command, what).wait_with_output()
}

/// Runs `command` to the end with the test's standard output and error (as
/// [`Command::status`], with no standard input), then checks it left nothing running.
pub fn status(command: &mut Command, what: &str) -> ExitStatus {
    let mut spawned = Spawned::start(command.stdin(Stdio::null()), what);
    let status = spawned
        .child()
        .wait()
        .unwrap_or_else(|e| panic!("wait for {what}: {e}"));
    spawned.stop();
    status
}

/// Sends `signal` (`STOP`, `CONT`, `INT`) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let sent = status(
        Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string()),
        "kill",
    );
    assert!(sent.success(), "kill -{signal} {pid} failed");
}

/// A live process the tests started.
#[derive(Debug, Clone)]
pub struct Started {
    /// Its process id.
    pub pid: u32,
    /// Its process group.
    pub group: u32,
    /// Its command line.
    pub command: String,
}

impl std::fmt::Display for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} (group {}): {}",
            self.pid, self.group, self.command
        )
    }
}

/// The live processes (zombies aside) in process group `group` or carrying `marker`.
pub fn started(group: u32, marker: &str) -> Vec<Started> {
    let wanted = format!("{MARKER}={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let (state, pgid) = stat(pid)?;
            if state == 'Z' {
                return None;
            }
            let marked = || {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == wanted.as_bytes()))
            };
            (pgid == group || marked()).then(|| Started {
                pid,
                group: pgid,
                command: command_line(pid),
            })
        })
        .collect()
}

/// A process's state letter and process group, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: the fields follow the last ')'.
    let mut fields = text.get(text.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text = String::from_utf8_lossy(&raw).replace('\0', " ");
    text.trim().chars().take(160).collect()
}

/// SIGKILL to every process of group `group`. Started directly (not through
/// [`Spawned`]): `kill` starts nothing.
fn kill_group(group: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
}

fn kill_one(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

fn next() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Starts, once, a shell that waits for this test binary to be gone, then kills every
/// process carrying one of its markers together with the group of each, naming them on
/// standard error. In a group of its own and deaf to INT, TERM and HUP, so that what ends
/// the binary (Ctrl-C reaches the terminal's foreground group) does not end it too.
fn watchdog() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let script = r#"
trap '' INT TERM HUP
while kill -0 "$1" 2>/dev/null; do sleep 1; done
for environ in /proc/[0-9]*/environ; do
  { tr '\0' '\n' < "$environ" | grep -q "^$2=$1-"; } 2>/dev/null || continue
  pid=${environ#/proc/}; pid=${pid%/environ}
  group=$(cut -d')' -f2 "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f4)
  echo "switchyard tests: killing pid $pid (group $group), left by test binary $1: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" >&2
  kill -KILL "-${group:-$pid}" "$pid" 2>/dev/null
done
"#;
        let spawned = Command::new("sh")
            .args(["-c", script, "watchdog"])
            .arg(std::process::id().to_string())
            .arg(MARKER)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn();
        if let Err(e) = spawned {
            eprintln!("no watchdog for the processes the tests start: {e}");
        }
    });
}
