//! Reads at a resourceVersion: list pages at the current or an exact past version, and where
//! a watch starts.
//!
//! The simulator keeps no snapshots. Every change in the history records the object before
//! and after, so the state at any version the history still covers is rebuilt by undoing the
//! newer changes to the current objects. That is what makes a continue token (which carries
//! the first page's version) give pages that reflect that version and not later writes, and
//! what answers `resourceVersionMatch=Exact` for past versions. A version the history no
//! longer covers (older than the last compaction, see [`Cluster::compact`] and
//! [`super::SimOptions::history`]) cannot be served and is answered 410 Expired, as etcd and
//! kube-apiserver answer after a compaction.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::cluster::{Change, ChangeType, Cluster, ObjectRef, State, object_rv, ref_of};

/// Which state a read sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAt {
    /// The current state.
    Latest,
    /// The state right after the change that produced this resourceVersion.
    Exact(u64),
}

/// One page of a list.
#[derive(Debug, Clone, Copy)]
pub struct PageRequest<'a> {
    /// The resource's index.
    pub resource: usize,
    /// One namespace, or all.
    pub namespace: Option<&'a str>,
    /// Which state to read.
    pub at: ReadAt,
    /// Start after this `(namespace, name)` key (from a continue token).
    pub after: Option<(&'a str, &'a str)>,
    /// At most this many items; `None` for all.
    pub limit: Option<usize>,
    /// Count every object after the page, without asking the matcher: for a list with no
    /// selectors. Otherwise [`Page::remaining`] only says whether one more matches
    /// (kube-apiserver gives no count when the list has selectors).
    pub count_remaining: bool,
    /// How many objects follow `after` at this version, when the page before counted them
    /// (see [`Page::remaining`]): the page then subtracts its own instead of counting the
    /// rest again, which would make a paged list quadratic in its size.
    pub known_remaining: Option<usize>,
}

/// What a page read returns.
#[derive(Debug)]
pub struct Page {
    /// The resourceVersion the page reflects.
    pub rv: u64,
    /// The matching objects, in key order.
    pub items: Vec<Arc<Value>>,
    /// How many objects come after this page; without [`PageRequest::count_remaining`], 1
    /// if one more matches.
    pub remaining: usize,
}

/// Why a read at a version cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The version is older than the history covers.
    Expired {
        /// The oldest version that can still be read.
        oldest: u64,
    },
    /// The version is newer than the cluster's.
    TooLarge {
        /// The cluster's current version.
        current: u64,
    },
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFrom {
    /// From the current version, with no events for what exists.
    Now,
    /// With an ADDED event for every current object first.
    CurrentState,
    /// With every change after this version first.
    Version(u64),
}

/// What a watch sends before following the live feed.
pub enum Backlog {
    /// The changes after a version, to replay.
    Changes(Vec<Arc<Change>>),
    /// The current objects of one resource, each to send as ADDED
    /// ([`WatchFrom::CurrentState`]). Only the objects are held, not an event for each: a
    /// streaming list of a million objects holds 8 MB here instead of 200 MB.
    Current {
        /// The resource's index.
        resource: usize,
        /// The objects, in key order.
        objects: Vec<Arc<Value>>,
    },
}

impl Backlog {
    /// How many events the backlog sends.
    pub fn len(&self) -> usize {
        match self {
            Backlog::Changes(changes) => changes.len(),
            Backlog::Current { objects, .. } => objects.len(),
        }
    }

    /// Whether it sends nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its events in order, each made as it is asked for.
    pub fn into_changes(self) -> impl Iterator<Item = Arc<Change>> {
        let (changes, current) = match self {
            Backlog::Changes(changes) => (changes, None),
            Backlog::Current { resource, objects } => (Vec::new(), Some((resource, objects))),
        };
        let added = current.into_iter().flat_map(|(resource, objects)| {
            objects.into_iter().map(move |object| {
                Arc::new(Change {
                    rv: object_rv(&object),
                    change_type: ChangeType::Added,
                    at: ref_of(resource, &object),
                    object,
                    previous: None,
                })
            })
        });
        changes.into_iter().chain(added)
    }
}

/// What a watch replays before following the live feed.
pub struct WatchStart {
    /// The events to send first.
    pub backlog: Backlog,
    /// Every change after the backlog.
    pub feed: broadcast::Receiver<Arc<Change>>,
    /// The cluster's resourceVersion when the watch started.
    pub rv: u64,
}

impl Cluster {
    /// Reads one page of a resource's objects that satisfy `matches`.
    pub fn read_page(
        &self,
        request: &PageRequest<'_>,
        matches: impl Fn(&Value) -> bool,
    ) -> Result<Page, ReadError> {
        let state = self.lock();
        let rv = match request.at {
            ReadAt::Latest => state.rv,
            ReadAt::Exact(rv) => readable(&state, rv)?,
        };
        let in_range = |k: &ObjectRef| {
            k.resource == request.resource
                && request.namespace.is_none_or(|ns| k.namespace == ns)
                && request
                    .after
                    .is_none_or(|(ns, name)| (k.namespace.as_str(), k.name.as_str()) > (ns, name))
        };
        let start = match request.after {
            Some((ns, name)) => Bound::Excluded(key(request.resource, ns, name)),
            None => Bound::Included(key(
                request.resource,
                request.namespace.unwrap_or_default(),
                "",
            )),
        };
        let current = state
            .objects
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| {
                k.resource == request.resource
                    && request.namespace.is_none_or(|ns| k.namespace == ns)
            })
            .filter(|(k, _)| in_range(k));
        // Undo, newest first, the changes made after `rv`: what is left for each key is the
        // state before the oldest of them, which is the state at `rv`.
        let first_newer = state.history.partition_point(|c| c.rv <= rv);
        let mut undone: BTreeMap<&ObjectRef, Option<&Arc<Value>>> = BTreeMap::new();
        for change in state.history.range(first_newer..).rev() {
            if in_range(&change.at) {
                undone.insert(&change.at, change.previous.as_ref());
            }
        }
        // Lazily, in key order: only as far as the page (and the count) needs.
        let mut objects = at_version(current, undone);
        let limit = request.limit.unwrap_or(usize::MAX);
        let items: Vec<Arc<Value>> = objects
            .by_ref()
            .filter(|o| matches(o))
            .take(limit)
            .cloned()
            .collect();
        let remaining =
            if let (true, Some(known)) = (request.count_remaining, request.known_remaining) {
                known.saturating_sub(items.len())
            } else if request.count_remaining {
                objects.count()
            } else {
                usize::from(objects.any(|o| matches(o)))
            };
        Ok(Page {
            rv,
            items,
            remaining,
        })
    }

    /// Where a watch of one resource (in one namespace or all) starts: the backlog and the
    /// live feed, taken together so that nothing falls between them.
    pub fn watch_from(
        &self,
        resource: usize,
        namespace: Option<&str>,
        from: WatchFrom,
    ) -> Result<WatchStart, ReadError> {
        let state = self.lock();
        let in_scope = |at: &ObjectRef| {
            at.resource == resource && namespace.is_none_or(|ns| at.namespace == ns)
        };
        let backlog = match from {
            WatchFrom::Now => Backlog::Changes(Vec::new()),
            WatchFrom::Version(rv) => {
                let rv = readable(&state, rv)?;
                let first_newer = state.history.partition_point(|c| c.rv <= rv);
                Backlog::Changes(
                    state
                        .history
                        .range(first_newer..)
                        .filter(|c| in_scope(&c.at))
                        .cloned()
                        .collect(),
                )
            }
            WatchFrom::CurrentState => Backlog::Current {
                resource,
                objects: state
                    .objects
                    .range(key(resource, namespace.unwrap_or_default(), "")..)
                    .take_while(|(k, _)| in_scope(k))
                    .map(|(_, obj)| obj.clone())
                    .collect(),
            },
        };
        Ok(WatchStart {
            backlog,
            feed: self.feed.subscribe(),
            rv: state.rv,
        })
    }
}

/// Checks that the state at `rv` can be rebuilt from the history.
/// The objects at a version, in key order: the current ones (`current`, in key order) with
/// the `undone` keys' states at that version in their place (`None`: it did not exist).
fn at_version<'a>(
    current: impl Iterator<Item = (&'a ObjectRef, &'a Arc<Value>)>,
    undone: BTreeMap<&'a ObjectRef, Option<&'a Arc<Value>>>,
) -> impl Iterator<Item = &'a Arc<Value>> {
    let mut current = current.peekable();
    let mut undone = undone.into_iter().peekable();
    std::iter::from_fn(move || {
        loop {
            let from_undone = match (current.peek(), undone.peek()) {
                (None, None) => return None,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(&(c, _)), Some(&(u, _))) => {
                    if c == u {
                        current.next();
                    }
                    c >= u
                }
            };
            if !from_undone {
                return current.next().map(|(_, v)| v);
            }
            if let Some((_, Some(v))) = undone.next() {
                return Some(v);
            }
        }
    })
}

fn readable(state: &State, rv: u64) -> Result<u64, ReadError> {
    if rv > state.rv {
        Err(ReadError::TooLarge { current: state.rv })
    } else if rv < state.compacted_rv {
        Err(ReadError::Expired {
            oldest: state.compacted_rv,
        })
    } else {
        Ok(rv)
    }
}

fn key(resource: usize, namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        resource,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::builtin_index;
    use serde_json::json;

    fn configmaps() -> usize {
        builtin_index("", "v1", "configmaps")
    }

    fn create(cluster: &Cluster, name: &str) -> u64 {
        let obj = json!({"metadata": {"name": name}, "data": {"v": "1"}});
        object_rv(&cluster.create(configmaps(), "default", obj).unwrap())
    }

    fn names(page: &Page) -> Vec<String> {
        page.items
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn page<'a>(
        at: ReadAt,
        after: Option<(&'a str, &'a str)>,
        limit: Option<usize>,
    ) -> PageRequest<'a> {
        PageRequest {
            resource: configmaps(),
            namespace: Some("default"),
            at,
            after,
            limit,
            count_remaining: true,
            known_remaining: None,
        }
    }

    #[test]
    fn a_past_version_is_rebuilt_from_the_history() {
        let cluster = Cluster::default();
        create(&cluster, "a");
        let at_b = create(&cluster, "b");
        create(&cluster, "c");
        let b = ObjectRef {
            resource: configmaps(),
            namespace: "default".into(),
            name: "b".into(),
        };
        cluster
            .update(&b, json!({"metadata": {"name": "b"}, "data": {"v": "2"}}))
            .unwrap();
        cluster
            .delete(&ref_of(
                configmaps(),
                &json!({"metadata": {"name": "a", "namespace": "default"}}),
            ))
            .unwrap();
        let then = cluster
            .read_page(&page(ReadAt::Exact(at_b), None, None), |_| true)
            .unwrap();
        assert_eq!(then.rv, at_b);
        assert_eq!(names(&then), ["a", "b"]);
        assert_eq!(then.items[1]["data"]["v"], "1");
        let now = cluster
            .read_page(&page(ReadAt::Latest, None, None), |_| true)
            .unwrap();
        assert_eq!(names(&now), ["b", "c"]);
        assert_eq!(now.items[0]["data"]["v"], "2");
    }

    #[test]
    fn pages_continue_after_a_key_and_count_what_is_left() {
        let cluster = Cluster::default();
        for name in ["a", "b", "c", "d", "e"] {
            create(&cluster, name);
        }
        let first = cluster
            .read_page(&page(ReadAt::Latest, None, Some(2)), |_| true)
            .unwrap();
        assert_eq!(
            (names(&first), first.remaining),
            (vec!["a".into(), "b".into()], 3)
        );
        create(&cluster, "bb");
        let second = cluster
            .read_page(
                &page(ReadAt::Exact(first.rv), Some(("default", "b")), Some(2)),
                |_| true,
            )
            .unwrap();
        assert_eq!(names(&second), ["c", "d"]);
        assert_eq!(second.remaining, 1);
    }

    #[test]
    fn without_a_count_a_page_only_says_whether_more_match() {
        let cluster = Cluster::default();
        for name in ["a", "b", "c", "d", "e"] {
            create(&cluster, name);
        }
        let not_b = |o: &Value| o["metadata"]["name"] != "b";
        let mut request = page(ReadAt::Latest, None, Some(2));
        request.count_remaining = false;
        let first = cluster.read_page(&request, not_b).unwrap();
        assert_eq!(
            (names(&first), first.remaining),
            (vec!["a".into(), "c".into()], 1)
        );
        request.after = Some(("default", "c"));
        let last = cluster.read_page(&request, not_b).unwrap();
        assert_eq!(
            (names(&last), last.remaining),
            (vec!["d".into(), "e".into()], 0)
        );
    }

    #[test]
    fn versions_outside_the_history_cannot_be_read() {
        let cluster = Cluster::new(2);
        for name in ["a", "b", "c", "d"] {
            create(&cluster, name);
        }
        let rv = cluster.resource_version();
        assert!(matches!(
            cluster.read_page(&page(ReadAt::Exact(1), None, None), |_| true),
            Err(ReadError::Expired { .. })
        ));
        assert_eq!(
            cluster
                .read_page(&page(ReadAt::Exact(rv + 1), None, None), |_| true)
                .unwrap_err(),
            ReadError::TooLarge { current: rv }
        );
        assert!(matches!(
            cluster.watch_from(configmaps(), None, WatchFrom::Version(1)),
            Err(ReadError::Expired { .. })
        ));
        let start = cluster
            .watch_from(configmaps(), None, WatchFrom::Version(rv - 1))
            .unwrap();
        assert_eq!(start.backlog.len(), 1);
    }

    #[test]
    fn a_watch_from_the_current_state_sends_every_object_as_added_in_key_order() {
        let cluster = Cluster::default();
        let rvs: Vec<u64> = ["b", "a", "c"]
            .iter()
            .map(|n| create(&cluster, n))
            .collect();
        cluster
            .delete(&ref_of(
                configmaps(),
                &json!({"metadata": {"name": "c", "namespace": "default"}}),
            ))
            .unwrap();
        let start = cluster
            .watch_from(configmaps(), Some("default"), WatchFrom::CurrentState)
            .unwrap();
        assert_eq!(start.backlog.len(), 2);
        let sent: Vec<(ChangeType, String, u64)> = start
            .backlog
            .into_changes()
            .map(|c| (c.change_type, c.at.name.clone(), c.rv))
            .collect();
        assert_eq!(
            sent,
            [
                (ChangeType::Added, "a".to_string(), rvs[1]),
                (ChangeType::Added, "b".to_string(), rvs[0]),
            ]
        );
    }
}
