//! Discovery: `/version`, `/api`, `/apis`, `/apis/GROUP` and the resource list of each
//! group version, built from the cluster's catalogue so that custom resources appear (and
//! kubectl finds them by plural, singular, short name, kind and category) as soon as their
//! CRD exists.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::api::ApiState;
use super::authz::review;
use super::error::ApiError;

/// `GET /version`.
pub(super) async fn version() -> Json<Value> {
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

/// `GET /api`.
pub(super) async fn core_versions() -> Json<Value> {
    Json(json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }))
}

fn api_group(group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or_default(),
    })
}

/// The served API groups with their versions: the cluster's, and the reviews'.
fn groups(state: &ApiState) -> Vec<(String, Vec<String>)> {
    let mut groups = state.cluster.groups();
    groups.push((review::GROUP.into(), vec!["v1".into()]));
    groups
}

/// `GET /apis`.
pub(super) async fn group_list(State(state): State<ApiState>) -> Json<Value> {
    let groups: Vec<Value> = groups(&state)
        .iter()
        .map(|(group, versions)| api_group(group, versions))
        .collect();
    Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// `GET /apis/GROUP`.
pub(super) fn group(state: &ApiState, group: &str, path: &str) -> Response {
    match groups(state).iter().find(|(g, _)| g == group) {
        Some((g, versions)) => {
            let mut body = api_group(g, versions);
            body["kind"] = "APIGroup".into();
            body["apiVersion"] = "v1".into();
            Json(body).into_response()
        }
        None => ApiError::no_such_resource(path).into_response(),
    }
}

/// `GET /api/v1` or `GET /apis/GROUP/VERSION`: the resources served there.
pub(super) fn resource_list(state: &ApiState, group: &str, version: &str, path: &str) -> Response {
    let mut resources = Vec::new();
    for (_, def) in state.cluster.served_resources() {
        if def.group != group || def.version != version {
            continue;
        }
        let mut resource = json!({
            "name": def.plural,
            "singularName": def.singular,
            "namespaced": def.namespaced,
            "kind": def.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        });
        if !def.short_names.is_empty() {
            resource["shortNames"] = json!(def.short_names);
        }
        if !def.categories.is_empty() {
            resource["categories"] = json!(def.categories);
        }
        resources.push(resource);
        resources.push(json!({
            "name": format!("{}/status", def.plural),
            "singularName": "",
            "namespaced": def.namespaced,
            "kind": def.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if group == review::GROUP && version == "v1" {
        resources.extend(review::discovery_resources());
    }
    if resources.is_empty() {
        return ApiError::no_such_resource(path).into_response();
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Json(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
    .into_response()
}
