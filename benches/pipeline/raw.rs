//! Rows (s) and (s5): the simulator alone, listing to a raw client in this process that
//! decodes nothing, so that the figures are the server's: how fast it serves a list and
//! what that costs it, streaming (a watch with `sendInitialEvents=true`, read up to the
//! bookmark that ends the initial events) or in pages of 500.

use std::time::Instant;

use serde::de::IgnoredAny;

/// What a raw client received.
pub struct Received {
    /// Objects (watch events before the end bookmark, or list items).
    pub objects: usize,
    /// Seconds from the first request to the last byte needed.
    pub wall: f64,
}

/// A watch line shorter than this may be a bookmark (the objects are over 1,100 bytes).
const SHORT_LINE: usize = 600;

/// Reads a streaming list of the ConfigMaps in `default` up to the bookmark annotated
/// `k8s.io/initial-events-end`, counting lines and keeping only short ones to look into.
pub async fn streaming(url: &str) -> Received {
    let started = Instant::now();
    let mut response = reqwest::Client::new()
        .get(format!("{url}/api/v1/namespaces/default/configmaps"))
        .query(&[
            ("watch", "true"),
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("allowWatchBookmarks", "true"),
        ])
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("a streaming list");
    let mut objects = 0;
    let (mut line, mut length) = (Vec::new(), 0usize);
    while let Some(chunk) = response.chunk().await.expect("the stream's bytes") {
        for piece in chunk.split_inclusive(|&b| b == b'\n') {
            length += piece.len();
            if length <= SHORT_LINE {
                line.extend_from_slice(piece);
            }
            if piece.last() != Some(&b'\n') {
                continue;
            }
            match (length <= SHORT_LINE).then(|| bookmark(&line)).flatten() {
                Some(true) => {
                    return Received {
                        objects,
                        wall: started.elapsed().as_secs_f64(),
                    };
                }
                Some(false) => {}
                None => objects += 1,
            }
            (length, line) = (0, Vec::new());
        }
    }
    panic!("the stream ended before its initial-events-end bookmark");
}

/// For a bookmark, whether it ends the initial events; `None` for any other line.
fn bookmark(line: &[u8]) -> Option<bool> {
    let event: serde_json::Value = serde_json::from_slice(line).ok()?;
    (event["type"] == "BOOKMARK")
        .then(|| event["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true")
}

/// A list page: its items (not decoded) and continue token.
#[derive(serde::Deserialize)]
struct Page {
    items: Vec<IgnoredAny>,
    metadata: super::PageContinue,
}

/// Lists the ConfigMaps in `default` in pages of 500, keeping nothing.
pub async fn paged(url: &str) -> Received {
    let started = Instant::now();
    let mut objects = 0;
    each_page(url, |body| {
        let page: Page = serde_json::from_slice(&body).expect("a list page");
        objects += page.items.len();
        page.metadata.token
    })
    .await;
    Received {
        objects,
        wall: started.elapsed().as_secs_f64(),
    }
}

/// Fetches every page of 500 of the ConfigMaps in `default`, handing each body to `each`,
/// which returns the page's continue token.
pub async fn each_page(url: &str, mut each: impl FnMut(bytes::Bytes) -> Option<String>) {
    let client = reqwest::Client::new();
    let mut token = String::new();
    loop {
        let mut request = client
            .get(format!("{url}/api/v1/namespaces/default/configmaps"))
            .query(&[("limit", "500")]);
        if !token.is_empty() {
            request = request.query(&[("continue", &token)]);
        }
        let body = request
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("a list page")
            .bytes()
            .await
            .expect("the page's body");
        match each(body) {
            Some(next) if !next.is_empty() => token = next,
            _ => return,
        }
    }
}
