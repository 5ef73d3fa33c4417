//! `switchyard replay`: each recorded event handed to its handler's plugin once, as the
//! daemon would call it (the handler's `config`, `timeout` and `memory`, attempt 1), with
//! no API server: writes are captured and cache reads see an empty cache (see
//! [`crate::plugin::imports::capture`]). A handler with `batch:` is called as the daemon
//! calls it, through `handle-batch`, each event in a batch of its own.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use super::events::{RecordedEvent, RecordedKind};
use crate::config::{Config, HandlerSpec, ResourceRef, RouteSource};
use crate::metrics::Metrics;
use crate::plugin::imports::PluginMetrics;
use crate::plugin::imports::capture::{Capture, CapturedMetric, CapturedRequest, CapturedWrite};
use crate::plugin::outbound::Outbound;
use crate::plugin::{
    CallLimits, Event, EventKind, HostContext, ItemOutcome, LogCounters, Outcome, Plugin,
    PluginHost, PluginLog, PluginLogs, loader,
};

/// What one call of the plugin ended with.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum ReplayOutcome {
    /// The event was handled.
    Done,
    /// The plugin asked to be called again after `ms` milliseconds.
    RequeueAfter {
        /// The delay asked for.
        ms: u64,
    },
    /// The plugin asked to retry the event (`handle-batch`'s `retry`), after at least `ms`
    /// milliseconds when it said.
    Retry {
        /// The least delay asked for.
        #[serde(skip_serializing_if = "Option::is_none")]
        ms: Option<u64>,
    },
    /// The plugin gave the event up (`handle-batch`'s `dead-letter`).
    DeadLetter {
        /// Why, as the plugin said.
        reason: String,
    },
    /// The plugin returned an error, trapped or ran past its deadline.
    Error {
        /// The error as the daemon would report it.
        error: String,
    },
}

/// What replaying one event did.
#[derive(Debug, Clone, Serialize)]
pub struct EventReport {
    /// The event's line in the events file.
    pub line: usize,
    /// The route that delivered it.
    pub route: String,
    /// The handler whose plugin was called.
    pub handler: String,
    /// The kind of change.
    pub kind: RecordedKind,
    /// `namespace/name` of the object.
    pub object: String,
    /// How the call ended.
    #[serde(flatten)]
    pub outcome: ReplayOutcome,
    /// The lines the plugin logged, in order.
    pub logs: Vec<PluginLog>,
    /// The writes it asked for, captured and not sent.
    pub writes: Vec<CapturedWrite>,
    /// The metrics it recorded, as it gave them.
    pub metrics: Vec<CapturedMetric>,
    /// The outbound HTTP requests it made, captured (credentials redacted), answered by a
    /// stub and not sent.
    pub requests: Vec<CapturedRequest>,
    /// What replay put in the plugin's config instead of a value it never reads (see
    /// [`placeholder_config`]), said with the first event of each handler.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placeholders: Vec<String>,
}

/// An event that does not fit the config: the line and why.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct Mismatch {
    /// The event's line.
    pub line: usize,
    /// Why it cannot be replayed.
    pub reason: String,
}

/// Checks that every event names a route of `config` feeding the handler it names.
pub fn check_events(config: &Config, events: &[(usize, RecordedEvent)]) -> Result<(), Mismatch> {
    for (line, event) in events {
        let route = config.routes.iter().find(|r| r.name == event.route);
        let reason = match route {
            None => format!("the config has no route {:?}", event.route),
            Some(r) if r.handler != event.handler => format!(
                "route {:?} feeds handler {:?}, not {:?}",
                r.name, r.handler, event.handler
            ),
            Some(_) => continue,
        };
        return Err(Mismatch {
            line: *line,
            reason,
        });
    }
    Ok(())
}

/// Replays `events` (only those of `handler`, if given) in order through a fresh instance
/// of the handler's plugin each; the events must have passed [`check_events`].
pub async fn replay(
    config: &Config,
    events: &[(usize, RecordedEvent)],
    handler: Option<&str>,
) -> anyhow::Result<Vec<EventReport>> {
    let host = PluginHost::new()?;
    // One registry for the run, checked as the daemon's is (names keep their type, series
    // are capped per handler); what each call records is reported with the event.
    let metrics = Arc::new(PluginMetrics::new(Arc::new(Metrics::new())));
    // Every plugin is loaded before the first call: one that cannot be is reported with
    // nothing replayed.
    let mut plugins: HashMap<String, Plugin> = HashMap::new();
    let mut calls = Vec::new();
    for (line, event) in events {
        if handler.is_some_and(|h| h != event.handler) {
            continue;
        }
        let spec = config
            .handlers
            .iter()
            .find(|h| h.name == event.handler)
            .ok_or_else(|| anyhow::anyhow!("line {line}: no handler {:?}", event.handler))?;
        if !plugins.contains_key(&spec.plugin) {
            let plugin = loader::load_with(&host, &config.plugins_dir, &spec.plugin, &config.oci)
                .await
                .map_err(|e| plugin_problem(&spec.name, &e))?;
            if spec.batch.is_some() && !plugin.handles_batches() {
                anyhow::bail!(
                    "handler {:?}: {}",
                    spec.name,
                    crate::plugin::lacks_handle_batch(&spec.plugin)
                );
            }
            plugins.insert(spec.plugin.clone(), plugin);
        }
        calls.push((line, event, spec));
    }
    let mut reports = Vec::new();
    let mut told = std::collections::HashSet::new();
    for (line, event, spec) in calls {
        let plugin = &plugins[&spec.plugin];
        let names = resource_names(config, event);
        let call = Call {
            plugin,
            spec,
            metrics: metrics.clone(),
        };
        let mut report = call.replay_one(*line, event, names).await;
        if !told.insert(spec.name.clone()) {
            report.placeholders.clear();
        }
        reports.push(report);
    }
    Ok(reports)
}

/// Why the plugin of `handler` cannot be replayed: the load error, with how to make a
/// plugin file that is not there yet.
fn plugin_problem(handler: &str, error: &crate::plugin::Error) -> anyhow::Error {
    let missing = matches!(
        error,
        crate::plugin::Error::Read {
            problem: loader::ReadError::Gone,
            ..
        }
    );
    let hint = if missing {
        "; build it first (`switchyard build` in the plugin's project)"
    } else {
        ""
    };
    anyhow::anyhow!("handler {handler:?}: {error}{hint}")
}

/// A handler's plugin and what its calls share.
struct Call<'a> {
    plugin: &'a Plugin,
    spec: &'a HandlerSpec,
    metrics: Arc<PluginMetrics>,
}

impl Call<'_> {
    /// Calls the plugin once for `event`, capturing its logs, writes and metrics.
    async fn replay_one(
        self,
        line: usize,
        event: &RecordedEvent,
        names: Vec<String>,
    ) -> EventReport {
        let Self {
            plugin,
            spec,
            metrics,
        } = self;
        let logs = PluginLogs::default();
        let mut logged = logs.subscribe();
        let capture = Arc::new(Capture::new(names, event.object.clone()));
        let context = HostContext::new(spec.name.as_str().into(), logs)
            .with_capabilities(spec.capabilities.clone())
            .with_capture(capture.clone())
            .with_metrics(metrics)
            .with_log_limits(spec.logs, LogCounters::default())
            // Requests are checked as the daemon checks them, recorded, never sent.
            .with_outbound(Arc::new(Outbound::new(
                spec.name.as_str().into(),
                spec.outbound.clone(),
                Arc::default(),
                Default::default(),
            )));
        let context = Arc::new(context);
        let limits = CallLimits {
            timeout: spec.timeout,
            memory: spec.memory,
        };
        let call = Event {
            kind: match event.kind {
                RecordedKind::Added => EventKind::Added,
                RecordedKind::Updated => EventKind::Updated,
                RecordedKind::Deleted => EventKind::Deleted,
                RecordedKind::Sync => EventKind::Sync,
            },
            route: event.route.clone(),
            object: event.object.to_string(),
            old_object: event.old_object.as_ref().map(ToString::to_string),
            attempt: 1,
            final_state_unknown: event.final_state_unknown,
        };
        // A value from a Secret or the environment is never read: the plugin gets a
        // placeholder of its shape naming where it would come from.
        let (config, placeholders) = placeholder_config(spec);
        let config = config.to_string();
        let outcome = if spec.batch.is_some() {
            batch_of_one(plugin, &context, &limits, &config, call).await
        } else {
            match plugin.call_in(&context, &limits, &config, &call).await {
                Ok(Outcome::Done) => ReplayOutcome::Done,
                Ok(Outcome::RequeueAfter(ms)) => ReplayOutcome::RequeueAfter { ms },
                Err(e) => ReplayOutcome::Error {
                    error: e.to_string(),
                },
            }
        };
        let mut lines = Vec::new();
        while let Ok(log) = logged.try_recv() {
            lines.push(log);
        }
        EventReport {
            line,
            route: event.route.clone(),
            handler: event.handler.clone(),
            kind: event.kind,
            object: event.object_name(),
            outcome,
            logs: lines,
            writes: capture.writes(),
            metrics: capture.metrics(),
            requests: capture.requests(),
            placeholders,
        }
    }
}

/// Calls `plugin`'s `handle-batch` with `event` alone, as a handler with `batch:` would
/// (a batch of one: replay hands over the events one by one).
async fn batch_of_one(
    plugin: &Plugin,
    context: &Arc<HostContext>,
    limits: &CallLimits,
    config: &str,
    event: Event,
) -> ReplayOutcome {
    let answer = match plugin.instantiate_in(context.clone(), limits, config).await {
        Ok(mut instance) => instance.handle_batch(&[event]).await,
        Err(e) => Err(e),
    };
    match answer.map(|mut outcomes| outcomes.pop()) {
        Ok(Some(ItemOutcome::Done)) => ReplayOutcome::Done,
        Ok(Some(ItemOutcome::Retry(ms))) => ReplayOutcome::Retry { ms },
        Ok(Some(ItemOutcome::DeadLetter(reason))) => ReplayOutcome::DeadLetter { reason },
        Ok(None) => ReplayOutcome::Error {
            error: "handle-batch answered no outcome for the event".into(),
        },
        Err(e) => ReplayOutcome::Error {
            error: e.to_string(),
        },
    }
}

/// The handler's config with each `valueFrom:` replaced by a placeholder of the value's
/// likely shape, and a line per placeholder saying what stands where.
///
/// A value is never read, so its shape is told from its key: one whose name ends in `url`
/// or `uri` (`url`, `webhookUrl`, `icon_url`) is a URL, which a sink checks as one before
/// sending anything, so it gets a URL on the first host of the handler's
/// `capabilities.http` (its requests are then captured as any other), with a path naming
/// the source. Any other value gets `<Secret NAME key "KEY">`.
pub fn placeholder_config(spec: &HandlerSpec) -> (serde_json::Value, Vec<String>) {
    use crate::config::value_from::{ValueSource, substitute};
    let mut notes = Vec::new();
    let url_keys: std::collections::HashSet<&str> = spec
        .value_refs
        .iter()
        .filter(|r| {
            let key = r.pointer.rsplit('/').next().unwrap_or_default();
            let key = key.to_ascii_lowercase();
            key.ends_with("url") || key.ends_with("uri")
        })
        .map(|r| r.pointer.as_str())
        .collect();
    let mut config = spec.config.clone();
    for r in &spec.value_refs {
        let value = if url_keys.contains(r.pointer.as_str()) {
            let slug: String = match &r.source {
                ValueSource::Secret(s) => format!("secret/{}/{}", s.name, s.key),
                ValueSource::Env(var) => format!("env/{var}"),
                ValueSource::File(path) => format!("file{path}"),
            }
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-._/".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
            let url = format!(
                "{}/switchyard-replay-placeholder/{slug}",
                placeholder_base(spec)
            );
            notes.push(format!(
                "config.{}: the URL {url} stands in for the value of {}, which replay never reads",
                r.path, r.source
            ));
            url
        } else {
            let text = format!("<{}>", r.source);
            notes.push(format!(
                "config.{}: {text} stands in for the value of {}, which replay never reads",
                r.path, r.source
            ));
            text
        };
        config =
            substitute(&config, std::slice::from_ref(r), |_| Some(value.clone())).unwrap_or(config);
    }
    (config, notes)
}

/// `scheme://host[:port]` of a destination the handler's allow-list allows: its first entry
/// that names a host (a subdomain entry gets `replay.` before its suffix), else its first
/// address; `https://placeholder.invalid` when it has none.
fn placeholder_base(spec: &HandlerSpec) -> String {
    use crate::config::egress::HostPattern;
    let rules = &spec.outbound.egress.rules;
    let named = rules.iter().find_map(|rule| match &rule.host {
        HostPattern::Exact(name) => Some((rule, name.clone())),
        HostPattern::Subdomains(suffix) => Some((rule, format!("replay.{suffix}"))),
        HostPattern::Range(_) => None,
    });
    let any = || {
        rules.iter().find_map(|rule| match &rule.host {
            HostPattern::Range(range) if range.network().is_ipv6() => {
                Some((rule, format!("[{}]", range.network())))
            }
            HostPattern::Range(range) => Some((rule, range.network().to_string())),
            _ => None,
        })
    };
    match named.or_else(any) {
        Some((rule, host)) => match rule.port.filter(|p| *p != rule.scheme.default_port()) {
            Some(port) => format!("{}://{host}:{port}", rule.scheme.as_str()),
            None => format!("{}://{host}", rule.scheme.as_str()),
        },
        None => "https://placeholder.invalid".to_string(),
    }
}

/// The names the plugin may use, as in the daemon: for the resources of its handler's routes
/// and of the informers the handler `reads:`, plural and resource string of the informers,
/// the kinds the routes name, and the object's kind.
fn resource_names(config: &Config, event: &RecordedEvent) -> Vec<String> {
    let mut names = Vec::new();
    let route = config.routes.iter().find(|r| r.name == event.route);
    let handler = route.and_then(|r| config.handlers.iter().find(|h| h.name == r.handler));
    let routes = config
        .routes
        .iter()
        .filter(|r| handler.is_some_and(|h| h.name == r.handler));
    let add_informer = |name: &str, names: &mut Vec<String>| {
        for spec in config.informers.iter().filter(|i| i.name == name) {
            match &spec.resource {
                ResourceRef::Plural(resource) => {
                    names.push(resource.plural.clone());
                    names.push(resource.to_string());
                }
                ResourceRef::Kind { kind, .. } => names.push(kind.clone()),
            }
        }
    };
    for route in routes {
        match &route.source {
            RouteSource::Informer(name) => add_informer(name, &mut names),
            RouteSource::Kinds(kinds) => names.extend(kinds.iter().cloned()),
        }
    }
    for read in handler.into_iter().flat_map(|h| &h.reads) {
        add_informer(read, &mut names);
    }
    if let Some(kind) = event.object.get("kind").and_then(|k| k.as_str()) {
        names.push(kind.to_string());
    }
    names.sort();
    names.dedup();
    names
}
