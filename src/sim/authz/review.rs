//! SubjectAccessReview and SelfSubjectAccessReview (`authorization.k8s.io/v1`): a client
//! asks whether a user may do something and the simulator answers with the same evaluator
//! that authorizes its requests. `kubectl auth can-i` sends a SelfSubjectAccessReview (with
//! `Impersonate-User` for `--as`); a controller checking another identity sends a
//! SubjectAccessReview, which the requester needs `create` on `subjectaccessreviews` for.
//!
//! Only `spec.resourceAttributes` is evaluated; `spec.nonResourceAttributes` is answered
//! allowed, as the simulator serves its non-resource URLs to every user.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Attributes, Decision, Identity};
use crate::sim::api::ApiState;
use crate::sim::error::ApiError;
use crate::sim::protobuf;
use crate::sim::resources::ResourceDef;

/// The API group of the reviews.
pub const GROUP: &str = "authorization.k8s.io";

/// The resources discovery lists for `authorization.k8s.io/v1`.
pub fn discovery_resources() -> Vec<Value> {
    [
        ("subjectaccessreviews", "SubjectAccessReview"),
        ("selfsubjectaccessreviews", "SelfSubjectAccessReview"),
    ]
    .iter()
    .map(|(plural, kind)| {
        json!({
            "name": plural,
            "singularName": kind.to_lowercase(),
            "namespaced": false,
            "kind": kind,
            "verbs": ["create"],
        })
    })
    .collect()
}

/// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: may `spec.user` (with
/// `spec.groups`, taken as given) do `spec.resourceAttributes`?
pub async fn subject_access_review(
    State(state): State<ApiState>,
    identity: Option<Extension<Arc<Identity>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let def = review_def("subjectaccessreviews", "SubjectAccessReview");
    let requester = requester(identity);
    let create = Attributes {
        verb: "create".into(),
        group: GROUP.into(),
        resource: def.plural.clone(),
        ..Attributes::default()
    };
    if let Some(access) = &state.access
        && let Err(denied) = access.authorize(&requester, &create)
    {
        return denied.into_response();
    }
    let review = match parse(&def, &headers, &body) {
        Ok(review) => review,
        Err(e) => return e.into_response(),
    };
    let spec = &review["spec"];
    let subject = Identity {
        name: spec["user"].as_str().unwrap_or_default().to_string(),
        uid: spec["uid"].as_str().map(String::from),
        groups: strings(&spec["groups"]),
    };
    if subject.name.is_empty() && subject.groups.is_empty() {
        let cause =
            "spec.user: Invalid value: \"\": at least one of user or group must be specified";
        return ApiError::invalid(&def, "", cause).into_response();
    }
    answer(&state, review, &subject)
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`: may the requester (as
/// impersonated) do `spec.resourceAttributes`? Every user may ask.
pub async fn self_subject_access_review(
    State(state): State<ApiState>,
    identity: Option<Extension<Arc<Identity>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let def = review_def("selfsubjectaccessreviews", "SelfSubjectAccessReview");
    match parse(&def, &headers, &body) {
        Ok(review) => answer(&state, review, &requester(identity)),
        Err(e) => e.into_response(),
    }
}

/// The identity the middleware found, or the admin when the simulator authenticates nobody.
fn requester(identity: Option<Extension<Arc<Identity>>>) -> Identity {
    identity.map_or_else(Identity::admin, |Extension(who)| (*who).clone())
}

/// The review in the body (JSON, or protobuf as kubectl sends it), checked to have exactly
/// one kind of attributes.
fn parse(def: &ResourceDef, headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let review: Value = if content_type.contains("protobuf") {
        protobuf::decode_object(body)
            .map_err(|e| ApiError::unsupported_media_type(&format!("{content_type}: {e}")))?
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the request body is not valid JSON: {e}"))
        })?
    };
    let spec = &review["spec"];
    let resource = spec["resourceAttributes"].is_object();
    let non_resource = spec["nonResourceAttributes"].is_object();
    if resource == non_resource {
        let cause = "spec.resourceAttributes: Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified";
        return Err(ApiError::invalid(def, "", cause));
    }
    Ok(review)
}

/// The review with its `status`, decided for `subject`, answered 201 as kube-apiserver does.
fn answer(state: &ApiState, mut review: Value, subject: &Identity) -> Response {
    let decision = match review["spec"]["resourceAttributes"].as_object() {
        Some(attributes) => {
            let text = |key: &str| {
                attributes
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            let request = Attributes {
                verb: text("verb").into(),
                group: text("group").into(),
                resource: text("resource").into(),
                subresource: text("subresource").into(),
                namespace: text("namespace").into(),
                name: text("name").into(),
            };
            match &state.access {
                Some(access) => access.decide(subject, &request),
                None => allowed(),
            }
        }
        None => allowed(),
    };
    review["apiVersion"] = "authorization.k8s.io/v1".into();
    review["status"] = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        review["status"]["reason"] = decision.reason.into();
    }
    (StatusCode::CREATED, Json(review)).into_response()
}

/// An allowed decision without a reason.
fn allowed() -> Decision {
    Decision {
        allowed: true,
        reason: String::new(),
    }
}

/// The strings of a JSON array.
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

/// A definition of a review resource, for its error messages.
fn review_def(plural: &str, kind: &str) -> ResourceDef {
    ResourceDef {
        group: GROUP.into(),
        version: "v1".into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        short_names: Vec::new(),
        categories: Vec::new(),
        namespaced: false,
        columns: Vec::new(),
        custom: false,
        returns_deleted_object: false,
    }
}
