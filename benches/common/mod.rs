//! What the end-to-end benches share: child processes whose CPU time and peak RSS are
//! read from /proc, and a `switchyard sim` process to run them against.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// CPU time (user + system) of process `pid` so far, from /proc/PID/stat.
pub fn process_cpu(pid: &str) -> Duration {
    static TICK: OnceLock<f64> = OnceLock::new();
    let tick = *TICK.get_or_init(|| {
        let out = Command::new("getconf").arg("CLK_TCK").output();
        out.ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    });
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(end) = stat.rfind(')') else {
        return Duration::ZERO;
    };
    // The fields after the command name (which may hold spaces) in parentheses.
    let fields: Vec<&str> = stat[end + 2..].split(' ').collect();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    let ticks = field(11).unwrap_or(0.0) + field(12).unwrap_or(0.0);
    Duration::from_secs_f64(ticks / tick)
}

/// Peak resident set size (VmHWM) of process `pid`, in bytes.
pub fn peak_rss(pid: &str) -> u64 {
    status_bytes(pid, "VmHWM:")
}

/// Resident set size now (VmRSS) of process `pid`, in bytes.
pub fn rss(pid: &str) -> u64 {
    status_bytes(pid, "VmRSS:")
}

/// Anonymous resident memory now (RssAnon: heap and stacks, not the pages of the binary's
/// code and data mapped from its file) of process `pid`, in bytes.
pub fn anon_rss(pid: &str) -> u64 {
    status_bytes(pid, "RssAnon:")
}

/// A `kB` field of /proc/PID/status, in bytes (0 when missing).
fn status_bytes(pid: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Resets process `pid`'s peak RSS (VmHWM) to its RSS now (`5` into /proc/PID/clear_refs),
/// so that [`peak_rss`] tells the peak of what follows.
pub fn reset_peak_rss(pid: &str) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM by clear_refs");
}

/// The last of `lines` starting with `prefix`, without it.
pub fn last_line(lines: &Mutex<Vec<String>>, prefix: &str) -> Option<String> {
    let lines = lines.lock().unwrap();
    lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix(prefix).map(str::to_string))
}

/// A child process, killed when dropped, its stdout lines kept.
pub struct Running {
    pub child: Child,
    pub lines: Arc<Mutex<Vec<String>>>,
}

impl Running {
    pub fn start(mut command: Command) -> Self {
        command.stdin(Stdio::null()).stdout(Stdio::piped());
        let mut child = command.spawn().expect("start a child process");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Running { child, lines }
    }

    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// The last line starting with `prefix`, without it.
    pub fn last(&self, prefix: &str) -> Option<String> {
        last_line(&self.lines, prefix)
    }

    /// Panics if the process has exited.
    pub fn check_alive(&mut self, what: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{what} exited early: {status}");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The environment variable `name` parsed, or `default` when it is unset or unparsable.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// What a bench's simulator holds and does.
pub struct SimSpec<'a> {
    /// The `switchyard` binary that runs it.
    pub binary: &'a Path,
    /// ConfigMaps `prefill-*` in `default`, each with `object_size` bytes of data.
    pub prefill: usize,
    /// Changes a second its own churn makes (0 for none).
    pub rate: f64,
    /// Objects the churn keeps alive.
    pub churn_objects: usize,
    /// Bytes of data in each object.
    pub object_size: usize,
    /// `--feature-gates` for the simulator (none: its defaults, streaming lists served).
    pub feature_gates: Option<&'a str>,
}

/// A simulator as `spec` says, writing its kubeconfig into `dir`; returns it and its URL.
pub async fn start_sim(spec: &SimSpec<'_>, dir: &Path) -> (Running, String) {
    let mut command = Command::new(spec.binary);
    command
        .args(["sim", "--prefill", &spec.prefill.to_string()])
        .args(["--churn-size", &spec.object_size.to_string()])
        .args(["--churn-rate", &spec.rate.to_string()])
        .args(["--churn-objects", &spec.churn_objects.to_string()])
        // Two minutes of changes, so the continue tokens of a long paged list stay valid
        // (the default, 10,000, is five seconds at 2,000 changes a second).
        .args([
            "--history",
            &((spec.rate * 120.0) as usize).max(10_000).to_string(),
        ])
        .args(
            spec.feature_gates
                .map(|g| ["--feature-gates", g])
                .into_iter()
                .flatten(),
        )
        .arg("--kubeconfig-out")
        .arg(dir.join("kubeconfig"))
        .stderr(Stdio::null());
    let mut sim = Running::start(command);
    let deadline = Instant::now() + Duration::from_secs(600);
    while sim.last("kubeconfig:").is_none() {
        sim.check_alive("switchyard sim");
        assert!(Instant::now() < deadline, "the simulator did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let url = sim.last("simulator: ").expect("the simulator's URL");
    (sim, url)
}

/// Median, minimum and maximum.
pub fn spread(mut values: Vec<f64>) -> Option<(f64, f64, f64)> {
    values.retain(|v| v.is_finite());
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Some((
        *values.get(values.len() / 2)?,
        *values.first()?,
        *values.last()?,
    ))
}

/// `median (min–max)` of `value` over the rounds, with `digits` decimals; `—` if none.
pub fn cell<M>(rounds: &[M], digits: usize, value: impl Fn(&M) -> Option<f64>) -> String {
    match spread(rounds.iter().filter_map(value).collect()) {
        Some((median, min, max)) if rounds.len() > 1 => {
            format!("{median:.digits$} ({min:.digits$}–{max:.digits$})")
        }
        Some((median, _, _)) => format!("{median:.digits$}"),
        None => "—".into(),
    }
}

/// The median of `value` over the rounds.
pub fn median_of<M>(rounds: &[M], value: impl Fn(&M) -> Option<f64>) -> Option<f64> {
    spread(rounds.iter().filter_map(value).collect()).map(|s| s.0)
}

/// A ratio of medians, or `—`.
pub fn ratio(mine: Option<f64>, theirs: Option<f64>) -> String {
    match (mine, theirs) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    }
}
