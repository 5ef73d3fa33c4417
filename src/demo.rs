//! `switchyard demo`: the daemon on the built-in simulator with steady churn, printing every
//! plugin log line from the first list on, and showing in its first minute what sets
//! switchyard apart: a Python handler that fails on one object, retries and keeps it as a
//! dead letter; a capability-gated write (label-guard); a config edit reloaded while running;
//! a new plugin dropped in, after which the dead letter is retried and succeeds.
//!
//! The daemon runs on a copy of the config and of its plugins, in a temporary folder, so the
//! scripted edits touch nothing in the repository.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;

use crate::config;
use crate::daemon::{self, Daemon, Plan};
use crate::plugin::PluginLogs;
use crate::sim::{ChurnConfig, SimOptions, Simulator};

/// The handler the script breaks and then fixes, and its plugin.
const FLAKY_HANDLER: &str = "summary";
const FLAKY_PLUGIN: &str = "event-summary";
/// The plugin dropped in as the fix.
const FIX_PLUGIN: &str = "log-events";

/// What to run.
pub struct Options {
    /// The routing config.
    pub config: PathBuf,
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
    step("starting the Kubernetes API simulator");
    let sim = Simulator::start(SimOptions::default()).await?;
    seed(&sim)?;
    let work = tempfile::tempdir()?;
    let config_path = copy_config(&options.config, work.path())?;
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
    println!("  simulator:   {}", sim.url());
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

/// The scripted part: dead letters, a config edit, a plugin swap and a retry.
async fn script(daemon: Arc<Daemon>, config_path: PathBuf, plugins: PathBuf) {
    tokio::time::sleep(Duration::from_secs(6)).await;
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

/// Copies the config into `dir`, with its plugins (every `.wasm` of its plugins folder) in
/// `dir/plugins`, and points the copy's `plugins_dir` there.
fn copy_config(config: &Path, dir: &Path) -> Result<PathBuf> {
    let loaded = config::load(config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let plugins = dir.join("plugins");
    std::fs::create_dir(&plugins)?;
    for entry in std::fs::read_dir(&loaded.plugins_dir)
        .with_context(|| format!("reading {}", loaded.plugins_dir.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            std::fs::copy(&path, plugins.join(path.file_name().unwrap_or_default()))?;
        }
    }
    let text = std::fs::read_to_string(config)?;
    let copied: String = text
        .lines()
        .map(|line| {
            if line.starts_with("plugins_dir:") {
                "plugins_dir: plugins".to_string()
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = dir.join("config.yaml");
    std::fs::write(&path, copied + "\n")?;
    Ok(path)
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
