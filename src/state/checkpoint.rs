//! The checkpoint thread: writes what the log holds into the store's B-tree, many commits'
//! changes in one transaction with only the last change of each key, then deletes the log
//! segments it covers. A queued event whose call ended before its checkpoint never reaches
//! the B-tree at all. The same transaction records the last segment it covers (`meta`), so
//! a crash between the commit and the deletion never applies a segment twice.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime};

use redb::{Database, WriteTransaction};

use super::Shared;
use super::overlay::Overlay;
use crate::util::lock;

/// The first wait after a failed write; it doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(100);
/// The longest wait between two attempts at a failing write.
const RETRY_MAX: Duration = Duration::from_secs(5);
/// Attempts at a failing write once the daemon is stopping; its log stays for the next
/// start to apply.
pub(super) const ATTEMPTS_AT_CLOSE: u32 = 5;
/// How often a write that keeps failing is logged again at ERROR.
const REMIND: Duration = Duration::from_secs(60);

/// The key in `meta` of the last log segment the B-tree holds.
pub(super) const CHECKPOINTED: &str = "checkpointed";

/// Takes the number of the last segment each checkpoint covers (its changes are in
/// `shared.pending.writing`) until the writer is gone. A failed write is retried with
/// backoff, the store opened again first; once the daemon is stopping it is given up after
/// a few attempts, its segments left for the next start.
pub(super) fn run(shared: Arc<Shared>, rx: Receiver<u64>) {
    while let Ok(upto) = rx.recv() {
        let Some((overlay, _)) = crate::util::read(&shared.pending).writing.clone() else {
            continue;
        };
        let mut failing = Failing::default();
        while let Err(e) = write(&shared, &overlay, upto) {
            let wait = failing.failed(&shared, &e, "checkpoint");
            if shared.closing.load(Ordering::Relaxed) && failing.attempts >= ATTEMPTS_AT_CLOSE {
                tracing::error!(store = %shared.path.display(), error = %e, "the daemon is stopping and the state store's log cannot be written into the store: the log stays, and the next start applies it");
                return;
            }
            std::thread::sleep(wait);
            reopen(&shared);
        }
        failing.recovered(&shared);
        remove_segments(&shared.dir, upto);
        crate::util::write(&shared.pending).writing = None;
    }
}

/// Writes `overlay` and the segment number `upto` in one transaction.
pub(super) fn write(shared: &Shared, overlay: &Overlay, upto: u64) -> Result<(), String> {
    let Some(db) = crate::util::read(&shared.db).clone() else {
        return Err("the store is not open (opening it again failed)".into());
    };
    let attempt = || -> Result<(), redb::Error> {
        let txn = db.begin_write()?;
        overlay.write(&txn)?;
        write_checkpointed(&txn, upto)?;
        txn.commit()?;
        Ok(())
    };
    attempt().map_err(|e| e.to_string())
}

/// Records that the B-tree holds every segment up to `upto`.
pub(super) fn write_checkpointed(txn: &WriteTransaction, upto: u64) -> Result<(), redb::Error> {
    let mut meta = txn.open_table(super::writer::def(super::tables::META))?;
    let bytes = serde_json::to_vec(&upto).expect("a number serializes");
    meta.insert(CHECKPOINTED, bytes.as_slice())?;
    Ok(())
}

/// Deletes the log segments up to `upto`; one that stays is applied by no later start (the
/// store records `upto`) and deleted by the next checkpoint.
pub(super) fn remove_segments(dir: &std::path::Path, upto: u64) {
    let Ok(numbers) = super::log::segments(dir) else {
        return;
    };
    for n in numbers.into_iter().filter(|n| *n <= upto) {
        let path = super::log::segment_path(dir, n);
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(segment = %path.display(), error = %e, "cannot delete a log segment the store holds; the next checkpoint tries again");
        }
    }
}

/// A run of failed writes, of the log or of a checkpoint.
#[derive(Default)]
pub(super) struct Failing {
    pub(super) attempts: u32,
    since: Option<SystemTime>,
    logged: Option<Instant>,
}

impl Failing {
    /// Records a failure of `what`; returns how long to wait before the next attempt.
    pub(super) fn failed(&mut self, shared: &Shared, error: &str, what: &str) -> Duration {
        self.attempts += 1;
        let stats = &shared.stats;
        stats.failures.fetch_add(1, Ordering::Relaxed);
        *lock(&stats.last_error) = Some(error.to_string());
        let since = *self.since.get_or_insert_with(SystemTime::now);
        *lock(&stats.failing_since) = Some(since);
        if self.logged.is_none_or(|at| at.elapsed() >= REMIND) {
            self.logged = Some(Instant::now());
            tracing::error!(store = %shared.path.display(), %error, what, attempts = self.attempts, "cannot write to the state store; its changes are kept and tried again, and plugins are not called for events not yet committed");
        }
        RETRY_MIN
            .saturating_mul(1 << self.attempts.min(16).saturating_sub(1))
            .min(RETRY_MAX)
    }

    /// A write succeeded: ends the run of failures, if there was one.
    pub(super) fn recovered(&mut self, shared: &Shared) {
        if self.attempts > 0 {
            tracing::info!(store = %shared.path.display(), attempts = self.attempts, "the state store is written again");
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
