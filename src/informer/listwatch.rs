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

use super::shown;
use crate::sharding::ShardSelector;

mod sharded;
use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::{BoxStream, Stream, StreamExt};
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::core::Status;

/// Objects per list page (what kube-runtime's watcher asks for).
const PAGE_SIZE: u32 = 500;

/// How long the server keeps a watch open, in seconds (as kube-runtime asks).
const WATCH_TIMEOUT: u32 = 290;

/// How long past [`WATCH_TIMEOUT`] a watch may stay silent before it is taken for dead.
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// What the loop reports, in the order it happens.
#[derive(Debug)]
pub(super) enum Event {
    /// A list begins: the first one, or a relist.
    ListStarted,
    /// One object of the list in progress.
    Listed(DynamicObject),
    /// The list is complete: every object was [`Event::Listed`].
    ListDone,
    /// A watch stream is open: the watch works (again).
    Watching,
    /// The watch saw an object added or changed.
    Applied(DynamicObject),
    /// The watch saw an object deleted.
    Deleted(DynamicObject),
    /// The first page of a sharded list: whether the server applied the shard selector
    /// (echoed it in `ListMeta.shardInfo`); if not, every object came and the informer
    /// filters.
    ShardApplied(bool),
}

/// Why listing or watching failed. The loop carries on after each (the caller backs off).
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// The list request failed.
    #[error("listing failed: {}", shown(.0))]
    List(#[source] kube::Error),
    /// A list page came without a resourceVersion to watch from.
    #[error("the list has no metadata.resourceVersion to watch from")]
    NoResourceVersion,
    /// Reading the server's current resourceVersion before resuming failed.
    #[error(
        "reading the API server's resourceVersion before resuming the watch failed: {}",
        shown(.0)
    )]
    Check(#[source] kube::Error),
    /// The server is behind the version the watch has seen.
    #[error(
        "the API server is at resourceVersion {server}, behind the {seen} this watch has seen \
         (it restarted empty or was restored from a backup)"
    )]
    ServerBehind {
        /// The server's current resourceVersion.
        server: String,
        /// The newest resourceVersion the watch has seen.
        seen: String,
    },
    /// The watch request failed.
    #[error("starting the watch failed: {}", shown(.0))]
    WatchStart(#[source] kube::Error),
    /// The server ended the watch with an error.
    #[error("the API server ended the watch: {} ({})", .0.message, .0.code)]
    Server(Box<Status>),
    /// The watch stream broke.
    #[error("the watch stream failed: {}", shown(.0))]
    Stream(#[source] kube::Error),
}

impl Error {
    /// The HTTP status code of the API server's answer, when it answered with a `Status`
    /// (403 when the list or watch is forbidden).
    pub(super) fn code(&self) -> Option<u16> {
        match self {
            Error::List(e) | Error::Check(e) | Error::WatchStart(e) | Error::Stream(e) => match e {
                kube::Error::Api(status) => Some(status.code),
                _ => None,
            },
            Error::Server(status) => Some(status.code),
            Error::NoResourceVersion | Error::ServerBehind { .. } => None,
        }
    }

    /// Whether the loop lists again after this error, because the version it would resume
    /// from is gone from the server, or was never there.
    pub(super) fn relists(&self) -> bool {
        match self {
            Error::ServerBehind { .. } => true,
            Error::Server(status) => version_unusable(status),
            Error::WatchStart(kube::Error::Api(status)) => version_unusable(status),
            _ => false,
        }
    }
}

/// Whether the server says the requested resourceVersion cannot be served: 410 (compacted),
/// 504 "Too large resource version" (the server is behind it), or a resourceVersion it finds
/// invalid.
pub(super) fn version_unusable(status: &Status) -> bool {
    const TOO_LARGE: &str = "Too large resource version";
    let too_large = status.message.contains(TOO_LARGE)
        || status.details.as_ref().is_some_and(|d| {
            d.causes
                .iter()
                .any(|c| c.reason == "ResourceVersionTooLarge" || c.message == TOO_LARGE)
        });
    let message = status.message.to_ascii_lowercase();
    let invalid = matches!(status.code, 400 | 422)
        && (message.contains("resourceversion") || message.contains("resource version"));
    status.code == 410 || too_large || invalid
}

/// The selectors every list and watch of one informer carries.
#[derive(Debug, Clone, Default)]
pub(super) struct Selectors {
    /// Label selector.
    pub labels: Option<String>,
    /// Field selector.
    pub fields: Option<String>,
    /// Shard selector, sent as `shardSelector` (KEP-5866).
    pub shard: Option<ShardSelector>,
}

impl Selectors {
    fn list_params(&self) -> ListParams {
        ListParams {
            label_selector: self.labels.clone(),
            field_selector: self.fields.clone(),
            ..ListParams::default()
        }
        .limit(PAGE_SIZE)
    }

    fn watch_params(&self) -> WatchParams {
        WatchParams {
            label_selector: self.labels.clone(),
            field_selector: self.fields.clone(),
            ..WatchParams::default()
        }
        .timeout(WATCH_TIMEOUT)
    }
}

type WatchStream = BoxStream<'static, kube::Result<WatchEvent<DynamicObject>>>;

/// Where the loop is.
enum State {
    /// Next: list from scratch.
    Empty,
    /// A list in progress: the objects of the page received, the token of the next page, and
    /// the list's resourceVersion once known.
    Listing {
        page: VecDeque<DynamicObject>,
        continue_token: Option<String>,
        rv: Option<String>,
    },
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
) -> impl Stream<Item = Result<Event, Error>> + Send {
    futures::stream::unfold(
        (api, selectors, State::Empty),
        |(api, selectors, mut state)| async move {
            loop {
                let (reported, next) = step(&api, &selectors, state).await;
                state = next;
                if let Some(item) = reported {
                    return Some((item, (api, selectors, state)));
                }
            }
        },
    )
}

/// Advances one step; returns what to report, if anything, and the next state.
async fn step(
    api: &Api<DynamicObject>,
    selectors: &Selectors,
    state: State,
) -> (Option<Result<Event, Error>>, State) {
    match state {
        State::Empty => (
            Some(Ok(Event::ListStarted)),
            State::Listing {
                page: VecDeque::new(),
                continue_token: None,
                rv: None,
            },
        ),
        State::Listing {
            mut page,
            continue_token,
            rv,
        } => {
            if let Some(object) = page.pop_front() {
                let state = State::Listing {
                    page,
                    continue_token,
                    rv,
                };
                return (Some(Ok(Event::Listed(object))), state);
            }
            match (continue_token, rv) {
                (None, Some(rv)) => (
                    Some(Ok(Event::ListDone)),
                    State::Resume { rv, check: false },
                ),
                (token, _) => list_page(api, selectors, token).await,
            }
        }
        State::Resume { rv, check } => resume(api, selectors, rv, check).await,
        State::Watching { rv, stream } => next_change(rv, stream).await,
    }
}

/// Asks for the next list page.
async fn list_page(
    api: &Api<DynamicObject>,
    selectors: &Selectors,
    continue_token: Option<String>,
) -> (Option<Result<Event, Error>>, State) {
    let mut params = selectors.list_params();
    let first = continue_token.is_none();
    params.continue_token = continue_token;
    match sharded::list(api, &params, selectors.shard.as_ref()).await {
        Ok(list) => {
            let applied = sharded::applied(&list.metadata, selectors.shard.as_ref());
            let rv = list.metadata.resource_version.filter(|v| !v.is_empty());
            let continue_token = list.metadata.continue_.filter(|c| !c.is_empty());
            if rv.is_none() && continue_token.is_none() {
                return (Some(Err(Error::NoResourceVersion)), State::Empty);
            }
            let page = list.items.into();
            let report = match applied {
                Some(applied) if first => Some(Ok(Event::ShardApplied(applied))),
                _ => None,
            };
            (
                report,
                State::Listing {
                    page,
                    continue_token,
                    rv,
                },
            )
        }
        // A failed page (an expired continue token, too) starts the list over.
        Err(source) => (Some(Err(Error::List(source))), State::Empty),
    }
}

/// Opens the watch from `rv`, first checking (when `check`) that the server still has it.
async fn resume(
    api: &Api<DynamicObject>,
    selectors: &Selectors,
    rv: String,
    check: bool,
) -> (Option<Result<Event, Error>>, State) {
    if check {
        match api.list(&ListParams::default().limit(1)).await {
            Err(source) => return (Some(Err(Error::Check(source))), State::Resume { rv, check }),
            Ok(list) => {
                let server = list.metadata.resource_version.unwrap_or_default();
                if is_behind(&server, &rv) {
                    let behind = Error::ServerBehind { server, seen: rv };
                    return (Some(Err(behind)), State::Empty);
                }
            }
        }
    }
    match sharded::watch(
        api,
        &selectors.watch_params(),
        &rv,
        selectors.shard.as_ref(),
    )
    .await
    {
        Ok(stream) => (
            Some(Ok(Event::Watching)),
            State::Watching {
                rv,
                stream: stream.boxed(),
            },
        ),
        Err(source) => {
            let error = Error::WatchStart(source);
            let next = if error.relists() {
                State::Empty
            } else {
                State::Resume { rv, check: true }
            };
            (Some(Err(error)), next)
        }
    }
}

/// Whether the server's version `server` is older than `seen`. Versions that are not numbers
/// cannot be compared: then it is not.
fn is_behind(server: &str, seen: &str) -> bool {
    match (server.parse::<u64>(), seen.parse::<u64>()) {
        (Ok(server), Ok(seen)) => server < seen,
        _ => false,
    }
}

/// Waits for the watch's next event.
async fn next_change(rv: String, mut stream: WatchStream) -> (Option<Result<Event, Error>>, State) {
    let idle = Duration::from_secs(WATCH_TIMEOUT.into()) + IDLE_MARGIN;
    let event = match tokio::time::timeout(idle, stream.next()).await {
        // Ended by the server (its timeout, a restart) or silent for too long: resume.
        Err(_) | Ok(None) => return (None, State::Resume { rv, check: true }),
        Ok(Some(Err(source))) => {
            let next = State::Resume { rv, check: true };
            return (Some(Err(Error::Stream(source))), next);
        }
        Ok(Some(Ok(event))) => event,
    };
    let (reported, rv) = match event {
        WatchEvent::Added(object) | WatchEvent::Modified(object) => {
            let rv = version_of(&object).unwrap_or(rv);
            (Event::Applied(object), rv)
        }
        WatchEvent::Deleted(object) => {
            let rv = version_of(&object).unwrap_or(rv);
            (Event::Deleted(object), rv)
        }
        WatchEvent::Bookmark(bookmark) => {
            let marked = bookmark.metadata.resource_version;
            let rv = if marked.is_empty() { rv } else { marked };
            return (None, State::Watching { rv, stream });
        }
        WatchEvent::Error(status) => {
            let error = Error::Server(status);
            let next = if error.relists() {
                State::Empty
            } else {
                State::Resume { rv, check: true }
            };
            return (Some(Err(error)), next);
        }
    };
    (Some(Ok(reported)), State::Watching { rv, stream })
}

fn version_of(object: &DynamicObject) -> Option<String> {
    object
        .metadata
        .resource_version
        .clone()
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    fn status(code: u16, reason: &str, message: &str) -> Status {
        Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..Status::default()
        }
    }

    #[test]
    fn answers_that_say_the_version_is_unusable_are_told_apart_from_other_failures() {
        let gone = status(410, "Expired", "too old resource version: 5 (10)");
        let mut too_large = status(
            504,
            "Timeout",
            "Too large resource version: 15437, current: 71",
        );
        assert!(version_unusable(&gone));
        assert!(version_unusable(&too_large));
        too_large.message = "Timeout".into();
        too_large.details = Some(StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: vec![StatusCause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            retry_after_seconds: 1,
        });
        assert!(version_unusable(&too_large), "the cause alone is enough");
        let invalid = status(
            422,
            "Invalid",
            r#"resourceVersion: Invalid value: "x": invalid resource version"#,
        );
        assert!(version_unusable(&invalid));
        for other in [
            status(
                504,
                "Timeout",
                "the server was unable to return a response in time",
            ),
            status(500, "InternalError", "etcdserver: leader changed"),
            status(403, "Forbidden", "configmaps is forbidden"),
            status(400, "BadRequest", "unable to parse the label selector"),
        ] {
            assert!(!version_unusable(&other), "{}", other.message);
        }
    }

    #[test]
    fn a_server_is_behind_only_when_both_versions_are_numbers_and_its_is_smaller() {
        assert!(is_behind("71", "15437"));
        assert!(!is_behind("15437", "15437"));
        assert!(!is_behind("20000", "15437"));
        assert!(!is_behind("", "15437"));
        assert!(!is_behind("71", "opaque-token"));
    }

    #[test]
    fn errors_that_relist_are_the_server_behind_and_unusable_versions() {
        let behind = Error::ServerBehind {
            server: "71".into(),
            seen: "15437".into(),
        };
        assert!(behind.relists());
        assert!(
            behind
                .to_string()
                .starts_with("the API server is at resourceVersion 71, behind the 15437")
        );
        let too_large = status(
            504,
            "Timeout",
            "Too large resource version: 15437, current: 71",
        );
        assert!(Error::Server(Box::new(too_large.clone())).relists());
        let refused = Error::WatchStart(kube::Error::Api(Box::new(too_large)));
        assert!(refused.relists());
        assert_eq!(
            refused.to_string(),
            "starting the watch failed: Too large resource version: 15437, current: 71 (504)",
            "a Status is shown by its message"
        );
        let internal = status(500, "InternalError", "boom");
        assert!(!Error::Server(Box::new(internal)).relists());
        assert!(!Error::NoResourceVersion.relists());
    }
}
