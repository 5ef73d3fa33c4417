//! Watch requests: a chunked stream of `{"type": ..., "object": ...}` lines, as kube-apiserver
//! serves them.
//!
//! - Where it starts: no `resourceVersion` (or `"0"`) sends the current objects as ADDED
//!   first; `resourceVersion=N` sends every change after N (410 Expired in an ERROR event when
//!   N is older than the history).
//! - A `resourceVersion=N` the cluster has not reached is accepted, and the watch stays
//!   quiet (no events, no bookmarks) until the cluster passes N, then sends what comes after
//!   N. That is what kube-apiserver does: its watch cache serves the watch and drops every
//!   event up to N (`cacheWatcher.process`), and without the cache etcd starts the watch at
//!   revision N+1. A client resuming on a server that went back in time (restarted empty,
//!   etcd restored from a backup) hears nothing at all.
//! - `sendInitialEvents=true` (with `resourceVersionMatch=NotOlderThan`, and bookmarks
//!   allowed; refused as invalid with the `WatchList` gate off) streams the current objects
//!   as ADDED, then a BOOKMARK annotated
//!   `k8s.io/initial-events-end: "true"`; with an N the cluster has not reached, it waits up
//!   to [`super::SimOptions::version_wait`] and then answers with an ERROR event, 504
//!   "Too large resource version" (kube-apiserver's `waitUntilFreshAndBlock`). With the
//!   fault [`super::faults::Faults::fail_watch_lists_in_storage`] it is answered 200 and an
//!   ERROR event, 500 "... the required storage feature RequestWatchProgress is disabled".
//!   `sendInitialEvents=false` starts at N, or now.
//! - `allowWatchBookmarks=true` adds a BOOKMARK with the latest version every bookmark
//!   interval; `timeoutSeconds` ends the stream after that long.
//! - Label and field selectors filter events the way kube-apiserver's watch cache does: an
//!   object that stops matching arrives as DELETED, one that starts matching as ADDED.
//! - With kubectl's Table `Accept` header (`kubectl get -w`), each event's object is a Table
//!   of one row.
//! - Every open watch ends when the watches are closed or the server stops.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use super::api::{ApiState, Collection, Filter, Request, parse_rv, wait_for};
use super::cluster::{Change, ChangeType, Cluster};
use super::error::ApiError;
use super::history::{ReadError, WatchFrom, WatchStart};
use super::resources::ResourceDef;
use super::table::{self, IncludeObject};

/// Signals that end open watches: a close-all counter and whether the server is stopping.
#[derive(Clone, Debug)]
pub struct WatchSignals {
    close: watch::Sender<u64>,
    stopping: watch::Sender<bool>,
}

impl Default for WatchSignals {
    fn default() -> Self {
        Self {
            close: watch::channel(0).0,
            stopping: watch::channel(false).0,
        }
    }
}

impl WatchSignals {
    /// Ends every watch open now.
    pub fn close_all(&self) {
        self.close.send_modify(|generation| *generation += 1);
    }

    /// While stopping, open watches end and new ones end at once.
    pub fn set_stopping(&self, stopping: bool) {
        self.stopping.send_replace(stopping);
    }
}

/// The watch options of a request, validated.
struct WatchOptions {
    from: WatchFrom,
    /// Wait for the cluster to reach this version before starting (with initial events).
    wait_for: Option<u64>,
    initial_events: bool,
    bookmarks: bool,
    timeout: Option<Duration>,
}

impl WatchOptions {
    fn from_request(req: &Request, watch_list: bool) -> Result<Self, ApiError> {
        let rv_match = req.param("resourceVersionMatch");
        let send_initial = req.param("sendInitialEvents");
        let mut problems: Vec<(&str, String)> = Vec::new();
        if send_initial.is_some() && !watch_list {
            problems.push((
                "sendInitialEvents",
                "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled".into(),
            ));
        }
        if send_initial.is_some() && rv_match != Some("NotOlderThan") {
            problems.push((
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into(),
            ));
        }
        if let Some(m) = rv_match {
            if send_initial.is_none() {
                problems.push((
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".into(),
                ));
            }
            if m != "NotOlderThan" {
                problems.push((
                    "resourceVersionMatch",
                    format!("unsupported value {m:?}: supported values: \"NotOlderThan\""),
                ));
            }
        }
        if !problems.is_empty() {
            return Err(ApiError::invalid_list_options(&problems));
        }
        let rv = match req.param("resourceVersion") {
            None | Some("") | Some("0") => None,
            Some(text) => Some(parse_rv(text)?),
        };
        let initial_events = req.flag("sendInitialEvents");
        let (from, wait_for) = match (send_initial.is_some(), initial_events, rv) {
            (_, true, rv) => (WatchFrom::CurrentState, rv),
            (true, false, None) => (WatchFrom::Now, None),
            (_, _, Some(rv)) => (WatchFrom::Version(rv), None),
            (false, _, None) => (WatchFrom::CurrentState, None),
        };
        let timeout = match req.param("timeoutSeconds") {
            Some(t) => Some(Duration::from_secs(t.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid timeoutSeconds {t:?}"))
            })?)),
            None => None,
        };
        Ok(Self {
            from,
            wait_for,
            initial_events,
            bookmarks: req.flag("allowWatchBookmarks"),
            timeout,
        })
    }
}

/// Serves a watch.
pub(super) async fn watch(
    state: &ApiState,
    collection: &Collection<'_>,
    req: &Request,
) -> Response {
    let prepared = async {
        let options = WatchOptions::from_request(req, state.watch_list)?;
        let filter =
            Filter::from_request(collection.def.clone(), req, state.sharded_list_and_watch)?;
        let table = req.table()?;
        Ok::<_, ApiError>((options, filter, table))
    };
    let (options, filter, table) = match prepared.await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let started = if options.initial_events && state.faults.watch_lists_fail_in_storage() {
        // kube-apiserver's cacher: a watcher whose only event is this error.
        Err(ApiError::internal(NO_WATCH_PROGRESS))
    } else {
        start(state, collection, &options).await
    };
    match started {
        Err(error) => {
            let line = event_line("ERROR", &error.status());
            tokio::spawn(async move { tx.send(line).await });
        }
        Ok(Start { start, quiet_until }) => {
            let (closed, stopping) = (
                state.watches.close.subscribe(),
                state.watches.stopping.subscribe(),
            );
            let stream = WatchStream {
                resource: collection.resource,
                namespace: collection.namespace.map(String::from),
                def: collection.def.clone(),
                filter,
                table,
                bookmark_every: options.bookmarks.then_some(state.bookmark_interval),
                timeout: options.timeout,
                closed,
                stopping,
                last_rv: start.rv,
                quiet_until,
                tx,
            };
            let end_of_initial = options.initial_events && options.bookmarks;
            tokio::spawn(stream.run(start, end_of_initial));
        }
    }
    let body = Body::from_stream(ReceiverStream::new(rx).map(Ok::<_, Infallible>));
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// What kube-apiserver answers a streaming list with when its storage lacks
/// `RequestWatchProgress` (an etcd older than 3.5.13 / 3.4.31).
const NO_WATCH_PROGRESS: &str = "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled";

/// Where a watch starts, and the version up to which it stays quiet.
struct Start {
    start: WatchStart,
    /// Send nothing for changes at or below this version (0: send everything).
    quiet_until: u64,
}

/// Where the watch starts, or the error its only event is.
async fn start(
    state: &ApiState,
    collection: &Collection<'_>,
    options: &WatchOptions,
) -> Result<Start, ApiError> {
    let requested = match options.from {
        WatchFrom::Version(rv) => rv,
        _ => options.wait_for.unwrap_or_default(),
    };
    if state.faults.take_watch_expiry() {
        return Err(too_old(requested, state.cluster.resource_version()));
    }
    if let Some(rv) = options.wait_for {
        wait_for(state, rv).await?;
    }
    let cluster = &state.cluster;
    let (resource, namespace) = (collection.resource, collection.namespace);
    let started = match cluster.watch_from(resource, namespace, options.from) {
        Err(ReadError::TooLarge { .. }) => ahead_of(cluster, resource, namespace, requested),
        other => other.map(|start| Start {
            start,
            quiet_until: 0,
        }),
    };
    started.map_err(|e| match e {
        ReadError::Expired { oldest } => too_old(requested, oldest),
        ReadError::TooLarge { current } => ApiError::too_large_resource_version(requested, current),
    })
}

/// A watch from `rv`, a version the cluster has not reached: it follows the live feed and
/// stays quiet until the cluster passes `rv`.
fn ahead_of(
    cluster: &Cluster,
    resource: usize,
    namespace: Option<&str>,
    rv: u64,
) -> Result<Start, ReadError> {
    loop {
        let start = cluster.watch_from(resource, namespace, WatchFrom::Now)?;
        if start.rv < rv {
            return Ok(Start {
                start,
                quiet_until: rv,
            });
        }
        // The cluster reached `rv` meanwhile: replay from the history, like any watch.
        // (Still too large only if the cluster was reset in between: look again.)
        match cluster.watch_from(resource, namespace, WatchFrom::Version(rv)) {
            Err(ReadError::TooLarge { .. }) => continue,
            other => {
                return other.map(|start| Start {
                    start,
                    quiet_until: 0,
                });
            }
        }
    }
}

fn too_old(requested: u64, oldest: u64) -> ApiError {
    ApiError::expired(format!("too old resource version: {requested} ({oldest})"))
}

/// One open watch: filters the feed for its resource and sends matching events.
struct WatchStream {
    resource: usize,
    namespace: Option<String>,
    def: Arc<ResourceDef>,
    filter: Filter,
    table: Option<IncludeObject>,
    bookmark_every: Option<Duration>,
    timeout: Option<Duration>,
    closed: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
    last_rv: u64,
    /// Nothing is sent for versions below this one (bookmarks) or up to it (changes): the
    /// client asked to start there.
    quiet_until: u64,
    tx: mpsc::Sender<Bytes>,
}

impl WatchStream {
    async fn run(mut self, start: WatchStart, end_of_initial: bool) {
        let WatchStart {
            backlog, mut feed, ..
        } = start;
        if *self.stopping.borrow_and_update() {
            return;
        }
        for change in backlog.into_changes() {
            if !self.send(&change).await {
                return;
            }
        }
        if end_of_initial && !self.send_bookmark(true).await {
            return;
        }
        let deadline = self.timeout.map(|t| tokio::time::Instant::now() + t);
        let period = self.bookmark_every.unwrap_or(Duration::from_secs(3600));
        let mut bookmarks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            tokio::select! {
                _ = sleep_until(deadline) => return,
                _ = self.closed.changed() => return,
                _ = self.stopping.changed() => return,
                _ = bookmarks.tick(), if self.bookmark_every.is_some() => {
                    if !self.send_bookmark(false).await {
                        return;
                    }
                }
                received = feed.recv() => match received {
                    Ok(change) => {
                        self.last_rv = self.last_rv.max(change.rv);
                        if !self.send(&change).await {
                            return;
                        }
                    }
                    // Fell too far behind (or the cluster is gone): end the watch; the client
                    // resumes from its last resourceVersion or relists.
                    Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }

    /// The event a change is for this watch, if any: kube-apiserver's rules for an object
    /// that starts or stops matching the selectors.
    fn event_for<'c>(&self, change: &'c Change) -> Option<(&'static str, Cow<'c, Value>)> {
        let in_scope = change.at.resource == self.resource
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == change.at.namespace);
        if !in_scope {
            return None;
        }
        let now = change.change_type != ChangeType::Deleted && self.filter.matches(&change.object);
        let before = match (&change.previous, change.change_type) {
            (Some(previous), _) => self.filter.matches(previous),
            (None, ChangeType::Deleted) => self.filter.matches(&change.object),
            (None, _) => false,
        };
        match (before, now, &change.previous) {
            (false, true, _) => Some(("ADDED", Cow::Borrowed(&*change.object))),
            (true, true, _) => Some(("MODIFIED", Cow::Borrowed(&*change.object))),
            // Left the selection by an update: the state that matched, at the new version.
            (true, false, Some(previous)) if change.change_type == ChangeType::Modified => {
                let mut object = (**previous).clone();
                object["metadata"]["resourceVersion"] = change.rv.to_string().into();
                Some(("DELETED", Cow::Owned(object)))
            }
            (true, false, _) => Some(("DELETED", Cow::Borrowed(&*change.object))),
            (false, false, _) => None,
        }
    }

    /// Sends the event for a change, if any; false once the client has gone.
    async fn send(&mut self, change: &Change) -> bool {
        if change.rv <= self.quiet_until {
            return true;
        }
        let Some((event_type, object)) = self.event_for(change) else {
            return true;
        };
        self.last_rv = self.last_rv.max(change.rv);
        let line = match self.table {
            Some(include) => {
                let meta = json!({"resourceVersion": change.rv.to_string()});
                event_line(
                    event_type,
                    &table::table(&self.def, &[&object], meta, include),
                )
            }
            None => event_line(event_type, &object),
        };
        self.tx.send(line).await.is_ok()
    }

    async fn send_bookmark(&mut self, end_of_initial_events: bool) -> bool {
        if self.last_rv < self.quiet_until {
            return true;
        }
        let mut object = json!({
            "kind": self.def.kind,
            "apiVersion": self.def.api_version(),
            "metadata": {"resourceVersion": self.last_rv.to_string()},
        });
        if end_of_initial_events {
            object["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        self.tx.send(event_line("BOOKMARK", &object)).await.is_ok()
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One watch event line: `{"type":"ADDED","object":{...}}\n`.
fn event_line(event_type: &str, object: &Value) -> Bytes {
    let mut line = format!("{{\"type\":\"{event_type}\",\"object\":").into_bytes();
    // Serializing a Value into a Vec cannot fail.
    serde_json::to_writer(&mut line, object).expect("a JSON value serializes");
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}
