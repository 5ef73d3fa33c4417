//! A work queue with client-go's guarantees: a key waits in the queue at most once (dirty
//! set), a key being processed is never handed to a second worker, and a key added while it
//! is processed is handed out again once the worker is done with it.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

struct State<K> {
    queue: VecDeque<K>,
    /// Keys that need processing: queued, or added again while processing.
    dirty: HashSet<K>,
    /// Keys a worker holds right now.
    processing: HashSet<K>,
    shutting_down: bool,
}

/// A de-duplicating work queue shared by a handler's workers. Cloning gives another handle
/// to the same queue.
pub struct WorkQueue<K> {
    state: Arc<Mutex<State<K>>>,
    ready: Arc<Notify>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// An empty queue.
    pub fn new() -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                shutting_down: false,
            })),
            ready: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `key` as needing processing. A key already waiting is not queued twice; a key
    /// being processed is queued again when its worker calls [`WorkQueue::done`].
    pub fn add(&self, key: K) {
        let mut state = self.lock();
        if state.shutting_down || !state.dirty.insert(key.clone()) {
            return;
        }
        if state.processing.contains(&key) {
            return;
        }
        state.queue.push_back(key);
        drop(state);
        self.ready.notify_one();
    }

    /// Adds `key` after `delay`.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(key);
        });
    }

    /// Waits for a key to process; `None` once the queue is shut down and empty. The caller
    /// must call [`WorkQueue::done`] with the key when finished.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.lock();
                if let Some(key) = state.queue.pop_front() {
                    state.dirty.remove(&key);
                    state.processing.insert(key.clone());
                    let more = !state.queue.is_empty();
                    drop(state);
                    if more {
                        // Pass the wake-up on: another worker may be waiting.
                        self.ready.notify_one();
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
        state.processing.remove(key);
        if state.dirty.contains(key) {
            state.queue.push_back(key.clone());
            drop(state);
            self.ready.notify_one();
        }
    }

    /// Keys waiting to be handed out.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys held by workers right now.
    pub fn in_flight(&self) -> usize {
        self.lock().processing.len()
    }

    /// Stops accepting keys; workers drain what is queued, then `get` returns `None`.
    pub fn shut_down(&self) {
        self.lock().shutting_down = true;
        self.ready.notify_waiters();
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
        tokio::time::advance(Duration::from_secs(4)).await;
        tokio::task::yield_now().await;
        assert!(q.is_empty());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(q.get().await, Some("a"));
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
