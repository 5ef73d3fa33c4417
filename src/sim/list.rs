//! List requests with kube-apiserver's resourceVersion semantics and paging.
//!
//! - No `resourceVersion`, or `"0"`: the current state.
//! - `resourceVersion=N` (alone or with `resourceVersionMatch=NotOlderThan`): the current
//!   state, once the cluster has reached N (it waits up to [`super::SimOptions::version_wait`],
//!   then answers 504 "Too large resource version").
//! - `resourceVersionMatch=Exact` with `resourceVersion=N`: the state at exactly N, rebuilt
//!   from the history ([`super::history`]); 410 Expired when N is older than the history.
//! - `limit` and `continue`: pages of a consistent snapshot. The continue token encodes the
//!   snapshot's version and the last key returned, so later pages show that version, not
//!   later writes. When the history no longer covers the token's version, the answer is
//!   410 Expired with a token in `metadata.continue` that continues from the same key at the
//!   current version, as kube-apiserver does.
//!
//! Contradictory options are 422 Invalid `ListOptions`, naming the field.

use axum::Json;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::api::{ApiState, Collection, Filter, Request, parse_rv, wait_for};
use super::error::ApiError;
use super::history::{Page, PageRequest, ReadAt, ReadError};
use super::table;

/// The token version kube-apiserver writes into continue tokens.
const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// The decoded form of a continue token.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct ContinueToken {
    /// Token format version.
    v: String,
    /// The snapshot's resourceVersion; -1 continues at the current version.
    rv: i64,
    /// The last key returned: `namespace/name`, or `name` for cluster-scoped resources,
    /// followed by a NUL (the next key to read from is just after it).
    start: String,
    /// How many objects followed the key at `rv` (the page's `remainingItemCount`), so
    /// that the next page need not count them again. Only in tokens this server wrote for a
    /// list without selectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remaining: Option<usize>,
}

impl ContinueToken {
    fn new(rv: i64, namespace: &str, name: &str) -> Self {
        let start = if namespace.is_empty() {
            format!("{name}\u{0}")
        } else {
            format!("{namespace}/{name}\u{0}")
        };
        Self {
            v: TOKEN_VERSION.into(),
            rv,
            start,
            remaining: None,
        }
    }

    fn encode(&self) -> String {
        let json = serde_json::to_vec(self).expect("a continue token serializes");
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn decode(text: &str) -> Result<Self, ApiError> {
        let invalid =
            |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text.trim_end_matches('='))
            .map_err(|_| invalid("not base64"))?;
        let token: Self = serde_json::from_slice(&bytes).map_err(|_| invalid("not JSON"))?;
        if token.v != TOKEN_VERSION {
            return Err(invalid(&format!("unexpected version {:?}", token.v)));
        }
        if token.rv == 0 || token.rv < -1 || !token.start.ends_with('\u{0}') {
            return Err(invalid("incorrect encoded start resourceVersion or key"));
        }
        Ok(token)
    }

    /// The `(namespace, name)` of the last key returned.
    fn after(&self) -> (&str, &str) {
        let key = self.start.trim_end_matches('\u{0}');
        key.split_once('/').unwrap_or(("", key))
    }
}

/// The list options of a request, validated.
struct ListOptions {
    rv: Option<u64>,
    exact: bool,
    token: Option<ContinueToken>,
    limit: Option<usize>,
}

impl ListOptions {
    fn from_request(req: &Request) -> Result<Self, ApiError> {
        let rv_text = req.param("resourceVersion");
        let rv_match = req.param("resourceVersionMatch");
        let cont = req.param("continue");
        let mut problems: Vec<(&str, String)> = Vec::new();
        if let Some(m) = rv_match {
            if rv_text.is_none() {
                problems.push((
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
                ));
            }
            if cont.is_some() {
                problems.push((
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided".into(),
                ));
            }
            if m != "Exact" && m != "NotOlderThan" {
                problems.push((
                    "resourceVersionMatch",
                    format!("unsupported value {m:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""),
                ));
            }
            if m == "Exact" && rv_text == Some("0") {
                problems.push((
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".into(),
                ));
            }
        }
        if req.param("sendInitialEvents").is_some() {
            problems.push((
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list".into(),
            ));
        }
        if !problems.is_empty() {
            return Err(ApiError::invalid_list_options(&problems));
        }
        let token = match cont {
            Some(text) => {
                if rv_text.is_some_and(|rv| rv != "0") {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue".into(),
                    ));
                }
                Some(ContinueToken::decode(text)?)
            }
            None => None,
        };
        let limit = match req.param("limit") {
            Some(text) => {
                let n: i64 = text
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid limit {text:?}")))?;
                usize::try_from(n).ok().filter(|n| *n > 0)
            }
            None => None,
        };
        Ok(Self {
            rv: rv_text.map(parse_rv).transpose()?.filter(|rv| *rv > 0),
            exact: rv_match == Some("Exact"),
            token,
            limit,
        })
    }
}

/// Serves a list: a `KindList`, or a Table when kubectl asks for one.
pub(super) async fn list(
    state: &ApiState,
    collection: &Collection<'_>,
    req: &Request,
) -> Result<Response, ApiError> {
    let options = ListOptions::from_request(req)?;
    let include = req.table()?;
    let def = &collection.def;
    let filter = Filter::from_request(def.clone(), req, state.sharded_list_and_watch)?;
    let (at, after) = match (&options.token, options.rv) {
        (Some(token), _) if token.rv == -1 => (ReadAt::Latest, Some(token.after())),
        (Some(token), _) => (ReadAt::Exact(token.rv as u64), Some(token.after())),
        (None, Some(rv)) if options.exact => (ReadAt::Exact(rv), None),
        (None, Some(rv)) => {
            wait_for(state, rv).await?;
            (ReadAt::Latest, None)
        }
        (None, None) => (ReadAt::Latest, None),
    };
    let request = PageRequest {
        resource: collection.resource,
        namespace: collection.namespace,
        at,
        after,
        limit: options.limit,
        count_remaining: filter.is_empty(),
        // A token at the latest version (after a 410) reads another state: count again.
        known_remaining: options
            .token
            .as_ref()
            .filter(|t| t.rv != -1)
            .and_then(|t| t.remaining),
    };
    let read = |state: &ApiState| {
        state
            .cluster
            .read_page(&request, |object| filter.matches(object))
    };
    let page = match read(state) {
        Err(ReadError::TooLarge { .. }) if options.exact => {
            if let ReadAt::Exact(rv) = at {
                wait_for(state, rv).await?;
            }
            read(state)
        }
        other => other,
    };
    let page = page.map_err(|e| match (e, &options.token) {
        (ReadError::Expired { .. }, Some(token)) => {
            let (ns, name) = token.after();
            ApiError::continue_expired(ContinueToken::new(-1, ns, name).encode())
        }
        (ReadError::Expired { .. }, None) => {
            ApiError::expired("The resourceVersion for the provided list is too old.".into())
        }
        (ReadError::TooLarge { current }, _) => {
            ApiError::too_large_resource_version(options.rv.unwrap_or_default(), current)
        }
    })?;
    let meta = list_meta(&page, &filter);
    let items: Vec<&Value> = page.items.iter().map(AsRef::as_ref).collect();
    if let Some(include) = include {
        return Ok(Json(table::table(def, &items, meta, include)).into_response());
    }
    // Like kube-apiserver, list items carry no kind or apiVersion of their own.
    let items: Vec<Value> = items
        .into_iter()
        .map(|obj| {
            let mut obj = obj.clone();
            if let Some(map) = obj.as_object_mut() {
                map.remove("kind");
                map.remove("apiVersion");
            }
            obj
        })
        .collect();
    Ok(Json(json!({
        "kind": format!("{}List", def.kind),
        "apiVersion": def.api_version(),
        "metadata": meta,
        "items": items,
    }))
    .into_response())
}

/// The list metadata: the version, and when more items follow, the continue token and (when
/// there are no selectors, as kube-apiserver does) how many items remain.
fn list_meta(page: &Page, filter: &Filter) -> Value {
    let mut meta = json!({"resourceVersion": page.rv.to_string()});
    if page.remaining > 0
        && let Some(last) = page.items.last()
    {
        let m = &last["metadata"];
        let mut token = ContinueToken::new(
            page.rv as i64,
            m["namespace"].as_str().unwrap_or_default(),
            m["name"].as_str().unwrap_or_default(),
        );
        if filter.is_empty() {
            meta["remainingItemCount"] = page.remaining.into();
            token.remaining = Some(page.remaining);
        }
        meta["continue"] = token.encode().into();
    }
    if let Some(shard) = filter.shard() {
        meta["shardInfo"] = json!({"selector": shard.to_string()});
    }
    meta
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continue_token_round_trips_its_version_and_key() {
        let token = ContinueToken::new(42, "default", "b");
        let decoded = ContinueToken::decode(&token.encode()).unwrap();
        assert_eq!(decoded, token);
        assert_eq!(decoded.after(), ("default", "b"));
        let cluster_scoped = ContinueToken::new(7, "", "node-1");
        assert_eq!(cluster_scoped.after(), ("", "node-1"));
    }

    #[test]
    fn a_garbled_continue_token_is_a_bad_request() {
        for text in [
            "%%%",
            "bm90IGpzb24",
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(br#"{"v":"x","rv":1,"start":"a\u0000"}"#),
        ] {
            let err = ContinueToken::decode(text).unwrap_err();
            assert_eq!(err.code, 400, "{text}");
        }
    }
}
