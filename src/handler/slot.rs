//! The plugin slot: the version of its plugin a handler's workers call. The plugin
//! registry swaps new versions in through [`PluginUser`]; a worker takes the newest version
//! for each event, so calls in flight finish on the version they started with.
//!
//! # Decision: a reload that names another plugin keeps the old one running until it loads
//!
//! A config reload that changes a handler's `plugin:` replaces the handler. Its new plugin
//! may not load (a digest the registry does not have, a missing file): the new handler then
//! had no plugin, queued every event and looked ready. So the new handler starts with the
//! version the handler it replaces was running, as a stand-in ([`Handler::keep_running`]):
//! every failure to load the new plugin is reported with the name of the one still running,
//! as a broken file is, and the first version of the new plugin that loads replaces it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::Handler;
use crate::plugin::{self, Plugin, PluginUser};
use crate::util::lock;

/// The running version (none until the first load succeeds), the last load problem, and
/// whether the plugin is being pulled from a registry.
#[derive(Debug)]
pub(super) struct Slot {
    plugin: watch::Sender<Option<Arc<Plugin>>>,
    error: Mutex<Option<String>>,
    pulling: AtomicBool,
    /// The plugin whose version runs in place of the handler's own, until that loads.
    stand_in: Mutex<Option<String>>,
}

impl Default for Slot {
    fn default() -> Self {
        Self {
            plugin: watch::channel(None).0,
            error: Mutex::new(None),
            pulling: AtomicBool::new(false),
            stand_in: Mutex::new(None),
        }
    }
}

impl Slot {
    /// Follows the running version; a version once set is only ever replaced.
    pub(super) fn subscribe(&self) -> watch::Receiver<Option<Arc<Plugin>>> {
        self.plugin.subscribe()
    }

    /// Whether a version is running.
    pub(super) fn is_loaded(&self) -> bool {
        self.plugin.borrow().is_some()
    }

    /// Why the last load failed, if it did.
    pub(super) fn error(&self) -> Option<String> {
        lock(&self.error).clone()
    }

    /// The running version, if any.
    pub(super) fn current(&self) -> Option<Arc<Plugin>> {
        self.plugin.borrow().clone()
    }

    /// Swaps `plugin` in and clears any recorded problem.
    pub(super) fn install(&self, plugin: Arc<Plugin>) {
        *lock(&self.error) = None;
        *lock(&self.stand_in) = None;
        self.plugin.send_replace(Some(plugin));
    }

    /// Runs `plugin`, a version of the plugin `from`, until the slot's own plugin loads.
    pub(super) fn stand_in(&self, plugin: Arc<Plugin>, from: &str) {
        *lock(&self.stand_in) = Some(from.to_string());
        self.plugin.send_replace(Some(plugin));
    }

    /// Records why loading a new version failed, and which plugin still runs in its place
    /// if one does; returns the problem as recorded.
    pub(super) fn report(&self, problem: String) -> String {
        let problem = match lock(&self.stand_in).as_deref() {
            Some(from) => format!(
                "{problem}; still running {from}, the plugin before the config changed, until this one loads"
            ),
            None => problem,
        };
        *lock(&self.error) = Some(problem.clone());
        problem
    }

    /// Whether the plugin is being pulled from a registry in the background.
    pub(super) fn is_pulling(&self) -> bool {
        self.pulling.load(Ordering::Relaxed)
    }

    /// Records whether the plugin is being pulled from a registry in the background.
    pub(super) fn set_pulling(&self, pulling: bool) {
        self.pulling.store(pulling, Ordering::Relaxed);
    }
}

impl Handler {
    /// Installs a freshly loaded plugin, or records why loading failed (a plugin already
    /// running stays in place).
    pub fn set_plugin(&self, loaded: plugin::Result<Plugin>) {
        match loaded {
            Ok(plugin) => self.install_plugin(Arc::new(plugin)),
            Err(e) => self.report_plugin_problem(e.to_string()),
        }
    }

    /// Swaps `plugin` in and clears any recorded problem. Calls already running finish on
    /// the version they started with; every call that starts afterwards uses `plugin`.
    pub fn install_plugin(&self, plugin: Arc<Plugin>) {
        if self.spec.batch.is_some() && !plugin.handles_batches() {
            self.report_plugin_problem(plugin::lacks_handle_batch(plugin.name()));
            return;
        }
        self.slot.install(plugin);
        if lock(&self.breaker).lift() {
            tracing::info!(handler = %self.name, "quarantine lifted: a new plugin version");
        }
    }

    /// Records a problem with the plugin's file (shown in /status as `plugin_error`); the
    /// plugin running now, if any, stays in place.
    pub fn report_plugin_problem(&self, problem: String) {
        let problem = self.slot.report(problem);
        tracing::error!(handler = %self.name, error = %problem, "plugin problem");
    }

    /// The version the handler runs now, if any, and the name of the plugin it is a
    /// version of (the handler's own, or the one standing in for it).
    pub fn running_plugin(&self) -> Option<(Arc<Plugin>, String)> {
        let plugin = self.slot.current()?;
        let name = lock(&self.slot.stand_in)
            .clone()
            .unwrap_or_else(|| self.spec.plugin.clone());
        Some((plugin, name))
    }

    /// Runs `plugin`, the version of the plugin `from` that the handler this one replaces
    /// was running, until the handler's own plugin loads (see the module docs).
    pub fn keep_running(&self, plugin: Arc<Plugin>, from: &str) {
        tracing::info!(handler = %self.name, running = from, plugin = %self.spec.plugin, "the plugin before the config changed runs until the new one loads");
        self.slot.stand_in(plugin, from);
    }
}

impl PluginUser for Handler {
    fn user_name(&self) -> &str {
        self.name()
    }

    fn plugin_name(&self) -> &str {
        &self.spec.plugin
    }

    fn install_plugin(&self, plugin: Arc<Plugin>) {
        Handler::install_plugin(self, plugin);
    }

    fn report_plugin_problem(&self, problem: String) {
        Handler::report_plugin_problem(self, problem);
    }

    fn report_plugin_pulling(&self, pulling: bool) {
        self.slot.set_pulling(pulling);
    }
}
