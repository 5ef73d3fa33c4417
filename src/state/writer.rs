//! The writer thread: takes every change the stages send, in order, and commits them in
//! batches (group commit). What the store holds after a crash is therefore always the
//! changes up to some point, never a later change without an earlier one: a route's record
//! of an object is written after the handler's queue entry for it, so the store never says
//! "delivered" about an event it does not also hold as queued or done.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime};

use redb::{Database, TableDefinition, WriteTransaction};

use super::records::RouteRecord;
use super::{Op, Stats, tables};

/// Most changes committed in one transaction.
const BATCH: usize = 8192;

/// Runs until every sender is gone, then commits what is left and returns.
pub(super) fn run(
    db: Arc<Database>,
    rx: Receiver<Op>,
    stats: Arc<Stats>,
    observe: Option<Box<dyn Fn(Duration) + Send>>,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let count = batch.len() as u64;
        let started = Instant::now();
        let mut flushed = Vec::new();
        match commit(&db, batch, &mut flushed) {
            Ok(()) => {
                let took = started.elapsed();
                if let Some(observe) = &observe {
                    observe(took);
                }
                stats.commits.fetch_add(1, Ordering::Relaxed);
                *crate::util::lock(&stats.last_commit) = Some(SystemTime::now());
                *crate::util::lock(&stats.last_error) = None;
            }
            Err(e) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, changes = count, "cannot write the state store; these changes are not kept");
                *crate::util::lock(&stats.last_error) = Some(e.to_string());
            }
        }
        stats.pending.fetch_sub(count, Ordering::Relaxed);
        for reply in flushed {
            let _ = reply.send(());
        }
    }
}

/// Applies `batch` in one write transaction; flush requests are answered after it commits.
fn commit(
    db: &Database,
    batch: Vec<Op>,
    flushed: &mut Vec<tokio::sync::oneshot::Sender<()>>,
) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    for op in batch {
        match op {
            Op::Flush(reply) => flushed.push(reply),
            op => apply(&txn, op)?,
        }
    }
    txn.commit()?;
    Ok(())
}

/// Applies one change.
fn apply(txn: &WriteTransaction, op: Op) -> Result<(), redb::Error> {
    match op {
        Op::Delivered { route, key, object } => {
            // A value that is not a JSON object is never delivered by an informer.
            if let Some(record) = RouteRecord::of_json(&object) {
                let name = tables::route(&route);
                put_json(txn, &name, &key, &record)?;
            }
        }
        Op::Forgot { route, key } => {
            let name = tables::route(&route);
            txn.open_table(def(&name))?.remove(key.as_str())?;
        }
        Op::Queue {
            handler,
            key,
            in_flight,
            owed,
        } => {
            if let Some(in_flight) = in_flight {
                let name = tables::in_flight(&handler);
                put_or_remove(txn, &name, &key, in_flight.as_ref())?;
            }
            let name = tables::owed(&handler);
            put_or_remove(txn, &name, &key, owed.as_ref())?;
        }
        Op::DeadLetter {
            handler,
            id,
            letter,
        } => {
            let name = tables::dead(&handler);
            put_or_remove(txn, &name, &id, letter.as_ref())?;
        }
        Op::Paused { handler, paused } => {
            put_json(txn, tables::PAUSED, &handler, &paused)?;
        }
        Op::DropRoute(route) => {
            txn.delete_table(def(&tables::route(&route)))?;
        }
        Op::DropHandler(handler) => {
            for name in [
                tables::owed(&handler),
                tables::in_flight(&handler),
                tables::dead(&handler),
            ] {
                txn.delete_table(def(&name))?;
            }
            txn.open_table(def(tables::PAUSED))?.remove(&*handler)?;
        }
        Op::Flush(_) => {}
    }
    Ok(())
}

/// The definition of a table of JSON values by text key.
pub(super) fn def(name: &str) -> TableDefinition<'_, &'static str, &'static [u8]> {
    TableDefinition::new(name)
}

fn put_json<T: serde::Serialize>(
    txn: &WriteTransaction,
    table: &str,
    key: &str,
    value: &T,
) -> Result<(), redb::Error> {
    let bytes = serde_json::to_vec(value).expect("stored records serialize");
    txn.open_table(def(table))?.insert(key, bytes.as_slice())?;
    Ok(())
}

fn put_or_remove<T: serde::Serialize>(
    txn: &WriteTransaction,
    table: &str,
    key: &str,
    value: Option<&T>,
) -> Result<(), redb::Error> {
    match value {
        Some(value) => put_json(txn, table, key, value),
        None => {
            txn.open_table(def(table))?.remove(key)?;
            Ok(())
        }
    }
}
