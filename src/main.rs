//! The `switchyard` command: run the daemon, check a config, print the RBAC a config needs,
//! record events and replay them through plugins, start, build and push a plugin project,
//! run the demo or the simulator.

use std::io::Write;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use serde_json::json;
use switchyard::check::Severity;
use switchyard::config::{self, Config};
use switchyard::daemon::{self, Daemon};
use switchyard::logging::{self, LogFormat};
use switchyard::rbac;
use switchyard::sim::{ChurnConfig, FeatureGates, SimConfig, SimOptions, Simulator};

mod cli;

use cli::{Cli, Command, New, THREADS_VAR, parse_threads};

/// The async runtime for `command`: `run` on the threads it was given (see [`Command::Run`]),
/// every other command on one thread per core.
fn runtime(command: &Command) -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Command::Run { threads, .. } = command {
        let threads = match threads {
            Some(n) => *n,
            None => match std::env::var(THREADS_VAR) {
                Ok(text) => {
                    parse_threads(&text).map_err(|e| anyhow::anyhow!("{THREADS_VAR}: {e}"))?
                }
                Err(_) => NonZeroUsize::MIN,
            },
        };
        builder.worker_threads(threads.get());
    }
    builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match runtime(&cli.command) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {}", switchyard::util::chain_text(e.as_ref()));
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(dispatch(cli.command));
    match result {
        Ok(code) => code,
        Err(e) => {
            report(&switchyard::util::chain_text(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Runs the command.
async fn dispatch(command: Command) -> Result<ExitCode> {
    match command {
        Command::Run {
            config,
            kubeconfig,
            context,
            log_format,
            threads: _,
        } => {
            let options = daemon::Options {
                watch_config: true,
                kubeconfig,
                context,
                ..daemon::Options::default()
            };
            run(&config, options, log_format).await
        }
        Command::Check {
            config,
            cluster,
            kubeconfig,
            context,
            json,
            plugins_dir,
        } => {
            let cluster = cluster.then_some((kubeconfig, context));
            check(&config, cluster, json, plugins_dir.as_deref()).await
        }
        Command::Rbac {
            config,
            namespace,
            name,
            kubeconfig,
            context,
            helm_values,
        } => {
            if helm_values {
                return rbac_values(&config);
            }
            let cluster = (kubeconfig, context);
            rbac(&config, namespace, name, cluster).await
        }
        Command::Demo {
            config,
            seconds,
            rate,
        } => demo(config.as_deref(), seconds, rate).await,
        Command::Record {
            config,
            out,
            seconds,
            kubeconfig,
            context,
        } => record(&config, &out, seconds, kubeconfig, context).await,
        Command::Replay {
            config,
            events,
            handler,
            json,
        } => replay(&config, &events, handler.as_deref(), json).await,
        Command::New {
            what:
                New::Plugin {
                    name,
                    lang,
                    dir,
                    from_recipe,
                },
        } => match from_recipe {
            Some(recipe) => new_from_recipe(&name, &recipe, lang, &dir),
            None => new_plugin(
                &name,
                lang.unwrap_or(switchyard::scaffold::Lang::Rust),
                &dir,
            ),
        },
        Command::Build { dir, no_cache } => build(&dir, !no_cache),
        Command::Push {
            file,
            reference,
            ca_file,
        } => push(&file, &reference, ca_file.as_deref()).await,
        Command::Schema => {
            let schema = switchyard::config::schema::json_schema();
            println!("{}", serde_json::to_string_pretty(&schema)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds => {
            print!("{}", switchyard::config::crds::crds_yaml());
            Ok(ExitCode::SUCCESS)
        }
        sim_command @ Command::Sim { .. } => sim_from(sim_command).await,
    }
}

/// `switchyard push`: the component at `file` to the registry as `reference`.
async fn push(file: &Path, reference: &str, ca_file: Option<&Path>) -> Result<ExitCode> {
    match switchyard::plugin::oci::push(file, reference, ca_file).await {
        Ok(pinned) => {
            println!("pushed {pinned}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            report(&e);
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `switchyard sim`, from its command-line arguments.
async fn sim_from(command: Command) -> Result<ExitCode> {
    let Command::Sim {
        listen,
        kubeconfig_out,
        churn_rate,
        churn_objects,
        churn_size,
        churn_kinds,
        config,
        prefill,
        history,
        token,
        token_file,
        tls,
        ca_out,
        feature_gates,
    } = command
    else {
        unreachable!("called with Command::Sim");
    };
    let access = SimAccess {
        token,
        token_file,
        tls,
        ca_out,
        feature_gates,
    };
    let churn = ChurnConfig {
        rate: churn_rate,
        objects: churn_objects,
        object_size: churn_size,
        kinds: churn_kinds,
        ..ChurnConfig::default()
    };
    let load = SimLoad { prefill, history };
    sim(listen, kubeconfig_out, churn, config, load, access).await
}

/// Whether the log is JSON: errors are then log events too, so every line parses.
static JSON_LOG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Prints an error: `error: ...` on standard error, or an error event when the log is JSON.
fn report(message: &str) {
    if JSON_LOG.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::error!("{message}");
    } else {
        eprintln!("error: {message}");
    }
}

fn init_logging(default_filter: &str) {
    logging::init(LogFormat::Text, default_filter);
}

/// Dependencies' logs below warnings are left out; so is kube's request tracing, which
/// logs each failed request as an ERROR the daemon then reports itself, with what it does.
const QUIET_DEPENDENCIES: &str =
    "cranelift=warn,wasmtime=warn,hyper=warn,kube=warn,tower=warn,kube_client::client::builder=off";

fn load_config(path: &Path) -> Result<Config, ExitCode> {
    load_config_or(path, "nothing was started")
}

/// Loads a config; on problems, prints each and `outcome`, and gives exit code 2.
fn load_config_or(path: &Path, outcome: &str) -> Result<Config, ExitCode> {
    config::load(path).map_err(|errors| {
        for e in &errors.0 {
            report(&e.to_string());
        }
        let summary = format!(
            "{}: {} problem(s); {outcome}",
            path.display(),
            errors.0.len()
        );
        if JSON_LOG.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::error!("{summary}");
        } else {
            eprintln!("{summary}");
        }
        ExitCode::from(2)
    })
}

/// `switchyard rbac --helm-values`: the rules as the Helm chart's values, as JSON.
fn rbac_values(path: &Path) -> Result<ExitCode> {
    let config = match load_config_or(path, "nothing was printed") {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let values = rbac::helm_values(&config);
    println!("{}", serde_json::to_string_pretty(&values)?);
    Ok(ExitCode::SUCCESS)
}

async fn rbac(
    path: &Path,
    namespace: Option<String>,
    name: String,
    (kubeconfig, context): (Option<PathBuf>, Option<String>),
) -> Result<ExitCode> {
    let config = match load_config_or(path, "nothing was printed") {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let namespace = match namespace {
        Some(namespace) => namespace,
        None => {
            let kubeconfig = kubeconfig.as_deref().or(config.kubeconfig.as_deref());
            let named = kubeconfig.is_some() || context.is_some();
            let context_namespace =
                match daemon::client::client_config(kubeconfig, context.as_deref()).await {
                    Ok(found) => Some(found.default_namespace),
                    Err(e) if named => return Err(e.into()),
                    // No kubeconfig at all is fine: the rule goes on to `default`.
                    Err(_) => None,
                };
            let dir = switchyard::util::identity::service_account_dir();
            switchyard::util::identity::daemon_namespace(&dir, context_namespace.as_deref())
        }
    };
    let source = path.file_name().map_or_else(
        || path.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    );
    let subject = rbac::Subject {
        name,
        namespace,
        source,
    };
    print!(
        "{}",
        rbac::render(&rbac::permissions(&config, &subject), &subject)
    );
    Ok(ExitCode::SUCCESS)
}

async fn run(
    path: &Path,
    options: daemon::Options,
    log_format: Option<LogFormat>,
) -> Result<ExitCode> {
    let format = match LogFormat::choose(log_format) {
        Ok(format) => format,
        Err(e) => {
            eprintln!("error: {}: {e}", logging::FORMAT_ENV);
            return Ok(ExitCode::from(2));
        }
    };
    JSON_LOG.store(
        format == LogFormat::Json,
        std::sync::atomic::Ordering::Relaxed,
    );
    logging::init(format, &format!("info,{QUIET_DEPENDENCIES}"));
    let config = match load_config(path) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let daemon = Daemon::start(config, options).await?;
    if format == LogFormat::Text {
        eprintln!("switchyard admin API: {}", daemon.admin_url());
    }
    shutdown_signal().await;
    daemon.shut_down(Duration::from_secs(10)).await;
    Ok(ExitCode::SUCCESS)
}

/// `switchyard check`: every problem at once; exit 2 when there are errors.
async fn check(
    path: &Path,
    cluster: Option<(Option<PathBuf>, Option<String>)>,
    json: bool,
    plugins_dir: Option<&Path>,
) -> Result<ExitCode> {
    let client = match cluster {
        Some((kubeconfig, context)) => {
            let kubeconfig =
                kubeconfig.or_else(|| config::load(path).ok().and_then(|c| c.kubeconfig));
            let config =
                daemon::client::client_config(kubeconfig.as_deref(), context.as_deref()).await?;
            Some(kube::Client::try_from(config)?)
        }
        None => None,
    };
    let report = switchyard::check::check(path, client, plugins_dir).await?;
    let errors = report.count(Severity::Error);
    let warnings = report.count(Severity::Warning);
    if json {
        // A closed pipe (`| head`) is no fault of the config's.
        let _ = writeln!(
            std::io::stdout(),
            "{}",
            serde_json::to_string_pretty(&report)?
        );
    } else {
        for finding in &report.findings {
            eprintln!("{finding}");
        }
        if report.ok {
            println!(
                "{}: ok ({} handler(s), {} route(s)){}",
                path.display(),
                report.handlers,
                report.routes,
                if warnings > 0 {
                    format!(", {warnings} warning(s)")
                } else {
                    String::new()
                }
            );
        } else {
            eprintln!(
                "{}: {errors} problem(s), {warnings} warning(s)",
                path.display()
            );
        }
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

async fn demo(path: Option<&Path>, seconds: Option<u64>, rate: f64) -> Result<ExitCode> {
    init_logging(&format!(
        "warn,switchyard=info,switchyard::plugin::logs=off,{QUIET_DEPENDENCIES}"
    ));
    if let Some(path) = path
        && let Err(code) = load_config(path)
    {
        return Ok(code);
    }
    let options = switchyard::demo::Options {
        config: path.map(Path::to_path_buf),
        seconds,
        rate,
    };
    switchyard::demo::run(options, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

async fn record(
    path: &Path,
    out: &Path,
    seconds: Option<u64>,
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
) -> Result<ExitCode> {
    init_logging(&format!("warn,{QUIET_DEPENDENCIES}"));
    let config = match load_config(path) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let kubeconfig = kubeconfig.as_deref().or(config.kubeconfig.as_deref());
    let kube_config = daemon::client::client_config(kubeconfig, context.as_deref()).await?;
    let client = kube::Client::try_from(kube_config).map_err(daemon::Error::Client)?;
    let stop = async move {
        match seconds {
            Some(s) => tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(s)) => {}
                () = shutdown_signal() => {}
            },
            None => shutdown_signal().await,
        }
    };
    let count = switchyard::offline::record(&config, client, out, stop).await?;
    eprintln!("recorded {count} event(s) to {}", out.display());
    Ok(ExitCode::SUCCESS)
}

async fn replay(path: &Path, events: &Path, handler: Option<&str>, json: bool) -> Result<ExitCode> {
    init_logging(&format!(
        "warn,switchyard::plugin::logs=off,{QUIET_DEPENDENCIES}"
    ));
    let config = match load_config_or(path, "nothing was replayed") {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    if let Some(h) = handler
        && config.handlers.iter().all(|spec| spec.name != h)
    {
        report(&format!("{}: no handler {h:?}", path.display()));
        return Ok(ExitCode::from(2));
    }
    let recorded = match switchyard::offline::read_events(events)
        .map_err(|e| e.to_string())
        .and_then(|recorded| {
            switchyard::offline::check_events(&config, &recorded)
                .map(|()| recorded)
                .map_err(|e| format!("{}:{}: {}", events.display(), e.line, e.reason))
        }) {
        Ok(recorded) => recorded,
        Err(e) => {
            report(&e);
            return Ok(ExitCode::from(2));
        }
    };
    let reports = match switchyard::offline::replay(&config, &recorded, handler).await {
        Ok(reports) => reports,
        Err(e) => {
            report(&format!(
                "{}: {}; nothing was replayed",
                path.display(),
                switchyard::util::chain_text(e.as_ref())
            ));
            return Ok(ExitCode::from(2));
        }
    };
    let mut stdout = std::io::stdout().lock();
    for r in &reports {
        if json {
            writeln!(stdout, "{}", serde_json::to_string(r)?)?;
        } else {
            write!(stdout, "{}", switchyard::offline::print::text(r))?;
        }
    }
    let failed = reports
        .iter()
        .filter(|r| {
            use switchyard::offline::ReplayOutcome::{DeadLetter, Error, Retry};
            matches!(r.outcome, Error { .. } | Retry { .. } | DeadLetter { .. })
        })
        .count();
    if failed > 0 {
        report(&format!("{failed} of {} event(s) failed", reports.len()));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// What `switchyard sim` holds: ConfigMaps made at start, and changes kept.
struct SimLoad {
    prefill: usize,
    history: usize,
}

/// Who may reach `switchyard sim`, and how.
struct SimAccess {
    token: Option<String>,
    token_file: Option<PathBuf>,
    tls: bool,
    ca_out: Option<PathBuf>,
    feature_gates: FeatureGates,
}

fn new_plugin(name: &str, lang: switchyard::scaffold::Lang, dir: &Path) -> Result<ExitCode> {
    match switchyard::scaffold::new_plugin(name, lang, dir) {
        Ok(project) => {
            let shown = project.display();
            println!("wrote the {name} plugin project in {shown}; next:\n  cd {shown}");
            let test = match lang {
                switchyard::scaffold::Lang::Rust => "cargo test",
                switchyard::scaffold::Lang::Js => "npm install && npm test",
                switchyard::scaffold::Lang::Python => "python3 -m unittest",
            };
            println!(
                "  {test}\n  switchyard build\n  switchyard replay --config replay.yaml --events events.jsonl"
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            report(&e.to_string());
            Ok(ExitCode::from(2))
        }
    }
}

fn new_from_recipe(
    name: &str,
    recipe: &str,
    lang: Option<switchyard::scaffold::Lang>,
    dir: &Path,
) -> Result<ExitCode> {
    let written = switchyard::scaffold::recipe(recipe).and_then(|recipe| {
        Ok((
            recipe,
            switchyard::scaffold::new_from_recipe(name, recipe, lang, dir)?,
        ))
    });
    match written {
        Ok((recipe, project)) => {
            let shown = project.display();
            println!(
                "wrote the {name} project from the recipe {} in {shown} (see its README.md); next:\n  cd {shown}",
                recipe.name
            );
            if let Some(plugin) = &recipe.plugin {
                let test = match plugin.lang {
                    switchyard::scaffold::Lang::Rust => "cargo test",
                    switchyard::scaffold::Lang::Js => "npm install && npm test",
                    switchyard::scaffold::Lang::Python => "python3 -m unittest",
                };
                println!("  {test}\n  switchyard build");
            }
            println!(
                "  switchyard check --config switchyard.yaml\n  switchyard rbac --config switchyard.yaml"
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            report(&e.to_string());
            Ok(ExitCode::from(2))
        }
    }
}

fn build(dir: &Path, use_cache: bool) -> Result<ExitCode> {
    match switchyard::scaffold::build(dir, use_cache) {
        Ok(built) => {
            if let Some(warning) = &built.cache_warning {
                eprintln!("warning: {warning}");
            }
            let size = std::fs::metadata(&built.path).map(|m| m.len()).unwrap_or(0);
            let kib = size.div_ceil(1024);
            match &built.from_cache {
                Some(cached) => println!(
                    "built {} ({kib} KiB, taken from the build cache, {}: the project is unchanged)",
                    built.path.display(),
                    cached.display()
                ),
                None => println!("built {} ({kib} KiB)", built.path.display()),
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            report(&e.to_string());
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn sim(
    listen: SocketAddr,
    kubeconfig: Option<PathBuf>,
    churn: ChurnConfig,
    config: Option<PathBuf>,
    load: SimLoad,
    access: SimAccess,
) -> Result<ExitCode> {
    init_logging(&format!("info,{QUIET_DEPENDENCIES}"));
    let config = match &config {
        Some(path) => SimConfig::load(path)?,
        None => SimConfig::default(),
    };
    let token = match (&access.token, &access.token_file) {
        (_, Some(path)) => {
            let token = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the token file {}", path.display()))?;
            anyhow::ensure!(
                !token.trim().is_empty(),
                "the token file {} is empty",
                path.display()
            );
            Some(token.trim().to_string())
        }
        (token, None) => token.clone(),
    };
    let options = SimOptions {
        listen,
        config,
        token,
        tls: access.tls,
        sharded_list_and_watch: access.feature_gates.sharded_list_and_watch,
        watch_list: access.feature_gates.watch_list,
        history: load.history,
        ..SimOptions::default()
    };
    let sim = Simulator::start(options)
        .await
        .with_context(|| format!("cannot start the simulator on {listen}"))?;
    prefill_configmaps(&sim, load.prefill, churn.object_size)?;
    println!("simulator: {}", sim.url());
    println!("faults:    {}/_switchyard/faults", sim.url());
    if let (Some(path), Some(pem)) = (&access.ca_out, sim.ca_pem()) {
        std::fs::write(path, pem).with_context(|| format!("cannot write {}", path.display()))?;
        println!("ca:        {}", path.display());
    }
    if let Some(path) = &kubeconfig {
        sim.write_kubeconfig(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("kubeconfig: {}", path.display());
    }
    let churn_task = (churn.rate > 0.0).then(|| sim.start_churn(churn));
    shutdown_signal().await;
    if let Some(task) = churn_task {
        task.abort();
    }
    sim.stop().await;
    Ok(ExitCode::SUCCESS)
}

/// Creates `count` ConfigMaps `prefill-N` in `default` with `size` bytes of data each.
fn prefill_configmaps(sim: &Simulator, count: usize, size: usize) -> Result<()> {
    let cluster = sim.cluster();
    let configmaps = cluster
        .find_resource("", "v1", "configmaps")
        .context("configmaps are served")?;
    let payload = "x".repeat(size);
    for i in 0..count {
        cluster.create(
            configmaps,
            "default",
            json!({"metadata": {"name": format!("prefill-{i}"), "labels": {"app": "prefill"}}, "data": {"payload": payload}}),
        )?;
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}
