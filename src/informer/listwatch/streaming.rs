//! Streaming lists (KEP-3157, client-go's WatchListClient): the list is a watch with
//! `sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan` and bookmarks. The server
//! sends every object as ADDED, then a BOOKMARK annotated `k8s.io/initial-events-end`, and
//! the same stream goes on as the watch from that bookmark's version. The server never builds
//! a list response, so it holds no more than one object at a time for the client.
//!
//! Changes to objects can come before the end bookmark (kube-apiserver's watch cache sends
//! what happens meanwhile): a change is listed like the objects, a deletion is reported as
//! one, so the list ends on the state at the bookmark.
//!
//! A streaming list the API server answers with anything but its end bookmark falls back to
//! paged lists at once, as client-go's reflector does on any watch-list error: a refusal (400
//! or 422: an older server, or the `WatchList` feature gate off), an error status or an ERROR
//! event (kube-apiserver 1.36 on an etcd without `RequestWatchProgress` accepts the watch,
//! then sends a 500), or a stream that ends before the bookmark (a server that does not know
//! the parameters sends the objects and never says the list is complete). The loop says so
//! with [`Event::ListMode`] and starts the list again in pages; it tries a streaming list
//! again at the first list after [`STREAMING_RETRY`]. Two kinds of failure are retried as
//! streaming lists, with backoff, instead: those that say nothing of the server (a
//! connection refused or broken, a stream gone silent), and 401, 403 and 429, which a paged
//! list's watch would get the same.

use std::time::Duration;

use super::{
    Error, Event, IDLE_MARGIN, MAX_LINE, State, WATCH_TIMEOUT, WatchLine, WatchStream, With,
    read_line, version_of, watch_event,
};

/// What the loop reports and where it goes next.
type Step = (Option<Result<Event, Error>>, State);

/// How long an informer lists in pages after its streaming list failed, before it tries a
/// streaming list again (at its next list).
pub(super) const STREAMING_RETRY: Duration = Duration::from_secs(30 * 60);

/// The start of [`Event::ListMode`]'s reason when the informer lists in pages because the
/// server failed its streaming list; the server's answer follows.
pub(super) const FALLBACK: &str =
    "this API server does not serve streaming lists (WatchList): listing in pages";

/// Opens the streaming list's watch.
pub(super) async fn start(with: &mut With) -> Step {
    let params = with.selectors.streaming_params();
    match super::sharded::watch(&with.api, &params, "", None).await {
        Ok(body) => {
            let stream = WatchStream {
                body: Box::pin(body),
                line: Vec::new(),
            };
            let state = State::StreamListing {
                rv: String::new(),
                stream,
            };
            (with.report_mode(true, None), state)
        }
        Err(source) => {
            // The list failed, whatever carries it: reported as a list's failure.
            let error = Error::List(source);
            match answer(&error) {
                Some(answer) => fall_back(with, &answer),
                None => (Some(Err(error)), State::Empty),
            }
        }
    }
}

/// The API server's answer in `error`, when it is one that ends streaming lists for a while:
/// any error status but 401, 403 and 429 (a paged list's watch would get those too).
fn answer(error: &Error) -> Option<String> {
    let status = match error {
        Error::List(kube::Error::Api(status))
        | Error::Stream(kube::Error::Api(status))
        | Error::Server(status) => status,
        _ => return None,
    };
    (!matches!(status.code, 401 | 403 | 429))
        .then(|| format!("{} ({})", status.message, status.code))
}

/// Lists in pages from now on (until [`STREAMING_RETRY`] has passed): the list starts again
/// (a fresh [`Event::ListStarted`], so what the stream listed so far counts for nothing).
fn fall_back(with: &mut With, answer: &str) -> Step {
    with.streaming = false;
    with.fell_back = Some(tokio::time::Instant::now());
    let why = format!("{FALLBACK}; its answer: {answer}");
    (with.report_mode(false, Some(why)), State::Empty)
}

/// Whether an informer that fell back to paged lists at `fell_back` tries a streaming list
/// again at a list beginning `now`.
pub(super) fn streams_again(
    fell_back: Option<tokio::time::Instant>,
    now: tokio::time::Instant,
) -> bool {
    fell_back.is_some_and(|at| now.saturating_duration_since(at) >= STREAMING_RETRY)
}

/// Reads the streaming list's next event: an object listed, or the end bookmark, after which
/// the stream is the watch.
pub(super) async fn next(with: &mut With, rv: String, mut stream: WatchStream) -> Step {
    let idle = Duration::from_secs(WATCH_TIMEOUT.into()) + IDLE_MARGIN;
    let read = tokio::time::timeout(
        idle,
        read_line(&mut stream.body, &mut stream.line, MAX_LINE),
    )
    .await;
    match read {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => {
            return fall_back(with, "the stream ended before its end bookmark");
        }
        Err(_) => {
            let e = std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the streaming list went silent",
            );
            return (
                Some(Err(Error::Stream(kube::Error::ReadEvents(e)))),
                State::Empty,
            );
        }
        Ok(Err(e)) => {
            return (
                Some(Err(Error::Stream(kube::Error::ReadEvents(e)))),
                State::Empty,
            );
        }
    }
    match watch_event(&with.decoder, &stream.line) {
        Ok(None) => (None, State::StreamListing { rv, stream }),
        Ok(Some(WatchLine::Object(Event::Applied(object)))) => {
            let rv = version_of(&object).unwrap_or(rv);
            (
                Some(Ok(Event::Listed(object))),
                State::StreamListing { rv, stream },
            )
        }
        Ok(Some(WatchLine::Object(deleted))) => {
            // A deletion before the bookmark: the list ends without the object.
            let rv = match &deleted {
                Event::Deleted(object) => version_of(object).unwrap_or(rv),
                _ => rv,
            };
            (Some(Ok(deleted)), State::StreamListing { rv, stream })
        }
        Ok(Some(WatchLine::Bookmark(mark))) => {
            let rv = mark.version.filter(|v| !v.is_empty()).unwrap_or(rv);
            if !mark.initial_events_end {
                return (None, State::StreamListing { rv, stream });
            }
            if rv.is_empty() {
                return (Some(Err(Error::NoResourceVersion)), State::Empty);
            }
            let done = Event::ListDone { rv: rv.clone() };
            (Some(Ok(done)), State::Watching { rv, stream })
        }
        Err(error) => match answer(&error) {
            Some(answer) => fall_back(with, &answer),
            None => (Some(Err(error)), State::Empty),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn status(code: u16, message: &str) -> Box<Status> {
        Box::new(Status {
            code,
            message: message.into(),
            ..Status::default()
        })
    }

    #[test]
    fn every_answer_of_the_server_but_401_403_and_429_ends_streaming_lists() {
        let storage = Error::Server(status(500, "Internal error occurred: storage"));
        assert_eq!(
            answer(&storage).as_deref(),
            Some("Internal error occurred: storage (500)")
        );
        let refused = Error::List(kube::Error::Api(status(
            422,
            "sendInitialEvents is forbidden",
        )));
        assert!(answer(&refused).is_some());
        let bare = Error::Stream(kube::Error::Api(status(503, "unavailable")));
        assert!(answer(&bare).is_some());
        for code in [401, 403, 429] {
            let error = Error::List(kube::Error::Api(status(code, "no")));
            assert!(answer(&error).is_none(), "{code}");
        }
        let broken = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(answer(&Error::Stream(kube::Error::ReadEvents(broken))).is_none());
    }

    #[test]
    fn an_informer_that_fell_back_streams_again_only_after_the_retry_interval() {
        let at = tokio::time::Instant::now();
        assert!(!streams_again(None, at + STREAMING_RETRY));
        let just_before = at + STREAMING_RETRY - Duration::from_secs(1);
        assert!(!streams_again(Some(at), just_before));
        assert!(streams_again(Some(at), at + STREAMING_RETRY));
    }
}
