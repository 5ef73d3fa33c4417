//! `switchyard record`: the config's informers and routes against the cluster, with each
//! route writing what it delivers to an events file instead of queueing it for a plugin.
//! Events are recorded as routes deliver them (object filter and `events:` applied), before
//! a handler's queue would coalesce them.

use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::events::RecordedEvent;
use crate::config::{Config, EventFilter};
use crate::handler::PendingEvent;
use crate::informer::{Delta, DeltaSink, InformerFactory};
use crate::router::{ObjectFilter, select};
use crate::util::lock;

/// A route that records what it would deliver.
struct RecordingRoute {
    route: String,
    handler: String,
    events: EventFilter,
    filter: ObjectFilter,
    resync: Option<std::time::Duration>,
    lines: Lines,
}

/// Where routes send recorded lines; emptied when recording stops.
type Lines = Arc<Mutex<Option<mpsc::UnboundedSender<String>>>>;

impl DeltaSink for RecordingRoute {
    fn deliver(&self, delta: &Delta) {
        let Some(event) = select(&self.events, &self.filter, delta)
            .as_ref()
            .and_then(PendingEvent::from_delta)
        else {
            return;
        };
        let parse = |json: &str| serde_json::from_str(json).unwrap_or(serde_json::Value::Null);
        let recorded = RecordedEvent {
            route: self.route.clone(),
            handler: self.handler.clone(),
            kind: event.kind.into(),
            object: parse(&event.object.json()),
            old_object: event.old.as_ref().map(|o| parse(&o.json())),
            final_state_unknown: event.final_state_unknown,
        };
        if let Ok(line) = serde_json::to_string(&recorded)
            && let Some(lines) = &*lock(&self.lines)
        {
            // The writer is gone only after recording stopped.
            let _ = lines.send(line);
        }
    }

    fn resync_period(&self) -> Option<std::time::Duration> {
        self.resync
    }
}

/// Runs `config`'s routes against the cluster through `client` until `stop` completes,
/// writing each delivered event to `out` as one JSON line. Returns how many were written.
pub async fn record(
    config: &Config,
    client: kube::Client,
    out: &Path,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<usize> {
    use anyhow::Context;
    let file =
        std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    let (sender, mut received) = mpsc::unbounded_channel::<String>();
    let lines: Lines = Arc::new(Mutex::new(Some(sender)));
    let shown = out.display().to_string();
    let writer = tokio::task::spawn_blocking(move || -> anyhow::Result<usize> {
        let mut file = std::io::BufWriter::new(file);
        let mut count = 0;
        while let Some(line) = received.blocking_recv() {
            writeln!(file, "{line}")
                .and_then(|()| file.flush())
                .with_context(|| format!("cannot write {shown}"))?;
            count += 1;
        }
        Ok(count)
    });
    let factory = InformerFactory::new(client);
    let informers = crate::daemon::topology::route_informers(config, &factory).await?;
    for spec in &config.routes {
        let sink: Arc<dyn DeltaSink> = Arc::new(RecordingRoute {
            route: spec.name.clone(),
            handler: spec.handler.clone(),
            events: spec.events,
            filter: ObjectFilter::new(&spec.filter),
            resync: config
                .handlers
                .iter()
                .find(|h| h.name == spec.handler)
                .and_then(|h| h.resync),
            lines: lines.clone(),
        });
        for informer in informers.get(&spec.name).into_iter().flatten() {
            informer.subscribe(sink.clone());
        }
    }
    stop.await;
    lock(&lines).take();
    factory.shutdown();
    writer.await.context("the writer stopped")?
}
