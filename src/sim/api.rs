//! The simulator's HTTP API: discovery, and list, watch, get, create, update, patch and
//! delete for every resource in the catalogue, at the URLs kube-apiserver uses.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use super::cluster::{Change, Cluster, ObjectRef, WatchStart, object_rv};
use super::error::ApiError;
use super::resources::{self, RESOURCES, ResourceDef};
use super::table;
use crate::selector::Selector;

/// What the HTTP handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The cluster served.
    pub cluster: Arc<Cluster>,
    /// Bumped to close every open watch.
    pub close_watches: watch::Sender<u64>,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
}

/// The simulator's router.
pub fn router(state: ApiState) -> axum::Router {
    axum::Router::new()
        .route("/version", get(version))
        .route("/api", get(core_versions))
        .route("/apis", get(group_list))
        .route("/api/{*rest}", any(core_request))
        .route("/apis/{*rest}", any(group_request))
        .fallback(|uri: Uri| async move { ApiError::no_such_resource(uri.path()) })
        .with_state(state)
}

async fn version() -> Json<Value> {
    Json(json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-switchyard-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }))
}

async fn core_versions() -> Json<Value> {
    Json(json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }))
}

async fn group_list() -> Json<Value> {
    let groups: Vec<Value> = resources::groups()
        .into_iter()
        .map(|(group, version)| {
            let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
            json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

fn resource_list(group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .map(|r| {
            json!({
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                "shortNames": r.short_names,
            })
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// One HTTP request to a resource URL, with everything the verbs need.
struct Request {
    method: Method,
    path: String,
    params: HashMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
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
    let segments: Vec<String> = path
        .trim_start_matches("/api/")
        .split('/')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
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
    let segments: Vec<String> = path
        .trim_start_matches("/apis/")
        .split('/')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let Some((group, rest)) = segments.split_first() else {
        return ApiError::no_such_resource(&path).into_response();
    };
    if rest.is_empty() {
        return match resources::groups().iter().find(|(g, _)| g == group) {
            Some((g, v)) => {
                let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
                Json(json!({"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": [gv.clone()], "preferredVersion": gv})).into_response()
            }
            None => ApiError::no_such_resource(&path).into_response(),
        };
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

/// Routes `version/...` segments to discovery or to a verb on a resource.
async fn dispatch(state: &ApiState, group: &str, segments: &[String], req: Request) -> Response {
    let Some((version, rest)) = segments.split_first() else {
        return ApiError::no_such_resource(&req.path).into_response();
    };
    if rest.is_empty() {
        return match resource_list(group, version) {
            Some(list) => Json(list).into_response(),
            None => ApiError::no_such_resource(&req.path).into_response(),
        };
    }
    let (namespace, plural, name) = match rest {
        [ns_word, ns, plural, tail @ ..] if ns_word == "namespaces" && tail.len() <= 1 => (
            Some(ns.as_str()),
            plural.as_str(),
            tail.first().map(String::as_str),
        ),
        [plural] => (None, plural.as_str(), None),
        [plural, name] => (None, plural.as_str(), Some(name.as_str())),
        _ => return ApiError::no_such_resource(&req.path).into_response(),
    };
    let Some(resource) = resources::find(group, version, plural) else {
        return ApiError::no_such_resource(&req.path).into_response();
    };
    let def = &RESOURCES[resource];
    if namespace.is_some() && !def.namespaced {
        return ApiError::no_such_resource(&req.path).into_response();
    }
    if name.is_some() && namespace.is_none() && def.namespaced {
        return ApiError::no_such_resource(&req.path).into_response();
    }
    let result = match (name, &req.method) {
        (None, &Method::GET) if is_true(req.params.get("watch")) => {
            return watch(state, resource, namespace, &req);
        }
        (None, &Method::GET) => list(state, resource, namespace, &req),
        (None, &Method::POST) => create(state, resource, namespace, &req),
        (Some(name), &Method::GET) => get_one(state, object_ref(resource, namespace, name), &req),
        (Some(name), &Method::PUT) => update(state, object_ref(resource, namespace, name), &req),
        (Some(name), &Method::PATCH) => patch(state, object_ref(resource, namespace, name), &req),
        (Some(name), &Method::DELETE) => state
            .cluster
            .delete(&object_ref(resource, namespace, name))
            .map(|obj| (StatusCode::OK, Json((*obj).clone())).into_response()),
        _ => Err(ApiError::method_not_allowed(format!(
            "{} is not supported on {} ({})",
            req.method, req.path, def.kind
        ))),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

fn object_ref(resource: usize, namespace: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef {
        resource,
        namespace: namespace.unwrap_or_default().to_string(),
        name: name.to_string(),
    }
}

fn is_true(value: Option<&String>) -> bool {
    matches!(value.map(String::as_str), Some("1" | "true" | "True"))
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("as=Table"))
}

/// The label and field selectors of a request, parsed.
struct Filter {
    labels: Selector,
    fields: Selector,
}

impl Filter {
    fn from_params(params: &HashMap<String, String>) -> Result<Self, ApiError> {
        let parse = |key: &str| {
            Selector::parse(params.get(key).map(String::as_str).unwrap_or_default())
                .map_err(|e| ApiError::bad_request(format!("unable to parse {key}: {e}")))
        };
        Ok(Self {
            labels: parse("labelSelector")?,
            fields: parse("fieldSelector")?,
        })
    }

    fn matches(&self, object: &Value) -> bool {
        self.labels.matches_labels(object) && self.fields.matches_fields(object)
    }
}

fn list(
    state: &ApiState,
    resource: usize,
    namespace: Option<&str>,
    req: &Request,
) -> Result<Response, ApiError> {
    let def = &RESOURCES[resource];
    let filter = Filter::from_params(&req.params)?;
    let snapshot = state.cluster.list(resource, namespace);
    let items: Vec<&Value> = snapshot
        .items
        .iter()
        .map(AsRef::as_ref)
        .filter(|obj| filter.matches(obj))
        .collect();
    if wants_table(&req.headers) {
        return Ok(Json(table::table(def, &items, snapshot.rv)).into_response());
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
        "metadata": {"resourceVersion": snapshot.rv.to_string()},
        "items": items,
    }))
    .into_response())
}

fn get_one(state: &ApiState, at: ObjectRef, req: &Request) -> Result<Response, ApiError> {
    let def = &RESOURCES[at.resource];
    let object = state.cluster.get(&at)?;
    if wants_table(&req.headers) {
        let rv = object_rv(&object);
        return Ok(Json(table::table(def, &[object.as_ref()], rv)).into_response());
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
    namespace: Option<&str>,
    req: &Request,
) -> Result<Response, ApiError> {
    let def: &ResourceDef = &RESOURCES[resource];
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

fn update(state: &ApiState, at: ObjectRef, req: &Request) -> Result<Response, ApiError> {
    let body = parse_body(req)?;
    let updated = state.cluster.update(&at, body)?;
    Ok(Json((*updated).clone()).into_response())
}

fn patch(state: &ApiState, at: ObjectRef, req: &Request) -> Result<Response, ApiError> {
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
                json_patch::patch(&mut object, &ops).map_err(|e| {
                    ApiError::invalid(&RESOURCES[at.resource], &at.name, &e.to_string())
                })?;
            }
            other => return Err(ApiError::unsupported_media_type(other)),
        }
        // A patch that does not mention the resourceVersion applies to the current one.
        if body.pointer("/metadata/resourceVersion").is_none()
            && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.remove("resourceVersion");
        }
        Ok(object)
    })?;
    Ok(Json((*patched).clone()).into_response())
}

/// Serves a watch: a chunked stream of `{"type": ..., "object": ...}` lines.
fn watch(state: &ApiState, resource: usize, namespace: Option<&str>, req: &Request) -> Response {
    let def = &RESOURCES[resource];
    let filter = match Filter::from_params(&req.params) {
        Ok(f) => f,
        Err(e) => return e.into_response(),
    };
    let from_rv = match req.params.get("resourceVersion").map(String::as_str) {
        None | Some("" | "0") => None,
        Some(text) => match text.parse::<u64>() {
            Ok(rv) => Some(rv),
            Err(_) => {
                return ApiError::bad_request(format!("invalid resource version {text:?}"))
                    .into_response();
            }
        },
    };
    let timeout = req
        .params
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let bookmarks = is_true(req.params.get("allowWatchBookmarks"));
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    match state.cluster.watch_from(resource, namespace, from_rv) {
        WatchStart::Expired { oldest } => {
            let status = ApiError::expired(format!(
                "too old resource version: {} ({oldest})",
                from_rv.unwrap_or_default()
            ))
            .status();
            let line = event_line("ERROR", &status);
            tokio::spawn(async move { tx.send(line).await });
        }
        WatchStart::Resume(backlog, feed) => {
            let stream = WatchStream {
                resource,
                namespace: namespace.map(String::from),
                filter,
                bookmark: bookmarks.then_some((state.bookmark_interval, def)),
                timeout,
                closed: state.close_watches.subscribe(),
                last_rv: from_rv.unwrap_or_else(|| state.cluster.resource_version()),
                tx,
            };
            tokio::spawn(stream.run(backlog, feed));
        }
    }
    let body = Body::from_stream(ReceiverStream::new(rx).map(Ok::<_, Infallible>));
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// One open watch: filters the feed for its resource and sends matching events.
struct WatchStream {
    resource: usize,
    namespace: Option<String>,
    filter: Filter,
    bookmark: Option<(Duration, &'static ResourceDef)>,
    timeout: Option<Duration>,
    closed: watch::Receiver<u64>,
    last_rv: u64,
    tx: mpsc::Sender<Bytes>,
}

impl WatchStream {
    async fn run(mut self, backlog: Vec<Arc<Change>>, mut feed: broadcast::Receiver<Arc<Change>>) {
        for change in backlog {
            if !self.send(&change).await {
                return;
            }
        }
        let deadline = self.timeout.map(|t| tokio::time::Instant::now() + t);
        let period = self
            .bookmark
            .map(|(p, _)| p)
            .unwrap_or(Duration::from_secs(3600));
        let mut bookmarks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            tokio::select! {
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(far_future)).await } => return,
                _ = self.closed.changed() => return,
                _ = bookmarks.tick(), if self.bookmark.is_some() => {
                    if !self.send_bookmark().await {
                        return;
                    }
                }
                received = feed.recv() => match received {
                    Ok(change) => {
                        self.last_rv = self.last_rv.max(change.rv);
                        if change.at.resource == self.resource && !self.send(&change).await {
                            return;
                        }
                    }
                    // Fell too far behind (or the server stopped): end the watch; the client
                    // resumes from its last resourceVersion or relists.
                    Err(_) => return,
                },
            }
        }
    }

    /// Sends a change if it passes the filters; false once the client has gone.
    async fn send(&mut self, change: &Change) -> bool {
        if self
            .namespace
            .as_ref()
            .is_some_and(|ns| *ns != change.at.namespace)
            || !self.filter.matches(&change.object)
        {
            return true;
        }
        self.last_rv = self.last_rv.max(change.rv);
        self.tx
            .send(event_line(change.change_type.as_str(), &change.object))
            .await
            .is_ok()
    }

    async fn send_bookmark(&mut self) -> bool {
        let Some((_, def)) = self.bookmark else {
            return true;
        };
        let object = json!({
            "kind": def.kind,
            "apiVersion": def.api_version(),
            "metadata": {"resourceVersion": self.last_rv.to_string()},
        });
        self.tx.send(event_line("BOOKMARK", &object)).await.is_ok()
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}

/// One watch event line: `{"type":"ADDED","object":{...}}\n`.
fn event_line(event_type: &str, object: &Value) -> Bytes {
    let mut line = format!("{{\"type\":\"{event_type}\",\"object\":").into_bytes();
    // Serializing a Value into a Vec cannot fail.
    serde_json::to_writer(&mut line, object).expect("a JSON value serializes");
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}
