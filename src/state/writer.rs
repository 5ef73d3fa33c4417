//! The writer thread: takes every change the stages send, in order, and commits them in
//! batches (group commit). What the store holds after a crash is therefore always the
//! changes up to some point, never a later change without an earlier one: a route's record
//! of an object is written after the handler's queue entry for it, so the store never says
//! "delivered" about an event it does not also hold as queued or done.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

use redb::{Database, TableDefinition, WriteTransaction};

use super::records::RouteRecord;
use super::{Op, Shared, tables};
use crate::util::lock;
use erased::Value as _;

/// Most changes committed in one transaction.
const BATCH: usize = 8192;

/// The shortest time between the starts of two commits. A change sent after a pause is
/// committed at once; under load the changes of up to this long share a commit, whose cost
/// (the store's page writes and its sync) is then paid once for all of them.
const INTERVAL: Duration = Duration::from_millis(5);

/// The first wait after a failed commit; it doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(100);
/// The longest wait between two attempts at a failing commit.
const RETRY_MAX: Duration = Duration::from_secs(5);
/// Attempts at the last changes once every sender is gone (the daemon is stopping).
const ATTEMPTS_AT_CLOSE: u32 = 5;
/// How often a commit that keeps failing is logged again at ERROR.
const REMIND: Duration = Duration::from_secs(60);

/// Runs until every sender is gone, then commits what is left and returns. A failed
/// commit keeps its changes: the store is closed and opened again and the same changes,
/// with those sent meanwhile, are tried again with backoff until they commit. Nothing after
/// them is committed first, and nothing waiting on them (a worker's call, a flush) goes on.
pub(super) fn run(
    shared: Arc<Shared>,
    rx: Receiver<Op>,
    observe: Option<Box<dyn Fn(Duration) + Send>>,
) {
    let mut batch: Vec<Op> = Vec::new();
    // The sequence number of the last change taken from the channel.
    let mut received = 0u64;
    let mut failing = Failing::default();
    // When the last commit started.
    let mut last_commit: Option<Instant> = None;
    loop {
        if batch.is_empty() {
            match rx.recv() {
                Ok(op) => batch.push(op),
                Err(_) => return,
            }
            received += 1;
        }
        // Under load, at most one commit per interval: what arrives meanwhile joins it.
        let due = last_commit.map_or_else(Instant::now, |at| at + INTERVAL);
        let mut closed = false;
        while batch.len() < BATCH {
            let wait = due.saturating_duration_since(Instant::now());
            let next = if wait.is_zero() {
                rx.try_recv().map_err(|e| e == TryRecvError::Disconnected)
            } else {
                rx.recv_timeout(wait)
                    .map_err(|e| e == RecvTimeoutError::Disconnected)
            };
            match next {
                Ok(op) => {
                    batch.push(op);
                    received += 1;
                }
                Err(disconnected) => {
                    closed = disconnected;
                    break;
                }
            }
        }
        let started = Instant::now();
        last_commit = Some(started);
        match commit(&shared, &batch) {
            Ok(()) => {
                if let Some(observe) = &observe {
                    observe(started.elapsed());
                }
                failing.recovered(&shared);
                shared.stats.commits.fetch_add(1, Ordering::Relaxed);
                *lock(&shared.stats.last_commit) = Some(SystemTime::now());
                *lock(&shared.stats.last_error) = None;
                shared.flow.committed(received, batch.len() as u64);
                for op in batch.drain(..) {
                    if let Op::Flush(reply) = op {
                        let _ = reply.send(());
                    }
                }
            }
            Err(e) => {
                let wait = failing.failed(&shared, &e, batch.len());
                let stopping = closed || shared.closing.load(Ordering::Relaxed);
                if stopping && failing.attempts >= ATTEMPTS_AT_CLOSE {
                    tracing::error!(store = %shared.path.display(), error = %e, changes = batch.len(), "the daemon is stopping and the state store still cannot commit: these changes are not kept; the next start delivers their events again");
                    return;
                }
                std::thread::sleep(wait);
                reopen(&shared);
            }
        }
    }
}

/// A run of failed commits.
#[derive(Default)]
struct Failing {
    attempts: u32,
    since: Option<SystemTime>,
    logged: Option<Instant>,
}

impl Failing {
    /// Records a failure; returns how long to wait before the next attempt.
    fn failed(&mut self, shared: &Shared, error: &str, changes: usize) -> Duration {
        self.attempts += 1;
        let stats = &shared.stats;
        stats.failures.fetch_add(1, Ordering::Relaxed);
        *lock(&stats.last_error) = Some(error.to_string());
        let since = *self.since.get_or_insert_with(SystemTime::now);
        *lock(&stats.failing_since) = Some(since);
        if self.logged.is_none_or(|at| at.elapsed() >= REMIND) {
            self.logged = Some(Instant::now());
            tracing::error!(store = %shared.path.display(), %error, changes, attempts = self.attempts, "cannot commit to the state store; its changes are kept and tried again, and plugins are not called for events not yet committed");
        }
        RETRY_MIN
            .saturating_mul(1 << self.attempts.min(16).saturating_sub(1))
            .min(RETRY_MAX)
    }

    /// A commit succeeded: ends the run of failures, if there was one.
    fn recovered(&mut self, shared: &Shared) {
        if self.attempts > 0 {
            tracing::info!(store = %shared.path.display(), attempts = self.attempts, "the state store commits again");
            *self = Self::default();
            *lock(&shared.stats.failing_since) = None;
        }
    }
}

/// Closes the store and opens it again: after a failed write redb refuses every later
/// transaction until then. A reader holding the old handle keeps it open; the next
/// attempt tries again.
fn reopen(shared: &Shared) {
    let mut slot = crate::util::write(&shared.db);
    if let Some(db) = slot.take() {
        match Arc::try_unwrap(db) {
            Ok(db) => drop(db),
            Err(db) => {
                *slot = Some(db);
                return;
            }
        }
    }
    match Database::create(&shared.path) {
        Ok(db) => *slot = Some(Arc::new(db)),
        Err(e) => {
            tracing::debug!(store = %shared.path.display(), error = %e, "cannot open the state store again yet");
        }
    }
}

/// Applies `batch` in one write transaction.
fn commit(shared: &Shared, batch: &[Op]) -> Result<(), String> {
    let Some(db) = crate::util::read(&shared.db).clone() else {
        return Err("the store is not open (opening it again failed)".into());
    };
    let attempt = || -> Result<(), redb::Error> {
        let txn = db.begin_write()?;
        let mut staged = Staged::default();
        for op in batch {
            match op {
                Op::DropRoute(route) => {
                    staged.write(&txn)?;
                    txn.delete_table(def(&tables::route(route)))?;
                }
                Op::DropHandler(handler) => {
                    staged.write(&txn)?;
                    for name in [
                        tables::owed(handler),
                        tables::in_flight_v1(handler),
                        tables::dead(handler),
                    ] {
                        txn.delete_table(def(&name))?;
                    }
                    txn.open_table(def(tables::PAUSED))?.remove(&**handler)?;
                }
                op => staged.stage(op),
            }
        }
        staged.write(&txn)?;
        txn.commit()?;
        Ok(())
    };
    attempt().map_err(|e| e.to_string())
}

/// What one row becomes.
enum Row<'a> {
    /// Removed.
    Remove,
    /// A route's record of an object.
    Record(RouteRecord),
    /// A value written as JSON.
    Json(&'a dyn erased::Value),
}

/// Object-safe serialization of the stored records.
mod erased {
    /// A value the writer serializes to JSON.
    pub(super) trait Value {
        fn to_json(&self) -> Vec<u8>;
    }

    impl<T: serde::Serialize> Value for T {
        fn to_json(&self) -> Vec<u8> {
            serde_json::to_vec(self).expect("stored records serialize")
        }
    }
}

/// A batch's changes by table and key, only the last change of each key kept: an entry
/// queued and finished within one commit costs one removal, and each table is opened once.
/// Changes are staged in order, so what is written is what applying them one by one would
/// leave; a dropped table ends the stage before it ([`Staged::write`]).
#[derive(Default)]
struct Staged<'a> {
    tables: std::collections::BTreeMap<String, std::collections::BTreeMap<&'a str, Row<'a>>>,
}

impl<'a> Staged<'a> {
    /// Stages one change (not a drop).
    fn stage(&mut self, op: &'a Op) {
        let (table, key, row) = match op {
            // A value that is not a JSON object is never delivered by an informer.
            Op::Delivered { route, key, object } => match RouteRecord::of_json(object) {
                Some(record) => (tables::route(route), key.as_str(), Row::Record(record)),
                None => return,
            },
            Op::Forgot { route, key } => (tables::route(route), key.as_str(), Row::Remove),
            Op::Queue { handler, key, owed } => (
                tables::owed(handler),
                key.as_str(),
                json_or_remove(owed.as_ref()),
            ),
            Op::DeadLetter {
                handler,
                id,
                letter,
            } => (
                tables::dead(handler),
                id.as_str(),
                json_or_remove(letter.as_ref()),
            ),
            Op::Paused { handler, paused } => {
                (tables::PAUSED.to_string(), &**handler, Row::Json(paused))
            }
            Op::Finalizer { key, finalizer } => (
                tables::FINALIZERS.to_string(),
                key.as_str(),
                json_or_remove(finalizer.as_ref()),
            ),
            Op::DropRoute(_) | Op::DropHandler(_) | Op::Flush(_) => return,
        };
        self.tables.entry(table).or_default().insert(key, row);
    }

    /// Writes what is staged, table by table, and empties the stage.
    fn write(&mut self, txn: &WriteTransaction) -> Result<(), redb::Error> {
        for (name, rows) in std::mem::take(&mut self.tables) {
            let mut table = txn.open_table(def(&name))?;
            for (key, row) in rows {
                match row {
                    Row::Remove => {
                        table.remove(key)?;
                    }
                    Row::Record(record) => {
                        table.insert(key, record.to_json().as_slice())?;
                    }
                    Row::Json(value) => {
                        table.insert(key, value.to_json().as_slice())?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn json_or_remove<T: serde::Serialize>(value: Option<&T>) -> Row<'_> {
    match value {
        Some(value) => Row::Json(value),
        None => Row::Remove,
    }
}

/// The definition of a table of JSON values by text key.
pub(super) fn def(name: &str) -> TableDefinition<'_, &'static str, &'static [u8]> {
    TableDefinition::new(name)
}
