//! The simulator's HTTP API at the URLs kube-apiserver uses: [`router`] is the table, and
//! `dispatch` turns a resource URL and a method into a verb on a resource.
//!
//! - discovery ([`crate::sim::discovery`]) and OpenAPI v3 for kubectl
//!   ([`crate::sim::openapi`]);
//! - `path`: resource URLs taken apart; `request`: what every verb reads from a request;
//! - the verbs: get (`read`), list ([`crate::sim::list`]), watch ([`crate::sim::watch`]),
//!   create, update, delete and deletecollection (`write`), patch and apply (`patch`),
//!   each also on the `status` subresource where kube-apiserver allows it;
//! - the fault control endpoint under `/_switchyard` ([`crate::sim::control`]).
//!
//! Every resource request first waits out an injected delay and answers an injected failure,
//! if any ([`crate::sim::faults`]), but only once its URL names a served resource: a fault
//! limited to `list` is used up by a list, never by a 404.

mod patch;
mod path;
mod read;
mod request;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use tokio::sync::mpsc;

use self::path::{ApiPath, ResourcePath};
pub(super) use self::read::{parse_rv, wait_for};
pub(super) use self::request::{Filter, Request};
use super::ServerCommand;
use super::authz::{Access, Attributes, Identity, review};
use super::cluster::{Cluster, ObjectRef};
use super::error::ApiError;
use super::faults::Faults;
use super::resources::ResourceDef;
use super::watch::WatchSignals;
use super::{control, discovery, list, openapi, watch};

/// What the HTTP handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The cluster served.
    pub cluster: Arc<Cluster>,
    /// The faults in force.
    pub faults: Arc<Faults>,
    /// The writes served.
    pub writes: Arc<super::writes_log::WriteLog>,
    /// Signals that end open watches.
    pub watches: WatchSignals,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// How long a read waits for a resourceVersion the cluster has not reached yet.
    pub version_wait: Duration,
    /// Asks the server loop to stop or restart.
    pub server: mpsc::UnboundedSender<ServerCommand>,
    /// Whether `shardSelector` is honoured (the `ShardedListAndWatch` feature gate).
    pub sharded_list_and_watch: bool,
    /// Whether streaming lists are served (the `WatchList` feature gate).
    pub watch_list: bool,
    /// Who may do what; `None` when the simulator authenticates nobody (every request is
    /// allowed).
    pub access: Option<Arc<Access>>,
}

/// The simulator's router.
pub fn router(state: ApiState) -> axum::Router {
    axum::Router::new()
        .route("/version", get(discovery::version))
        .route("/api", get(discovery::core_versions))
        .route("/apis", get(discovery::group_list))
        .route("/openapi/v3", get(openapi::index))
        .route("/openapi/v3/{*rest}", get(openapi::document))
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            post(review::subject_access_review),
        )
        .route(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            post(review::self_subject_access_review),
        )
        .route("/api/{*rest}", any(api_request))
        .route("/apis/{*rest}", any(api_request))
        .nest("/_switchyard", control::router())
        .fallback(|uri: Uri| async move { ApiError::no_such_resource(uri.path()) })
        .with_state(state)
}

/// A resource of the cluster and the namespace a request is limited to: what the verbs on a
/// collection (list, watch, create, deletecollection) work on.
pub(super) struct Collection<'a> {
    /// The resource's index in the cluster's catalogue.
    pub(super) resource: usize,
    /// The resource's definition.
    pub(super) def: Arc<ResourceDef>,
    /// The namespace; `None` for every namespace, or for a cluster-scoped resource.
    pub(super) namespace: Option<&'a str>,
}

impl Collection<'_> {
    /// Where the object `name` of this collection lives.
    fn object(&self, name: &str) -> ObjectRef {
        ObjectRef {
            resource: self.resource,
            namespace: self.namespace.unwrap_or_default().to_string(),
            name: name.to_string(),
        }
    }
}

/// Any request under `/api/` or `/apis/`: discovery of a group or a group version, or a verb
/// on a resource.
async fn api_request(
    State(state): State<ApiState>,
    method: Method,
    uri: Uri,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    identity: Option<Extension<Arc<Identity>>>,
    body: Bytes,
) -> Response {
    let identity = identity.map(|Extension(who)| who);
    let req = Request {
        method,
        path: uri.path().to_string(),
        params,
        headers,
        body,
    };
    match ApiPath::parse(&req.path) {
        None => ApiError::no_such_resource(&req.path).into_response(),
        Some(ApiPath::Group(group)) => discovery::group(&state, group, &req.path),
        Some(ApiPath::GroupVersion { group, version }) => {
            discovery::resource_list(&state, group, version, &req.path)
        }
        Some(ApiPath::Resource(target)) => {
            let verb = Verb::of(&req.method, target.name.is_some(), req.flag("watch"));
            match authorize(&state, identity.as_deref(), &target, verb) {
                Ok(()) => dispatch(&state, &target, verb, &req).await,
                Err(denied) => denied.into_response(),
            }
        }
    }
}

/// What a request does, by its method and URL; the names are those faults are limited by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// A method the URL does not take.
    Unsupported,
}

impl Verb {
    /// The verb of `method` on an object (`named`) or a collection.
    fn of(method: &Method, named: bool, watching: bool) -> Self {
        match (named, method) {
            (false, &Method::GET) if watching => Self::Watch,
            (false, &Method::GET) => Self::List,
            (false, &Method::POST) => Self::Create,
            (false, &Method::DELETE) => Self::DeleteCollection,
            (true, &Method::GET) => Self::Get,
            (true, &Method::PUT) => Self::Update,
            (true, &Method::PATCH) => Self::Patch,
            (true, &Method::DELETE) => Self::Delete,
            _ => Self::Unsupported,
        }
    }

    /// The verb's name, empty for [`Verb::Unsupported`].
    fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
            Self::Unsupported => "",
        }
    }
}

/// Whether `who` may do `verb` on `target` (always when the simulator authorizes nobody).
fn authorize(
    state: &ApiState,
    who: Option<&Identity>,
    target: &ResourcePath<'_>,
    verb: Verb,
) -> Result<(), ApiError> {
    let (Some(access), Some(who)) = (&state.access, who) else {
        return Ok(());
    };
    if verb == Verb::Unsupported {
        return Ok(());
    }
    let mut namespace = target.namespace.unwrap_or_default();
    // A namespace named in the URL is also the namespace of the request, as in kube-apiserver.
    if target.group.is_empty() && target.plural == "namespaces" {
        namespace = target.name.unwrap_or(namespace);
    }
    let request = Attributes {
        verb: verb.as_str().into(),
        group: target.group.into(),
        resource: target.plural.into(),
        subresource: target.subresource.unwrap_or_default().into(),
        namespace: namespace.into(),
        name: target.name.unwrap_or_default().into(),
    };
    access.authorize(who, &request)
}

/// Records a write in the simulator's write log (as kube-apiserver's audit log would).
fn record_write(state: &ApiState, verb: Verb, target: &ResourcePath<'_>, req: &Request) {
    let write = matches!(
        verb,
        Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
    );
    if !write {
        return;
    }
    state.writes.record(super::writes_log::Write {
        verb: verb.as_str().to_string(),
        resource: target.plural.to_string(),
        namespace: target.namespace.unwrap_or_default().to_string(),
        name: target.name.unwrap_or_default().to_string(),
        user_agent: req.user_agent().map(String::from),
        field_manager: req.param("fieldManager").map(String::from),
    });
}

/// Serves a verb on a resource: finds the resource, checks the URL fits it, applies the
/// injected faults, and calls the verb.
async fn dispatch(
    state: &ApiState,
    target: &ResourcePath<'_>,
    verb: Verb,
    req: &Request,
) -> Response {
    let found = state
        .cluster
        .find_resource(target.group, target.version, target.plural)
        .and_then(|index| Some((index, state.cluster.resource(index)?)));
    let Some((resource, def)) = found else {
        return ApiError::no_such_resource(&req.path).into_response();
    };
    if !target.fits(&def) {
        return ApiError::no_such_resource(&req.path).into_response();
    }
    let delay = state.faults.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(error) = state.faults.take_failure(verb.as_str(), target.plural) {
        return error.into_response();
    }
    record_write(state, verb, target, req);
    let collection = Collection {
        resource,
        def,
        namespace: target.namespace,
    };
    let def = &collection.def;
    let status = target.is_status();
    let result = match (verb, target.name) {
        (Verb::Watch, _) => return watch::watch(state, &collection, req).await,
        (Verb::List, _) => list::list(state, &collection, req).await,
        (Verb::Create, _) => write::create(state, &collection, req),
        (Verb::DeleteCollection, _) => write::delete_collection(state, &collection, req),
        (Verb::Get, Some(name)) => read::get(state, def, collection.object(name), req),
        (Verb::Update, Some(name)) => write::update(state, collection.object(name), status, req),
        (Verb::Patch, Some(name)) => patch::patch(state, def, collection.object(name), status, req),
        (Verb::Delete, Some(name)) if !status => {
            write::delete(state, def, collection.object(name), req)
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "{} is not supported on {} ({})",
            req.method, req.path, def.kind
        ))),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}
