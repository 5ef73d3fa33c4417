//! Streaming lists (KEP-3157, client-go's WatchListClient): the list is a watch with
//! `sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan` and bookmarks. The server
//! sends every object as ADDED, then a BOOKMARK annotated `k8s.io/initial-events-end`, and
//! the same stream goes on as the watch from that bookmark's version. The server never builds
//! a list response, so it holds no more than one object at a time for the client.
//!
//! An API server that refuses such a watch as a bad request (400 or 422: an older server, or
//! the `WatchList` feature gate off) gets paged lists from then on, for this informer: the
//! loop says so with [`Event::ListMode`] and lists in pages at once. So does a server that
//! ends the stream before the end bookmark without an error (one that does not know the
//! parameters would otherwise send the objects and never say the list is complete).

use std::time::Duration;

use super::{
    Error, Event, IDLE_MARGIN, MAX_LINE, State, WATCH_TIMEOUT, WatchLine, WatchStream, With,
    read_line, version_of, watch_event,
};

/// What the loop reports and where it goes next.
type Step = (Option<Result<Event, Error>>, State);

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
            let error = Error::WatchStart(source);
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
        Error::WatchStart(kube::Error::Api(status)) | Error::Server(status)
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

/// Lists in pages from now on, starting at once.
fn fall_back(with: &mut With, why: String) -> Step {
    with.streaming = false;
    let state = State::Listing {
        page: Default::default(),
        continue_token: None,
        rv: None,
        size: None,
    };
    (with.report_mode(false, Some(why)), state)
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
            let why = "the API server ended the streaming list before its end bookmark";
            return fall_back(with, why.to_string());
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
        Ok(Some(WatchLine::Object(_))) => {
            let unexpected = std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a streaming list sent a change other than ADDED before its end bookmark",
            );
            (
                Some(Err(Error::Stream(kube::Error::ReadEvents(unexpected)))),
                State::Empty,
            )
        }
        Ok(Some(WatchLine::Bookmark(mark))) => {
            let rv = mark.version.filter(|v| !v.is_empty()).unwrap_or(rv);
            if !mark.initial_events_end {
                return (None, State::StreamListing { rv, stream });
            }
            if rv.is_empty() {
                return (Some(Err(Error::NoResourceVersion)), State::Empty);
            }
            (Some(Ok(Event::ListDone)), State::Watching { rv, stream })
        }
        Err(error) => match refused(&error) {
            Some(why) => fall_back(with, why),
            None => (Some(Err(error)), State::Empty),
        },
    }
}
