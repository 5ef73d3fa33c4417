//! A work queue with client-go's guarantees: a key waits in the queue at most once (dirty
//! set), a key being processed is never handed to a second worker, and a key added while it
//! is processed is handed out again once the worker is done with it. Keys can be added after
//! a delay, or rate-limited after a failure (per-key backoff, then a token bucket).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::util::{FastMap as HashMap, FastSet as HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::rate_limit::{Bucket, RateLimits, backoff};
use crate::metrics::QueueMetrics;

/// A key waiting for its time, in the delay heap.
struct Delayed<K> {
    at: Instant,
    seq: u64,
    key: K,
}

impl<K> PartialEq for Delayed<K> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<K> Eq for Delayed<K> {}
impl<K> PartialOrd for Delayed<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Delayed<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct State<K> {
    queue: VecDeque<K>,
    /// Keys that need processing: queued, or added again while processing.
    dirty: HashSet<K>,
    /// Keys a worker holds right now, with when it took them.
    processing: HashMap<K, Instant>,
    /// When each queued key entered the queue.
    queued_at: HashMap<K, Instant>,
    /// Keys waiting for a time: the earliest time per key, and whether the token bucket
    /// applies when it comes.
    waiting: HashMap<K, (Instant, bool)>,
    heap: BinaryHeap<Reverse<Delayed<K>>>,
    seq: u64,
    /// Failures per key since it last succeeded.
    failures: HashMap<K, u32>,
    shutting_down: bool,
}

struct Inner<K> {
    state: Mutex<State<K>>,
    ready: Notify,
    timer: Arc<Notify>,
    limits: RateLimits,
    bucket: Option<Bucket>,
    metrics: Option<QueueMetrics>,
}

/// A de-duplicating, delaying, rate-limiting work queue shared by a handler's workers.
/// Cloning gives another handle to the same queue.
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// An empty queue with default rate limits and no metrics. Must be called inside a
    /// tokio runtime (the delay timer is a task).
    pub fn new() -> Self {
        Self::with_limits(RateLimits::default(), None)
    }

    /// An empty queue with these rate limits, reporting to `metrics` if given.
    pub fn with_limits(limits: RateLimits, metrics: Option<QueueMetrics>) -> Self {
        let bucket = limits.qps.and_then(|qps| Bucket::new(qps, limits.burst));
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::default(),
                processing: HashMap::default(),
                queued_at: HashMap::default(),
                waiting: HashMap::default(),
                heap: BinaryHeap::new(),
                seq: 0,
                failures: HashMap::default(),
                shutting_down: false,
            }),
            ready: Notify::new(),
            timer: Arc::new(Notify::new()),
            limits,
            bucket,
            metrics,
        });
        tokio::spawn(run_timer(Arc::downgrade(&inner), inner.timer.clone()));
        Self { inner }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        crate::util::lock(&self.inner.state)
    }

    /// Marks `key` as needing processing. A key already waiting is not queued twice; a key
    /// being processed is queued again when its worker calls [`WorkQueue::done`].
    pub fn add(&self, key: K) {
        let mut state = self.lock();
        if self.inner.add_locked(&mut state, key) {
            drop(state);
            self.inner.ready.notify_one();
        }
    }

    /// Marks `key` as needing processing since `since` (an event that waited before it
    /// could be queued, for the state store's commit): its queue wait counts from then.
    pub fn add_since(&self, key: K, since: Instant) {
        let mut state = self.lock();
        if self.inner.add_locked(&mut state, key.clone()) {
            if let Some(at) = state.queued_at.get_mut(&key) {
                *at = (*at).min(since);
            }
            drop(state);
            self.inner.ready.notify_one();
        }
    }

    /// Adds `key` after `delay`. A key already waiting keeps the earlier of its two times.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        self.schedule(key, delay, false);
    }

    /// Adds `key` after `delay` (zero included), and then only with a token from the
    /// bucket: for a key the handler asked to see again, so that asking again at once, over
    /// and over, is paced by the bucket like retries are. A key already waiting keeps the
    /// earlier of its two times.
    pub fn add_after_rate_limited(&self, key: K, delay: Duration) {
        self.schedule(key, delay, true);
    }

    /// Adds `key` again after a failure: after its backoff (`base * 2^(failures-1)`, at
    /// most `cap`), and then only with a token from the bucket. Returns the backoff.
    pub fn add_rate_limited(&self, key: K) -> Duration {
        self.add_rate_limited_at_least(key, Duration::ZERO)
    }

    /// Like [`WorkQueue::add_rate_limited`], waiting at least `at_least` (a receiver's
    /// `Retry-After`, say) when that is longer than the backoff. Returns the delay.
    pub fn add_rate_limited_at_least(&self, key: K, at_least: Duration) -> Duration {
        let delay = {
            let mut state = self.lock();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            *failures += 1;
            backoff(
                self.inner.limits.backoff_base,
                self.inner.limits.backoff_cap,
                *failures,
            )
            .max(at_least)
        };
        if let Some(m) = &self.inner.metrics {
            m.retries.inc();
        }
        self.schedule(key, delay, true);
        delay
    }

    fn schedule(&self, key: K, delay: Duration, limited: bool) {
        let at = Instant::now() + delay;
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        match state.waiting.get(&key) {
            Some((earlier, _)) if *earlier <= at => return,
            _ => {}
        }
        state.waiting.insert(key.clone(), (at, limited));
        state.seq += 1;
        let seq = state.seq;
        let new_earliest = state.heap.peek().is_none_or(|Reverse(d)| at < d.at);
        state.heap.push(Reverse(Delayed { at, seq, key }));
        drop(state);
        if new_earliest {
            self.inner.timer.notify_one();
        }
    }

    /// Failures recorded for `key` since it last succeeded.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Clears `key`'s failure count (after success, or when giving up on it).
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// Waits for a key to process; `None` once the queue is shut down and empty. The caller
    /// must call [`WorkQueue::done`] with the key when finished.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.inner.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.lock();
                if let Some(key) = state.queue.pop_front() {
                    let now = Instant::now();
                    state.dirty.remove(&key);
                    state.processing.insert(key.clone(), now);
                    let queued_at = state.queued_at.remove(&key);
                    let more = !state.queue.is_empty();
                    if let Some(m) = &self.inner.metrics {
                        m.depth.set(state.queue.len() as i64);
                        if let Some(at) = queued_at {
                            m.queue_duration.observe((now - at).as_secs_f64());
                        }
                    }
                    drop(state);
                    if more {
                        // Pass the wake-up on: another worker may be waiting.
                        self.inner.ready.notify_one();
                    }
                    return Some(key);
                }
                if state.shutting_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Ends processing of `key`; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        let mut state = self.lock();
        let started = state.processing.remove(key);
        if let (Some(m), Some(started)) = (&self.inner.metrics, started) {
            m.work_duration.observe(started.elapsed().as_secs_f64());
        }
        if state.dirty.contains(key) {
            state.queue.push_back(key.clone());
            state.queued_at.insert(key.clone(), Instant::now());
            if let Some(m) = &self.inner.metrics {
                m.depth.set(state.queue.len() as i64);
            }
            drop(state);
            self.inner.ready.notify_one();
        }
    }

    /// Keys waiting to be handed out.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no key is waiting to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys held by workers right now.
    pub fn in_flight(&self) -> usize {
        self.lock().processing.len()
    }

    /// Keys waiting for a delay or a retry.
    pub fn delayed(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Updates the gauges that depend on time: unfinished work, the longest-running worker
    /// and the oldest key waiting. Called before metrics are read.
    pub fn update_time_metrics(&self) {
        let Some(m) = &self.inner.metrics else {
            return;
        };
        let state = self.lock();
        let now = Instant::now();
        let ages = state.processing.values().map(|t| (now - *t).as_secs_f64());
        let (sum, longest) = ages.fold((0.0, 0.0f64), |(s, l), a| (s + a, l.max(a)));
        m.unfinished_work.set(sum);
        m.longest_running.set(longest);
        let oldest = state
            .queued_at
            .values()
            .min()
            .map(|t| (now - *t).as_secs_f64());
        m.oldest.set(oldest.unwrap_or(0.0));
    }

    /// Stops accepting keys (delayed ones are dropped); workers drain what is queued, then
    /// `get` returns `None`.
    pub fn shut_down(&self) {
        {
            let mut state = self.lock();
            state.shutting_down = true;
            state.waiting.clear();
            state.heap.clear();
        }
        self.inner.ready.notify_waiters();
        self.inner.timer.notify_one();
    }

    /// Whether [`WorkQueue::shut_down`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }
}

impl<K: Clone + Eq + Hash> Inner<K> {
    /// Adds under the lock; true when a worker should be woken.
    fn add_locked(&self, state: &mut State<K>, key: K) -> bool {
        if state.shutting_down || !state.dirty.insert(key.clone()) {
            return false;
        }
        if let Some(m) = &self.metrics {
            m.adds.inc();
        }
        if state.processing.contains_key(&key) {
            return false;
        }
        state.queued_at.insert(key.clone(), Instant::now());
        state.queue.push_back(key);
        if let Some(m) = &self.metrics {
            m.depth.set(state.queue.len() as i64);
        }
        true
    }

    /// Moves every key whose time has come into the queue; returns the next time to wake.
    fn release_due(&self) -> Option<Instant> {
        let mut state = crate::util::lock(&self.state);
        let now = Instant::now();
        let mut woke = 0usize;
        while let Some(Reverse(next)) = state.heap.peek() {
            if next.at > now {
                break;
            }
            let Some(Reverse(item)) = state.heap.pop() else {
                break;
            };
            // A key rescheduled earlier leaves a stale entry behind; skip it.
            match state.waiting.get(&item.key) {
                Some((at, _)) if *at == item.at => {}
                _ => continue,
            }
            let limited = state.waiting.get(&item.key).is_some_and(|(_, l)| *l);
            if limited && let Some(wait) = self.bucket.as_ref().and_then(Bucket::try_take) {
                let at = now + wait;
                state.waiting.insert(item.key.clone(), (at, true));
                state.seq += 1;
                let seq = state.seq;
                state.heap.push(Reverse(Delayed {
                    at,
                    seq,
                    key: item.key,
                }));
                continue;
            }
            state.waiting.remove(&item.key);
            if self.add_locked(&mut state, item.key) {
                woke += 1;
            }
        }
        let next = state.heap.peek().map(|Reverse(d)| d.at);
        let shutting_down = state.shutting_down;
        drop(state);
        for _ in 0..woke {
            self.ready.notify_one();
        }
        if shutting_down {
            None
        } else {
            Some(next.unwrap_or_else(far_future))
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}

/// Releases delayed keys when their time comes. Holds the queue weakly: it ends when the
/// queue is dropped or shut down.
async fn run_timer<K: Clone + Eq + Hash>(queue: Weak<Inner<K>>, timer: Arc<Notify>) {
    loop {
        let notified = timer.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let next = match queue.upgrade() {
            Some(inner) => inner.release_due(),
            None => return,
        };
        let Some(next) = next else {
            return;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = notified => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queue_dedupe_should_hold_a_waiting_key_once() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
    }

    #[tokio::test]
    async fn a_key_added_while_processing_is_handed_out_after_done() {
        let q = WorkQueue::new();
        q.add("a");
        let key = q.get().await.unwrap();
        q.add("a");
        assert!(
            q.is_empty(),
            "a key in flight must not be handed to a second worker"
        );
        q.done(&key);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("a"));
    }

    #[tokio::test]
    async fn shut_down_drains_then_ends_get() {
        let q = WorkQueue::new();
        q.add(1);
        q.shut_down();
        q.add(2);
        assert_eq!(q.get().await, Some(1));
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_delays_the_key() {
        let q = WorkQueue::new();
        q.add_after("a", Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(q.is_empty());
        assert_eq!(q.delayed(), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.delayed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_keeps_the_earlier_time_of_a_waiting_key() {
        let q = WorkQueue::new();
        q.add_after("a", Duration::from_secs(10));
        q.add_after("a", Duration::from_secs(2));
        q.add_after("a", Duration::from_secs(30));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(q.is_empty(), "the later times must not add the key again");
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_adds_back_off_per_key_and_forget_resets() {
        let limits = RateLimits {
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(60),
            qps: None,
            burst: 1,
        };
        let q = WorkQueue::with_limits(limits, None);
        assert_eq!(q.add_rate_limited("a"), Duration::from_secs(1));
        assert_eq!(q.add_rate_limited("a"), Duration::from_secs(2));
        assert_eq!(q.add_rate_limited("a"), Duration::from_secs(4));
        assert_eq!(q.add_rate_limited("b"), Duration::from_secs(1));
        assert_eq!(q.num_requeues(&"a"), 3);
        q.forget(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        assert_eq!(q.add_rate_limited("a"), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn the_token_bucket_spaces_out_retries_beyond_the_burst() {
        let limits = RateLimits {
            backoff_base: Duration::from_millis(1),
            backoff_cap: Duration::from_millis(1),
            qps: Some(1.0),
            burst: 2,
        };
        let q = WorkQueue::with_limits(limits, None);
        for key in 0..5 {
            q.add_rate_limited(key);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(q.len(), 2, "the burst goes at once");
        // The bucket runs on real time.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(q.len(), 3, "then one per second");
    }

    #[tokio::test]
    async fn add_after_rate_limited_spaces_out_immediate_adds_beyond_the_burst() {
        let limits = RateLimits {
            qps: Some(20.0),
            burst: 2,
            ..RateLimits::default()
        };
        let q = WorkQueue::with_limits(limits, None);
        // The bucket runs on real time.
        let started = std::time::Instant::now();
        for _ in 0..6 {
            q.add_after_rate_limited("a", Duration::ZERO);
            let key = q.get().await.unwrap();
            q.done(&key);
        }
        // Two tokens at once, then one every 50 ms.
        assert!(
            started.elapsed() >= Duration::from_millis(190),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_waiting_worker_wakes_when_a_key_arrives() {
        let q = WorkQueue::<u32>::new();
        let worker = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        q.add(7);
        assert_eq!(worker.await.unwrap(), Some(7));
    }
}
