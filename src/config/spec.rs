//! A validated config: the runtime values validation builds from the YAML schema, with every
//! default filled in. Every stage reads these; none of them is read from YAML directly.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{Capabilities, FieldPath, HostPattern, ResourceName, TokenSource};

/// A validated config, ready to build a daemon from.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from.
    pub source: PathBuf,
    /// Kubeconfig to use; `None` for the usual inference.
    pub kubeconfig: Option<PathBuf>,
    /// The plugins folder.
    pub plugins_dir: PathBuf,
    /// The durable state store; `None` keeps no state across restarts.
    pub state: Option<StateSpec>,
    /// How the plugin pool's slots are made ready for the next instance.
    pub plugin_slots: super::schema::PluginSlots,
    /// Where the admin API listens.
    pub admin_listen: SocketAddr,
    /// Where the admin API's bearer token comes from.
    pub admin_token: Option<TokenSource>,
    /// Where `/livez`, `/readyz` and `/metrics` are served without a token; `None` for
    /// nowhere but the admin API.
    pub probes_listen: Option<SocketAddr>,
    /// `Host` names the admin API answers besides its own address and loopback's
    /// (`admin.allowed_hosts`).
    pub admin_allowed_hosts: Vec<HostPattern>,
    /// How long a connection to the admin API or the probes gets to send a request's
    /// headers, from its opening or the end of its last answer.
    pub header_read_timeout: Duration,
    /// Most connections the admin API keeps open at once.
    pub admin_max_connections: usize,
    /// Most connections the probes listener keeps open at once.
    pub probes_max_connections: usize,
    /// How several replicas share the work.
    pub ha: HaSpec,
    /// How plugins are pulled from OCI registries.
    pub oci: super::oci::OciSpec,
    /// Where traces go (`tracing:`); `None`: no traces.
    pub tracing: Option<TracingSpec>,
    /// Team-owned resources (`tenancy:`); `None`: none are read.
    pub tenancy: Option<TenancySpec>,
    /// Informers, by name order: those under `informers:`, then each route's own watch.
    pub informers: Vec<InformerSpec>,
    /// Handlers, by name order.
    pub handlers: Vec<HandlerSpec>,
    /// Routes, in file order.
    pub routes: Vec<RouteSpec>,
}

/// Where and how the daemon keeps its state across restarts (`state_dir:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSpec {
    /// The folder of the store, `~` and variables expanded.
    pub dir: PathBuf,
    /// What to do when the store cannot be read.
    pub on_corrupt: super::schema::OnCorrupt,
    /// Uncommitted changes at which the informers wait for the store.
    pub max_pending_writes: u64,
}

/// Where and how the daemon sends traces (`tracing:`), with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSpec {
    /// The URL spans are posted to: the configured endpoint with `/v1/traces`.
    pub endpoint: url::Url,
    /// The share of events traced, from 0 to 1.
    pub sample_ratio: f64,
    /// `service.name` of the spans.
    pub service_name: String,
    /// Headers sent with every export.
    pub headers: Vec<(String, String)>,
}

/// How several replicas share the work, with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaSpec {
    /// Whether replicas elect a leader, share the objects, or run alone.
    pub mode: HaMode,
    /// Namespace of the Lease.
    pub lease_namespace: String,
    /// Whether the config names `lease_namespace`; else it is the namespace of the pod the
    /// daemon runs in (`default` outside a pod), which `switchyard rbac` cannot see.
    pub lease_namespace_written: bool,
    /// Name of the Lease.
    pub lease_name: String,
    /// How long a lease holds without renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// Time between attempts to acquire or renew.
    pub retry_period: Duration,
    /// This replica's name in the Lease.
    pub identity: String,
}

/// How replicas share the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaMode {
    /// One replica: handlers run from the start.
    Single,
    /// Several replicas: only the holder of the Lease runs its handlers.
    Leader,
    /// Several replicas, each handling the objects whose hash falls in its range.
    Sharded,
}

impl HaMode {
    /// The name the config uses.
    pub fn as_str(self) -> &'static str {
        match self {
            HaMode::Single => "single",
            HaMode::Leader => "leader",
            HaMode::Sharded => "sharded",
        }
    }
}

/// A handler, with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerSpec {
    /// Handler name.
    pub name: String,
    /// Plugin name (`NAME.wasm` in the plugins folder).
    pub plugin: String,
    /// The plugin run beside it on every event, its writes captured and compared (a name in
    /// the plugins folder or an `oci://` reference); `None` for no shadow.
    pub shadow: Option<String>,
    /// Workers calling the plugin at once.
    pub concurrency: usize,
    /// Deadline for one call.
    pub timeout: Duration,
    /// Memory cap for one plugin instance, in bytes.
    pub memory: u64,
    /// How much one call of the plugin may log.
    pub logs: LogLimits,
    /// Retries after a failure before the event is dropped.
    pub max_retries: u32,
    /// First retry delay.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_cap: Duration,
    /// How often every cached object is delivered again as `sync`; `None` for never.
    pub resync: Option<Duration>,
    /// Retries and requeues per second (token bucket); `None` for no bucket.
    pub qps: Option<f64>,
    /// Retries and requeues that may go at once.
    pub burst: u32,
    /// Settings passed to the plugin's `init`, as written: a `valueFrom:` is still a
    /// reference here (see [`super::value_from`]).
    pub config: serde_json::Value,
    /// The values of `config` taken from Secrets or environment variables.
    pub value_refs: Vec<super::value_from::ValueRef>,
    /// Kubernetes writes the plugin may make.
    pub capabilities: Capabilities,
    /// Informers (by name) whose caches the plugin reads besides its routes' (`reads:`):
    /// watched and cached, never delivered.
    pub reads: Vec<String>,
    /// Where and how the plugin may send HTTP requests.
    pub outbound: OutboundSpec,
    /// When a failing plugin is quarantined, and how it is tried again.
    pub quarantine: QuarantineSpec,
    /// A fresh plugin instance per event, or one per worker reused across events.
    pub instance: super::schema::InstanceMode,
    /// Events handed to the plugin's `handle-batch` at once; `None` calls `handle` per event.
    pub batch: Option<BatchSpec>,
    /// The team resource it comes from; `None` for the config file's handlers.
    pub owner: Option<Owner>,
}

/// The `Route` or `Handler` resource a config item comes from, and whose rights it runs with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// The resource's namespace: the only one its route watches and its handler reads.
    pub namespace: String,
    /// The resource's name.
    pub name: String,
    /// The ServiceAccount (in `namespace`) the handler's Kubernetes calls are made as.
    pub service_account: String,
}

impl Owner {
    /// The Kubernetes user name of the ServiceAccount.
    pub fn user(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account
        )
    }
}

/// What `tenancy:` allows team resources.
#[derive(Debug, Clone, PartialEq)]
pub struct TenancySpec {
    /// Label selector on Namespaces; `None` for every namespace.
    pub namespaces: Option<String>,
    /// Resources team Routes may watch.
    pub resources: Vec<super::ResourceName>,
    /// OCI repositories plugins may come from by tag.
    pub registries: Vec<String>,
    /// What a Handler's `capabilities.http` must lie within.
    pub http: Vec<super::EgressRule>,
    /// Whether `builtin:` plugins are allowed.
    pub builtin: bool,
    /// Handlers per namespace.
    pub max_handlers_per_namespace: usize,
    /// Team Handlers in all.
    pub max_handlers: usize,
    /// Highest `memory`, in bytes.
    pub max_memory: u64,
    /// Highest `timeout`.
    pub max_timeout: Duration,
    /// Highest `concurrency`.
    pub max_concurrency: usize,
    /// Highest `qps`.
    pub max_qps: f64,
}

/// How a handler's events are gathered into one `handle-batch` call (`batch:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpec {
    /// The most events in one call.
    pub max_events: usize,
    /// The most bytes of event JSON (objects and old objects) in one call; a single event
    /// larger than this goes alone.
    pub max_bytes: u64,
    /// How long a worker holding one event waits for more before it calls the plugin.
    pub max_wait: Duration,
}

impl BatchSpec {
    /// The most events a `max_events` may name.
    pub const MAX_EVENTS: usize = 10_000;
    /// The longest `max_wait`.
    pub const MAX_WAIT: Duration = Duration::from_secs(60);
}

impl Default for BatchSpec {
    fn default() -> Self {
        Self {
            max_events: 100,
            max_bytes: 1 << 20,
            max_wait: Duration::from_millis(200),
        }
    }
}

/// A handler's outbound HTTP: where requests may go (`capabilities.http` and the address
/// rules) and how they are made (`outbound:`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutboundSpec {
    /// The allow-list and address rules.
    pub egress: super::egress::Egress,
    /// The largest request body, in bytes.
    pub max_request_body: u64,
    /// The largest response body, in bytes.
    pub max_response_body: u64,
    /// CA certificates trusted besides the system roots (a PEM file).
    pub ca_bundle: Option<std::path::PathBuf>,
    /// A client certificate and its key (PEM files).
    pub client_identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The status captured requests are answered with.
    pub capture_status: u16,
    /// The most requests the handler's calls may have in flight at once.
    pub max_in_flight: u32,
}

impl Default for OutboundSpec {
    fn default() -> Self {
        Self {
            egress: super::egress::Egress::default(),
            max_request_body: 1 << 20,
            max_response_body: 1 << 20,
            ca_bundle: None,
            client_identity: None,
            capture_status: 200,
            max_in_flight: 32,
        }
    }
}

/// How much one call of a handler's plugin may log (`log_line_max`, `log_call_max`,
/// `log_call_lines`): what keeps a plugin from flooding the daemon's log, whatever it
/// writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    /// The most bytes of a line kept; the rest is cut, and a marker says how much.
    pub line_bytes: u64,
    /// The most bytes a call may log, counting lines as kept; its later lines are dropped.
    pub call_bytes: u64,
    /// The most lines a call may log; its later lines are dropped.
    pub call_lines: u32,
}

impl Default for LogLimits {
    fn default() -> Self {
        Self {
            line_bytes: 16 << 10,
            call_bytes: 256 << 10,
            call_lines: 1000,
        }
    }
}

/// When a handler whose plugin keeps failing is quarantined: its events wait in the queue
/// and the plugin is tried again after a backoff, until a call succeeds, a new plugin
/// version is loaded or the handler is resumed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuarantineSpec {
    /// Failed calls in a row (on at least two objects) that trip it; 0 never does.
    pub after: u32,
    /// The window those failures must fall in.
    pub window: Duration,
    /// First wait before a try; doubles per failed try, up to [`QuarantineSpec::MAX_BACKOFF`].
    pub backoff: Duration,
}

impl QuarantineSpec {
    /// The longest wait between tries.
    pub const MAX_BACKOFF: Duration = Duration::from_secs(600);
}

impl Default for QuarantineSpec {
    fn default() -> Self {
        Self {
            after: 10,
            window: Duration::from_secs(60),
            backoff: Duration::from_secs(30),
        }
    }
}

/// How an informer names its resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ResourceRef {
    /// By group, version and plural name.
    Plural(ResourceName),
    /// By group, version and kind; discovery finds the plural.
    Kind {
        /// API group; empty for the core group.
        group: String,
        /// API version.
        version: String,
        /// Kind, such as `Deployment`.
        kind: String,
    },
}

impl ResourceRef {
    /// Whether `name` names this resource as the daemon matches a capability against a
    /// watched resource: its plural (`configmaps`), its full name (`v1/configmaps`) or its
    /// kind (`ConfigMap`), each spelt exactly as the API server does. Offline, a built-in
    /// resource's other name comes from [`super::builtin`]; a custom resource's is
    /// guessed by the English rule most kinds follow.
    pub fn answers_to(&self, name: &str) -> bool {
        match self {
            ResourceRef::Plural(r) => {
                name == r.plural || name == r.to_string() || self.has_kind(name)
            }
            ResourceRef::Kind {
                group,
                version,
                kind,
            } => {
                name == kind
                    || self.plurals().iter().any(|p| {
                        name == p
                            || ResourceName::parse(name).is_ok_and(|n| {
                                n.plural == *p && n.group == *group && n.version == *version
                            })
                    })
            }
        }
    }

    /// Whether `kind` is this resource's kind, spelt exactly (`ConfigMap`, not
    /// `configmap`): what a route's `kinds:` and a capability by kind must name.
    pub fn has_kind(&self, kind: &str) -> bool {
        match self {
            ResourceRef::Kind { kind: own, .. } => own == kind,
            ResourceRef::Plural(r) => {
                match super::builtin::kind_of(&r.group, &r.version, &r.plural) {
                    Some(own) => own == kind,
                    // A kind starts with a capital letter; its usual plural must be this one.
                    None => {
                        kind.starts_with(|c: char| c.is_ascii_uppercase())
                            && plurals_of(kind).contains(&r.plural)
                    }
                }
            }
        }
    }

    /// The kind, when it is known offline: as written, or a built-in resource's.
    pub fn known_kind(&self) -> Option<&str> {
        match self {
            ResourceRef::Kind { kind, .. } => Some(kind),
            ResourceRef::Plural(r) => super::builtin::kind_of(&r.group, &r.version, &r.plural),
        }
    }

    /// The plurals a resource named by kind may have: a built-in kind's own, else the
    /// usual spellings.
    fn plurals(&self) -> Vec<String> {
        match self {
            ResourceRef::Plural(r) => vec![r.plural.clone()],
            ResourceRef::Kind {
                group,
                version,
                kind,
            } => match super::builtin::plural_of(group, version, kind) {
                Some(plural) => vec![plural.to_string()],
                None => plurals_of(kind),
            },
        }
    }
}

/// The plural spellings a custom kind usually has (`Widget` → widgets, `Gateway` →
/// gateways, `Policy` → policies, `Status` → statuses); built-in kinds, such as
/// `Endpoints`, are looked up instead.
fn plurals_of(kind: &str) -> Vec<String> {
    let lower = kind.to_ascii_lowercase();
    let mut plurals = vec![format!("{lower}s"), format!("{lower}es")];
    if let Some(stem) = lower.strip_suffix('y') {
        plurals.push(format!("{stem}ies"));
    }
    plurals
}

impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResourceRef::Plural(r) => write!(f, "{r}"),
            ResourceRef::Kind {
                group,
                version,
                kind,
            } if group.is_empty() => write!(f, "{version} {kind}"),
            ResourceRef::Kind {
                group,
                version,
                kind,
            } => write!(f, "{group}/{version} {kind}"),
        }
    }
}

/// An informer, with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InformerSpec {
    /// Its name under `informers:`, or `route:NAME` for a route's own watch.
    pub name: String,
    /// The resource watched.
    pub resource: ResourceRef,
    /// Namespaces watched, one watch each; empty for all namespaces.
    pub namespaces: Vec<String>,
    /// Label selector of the watch.
    pub label_selector: Option<String>,
    /// Field selector of the watch.
    pub field_selector: Option<String>,
    /// Cache indexes by name, each with its sources: field paths (a `[]` segment visits a
    /// list's elements) or `label:KEY`.
    pub indexes: Vec<(String, Vec<String>)>,
    /// Keep `metadata.managedFields` in the cache.
    pub keep_managed_fields: bool,
    /// JSON pointers dropped before caching.
    pub drop_fields: Vec<String>,
    /// In sharded mode, the field objects are placed by.
    pub shard_by: ShardBy,
}

/// The field `ha.mode: sharded` places an informer's objects by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardBy {
    /// `metadata.uid` (the default): objects spread evenly.
    #[default]
    Uid,
    /// `metadata.namespace`: a namespace's objects go to one replica.
    Namespace,
}

/// Where a route's changes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteSource {
    /// One informer, by name (a route's own watch is `route:NAME`).
    Informer(String),
    /// Every informer under `informers:` of these kinds.
    Kinds(Vec<String>),
}

/// A test on the value at a field path.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    /// The value equals this.
    Equals(serde_json::Value),
    /// The path has a value (`true`) or none (`false`).
    Exists(bool),
    /// An update changed the value (`true`) or left it alone (`false`).
    Changed(bool),
    /// The value is a timestamp less than this long before now.
    NewerThan(std::time::Duration),
    /// The value is a timestamp more than this long before now.
    OlderThan(std::time::Duration),
}

/// A condition a route puts on the objects it delivers.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// Where the value is: the first of these paths that has one (at least one path).
    pub paths: Vec<FieldPath>,
    /// What it must be.
    pub test: Test,
}

impl Condition {
    /// A condition on the value at one path.
    pub fn new(path: FieldPath, test: Test) -> Self {
        Self {
            paths: vec![path],
            test,
        }
    }

    /// The value the condition tests in `object`: at the first of its paths that has one.
    pub fn lookup<'a>(&self, object: &'a serde_json::Value) -> Option<&'a serde_json::Value> {
        self.paths.iter().find_map(|path| path.lookup(object))
    }
}

/// What a route does with the objects its informers list when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Initial {
    /// Deliver each as `added`.
    #[default]
    Deliver,
    /// Deliver only the changes after the list.
    Skip,
}

/// Which objects a route delivers, beyond what its informer watches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteFilter {
    /// Only objects in these namespaces; empty for all.
    pub namespaces: Vec<String>,
    /// Only objects whose labels match.
    pub labels: Option<String>,
    /// Only objects whose fields match (field selector syntax).
    pub fields: Option<String>,
    /// Only changes that meet every condition.
    pub when: Vec<Condition>,
}

/// A route, with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteSpec {
    /// Route name.
    pub name: String,
    /// Where its changes come from.
    pub source: RouteSource,
    /// Which objects it delivers.
    pub filter: RouteFilter,
    /// Kinds of change delivered.
    pub events: EventFilter,
    /// How changes are delivered.
    pub delivery: Delivery,
    /// The handler that gets the changes.
    pub handler: String,
    /// The finalizer the route holds its objects with (`finalizer:`), if any.
    pub finalizer: Option<String>,
    /// What it does with the objects listed when it starts (`initial:`).
    pub initial: Initial,
    /// The team resource it comes from; `None` for the config file's routes.
    pub owner: Option<Owner>,
}

/// How a route delivers changes to its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Coalesce per key: the newest object and the kind of change since queued.
    Latest,
    /// Every delta in order per key, at most `backlog` waiting per key.
    Every {
        /// Events kept per key before the oldest are coalesced.
        backlog: usize,
    },
}

/// Which kinds of change a route delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventFilter {
    /// Deliver additions.
    pub added: bool,
    /// Deliver updates.
    pub updated: bool,
    /// Deliver deletions.
    pub deleted: bool,
}

impl Default for EventFilter {
    fn default() -> Self {
        Self {
            added: true,
            updated: true,
            deleted: true,
        }
    }
}
