//! Lists and watches that carry a `shardSelector` (KEP-5866). kube-rs' parameters have no
//! such field, so the request kube-rs builds gets the parameter appended and is sent through
//! the client directly; without a shard the plain calls are used.

use futures::AsyncBufRead;
use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::api::{Api, DynamicObject, ListParams, WatchParams};
use kube::core::Status;

use crate::sharding::ShardSelector;

/// One page of the list, its body read into `text` (cleared first), sharded when `shard` is
/// given. The caller keeps `text` from page to page, so a long list reads every page into
/// memory already in use instead of allocating (and page-faulting) a page-sized buffer twice
/// per page, as `Client::request_text` does.
pub(super) async fn list(
    api: &Api<DynamicObject>,
    params: &ListParams,
    shard: Option<&ShardSelector>,
    text: &mut Vec<u8>,
) -> kube::Result<()> {
    let request = kube::core::Request::new(api.resource_url())
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    let request = match shard {
        Some(shard) => with_shard(request, shard),
        None => request,
    };
    let response = api
        .clone()
        .into_client()
        .send(request.map(kube::client::Body::from))
        .await?;
    let status = response.status();
    let mut body = response.into_body();
    text.clear();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            text.extend_from_slice(&data);
        }
    }
    if status.is_client_error() || status.is_server_error() {
        return Err(api_error(status, text));
    }
    Ok(())
}

/// The error for an answer with an error `status` and body `text`: the `Status` it carries,
/// else one made from the text, as kube-rs' own requests report it.
fn api_error(status: axum::http::StatusCode, text: &[u8]) -> kube::Error {
    let status = serde_json::from_slice::<Status>(text).unwrap_or_else(|_| {
        let text = String::from_utf8_lossy(text);
        Status::failure(text.trim(), "Failed to parse error data").with_code(status.as_u16())
    });
    kube::Error::Api(Box::new(status))
}

/// The body of a watch from `rv`, sharded when `shard` is given.
pub(super) async fn watch(
    api: &Api<DynamicObject>,
    params: &WatchParams,
    rv: &str,
    shard: Option<&ShardSelector>,
) -> kube::Result<impl AsyncBufRead + Send + Unpin + use<>> {
    let mut request = kube::core::Request::new(api.resource_url())
        .watch(params, rv)
        .map_err(kube::Error::BuildRequest)?;
    // One gzip member per event is more than the client's decompression reads: ask for
    // none, as kube-rs does for its watches.
    request.headers_mut().insert(
        axum::http::header::ACCEPT_ENCODING,
        axum::http::HeaderValue::from_static("identity"),
    );
    let request = match shard {
        Some(shard) => with_shard(request, shard),
        None => request,
    };
    let body = api.clone().into_client().request_stream(request).await?;
    Ok(Box::pin(body))
}

/// Whether the server applied `shard`: `None` when none was asked for; `Some(true)` when
/// `ListMeta.shardInfo.selector` says the same ranges.
pub(super) fn applied(meta: &ListMeta, shard: Option<&ShardSelector>) -> Option<bool> {
    let shard = shard?;
    let echoed = meta
        .shard_info
        .as_ref()
        .map(|info| info.selector.as_str())
        .and_then(|text| ShardSelector::parse(text).ok());
    Some(echoed.as_ref() == Some(shard))
}

/// `request` with `shardSelector=SELECTOR` added to its query.
fn with_shard(
    mut request: axum::http::Request<Vec<u8>>,
    shard: &ShardSelector,
) -> axum::http::Request<Vec<u8>> {
    let uri = request.uri().to_string();
    let separator = if uri.contains('?') { '&' } else { '?' };
    let encoded = percent_encode(&shard.to_string());
    let uri = format!("{uri}{separator}shardSelector={encoded}");
    *request.uri_mut() = uri
        .parse()
        .expect("a percent-encoded query keeps the URI valid");
    request
}

/// Percent-encodes everything but unreserved characters.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_answer_is_its_status_or_else_its_text_with_the_code() {
        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps is forbidden: User \"x\" cannot list","reason":"Forbidden","code":403}"#;
        let kube::Error::Api(status) =
            api_error(axum::http::StatusCode::FORBIDDEN, status.as_bytes())
        else {
            panic!("an API error");
        };
        assert_eq!(status.code, 403);
        assert_eq!(
            status.message,
            r#"configmaps is forbidden: User "x" cannot list"#
        );
        let kube::Error::Api(status) = api_error(
            axum::http::StatusCode::BAD_GATEWAY,
            b"<html>502 Bad Gateway</html>\n",
        ) else {
            panic!("an API error");
        };
        assert_eq!(status.code, 502);
        assert_eq!(status.message, "<html>502 Bad Gateway</html>");
    }

    #[test]
    fn the_selector_is_appended_to_the_query_encoded() {
        let shard = ShardSelector::parse(
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
        )
        .unwrap();
        let request = axum::http::Request::get("/api/v1/configmaps?limit=500")
            .body(Vec::new())
            .unwrap();
        let uri = with_shard(request, &shard).uri().to_string();
        assert_eq!(
            uri,
            "/api/v1/configmaps?limit=500&shardSelector=shardRange%28object.metadata.uid%2C%20%270x0000000000000000%27%2C%20%270x8000000000000000%27%29"
        );
    }
}
