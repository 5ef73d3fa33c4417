//! The simulator's HTTP API at the URLs kube-apiserver uses: discovery ([`super::discovery`]),
//! list ([`super::list`]), watch ([`super::watch`]), and here get, create, update, patch,
//! delete and deletecollection, plus the `status` subresource; OpenAPI v3 operations for
//! kubectl ([`super::openapi`]); the fault control endpoint under `/_switchyard`
//! ([`super::control`]).
//!
//! Every resource request first waits out an injected delay and answers an injected failure,
//! if any ([`super::faults`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::ServerCommand;
use super::cluster::{Cluster, Deletion, ObjectRef, Preconditions, object_rv};
use super::error::ApiError;
use super::faults::Faults;
use super::fields;
use super::resources::ResourceDef;
use super::table;
use super::watch::WatchSignals;
use super::{control, discovery, list, openapi, watch};
use crate::config::Selector;

/// What the HTTP handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The cluster served.
    pub cluster: Arc<Cluster>,
    /// The faults in force.
    pub faults: Arc<Faults>,
    /// Signals that end open watches.
    pub watches: WatchSignals,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// How long a read waits for a resourceVersion the cluster has not reached yet.
    pub version_wait: Duration,
    /// Asks the server loop to stop or restart.
    pub server: mpsc::UnboundedSender<ServerCommand>,
}

/// The simulator's router.
pub fn router(state: ApiState) -> axum::Router {
    axum::Router::new()
        .route("/version", get(discovery::version))
        .route("/api", get(discovery::core_versions))
        .route("/apis", get(discovery::group_list))
        .route("/openapi/v3", get(openapi::index))
        .route("/openapi/v3/{*rest}", get(openapi::document))
        .route("/api/{*rest}", any(core_request))
        .route("/apis/{*rest}", any(group_request))
        .nest("/_switchyard", control::router())
        .fallback(|uri: Uri| async move { ApiError::no_such_resource(uri.path()) })
        .with_state(state)
}

/// One HTTP request to a resource URL, with everything the verbs need.
pub(super) struct Request {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) params: HashMap<String, String>,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

impl Request {
    /// A query parameter, `None` when absent or empty.
    pub(super) fn param(&self, name: &str) -> Option<&str> {
        self.params
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

fn segments(path: &str, prefix: &str) -> Vec<String> {
    path.trim_start_matches(prefix)
        .split('/')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

async fn core_request(
    State(state): State<ApiState>,
    method: Method,
    uri: Uri,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let segments = segments(&path, "/api/");
    let request = Request {
        method,
        path,
        params,
        headers,
        body,
    };
    dispatch(&state, "", &segments, request).await
}

async fn group_request(
    State(state): State<ApiState>,
    method: Method,
    uri: Uri,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let segments = segments(&path, "/apis/");
    let Some((group, rest)) = segments.split_first() else {
        return ApiError::no_such_resource(&path).into_response();
    };
    if rest.is_empty() {
        return discovery::group(&state, group, &path);
    }
    let request = Request {
        method,
        path: path.clone(),
        params,
        headers,
        body,
    };
    dispatch(&state, group, rest, request).await
}

/// A resource URL taken apart.
struct Target<'a> {
    namespace: Option<&'a str>,
    plural: &'a str,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
}

fn parse_target(rest: &[String]) -> Option<Target<'_>> {
    let (namespace, rest) = match rest {
        // `namespaces/NAME/status` is the status of a namespace, not a resource in it.
        [ns_word, _, sub] if ns_word == "namespaces" && sub == "status" => (None, rest),
        [ns_word, ns, rest @ ..] if ns_word == "namespaces" && !rest.is_empty() => {
            (Some(ns.as_str()), rest)
        }
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (plural, None, None),
        [plural, name] => (plural, Some(name.as_str()), None),
        [plural, name, sub] => (plural, Some(name.as_str()), Some(sub.as_str())),
        _ => return None,
    };
    Some(Target {
        namespace,
        plural,
        name,
        subresource,
    })
}

/// Routes `version/...` segments to discovery or to a verb on a resource.
async fn dispatch(state: &ApiState, group: &str, segments: &[String], req: Request) -> Response {
    let Some((version, rest)) = segments.split_first() else {
        return ApiError::no_such_resource(&req.path).into_response();
    };
    if rest.is_empty() {
        return discovery::resource_list(state, group, version, &req.path);
    }
    let Some(target) = parse_target(rest) else {
        return ApiError::no_such_resource(&req.path).into_response();
    };
    let found = state
        .cluster
        .find_resource(group, version, target.plural)
        .and_then(|index| Some((index, state.cluster.resource(index)?)));
    let Some((resource, def)) = found else {
        return ApiError::no_such_resource(&req.path).into_response();
    };
    let misplaced = (target.namespace.is_some() && !def.namespaced)
        || (target.name.is_some() && target.namespace.is_none() && def.namespaced)
        || target.subresource.is_some_and(|s| s != "status");
    if misplaced {
        return ApiError::no_such_resource(&req.path).into_response();
    }
    let watching = is_true(req.params.get("watch"));
    let verb = match (target.name, &req.method) {
        (None, &Method::GET) if watching => "watch",
        (None, &Method::GET) => "list",
        (None, &Method::POST) => "create",
        (None, &Method::DELETE) => "deletecollection",
        (Some(_), &Method::GET) => "get",
        (Some(_), &Method::PUT) => "update",
        (Some(_), &Method::PATCH) => "patch",
        (Some(_), &Method::DELETE) => "delete",
        _ => "",
    };
    let delay = state.faults.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(error) = state.faults.take_failure(verb) {
        return error.into_response();
    }
    let ns = target.namespace;
    let at = |name: &str| ObjectRef {
        resource,
        namespace: ns.unwrap_or_default().to_string(),
        name: name.to_string(),
    };
    let status = target.subresource.is_some();
    let result = match (verb, target.name) {
        ("watch", _) => return watch::watch(state, resource, def, ns, &req).await,
        ("list", _) => list::list(state, resource, def, ns, &req).await,
        ("create", _) => create(state, resource, &def, ns, &req),
        ("deletecollection", _) => delete_collection(state, resource, def, ns, &req),
        ("get", Some(name)) => get_one(state, &def, at(name), &req),
        ("update", Some(name)) => update(state, at(name), status, &req),
        ("patch", Some(name)) => patch(state, &def, at(name), status, &req),
        ("delete", Some(name)) if !status => delete(state, &def, at(name), &req),
        _ => Err(ApiError::method_not_allowed(format!(
            "{} is not supported on {} ({})",
            req.method, req.path, def.kind
        ))),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Whether a query parameter is set to true.
pub(super) fn is_true(value: Option<&String>) -> bool {
    matches!(value.map(String::as_str), Some("1" | "true" | "True"))
}

/// The label and field selectors of a request, parsed and checked against the kind.
pub(super) struct Filter {
    def: Arc<ResourceDef>,
    labels: Selector,
    fields: Selector,
}

impl Filter {
    /// Parses `labelSelector` and `fieldSelector`; a field the kind cannot select on is a
    /// 400, as kube-apiserver answers.
    pub(super) fn from_request(def: Arc<ResourceDef>, req: &Request) -> Result<Self, ApiError> {
        let labels = Selector::parse(req.param("labelSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = Selector::parse_fields(req.param("fieldSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
        if let Some(field) = fields.keys().find(|f| !fields::supported(&def, f)) {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {field}"
            )));
        }
        Ok(Self {
            def,
            labels,
            fields,
        })
    }

    /// Whether there are no selectors at all.
    pub(super) fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether an object satisfies both selectors.
    pub(super) fn matches(&self, object: &Value) -> bool {
        self.labels.matches_labels(object)
            && self
                .fields
                .matches_values(|field| fields::value(&self.def, object, field))
    }
}

fn get_one(
    state: &ApiState,
    def: &ResourceDef,
    at: ObjectRef,
    req: &Request,
) -> Result<Response, ApiError> {
    let object = state.cluster.get(&at)?;
    if let Some(include) = table::requested(&req.headers, req.param("includeObject"))? {
        let meta = json!({"resourceVersion": object_rv(&object).to_string()});
        return Ok(Json(table::table(def, &[object.as_ref()], meta, include)).into_response());
    }
    Ok(Json((*object).clone()).into_response())
}

fn parse_body(req: &Request) -> Result<Value, ApiError> {
    let content_type = req
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if content_type.contains("protobuf") {
        return super::protobuf::decode_object(&req.body)
            .map_err(|e| ApiError::unsupported_media_type(&format!("{content_type}: {e}")));
    }
    serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn create(
    state: &ApiState,
    resource: usize,
    def: &ResourceDef,
    namespace: Option<&str>,
    req: &Request,
) -> Result<Response, ApiError> {
    let body = parse_body(req)?;
    let namespace = match (def.namespaced, namespace) {
        (true, Some(ns)) => ns,
        (true, None) => {
            return Err(ApiError::method_not_allowed(format!(
                "{} must be created in a namespace (POST /.../namespaces/NS/{})",
                def.kind, def.plural
            )));
        }
        (false, _) => "",
    };
    let created = state.cluster.create(resource, namespace, body)?;
    Ok((StatusCode::CREATED, Json((*created).clone())).into_response())
}

/// For the `status` subresource: `current` with only its status taken from `changed`.
fn with_status_of(current: &Value, changed: &Value) -> Value {
    let mut object = current.clone();
    object["status"] = changed["status"].clone();
    if let Some(rv) = changed.pointer("/metadata/resourceVersion") {
        object["metadata"]["resourceVersion"] = rv.clone();
    }
    object
}

fn update(
    state: &ApiState,
    at: ObjectRef,
    status_only: bool,
    req: &Request,
) -> Result<Response, ApiError> {
    let body = parse_body(req)?;
    let updated = if status_only {
        state
            .cluster
            .modify(&at, |current| Ok(with_status_of(current, &body)))?
    } else {
        state.cluster.update(&at, body)?
    };
    Ok(Json((*updated).clone()).into_response())
}

fn patch(
    state: &ApiState,
    def: &ResourceDef,
    at: ObjectRef,
    status_only: bool,
    req: &Request,
) -> Result<Response, ApiError> {
    let content_type = req
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let body = parse_body(req)?;
    if content_type == APPLY_PATCH && !status_only {
        return apply(state, at, body);
    }
    let patched = state.cluster.modify(&at, |current| {
        let mut object = current.clone();
        match content_type.as_str() {
            // Strategic merge patch is served as a JSON merge patch: for the maps that
            // labels, annotations and data are, the two agree.
            "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                json_patch::merge(&mut object, &body);
            }
            "application/json-patch+json" => {
                let ops: json_patch::Patch = serde_json::from_value(body.clone())
                    .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
                json_patch::patch(&mut object, &ops)
                    .map_err(|e| ApiError::invalid(def, &at.name, &e.to_string()))?;
            }
            other => return Err(ApiError::unsupported_media_type(other)),
        }
        // A patch that does not set the resourceVersion applies to the current one.
        if object.pointer("/metadata/resourceVersion")
            == current.pointer("/metadata/resourceVersion")
            && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.remove("resourceVersion");
        }
        Ok(if status_only {
            with_status_of(current, &object)
        } else {
            object
        })
    })?;
    Ok(Json((*patched).clone()).into_response())
}

/// The content type of a server-side apply.
const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// Server-side apply, simulated: the applied object is merged into the current one as a
/// JSON merge patch (no field ownership, no conflicts), or created when there is none.
/// Clients send it as JSON, which is YAML too.
fn apply(state: &ApiState, at: ObjectRef, mut body: Value) -> Result<Response, ApiError> {
    match body.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) if name != at.name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({})",
                at.name
            )));
        }
        Some(_) => {}
        None => {
            let Some(object) = body.as_object_mut() else {
                return Err(ApiError::bad_request(
                    "the applied object must be a JSON object".into(),
                ));
            };
            let meta = object.entry("metadata").or_insert_with(|| json!({}));
            meta["name"] = at.name.clone().into();
        }
    }
    let patched = state.cluster.modify(&at, |current| {
        let mut object = current.clone();
        json_patch::merge(&mut object, &body);
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        Ok(object)
    });
    match patched {
        Ok(patched) => Ok(Json((*patched).clone()).into_response()),
        Err(e) if e.code == 404 => {
            if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
            }
            let created = state.cluster.create(at.resource, &at.namespace, body)?;
            Ok((StatusCode::CREATED, Json((*created).clone())).into_response())
        }
        Err(e) => Err(e),
    }
}

/// The preconditions of a DELETE's `DeleteOptions` body, if it has one.
fn preconditions(req: &Request) -> Result<Preconditions, ApiError> {
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Preconditions::default());
    }
    let options = parse_body(req)?;
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

fn delete(
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

/// Deletes every object the selectors match and answers with the list of them.
fn delete_collection(
    state: &ApiState,
    resource: usize,
    def: Arc<ResourceDef>,
    namespace: Option<&str>,
    req: &Request,
) -> Result<Response, ApiError> {
    let filter = Filter::from_request(def.clone(), req)?;
    let snapshot = state.cluster.list(resource, namespace);
    let mut deleted = Vec::new();
    for object in snapshot.items.iter().filter(|o| filter.matches(o)) {
        let at = super::cluster::ref_of(resource, object);
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
