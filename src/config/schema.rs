//! The YAML schema of a switchyard config file, as serde types. Every struct rejects unknown
//! fields; defaults are the ones the config reference (docs/configuration.md) states. Each informer,
//! handler and route is read on its own (see `validate`), so the top level keeps them as
//! plain values; where a value is in the file comes from [`super::document::Document`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, de};

use super::limits;
use super::units::{ByteSize, HumanDuration};

/// The whole config file: its sections, the items of `informers`, `handlers` and `routes`
/// still unread.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Path of a kubeconfig; when absent, the usual inference (KUBECONFIG, ~/.kube/config,
    /// in-cluster) applies.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Folder holding the plugins (`NAME.wasm`), relative to the config file. Default `plugins`.
    #[serde(default)]
    pub plugins_dir: Option<PathBuf>,
    /// Folder of the durable state store; none keeps no state across restarts.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// What to do when the state store cannot be read: `refuse` (default) or `fresh`.
    #[serde(default)]
    pub state_on_corrupt: Option<OnCorrupt>,
    /// How many changes the state store's writer may hold uncommitted before the informers
    /// wait for it. Default [`DEFAULT_STATE_MAX_PENDING_WRITES`].
    #[serde(default)]
    pub state_max_pending_writes: Option<u64>,
    /// How the plugin pool's slots are made ready for the next instance: `auto` (default),
    /// `resident` or `decommit` ([`PluginSlots`]).
    #[serde(default)]
    pub plugin_slots: Option<PluginSlots>,
    /// The admin API.
    #[serde(default)]
    #[schemars(with = "Option<AdminFile>")]
    pub admin: Option<serde_json::Value>,
    /// Several replicas ([`HaFile`]).
    #[serde(default)]
    #[schemars(with = "Option<HaFile>")]
    pub ha: Option<serde_json::Value>,
    /// Pulling plugins from OCI registries ([`OciFile`]).
    #[serde(default)]
    #[schemars(with = "Option<OciFile>")]
    pub oci: Option<serde_json::Value>,
    /// Traces of each event, exported over OTLP/HTTP ([`TracingFile`]); off without an
    /// `otlp_endpoint`.
    #[serde(default)]
    #[schemars(with = "Option<TracingFile>")]
    pub tracing: Option<serde_json::Value>,
    /// Team-owned `Route` and `Handler` resources ([`TenancyFile`]): read from the cluster
    /// when the section is there, within its bounds.
    #[serde(default)]
    #[schemars(with = "Option<TenancyFile>")]
    pub tenancy: Option<serde_json::Value>,
    /// Shared watches by name ([`InformerFile`]), for routes to name with `informer:` or
    /// `kinds:`.
    #[serde(default)]
    #[schemars(with = "Option<BTreeMap<String, InformerFile>>")]
    pub informers: Option<BTreeMap<String, serde_json::Value>>,
    /// Handlers by name ([`HandlerFile`]).
    #[serde(default)]
    #[schemars(with = "Option<BTreeMap<String, HandlerFile>>")]
    pub handlers: Option<BTreeMap<String, serde_json::Value>>,
    /// Routes, in order ([`RouteFile`]).
    #[serde(default)]
    #[schemars(with = "Option<Vec<RouteFile>>")]
    pub routes: Option<Vec<serde_json::Value>>,
}

/// `state_max_pending_writes:` when not set: a few group commits' worth, a few MiB.
pub const DEFAULT_STATE_MAX_PENDING_WRITES: u64 = 10_000;

/// `state_on_corrupt:` — what a daemon does with a state store it cannot read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnCorrupt {
    /// Refuse to start, naming the file and what is wrong with it.
    #[default]
    Refuse,
    /// Move the unreadable file aside and start with no state, warning loudly.
    Fresh,
}

/// `plugin_slots:` — how a pool slot is made ready for the next plugin instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PluginSlots {
    /// Kept resident and reset in place where a probe at start shows the kernel's page
    /// scan exact and the process unable to swap; decommitted otherwise.
    #[default]
    Auto,
    /// Kept resident and reset in place, whatever the probe says.
    Resident,
    /// Given back to the kernel after each instance, whatever the probe says.
    Decommit,
}

/// A handler's `instance:` — how many events one plugin instance sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceMode {
    /// A fresh instance for every event: nothing one event leaves in memory reaches the
    /// next.
    #[default]
    PerEvent,
    /// Each worker keeps its instance across events, until a call fails or the plugin, its
    /// settings or the handler's caches change: faster, with the isolation that gives up
    /// spelled out in docs/plugins.md (Instances).
    Reuse,
}

/// `admin:` — where the admin API and the probes listen, who may call them, and how many
/// connections they keep.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminFile {
    /// Address and port; default `127.0.0.1:9470`.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// File holding the bearer token for the admin API.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Environment variable holding the bearer token for the admin API.
    #[serde(default)]
    pub token_env: Option<String>,
    /// Address of the probes and metrics listener; default `127.0.0.1:9471`, `null` for
    /// none. Outer `None`: not written; `Some(None)`: written as `null`.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<SocketAddr>")]
    pub probes_listen: Option<Option<SocketAddr>>,
    /// Host names (`name` for any port, `name:port` for one) the admin API answers besides
    /// its own address and loopback's; `*` for any.
    #[serde(default)]
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a connection to either listener gets to send a request's headers, from its
    /// opening or the end of its last answer; default `10s`.
    #[serde(default)]
    pub header_read_timeout: Option<HumanDuration>,
    /// Most connections the admin API keeps open at once; default 128.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Most connections the probes listener keeps open at once; default 256.
    #[serde(default)]
    pub probes_max_connections: Option<usize>,
}

/// `ha:` — how several replicas share the work.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HaFile {
    /// `single`, `leader` or `sharded`; default `single`.
    #[serde(default)]
    pub mode: Option<HaModeFile>,
    /// Namespace of the Lease; default the pod's namespace, else `default`.
    #[serde(default)]
    pub lease_namespace: Option<String>,
    /// Name of the Lease; default `switchyard`.
    #[serde(default)]
    pub lease_name: Option<String>,
    /// How long a lease holds without renewal; default `15s`.
    #[serde(default)]
    pub lease_duration: Option<HumanDuration>,
    /// How long a leader keeps trying to renew before it steps down; default `10s`.
    #[serde(default)]
    pub renew_deadline: Option<HumanDuration>,
    /// Time between attempts to acquire or renew; default `2s`.
    #[serde(default)]
    pub retry_period: Option<HumanDuration>,
    /// This replica's name in the Lease; default `POD_NAME`, else the host name and a
    /// random suffix.
    #[serde(default)]
    pub identity: Option<String>,
}

/// `tenancy:` — the `Route` and `Handler` resources (switchyard.dev/v1alpha1) teams create
/// in their namespaces, and the bounds the daemon holds them to.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenancyFile {
    /// Label selector on Namespaces (`switchyard.dev/tenant=true`): only resources in the
    /// namespaces it matches are read. Default: every namespace.
    #[serde(default)]
    pub namespaces: Option<String>,
    /// Resources team Routes may watch (`configmaps`, `apps/v1/deployments`), in their own
    /// namespace: the daemon reads them in every namespace (`switchyard rbac` grants it).
    /// Default: none.
    #[serde(default)]
    pub resources: Option<Vec<String>>,
    /// OCI repositories (`registry.example.com/team-plugins`) a Handler's `oci://` plugin may
    /// come from by tag; from anywhere else it must be pinned by digest (`@sha256:`).
    #[serde(default)]
    pub registries: Option<Vec<String>>,
    /// The destinations (as in `capabilities.http`) a Handler's `capabilities.http` entries
    /// must lie within. Default: none, no outbound HTTP.
    #[serde(default)]
    pub http: Option<Vec<String>>,
    /// Whether Handlers may run the built-in sinks (`builtin:NAME`). Default `true`.
    #[serde(default)]
    pub builtin: Option<bool>,
    /// Handlers one namespace may have. Default 10.
    #[serde(default)]
    pub max_handlers_per_namespace: Option<usize>,
    /// Team Handlers in all. Default 50: the plugin pool is sized at start for this many at
    /// `max_concurrency` and `max_memory`.
    #[serde(default)]
    pub max_handlers: Option<usize>,
    /// The most a Handler's `memory` may be. Default `64Mi`.
    #[serde(default)]
    pub max_memory: Option<ByteSize>,
    /// The most a Handler's `timeout` may be. Default `30s`.
    #[serde(default)]
    pub max_timeout: Option<HumanDuration>,
    /// The most a Handler's `concurrency` may be. Default 4.
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    /// The most a Handler's `qps` may be (and a Handler without a bucket gets this one).
    /// Default 10.
    #[serde(default)]
    pub max_qps: Option<f64>,
}

/// `tracing:` — a trace per event (received, routed, queued, the plugin call and what it
/// wrote or sent), exported to an OpenTelemetry collector over OTLP/HTTP.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TracingFile {
    /// The collector's OTLP/HTTP address (`http://collector:4318`): spans are sent to
    /// `/v1/traces` under it. Traces are off without it.
    #[serde(default)]
    #[schemars(pattern(r"^https?://"))]
    pub otlp_endpoint: Option<String>,
    /// The share of events traced, from 0 to 1; default 1. A trace continued from a sampled
    /// parent is kept whatever the ratio.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1))]
    pub sample_ratio: Option<f64>,
    /// `service.name` of the spans; default `switchyard`.
    #[serde(default)]
    pub service_name: Option<String>,
    /// Headers sent with every export (a collector's API key, say).
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
}

/// `oci:` — how plugins named `oci://...` are pulled from registries.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OciFile {
    /// How long connecting to a registry may take; default `10s`.
    #[serde(default)]
    pub connect_timeout: Option<HumanDuration>,
    /// How long one whole pull (token, manifest, component) may take; default `60s`.
    #[serde(default)]
    pub timeout: Option<HumanDuration>,
    /// The largest component (the artifact's one layer) pulled; default `64Mi`.
    #[serde(default)]
    pub max_layer_size: Option<ByteSize>,
    /// Registries (`host` or `host:port`) spoken to over plain HTTP although they are not
    /// this machine; credentials are never sent to them. Default none.
    #[serde(default)]
    pub insecure_registries: Option<Vec<String>>,
    /// Where pulled manifests and components are cached, relative to the config file;
    /// default `.oci` in the plugins folder.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Settings of single registries, by `host` or `host:port` as references write them
    /// ([`OciRegistryFile`]).
    #[serde(default)]
    #[schemars(with = "Option<BTreeMap<String, OciRegistryFile>>")]
    pub registries: Option<BTreeMap<String, serde_json::Value>>,
}

/// `oci.registries.HOST:` — how one registry is spoken to.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OciRegistryFile {
    /// A PEM file of certificate authorities trusted for this registry (and its token
    /// service), besides the public roots; relative to the config file.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

/// The values of `ha.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HaModeFile {
    /// One replica, no election.
    Single,
    /// Several replicas; the one holding the Lease handles events.
    Leader,
    /// Several replicas, each handling its share of the objects.
    Sharded,
}

/// Reads a field that may be `null` as `Some(None)`, so that an absent field (left `None`
/// by `#[serde(default)]`) and one set to `null` differ.
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// `handlers.NAME:` — a plugin and how it is run.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandlerFile {
    /// Plugin name: the file `NAME.wasm` in the plugins folder. Default: the handler's name.
    #[serde(default)]
    pub plugin: Option<String>,
    /// A second plugin (a name in the plugins folder, or an `oci://` reference) that gets
    /// every event the handler's plugin handles, with the same config, capabilities and
    /// limits, whose writes are recorded and never sent, compared with the plugin's.
    /// Default: none.
    #[serde(default)]
    pub shadow: Option<String>,
    /// Workers calling the plugin at once, 1 to [`limits::MAX_WORKERS`]. Default 2.
    #[serde(default, deserialize_with = "concurrency")]
    #[schemars(with = "Option<usize>", range(min = 1, max = limits::MAX_WORKERS))]
    pub concurrency: Option<usize>,
    /// Deadline for one call, longer than 0 and at most [`limits::MAX_TIMEOUT`]. Default `5s`.
    #[serde(default, deserialize_with = "timeout")]
    #[schemars(with = "Option<HumanDuration>")]
    pub timeout: Option<HumanDuration>,
    /// Memory cap for one plugin instance, [`limits::MIN_MEMORY`] to
    /// [`limits::MAX_MEMORY`]. Default `64Mi`.
    #[serde(default, deserialize_with = "memory")]
    #[schemars(with = "Option<ByteSize>")]
    pub memory: Option<ByteSize>,
    /// The longest plugin log line kept, at least [`limits::MIN_LOG_LINE`] bytes; a longer
    /// line is cut there, with a marker saying how much was cut. Default `16Ki`.
    #[serde(default, deserialize_with = "log_line_max")]
    #[schemars(with = "Option<ByteSize>")]
    pub log_line_max: Option<ByteSize>,
    /// Bytes one call may log in all (lines counted as kept); the call's later lines are
    /// dropped, and one line says how many. Default `256Ki`.
    #[serde(default)]
    pub log_call_max: Option<ByteSize>,
    /// Lines one call may log; the call's later lines are dropped, and one line says how
    /// many. Default 1000.
    #[serde(default)]
    pub log_call_lines: Option<u32>,
    /// Retries after a failure before the event is dropped. Default 5.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// First retry delay; doubles per failure. Default `100ms`.
    #[serde(default)]
    pub backoff_base: Option<HumanDuration>,
    /// Longest retry delay. Default `30s`.
    #[serde(default)]
    pub backoff_cap: Option<HumanDuration>,
    /// Retries and requeues per second across the handler's keys (token bucket); 0 for no bucket.
    /// Default 10.
    #[serde(default, deserialize_with = "qps")]
    #[schemars(with = "Option<f64>", range(min = 0))]
    pub qps: Option<f64>,
    /// Retries and requeues that may go at once before `qps` applies. Default 100.
    #[serde(default)]
    pub burst: Option<u32>,
    /// Deliver a `sync` event for every cached object this often (`10m`). Default: never.
    #[serde(default)]
    pub resync: Option<HumanDuration>,
    /// Failed calls in a row (errors, traps, timeouts; on at least two objects) within
    /// `quarantine_window` that quarantine the handler; 0 never does. Default 10.
    #[serde(default)]
    pub quarantine_after: Option<u32>,
    /// The window those failures must fall in. Default `1m`.
    #[serde(default)]
    pub quarantine_window: Option<HumanDuration>,
    /// First wait before a quarantined handler's plugin is tried again; doubles per failed
    /// try, up to 10 minutes. Default `30s`.
    #[serde(default)]
    pub quarantine_backoff: Option<HumanDuration>,
    /// A fresh plugin instance per event (`per-event`, the default) or one kept by each
    /// worker across its events (`reuse`).
    #[serde(default)]
    pub instance: Option<InstanceMode>,
    /// Hand the plugin several events at once, through its `handle-batch` (a plugin of the
    /// `handler-batch` world). Default: one event per call, through `handle`.
    #[serde(default)]
    pub batch: Option<BatchFile>,
    /// Free-form settings passed to the plugin's `init` as JSON.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// Kubernetes writes the plugin may make, per resource, and under `http` the
    /// destinations it may send HTTP requests to. Default: none.
    #[serde(default)]
    pub capabilities: Option<super::capabilities::CapabilitiesFile>,
    /// Informers (names under `informers:`) whose caches the plugin may read, and write
    /// where `capabilities` grant it, without any route delivering their changes.
    #[serde(default)]
    pub reads: Option<Vec<String>>,
    /// How the plugin's outbound HTTP requests are made (body caps, address rules, TLS).
    #[serde(default)]
    pub outbound: Option<OutboundFile>,
}

/// `handlers.NAME.batch:` — how events are gathered into one `handle-batch` call. A worker
/// takes the events of up to `max_events` objects (at most one event per object), stopping
/// early at `max_bytes` of event JSON or when `max_wait` has passed since its first.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchFile {
    /// The most events in one call, 1 to 10000. Default 100.
    #[serde(default)]
    pub max_events: Option<usize>,
    /// The most bytes of event JSON in one call (a larger single event goes alone).
    /// Default `1Mi`.
    #[serde(default)]
    pub max_bytes: Option<ByteSize>,
    /// How long a worker holding an event waits for more before calling, at most `1m`.
    /// Default `200ms`.
    #[serde(default)]
    pub max_wait: Option<HumanDuration>,
}

/// `handlers.NAME.outbound:` — how the plugin's HTTP requests are made. Where they may go
/// is `capabilities.http`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutboundFile {
    /// Refuse private addresses (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) after
    /// DNS resolution too, unless an entry names them. Default false.
    #[serde(default)]
    pub refuse_private: Option<bool>,
    /// The largest request body a plugin may send. Default `1Mi`.
    #[serde(default)]
    pub max_request_body: Option<ByteSize>,
    /// The largest response body a plugin may read; past it the read fails. Default `1Mi`.
    #[serde(default)]
    pub max_response_body: Option<ByteSize>,
    /// A PEM file of CA certificates trusted besides the system's roots.
    #[serde(default)]
    pub ca_bundle: Option<String>,
    /// A PEM client certificate (chain) presented to servers that ask, with `client_key`.
    #[serde(default)]
    pub client_cert: Option<String>,
    /// The PEM private key of `client_cert`.
    #[serde(default)]
    pub client_key: Option<String>,
    /// The status a shadow run's or replay's requests are answered with (they are recorded,
    /// never sent). Default 200.
    #[serde(default)]
    pub capture_status: Option<u16>,
    /// The most requests the handler's calls may have in flight at once; past it a request
    /// is refused. Default 32.
    #[serde(default)]
    pub max_in_flight: Option<u32>,
}

/// Reads an optional value and holds it to `check`, so a value out of bounds is reported
/// where it is, with every other mistake of its mapping.
fn bounded<'de, D, T, E>(
    deserializer: D,
    check: impl FnOnce(T) -> Result<T, E>,
) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
    E: std::fmt::Display,
{
    Option::<T>::deserialize(deserializer)?
        .map(check)
        .transpose()
        .map_err(de::Error::custom)
}

fn concurrency<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    bounded(d, limits::check_concurrency)
}

fn timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<HumanDuration>, D::Error> {
    bounded(d, |t: HumanDuration| {
        limits::check_timeout(t.0).map(HumanDuration)
    })
}

fn memory<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ByteSize>, D::Error> {
    bounded(d, |m: ByteSize| limits::check_memory(m.0).map(ByteSize))
}

fn log_line_max<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ByteSize>, D::Error> {
    bounded(d, |m: ByteSize| limits::check_log_line(m.0).map(ByteSize))
}

fn qps<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    bounded(d, limits::check_qps)
}

/// `informers.NAME:` — one resource watched and cached, shared by the routes that name it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InformerFile {
    /// The resource by plural name: `configmaps`, `v1/pods`, `apps/v1/deployments`. Or set
    /// `group`, `version` and `kind` instead.
    #[serde(default)]
    pub resource: Option<String>,
    /// API group of `kind`; empty or absent for the core group.
    #[serde(default)]
    pub group: Option<String>,
    /// API version of `kind`.
    #[serde(default)]
    pub version: Option<String>,
    /// The resource by kind (`Deployment`), with `group` and `version`.
    #[serde(default)]
    pub kind: Option<String>,
    /// Only these namespaces (one watch each); default all namespaces.
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
    /// Label selector of the watch (`app=web,tier!=db`).
    #[serde(default)]
    pub labels: Option<String>,
    /// Field selector of the watch (`spec.nodeName=n1`).
    #[serde(default)]
    pub fields: Option<String>,
    /// What is dropped from objects before caching.
    #[serde(default)]
    pub transform: Option<TransformFile>,
    /// Cache indexes by name: a field path (`spec.nodeName`, `spec.volumes[].configMap.name`)
    /// or `label:KEY`, or a list of them.
    #[serde(default)]
    pub indexes: Option<BTreeMap<String, IndexFile>>,
    /// With `ha.mode: sharded`, the field objects are placed by: `uid` (default) or
    /// `namespace`.
    #[serde(default)]
    pub shard_by: Option<ShardByFile>,
}

/// The values of `informers.NAME.shard_by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ShardByFile {
    /// `metadata.uid`.
    Uid,
    /// `metadata.namespace`.
    Namespace,
}

/// `informers.NAME.transform:` — what is dropped from objects before caching.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransformFile {
    /// Keep `metadata.managedFields` (dropped by default).
    #[serde(default)]
    pub keep_managed_fields: Option<bool>,
    /// JSON pointers dropped from every object (`/metadata/annotations/big`).
    #[serde(default)]
    pub drop_fields: Option<Vec<String>>,
}

/// `routes[i].when[j]:` — a condition on the object's fields; `path` and one test.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConditionFile {
    /// A dotted field path (`spec.replicas`, `metadata.labels.app`) or a JSON pointer
    /// (`/metadata/labels/app.kubernetes.io~1name`); or a list of them, of which the first
    /// that has a value is tested (`[lastTimestamp, eventTime]`).
    pub path: PathsFile,
    /// The value at `path` equals this.
    #[serde(default)]
    pub equals: Option<serde_json::Value>,
    /// `true`: the path has a value; `false`: it has none.
    #[serde(default)]
    pub exists: Option<bool>,
    /// `true`: an update changed the value at `path`; `false`: it did not.
    #[serde(default)]
    pub changed: Option<bool>,
    /// The value is a timestamp (RFC 3339) less than this long before now (`10m`).
    #[serde(default)]
    pub newer_than: Option<HumanDuration>,
    /// The value is a timestamp (RFC 3339) more than this long before now (`24h`).
    #[serde(default)]
    pub older_than: Option<HumanDuration>,
}

/// `routes[i].when[j].path:` — one field path, or a list of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathsFile(pub Vec<String>);

impl<'de> Deserialize<'de> for PathsFile {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = PathsFile;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a field path such as spec.replicas, or a list of them")
            }
            fn visit_str<E: serde::de::Error>(self, path: &str) -> Result<Self::Value, E> {
                Ok(PathsFile(vec![path.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut paths = Vec::new();
                while let Some(path) = seq.next_element::<String>()? {
                    paths.push(path);
                }
                // An empty list is refused by validation, which knows whether an item was
                // left out for being unreadable.
                Ok(PathsFile(paths))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `routes[i].initial:` — what a route does with the objects its informers list at its
/// start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InitialFile {
    /// Deliver them as `added` (the default).
    #[default]
    Deliver,
    /// Deliver only changes after the list: the objects listed are not delivered.
    Skip,
}

/// `routes[i]:` — which changes go to which handler.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteFile {
    /// Route name, unique; shown to the plugin and in logs.
    pub name: String,
    /// Where the changes come from, one of three: `informer` (a name under `informers:`),
    /// `kinds` (every informer of these kinds), or `resource` (the route's own watch of
    /// `configmaps`, `v1/pods`, `apps/v1/deployments`).
    #[serde(default)]
    pub informer: Option<String>,
    /// Every informer of these kinds (`[Pod, Deployment]`).
    #[serde(default)]
    pub kinds: Option<Vec<String>>,
    /// The route's own watch of this resource.
    #[serde(default)]
    pub resource: Option<String>,
    /// Only objects in this namespace; default all namespaces.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Only objects in these namespaces; default all namespaces.
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
    /// Only objects whose labels match this selector (`app=web,tier!=db`).
    #[serde(default)]
    pub labels: Option<String>,
    /// Only objects whose fields match this selector (`metadata.name=x`).
    #[serde(default)]
    pub fields: Option<String>,
    /// Only these kinds of change; default all.
    #[serde(default)]
    pub events: Option<Vec<EventKindFile>>,
    /// Only changes whose object meets every condition.
    #[serde(default)]
    pub when: Option<Vec<ConditionFile>>,
    /// `deliver` (default) or `skip`: the objects its informers list when the route starts.
    #[serde(default)]
    pub initial: Option<InitialFile>,
    /// With `resource`: cache indexes by name, as in `informers`.
    #[serde(default)]
    pub indexes: Option<BTreeMap<String, IndexFile>>,
    /// With `resource`: keep `metadata.managedFields` in the cache (dropped by default).
    #[serde(default)]
    pub keep_managed_fields: Option<bool>,
    /// With `resource`: JSON pointers dropped from objects before caching.
    #[serde(default)]
    pub drop_fields: Option<Vec<String>>,
    /// `latest` (default: coalesce per object) or `every` (each change, in order).
    #[serde(default)]
    pub delivery: Option<DeliveryFile>,
    /// For `every`: events kept per object before the oldest two are coalesced. Default 100.
    #[serde(default)]
    pub backlog: Option<usize>,
    /// `true` (the finalizer `switchyard.dev/ROUTE`) or a finalizer's name: the route puts
    /// it on each object it delivers and removes it once the handler has handled the
    /// object's deletion.
    #[serde(default)]
    pub finalizer: Option<FinalizerFile>,
    /// The handler that gets the changes.
    pub handler: String,
}

/// `routes[i].finalizer:` — on or off, or the finalizer's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalizerFile {
    /// `true`: the finalizer `switchyard.dev/ROUTE`; `false`: none.
    On(bool),
    /// The finalizer's name (`example.com/cleanup`).
    Named(String),
}

impl<'de> Deserialize<'de> for FinalizerFile {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = FinalizerFile;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false or a finalizer name such as example.com/cleanup")
            }
            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<Self::Value, E> {
                Ok(FinalizerFile::On(on))
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Self::Value, E> {
                Ok(FinalizerFile::Named(name.to_string()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// One cache index: where its values come from, one source or several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFile(pub Vec<String>);

impl<'de> Deserialize<'de> for IndexFile {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = IndexFile;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a field path such as spec.nodeName, label:KEY, or a list of them")
            }
            fn visit_str<E: serde::de::Error>(self, source: &str) -> Result<Self::Value, E> {
                Ok(IndexFile(vec![source.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut sources = Vec::new();
                while let Some(source) = seq.next_element::<String>()? {
                    sources.push(source);
                }
                Ok(IndexFile(sources))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// How a route delivers changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryFile {
    /// Coalesce per object: the newest state and the kind of change since queued.
    Latest,
    /// Every change, in order per object.
    Every,
}

/// A kind of change a route can select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventKindFile {
    /// Objects that appeared.
    Added,
    /// Objects that changed.
    Updated,
    /// Objects that went away.
    Deleted,
}

impl JsonSchema for FinalizerFile {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "FinalizerFile".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "true, false or a finalizer name such as example.com/cleanup",
            "type": ["boolean", "string"],
        })
    }
}

impl JsonSchema for PathsFile {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PathsFile".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "a field path such as spec.replicas, or a list of them (the first with a value is tested)",
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ],
        })
    }
}

impl JsonSchema for IndexFile {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "IndexFile".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "a field path such as spec.nodeName, label:KEY, or a list of them",
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}},
            ],
        })
    }
}

/// The JSON Schema (draft 7) of a config file, every part inline: the same serde types
/// [`ConfigFile`] reads with, so a field unknown to them or a value of the wrong type or
/// out of the bounds they check is refused by both. Cross-references (a route naming a
/// handler that does not exist) are past what a schema says: `switchyard check` has them.
pub fn json_schema() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft07()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<ConfigFile>().to_value();
    if let Some(object) = schema.as_object_mut() {
        object.insert("title".into(), "switchyard config".into());
    }
    schema
}
