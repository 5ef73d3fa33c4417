//! Serving a router on a TCP listener so that clients that never finish cannot take it
//! over: the admin API and the probes listener both run here.
//!
//! Three guards, because the probes port listens on the pod's address for kubelet and
//! anyone who can reach the pod can open connections to it:
//! - a **header read timeout** (hyper's): a connection gets that long to send a request's
//!   headers, counted from its opening or from the end of its last answer, so half-open
//!   and idle kept-alive connections both close;
//! - a **connection limit**: at the limit, a new connection sheds the oldest one that is
//!   not being answered (waiting for headers, or idle between requests) instead of being
//!   refused. A real probe sends its request at once and is answered at once, so it is
//!   never the oldest waiting: the probes keep answering while an attacker keeps every slot
//!   full. Only when every connection is being answered does the listener stop accepting
//!   until one finishes (connections then wait in the kernel's backlog);
//! - **accept errors** (out of file descriptors: `EMFILE`, `ENFILE`) shed the oldest idle
//!   connection and wait a moment before the next accept, so they neither spin nor stop
//!   the listener.
//!
//! The simulator's listeners are not served here: they are a test tool, not a daemon's
//! surface.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot, watch};

/// The largest read buffer a connection may grow: the headers a client may send. Ample for
/// any browser's headers, and a bound on what a full set of connections can hold.
const MAX_BUFFER: usize = 64 << 10;
/// How long the listener waits after an accept error that is not the client's.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// How often, at most, a listener logs that it sheds connections or cannot accept.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// How a listener bounds its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// How long a connection gets to send a request's headers, from its opening or the end
    /// of its last answer.
    pub header_read_timeout: Duration,
    /// Most connections kept open at once.
    pub max_connections: usize,
}

/// Serves `app` on `listener` within `limits` until `stop` fires (or its sender is
/// dropped): then no connection is accepted, those not being answered close at once and the
/// others once answered. `what` names the listener in the log.
pub async fn serve(
    what: &'static str,
    listener: TcpListener,
    app: axum::Router,
    limits: ListenerLimits,
    mut stop: oneshot::Receiver<()>,
) {
    let open = Arc::new(Connections::new(limits.max_connections));
    let (stopping, stopped) = watch::channel(false);
    let mut warnings = Warnings::default();
    loop {
        let next = tokio::select! {
            next = accept(what, &listener, &open, &mut warnings) => next,
            _ = &mut stop => break,
        };
        let Some((stream, slot)) = next else {
            continue;
        };
        let connection = Connection {
            app: app.clone(),
            header_read_timeout: limits.header_read_timeout,
            stopping: stopped.clone(),
        };
        tokio::spawn(connection.run(stream, slot));
    }
    drop(listener);
    let _ = stopping.send(true);
    open.wait_until_empty().await;
}

/// The next connection and its slot; `None` after an accept error (past a pause when the
/// error is not the client's).
async fn accept(
    what: &'static str,
    listener: &TcpListener,
    open: &Arc<Connections>,
    warnings: &mut Warnings,
) -> Option<(TcpStream, Slot)> {
    let stream = match listener.accept().await {
        Ok((stream, _)) => stream,
        Err(e) if is_connection_error(&e) => return None,
        Err(e) => {
            // Out of descriptors (or memory): free one of ours, wait, try again.
            open.shed_oldest_idle();
            if Warnings::due(&mut warnings.accept) {
                tracing::warn!(error = %e, "{what} cannot accept connections: closing idle ones and retrying");
            }
            tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
            return None;
        }
    };
    let (slot, shed) = open.admit().await;
    if shed {
        if Warnings::due(&mut warnings.shed) {
            tracing::warn!(
                max_connections = open.max,
                "{what} is at its connection limit: the oldest connections not being answered are closed to make room"
            );
        }
        // Let the shed connection's task run and close its socket before the next accept.
        tokio::task::yield_now().await;
    }
    Some((stream, slot))
}

/// When a listener last warned of each trouble, to warn at most every [`WARN_EVERY`].
#[derive(Default)]
struct Warnings {
    accept: Option<Instant>,
    shed: Option<Instant>,
}

impl Warnings {
    /// Whether to warn now, given the last warning's time (updated when so).
    fn due(last: &mut Option<Instant>) -> bool {
        let due = last.is_none_or(|at| at.elapsed() >= WARN_EVERY);
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}

/// Errors of one connection that leave the listener as it was.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// The connections a listener keeps open, oldest first.
struct Connections {
    max: usize,
    table: Mutex<Table>,
    /// Told when a connection closes.
    closed: Notify,
}

#[derive(Default)]
struct Table {
    next: u64,
    open: BTreeMap<u64, Entry>,
}

/// One open connection: how many of its requests are being answered, and how to close it.
struct Entry {
    answering: Arc<AtomicUsize>,
    shed: oneshot::Sender<()>,
}

/// A connection's place in the table, given back when dropped.
struct Slot {
    id: u64,
    answering: Arc<AtomicUsize>,
    shed: oneshot::Receiver<()>,
    open: Arc<Connections>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        crate::util::lock(&self.open.table).open.remove(&self.id);
        self.open.closed.notify_waiters();
    }
}

impl Connections {
    fn new(max: usize) -> Self {
        Self {
            max,
            table: Mutex::new(Table::default()),
            closed: Notify::new(),
        }
    }

    /// A slot for a new connection: at once when there is room or an idle connection to
    /// shed (then `true`), else once a connection closes.
    async fn admit(self: &Arc<Self>) -> (Slot, bool) {
        let mut shed = false;
        loop {
            let closed = self.closed.notified();
            {
                let mut table = crate::util::lock(&self.table);
                if table.open.len() < self.max {
                    return (self.insert(&mut table), shed);
                }
            }
            if self.shed_oldest_idle() {
                shed = true;
                continue;
            }
            closed.await;
        }
    }

    fn insert(self: &Arc<Self>, table: &mut Table) -> Slot {
        let id = table.next;
        table.next += 1;
        let answering = Arc::new(AtomicUsize::new(0));
        let (shed, shed_rx) = oneshot::channel();
        table.open.insert(
            id,
            Entry {
                answering: answering.clone(),
                shed,
            },
        );
        Slot {
            id,
            answering,
            shed: shed_rx,
            open: self.clone(),
        }
    }

    /// Closes the oldest connection not being answered, if there is one; it leaves the
    /// table now, its socket as soon as its task sees the signal.
    fn shed_oldest_idle(&self) -> bool {
        let mut table = crate::util::lock(&self.table);
        let oldest = table
            .open
            .iter()
            .find(|(_, entry)| entry.answering.load(Ordering::Acquire) == 0)
            .map(|(id, _)| *id);
        let Some(entry) = oldest.and_then(|id| table.open.remove(&id)) else {
            return false;
        };
        let _ = entry.shed.send(());
        true
    }

    /// Waits until every connection has closed.
    async fn wait_until_empty(&self) {
        loop {
            let closed = self.closed.notified();
            if crate::util::lock(&self.table).open.is_empty() {
                return;
            }
            closed.await;
        }
    }
}

/// What a connection's task needs.
struct Connection {
    app: axum::Router,
    header_read_timeout: Duration,
    stopping: watch::Receiver<bool>,
}

impl Connection {
    /// Serves HTTP/1 on `stream` until the client leaves, the header timeout passes, the
    /// connection is shed, or the listener stops.
    async fn run(mut self, stream: TcpStream, mut slot: Slot) {
        let service = Answering {
            app: self.app,
            answering: slot.answering.clone(),
        };
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout)
            .max_buf_size(MAX_BUFFER);
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection);
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::trace!(error = %e, "connection ended");
                }
            }
            // Shed (or the table gone): dropping the connection closes the socket.
            _ = &mut slot.shed => {}
            () = stopped(&mut self.stopping) => {
                if slot.answering.load(Ordering::Acquire) > 0 {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        }
    }
}

/// Resolves once `stopping` turns true (or its sender is gone).
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stopping| *stopping).await;
}

/// The router, counting the requests of one connection being answered.
#[derive(Clone)]
struct Answering {
    app: axum::Router,
    answering: Arc<AtomicUsize>,
}

/// Counts a request being answered while it lives.
struct AnsweringGuard(Arc<AtomicUsize>);

impl Drop for AnsweringGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl hyper::service::Service<Request<Incoming>> for Answering {
    type Response = Response;
    type Error = Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send + 'static>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.answering.fetch_add(1, Ordering::AcqRel);
        let guard = AnsweringGuard(self.answering.clone());
        let mut app = self.app.clone();
        Box::pin(async move {
            let response = tower_service::Service::call(&mut app, request.map(Body::new)).await;
            drop(guard);
            response
        })
    }
}
