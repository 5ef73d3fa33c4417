//! The writer thread: takes every change the stages send, in order, and commits them in
//! batches (group commit) to the log ([`super::log`]): one write and one sync per commit.
//! A commit no stage waits on is held back to gather more ([`super::flow`], "Demand"), so
//! through a large list one sync covers hundreds of events.
//! What the store holds after a crash is therefore always the changes up to some point,
//! never a later change without an earlier one: a route's record of an object is written
//! after the handler's queue entry for it, so the store never says "delivered" about an
//! event it does not also hold as queued or done. Every second (or sooner, once the changes
//! since the last checkpoint are large) the writer starts a new log segment and hands the
//! changes of the old ones to the checkpoint thread ([`super::checkpoint`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use redb::TableDefinition;

use super::checkpoint::{ATTEMPTS_AT_CLOSE, Failing};
use super::flow::Flow;
use super::log::{Change, Segment, frame_of};
use super::records::{RouteRecord, StoredOwed};
use super::{Op, Shared, tables};
use crate::util::lock;

/// Most changes committed in one transaction.
const BATCH: usize = 8192;

/// The shortest time between the starts of two commits. A change sent after a pause is
/// committed at once; under load the changes of up to this long share a commit, whose sync
/// is then paid once for all of them.
const INTERVAL: Duration = Duration::from_millis(5);

/// Bytes of changes at which the writer stops holding back a commit nobody waits on: a
/// commit's frame stays about this size, in a buffer reused from commit to commit.
const DEFER_BYTES: usize = 1 << 20;
/// The largest frame buffer kept for the next commit.
const FRAME_KEEP: usize = 2 * DEFER_BYTES;

/// How long changes stay in the log before a checkpoint writes them into the B-tree.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// Bytes of changes since the last checkpoint at which the next one starts sooner.
const CHECKPOINT_BYTES: usize = 32 << 20;

/// Runs until every sender is gone, then commits what is left, writes the log into the
/// B-tree and returns. A failed commit keeps its changes: the same changes, with those
/// sent meanwhile, are tried again with backoff until they commit. Nothing after them is
/// committed first, and nothing waiting on them (a worker's call, a flush) goes on.
pub(super) fn run(
    shared: Arc<Shared>,
    rx: Receiver<Op>,
    next_segment: u64,
    observe: Option<Box<dyn Fn(Duration) + Send>>,
) {
    let mut log = Log::start(&shared, next_segment);
    shared.flow.set_writer();
    let mut batch: Vec<Op> = Vec::new();
    // The sequence number of the last change taken from the channel.
    let mut received = 0u64;
    let mut failing = Failing::default();
    // When the last commit started.
    let mut last_commit: Option<Instant> = None;
    // When the oldest change of the batch arrived, and about how many bytes it holds.
    let mut oldest = Instant::now();
    let mut bytes = 0usize;
    loop {
        if batch.is_empty() {
            match rx.recv() {
                Ok(op) => {
                    bytes = op.size();
                    batch.push(op);
                }
                Err(_) => break,
            }
            received += 1;
            oldest = Instant::now();
        }
        // Under load, at most one commit per interval: what arrives meanwhile joins it. The
        // writer sleeps through the interval rather than waiting on the channel, so that a
        // stage sending a change never has to wake it (a wake costs the sender a syscall
        // and both threads a switch, more than the change's own encoding).
        let wait = last_commit.map_or(Duration::ZERO, |at| {
            (at + INTERVAL).saturating_duration_since(Instant::now())
        });
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        let mut closed = take(&rx, &mut batch, &mut received, &mut bytes);
        // While no stage waits on these changes, more join them, up to MAX_DEFER after
        // the oldest: through a large list, a commit (and its sync) every 100 ms, not 5.
        while !closed
            && batch.len() < BATCH
            && bytes < DEFER_BYTES
            && !shared.closing.load(Ordering::Relaxed)
            && !batch.iter().any(|op| matches!(op, Op::Flush(_)))
        {
            let left = Flow::MAX_DEFER.saturating_sub(oldest.elapsed());
            if left.is_zero() || !shared.flow.defer(left.min(INTERVAL)) {
                break;
            }
            closed = take(&rx, &mut batch, &mut received, &mut bytes);
        }
        let started = Instant::now();
        last_commit = Some(started);
        match log.commit(&shared, &batch) {
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
                log.maybe_checkpoint(&shared);
                // Only while no change waits for the next commit: zeros never delay one.
                if shared.flow.pending.load(Ordering::Relaxed) == 0 {
                    log.write_ahead();
                }
            }
            Err(e) => {
                let wait = failing.failed(&shared, &e, "commit");
                let stopping = closed || shared.closing.load(Ordering::Relaxed);
                if stopping && failing.attempts >= ATTEMPTS_AT_CLOSE {
                    tracing::error!(store = %shared.path.display(), error = %e, changes = batch.len(), "the daemon is stopping and the state store still cannot commit: these changes are not kept; the next start delivers their events again");
                    break;
                }
                std::thread::sleep(wait);
            }
        }
    }
    log.finish(&shared);
}

/// Takes what the channel holds into `batch`, up to [`BATCH`] changes, adding their size
/// to `bytes`; true once every sender is gone.
fn take(rx: &Receiver<Op>, batch: &mut Vec<Op>, received: &mut u64, bytes: &mut usize) -> bool {
    while batch.len() < BATCH {
        match rx.try_recv() {
            Ok(op) => {
                *bytes += op.size();
                batch.push(op);
                *received += 1;
            }
            Err(e) => return e == TryRecvError::Disconnected,
        }
    }
    false
}

/// The log being written, and the checkpoint thread it hands segments to.
struct Log {
    /// The segment commits go to; created by the first commit after a checkpoint, so a
    /// failure to create it is a failed commit, retried as any other.
    segment: Option<Segment>,
    /// The number of the next segment to create.
    next: u64,
    /// When the last checkpoint was handed over.
    since: Instant,
    checkpoints: Option<Sender<u64>>,
    checkpointer: Option<JoinHandle<()>>,
    names: Names,
    /// The buffer commits build their frames in.
    frame: Vec<u8>,
}

impl Log {
    /// Starts the checkpoint thread, handing it the changes read from the log at open, if
    /// any; `next` is the number of the first segment to write.
    fn start(shared: &Arc<Shared>, next: u64) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let checkpointer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("state-checkpoint".into())
                .spawn(move || super::checkpoint::run(shared, rx))
        };
        let checkpointer = match checkpointer {
            Ok(handle) => Some(handle),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the state store's checkpoint thread; the log grows until the next start applies it");
                None
            }
        };
        let replayed = crate::util::read(&shared.pending)
            .writing
            .as_ref()
            .map(|(_, upto)| *upto);
        if let (Some(upto), Some(_)) = (replayed, &checkpointer) {
            let _ = tx.send(upto);
        }
        Self {
            segment: None,
            next,
            since: Instant::now(),
            checkpoints: checkpointer.is_some().then_some(tx),
            checkpointer,
            names: Names::default(),
            frame: Vec::new(),
        }
    }

    /// The number of the last segment: the one being written, else the one before the next.
    fn last(&self) -> u64 {
        self.segment.as_ref().map_or(self.next - 1, |s| s.number)
    }

    /// Commits `batch` to the log, then to the changes readers lay over the B-tree.
    fn commit(&mut self, shared: &Shared, batch: &[Op]) -> Result<(), String> {
        let changes = changes(batch, &mut self.names);
        if changes.is_empty() {
            return Ok(());
        }
        frame_of(&changes, &mut self.frame);
        let frame = &self.frame;
        let segment = match &mut self.segment {
            Some(segment) => segment,
            None => {
                let created = Segment::create(&shared.dir, self.next).map_err(|e| {
                    let path = super::log::segment_path(&shared.dir, self.next);
                    format!("{}: {e}", path.display())
                })?;
                self.next += 1;
                self.segment.insert(created)
            }
        };
        segment
            .append(frame)
            .map_err(|e| format!("{}: {e}", segment.path().display()))?;
        if self.frame.capacity() > FRAME_KEEP {
            self.frame = Vec::new();
        }
        shared.log_bytes.store(segment.len(), Ordering::Relaxed);
        let mut pending = crate::util::write(&shared.pending);
        for change in changes {
            pending.current.apply(change);
        }
        Ok(())
    }

    /// After a commit, with its waiters released and no change sent since: zeros written
    /// ahead of the segment's last frame for the next commits to overwrite
    /// ([`Segment::write_ahead`]).
    fn write_ahead(&mut self) {
        if let Some(segment) = &mut self.segment {
            segment.write_ahead();
        }
    }

    /// Hands the changes since the last checkpoint to the checkpoint thread, once they are
    /// a second old or large, and the thread is done with the one before.
    fn maybe_checkpoint(&mut self, shared: &Shared) {
        let Some(checkpoints) = &self.checkpoints else {
            return;
        };
        {
            let pending = crate::util::read(&shared.pending);
            let due = self.since.elapsed() >= CHECKPOINT_EVERY
                || pending.current.bytes() >= CHECKPOINT_BYTES;
            if !due || pending.writing.is_some() {
                return;
            }
            if pending.current.is_empty() {
                self.since = Instant::now();
                return;
            }
        }
        // The next commit starts a new segment.
        let upto = self.last();
        self.segment = None;
        {
            let mut pending = crate::util::write(&shared.pending);
            let changes = std::mem::take(&mut pending.current);
            pending.writing = Some((Arc::new(changes), upto));
        }
        shared.log_bytes.store(0, Ordering::Relaxed);
        self.since = Instant::now();
        let _ = checkpoints.send(upto);
    }

    /// At the end: waits for the checkpoint under way, then writes the rest of the log
    /// into the B-tree. What cannot be written stays in the log for the next start.
    fn finish(mut self, shared: &Shared) {
        if let Some(handle) = &self.checkpointer {
            while crate::util::read(&shared.pending).writing.is_some() && !handle.is_finished() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let upto = self.last();
        {
            let mut pending = crate::util::write(&shared.pending);
            if pending.writing.is_none() {
                let changes = std::mem::take(&mut pending.current);
                pending.writing = Some((Arc::new(changes), upto));
            }
        }
        if let Some(checkpoints) = self.checkpoints.take() {
            let _ = checkpoints.send(upto);
        }
        if let Some(handle) = self.checkpointer.take() {
            let _ = handle.join();
        }
    }
}

/// Table names by route or handler, each made once: a change names its table by a shared
/// name, not one formatted for it.
#[derive(Default)]
struct Names {
    route: HashMap<String, Arc<str>>,
    owed: HashMap<String, Arc<str>>,
    dead: HashMap<String, Arc<str>>,
    fixed: HashMap<&'static str, Arc<str>>,
}

impl Names {
    fn of(map: &mut HashMap<String, Arc<str>>, name: &str, make: fn(&str) -> String) -> Arc<str> {
        if let Some(table) = map.get(name) {
            return table.clone();
        }
        let table: Arc<str> = make(name).into();
        map.insert(name.to_string(), table.clone());
        table
    }

    fn route(&mut self, route: &str) -> Arc<str> {
        Self::of(&mut self.route, route, tables::route)
    }

    fn owed(&mut self, handler: &str) -> Arc<str> {
        Self::of(&mut self.owed, handler, tables::owed)
    }

    fn dead(&mut self, handler: &str) -> Arc<str> {
        Self::of(&mut self.dead, handler, tables::dead)
    }

    fn fixed(&mut self, name: &'static str) -> Arc<str> {
        self.fixed
            .entry(name)
            .or_insert_with(|| name.into())
            .clone()
    }
}

/// The changes `batch` makes, in order.
fn changes(batch: &[Op], names: &mut Names) -> Vec<Change> {
    let set = |table: Arc<str>, key: &str, value: Vec<u8>| Change::Set {
        table,
        key: key.to_string(),
        value,
    };
    let set_or_remove = |table: Arc<str>, key: &str, value: Option<Vec<u8>>| match value {
        Some(value) => set(table, key, value),
        None => Change::Remove {
            table,
            key: key.to_string(),
        },
    };
    let mut changes = Vec::with_capacity(batch.len());
    for op in batch {
        match op {
            // A value that is not a JSON object is never delivered by an informer.
            Op::Delivered { route, key, object } => {
                if let Some(record) = RouteRecord::of_json(object) {
                    changes.push(set(names.route(route), key, json(&record)));
                }
            }
            Op::Forgot { route, key } => changes.push(Change::Remove {
                table: names.route(route),
                key: key.clone(),
            }),
            Op::Queue { handler, key, owed } => changes.push(set_or_remove(
                names.owed(handler),
                key,
                owed.as_ref().map(StoredOwed::to_json),
            )),
            Op::DeadLetter {
                handler,
                id,
                letter,
            } => changes.push(set_or_remove(
                names.dead(handler),
                id,
                letter.as_ref().map(json),
            )),
            Op::Paused { handler, paused } => {
                changes.push(set(names.fixed(tables::PAUSED), handler, json(paused)));
            }
            Op::Finalizer { key, finalizer } => changes.push(set_or_remove(
                names.fixed(tables::FINALIZERS),
                key,
                finalizer.as_ref().map(json),
            )),
            Op::DropRoute(route) => changes.push(Change::Drop {
                table: names.route(route),
            }),
            Op::DropHandler(handler) => {
                for table in [
                    names.owed(handler),
                    tables::in_flight_v1(handler).into(),
                    names.dead(handler),
                ] {
                    changes.push(Change::Drop { table });
                }
                changes.push(Change::Remove {
                    table: names.fixed(tables::PAUSED),
                    key: handler.to_string(),
                });
            }
            Op::Flush(_) => {}
        }
    }
    changes
}

/// A stored record as JSON.
fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("stored records serialize")
}

/// The definition of a table of JSON values by text key.
pub(super) fn def(name: &str) -> TableDefinition<'_, &'static str, &'static [u8]> {
    TableDefinition::new(name)
}
