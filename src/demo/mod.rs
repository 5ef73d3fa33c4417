//! `switchyard demo`: the daemon on the built-in simulator with steady churn, printing every
//! plugin log line from the first list on, and showing in its first minute what sets
//! switchyard apart: a Python handler that fails on one object, retries and keeps it as a
//! dead letter; a capability-gated write (label-guard); a config edit reloaded while running;
//! a new plugin dropped in, after which the dead letter is retried and succeeds; a Warning
//! Event posted by the `slack` sink to a local receiver ([`receiver`]) that fails the first
//! delivery, retried and delivered.
//!
//! The daemon runs on a copy of the config and of its plugins, in a temporary folder, so the
//! scripted edits touch nothing in the repository. Without `--config` the demo runs the
//! config built into the binary (`config/demo.yaml`) with its plugins built on first use
//! ([`plugins`]), so an installed binary runs it from any folder. The copy gets an admin
//! token, printed at start, so the status page's buttons work.

pub mod plugins;
pub mod receiver;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;

use crate::config;
use crate::daemon::{self, Daemon, Plan};
use crate::plugin::PluginLogs;
use crate::sim::{ChurnConfig, Cluster, SimOptions, Simulator};

/// The handler the script breaks and then fixes, and its plugin.
const FLAKY_HANDLER: &str = "summary";
const FLAKY_PLUGIN: &str = "event-summary";
/// The plugin dropped in as the fix.
const FIX_PLUGIN: &str = "log-events";
/// The handler that posts Warning Events to the receiver.
const ALERTS_HANDLER: &str = "alerts";

/// The demo's config, built into the binary.
pub const CONFIG: &str = include_str!("../../config/demo.yaml");

/// What to run.
pub struct Options {
    /// The routing config; `None` for the built-in one ([`CONFIG`]) and its plugins.
    pub config: Option<PathBuf>,
    /// Stop after this long (else at Ctrl-C or SIGTERM).
    pub seconds: Option<u64>,
    /// Changes per second the churn makes.
    pub rate: f64,
}

/// A step of the script, printed so it stands out among the plugin lines.
fn step(text: &str) {
    println!("==> {text}");
}

/// Runs the demo until `shutdown` completes or the time is up.
pub async fn run(options: Options, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
    let work = tempfile::tempdir()?;
    let receiver = receiver::start().await?;
    let (config_path, token) = match &options.config {
        Some(path) => {
            let loaded = config::load(path).map_err(|e| anyhow::anyhow!("{e}"))?;
            let text = std::fs::read_to_string(path)?;
            copy_config(&text, &loaded.plugins_dir, work.path(), receiver.addr)?
        }
        None => {
            let built = tokio::task::spawn_blocking(|| plugins::prepare(step)).await??;
            copy_config(CONFIG, &built, work.path(), receiver.addr)?
        }
    };
    step("starting the Kubernetes API simulator");
    let sim = Simulator::start(SimOptions::default()).await?;
    seed(&sim)?;
    let kubeconfig = work.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig)?;
    step("starting switchyard (plugins compile on first use; cached after)");
    let logs = PluginLogs::default();
    let mut lines = logs.subscribe();
    let printer = tokio::spawn(async move {
        while let Ok(line) = lines.recv().await {
            println!("[{}] {}: {}", line.handler, line.level, line.message);
        }
    });
    let daemon = start_daemon(&config_path, &sim, &logs).await?;
    let daemon = Arc::new(daemon);
    println!("  status page: {}/", daemon.admin_url());
    println!("  admin API:   {}/status", daemon.admin_url());
    match &token {
        Some(token) => println!(
            "  token:       {token} (for the page's buttons, typed into its token field, and for POST requests: curl -H 'Authorization: Bearer {token}' -X POST {}/handlers/summary/pause)",
            daemon.admin_url()
        ),
        None => println!("  token:       the config's own (admin.token_file or admin.token_env)"),
    }
    println!("  simulator:   {}", sim.url());
    println!(
        "  receiver:    http://{} (a webhook receiver; handler alerts posts Warning Events to it)",
        receiver.addr
    );
    println!(
        "  kubectl:     kubectl --kubeconfig {} get configmaps -A",
        kubeconfig.display()
    );
    println!(
        "  config:      {} (edit it: the daemon reloads it)",
        config_path.display()
    );
    let churn = sim.start_churn(ChurnConfig {
        rate: options.rate,
        ..ChurnConfig::default()
    });
    let script = tokio::spawn(script(
        daemon.clone(),
        sim.cluster().clone(),
        config_path.clone(),
        work.path().join("plugins"),
    ));
    let limit = async {
        match options.seconds {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = limit => {}
        _ = shutdown => {}
    }
    script.abort();
    let _ = script.await;
    churn.abort();
    println!();
    for h in daemon.status().handlers {
        println!(
            "handler {}: processed {}, failed {}, retries {}, dead letters {}, queued {}",
            h.name, h.processed, h.failed, h.retries, h.dead_letters, h.queue_depth
        );
    }
    if let Ok(daemon) = Arc::try_unwrap(daemon) {
        daemon.shut_down(Duration::from_secs(5)).await;
    }
    printer.abort();
    sim.stop().await;
    Ok(())
}

/// Starts the daemon on the admin port of the config, or a free one if that is taken.
async fn start_daemon(config_path: &Path, sim: &Simulator, logs: &PluginLogs) -> Result<Daemon> {
    let free = SocketAddr::from(([127, 0, 0, 1], 0));
    let options = |admin_listen| daemon::Options {
        client: sim.client().ok(),
        admin_listen,
        // The probes listener takes a free port: the demo shows the admin API.
        probes_listen: Some(Some(free)),
        watch_config: true,
        logs: Some(logs.clone()),
        ..daemon::Options::default()
    };
    let config = config::load(config_path)?;
    match Daemon::start(config, options(None)).await {
        Ok(daemon) => Ok(daemon),
        Err(daemon::Error::AdminBind { addr, .. }) => {
            println!("  note: {addr} is in use; the admin API takes a free port instead");
            let config = config::load(config_path)?;
            Ok(Daemon::start(config, options(Some(free))).await?)
        }
        Err(e) => Err(e.into()),
    }
}

/// The scripted part: a Warning Event sent out, dead letters, a config edit, a plugin swap
/// and a retry.
async fn script(
    daemon: Arc<Daemon>,
    cluster: Arc<Cluster>,
    config_path: PathBuf,
    plugins: PathBuf,
) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    if daemon.handler(ALERTS_HANDLER).is_some() {
        step(&format!(
            "a Warning Event about Pod default/web-1: handler {ALERTS_HANDLER} (the slack sink) posts it to the receiver, which answers the first try 503 with Retry-After: 1; the sink asks to handle it again after that second, and it arrives"
        ));
        if let Err(e) = warning_event(&cluster) {
            step(&format!("could not create the Event: {e}"));
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    if let Some(h) = daemon.handler(FLAKY_HANDLER) {
        let status = h.status();
        step(&format!(
            "handler {FLAKY_HANDLER} (Python) failed {} time(s); after its retries it keeps {} dead letter(s): GET /handlers/{FLAKY_HANDLER}/dead-letters",
            status.failed, status.dead_letters
        ));
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    step("editing the config: route pods now also gets updated events");
    let edited = std::fs::read_to_string(&config_path).map(|text| {
        text.replace(
            "events: [added, deleted]",
            "events: [added, updated, deleted]",
        )
    });
    if let Ok(text) = edited
        && std::fs::write(&config_path, text).is_ok()
    {
        match daemon.reload().await {
            Ok(plan) => step(&format!("reloaded: {}", changed(&plan))),
            Err(e) => step(&format!("reload refused: {e}")),
        }
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    step(&format!(
        "dropping a new plugin in for handler {FLAKY_HANDLER} ({FIX_PLUGIN}.wasm as {FLAKY_PLUGIN}.wasm): swapped while running"
    ));
    let swapped = std::fs::copy(
        plugins.join(format!("{FIX_PLUGIN}.wasm")),
        plugins.join(format!("{FLAKY_PLUGIN}.wasm")),
    );
    if swapped.is_err() {
        return;
    }
    let before = swaps(&daemon);
    for _ in 0..100 {
        if swaps(&daemon) > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(h) = daemon.handler(FLAKY_HANDLER) {
        let retried = h.retry_dead_letters(None);
        step(&format!(
            "retrying {retried} dead letter(s) with the new plugin"
        ));
    }
}

/// How often the flaky handler's plugin was swapped in.
fn swaps(daemon: &Daemon) -> u64 {
    daemon.plugins().view(FLAKY_PLUGIN).map_or(0, |v| v.swaps)
}

/// `routes ~pods` for the reload line.
fn changed(plan: &Plan) -> String {
    let mut parts = Vec::new();
    for (what, changes) in [("handlers", &plan.handlers), ("routes", &plan.routes)] {
        let names: Vec<String> = changes
            .added
            .iter()
            .map(|n| format!("+{n}"))
            .chain(changes.changed.iter().map(|n| format!("~{n}")))
            .chain(changes.removed.iter().map(|n| format!("-{n}")))
            .collect();
        if !names.is_empty() {
            parts.push(format!("{what} {}", names.join(" ")));
        }
    }
    if parts.is_empty() {
        "no changes".into()
    } else {
        parts.join("; ")
    }
}

/// Writes the config `text` into `dir` with its plugins (every `.wasm` of `plugins_dir`)
/// in `dir/plugins`, and points the copy's `plugins_dir` there. A config without an admin
/// token gets one, written to `dir/token` and returned.
/// The receiver's address in the text is replaced by `receiver`, where it listens.
fn copy_config(
    text: &str,
    plugins_dir: &Path,
    dir: &Path,
    receiver: SocketAddr,
) -> Result<(PathBuf, Option<String>)> {
    let text = text.replace(receiver::ADDRESS, &receiver.to_string());
    let plugins = dir.join("plugins");
    std::fs::create_dir(&plugins)?;
    for entry in std::fs::read_dir(plugins_dir)
        .with_context(|| format!("reading {}", plugins_dir.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            std::fs::copy(&path, plugins.join(path.file_name().unwrap_or_default()))?;
        }
    }
    let mut lines: Vec<String> = text
        .lines()
        .map(|line| {
            if line.starts_with("plugins_dir:") {
                "plugins_dir: plugins".to_string()
            } else {
                line.to_string()
            }
        })
        .collect();
    let token = with_token(&mut lines);
    if let Some(token) = &token {
        std::fs::write(dir.join("token"), token)?;
    }
    let path = dir.join("config.yaml");
    std::fs::write(&path, lines.join("\n") + "\n")?;
    Ok((path, token))
}

/// Adds `admin.token_file: token` to a config's lines that name no admin token, and
/// returns the new token; `None` when the config has one, or writes `admin:` in a form
/// this cannot add to (a flow mapping).
fn with_token(lines: &mut Vec<String>) -> Option<String> {
    let admin = lines.iter().position(|l| l.starts_with("admin:"));
    let has_token = |l: &String| {
        let l = l.trim_start();
        l.starts_with("token_file:") || l.starts_with("token_env:")
    };
    match admin {
        Some(_) if lines.iter().any(has_token) => return None,
        Some(at) if lines[at].trim_end() == "admin:" => {
            lines.insert(at + 1, "  token_file: token".into());
        }
        Some(_) => return None,
        None => lines.extend(["admin:".to_string(), "  token_file: token".to_string()]),
    }
    let token: String = (0..32)
        .map(|_| char::from(b"0123456789abcdef"[rand::random_range(0..16)]))
        .collect();
    Some(token)
}

/// Creates a Warning Event about Pod `default/web-1`, as the kubelet reports a crash loop.
fn warning_event(cluster: &Cluster) -> Result<()> {
    let events =
        crate::sim::resources::find("", "v1", "events").context("resource in the catalogue")?;
    let now = crate::sim::cluster::now_rfc3339();
    cluster.create(
        events,
        "default",
        json!({"metadata": {"name": "web-1.backoff"},
               "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "web-1"},
               "type": "Warning", "reason": "BackOff", "count": 1,
               "message": "Back-off restarting failed container main in pod web-1",
               "source": {"component": "kubelet", "host": "node-b"},
               "firstTimestamp": now, "lastTimestamp": now}),
    )?;
    Ok(())
}

/// Objects the demo starts with, beside the churned ConfigMaps: the demo's own ConfigMaps
/// (one of which the Python handler fails on), and Pods on two nodes.
fn seed(sim: &Simulator) -> Result<()> {
    let cluster = sim.cluster();
    let find =
        |plural| crate::sim::resources::find("", "v1", plural).context("resource in the catalogue");
    let (configmaps, pods) = (find("configmaps")?, find("pods")?);
    for name in ["app-settings", "feature-flags", "routing-table"] {
        cluster.create(
            configmaps,
            "default",
            json!({"metadata": {"name": name, "labels": {"app": "demo"}}, "data": {"version": "1"}}),
        )?;
    }
    cluster.create(
        configmaps,
        "default",
        json!({"metadata": {"name": "broken-settings", "labels": {"app": "demo"},
               "annotations": {"event-summary/error": "this object trips the Python handler"}},
               "data": {"version": "1"}}),
    )?;
    for (name, node) in [
        ("web-0", "node-a"),
        ("web-1", "node-b"),
        ("worker-0", "node-a"),
    ] {
        cluster.create(
            pods,
            "default",
            json!({"metadata": {"name": name, "labels": {"app": "demo"}}, "spec": {"nodeName": node, "containers": [{"name": "main", "image": "nginx"}]}, "status": {"phase": "Running"}}),
        )?;
    }
    Ok(())
}
