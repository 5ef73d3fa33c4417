//! The command line: every command and flag `switchyard` takes, and how their values are
//! read.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use switchyard::logging::LogFormat;
use switchyard::sim::{ChurnKind, FeatureGates};

/// What `switchyard new` starts.
#[derive(Subcommand)]
pub(crate) enum New {
    /// Write a standalone handler plugin project into DIR/NAME: the WIT contract (and for
    /// Rust the SDK), a first handler and test, a sample event and a replay config; or,
    /// with --from-recipe, a recipe's plugin and tests, config fragment and README.
    Plugin {
        /// The plugin's name (lower-case letters, digits, '-').
        name: String,
        /// The language [default: rust, or the recipe's].
        #[arg(long, value_enum)]
        lang: Option<switchyard::scaffold::Lang>,
        /// The folder to create the project in.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Start from this recipe (plugins/recipes in the repository; an unknown name lists
        /// them).
        #[arg(long, value_name = "RECIPE")]
        from_recipe: Option<String>,
    },
}

/// Routes Kubernetes changes to WebAssembly handler plugins.
#[derive(Parser)]
#[command(version, about)]
pub(crate) struct Cli {
    /// The command.
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
        /// Look for the plugins in this folder instead of the config's `plugins_dir` (a
        /// config written for a cluster, checked against a local build).
        #[arg(long)]
        plugins_dir: Option<PathBuf>,
    },
    /// Print, as YAML for `kubectl apply -f -`, a ServiceAccount and the least-privilege
    /// (Cluster)Roles and bindings a routing config needs; exits 2 listing the config's
    /// problems.
    Rbac {
        /// The routing config (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// Namespace of the ServiceAccount (and of the Leases, unless the config names
        /// one). Default: the daemon's namespace, as `run` finds it: `POD_NAMESPACE`, else
        /// the pod's service account namespace, else the kubeconfig context's, else
        /// `default`.
        #[arg(long, value_parser = dns_label)]
        namespace: Option<String>,
        /// Name of the ServiceAccount, (Cluster)Roles and bindings.
        #[arg(long, default_value = "switchyard", value_parser = dns_label)]
        name: String,
        /// Kubeconfig whose context's namespace is the default namespace (as for `run`).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Context of the kubeconfig.
        #[arg(long)]
        context: Option<String>,
        /// Print the rules as values of the Helm chart (`helm install -f`) instead: the
        /// chart makes the ServiceAccount, roles and bindings, and the Lease rules of its
        /// `mode`.
        #[arg(long, conflicts_with_all = ["namespace", "kubeconfig", "context"])]
        helm_values: bool,
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
    /// captured and shown, never sent. Exits 1 if any event errors, 2 for a bad config,
    /// events file or plugin file.
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
    /// Print the JSON Schema of a routing config (what editors and the Helm chart's
    /// values.schema.json check a config against).
    Schema,
    /// Print the CustomResourceDefinitions of the team-owned `Route` and `Handler` resources
    /// (switchyard.dev/v1alpha1), as the Helm chart's `crds/` folder holds them.
    Crds,
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
        /// API server does); `WatchList=false` refuses streaming lists (on by default).
        #[arg(long, value_parser = FeatureGates::parse, default_value = "")]
        feature_gates: FeatureGates,
    },
}

/// A `--log-format` value: `text` or `json`.
fn parse_log_format(text: &str) -> Result<LogFormat, String> {
    text.parse()
        .map_err(|e: switchyard::logging::UnknownFormat| e.to_string())
}

/// The variable `run --threads` defaults to.
pub(crate) const THREADS_VAR: &str = "SWITCHYARD_THREADS";

/// A number of threads, 1 or more.
pub(crate) fn parse_threads(text: &str) -> Result<NonZeroUsize, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of threads (1 or more)"))
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
