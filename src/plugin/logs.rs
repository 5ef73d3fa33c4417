//! What plugins log through the host: a line per call of `log`, fanned out to whoever
//! listens (the demo prints them, tests read them) and to the daemon's own log.
//!
//! A line logged during a call is about one event: in the daemon's log it sits in an
//! `event` span naming the route and object. The span is made when the plugin logs, not
//! for every call: most calls log nothing, and a span per call (its fields formatted by
//! the log layer) cost a few percent of the daemon's CPU per event (BENCHMARKS.md).

use std::future::Future;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::broadcast;

tokio::task_local! {
    static ABOUT: About;
}

/// The route and object the calls of a task are about, for the `event` span of what the
/// plugin logs meanwhile.
#[derive(Debug, Clone)]
pub struct About {
    /// The route that delivered the event.
    pub route: Arc<str>,
    /// The object's key, `namespace/name` or `name`.
    pub object: Arc<str>,
}

impl About {
    /// Runs `calls` with plugin log lines placed in an `event` span naming this route and
    /// object.
    pub async fn scope<F: Future>(self, calls: F) -> F::Output {
        ABOUT.scope(self, calls).await
    }
}

/// The `event` span for a line logged now: inside an [`About::scope`], naming its route
/// and object; otherwise none.
fn event_span() -> tracing::Span {
    ABOUT
        .try_with(
            |about| tracing::info_span!("event", route = %about.route, object = %about.object),
        )
        .unwrap_or_else(|_| tracing::Span::none())
}

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
        let span = event_span();
        let entered = span.enter();
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
        drop(entered);
        // Nobody listening is fine.
        let _ = self.feed.send(PluginLog {
            handler: handler.to_string(),
            level,
            message,
        });
    }
}
