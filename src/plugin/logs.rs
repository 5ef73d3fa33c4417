//! What plugins log through the host: a line per call of `log`, fanned out to whoever
//! listens (the demo prints them, tests read them) and to the daemon's own log.
//!
//! A line logged during a call is about one event: in the daemon's log it sits in an
//! `event` span naming the route and object. The span is made when the plugin logs, not
//! for every call: most calls log nothing, and a span per call (its fields formatted by
//! the log layer) cost a few percent of the daemon's CPU per event (BENCHMARKS.md).
//!
//! # Decision: a plugin's log is held to limits per line and per call, in the host
//!
//! A plugin decides what it logs, and the daemon's log (and whatever ships it) pays: five
//! calls logging 40 MiB each would be 200 MB. So each call's lines go through a
//! [`CallLog`] before they are written: a line longer than the handler's `log_line_max`
//! is cut there, with a marker saying how much was cut, and once a call has logged
//! `log_call_max` bytes or `log_call_lines` lines its later lines are dropped; at the end
//! of the call one line says how many. Both are counted per handler
//! (`switchyard_handler_log_limited_lines_total`, `..._bytes_total`). The limits are per
//! call rather than per second: a call is the unit a plugin is charged for (its memory,
//! its deadline), and a per-call cap needs no clock and no state between calls.

use std::future::Future;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use serde::Serialize;
use tokio::sync::broadcast;

use crate::config::LogLimits;
use crate::metrics::{LogLimitLabel, Metrics, NameLabel};

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
        // The plugin may log a secret value of its config.
        let message = crate::util::redact::redact_owned(message);
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

/// A handler's counters of what its log limits held back (see the module docs). The
/// default counts into counters no registry shows (`check`, `replay`, tests).
#[derive(Debug, Clone, Default)]
pub struct LogCounters {
    truncated: Counter,
    dropped: Counter,
    bytes: Counter,
}

impl LogCounters {
    /// The counters of `handler` in `metrics`.
    pub fn of(metrics: &Metrics, handler: &str) -> Self {
        let families = &metrics.log_limits;
        let lines = |kind: &str| {
            families.lines.get_or_create_owned(&LogLimitLabel {
                name: handler.to_string(),
                kind: kind.to_string(),
            })
        };
        Self {
            truncated: lines("truncated"),
            dropped: lines("dropped"),
            bytes: families.bytes.get_or_create_owned(&NameLabel {
                name: handler.to_string(),
            }),
        }
    }
}

/// What one call has logged, held to its handler's [`LogLimits`]: a line longer than
/// `line_bytes` is cut, and once the call has logged `call_bytes` or `call_lines` every
/// later line is dropped (a gap in the middle would mislead more than a cut at the end),
/// for [`CallLog::end`] to report.
#[derive(Debug)]
pub struct CallLog {
    limits: LogLimits,
    /// Bytes and lines written so far.
    bytes: u64,
    lines: u32,
    /// Lines dropped, and their bytes.
    dropped_lines: u64,
    dropped_bytes: u64,
}

impl CallLog {
    /// A call that has logged nothing yet.
    pub fn new(limits: LogLimits) -> Self {
        Self {
            limits,
            bytes: 0,
            lines: 0,
            dropped_lines: 0,
            dropped_bytes: 0,
        }
    }

    /// The line to write for `message`: as it is, or cut to the line limit with a marker;
    /// `None` once the call is past its limits. What is held back counts in `counters`.
    pub fn admit(&mut self, mut message: String, counters: &LogCounters) -> Option<String> {
        let length = message.len() as u64;
        if length > self.limits.line_bytes {
            let keep = message
                .floor_char_boundary(usize::try_from(self.limits.line_bytes).unwrap_or(usize::MAX));
            let cut = length - keep as u64;
            message.truncate(keep);
            message.push_str(&format!(" … [{cut} more bytes cut: log_line_max]"));
            counters.truncated.inc();
            counters.bytes.inc_by(cut);
        }
        let kept = message.len() as u64;
        let fits = self.dropped_lines == 0
            && self.lines < self.limits.call_lines
            && self.bytes.saturating_add(kept) <= self.limits.call_bytes;
        if !fits {
            self.dropped_lines += 1;
            self.dropped_bytes += kept;
            counters.dropped.inc();
            counters.bytes.inc_by(kept);
            return None;
        }
        self.lines += 1;
        self.bytes += kept;
        Some(message)
    }

    /// The line that says how much the call dropped, if it dropped anything; called when
    /// the call ends, however it ends.
    pub fn end(&mut self) -> Option<String> {
        if self.dropped_lines == 0 {
            return None;
        }
        let note = format!(
            "{} more log line(s) of this call dropped ({}): a call may log {} line(s) or {} (log_call_lines, log_call_max)",
            self.dropped_lines,
            size(self.dropped_bytes),
            self.limits.call_lines,
            size(self.limits.call_bytes),
        );
        self.dropped_lines = 0;
        self.dropped_bytes = 0;
        Some(note)
    }
}

/// `bytes` for messages: `512 bytes`, `16 KiB`, `40 MiB`, `1.5 MiB`.
fn size(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    if bytes >= KIB << 10 {
        super::mib(bytes)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else if bytes >= KIB {
        format!("{:.1} KiB", bytes as f64 / KIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(line_bytes: u64, call_bytes: u64, call_lines: u32) -> LogLimits {
        LogLimits {
            line_bytes,
            call_bytes,
            call_lines,
        }
    }

    #[test]
    fn a_long_line_is_cut_at_a_character_boundary_saying_how_much_was_cut() {
        let counters = LogCounters::default();
        let mut log = CallLog::new(limits(5, 1 << 20, 10));
        assert_eq!(
            log.admit("short".into(), &counters).as_deref(),
            Some("short")
        );
        // "é" is two bytes: the cut falls before it, not inside it.
        let line = log.admit("abcdé and more".into(), &counters).unwrap();
        assert_eq!(line, "abcd … [11 more bytes cut: log_line_max]");
        assert_eq!(counters.truncated.get(), 1);
        assert_eq!(counters.bytes.get(), 11);
        assert_eq!(log.end(), None);
    }

    #[test]
    fn past_a_calls_limits_every_later_line_is_dropped_and_the_end_says_so() {
        let counters = LogCounters::default();
        let mut log = CallLog::new(limits(1 << 10, 10, 3));
        assert!(log.admit("12345".into(), &counters).is_some());
        assert!(
            log.admit("123456".into(), &counters).is_none(),
            "past 10 bytes"
        );
        assert!(log.admit("1".into(), &counters).is_none(), "after a drop");
        assert_eq!(counters.dropped.get(), 2);
        assert_eq!(counters.bytes.get(), 7);
        assert_eq!(
            log.end().as_deref(),
            Some(
                "2 more log line(s) of this call dropped (7 bytes): a call may log 3 line(s) or 10 bytes (log_call_lines, log_call_max)"
            )
        );
        assert_eq!(log.end(), None, "said once");

        let mut log = CallLog::new(limits(1 << 10, 1 << 20, 2));
        for _ in 0..2 {
            assert!(log.admit(String::new(), &counters).is_some());
        }
        assert!(
            log.admit(String::new(), &counters).is_none(),
            "past 2 lines"
        );
    }

    #[test]
    fn sizes_read_in_the_largest_unit_that_fits() {
        assert_eq!(size(512), "512 bytes");
        assert_eq!(size(16 << 10), "16 KiB");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(40 << 20), "40 MiB");
    }
}
