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
use clap::{Parser, Subcommand};
use serde_json::json;
use switchyard::check::Severity;
use switchyard::config::{self, Config};
use switchyard::daemon::{self, Daemon};
use switchyard::logging::{self, LogFormat};
use switchyard::rbac;
use switchyard::sim::{ChurnConfig, ChurnKind, FeatureGates, SimConfig, SimOptions, Simulator};

/// What `switchyard new` starts.
#[derive(Subcommand)]
enum New {
    /// Write a standalone handler plugin project into DIR/NAME: the WIT contract (and for
    /// Rust the SDK), a first handler and test, a sample event and a replay config.
    Plugin {
        /// The plugin's name (lower-case letters, digits, '-').
        name: String,
        /// The language.
        #[arg(long, value_enum, default_value_t = switchyard::scaffold::Lang::Rust)]
        lang: switchyard::scaffold::Lang,
        /// The folder to create the project in.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
}

/// Routes Kubernetes changes to WebAssembly handler plugins.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon with a routing config.
    Run {
        /// The routing config (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// Kubeconfig to use, over the config's `kubeconfig`, KUBECONFIG, the pod's service
        /// account and ~/.kube/config.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Context of the kubeconfig to use instead of its current context.
        #[arg(long)]
        context: Option<String>,
        /// Log format: text or json (default: $SWITCHYARD_LOG_FORMAT, else text).
        #[arg(long, value_parser = parse_log_format)]
        log_format: Option<LogFormat>,
        /// Threads that run informers, queues and plugin calls (default:
        /// $SWITCHYARD_THREADS, else 1). More let CPU-bound plugins run on more cores at
        /// once; each event then costs more CPU, in wake-ups between the threads.
        #[arg(long, value_parser = parse_threads)]
        threads: Option<NonZeroUsize>,
    },
    /// Validate a routing config and its plugins; exits 2 listing every problem at once.
    Check {
        /// The routing config (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// Also ask the API server whether every watched resource is served.
        #[arg(long)]
        cluster: bool,
        /// With --cluster: kubeconfig to use (as for `run`).
        #[arg(long, requires = "cluster")]
        kubeconfig: Option<PathBuf>,
        /// With --cluster: context of the kubeconfig.
        #[arg(long, requires = "cluster")]
        context: Option<String>,
        /// Print the report as one JSON object on standard output.
        #[arg(long)]
        json: bool,
    },
    /// Print, as YAML for `kubectl apply -f -`, a ServiceAccount and the least-privilege
    /// (Cluster)Roles and bindings a routing config needs; exits 2 listing the config's
    /// problems.
    Rbac {
        /// The routing config (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// Namespace of the ServiceAccount.
        #[arg(long, default_value = "default", value_parser = dns_label)]
        namespace: String,
        /// Name of the ServiceAccount, (Cluster)Roles and bindings.
        #[arg(long, default_value = "switchyard", value_parser = dns_label)]
        name: String,
    },
    /// Run the daemon against the built-in simulator with steady churn, printing what the
    /// handlers log.
    Demo {
        /// The routing config to run (default: the demo's own, built into the binary, with
        /// its plugins built on first use).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Stop after this many seconds (default: run until Ctrl-C).
        #[arg(long)]
        seconds: Option<u64>,
        /// Changes per second the churn makes.
        #[arg(long, default_value_t = 2.0)]
        rate: f64,
    },
    /// Run the config's informers and routes against the cluster, writing each event a
    /// route delivers to a file (one JSON line each) instead of calling plugins.
    Record {
        /// The routing config (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// The events file to write.
        #[arg(long)]
        out: PathBuf,
        /// Stop after this many seconds (default: run until Ctrl-C).
        #[arg(long)]
        seconds: Option<u64>,
        /// Kubeconfig to use (as for `run`).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Context of the kubeconfig.
        #[arg(long)]
        context: Option<String>,
    },
    /// Call the handlers' plugins on recorded events, without an API server: writes are
    /// captured and shown, never sent. Exits 1 if any event errors, 2 for a bad config or
    /// events file.
    Replay {
        /// The routing config (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// The events file, as `record` writes it.
        #[arg(long)]
        events: PathBuf,
        /// Replay only the events of this handler.
        #[arg(long)]
        handler: Option<String>,
        /// Print one JSON object per event.
        #[arg(long)]
        json: bool,
    },
    /// Start a project.
    New {
        #[command(subcommand)]
        what: New,
    },
    /// Build the plugin project in DIR (default: here) into DIR/NAME.wasm with the
    /// language's own tool. A JavaScript or Python project unchanged since a build is
    /// copied from the build cache (~/.cache/switchyard/builds) instead.
    Build {
        /// The project folder.
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Build even when the build cache has the component.
        #[arg(long)]
        no_cache: bool,
    },
    /// Upload a built plugin component to an OCI registry as a wasm artifact
    /// (credentials as for pulls: SWITCHYARD_REGISTRY_AUTH or the docker config).
    Push {
        /// The component (NAME.wasm).
        file: PathBuf,
        /// Where: oci://HOST/REPOSITORY:TAG.
        reference: String,
        /// A PEM file of certificate authorities trusted for the registry besides the
        /// public roots (a registry signed by its own CA; HTTPS even on loopback).
        #[arg(long)]
        ca_file: Option<PathBuf>,
    },
    /// Run the Kubernetes API simulator on its own.
    Sim {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Write a kubeconfig for the simulator here.
        #[arg(long)]
        kubeconfig_out: Option<PathBuf>,
        /// Churn: changes per second to objects in `default` (0 for none).
        #[arg(long, default_value_t = 0.0)]
        churn_rate: f64,
        /// Churn: how many objects of each kind to keep alive.
        #[arg(long, default_value_t = 50)]
        churn_objects: usize,
        /// Churn: bytes of payload per object.
        #[arg(long, default_value_t = 256)]
        churn_size: usize,
        /// Churn: the kinds to change, comma-separated: configmaps, pods.
        #[arg(long, value_delimiter = ',', default_value = "configmaps")]
        churn_kinds: Vec<ChurnKind>,
        /// Create this many ConfigMaps (`prefill-N` in `default`, `--churn-size` bytes of
        /// data each) before serving, for load and memory tests.
        #[arg(long, default_value_t = 0)]
        prefill: usize,
        /// How many changes the simulator keeps for watches to resume from and continue
        /// tokens to page through; older ones answer 410 Expired (etcd's compaction).
        #[arg(long, default_value_t = switchyard::sim::cluster::DEFAULT_HISTORY,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        history: usize,
        /// Simulator config (YAML): custom resources (CRDs) and objects to start with.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Answer 401 to every request without `Authorization: Bearer TOKEN`.
        #[arg(long, conflicts_with = "token_file")]
        token: Option<String>,
        /// Like --token, the token read from this file.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Serve HTTPS with a certificate authority made at start; the kubeconfig written
        /// with --kubeconfig-out trusts it, --ca-out writes it on its own.
        #[arg(long)]
        tls: bool,
        /// Write the CA certificate (PEM) here, for clients such as a service account's
        /// `ca.crt`; needs --tls.
        #[arg(long, requires = "tls")]
        ca_out: Option<PathBuf>,
        /// Kubernetes feature gates to play, as `NAME=true,...`: `ShardedListAndWatch=true`
        /// honours `shardSelector` on lists and watches (off, it is ignored as an older
        /// API server does).
        #[arg(long, value_parser = FeatureGates::parse, default_value = "")]
        feature_gates: FeatureGates,
    },
}

fn parse_log_format(text: &str) -> Result<LogFormat, String> {
    text.parse()
        .map_err(|e: switchyard::logging::UnknownFormat| e.to_string())
}

/// The variable `run --threads` defaults to.
const THREADS_VAR: &str = "SWITCHYARD_THREADS";

fn parse_threads(text: &str) -> Result<NonZeroUsize, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of threads (1 or more)"))
}

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
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
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
            } => {
                let cluster = cluster.then_some((kubeconfig, context));
                check(&config, cluster, json).await
            }
            Command::Rbac {
                config,
                namespace,
                name,
            } => rbac(&config, namespace, name),
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
                what: New::Plugin { name, lang, dir },
            } => new_plugin(&name, lang, &dir),
            Command::Build { dir, no_cache } => build(&dir, !no_cache),
            Command::Push {
                file,
                reference,
                ca_file,
            } => match switchyard::plugin::oci::push(&file, &reference, ca_file.as_deref()).await {
                Ok(pinned) => {
                    println!("pushed {pinned}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    report(&e);
                    Ok(ExitCode::FAILURE)
                }
            },
            Command::Sim {
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
            } => {
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
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            report(&format!("{e:#}"));
            ExitCode::FAILURE
        }
    }
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

const QUIET_DEPENDENCIES: &str = "cranelift=warn,wasmtime=warn,hyper=warn,kube=warn,tower=warn";

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

/// A DNS label, as Kubernetes names namespaces and ServiceAccounts.
fn dns_label(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= 63
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    if valid {
        Ok(text.to_string())
    } else {
        Err("expected a DNS label: at most 63 lower case letters, digits and '-', starting and ending with a letter or digit".into())
    }
}

fn rbac(path: &Path, namespace: String, name: String) -> Result<ExitCode> {
    let config = match load_config_or(path, "nothing was printed") {
        Ok(c) => c,
        Err(code) => return Ok(code),
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
    let report = switchyard::check::check(path, client).await?;
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
    let reports = switchyard::offline::replay(&config, &recorded, handler).await?;
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
        .filter(|r| matches!(r.outcome, switchyard::offline::ReplayOutcome::Error { .. }))
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
