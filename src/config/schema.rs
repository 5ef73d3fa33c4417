//! The YAML schema of a switchyard config file, as serde types. Every struct rejects unknown
//! fields; defaults are the ones the README's config reference states.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::units::{ByteSize, HumanDuration};

/// The whole config file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Path of a kubeconfig; when absent, the usual inference (KUBECONFIG, ~/.kube/config,
    /// in-cluster) applies.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Folder holding the plugins (`NAME.wasm`), relative to the config file. Default `plugins`.
    #[serde(default)]
    pub plugins_dir: Option<PathBuf>,
    /// The admin API.
    #[serde(default)]
    pub admin: AdminFile,
    /// Handlers by name.
    #[serde(default)]
    pub handlers: BTreeMap<String, HandlerFile>,
    /// Routes, in order.
    #[serde(default)]
    pub routes: Vec<RouteFile>,
}

/// `admin:` — where the admin API listens.
#[derive(Debug, Default, Deserialize)]
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
}

/// `handlers.NAME:` — a plugin and how it is run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerFile {
    /// Plugin name: the file `NAME.wasm` in the plugins folder. Default: the handler's name.
    #[serde(default)]
    pub plugin: Option<Spanned<String>>,
    /// Workers calling the plugin at once. Default 2.
    #[serde(default)]
    pub concurrency: Option<Spanned<usize>>,
    /// Deadline for one call. Default `5s`.
    #[serde(default)]
    pub timeout: Option<HumanDuration>,
    /// Memory cap for one plugin instance. Default `64Mi`.
    #[serde(default)]
    pub memory: Option<ByteSize>,
    /// Retries after a failure before the event is dropped. Default 5.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// First retry delay; doubles per failure. Default `100ms`.
    #[serde(default)]
    pub backoff_base: Option<HumanDuration>,
    /// Longest retry delay. Default `30s`.
    #[serde(default)]
    pub backoff_cap: Option<HumanDuration>,
    /// Retries per second across the handler's keys (token bucket). Default 10.
    #[serde(default)]
    pub qps: Option<Spanned<f64>>,
    /// Retries that may go at once before `qps` applies. Default 100.
    #[serde(default)]
    pub burst: Option<u32>,
    /// Deliver a `sync` event for every cached object this often (`10m`). Default: never.
    #[serde(default)]
    pub resync: Option<HumanDuration>,
    /// Free-form settings passed to the plugin's `init` as JSON.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// Kubernetes writes the plugin may make, per resource. Default: none.
    #[serde(default)]
    pub capabilities: Option<super::capabilities::CapabilitiesFile>,
}

/// `routes[i]:` — which changes go to which handler.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteFile {
    /// Route name, unique; shown to the plugin and in logs.
    pub name: Spanned<String>,
    /// The resource: `configmaps`, `v1/pods`, `apps/v1/deployments`.
    pub resource: Spanned<String>,
    /// Only objects in this namespace; default all namespaces.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Only objects whose labels match this selector (`app=web,tier!=db`).
    #[serde(default)]
    pub labels: Option<Spanned<String>>,
    /// Only objects whose fields match this selector (`metadata.name=x`).
    #[serde(default)]
    pub fields: Option<Spanned<String>>,
    /// Only these kinds of change; default all.
    #[serde(default)]
    pub events: Option<Vec<EventKindFile>>,
    /// Cache indexes by name: a field path (`spec.nodeName`) or `label:KEY`.
    #[serde(default)]
    pub indexes: Option<std::collections::BTreeMap<String, String>>,
    /// Keep `metadata.managedFields` in the cache (dropped by default).
    #[serde(default)]
    pub keep_managed_fields: Option<bool>,
    /// JSON pointers dropped from objects before caching.
    #[serde(default)]
    pub drop_fields: Option<Vec<Spanned<String>>>,
    /// `latest` (default: coalesce per object) or `every` (each change, in order).
    #[serde(default)]
    pub delivery: Option<DeliveryFile>,
    /// For `every`: events kept per object before the oldest two are coalesced. Default 100.
    #[serde(default)]
    pub backlog: Option<Spanned<usize>>,
    /// The handler that gets the changes.
    pub handler: Spanned<String>,
}

/// How a route delivers changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryFile {
    /// Coalesce per object: the newest state and the kind of change since queued.
    Latest,
    /// Every change, in order per object.
    Every,
}

/// A kind of change a route can select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKindFile {
    /// Objects that appeared.
    Added,
    /// Objects that changed.
    Updated,
    /// Objects that went away.
    Deleted,
}
