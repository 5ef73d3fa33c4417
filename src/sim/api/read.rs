//! Reads: GET of one object (as JSON, or as a one-row Table for kubectl), and the version
//! rules that lists ([`crate::sim::list`]) and watches ([`crate::sim::watch`]) share: how a
//! `resourceVersion` parameter is read, and waiting for the cluster to reach one.
//!
//! A read of a version the cluster has not reached yet waits for it (up to
//! [`ApiState::version_wait`]) instead of failing at once, because kube-apiserver does:
//! a client that wrote through one server may read through another that is behind.

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::ApiState;
use super::request::Request;
use crate::sim::cluster::{ObjectRef, object_rv};
use crate::sim::error::ApiError;
use crate::sim::resources::ResourceDef;
use crate::sim::table;

/// `GET` of one object.
pub(super) fn get(
    state: &ApiState,
    def: &ResourceDef,
    at: ObjectRef,
    req: &Request,
) -> Result<Response, ApiError> {
    let object = state.cluster.get(&at)?;
    if let Some(include) = req.table()? {
        let meta = json!({"resourceVersion": object_rv(&object).to_string()});
        return Ok(Json(table::table(def, &[object.as_ref()], meta, include)).into_response());
    }
    Ok(Json((*object).clone()).into_response())
}

/// A `resourceVersion` parameter as a number, or a 400.
pub(in crate::sim) fn parse_rv(text: &str) -> Result<u64, ApiError> {
    text.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version {text:?}")))
}

/// Waits until the cluster reaches `rv`, or answers 504 as kube-apiserver does.
pub(in crate::sim) async fn wait_for(state: &ApiState, rv: u64) -> Result<(), ApiError> {
    if state.cluster.wait_for_version(rv, state.version_wait).await {
        Ok(())
    } else {
        Err(ApiError::too_large_resource_version(
            rv,
            state.cluster.resource_version(),
        ))
    }
}
