//! Lists and watches that carry a `shardSelector` (KEP-5866). kube-rs' parameters have no
//! such field, so the request kube-rs builds gets the parameter appended and is sent through
//! the client directly; without a shard the plain calls are used.

use futures::AsyncBufRead;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::api::{Api, DynamicObject, ListParams, WatchParams};

use crate::sharding::ShardSelector;

/// One page of the list as text, sharded when `shard` is given.
pub(super) async fn list(
    api: &Api<DynamicObject>,
    params: &ListParams,
    shard: Option<&ShardSelector>,
) -> kube::Result<String> {
    let request = kube::core::Request::new(api.resource_url())
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    let request = match shard {
        Some(shard) => with_shard(request, shard),
        None => request,
    };
    api.clone().into_client().request_text(request).await
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
