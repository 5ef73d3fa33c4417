//! A watch's body: read line by line (up to [`MAX_LINE`]), each line decoded into an
//! object added, changed or deleted, a bookmark, or the server's error.

use std::pin::Pin;
use std::time::Duration;

use futures::{AsyncBufRead, AsyncBufReadExt};
use kube::core::Status;

use super::{Error, Event, IDLE_MARGIN, State, WATCH_TIMEOUT, WatchStream};
use crate::informer::wire::{self, Decoder, Received};

/// The longest watch line read; a longer one ends the watch with an error. An object is at
/// most 1.5 MiB in etcd by default; this leaves room for servers that allow more.
pub(super) const MAX_LINE: usize = 64 << 20;

/// Reads the next line of a watch into `line`; false at the end of the body (a partial last
/// line is dropped, as the server ended mid-event).
pub(super) async fn read_line(
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
        // memchr scans a word at a time; a byte loop was 3% of the daemon's CPU under churn.
        let (taken, done) = match memchr::memchr(b'\n', buf) {
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
pub(super) async fn next_change(
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
pub(super) enum WatchLine {
    /// An object added, changed or deleted.
    Object(Event),
    /// A bookmark.
    Bookmark(wire::Bookmark),
}

/// Decodes one watch line; `None` for a blank one.
pub(super) fn watch_event(decoder: &Decoder, line: &[u8]) -> Result<Option<WatchLine>, Error> {
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

/// The object's resourceVersion, if it has one.
pub(super) fn version_of(object: &Received) -> Option<String> {
    object
        .meta()
        .resource_version
        .clone()
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let decoder = Decoder::new(&ar, crate::informer::Transform::default());
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
        let decoder = Decoder::new(&ar, crate::informer::Transform::default());
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
}
