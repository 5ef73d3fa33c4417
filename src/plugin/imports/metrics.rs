//! The `metrics` import: counters, gauges and histograms plugins record, registered on the
//! daemon's `/metrics` as `switchyard_plugin_NAME` with a `handler` label.
//!
//! Plugins choose names and label values at run time, so every call is checked: the name
//! and label names must be valid Prometheus names, a name keeps the type it was first used
//! with, and each handler may create at most [`MAX_SERIES_PER_HANDLER`] series, so a plugin
//! cannot grow the daemon's memory without bound.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::super::bindings::switchyard::plugin::metrics as wit;
use crate::metrics::Metrics;
use crate::plugin::host::CallState;

/// Distinct series (name and label values) one handler's plugin may create.
pub const MAX_SERIES_PER_HANDLER: usize = 1000;

/// The prefix of every plugin metric family.
pub const PREFIX: &str = "switchyard_plugin_";

/// The label naming the handler, set by the host.
const HANDLER_LABEL: &str = "handler";

/// A series' labels: `handler` first, then the plugin's sorted by name.
type Labels = Vec<(String, String)>;

/// Prometheus' default histogram buckets, in seconds.
fn default_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// The kind of a plugin metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// Only goes up.
    Counter,
    /// Set to any value.
    Gauge,
    /// Observations counted in buckets.
    Histogram,
}

impl MetricType {
    /// `counter`, `gauge` or `histogram`.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
        }
    }
}

/// One registered family.
enum PluginFamily {
    Counter(Family<Labels, Counter<f64, AtomicU64>>),
    Gauge(Family<Labels, Gauge<f64, AtomicU64>>),
    Histogram(Family<Labels, Histogram, fn() -> Histogram>),
}

impl PluginFamily {
    fn kind(&self) -> MetricType {
        match self {
            PluginFamily::Counter(_) => MetricType::Counter,
            PluginFamily::Gauge(_) => MetricType::Gauge,
            PluginFamily::Histogram(_) => MetricType::Histogram,
        }
    }
}

#[derive(Default)]
struct State {
    families: HashMap<String, PluginFamily>,
    /// Per handler: the series it created, as (name, labels).
    series: HashMap<String, HashSet<(String, Labels)>>,
}

/// The registry of plugin metrics, shared by every handler.
pub struct PluginMetrics {
    metrics: Arc<Metrics>,
    state: Mutex<State>,
    max_series: usize,
}

impl std::fmt::Debug for PluginMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginMetrics")
            .field("max_series", &self.max_series)
            .finish()
    }
}

impl PluginMetrics {
    /// Plugin metrics registered in `metrics`, [`MAX_SERIES_PER_HANDLER`] series per handler.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self::with_max_series(metrics, MAX_SERIES_PER_HANDLER)
    }

    /// Like [`PluginMetrics::new`] with another cap on series per handler.
    pub fn with_max_series(metrics: Arc<Metrics>, max_series: usize) -> Self {
        Self {
            metrics,
            state: Mutex::new(State::default()),
            max_series,
        }
    }

    /// Records `value` in the metric `name` of type `kind` for `handler`, with the plugin's
    /// `labels`. Errors say what was wrong, for the plugin.
    pub fn record(
        &self,
        handler: &str,
        kind: MetricType,
        name: &str,
        value: f64,
        labels: Vec<(String, String)>,
    ) -> Result<(), String> {
        check_metric_name(name)?;
        let name = match kind {
            // The encoder adds `_total` to counters; do not double it.
            MetricType::Counter => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        match kind {
            MetricType::Counter if !(value.is_finite() && value >= 0.0) => {
                return Err(format!(
                    "counter {name:?}: cannot add {value}: a counter only goes up by finite amounts"
                ));
            }
            MetricType::Histogram if !value.is_finite() => {
                return Err(format!(
                    "histogram {name:?}: cannot observe {value}: not a finite number"
                ));
            }
            MetricType::Gauge if value.is_nan() => {
                return Err(format!("gauge {name:?}: cannot set NaN"));
            }
            _ => {}
        }
        let labels = series_labels(handler, labels)?;
        let mut state = crate::util::lock(&self.state);
        if let Some(existing) = state.families.get(name)
            && existing.kind() != kind
        {
            return Err(format!(
                "metric {name:?} is a {}, not a {}: use another name",
                existing.kind().as_str(),
                kind.as_str()
            ));
        }
        let series = (name.to_string(), labels);
        let known = state.series.entry(handler.to_string()).or_default();
        if !known.contains(&series) {
            if known.len() >= self.max_series {
                return Err(format!(
                    "metric {name:?}: handler {handler:?} already has {} series, the most a handler may have; reuse label values or drop labels",
                    self.max_series
                ));
            }
            known.insert(series.clone());
        }
        let labels = series.1;
        if !state.families.contains_key(name) {
            let family = self.register(name, kind);
            state.families.insert(name.to_string(), family);
        }
        match &state.families[name] {
            PluginFamily::Counter(f) => {
                f.get_or_create(&labels).inc_by(value);
            }
            PluginFamily::Gauge(f) => {
                f.get_or_create(&labels).set(value);
            }
            PluginFamily::Histogram(f) => f.get_or_create(&labels).observe(value),
        }
        Ok(())
    }

    fn register(&self, name: &str, kind: MetricType) -> PluginFamily {
        let full = format!("{PREFIX}{name}");
        let help = format!("A {} recorded by handler plugins", kind.as_str());
        match kind {
            MetricType::Counter => {
                let f = Family::default();
                self.metrics.register(&full, &help, f.clone());
                PluginFamily::Counter(f)
            }
            MetricType::Gauge => {
                let f = Family::default();
                self.metrics.register(&full, &help, f.clone());
                PluginFamily::Gauge(f)
            }
            MetricType::Histogram => {
                let f: Family<Labels, Histogram, fn() -> Histogram> =
                    Family::new_with_constructor(default_histogram);
                self.metrics.register(&full, &help, f.clone());
                PluginFamily::Histogram(f)
            }
        }
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn check_metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "invalid metric name {name:?}: use letters, digits, '_' and ':', not starting with a digit"
        ))
    }
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`.
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The series' labels: `handler`, then the plugin's sorted by name (so their order does not
/// make another series); an error for an invalid, reserved or repeated label name.
fn series_labels(handler: &str, mut labels: Vec<(String, String)>) -> Result<Labels, String> {
    labels.sort();
    for (i, (name, _)) in labels.iter().enumerate() {
        if !is_label_name(name) || name.starts_with("__") {
            return Err(format!(
                "invalid label name {name:?}: use letters, digits and '_', not starting with a digit or '__'"
            ));
        }
        if name == HANDLER_LABEL {
            return Err(format!(
                "the label {HANDLER_LABEL:?} is set by the host to the handler's name"
            ));
        }
        if i > 0 && labels[i - 1].0 == *name {
            return Err(format!("label {name:?} is given twice"));
        }
    }
    let mut all = Vec::with_capacity(labels.len() + 1);
    all.push((HANDLER_LABEL.to_string(), handler.to_string()));
    all.extend(labels);
    Ok(all)
}

impl CallState {
    fn record_metric(
        &self,
        kind: MetricType,
        name: &str,
        value: f64,
        labels: Vec<(String, String)>,
    ) -> Result<(), String> {
        let ctx = self.context();
        let captured = ctx.capturing().map(|c| (c, labels.clone()));
        match ctx.metrics.as_ref() {
            Some(metrics) => metrics.record(ctx.handler(), kind, name, value, labels)?,
            None => return Err("metrics are not available to this plugin call".into()),
        }
        if let Some((capture, labels)) = captured {
            capture.record_metric(kind, name, value, labels);
        }
        Ok(())
    }
}

impl wit::Host for CallState {
    async fn counter_add(
        &mut self,
        name: String,
        value: f64,
        labels: wit::Labels,
    ) -> wasmtime::Result<Result<(), String>> {
        Ok(self.record_metric(MetricType::Counter, &name, value, labels))
    }

    async fn gauge_set(
        &mut self,
        name: String,
        value: f64,
        labels: wit::Labels,
    ) -> wasmtime::Result<Result<(), String>> {
        Ok(self.record_metric(MetricType::Gauge, &name, value, labels))
    }

    async fn histogram_observe(
        &mut self,
        name: String,
        value: f64,
        labels: wit::Labels,
    ) -> wasmtime::Result<Result<(), String>> {
        Ok(self.record_metric(MetricType::Histogram, &name, value, labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn plugin_metrics_appear_with_the_handler_label() {
        let metrics = Arc::new(Metrics::new());
        let plugin = PluginMetrics::new(metrics.clone());
        plugin
            .record(
                "h",
                MetricType::Gauge,
                "pods_on_node",
                2.0,
                labels(&[("node", "n1")]),
            )
            .unwrap();
        plugin
            .record("h", MetricType::Counter, "seen_total", 1.0, vec![])
            .unwrap();
        let text = metrics.encode();
        assert!(
            text.contains("switchyard_plugin_pods_on_node{handler=\"h\",node=\"n1\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("switchyard_plugin_seen_total{handler=\"h\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn bad_names_reused_names_and_reserved_labels_are_errors() {
        let plugin = PluginMetrics::new(Arc::new(Metrics::new()));
        let err = plugin
            .record("h", MetricType::Gauge, "1bad-name", 1.0, vec![])
            .unwrap_err();
        assert!(err.starts_with("invalid metric name"), "{err}");
        plugin
            .record("h", MetricType::Gauge, "depth", 1.0, vec![])
            .unwrap();
        let err = plugin
            .record("other", MetricType::Counter, "depth", 1.0, vec![])
            .unwrap_err();
        assert!(err.contains("is a gauge, not a counter"), "{err}");
        let err = plugin
            .record(
                "h",
                MetricType::Gauge,
                "x",
                1.0,
                labels(&[("handler", "me")]),
            )
            .unwrap_err();
        assert!(err.contains("set by the host"), "{err}");
        let err = plugin
            .record("h", MetricType::Counter, "c", -1.0, vec![])
            .unwrap_err();
        assert!(err.contains("only goes up"), "{err}");
    }

    #[test]
    fn a_handler_cannot_create_more_series_than_its_cap() {
        let plugin = PluginMetrics::with_max_series(Arc::new(Metrics::new()), 3);
        for i in 0..3 {
            plugin
                .record(
                    "h",
                    MetricType::Gauge,
                    "g",
                    1.0,
                    labels(&[("i", &i.to_string())]),
                )
                .unwrap();
        }
        // An existing series can still be updated; a new one is refused.
        plugin
            .record("h", MetricType::Gauge, "g", 5.0, labels(&[("i", "0")]))
            .unwrap();
        let err = plugin
            .record("h", MetricType::Gauge, "g", 1.0, labels(&[("i", "9")]))
            .unwrap_err();
        assert!(err.contains("already has 3 series"), "{err}");
        // Another handler has a cap of its own.
        plugin
            .record("other", MetricType::Gauge, "g", 1.0, labels(&[("i", "9")]))
            .unwrap();
    }
}
