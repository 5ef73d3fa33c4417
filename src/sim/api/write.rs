//! The write verbs but patch: create (POST), update (PUT, of the object or of its `status`
//! subresource), delete (with `DeleteOptions` preconditions) and deletecollection. Patches
//! and server-side apply are in [`super::patch`]. Create and update take `?dryRun=All`
//! (checked, answered, not stored: what `kubectl apply --dry-run=server` sends).
//!
//! A DELETE answers with the deleted object for some kinds and with a `Success` `Status` for
//! others ([`ResourceDef::returns_deleted_object`]): kube-apiserver differs by kind, and
//! clients decode the answer by what they expect of that kind.

use std::sync::Arc;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::request::{Filter, Request};
use super::{ApiState, Collection};
use crate::sim::cluster::{Deletion, ObjectRef, Preconditions, ref_of};
use crate::sim::error::ApiError;
use crate::sim::resources::ResourceDef;

/// `POST` to a collection.
pub(super) fn create(
    state: &ApiState,
    collection: &Collection<'_>,
    req: &Request,
) -> Result<Response, ApiError> {
    let body = req.json_body()?;
    let def = &collection.def;
    let namespace = match (def.namespaced, collection.namespace) {
        (true, Some(ns)) => ns,
        (true, None) => {
            return Err(ApiError::method_not_allowed(format!(
                "{} must be created in a namespace (POST /.../namespaces/NS/{})",
                def.kind, def.plural
            )));
        }
        (false, _) => "",
    };
    let mode = req.write_mode()?;
    let created = state
        .cluster
        .create_in(mode, collection.resource, namespace, body)?;
    Ok(created_response(&created))
}

/// The 201 a create answers with.
pub(super) fn created_response(created: &Value) -> Response {
    (StatusCode::CREATED, Json(created.clone())).into_response()
}

/// For the `status` subresource: `current` with only its status taken from `changed`.
pub(super) fn with_status_of(current: &Value, changed: &Value) -> Value {
    let mut object = current.clone();
    object["status"] = changed["status"].clone();
    if let Some(rv) = changed.pointer("/metadata/resourceVersion") {
        object["metadata"]["resourceVersion"] = rv.clone();
    }
    object
}

/// `PUT` of an object, or of its status alone when `status_only`.
pub(super) fn update(
    state: &ApiState,
    at: ObjectRef,
    status_only: bool,
    req: &Request,
) -> Result<Response, ApiError> {
    let body = req.json_body()?;
    let mode = req.write_mode()?;
    let updated = state.cluster.modify_in(mode, &at, |current| {
        Ok(if status_only {
            with_status_of(current, &body)
        } else {
            body
        })
    })?;
    Ok(Json((*updated).clone()).into_response())
}

/// The preconditions of a DELETE's `DeleteOptions` body, if it has one.
fn preconditions(req: &Request) -> Result<Preconditions, ApiError> {
    if req.body_is_blank() {
        return Ok(Preconditions::default());
    }
    let options = req.json_body()?;
    let text = |field: &str| {
        options["preconditions"][field]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    Ok(Preconditions {
        uid: text("uid"),
        resource_version: text("resourceVersion"),
    })
}

/// The `Status` kube-apiserver answers a delete with when it does not return the object.
fn success_status(def: &ResourceDef, object: &Value) -> Value {
    let mut details = json!({
        "name": object["metadata"]["name"],
        "kind": def.plural,
        "uid": object["metadata"]["uid"],
    });
    if !def.group.is_empty() {
        details["group"] = def.group.clone().into();
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// `DELETE` of an object.
pub(super) fn delete(
    state: &ApiState,
    def: &ResourceDef,
    at: ObjectRef,
    req: &Request,
) -> Result<Response, ApiError> {
    let body = match state.cluster.delete_with(&at, &preconditions(req)?)? {
        Deletion::Deleted(object) if !def.returns_deleted_object => success_status(def, &object),
        deletion => (**deletion.object()).clone(),
    };
    Ok(Json(body).into_response())
}

/// `DELETE` of a collection: deletes every object the selectors match and answers with the
/// list of them.
pub(super) fn delete_collection(
    state: &ApiState,
    collection: &Collection<'_>,
    req: &Request,
) -> Result<Response, ApiError> {
    let def = &collection.def;
    let filter = Filter::from_request(Arc::clone(def), req, state.sharded_list_and_watch)?;
    let snapshot = state
        .cluster
        .list(collection.resource, collection.namespace);
    let mut deleted = Vec::new();
    for object in snapshot.items.iter().filter(|o| filter.matches(o)) {
        let at = ref_of(collection.resource, object);
        // An object deleted meanwhile is simply not in the answer.
        if let Ok(deletion) = state.cluster.delete_with(&at, &Preconditions::default()) {
            deleted.push((**deletion.object()).clone());
        }
    }
    Ok(Json(json!({
        "kind": format!("{}List", def.kind),
        "apiVersion": def.api_version(),
        "metadata": {"resourceVersion": state.cluster.resource_version().to_string()},
        "items": deleted,
    }))
    .into_response())
}
