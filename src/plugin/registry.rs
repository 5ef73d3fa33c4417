//! The plugins the daemon runs: for each plugin name, its users (the handlers, seen here
//! only as [`PluginUser`]s), the file it comes from, the version running now and what went
//! wrong last.
//!
//! A load reads `plugins_dir/NAME.wasm` (a regular file inside the folder, capped in size:
//! see [`super::loader`]), compiles it off the async runtime, checks it against the
//! `handler` world and, only if all of that succeeds, swaps the new version into every
//! handler that uses the plugin. Anything that fails (a missing, garbled, half-written
//! or wrong-world file) leaves the running version in place and shows the reason in each
//! handler's `plugin_error` and in the plugin's `last_error`. Loads of one plugin run one at
//! a time, so versions are swapped in the order they were read.
//!
//! # Decision: `oci://` plugins are pulled in the background, retried, and abandoned on shutdown
//!
//! A registry may answer slowly or never. Awaiting its pull where the daemon starts or
//! reloads held every other handler, the admin API and the probes for as long as the
//! registry did. So a plugin new to the registry that names an `oci://` reference is pulled
//! by a task of its own ([`PluginRegistry::pull_in_background`]): its handlers show
//! `plugin_pulling` and keep their events queued, and it is tried again with a doubling
//! backoff (from [`FIRST_PULL_RETRY`] to [`MAX_PULL_RETRY`]) until a version runs, the plugin
//! is no longer used, or the daemon shuts down. [`PluginRegistry::shut_down`] abandons every
//! load under way (a hung `POST /plugins/NAME/reload` too), so the shutdown keeps its grace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::watch;

use super::loader::{PluginFile, fetch, plugin_path};
use super::{Error, Plugin, PluginHost, Result};
use crate::config::oci::{OciSpec, Reference};
use crate::util::{lock, read, rfc3339, write};

/// The wait before a failed background pull is tried again; it doubles per failure.
pub const FIRST_PULL_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between tries of a background pull.
pub const MAX_PULL_RETRY: Duration = Duration::from_secs(60);

/// Something that runs versions of a plugin (a handler). The registry installs each new
/// version into every user of the plugin and tells them when a load fails.
pub trait PluginUser: Send + Sync {
    /// The user's name, as `GET /plugins` lists it.
    fn user_name(&self) -> &str;
    /// The name of the plugin it runs.
    fn plugin_name(&self) -> &str;
    /// Swaps `plugin` in: calls that start afterwards use it.
    fn install_plugin(&self, plugin: Arc<Plugin>);
    /// Records a problem loading the plugin; the running version, if any, stays.
    fn report_plugin_problem(&self, problem: String);
    /// Records whether the plugin is being pulled from a registry in the background (its
    /// first version, tried again until it loads).
    fn report_plugin_pulling(&self, _pulling: bool) {}
}

/// The users of one plugin.
type Users = Vec<Arc<dyn PluginUser>>;

/// What a successful load did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reloaded {
    /// A new version was compiled and swapped into every handler using the plugin.
    Swapped,
    /// The file holds the version already running, so nothing was swapped.
    Unchanged,
}

/// The version of a plugin that is running.
#[derive(Debug, Clone)]
struct Running {
    plugin: Arc<Plugin>,
    sha256: String,
    size: usize,
    loaded_at: SystemTime,
}

#[derive(Debug, Default)]
struct State {
    running: Option<Running>,
    file_present: bool,
    last_error: Option<String>,
    swaps: u64,
    /// Whether a background pull is under way (trying, or waiting to try again).
    pulling: bool,
    /// Tries of the background pull under way that failed.
    pull_failures: u32,
}

struct Entry {
    users: Mutex<Users>,
    state: Mutex<State>,
    /// Held for a whole load, so loads of one plugin never overlap.
    loading: tokio::sync::Mutex<()>,
}

/// One plugin as `GET /plugins` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PluginView {
    /// The plugin's name.
    pub name: String,
    /// The file it is loaded from.
    pub file: String,
    /// Whether the file was there when last looked at.
    pub file_present: bool,
    /// Whether a version is running.
    pub loaded: bool,
    /// SHA-256 of the running version's file, in hex.
    pub sha256: Option<String>,
    /// Size of the running version's file, in bytes.
    pub size: Option<usize>,
    /// When the running version was swapped in (RFC 3339).
    pub loaded_at: Option<String>,
    /// Why the last load failed, if it did; cleared by a successful load.
    pub last_error: Option<String>,
    /// Versions swapped in since the daemon started (the first load counts).
    pub swaps: u64,
    /// Whether an `oci://` plugin is being pulled in the background (until it loads).
    pub pulling: bool,
    /// Failed tries of that pull so far.
    pub pull_failures: u32,
    /// The handlers that use the plugin.
    pub handlers: Vec<String>,
}

/// Every plugin the handlers use, and loading them.
pub struct PluginRegistry {
    host: Arc<PluginHost>,
    dir: PathBuf,
    plugins: RwLock<BTreeMap<String, Arc<Entry>>>,
    watching: AtomicBool,
    /// The `oci:` settings pulls follow (the running config's).
    oci: RwLock<OciSpec>,
    /// True once the daemon shuts down: loads under way are abandoned, none starts.
    stopping: watch::Sender<bool>,
}

impl PluginRegistry {
    /// A registry for the plugins `users` run, loaded from `dir` with `host`. Nothing is
    /// loaded yet: see [`PluginRegistry::load_all`].
    pub fn new(host: Arc<PluginHost>, dir: PathBuf, users: &[Arc<dyn PluginUser>]) -> Self {
        let registry = Self {
            host,
            dir,
            plugins: RwLock::new(BTreeMap::new()),
            watching: AtomicBool::new(false),
            oci: RwLock::new(OciSpec::default()),
            stopping: watch::channel(false).0,
        };
        registry.set_users(users);
        registry
    }

    /// Makes `users` the users the registry serves, after a config reload. A plugin still in
    /// use keeps its running version and state, and a user that starts using it gets the
    /// running version at once; a plugin nobody uses any more is forgotten.
    /// Returns the plugins that are new, in name order: load them with
    /// [`PluginRegistry::load`].
    pub fn set_users(&self, users: &[Arc<dyn PluginUser>]) -> Vec<String> {
        let mut wanted: BTreeMap<String, Users> = BTreeMap::new();
        for user in users {
            wanted
                .entry(user.plugin_name().to_string())
                .or_default()
                .push(user.clone());
        }
        let mut plugins = write(&self.plugins);
        plugins.retain(|name, _| wanted.contains_key(name));
        let mut new = Vec::new();
        for (name, users) in wanted {
            match plugins.get(&name) {
                Some(entry) => {
                    let (running, pulling) = {
                        let state = lock(&entry.state);
                        let running = state.running.as_ref().map(|r| r.plugin.clone());
                        (running, state.pulling)
                    };
                    let mut current = lock(&entry.users);
                    for user in &users {
                        if current.iter().any(|u| Arc::ptr_eq(u, user)) {
                            continue;
                        }
                        if let Some(plugin) = &running {
                            user.install_plugin(plugin.clone());
                        }
                        if pulling {
                            user.report_plugin_pulling(true);
                        }
                    }
                    *current = users;
                }
                None => {
                    plugins.insert(
                        name.clone(),
                        Arc::new(Entry {
                            users: Mutex::new(users),
                            state: Mutex::new(State::default()),
                            loading: tokio::sync::Mutex::new(()),
                        }),
                    );
                    new.push(name);
                }
            }
        }
        new
    }

    fn entry(&self, name: &str) -> Option<Arc<Entry>> {
        read(&self.plugins).get(name).cloned()
    }

    /// The plugins folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether some handler uses the plugin `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.entry(name).is_some()
    }

    /// The names of every plugin in use, sorted.
    pub fn names(&self) -> Vec<String> {
        read(&self.plugins).keys().cloned().collect()
    }

    /// Whether a [`super::PluginWatcher`] reloads plugins when their files change.
    pub fn is_watched(&self) -> bool {
        self.watching.load(Ordering::Relaxed)
    }

    /// Records whether a watcher reloads plugins when their files change.
    pub fn set_watched(&self, watched: bool) {
        self.watching.store(watched, Ordering::Relaxed);
    }

    /// Makes `oci` the settings of the pulls that start from now on.
    pub fn set_oci(&self, oci: OciSpec) {
        *write(&self.oci) = oci;
    }

    /// Abandons every load under way and refuses new ones (the daemon shuts down).
    pub fn shut_down(&self) {
        self.stopping.send_replace(true);
    }

    /// Loads every plugin once; failures are recorded, not returned.
    pub async fn load_all(&self) {
        let names = self.names();
        futures::future::join_all(names.iter().map(|name| self.load(name, true))).await;
    }

    /// Loads the plugin `name` from its file and swaps it into every handler using it.
    /// Unless `force`, a file whose content is the running version is not compiled again.
    /// On failure the running version (if any) stays in place, and the error is both
    /// recorded (for /status and `GET /plugins`) and returned.
    pub async fn load(&self, name: &str, force: bool) -> Result<Reloaded> {
        let entry = self
            .entry(name)
            .ok_or_else(|| Error::Unknown(name.to_string()))?;
        let mut stopping = self.stopping.subscribe();
        tokio::select! {
            biased;
            _ = stopping.wait_for(|stopping| *stopping) => Err(Error::Abandoned(name.to_string())),
            loaded = self.load_entry(name, &entry, force) => loaded,
        }
    }

    /// [`PluginRegistry::load`] of `entry`, not abandoned.
    async fn load_entry(&self, name: &str, entry: &Entry, force: bool) -> Result<Reloaded> {
        let _loading = entry.loading.lock().await;
        let oci = read(&self.oci).clone();
        let PluginFile { bytes, sha256 } = match fetch(&self.dir, name, &oci).await {
            Ok(file) => file,
            Err(error) => {
                self.record_failure(entry, &error, !error.is_file_gone());
                return Err(error);
            }
        };
        {
            let mut state = lock(&entry.state);
            state.file_present = true;
            let same = state.running.as_ref().is_some_and(|r| r.sha256 == sha256);
            if same && !force && state.last_error.is_none() {
                return Ok(Reloaded::Unchanged);
            }
        }
        let size = bytes.len();
        match self.host.compile(name, bytes).await {
            Ok(plugin) => {
                let plugin = Arc::new(plugin);
                for user in lock(&entry.users).iter() {
                    user.install_plugin(plugin.clone());
                }
                let mut state = lock(&entry.state);
                state.running = Some(Running {
                    plugin,
                    sha256,
                    size,
                    loaded_at: SystemTime::now(),
                });
                state.last_error = None;
                state.swaps += 1;
                tracing::info!(plugin = name, size, sha256 = %state.running.as_ref().map_or("", |r| &r.sha256), "plugin loaded");
                Ok(Reloaded::Swapped)
            }
            Err(error) => {
                self.record_failure(entry, &error, true);
                Err(error)
            }
        }
    }

    /// Pulls the `oci://` plugin `name` on a task of its own, trying again with a doubling
    /// backoff until a version runs, no handler uses it any more or the daemon shuts down
    /// (see the module docs). Its users are told it is being pulled meanwhile. Nothing
    /// happens when a version already runs or a background pull is under way.
    pub fn pull_in_background(self: &Arc<Self>, name: &str) {
        let Some(entry) = self.entry(name) else {
            return;
        };
        {
            let mut state = lock(&entry.state);
            if state.pulling || state.running.is_some() {
                return;
            }
            state.pulling = true;
            state.pull_failures = 0;
        }
        for user in lock(&entry.users).iter() {
            user.report_plugin_pulling(true);
        }
        let stopping = self.stopping.subscribe();
        tokio::spawn(pull_until_loaded(
            Arc::downgrade(self),
            name.to_string(),
            entry,
            stopping,
        ));
    }

    /// Records a failed load in the plugin's state and in each handler using it.
    fn record_failure(&self, entry: &Entry, error: &Error, file_present: bool) {
        let problem = {
            let mut state = lock(&entry.state);
            state.file_present = file_present;
            state.last_error = Some(error.to_string());
            match &state.running {
                Some(running) => format!(
                    "{error}; still running the version loaded at {} (sha256 {})",
                    rfc3339(running.loaded_at),
                    running.sha256
                ),
                None => error.to_string(),
            }
        };
        for user in lock(&entry.users).iter() {
            user.report_plugin_problem(problem.clone());
        }
    }

    /// Every plugin in use, by name.
    pub fn views(&self) -> Vec<PluginView> {
        read(&self.plugins)
            .iter()
            .map(|(name, entry)| self.view_of(name, entry))
            .collect()
    }

    /// The plugin `name`, if some handler uses it.
    pub fn view(&self, name: &str) -> Option<PluginView> {
        self.entry(name).map(|entry| self.view_of(name, &entry))
    }

    fn view_of(&self, name: &str, entry: &Entry) -> PluginView {
        let state = lock(&entry.state);
        PluginView {
            name: name.to_string(),
            file: if Reference::is_oci(name) || super::builtin::is_builtin(name) {
                name.to_string()
            } else {
                plugin_path(&self.dir, name).display().to_string()
            },
            file_present: state.file_present,
            loaded: state.running.is_some(),
            sha256: state.running.as_ref().map(|r| r.sha256.clone()),
            size: state.running.as_ref().map(|r| r.size),
            loaded_at: state.running.as_ref().map(|r| rfc3339(r.loaded_at)),
            last_error: state.last_error.clone(),
            swaps: state.swaps,
            pulling: state.pulling,
            pull_failures: state.pull_failures,
            handlers: lock(&entry.users)
                .iter()
                .map(|u| u.user_name().to_string())
                .collect(),
        }
    }
}

/// The loop of [`PluginRegistry::pull_in_background`]: holds the registry only while a try
/// runs, and ends when `entry` has a running version, is no longer the plugin's entry, or
/// the daemon shuts down.
async fn pull_until_loaded(
    registry: Weak<PluginRegistry>,
    name: String,
    entry: Arc<Entry>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut delay = FIRST_PULL_RETRY;
    loop {
        let Some(plugins) = registry.upgrade() else {
            break;
        };
        let current = plugins
            .entry(&name)
            .is_some_and(|e| Arc::ptr_eq(&e, &entry));
        if !current || *stopping.borrow() || lock(&entry.state).running.is_some() {
            break;
        }
        match plugins.load(&name, true).await {
            Ok(_) | Err(Error::Abandoned(_) | Error::Unknown(_)) => break,
            Err(error) => {
                lock(&entry.state).pull_failures += 1;
                tracing::warn!(plugin = %name, error = %error, retry_in = ?delay, "pull failed; it is tried again");
            }
        }
        drop(plugins);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stopping.wait_for(|stopping| *stopping) => break,
        }
        delay = (delay * 2).min(MAX_PULL_RETRY);
    }
    lock(&entry.state).pulling = false;
    for user in lock(&entry.users).iter() {
        user.report_plugin_pulling(false);
    }
}
