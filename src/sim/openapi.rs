//! A minimal OpenAPI v3 document set (`/openapi/v3` and one document per group version), so
//! that `kubectl apply -f` and `kubectl create -f` work: kubectl reads it to learn whether
//! the server validates fields itself (each PATCH operation declares the `fieldValidation`
//! parameter), and then leaves validation to the server. The documents describe operations
//! only, not schemas; the simulator does not validate objects against schemas.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::api::ApiState;
use super::error::ApiError;
use super::resources::ResourceDef;

/// `api/v1` or `apis/GROUP/VERSION`: a group version's key in the OpenAPI v3 index.
fn key(def: &ResourceDef) -> String {
    if def.group.is_empty() {
        format!("api/{}", def.version)
    } else {
        format!("apis/{}/{}", def.group, def.version)
    }
}

/// A hash of what a group version serves, so clients re-read a document that changed.
fn hash(defs: &[&ResourceDef]) -> String {
    // FNV-1a over the names: stable across runs, changes when a resource is added or removed.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for def in defs {
        for byte in def.plural.bytes().chain(def.kind.bytes()).chain([0]) {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016X}")
}

fn served_by_key(state: &ApiState) -> Vec<(String, Vec<ResourceDef>)> {
    let mut out: Vec<(String, Vec<ResourceDef>)> = Vec::new();
    for (_, def) in state.cluster.served_resources() {
        let k = key(&def);
        match out.iter_mut().find(|(existing, _)| *existing == k) {
            Some((_, defs)) => defs.push((*def).clone()),
            None => out.push((k, vec![(*def).clone()])),
        }
    }
    out
}

/// `GET /openapi/v3`: the index of group version documents.
pub(super) async fn index(State(state): State<ApiState>) -> Json<Value> {
    let mut paths = Map::new();
    for (k, defs) in served_by_key(&state) {
        let refs: Vec<&ResourceDef> = defs.iter().collect();
        paths.insert(
            k.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{k}?hash={}", hash(&refs))}),
        );
    }
    Json(json!({"paths": paths}))
}

/// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/GROUP/VERSION`.
pub(super) async fn document(State(state): State<ApiState>, Path(rest): Path<String>) -> Response {
    let wanted = rest.trim_matches('/');
    let Some((_, defs)) = served_by_key(&state).into_iter().find(|(k, _)| k == wanted) else {
        return ApiError::no_such_resource(&format!("/openapi/v3/{wanted}")).into_response();
    };
    let mut paths = Map::new();
    for def in &defs {
        let prefix = if def.group.is_empty() {
            format!("/api/{}", def.version)
        } else {
            format!("/apis/{}/{}", def.group, def.version)
        };
        let path = if def.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", def.plural)
        } else {
            format!("{prefix}/{}/{{name}}", def.plural)
        };
        let gvk = json!({"group": def.group, "version": def.version, "kind": def.kind});
        let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string"}});
        paths.insert(
            path,
            json!({
                "patch": {
                    "operationId": format!("patch{}", def.kind),
                    "parameters": [query("dryRun"), query("fieldManager"), query("fieldValidation")],
                    "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": gvk,
                },
            }),
        );
    }
    Json(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
    .into_response()
}
