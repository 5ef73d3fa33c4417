//! The selectors every list and watch of one informer carries, and the parameters of each
//! kind of request made with them.

use kube::api::{ListParams, WatchParams};

use super::WATCH_TIMEOUT;
use crate::sharding::ShardSelector;

/// Objects per list page (what kube-runtime's watcher asks for).
const PAGE_SIZE: u32 = 500;

/// The selectors every list and watch of one informer carries.
#[derive(Debug, Clone, Default)]
pub(in crate::informer) struct Selectors {
    /// Label selector.
    pub labels: Option<String>,
    /// Field selector.
    pub fields: Option<String>,
    /// Shard selector, sent as `shardSelector` (KEP-5866).
    pub shard: Option<ShardSelector>,
}

impl Selectors {
    /// A list page's parameters.
    pub(super) fn list_params(&self) -> ListParams {
        ListParams {
            label_selector: self.labels.clone(),
            field_selector: self.fields.clone(),
            ..ListParams::default()
        }
        .limit(PAGE_SIZE)
    }

    /// A watch's parameters.
    pub(super) fn watch_params(&self) -> WatchParams {
        WatchParams {
            label_selector: self.labels.clone(),
            field_selector: self.fields.clone(),
            ..WatchParams::default()
        }
        .timeout(WATCH_TIMEOUT)
    }

    /// A streaming list's watch: initial events, then bookmarks.
    pub(super) fn streaming_params(&self) -> WatchParams {
        WatchParams {
            send_initial_events: true,
            bookmarks: true,
            ..self.watch_params()
        }
    }
}
