//! What plugins log through the host: a line per call of `log`, fanned out to whoever
//! listens (the demo prints them, tests read them) and to the daemon's own log.

use serde::Serialize;
use tokio::sync::broadcast;

use super::bindings::switchyard::plugin::host::Level;

/// One line a plugin logged.
#[derive(Debug, Clone, Serialize)]
pub struct PluginLog {
    /// The handler whose plugin logged it.
    pub handler: String,
    /// Severity.
    pub level: &'static str,
    /// The message.
    pub message: String,
}

/// Fans plugin log lines out to subscribers. Cloning gives another handle to the same feed.
#[derive(Debug, Clone)]
pub struct PluginLogs {
    feed: broadcast::Sender<PluginLog>,
}

impl Default for PluginLogs {
    fn default() -> Self {
        Self {
            feed: broadcast::channel(4096).0,
        }
    }
}

impl PluginLogs {
    /// Receives every line logged from now on (a slow receiver misses the oldest lines).
    pub fn subscribe(&self) -> broadcast::Receiver<PluginLog> {
        self.feed.subscribe()
    }

    /// Records one line: into the daemon's log and to every subscriber.
    pub fn record(&self, handler: &str, level: Level, message: String) {
        let level = match level {
            Level::Trace => {
                tracing::trace!(handler, "{message}");
                "trace"
            }
            Level::Debug => {
                tracing::debug!(handler, "{message}");
                "debug"
            }
            Level::Info => {
                tracing::info!(handler, "{message}");
                "info"
            }
            Level::Warn => {
                tracing::warn!(handler, "{message}");
                "warn"
            }
            Level::Error => {
                tracing::error!(handler, "{message}");
                "error"
            }
        };
        // Nobody listening is fine.
        let _ = self.feed.send(PluginLog {
            handler: handler.to_string(),
            level,
            message,
        });
    }
}
