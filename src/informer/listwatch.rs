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

use super::shown;
use super::wire::{self, Decoder, Received};
use crate::sharding::ShardSelector;

mod sharded;
mod streaming;
use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use futures::stream::Stream;
use futures::{AsyncBufRead, AsyncBufReadExt};
use kube::api::{Api, DynamicObject, ListParams, WatchParams};
use kube::core::Status;

/// Objects per list page (what kube-runtime's watcher asks for).
const PAGE_SIZE: u32 = 500;

/// How long the server keeps a watch open, in seconds (as kube-runtime asks).
const WATCH_TIMEOUT: u32 = 290;

/// How long past [`WATCH_TIMEOUT`] a watch may stay silent before it is taken for dead.
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// The longest watch line read; a longer one ends the watch with an error. An object is at
/// most 1.5 MiB in etcd by default; this leaves room for servers that allow more.
const MAX_LINE: usize = 64 << 20;

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

    /// A streaming list's watch: initial events, then bookmarks.
    fn streaming_params(&self) -> WatchParams {
        WatchParams {
            send_initial_events: true,
            bookmarks: true,
            ..self.watch_params()
        }
    }
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
                    None => return next_page(with, continue_token, rv).await,
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
        State::Resume { rv, check } => resume(api, selectors, rv, check).await,
        State::Watching { rv, stream } => next_change(&with.decoder, rv, stream).await,
    }
}

/// The list's end when the last page has been reported, else the next page.
async fn next_page(
    with: &mut With,
    continue_token: Option<String>,
    rv: Option<String>,
) -> (Option<Result<Event, Error>>, State) {
    match (continue_token, rv) {
        (None, Some(rv)) => {
            with.page_text = Vec::new();
            let done = Event::ListDone { rv: rv.clone() };
            (Some(Ok(done)), State::Resume { rv, check: false })
        }
        (token, _) => list_page(with, token).await,
    }
}

/// Asks for the next list page.
async fn list_page(
    with: &mut With,
    continue_token: Option<String>,
) -> (Option<Result<Event, Error>>, State) {
    let selectors = &with.selectors;
    let mut params = selectors.list_params();
    let first = continue_token.is_none();
    params.continue_token = continue_token;
    let page = sharded::list(
        &with.api,
        &params,
        selectors.shard.as_ref(),
        &mut with.page_text,
    )
    .await
    .and_then(|()| decode_page(&with.decoder, &with.page_text).map_err(kube::Error::SerdeError));
    match page {
        Ok(list) => {
            let applied = sharded::applied(&list.metadata, selectors.shard.as_ref());
            let rv = list.metadata.resource_version.filter(|v| !v.is_empty());
            let continue_token = list.metadata.continue_.filter(|c| !c.is_empty());
            if rv.is_none() && continue_token.is_none() {
                return (Some(Err(Error::NoResourceVersion)), State::Empty);
            }
            let remaining = list.metadata.remaining_item_count.unwrap_or(0);
            let size = first.then(|| list.items.len() + usize::try_from(remaining).unwrap_or(0));
            let report = match applied {
                Some(applied) if first => Some(Ok(Event::ShardApplied(applied))),
                _ => None,
            };
            (
                report,
                State::Listing {
                    page: list.items,
                    continue_token,
                    rv,
                    size,
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
            Some(Ok(Event::Watching { rv: rv.clone() })),
            State::Watching {
                rv,
                stream: WatchStream {
                    body: Box::pin(stream),
                    line: Vec::new(),
                },
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

/// A list page decoded: its metadata and its objects.
struct DecodedPage {
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta,
    items: VecDeque<Received>,
}

fn decode_page(decoder: &Decoder, text: &[u8]) -> serde_json::Result<DecodedPage> {
    let page: wire::Page = serde_json::from_slice(text)?;
    let items = page
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|item| decoder.decode(item.get()))
        .collect::<serde_json::Result<_>>()?;
    Ok(DecodedPage {
        metadata: page.metadata,
        items,
    })
}

/// Reads the next line of a watch into `line`; false at the end of the body (a partial last
/// line is dropped, as the server ended mid-event).
async fn read_line(
    body: &mut Pin<Box<dyn AsyncBufRead + Send>>,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<bool> {
    line.clear();
    loop {
        let buf = body.fill_buf().await?;
        if buf.is_empty() {
            return Ok(false);
        }
        let (taken, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..if done { taken - 1 } else { taken }]);
        body.as_mut().consume(taken);
        if line.len() > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a watch line is longer than {max} bytes"),
            ));
        }
        if done {
            return Ok(true);
        }
    }
}

/// Waits for the watch's next event.
async fn next_change(
    decoder: &Decoder,
    rv: String,
    mut stream: WatchStream,
) -> (Option<Result<Event, Error>>, State) {
    let idle = Duration::from_secs(WATCH_TIMEOUT.into()) + IDLE_MARGIN;
    let read = tokio::time::timeout(
        idle,
        read_line(&mut stream.body, &mut stream.line, MAX_LINE),
    )
    .await;
    match read {
        // Ended by the server (its timeout, a restart) or silent for too long: resume.
        Err(_) | Ok(Ok(false)) => return (None, State::Resume { rv, check: true }),
        Ok(Err(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::TimedOut
            ) =>
        {
            return (None, State::Resume { rv, check: true });
        }
        Ok(Err(e)) => {
            let next = State::Resume { rv, check: true };
            return (Some(Err(Error::Stream(kube::Error::ReadEvents(e)))), next);
        }
        Ok(Ok(true)) => {}
    }
    match watch_event(decoder, &stream.line) {
        Ok(None) => (None, State::Watching { rv, stream }),
        Ok(Some(WatchLine::Bookmark(mark))) => match mark.version.filter(|m| !m.is_empty()) {
            Some(rv) => (
                Some(Ok(Event::Bookmark { rv: rv.clone() })),
                State::Watching { rv, stream },
            ),
            None => (None, State::Watching { rv, stream }),
        },
        Ok(Some(WatchLine::Object(event))) => {
            let (Event::Applied(object) | Event::Deleted(object)) = &event else {
                unreachable!("a watch line carries an applied or deleted object")
            };
            let rv = version_of(object).unwrap_or(rv);
            (Some(Ok(event)), State::Watching { rv, stream })
        }
        Err(error) => {
            let next = if error.relists() {
                State::Empty
            } else {
                State::Resume { rv, check: true }
            };
            (Some(Err(error)), next)
        }
    }
}

/// What one watch line says.
enum WatchLine {
    /// An object added, changed or deleted.
    Object(Event),
    /// A bookmark.
    Bookmark(wire::Bookmark),
}

/// Decodes one watch line; `None` for a blank one.
fn watch_event(decoder: &Decoder, line: &[u8]) -> Result<Option<WatchLine>, Error> {
    let text = std::str::from_utf8(line).map_err(|e| {
        Error::Stream(kube::Error::ReadEvents(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            e,
        )))
    })?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    let serde = |e| Error::Stream(kube::Error::SerdeError(e));
    if let Some(event) = object_line(decoder, text) {
        return Ok(Some(WatchLine::Object(event)));
    }
    let line: wire::Line = match serde_json::from_str(text) {
        Ok(line) => line,
        // A bare Status instead of an event: the server's error.
        Err(e) => {
            return Err(match serde_json::from_str::<Status>(text) {
                Ok(status) => Error::Stream(kube::Error::Api(Box::new(status))),
                Err(_) => serde(e),
            });
        }
    };
    let object = line.object.get();
    let event = match line.kind.as_str() {
        "ADDED" | "MODIFIED" => Event::Applied(decoder.decode(object).map_err(serde)?),
        "DELETED" => Event::Deleted(decoder.decode(object).map_err(serde)?),
        "BOOKMARK" => {
            let mark = wire::bookmark(object).map_err(serde)?;
            return Ok(Some(WatchLine::Bookmark(mark)));
        }
        "ERROR" => {
            let status: Status = serde_json::from_str(object).map_err(serde)?;
            return Err(Error::Server(Box::new(status)));
        }
        other => {
            let unknown = format!("unknown watch event type {other:?}");
            return Err(serde(serde::de::Error::custom(unknown)));
        }
    };
    Ok(Some(WatchLine::Object(event)))
}

/// An added, modified or deleted object from a line in the layout API servers write,
/// `{"type":"T","object":{...}}`, its object decoded once: the envelope is matched as
/// text, not parsed (parsing it would scan the object a second time). `None` for any other
/// line, or an object that does not decode: the caller then parses the line as JSON and
/// reports what is wrong.
fn object_line(decoder: &Decoder, text: &str) -> Option<Event> {
    let rest = text.trim_end().strip_prefix("{\"type\":\"")?;
    let (kind, rest) = rest.split_once('"')?;
    let object = rest.strip_prefix(",\"object\":")?.strip_suffix('}')?;
    match kind {
        "ADDED" | "MODIFIED" => decoder.decode(object).ok().map(Event::Applied),
        "DELETED" => decoder.decode(object).ok().map(Event::Deleted),
        _ => None,
    }
}

fn version_of(object: &Received) -> Option<String> {
    object
        .meta()
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

    #[tokio::test]
    async fn watch_lines_are_read_across_chunks_up_to_the_limit() {
        // Chunks of 3 bytes: every line spans several reads.
        let text = b"{\"a\":1}\n\n{\"b\":22}\npartial".to_vec();
        let reader = futures::io::BufReader::with_capacity(3, futures::io::Cursor::new(text));
        let mut body: Pin<Box<dyn AsyncBufRead + Send>> = Box::pin(reader);
        let mut line = Vec::new();
        let mut lines = Vec::new();
        while read_line(&mut body, &mut line, 100).await.unwrap() {
            lines.push(String::from_utf8(line.clone()).unwrap());
        }
        assert_eq!(
            lines,
            [r#"{"a":1}"#, "", r#"{"b":22}"#],
            "a partial last line is dropped"
        );

        let long = futures::io::Cursor::new(vec![b'x'; 50]);
        let mut body: Pin<Box<dyn AsyncBufRead + Send>> =
            Box::pin(futures::io::BufReader::with_capacity(8, long));
        let error = read_line(&mut body, &mut line, 20).await.unwrap_err();
        assert_eq!(error.to_string(), "a watch line is longer than 20 bytes");
    }

    #[test]
    fn watch_lines_decode_to_events_bookmarks_and_errors() {
        let ar = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let decoder = Decoder::new(&ar, super::super::Transform::default());
        let added = br#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5"}}}"#;
        match watch_event(&decoder, added) {
            Ok(Some(WatchLine::Object(Event::Applied(o)))) => {
                assert_eq!(o.meta().resource_version.as_deref(), Some("5"));
            }
            _ => panic!("an ADDED line is an applied object"),
        }
        let deleted = br#"{"type":"DELETED","object":{"metadata":{"name":"a"}}}"#;
        assert!(matches!(
            watch_event(&decoder, deleted),
            Ok(Some(WatchLine::Object(Event::Deleted(_))))
        ));
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"9"}}}"#;
        assert!(matches!(
            watch_event(&decoder, bookmark),
            Ok(Some(WatchLine::Bookmark(wire::Bookmark { version: Some(rv), initial_events_end: false }))) if rv == "9"
        ));
        let end = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        assert!(matches!(
            watch_event(&decoder, end),
            Ok(Some(WatchLine::Bookmark(wire::Bookmark { version: Some(rv), initial_events_end: true }))) if rv == "12"
        ));
        assert!(matches!(watch_event(&decoder, b"  "), Ok(None)));
        let gone = br#"{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version: 1 (5)"}}"#;
        let error = watch_event(&decoder, gone).err().unwrap();
        assert!(error.relists(), "{error}");
        let bare = br#"{"kind":"Status","code":500,"message":"boom"}"#;
        let error = watch_event(&decoder, bare).err().unwrap();
        assert_eq!(error.code(), Some(500));
        assert!(watch_event(&decoder, br#"{"type":"ODD","object":{}}"#).is_err());
        assert!(watch_event(&decoder, b"{not json").is_err());
    }

    #[test]
    fn watch_lines_in_any_layout_decode_alike() {
        let ar = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let decoder = Decoder::new(&ar, super::super::Transform::default());
        let object = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"5"},"data":{"k":"}"}}"#;
        let applied = |line: String| match watch_event(&decoder, line.as_bytes()) {
            Ok(Some(WatchLine::Object(Event::Applied(o)))) => o.json().to_string(),
            _ => panic!("not an applied object: {line}"),
        };
        // The layout API servers write (matched as text), then others (parsed).
        let expected = applied(format!(r#"{{"type":"MODIFIED","object":{object}}}"#));
        assert_eq!(expected, object);
        for line in [
            format!("{{\"type\":\"MODIFIED\",\"object\":{object}}}\r\n"),
            format!(r#"{{"object":{object},"type":"MODIFIED"}}"#),
            format!(r#"{{ "type": "MODIFIED", "object": {object} }}"#),
            format!(r#"{{"type":"MODIFIED","object":{object},"extra":{{"a":1}}}}"#),
        ] {
            assert_eq!(applied(line), expected);
        }
        // An object that does not decode is the parser's error, not a silent skip.
        let broken = br#"{"type":"ADDED","object":{"metadata":{"name":5}}}"#;
        assert!(watch_event(&decoder, broken).is_err());
        let cut = br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}"#;
        assert!(watch_event(&decoder, cut).is_err());
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
