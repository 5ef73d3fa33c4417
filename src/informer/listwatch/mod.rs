//! The list+watch loop under the reflector: list in pages, watch from the list's
//! resourceVersion, resume a dropped watch from the last version seen, and list again
//! whenever that version is no longer valid on the server.
//!
//! Why not kube-runtime's watcher: it lists again only on 410 Gone. An API server that
//! restarted empty, or whose etcd was restored from a backup, is *behind* the version a watch
//! resumes from, and kube-apiserver accepts such a watch without an error: its watch cache
//! (or etcd) sends nothing until it passes that version, then only what comes after it
//! (kubernetes/kubernetes#107457). The cache would stay stale for good, and the watcher can
//! neither be told to list again nor tell which version it resumes from. So before resuming,
//! this loop reads the server's current resourceVersion (a one-item list without a
//! resourceVersion: a quorum read) and lists again when the server is behind the version the
//! watch has seen. It also lists again on every answer that says the version cannot be used:
//! 410 Expired, 504 "Too large resource version", an invalid resourceVersion.
//!
//! Versions are compared as numbers, which kube-apiserver's are (etcd revisions); when either
//! is not a number the check is skipped.
//!
//! Where the server serves them, lists are streaming lists ([`streaming`]): a watch that
//! sends every object, then goes on as the watch. An informer whose server fails one lists
//! in pages, as does one with a shard selector (whose list says whether the server applied
//! it).

//!
//! # Layout
//!
//! - this file: the loop's states and its steps ([`list_watch`]), and the [`Event`]s it
//!   reports;
//! - `selectors`: the label, field and shard selectors every request carries;
//! - `paged`: lists in pages, and the decoding of a page;
//! - `streaming`: streaming lists, and the fall-back to pages;
//! - `sharded`: requests with a shard selector, and whether the server applied it;
//! - `resume`: resuming a watch, after checking that the server is not behind it;
//! - `watch`: reading a watch's lines and decoding each into an event;
//! - `error`: why a list or watch failed, and which failures make the loop list again.

mod error;
mod paged;
mod resume;
mod selectors;
mod sharded;
mod streaming;
mod watch;

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use futures::AsyncBufRead;
use futures::stream::Stream;
use kube::api::{Api, DynamicObject};

use super::wire::{Decoder, Received};

pub(super) use error::Error;
pub(super) use selectors::Selectors;
use watch::{MAX_LINE, WatchLine, read_line, version_of, watch_event};

/// How long the server keeps a watch open, in seconds (as kube-runtime asks).
const WATCH_TIMEOUT: u32 = 290;

/// How long past [`WATCH_TIMEOUT`] a watch may stay silent before it is taken for dead.
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// What the loop reports, in the order it happens.
#[derive(Debug)]
pub(super) enum Event {
    /// A list begins: the first one, or a relist.
    ListStarted,
    /// How many objects the list in progress has in all, as its first page says (its items
    /// and `remainingItemCount`): room the cache can make before they come.
    ListSize(usize),
    /// One object of the list in progress.
    Listed(Received),
    /// The list is complete: every object was [`Event::Listed`]; the watch goes on from
    /// `rv`, the list's resourceVersion.
    ListDone {
        /// The list's resourceVersion.
        rv: String,
    },
    /// A watch stream is open from `rv`: the watch works (again).
    Watching {
        /// The resourceVersion the watch starts after.
        rv: String,
    },
    /// A bookmark: the watch is at resourceVersion `rv` (nothing changed in between).
    Bookmark {
        /// The bookmark's resourceVersion.
        rv: String,
    },
    /// The watch saw an object added or changed.
    Applied(Received),
    /// The watch saw an object deleted.
    Deleted(Received),
    /// The first page of a sharded list: whether the server applied the shard selector
    /// (echoed it in `ListMeta.shardInfo`); if not, every object came and the informer
    /// filters.
    ShardApplied(bool),
    /// How this informer lists from now on: streaming lists, or pages (with why: the server
    /// refused streaming). Reported when it is first known and when it changes.
    ListMode {
        /// Streaming lists.
        streaming: bool,
        /// Why not, for pages.
        why: Option<String>,
    },
}

/// An open watch's body, and the line being read from it.
struct WatchStream {
    body: Pin<Box<dyn AsyncBufRead + Send>>,
    line: Vec<u8>,
}

/// Where the loop is.
enum State {
    /// Next: list from scratch.
    Empty,
    /// A list in progress: the objects of the page received, the token of the next page, and
    /// the list's resourceVersion once known.
    Listing {
        page: VecDeque<Received>,
        continue_token: Option<String>,
        rv: Option<String>,
        size: Option<usize>,
    },
    /// Next: open a streaming list.
    StreamStart,
    /// A streaming list in progress: the version of the last object listed.
    StreamListing { rv: String, stream: WatchStream },
    /// Next: watch from `rv`; after checking that the server has not gone behind it when
    /// `check`.
    Resume { rv: String, check: bool },
    /// Watching; `rv` is the newest version seen.
    Watching { rv: String, stream: WatchStream },
}

/// Lists and watches through `api` forever. Every error is reported and followed by the next
/// attempt at once: put a backoff on the stream.
pub(super) fn list_watch(
    api: Api<DynamicObject>,
    selectors: Selectors,
    decoder: Decoder,
) -> impl Stream<Item = Result<Event, Error>> + Send {
    let with = With {
        api,
        streaming: selectors.shard.is_none(),
        fell_back: None,
        reported: None,
        selectors,
        decoder,
        page_text: Vec::new(),
    };
    futures::stream::unfold((with, State::Empty), |(mut with, mut state)| async move {
        loop {
            let (reported, next) = step(&mut with, state).await;
            state = next;
            if let Some(item) = reported {
                return Some((item, (with, state)));
            }
        }
    })
}

/// What every step works with.
struct With {
    api: Api<DynamicObject>,
    selectors: Selectors,
    decoder: Decoder,
    /// The body of the list page being read, kept from page to page of one list.
    page_text: Vec<u8>,
    /// Whether lists are streaming lists (until the server refuses one).
    streaming: bool,
    /// When the last streaming list failed and lists went to pages: a streaming list is
    /// tried again at the first list [`streaming::STREAMING_RETRY`] later.
    fell_back: Option<tokio::time::Instant>,
    /// The list mode last reported.
    reported: Option<bool>,
}

impl With {
    /// [`Event::ListMode`] when the mode is new or changed.
    fn report_mode(
        &mut self,
        streaming: bool,
        why: Option<String>,
    ) -> Option<Result<Event, Error>> {
        (self.reported != Some(streaming)).then(|| {
            self.reported = Some(streaming);
            Ok(Event::ListMode { streaming, why })
        })
    }
}

/// Advances one step; returns what to report, if anything, and the next state.
async fn step(with: &mut With, state: State) -> (Option<Result<Event, Error>>, State) {
    if matches!(state, State::Empty)
        && streaming::streams_again(with.fell_back, tokio::time::Instant::now())
    {
        with.streaming = true;
        with.fell_back = None;
    }
    let (api, selectors) = (&with.api, &with.selectors);
    match state {
        State::Empty if with.streaming => (Some(Ok(Event::ListStarted)), State::StreamStart),
        // A shard selector's list must say whether the server applied it: pages, without
        // trying streaming lists.
        State::Empty if with.reported.is_none() => (with.report_mode(false, None), State::Empty),
        State::Empty => (
            Some(Ok(Event::ListStarted)),
            State::Listing {
                page: VecDeque::new(),
                continue_token: None,
                rv: None,
                size: None,
            },
        ),
        State::StreamStart => streaming::start(with).await,
        State::StreamListing { rv, stream } => streaming::next(with, rv, stream).await,
        State::Listing {
            mut page,
            continue_token,
            rv,
            mut size,
        } => {
            let report = match size.take() {
                Some(size) => Event::ListSize(size),
                None => match page.pop_front() {
                    Some(object) => Event::Listed(object),
                    None => return paged::next_page(with, continue_token, rv).await,
                },
            };
            let state = State::Listing {
                page,
                continue_token,
                rv,
                size,
            };
            (Some(Ok(report)), state)
        }
        State::Resume { rv, check } => resume::resume(api, selectors, rv, check).await,
        State::Watching { rv, stream } => watch::next_change(&with.decoder, rv, stream).await,
    }
}
