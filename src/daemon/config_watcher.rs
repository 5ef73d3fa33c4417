//! Reloads the config when its file changes.
//!
//! `notify` watches the file's folder (editors and `kubectl`-style tools often replace a
//! file by renaming a new one over it, which a watch on the file itself would lose). Events
//! for the config file are debounced: the reload runs once the file has been quiet for
//! [`QUIET`], and only if its content differs from what was last read, so saving an
//! unchanged file does nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::Shared;
use crate::util::changes_content;

/// How long the config file must stay unchanged before it is reloaded.
pub const QUIET: Duration = Duration::from_millis(250);

/// A running config file watcher. Stop it with [`ConfigWatcher::stop`].
pub struct ConfigWatcher {
    watcher: notify::RecommendedWatcher,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// The config file's folder cannot be watched.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {}: {source}", .dir.display())]
pub struct WatchError {
    /// The folder.
    pub dir: PathBuf,
    /// Why.
    #[source]
    pub source: notify::Error,
}

impl ConfigWatcher {
    /// Starts watching the running config's file.
    pub fn start(shared: Arc<Shared>) -> Result<Self, WatchError> {
        let file = shared.topology().config.source.clone();
        let file = std::fs::canonicalize(&file).unwrap_or(file);
        let dir = file
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        let (events_tx, events) = mpsc::unbounded_channel();
        let watched = file.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // Not reads: the debounce below reads the file after each change.
                if let Ok(event) = event
                    && changes_content(&event.kind)
                    && event.paths.contains(&watched)
                {
                    // The receiver is gone only once the watcher is stopping.
                    let _ = events_tx.send(());
                }
            })
            .map_err(|source| WatchError {
                dir: dir.clone(),
                source,
            })?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|source| WatchError {
                dir: dir.clone(),
                source,
            })?;
        let (stop, stopped) = oneshot::channel();
        let seen = std::fs::read(&file)
            .ok()
            .map(|b| Sha256::digest(&b).to_vec());
        let task = tokio::spawn(debounce(shared, file.clone(), seen, events, stopped));
        tracing::info!(file = %file.display(), "watching the config file");
        Ok(Self {
            watcher,
            stop,
            task,
        })
    }

    /// Stops watching; a reload under way finishes first.
    pub async fn stop(self) {
        drop(self.watcher);
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

async fn debounce(
    shared: Arc<Shared>,
    file: PathBuf,
    mut seen: Option<Vec<u8>>,
    mut events: mpsc::UnboundedReceiver<()>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut gone = false;
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            event = events.recv() => if event.is_none() {
                return;
            },
        }
        // Wait until the file has been quiet for QUIET.
        loop {
            tokio::select! {
                _ = &mut stopped => return,
                _ = tokio::time::sleep(QUIET) => break,
                event = events.recv() => if event.is_none() {
                    return;
                },
            }
        }
        let hash = match tokio::fs::read(&file).await {
            Ok(bytes) => {
                gone = false;
                Some(Sha256::digest(&bytes).to_vec())
            }
            // Quiet and still not there: deleted (a rename is done by now). Said once; the
            // next event tells when a file is there again.
            Err(e) => {
                if !gone {
                    tracing::warn!(file = %file.display(), error = %e, "the config file cannot be read: the running config stays, and a file written there is loaded");
                }
                gone = true;
                continue;
            }
        };
        if hash == seen {
            continue;
        }
        seen = hash;
        // The outcome is logged and shown in /status by the reload itself.
        let _ = shared.reload_from("file").await;
    }
}
