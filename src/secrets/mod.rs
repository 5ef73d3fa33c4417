//! The Secrets handlers' configs read (`valueFrom: {secretKeyRef: …}`, see
//! [`crate::config::value_from`]): one watch per Secret named, limited to it by a
//! `metadata.name` field selector, so that `switchyard rbac` can grant exactly those
//! Secrets by `resourceNames`. Their keys are held in memory; a change bumps
//! [`Secrets::changed`], and the daemon then applies its config again, which replaces each
//! handler whose resolved config differs: new instances are made with the new value.
//!
//! Files named (`valueFrom: {file: …}`) are read again every few seconds ([`files`]), and a
//! change is announced the same way.
//!
//! A value resolved here is remembered by [`crate::util::redact`], so the daemon's output
//! never shows it.

mod files;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::value_from::{SecretKeyRef, ValueSource, substitute};
use crate::config::{Config, HandlerSpec};
use crate::util::{kube_error, lock, redact};

/// How long applying a config waits for the first read of a Secret it names for the first
/// time; after that the handler waits (and `/readyz?verbose` says for what).
const FIRST_READ: Duration = Duration::from_secs(5);

/// How long the API server keeps a Secret's watch open, in seconds.
const WATCH_TIMEOUT: u32 = 290;

/// A Secret: namespace and name.
pub type SecretName = (String, String);

/// What the watch of one Secret knows.
#[derive(Debug, Default, Clone, PartialEq)]
struct Known {
    /// Whether the watch has listed it once (found or not), or failed.
    read: bool,
    /// Its keys and their values; `None` when it does not exist.
    data: Option<BTreeMap<String, Vec<u8>>>,
    /// Why it cannot be read, while it cannot.
    error: Option<String>,
}

struct Watched {
    known: Arc<Mutex<Known>>,
    task: JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Secrets the running config names, watched.
pub struct Secrets {
    client: kube::Client,
    namespace: String,
    watched: Mutex<HashMap<SecretName, Watched>>,
    files: Mutex<HashMap<String, files::Polled>>,
    changed: watch::Sender<u64>,
}

impl Secrets {
    /// Secrets read through `client`; a reference without a namespace means the daemon's
    /// own ([`crate::util::identity::daemon_namespace`]: the pod's, else the kubeconfig
    /// context's, else `default`).
    pub fn new(client: kube::Client) -> Arc<Self> {
        Arc::new(Self {
            namespace: crate::util::identity::namespace_of(&client),
            client,
            watched: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
        })
    }

    /// Bumped whenever a watched Secret changes (created, updated, deleted, or its watch
    /// failing or recovering).
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The namespace and name `secret` refers to.
    pub fn name_of(&self, secret: &SecretKeyRef) -> SecretName {
        let namespace = secret.namespace.as_deref().unwrap_or(&self.namespace);
        (namespace.to_string(), secret.name.clone())
    }

    /// Watches every Secret `config`'s handlers name, and no other: new watches start,
    /// those no longer named stop. Waits (up to a few seconds) until each new one has been
    /// read once, so a config applied now resolves what exists.
    pub async fn track(&self, config: &Config) {
        self.track_files(config);
        let wanted: BTreeSet<SecretName> = config
            .handlers
            .iter()
            .flat_map(|h| &h.value_refs)
            .filter_map(|r| match &r.source {
                ValueSource::Secret(s) => Some(self.name_of(s)),
                ValueSource::Env(_) | ValueSource::File(_) => None,
            })
            .collect();
        let mut started = Vec::new();
        {
            let mut watched = lock(&self.watched);
            watched.retain(|name, _| wanted.contains(name));
            for name in wanted {
                if watched.contains_key(&name) {
                    continue;
                }
                let known = Arc::new(Mutex::new(Known::default()));
                let task = tokio::spawn(watch_one(
                    self.client.clone(),
                    name.clone(),
                    known.clone(),
                    self.changed.clone(),
                ));
                started.push(known.clone());
                watched.insert(name, Watched { known, task });
            }
        }
        let read = async {
            let mut changed = self.changed();
            while !started.iter().all(|k| lock(k).read) {
                if changed.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(FIRST_READ, read).await;
    }

    /// Polls every file `config`'s handlers name, and no other.
    fn track_files(&self, config: &Config) {
        let wanted: BTreeSet<&String> = config
            .handlers
            .iter()
            .flat_map(|h| &h.value_refs)
            .filter_map(|r| match &r.source {
                ValueSource::File(path) => Some(path),
                _ => None,
            })
            .collect();
        let mut files = lock(&self.files);
        files.retain(|path, _| wanted.contains(path));
        for path in wanted {
            if !files.contains_key(path) {
                let polled = files::poll(path.clone(), self.changed.clone());
                files.insert(path.clone(), polled);
            }
        }
    }

    /// `spec`'s config with every `valueFrom:` replaced by its value, as the JSON the
    /// plugin's `init` takes; or, for each value that cannot be had now, what it waits for
    /// and why.
    pub fn resolve(&self, spec: &HandlerSpec) -> Result<String, Vec<String>> {
        if spec.value_refs.is_empty() {
            return Ok(spec.config.to_string());
        }
        let mut why = Vec::new();
        let resolved = substitute(&spec.config, &spec.value_refs, |source| {
            match self.value(source) {
                Ok(value) => {
                    redact::remember(&value);
                    Some(value)
                }
                Err(reason) => {
                    why.push(format!("{source}: {reason}"));
                    None
                }
            }
        });
        match resolved {
            Ok(config) => Ok(config.to_string()),
            Err(_) => {
                why.sort();
                why.dedup();
                Err(why)
            }
        }
    }

    /// The value `source` names now, or why there is none.
    fn value(&self, source: &ValueSource) -> Result<String, String> {
        let secret = match source {
            ValueSource::Env(var) => {
                return std::env::var(var).map_err(|e| match e {
                    std::env::VarError::NotPresent => "not set in the daemon's environment".into(),
                    std::env::VarError::NotUnicode(_) => "not UTF-8 text".into(),
                });
            }
            ValueSource::File(path) => return files::read(path),
            ValueSource::Secret(secret) => secret,
        };
        let name = self.name_of(secret);
        let watched = lock(&self.watched);
        let Some(known) = watched.get(&name).map(|w| lock(&w.known).clone()) else {
            return Err("not watched".into());
        };
        // A watch failing keeps the value last read: a running handler keeps its config.
        let Some(data) = known.data else {
            return Err(match (known.error, known.read) {
                (Some(error), _) => format!("cannot be read: {error}"),
                (None, true) => format!("Secret {}/{} not found", name.0, name.1),
                (None, false) => "not read yet".into(),
            });
        };
        let Some(bytes) = data.get(&secret.key) else {
            let keys: Vec<&str> = data.keys().map(String::as_str).collect();
            return Err(format!(
                "the Secret has no key {:?} (it has {keys:?})",
                secret.key
            ));
        };
        String::from_utf8(bytes.clone()).map_err(|_| "the value is not UTF-8 text".into())
    }
}

/// Watches one Secret until aborted, keeping `known` current and bumping `changed` when
/// it changes: a list limited to it, then a watch from the list's version, again and again.
/// Failures are retried with kube-runtime's default backoff (800 ms doubling to 30 s),
/// reset only by progress (an event, or a watch that ran to its end): kube's watcher, whose
/// backoff every `Init` event resets, retried a 403 about once a second. The first failure
/// after a success is logged at WARN by the API server's message, the retries at DEBUG.
async fn watch_one(
    client: kube::Client,
    (namespace, name): SecretName,
    known: Arc<Mutex<Known>>,
    changed: watch::Sender<u64>,
) {
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let selector = format!("metadata.name={name}");
    let shown = format!("{namespace}/{name}");
    let set = |next: Known| {
        let mut current = lock(&known);
        if *current != next {
            if current.error.is_none()
                && let Some(error) = &next.error
            {
                tracing::warn!(secret = %shown, %error, "cannot read the Secret a handler's config names");
            }
            *current = next;
            drop(current);
            changed.send_modify(|n| *n += 1);
        }
    };
    let mut backoff = DefaultBackoff::default();
    loop {
        let began = tokio::time::Instant::now();
        let failed = match follow(&api, &selector, &set).await {
            // A watch that ran a while and ended (its timeout): again at once.
            Ok(()) if began.elapsed() >= Duration::from_secs(1) => {
                backoff.reset();
                continue;
            }
            // One that ends as it starts is not let spin.
            Ok(()) => {
                let wait = backoff.next().unwrap_or(Duration::from_secs(30));
                tokio::time::sleep(wait).await;
                continue;
            }
            Err(failed) => failed,
        };
        if failed.progressed {
            backoff.reset();
        }
        let data = lock(&known).data.clone();
        set(Known {
            read: true,
            data,
            error: Some(failed.error.clone()),
        });
        let wait = backoff.next().unwrap_or(Duration::from_secs(30));
        tracing::debug!(secret = %shown, error = %failed.error, ?wait, "reading the Secret failed; trying again");
        tokio::time::sleep(wait).await;
    }
}

/// Why listing or watching a Secret failed, and whether anything came before.
struct Failed {
    /// The failure as people read it: the API server's message and code.
    error: String,
    /// Whether the watch delivered an event before it failed.
    progressed: bool,
}

/// Lists the Secret (limited to it by `selector`), then watches it from the list's version
/// until the watch ends (`Ok`) or fails; passes each state read to `set`.
async fn follow(
    api: &Api<Secret>,
    selector: &str,
    set: &(dyn Fn(Known) + Sync),
) -> Result<(), Failed> {
    let failed = |error: &kube::Error, progressed| Failed {
        error: kube_error(error),
        progressed,
    };
    let list = api
        .list(&ListParams::default().fields(selector))
        .await
        .map_err(|e| failed(&e, false))?;
    let rv = list.metadata.resource_version.unwrap_or_default();
    set(Known {
        read: true,
        data: list.items.into_iter().next().map(data_of),
        error: None,
    });
    let params = WatchParams::default()
        .fields(selector)
        .timeout(WATCH_TIMEOUT);
    let stream = api
        .watch(&params, &rv)
        .await
        .map_err(|e| failed(&e, false))?;
    let mut stream = std::pin::pin!(stream);
    let mut progressed = false;
    while let Some(event) = stream.next().await {
        let data = match event.map_err(|e| failed(&e, progressed))? {
            WatchEvent::Added(secret) | WatchEvent::Modified(secret) => Some(data_of(secret)),
            WatchEvent::Deleted(_) => None,
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(status) => {
                return Err(Failed {
                    error: format!("{} ({})", status.message, status.code),
                    progressed,
                });
            }
        };
        progressed = true;
        set(Known {
            read: true,
            data,
            error: None,
        });
    }
    Ok(())
}

/// A Secret's keys and values (`stringData` too, which an API server folds into `data`).
fn data_of(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
    data
}
