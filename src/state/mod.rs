//! Durable state (`state_dir:`): an embedded transactional store (redb) holding, per route,
//! what it last delivered of each object (uid, resourceVersion, a content hash: not the
//! object), and per handler, by key, the events it has not finished (the one a worker is
//! handling first, then what the key owes), its dead letters and whether it was paused; and each route's finalizer, until no object the route
//! delivered needs it taken off. After a restart each route delivers the difference from
//! what it last delivered, and each handler's queue and dead letters come back. In sharded
//! mode the difference is taken within the replica's ranges: the records of objects outside
//! them wait, in [`Retained`], for a range holding them to come back.
//!
//! An event is written once, when a route queues it: a worker taking it writes nothing (the
//! stored entry already holds it, first), and its end writes what the key still owes, or
//! removes the entry. Stages send each change to one writer thread ([`writer`]) that commits
//! whatever has arrived in one transaction (group commit), keeping only the last change of
//! each key; only a worker waits, before it calls a
//! plugin, for the commit that holds the event it hands over (write-ahead, see [`flow`]),
//! and the informers wait while the writer's queue is full (backpressure). A crash loses at
//! most changes not committed yet, never one a plugin acted on: an event whose `done` was
//! not committed is delivered again (at-least-once), an object whose delivery was not
//! recorded is delivered again as the difference. A failed commit is retried, its changes
//! kept, until it succeeds ([`writer`]). [`State::flush`] waits for a commit.
//!
//! This stage imports only config and util: the stages above turn their events into the
//! plain [`records`] kept here.

mod checkpoint;
mod flow;
mod log;
mod overlay;
pub mod records;
pub mod retained;
mod writer;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use redb::{Database, ReadableDatabase, ReadableTable, TableHandle};
use serde::Serialize;

use crate::config::{OnCorrupt, StateSpec};
use crate::util::lock;
use flow::Flow;
pub use flow::Pressure;
pub use records::{
    HandlerSnapshot, RouteRecord, StaleFinalizer, StoredDeadLetter, StoredEvent, StoredFinalizer,
    StoredKey, StoredOwed, StoredResource,
};
pub use retained::Retained;

/// The store's file inside `state_dir`.
pub const FILE_NAME: &str = "switchyard.redb";

/// The version of the layout below, kept in the `meta` table. Version 1 kept the event a
/// worker was handling in a table of its own (`inflight/HANDLER`); a store of version 1 is
/// brought to 2 when it is opened ([`upgrade_from_1`]).
const FORMAT: u64 = 2;

/// Table names.
mod tables {
    /// `format` → the layout version.
    pub const META: &str = "meta";
    /// Handler name → whether it is paused.
    pub const PAUSED: &str = "paused";
    /// `route\0finalizer` → the finalizer ([`super::StoredFinalizer`]) a route holds (or
    /// held) objects with, kept until no object the route delivered holds it without a
    /// route of the config holding it too.
    pub const FINALIZERS: &str = "finalizers";

    /// The key of `route`'s finalizer `name` in [`FINALIZERS`].
    pub fn finalizer_key(route: &str, name: &str) -> String {
        format!("{route}\0{name}")
    }
    /// A route's records: object key → [`super::RouteRecord`].
    pub fn route(name: &str) -> String {
        format!("route/{name}")
    }
    /// A handler's unfinished keys: `route\0object` → [`super::StoredOwed`], the event in
    /// flight (if any) first.
    pub fn owed(handler: &str) -> String {
        format!("owed/{handler}")
    }
    /// Layout 1's events in flight: `route\0object` → [`super::StoredEvent`].
    pub fn in_flight_v1(handler: &str) -> String {
        format!("inflight/{handler}")
    }
    /// A handler's dead letters: id → [`super::StoredDeadLetter`].
    pub fn dead(handler: &str) -> String {
        format!("dead/{handler}")
    }
}

/// Errors opening or reading the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The folder cannot be created.
    #[error("state_dir {path}: cannot create the folder: {source}")]
    Dir {
        /// The folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another process has the store open.
    #[error("state store {path} is in use by another process (one daemon per state_dir)")]
    InUse {
        /// The file.
        path: PathBuf,
    },
    /// The file is not a readable store.
    #[error(
        "state store {path} cannot be read: {reason} (set state_on_corrupt: fresh to move it aside and start with no state)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Reading the store failed.
    #[error("state store {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: redb::Error,
    },
}

/// Result of state operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One change for the writer.
enum Op {
    Delivered {
        route: Arc<str>,
        key: String,
        object: Arc<str>,
    },
    Forgot {
        route: Arc<str>,
        key: String,
    },
    Queue {
        handler: Arc<str>,
        key: String,
        /// `None`: nothing left.
        owed: Option<StoredOwed>,
    },
    DeadLetter {
        handler: Arc<str>,
        id: String,
        letter: Option<StoredDeadLetter>,
    },
    Paused {
        handler: Arc<str>,
        paused: bool,
    },
    Finalizer {
        key: String,
        finalizer: Option<StoredFinalizer>,
    },
    DropRoute(String),
    DropHandler(String),
    Flush(tokio::sync::oneshot::Sender<()>),
}

impl Op {
    /// About how many bytes the change writes: its objects' JSON, and a little for the rest.
    fn size(&self) -> usize {
        match self {
            Op::Queue {
                owed: Some(owed), ..
            } => 64 + owed.text_len(),
            _ => 64,
        }
    }
}

/// The writer's counters.
#[derive(Default)]
struct Stats {
    commits: AtomicU64,
    failures: AtomicU64,
    last_commit: Mutex<Option<SystemTime>>,
    last_error: Mutex<Option<String>>,
    /// Since when commits fail, while they do.
    failing_since: Mutex<Option<SystemTime>>,
}

/// The store as /status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StateStatus {
    /// The store's file.
    pub path: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// Transactions committed since start.
    pub commits: u64,
    /// Transactions that failed.
    pub failures: u64,
    /// When the last commit finished (RFC 3339).
    pub last_commit: Option<String>,
    /// Changes sent and not committed yet.
    pub pending_writes: u64,
    /// At this many pending changes the informers wait for the store
    /// (`state_max_pending_writes`).
    pub max_pending_writes: u64,
    /// Whether an informer waits for the store now.
    pub backpressure: bool,
    /// Times an informer had to wait for the store.
    pub backpressure_waits: u64,
    /// Since when commits fail (RFC 3339), while they do: plugins are not called for
    /// events not yet committed, and `/readyz` answers 503.
    pub failing_since: Option<String>,
    /// The last write error, cleared by the next commit.
    pub last_error: Option<String>,
}

/// The open store. Clones share it; the writer stops once every clone is gone.
#[derive(Clone)]
pub struct State {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    /// The channel to the writer, and the sequence number of the last change sent on it
    /// (numbered under this lock, so in the order the writer receives them).
    tx: Mutex<Option<(Sender<Op>, u64)>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What the writer thread shares with the senders and readers.
struct Shared {
    /// The store's file.
    path: PathBuf,
    /// The folder of the store and its log.
    dir: PathBuf,
    /// Changes committed to the log and not yet to the store's B-tree.
    pending: RwLock<overlay::Pending>,
    /// Bytes in the log segment being written.
    log_bytes: AtomicU64,
    /// The open store; `None` between a close and a successful open after a failed write.
    db: RwLock<Option<Arc<Database>>>,
    stats: Stats,
    flow: Arc<Flow>,
    /// Set when the store is closed: a writer whose commits fail then gives up soon.
    closing: std::sync::atomic::AtomicBool,
}

impl State {
    /// Opens (or creates) the store in `spec.dir` and starts its writer; `observe` is told
    /// how long each commit took. A store that cannot be read fails with where and why, or,
    /// with `state_on_corrupt: fresh`, is moved aside with a warning and a new one started.
    pub fn open(spec: &StateSpec, observe: Option<Box<dyn Fn(Duration) + Send>>) -> Result<Self> {
        std::fs::create_dir_all(&spec.dir).map_err(|source| Error::Dir {
            path: spec.dir.clone(),
            source,
        })?;
        let path = spec.dir.join(FILE_NAME);
        let (db, replayed) = match open_with_log(&spec.dir, &path) {
            Ok(opened) => opened,
            Err(Error::Corrupt { reason, .. }) if spec.on_corrupt == OnCorrupt::Fresh => {
                let aside = set_aside(&path)?;
                set_log_aside(&spec.dir);
                tracing::error!(store = %path.display(), moved_to = %aside.display(), %reason, "THE STATE STORE CANNOT BE READ: starting with no state (state_on_corrupt: fresh); every object is delivered as added and the queues and dead letters of the last run are not restored");
                open_with_log(&spec.dir, &path)?
            }
            Err(e) => return Err(e),
        };
        let next_segment = replayed.last + 1;
        let shared = Arc::new(Shared {
            path,
            dir: spec.dir.clone(),
            pending: RwLock::new(overlay::Pending {
                writing: replayed
                    .changes
                    .map(|changes| (Arc::new(changes), replayed.last)),
                current: Default::default(),
            }),
            log_bytes: AtomicU64::new(0),
            db: RwLock::new(Some(Arc::new(db))),
            stats: Stats::default(),
            flow: Arc::new(Flow::new(spec.max_pending_writes)),
            closing: Default::default(),
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("state-writer".into())
                .spawn(move || writer::run(shared, rx, next_segment, observe))
                .map_err(|source| Error::Dir {
                    path: spec.dir.clone(),
                    source,
                })?
        };
        Ok(Self {
            inner: Arc::new(Inner {
                shared,
                tx: Mutex::new(Some((tx, 0))),
                writer: Mutex::new(Some(writer)),
            }),
        })
    }

    /// Sends a change to the writer; returns its sequence number (0 once closed).
    fn send(&self, op: Op) -> u64 {
        let mut guard = lock(&self.inner.tx);
        let Some((tx, seq)) = guard.as_mut() else {
            return 0;
        };
        let pending = &self.inner.shared.flow.pending;
        pending.fetch_add(1, Ordering::Relaxed);
        if tx.send(op).is_err() {
            pending.fetch_sub(1, Ordering::Relaxed);
            return 0;
        }
        *seq += 1;
        *seq
    }

    /// Waits until the change numbered `seq` (as [`State::queued`] returned it) is
    /// committed; false if the store was closed first. Waits as long as commits fail.
    pub async fn committed(&self, seq: u64) -> bool {
        self.inner.shared.flow.wait_committed(seq).await
    }

    /// A stage is about to wait for the change `seq` (a worker with nothing committed left
    /// to work on): the writer commits it without holding it back for a larger commit.
    pub fn want(&self, seq: u64) {
        self.inner.shared.flow.want(seq);
    }

    /// The sequence number of the last change committed.
    pub fn committed_seq(&self) -> u64 {
        self.inner.shared.flow.last_committed()
    }

    /// The sequence number of the last change committed, as it advances (it stops when the
    /// store closes).
    pub fn committed_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.shared.flow.subscribe()
    }

    /// The handle the informers wait on while the writer's queue is full.
    pub fn pressure(&self) -> Pressure {
        Pressure(self.inner.shared.flow.clone())
    }

    /// Why the store is not ready, while its commits fail: for `/readyz`.
    pub fn problem(&self) -> Option<String> {
        let stats = &self.inner.shared.stats;
        let since = (*lock(&stats.failing_since))?;
        let error = lock(&stats.last_error).clone().unwrap_or_default();
        Some(format!(
            "state store {} cannot commit since {}: {error}",
            self.inner.shared.path.display(),
            crate::util::rfc3339(since)
        ))
    }

    /// Records that `route` delivered `object` (JSON) under `key`.
    pub fn delivered(&self, route: &Arc<str>, key: &str, object: Arc<str>) {
        self.send(Op::Delivered {
            route: route.clone(),
            key: key.to_string(),
            object,
        });
    }

    /// Records that `route` delivered the deletion of the object under `key`.
    pub fn forgot(&self, route: &Arc<str>, key: &str) {
        self.send(Op::Forgot {
            route: route.clone(),
            key: key.to_string(),
        });
    }

    /// Records the events `handler` has not finished for the key `route`/`object` (`None`:
    /// none): the one a worker is handling, if any, first, then what the key owes. Returns
    /// the change's sequence number, for [`State::committed`].
    pub fn queued(
        &self,
        handler: &Arc<str>,
        route: &str,
        object: &str,
        owed: Option<StoredOwed>,
    ) -> u64 {
        self.send(Op::Queue {
            handler: handler.clone(),
            key: format!("{route}\0{object}"),
            owed,
        })
    }

    /// Records (or, with `None`, removes) the dead letter `id` of `handler`.
    pub fn dead_letter(&self, handler: &Arc<str>, id: &str, letter: Option<StoredDeadLetter>) {
        self.send(Op::DeadLetter {
            handler: handler.clone(),
            id: id.to_string(),
            letter,
        });
    }

    /// Records whether `handler` is paused.
    pub fn paused(&self, handler: &Arc<str>, paused: bool) {
        self.send(Op::Paused {
            handler: handler.clone(),
            paused,
        });
    }

    /// Records the finalizer `route` holds objects with (each finalizer of a route is kept
    /// apart: one renamed is kept until it is released).
    pub fn record_finalizer(&self, route: &str, finalizer: StoredFinalizer) {
        self.send(Op::Finalizer {
            key: tables::finalizer_key(route, &finalizer.name),
            finalizer: Some(finalizer),
        });
    }

    /// Forgets the finalizer `name` of `route`.
    pub fn forget_finalizer(&self, route: &str, name: &str) {
        self.send(Op::Finalizer {
            key: tables::finalizer_key(route, name),
            finalizer: None,
        });
    }

    /// Each recorded finalizer with its route.
    fn recorded_finalizers(&self) -> Result<Vec<(String, StoredFinalizer)>> {
        let rows = self.read_table::<StoredFinalizer>(tables::FINALIZERS)?;
        Ok(rows
            .into_iter()
            .map(|(key, f)| (key.split('\0').next().unwrap_or_default().to_string(), f))
            .collect())
    }

    /// The finalizers recorded for routes that no route of the config holds objects with
    /// (`held`: the finalizers the config's routes hold), each with what its route last
    /// delivered. Records of a route no longer configured are kept ([`State::retain`])
    /// until its finalizer is released.
    pub fn stale_finalizers(&self, held: &HashSet<&str>) -> Result<Vec<StaleFinalizer>> {
        let mut stale = Vec::new();
        for (route, finalizer) in self.recorded_finalizers()? {
            if held.contains(finalizer.name.as_str()) {
                continue;
            }
            let records = self.route_records(&route)?;
            stale.push(StaleFinalizer {
                route,
                finalizer,
                records,
            });
        }
        Ok(stale)
    }

    /// Forgets everything about the route `name`.
    pub fn drop_route(&self, name: &str) {
        self.send(Op::DropRoute(name.to_string()));
    }

    /// Forgets everything about the handler `name`.
    pub fn drop_handler(&self, name: &str) {
        self.send(Op::DropHandler(name.to_string()));
    }

    /// Waits until every change sent so far is committed (or, at a close while commits
    /// fail, given up).
    pub async fn flush(&self) {
        let (reply, done) = tokio::sync::oneshot::channel();
        self.send(Op::Flush(reply));
        let _ = done.await;
    }

    /// Stops the writer once it has committed every change sent (or, while commits fail,
    /// after a few more attempts); later changes are dropped.
    pub fn close(&self) {
        self.inner.shared.closing.store(true, Ordering::Relaxed);
        lock(&self.inner.tx).take();
        if let Some(writer) = lock(&self.inner.writer).take() {
            let _ = writer.join();
        }
    }

    /// Drops the records of routes and handlers not named here (removed from the config
    /// while the daemon was down).
    /// A route that held objects with a finalizer keeps its records until the finalizer is
    /// released ([`State::stale_finalizers`]), unless another route holds it (`held`).
    pub fn retain(
        &self,
        routes: &HashSet<&str>,
        handlers: &HashSet<&str>,
        held: &HashSet<&str>,
    ) -> Result<()> {
        let mut releasing = HashSet::new();
        for (route, finalizer) in self.recorded_finalizers()? {
            if !held.contains(finalizer.name.as_str()) {
                releasing.insert(route);
            } else if !routes.contains(route.as_str()) {
                self.forget_finalizer(&route, &finalizer.name);
            }
        }
        let mut dropped_routes = Vec::new();
        let mut dropped_handlers = HashSet::new();
        for name in self.table_names()? {
            if let Some(route) = name.strip_prefix("route/") {
                if !routes.contains(route) && !releasing.contains(route) {
                    dropped_routes.push(route.to_string());
                }
            } else if let Some((_, handler)) = name.split_once('/')
                && !handlers.contains(handler)
            {
                dropped_handlers.insert(handler.to_string());
            }
        }
        for route in dropped_routes {
            tracing::info!(
                route,
                "dropping the stored state of a route no longer configured"
            );
            self.drop_route(&route);
        }
        for handler in dropped_handlers {
            tracing::info!(
                handler,
                "dropping the stored state of a handler no longer configured"
            );
            self.drop_handler(&handler);
        }
        Ok(())
    }

    /// What `route` last delivered, by object key: its records, brought up to date with the
    /// events handlers still hold from it. A route queues an event before it records the
    /// object, so a crash between the two commits leaves the queue the newer of the two.
    pub fn route_records(&self, route: &str) -> Result<HashMap<String, RouteRecord>> {
        let mut records: HashMap<String, RouteRecord> = self
            .read_table(&tables::route(route))?
            .into_iter()
            .collect();
        let prefix = format!("{route}\0");
        for handler in self.handler_names()? {
            for (key, owed) in self.read_table::<StoredOwed>(&tables::owed(&handler))? {
                let Some(object) = key.strip_prefix(&prefix) else {
                    continue;
                };
                // Oldest first: the last is the newest state the route queued.
                let Some(last) = owed.events.last() else {
                    continue;
                };
                if last.kind == "deleted" {
                    records.remove(object);
                } else if let Some(record) = RouteRecord::of_json(&last.object) {
                    records.insert(object.to_string(), record);
                }
            }
        }
        Ok(records)
    }

    /// The handlers that have queued keys in the store.
    fn handler_names(&self) -> Result<HashSet<String>> {
        Ok(self
            .table_names()?
            .into_iter()
            .filter_map(|t| t.strip_prefix("owed/").map(str::to_string))
            .collect())
    }

    /// Everything kept for the handler `name`.
    pub fn handler(&self, name: &str) -> Result<HandlerSnapshot> {
        let paused = self
            .read_table::<bool>(tables::PAUSED)?
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v);
        // Rows come in key order: by route, then object.
        let keys = self
            .read_table::<StoredOwed>(&tables::owed(name))?
            .into_iter()
            .map(|(key, owed)| {
                let (route, object) = key.split_once('\0').unwrap_or((&key, ""));
                StoredKey {
                    route: route.to_string(),
                    object: object.to_string(),
                    owed,
                }
            })
            .collect();
        let dead_letters = self
            .read_table::<StoredDeadLetter>(&tables::dead(name))?
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        Ok(HandlerSnapshot {
            paused,
            keys,
            dead_letters,
        })
    }

    /// The store for /status.
    pub fn status(&self) -> StateStatus {
        let shared = &self.inner.shared;
        let stats = &shared.stats;
        let (max_pending_writes, backpressure_waits, backpressure) = shared.flow.pressure();
        StateStatus {
            path: shared.path.display().to_string(),
            size_bytes: std::fs::metadata(&shared.path).map_or(0, |m| m.len())
                + shared.log_bytes.load(Ordering::Relaxed),
            commits: stats.commits.load(Ordering::Relaxed),
            failures: stats.failures.load(Ordering::Relaxed),
            last_commit: lock(&stats.last_commit).map(crate::util::rfc3339),
            pending_writes: shared.flow.pending.load(Ordering::Relaxed),
            max_pending_writes,
            backpressure,
            backpressure_waits,
            failing_since: lock(&stats.failing_since).map(crate::util::rfc3339),
            last_error: lock(&stats.last_error).clone(),
        }
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.inner.shared.path
    }

    /// The open store, for reading.
    fn db(&self) -> Result<Arc<Database>> {
        crate::util::read(&self.inner.shared.db)
            .clone()
            .ok_or_else(|| Error::Corrupt {
                path: self.inner.shared.path.clone(),
                reason: "the store is being opened again after a failed write".into(),
            })
    }

    /// Every row of a table, decoded; a missing table has none. A row that does not decode
    /// is corruption.
    fn read_table<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Vec<(String, T)>> {
        let rows = {
            // Held while the B-tree is read: a checkpoint ending meanwhile waits.
            let pending = crate::util::read(&self.inner.shared.pending);
            let db = self.db()?;
            let mut rows = raw_rows(&db, name).map_err(|e| self.row_error(e))?;
            pending.lay_over(name, &mut rows);
            rows
        };
        decode_rows(name, rows).map_err(|e| self.row_error(e))
    }

    /// The names of the tables there are, with the changes not in the B-tree yet.
    fn table_names(&self) -> Result<BTreeSet<String>> {
        let read = |e: redb::Error| self.read_error(e);
        let pending = crate::util::read(&self.inner.shared.pending);
        let txn = self.db()?.begin_read().map_err(|e| read(e.into()))?;
        let mut names: BTreeSet<String> = txn
            .list_tables()
            .map_err(|e| read(e.into()))?
            .map(|t| t.name().to_string())
            .collect();
        pending.lay_over_names(&mut names);
        Ok(names)
    }

    fn row_error(&self, e: RowError) -> Error {
        match e {
            RowError::Db(e) => self.read_error(e),
            RowError::Decode(reason) => Error::Corrupt {
                path: self.inner.shared.path.clone(),
                reason,
            },
        }
    }

    fn read_error(&self, source: redb::Error) -> Error {
        Error::Read {
            path: self.inner.shared.path.clone(),
            source,
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Relaxed);
        lock(&self.tx).take();
        if let Some(writer) = lock(&self.writer).take() {
            let _ = writer.join();
        }
    }
}

enum RowError {
    Db(redb::Error),
    Decode(String),
}

fn read_rows<T: serde::de::DeserializeOwned>(
    db: &Database,
    name: &str,
) -> Result<Vec<(String, T)>, RowError> {
    decode_rows(name, raw_rows(db, name)?)
}

/// Every row of a table as stored; a missing table has none.
fn raw_rows(db: &Database, name: &str) -> Result<BTreeMap<String, Vec<u8>>, RowError> {
    let db_err = |e: redb::Error| RowError::Db(e);
    let txn = db.begin_read().map_err(|e| db_err(e.into()))?;
    let table = match txn.open_table(writer::def(name)) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(db_err(e.into())),
    };
    let mut rows = BTreeMap::new();
    for row in table.iter().map_err(|e| db_err(e.into()))? {
        let (key, value) = row.map_err(|e| db_err(e.into()))?;
        rows.insert(key.value().to_string(), value.value().to_vec());
    }
    Ok(rows)
}

/// Decodes the rows of table `name`; one that does not decode is [`RowError::Decode`].
fn decode_rows<T: serde::de::DeserializeOwned>(
    name: &str,
    rows: BTreeMap<String, Vec<u8>>,
) -> Result<Vec<(String, T)>, RowError> {
    rows.into_iter()
        .map(|(key, value)| {
            let decoded = serde_json::from_slice(&value)
                .map_err(|e| RowError::Decode(format!("table {name:?}, key {key:?}: {e}")))?;
            Ok((key, decoded))
        })
        .collect()
}

/// Opens the store at `path`, checks its integrity and layout version, and decodes every
/// row; any failure but "in use" is [`Error::Corrupt`]. A panic inside the store library on
/// a damaged file is caught and reported the same way.
fn open_checked(path: &Path) -> Result<Database> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let attempt = || -> Result<Database> {
        check_header(path).map_err(corrupt)?;
        let mut db = match Database::create(path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(Error::InUse {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(corrupt(e.to_string())),
        };
        match db.check_integrity() {
            Ok(true) => {}
            Ok(false) => return Err(corrupt("the integrity check failed".into())),
            Err(e) => return Err(corrupt(e.to_string())),
        }
        check_format(&db).map_err(corrupt)?;
        Ok(db)
    };
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(attempt));
    std::panic::set_hook(previous);
    result.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the store library failed on it".into());
        Err(corrupt(what))
    })
}

/// What the log holds that no checkpoint does yet.
struct Replayed {
    /// Its changes, the last of each key; `None` when there are no segments.
    changes: Option<overlay::Overlay>,
    /// The number of the last segment there is (or that a checkpoint covered).
    last: u64,
}

/// Opens the store and reads the log segments beside it.
fn open_with_log(dir: &Path, path: &Path) -> Result<(Database, Replayed)> {
    let db = open_checked(path)?;
    let replayed = replay_log(dir, path, &db)?;
    Ok((db, replayed))
}

/// Reads the log segments in `dir` that no checkpoint holds yet, writing nothing: their
/// changes are laid over the B-tree's rows until the first checkpoint writes them, with
/// retries like any other (a full disk at start keeps them, it does not stop the daemon).
/// A segment that is not one is [`Error::Corrupt`]; a commit cut short at a segment's end
/// was never acknowledged and is left out.
fn replay_log(dir: &Path, path: &Path, db: &Database) -> Result<Replayed> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let checkpointed = read_rows::<u64>(db, tables::META)
        .map_err(|e| corrupt(row_reason(e)))?
        .into_iter()
        .find_map(|(key, n)| (key == checkpoint::CHECKPOINTED).then_some(n))
        .unwrap_or(0);
    let numbers = log::segments(dir).map_err(|source| Error::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut changes = overlay::Overlay::default();
    let mut read = 0usize;
    for &n in numbers.iter().filter(|n| **n > checkpointed) {
        let segment = log::segment_path(dir, n);
        let replayed = log::replay(&segment).map_err(corrupt)?;
        if replayed.torn > 0 {
            tracing::warn!(segment = %segment.display(), bytes = replayed.torn, "the state store's log ends in a commit cut short, which nothing waited on; it is left out");
        }
        read += replayed.changes.len();
        for change in replayed.changes {
            changes.apply(change);
        }
    }
    if read > 0 {
        tracing::info!(store = %path.display(), changes = read, "read the state store's log; a checkpoint writes it into the store");
    }
    Ok(Replayed {
        changes: (!numbers.is_empty()).then_some(changes),
        last: numbers.last().copied().unwrap_or(0).max(checkpointed),
    })
}

/// Moves the log segments in `dir` aside (`switchyard.log.N.corrupt-UNIXTIME`), with the
/// store they belong to.
fn set_log_aside(dir: &Path) {
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for n in log::segments(dir).unwrap_or_default() {
        let segment = log::segment_path(dir, n);
        let aside = segment.with_extension(format!("{n}.corrupt-{stamp}"));
        if let Err(e) = std::fs::rename(&segment, &aside) {
            tracing::warn!(segment = %segment.display(), error = %e, "cannot move a log segment aside");
        }
    }
}

/// The first bytes of every redb file.
const MAGIC: &[u8] = b"redb";

/// Refuses a file that exists but does not begin as a store does: empty, cut short or
/// something else (redb itself would take an empty file for a new store).
fn check_header(path: &Path) -> Result<(), String> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let mut head = Vec::with_capacity(MAGIC.len());
    file.take(MAGIC.len() as u64)
        .read_to_end(&mut head)
        .map_err(|e| e.to_string())?;
    match head.len() {
        0 => Err("the file is empty, not a store".into()),
        n if head[..] != MAGIC[..n] => Err("the file is not a redb store".into()),
        n if n < MAGIC.len() => Err(format!("the file is cut short ({n} bytes)")),
        _ => Ok(()),
    }
}

/// Checks (or, in a new store, writes) the layout version, and that every row decodes.
fn check_format(db: &Database) -> Result<(), String> {
    let rows: Vec<(String, u64)> = read_rows(db, tables::META).map_err(row_reason)?;
    match rows.iter().find(|(k, _)| k == "format") {
        Some((_, v)) if *v == FORMAT => {}
        Some((_, 1)) => upgrade_from_1(db).map_err(|e| format!("upgrading layout 1: {e}"))?,
        Some((_, v)) => return Err(format!("layout version {v}, this daemon reads {FORMAT}")),
        None => {
            let txn = db.begin_write().map_err(|e| e.to_string())?;
            write_format(&txn).map_err(|e| e.to_string())?;
            txn.commit().map_err(|e| e.to_string())?;
        }
    }
    let names: Vec<String> = {
        let txn = db.begin_read().map_err(|e| e.to_string())?;
        txn.list_tables()
            .map_err(|e| e.to_string())?
            .map(|t| t.name().to_string())
            .collect()
    };
    for name in names {
        let _: Vec<(String, serde_json::Value)> = read_rows(db, &name).map_err(row_reason)?;
    }
    Ok(())
}

/// Writes this daemon's layout version.
fn write_format(txn: &redb::WriteTransaction) -> Result<(), redb::Error> {
    let mut meta = txn.open_table(writer::def(tables::META))?;
    let bytes = serde_json::to_vec(&FORMAT).expect("a number serializes");
    meta.insert("format", bytes.as_slice())?;
    Ok(())
}

/// Brings a store of layout 1 to this one, in one transaction: each event in flight goes
/// first into its key's entry in `owed/HANDLER`, and the `inflight/HANDLER` tables go.
fn upgrade_from_1(db: &Database) -> Result<(), String> {
    let names: Vec<String> = {
        let txn = db.begin_read().map_err(|e| e.to_string())?;
        txn.list_tables()
            .map_err(|e| e.to_string())?
            .filter_map(|t| t.name().strip_prefix("inflight/").map(str::to_string))
            .collect()
    };
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    for handler in names {
        let in_flight: Vec<(String, StoredEvent)> =
            read_rows(db, &tables::in_flight_v1(&handler)).map_err(row_reason)?;
        let owed: HashMap<String, StoredOwed> = read_rows(db, &tables::owed(&handler))
            .map_err(row_reason)?
            .into_iter()
            .collect();
        {
            let mut table = txn
                .open_table(writer::def(&tables::owed(&handler)))
                .map_err(|e| e.to_string())?;
            for (key, event) in in_flight {
                let mut entry = owed.get(&key).cloned().unwrap_or(StoredOwed {
                    every: None,
                    events: Vec::new(),
                });
                entry.events.insert(0, event);
                let bytes = serde_json::to_vec(&entry).expect("stored records serialize");
                table
                    .insert(key.as_str(), bytes.as_slice())
                    .map_err(|e| e.to_string())?;
            }
        }
        txn.delete_table(writer::def(&tables::in_flight_v1(&handler)))
            .map_err(|e| e.to_string())?;
    }
    write_format(&txn).map_err(|e| e.to_string())?;
    txn.commit().map_err(|e| e.to_string())
}

fn row_reason(e: RowError) -> String {
    match e {
        RowError::Db(e) => e.to_string(),
        RowError::Decode(reason) => reason,
    }
}

/// Moves an unreadable store aside (`switchyard.redb.corrupt-UNIXTIME`); returns where.
fn set_aside(path: &Path) -> Result<PathBuf> {
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = path.with_extension(format!("redb.corrupt-{stamp}"));
    std::fs::rename(path, &aside).map_err(|source| Error::Dir {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(aside)
}

#[cfg(test)]
mod tests;
