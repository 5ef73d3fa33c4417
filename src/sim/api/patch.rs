//! PATCH: JSON merge patch, strategic merge patch, JSON patch, and server-side apply, of an
//! object or of its `status` subresource; each takes `?dryRun=All`.
//!
//! Two simplifications a reader would question, both deliberate: a strategic merge patch is
//! applied as a JSON merge patch (for the maps that labels, annotations and data are, the two
//! agree; lists of containers and the like would need each kind's merge keys), and
//! server-side apply merges the applied object into the current one with no field
//! ownership and so no conflicts (enough for clients that apply what they own).
//!
//! Each patch records its manager in `managedFields` as kube-apiserver does (the
//! `fieldManager` given, else the User-Agent's product; operation `Update`, or `Apply` for a
//! server-side apply), one entry per manager and operation; the fields each owns are not
//! tracked (`fieldsV1` is empty).

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::ApiState;
use super::request::Request;
use super::write::{created_response, with_status_of};
use crate::sim::cluster::{ObjectRef, WriteMode};
use crate::sim::error::ApiError;
use crate::sim::resources::ResourceDef;

/// The content type of a server-side apply.
const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// `PATCH` of an object, or of its status alone when `status_only`; the patch type is the
/// request's content type.
pub(super) fn patch(
    state: &ApiState,
    def: &ResourceDef,
    at: ObjectRef,
    status_only: bool,
    req: &Request,
) -> Result<Response, ApiError> {
    // The media type without parameters (`; charset=utf-8`).
    let content_type = req
        .content_type()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let body = req.json_body()?;
    let mode = req.write_mode()?;
    let manager = req.manager();
    if content_type == APPLY_PATCH && !status_only {
        return apply(state, mode, at, body, &manager);
    }
    let patched = state.cluster.modify_in(mode, &at, |current| {
        let mut object = current.clone();
        apply_patch(def, &at, &content_type, &mut object, &body)?;
        // A patch that changes nothing is no write (kube-apiserver skips it).
        if object != *current {
            record_manager(&mut object, &manager, "Update");
        }
        // A patch that does not set the resourceVersion applies to the current one.
        if object.pointer("/metadata/resourceVersion")
            == current.pointer("/metadata/resourceVersion")
        {
            forget_resource_version(&mut object);
        }
        Ok(if status_only {
            with_status_of(current, &object)
        } else {
            object
        })
    })?;
    Ok(Json((*patched).clone()).into_response())
}

/// Applies a patch of `content_type` to `object` in place; 415 for a type it does not know.
fn apply_patch(
    def: &ResourceDef,
    at: &ObjectRef,
    content_type: &str,
    object: &mut Value,
    body: &Value,
) -> Result<(), ApiError> {
    match content_type {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            json_patch::merge(object, body);
        }
        "application/json-patch+json" => {
            let ops: json_patch::Patch = serde_json::from_value(body.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(object, &ops)
                .map_err(|e| ApiError::invalid(def, &at.name, &e.to_string()))?;
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    }
    Ok(())
}

/// Server-side apply: the applied object merged into the current one as a JSON merge patch,
/// or created when there is none. Clients send it as JSON, which is YAML too.
fn apply(
    state: &ApiState,
    mode: WriteMode,
    at: ObjectRef,
    mut body: Value,
    manager: &str,
) -> Result<Response, ApiError> {
    name_applied_object(&at, &mut body)?;
    let patched = state.cluster.modify_in(mode, &at, |current| {
        let mut object = current.clone();
        json_patch::merge(&mut object, &body);
        if object != *current {
            record_manager(&mut object, manager, "Apply");
        }
        forget_resource_version(&mut object);
        Ok(object)
    });
    match patched {
        Ok(patched) => Ok(Json((*patched).clone()).into_response()),
        Err(e) if e.code == 404 => {
            forget_resource_version(&mut body);
            record_manager(&mut body, manager, "Apply");
            let created = state
                .cluster
                .create_in(mode, at.resource, &at.namespace, body)?;
            Ok(created_response(&created))
        }
        Err(e) => Err(e),
    }
}

/// Checks the applied object's name against the URL's, filling it in when it has none.
fn name_applied_object(at: &ObjectRef, body: &mut Value) -> Result<(), ApiError> {
    match body.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) if name != at.name => Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            at.name
        ))),
        Some(_) => Ok(()),
        None => {
            let Some(object) = body.as_object_mut() else {
                return Err(ApiError::bad_request(
                    "the applied object must be a JSON object".into(),
                ));
            };
            let meta = object.entry("metadata").or_insert_with(|| json!({}));
            meta["name"] = at.name.clone().into();
            Ok(())
        }
    }
}

/// Records a write by `manager` with `operation` (`Update`, `Apply`) in the object's
/// `managedFields`: its entry for that manager and operation replaced by one stamped now.
fn record_manager(object: &mut Value, manager: &str, operation: &str) {
    let api_version = object.get("apiVersion").cloned().unwrap_or(Value::Null);
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let entries = meta.entry("managedFields").or_insert_with(|| json!([]));
    if !entries.is_array() {
        *entries = json!([]);
    }
    let Some(entries) = entries.as_array_mut() else {
        return;
    };
    entries.retain(|e| !(e["manager"] == manager && e["operation"] == operation));
    entries.push(json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": crate::util::rfc3339(std::time::SystemTime::now()),
        "fieldsType": "FieldsV1",
        "fieldsV1": {},
    }));
}

/// Removes `metadata.resourceVersion`, so the write applies to whatever version is current.
fn forget_resource_version(object: &mut Value) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
}
