//! An informer's share of the objects in `ha.mode: sharded`: the selector in force, the
//! hand-over when it changes, and whether the API server or the informer filters.
//!
//! The cache holds only the objects this replica owns. When the assignment changes, the
//! objects it lost leave the cache *silently*: subscribers are told through
//! [`DeltaSink::release`](super::DeltaSink::release), never with a `deleted` delta (they
//! were not deleted, another replica handles them now). The watch then starts over with the
//! new selector, and the list delivers the objects gained as `added`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use super::wire::Received;
use serde::Serialize;
use tokio::sync::watch;

use super::{CachedObject, Informer};
use crate::sharding::{Assignment, ShardField, ShardSelector};
use crate::util::lock;

/// Who filters: not known until the first sharded list answers.
const UNKNOWN: u8 = 0;
/// The API server applied the selector.
const SERVER: u8 = 1;
/// The API server ignored it; the informer drops what is not its share.
const CLIENT: u8 = 2;

/// The sharding state of one informer.
pub(super) struct Shard {
    field: ShardField,
    assignment: watch::Receiver<Option<Assignment>>,
    /// The selector the cache holds objects of; `None` until the first assignment.
    current: Mutex<Option<ShardSelector>>,
    filtering: AtomicU8,
}

/// `/status`'s view of an informer's share.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ShardState {
    /// The field objects are placed by: `uid` or `namespace`.
    pub by: &'static str,
    /// The selector in force, as sent to the API server; absent until assigned.
    pub selector: Option<String>,
    /// `server` when the API server applied it, `client` when it ignored it and the
    /// informer filters, `unknown` before the first list.
    pub filtering: &'static str,
}

impl Shard {
    /// Sharding by `field` on the ranges `assignment` publishes.
    pub(super) fn new(field: ShardField, assignment: watch::Receiver<Option<Assignment>>) -> Self {
        Self {
            field,
            assignment,
            current: Mutex::new(None),
            filtering: AtomicU8::new(UNKNOWN),
        }
    }

    /// The selector for the assignment published now (no ranges when none is).
    fn published(&self, rx: &mut watch::Receiver<Option<Assignment>>) -> ShardSelector {
        let ranges = rx
            .borrow_and_update()
            .as_ref()
            .map(|a| a.ranges.clone())
            .unwrap_or_default();
        ShardSelector {
            field: self.field,
            ranges,
        }
    }

    fn owns_value(&self, value: &str) -> bool {
        lock(&self.current)
            .as_ref()
            .is_some_and(|s| s.matches_value(value))
    }
}

impl Informer {
    /// Whether `object` is this replica's to cache: always when not sharded.
    pub(super) fn owns(&self, object: &Received) -> bool {
        let Some(shard) = &self.shard else {
            return true;
        };
        let value = match shard.field {
            ShardField::Uid => object.meta().uid.as_deref(),
            ShardField::Namespace => object.meta().namespace.as_deref(),
        };
        shard.owns_value(value.unwrap_or_default())
    }

    /// The share this informer holds, when sharded.
    pub fn shard_state(&self) -> Option<ShardState> {
        let shard = self.shard.as_ref()?;
        let selector = lock(&shard.current)
            .as_ref()
            .filter(|s| !s.ranges.is_empty())
            .map(ToString::to_string);
        Some(ShardState {
            by: shard.field.as_str(),
            selector,
            filtering: match shard.filtering.load(Ordering::Relaxed) {
                SERVER => "server",
                CLIENT => "client",
                _ => "unknown",
            },
        })
    }

    /// The share the cache holds objects of: `None` when not sharded (every object); no
    /// range before the first assignment.
    pub(super) fn shard_selector(&self) -> Option<ShardSelector> {
        let shard = self.shard.as_ref()?;
        let current = lock(&shard.current).clone();
        Some(current.unwrap_or(ShardSelector {
            field: shard.field,
            ranges: Vec::new(),
        }))
    }

    /// Records whether the API server applied the selector on the last list.
    pub(super) fn shard_applied(&self, applied: bool) {
        if let Some(shard) = &self.shard {
            let value = if applied { SERVER } else { CLIENT };
            if shard.filtering.swap(value, Ordering::Relaxed) != value {
                tracing::info!(informer = %self.key(), filtering = if applied { "server" } else { "client" }, "shard selector applied");
            }
        }
    }

    /// The selector to list and watch with: `None` when not sharded; otherwise waits until
    /// this replica owns some range, releasing what it no longer owns on the way.
    pub(super) async fn next_shard(&self) -> Option<ShardSelector> {
        let shard = self.shard.as_ref()?;
        let mut rx = shard.assignment.clone();
        loop {
            let selector = shard.published(&mut rx);
            self.hand_over(&selector);
            if !selector.ranges.is_empty() {
                return Some(selector);
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits until the published ranges differ from the ones in force (forever when not
    /// sharded).
    pub(super) async fn shard_changed(&self) {
        let Some(shard) = &self.shard else {
            return std::future::pending().await;
        };
        let mut rx = shard.assignment.clone();
        loop {
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
            let next = shard.published(&mut rx);
            if lock(&shard.current).as_ref() != Some(&next) {
                return;
            }
        }
    }

    /// Puts `selector` in force: every cached object outside it leaves the cache, and
    /// subscribers release it (no `deleted`).
    fn hand_over(&self, selector: &ShardSelector) {
        let Some(shard) = &self.shard else {
            return;
        };
        let sinks = lock(&self.sinks);
        // Only the reflector task writes the store, and this runs on it.
        let lost: Vec<_> = self
            .store
            .list()
            .into_iter()
            .filter(|o| !selector.matches_value(&field_value(shard.field, o)))
            .map(|o| o.key().clone())
            .collect();
        let released: Vec<Arc<CachedObject>> = {
            let mut store = self.store.write();
            lost.iter().filter_map(|k| store.remove(k)).collect()
        };
        if !released.is_empty() {
            tracing::info!(informer = %self.key(), released = released.len(), "objects handed over to other replicas");
        }
        for object in &released {
            for sub in sinks.iter() {
                sub.sink.release(object);
            }
        }
        *lock(&shard.current) = Some(selector.clone());
    }
}

/// The shard field's value in a cached object.
fn field_value(field: ShardField, object: &CachedObject) -> String {
    let value: serde_json::Value = serde_json::from_str(&object.json()).unwrap_or_default();
    field.value(&value).to_string()
}
