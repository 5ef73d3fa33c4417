//! Watches the plugins folder and reloads a plugin when its file changes.
//!
//! `notify` reports changes to the folder (not recursive). Events for `NAME.wasm` of a
//! plugin some handler uses are debounced per file: the plugin is loaded once the file has
//! been quiet for [`QUIET`], so a file written in several steps is usually read once,
//! complete. Written in place, renamed over (write a temporary file, then rename, as
//! `scripts/build-plugins.sh` does), deleted or created: each ends in one
//! [`PluginRegistry::load`], which compiles off the async runtime, checks the world and
//! swaps only a good file in. A file still half-written when it is read fails to compile,
//! the old version keeps running, and the write that completes it triggers another load.
//! Other files in the folder (temporaries, plugins nobody uses) are ignored.
//!
//! Each load runs as a task of its own: the loop that collects events never waits for one,
//! so a file that is slow to read or compile never delays reloads of other plugins or
//! stopping. Loads of one plugin still run one at a time, in order (the registry sees to
//! that).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::{Error, PluginRegistry, Result};
use crate::util::changes_content;

/// How long a plugin file must stay unchanged before it is loaded.
pub const QUIET: Duration = Duration::from_millis(250);

/// A running folder watcher. Stop it with [`PluginWatcher::stop`].
pub struct PluginWatcher {
    watcher: notify::RecommendedWatcher,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    registry: Arc<PluginRegistry>,
}

impl PluginWatcher {
    /// Starts watching the registry's plugins folder, loading a plugin [`QUIET`] after its
    /// file last changed. Fails if the folder cannot be watched (for example, it does not
    /// exist).
    pub fn start(registry: Arc<PluginRegistry>) -> Result<Self> {
        Self::with_quiet_period(registry, QUIET)
    }

    /// Like [`PluginWatcher::start`] with another quiet period.
    pub fn with_quiet_period(registry: Arc<PluginRegistry>, quiet: Duration) -> Result<Self> {
        let dir = registry.dir().to_path_buf();
        let watch_error = |e: notify::Error| Error::Watch {
            dir: dir.display().to_string(),
            reason: e.to_string(),
        };
        let (events_tx, events) = mpsc::unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |event| {
            // The receiver is gone only once the watcher is stopping.
            let _ = events_tx.send(event);
        })
        .map_err(watch_error)?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(watch_error)?;
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(debounce(registry.clone(), events, stopped, quiet));
        registry.set_watched(true);
        tracing::info!(dir = %dir.display(), "watching the plugins folder");
        Ok(Self {
            watcher,
            stop,
            task,
            registry,
        })
    }

    /// Stops watching. Loads under way are abandoned: each either swapped its new version in
    /// already or leaves the running one in place.
    pub async fn stop(self) {
        let Self {
            watcher,
            stop,
            task,
            registry,
        } = self;
        drop(watcher);
        let _ = stop.send(());
        let _ = task.await;
        registry.set_watched(false);
    }
}

/// Collects events per plugin and loads each plugin once its file has been quiet.
async fn debounce(
    registry: Arc<PluginRegistry>,
    mut events: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
    mut stopped: oneshot::Receiver<()>,
    quiet: Duration,
) {
    let mut due: HashMap<String, Instant> = HashMap::new();
    // Dropped on return, which aborts loads still under way.
    let mut loads = JoinSet::new();
    loop {
        let next = due.values().min().copied();
        tokio::select! {
            _ = &mut stopped => return,
            event = events.recv() => match event {
                None => return,
                Some(Ok(event)) => {
                    if !changes_content(&event.kind) {
                        continue;
                    }
                    for path in &event.paths {
                        if let Some(name) = plugin_name(path).filter(|n| registry.contains(n)) {
                            due.insert(name.to_string(), Instant::now() + quiet);
                        }
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(dir = %registry.dir().display(), error = %e, "plugins folder watch error");
                }
            },
            _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let now = Instant::now();
                let ready: Vec<String> = due
                    .iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(name, _)| name.clone())
                    .collect();
                for name in ready {
                    due.remove(&name);
                    loads.spawn(load_changed(registry.clone(), name));
                }
            }
            Some(_) = loads.join_next(), if !loads.is_empty() => {}
        }
    }
}

/// Loads a plugin whose file changed. Runs as a task of its own, so a slow or failing load
/// never holds up events for other files, nor stopping.
async fn load_changed(registry: Arc<PluginRegistry>, name: String) {
    match registry.load(&name, false).await {
        Ok(outcome) => tracing::debug!(plugin = %name, ?outcome, "plugin file changed"),
        Err(e) => {
            tracing::warn!(plugin = %name, error = %e, "changed plugin file not loaded; the running version stays");
        }
    }
}

/// `NAME` for a path `.../NAME.wasm`.
fn plugin_name(path: &Path) -> Option<&str> {
    path.file_name()?.to_str()?.strip_suffix(".wasm")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_wasm_files_name_plugins() {
        assert_eq!(
            plugin_name(Path::new("/p/log-events.wasm")),
            Some("log-events")
        );
        assert_eq!(plugin_name(Path::new("/p/.log-events.wasm.tmp")), None);
        assert_eq!(plugin_name(Path::new("/p/README.md")), None);
    }
}
