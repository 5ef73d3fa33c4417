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
//! An API server that refuses such a watch as a bad request (400 or 422: an older server, or
//! the `WatchList` feature gate off) gets paged lists from then on, for this informer: the
//! loop says so with [`Event::ListMode`] and starts the list again in pages. So does a server
//! that ends the stream before the end bookmark [`ENDS_BEFORE_FALLBACK`] times in a row
//! without an error (one that does not know the parameters sends the objects and never says
//! the list is complete); a single such end is retried, as a dropped connection would be.

use std::time::Duration;

use super::{
    Error, Event, IDLE_MARGIN, MAX_LINE, State, WATCH_TIMEOUT, WatchLine, WatchStream, With,
    read_line, version_of, watch_event,
};

/// What the loop reports and where it goes next.
type Step = (Option<Result<Event, Error>>, State);

/// Streams ended before their end bookmark, in a row, after which the informer lists in
/// pages.
pub(super) const ENDS_BEFORE_FALLBACK: u8 = 3;

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
            match refused(&error) {
                Some(why) => fall_back(with, why),
                None => (Some(Err(error)), State::Empty),
            }
        }
    }
}

/// Why the server refuses streaming lists, if `error` says it does: a 400 or 422 answer.
fn refused(error: &Error) -> Option<String> {
    match error {
        Error::List(kube::Error::Api(status)) | Error::Server(status)
            if matches!(status.code, 400 | 422) =>
        {
            Some(format!(
                "the API server refused it: {} ({})",
                status.message, status.code
            ))
        }
        _ => None,
    }
}

/// Lists in pages from now on: the list starts again (a fresh [`Event::ListStarted`], so
/// what the stream listed so far counts for nothing).
fn fall_back(with: &mut With, why: String) -> Step {
    with.streaming = false;
    (with.report_mode(false, Some(why)), State::Empty)
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
            with.stream_ends += 1;
            let why = "the API server ended the streaming list before its end bookmark";
            if with.stream_ends >= ENDS_BEFORE_FALLBACK {
                return fall_back(with, format!("{why}, {} times in a row", with.stream_ends));
            }
            let e = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, why);
            return (
                Some(Err(Error::Stream(kube::Error::ReadEvents(e)))),
                State::Empty,
            );
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
            with.stream_ends = 0;
            (Some(Ok(Event::ListDone)), State::Watching { rv, stream })
        }
        Err(error) => match refused(&error) {
            Some(why) => fall_back(with, why),
            None => (Some(Err(error)), State::Empty),
        },
    }
}
