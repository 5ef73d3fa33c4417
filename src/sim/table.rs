//! Server-side printing: the `Table` objects `kubectl get` asks for (with an `Accept` of
//! `application/json;as=Table;v=v1;g=meta.k8s.io`), with the columns kube-apiserver shows for
//! the common kinds, a CRD's printer columns for custom resources, and `-o wide` columns at
//! priority 1. Lists, single objects and each watch event's object are served this way.

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use super::error::ApiError;
use super::resources::ResourceDef;

/// What each row carries besides its cells (the `includeObject` parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// The object's metadata as a `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

/// Whether the request asks for a Table, and what its rows should carry.
pub fn requested(
    headers: &HeaderMap,
    include_object: Option<&str>,
) -> Result<Option<IncludeObject>, ApiError> {
    let wants_table = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|accept| accept.split(','))
        .any(|media| media.contains("as=Table") && media.contains("g=meta.k8s.io"));
    if !wants_table {
        return Ok(None);
    }
    let include = match include_object {
        None | Some("Metadata") => IncludeObject::Metadata,
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"Metadata\", \"None\", \"Object\""
            )));
        }
    };
    Ok(Some(include))
}

/// A column: its header, type, priority and how to compute a cell from an object.
struct Column {
    name: String,
    kind: &'static str,
    priority: u32,
    cell: Box<dyn Fn(&Value) -> Value>,
}

fn column(
    name: &str,
    kind: &'static str,
    priority: u32,
    cell: impl Fn(&Value) -> Value + 'static,
) -> Column {
    Column {
        name: name.into(),
        kind,
        priority,
        cell: Box::new(cell),
    }
}

fn text_or(value: &Value, default: &str) -> Value {
    value
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or(default)
        .into()
}

fn age(timestamp: &Value) -> Value {
    let age = timestamp
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| jiff::Timestamp::now().duration_since(t).as_secs().max(0) as u64);
    match age {
        Some(secs) => human_duration(secs).into(),
        None => "<unknown>".into(),
    }
}

fn age_column() -> Column {
    column("Age", "string", 0, |o| {
        age(&o["metadata"]["creationTimestamp"])
    })
}

fn data_count(o: &Value) -> Value {
    let count = |field: &str| o[field].as_object().map_or(0, |m| m.len());
    json!(count("data") + count("binaryData"))
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn pod_columns() -> Vec<Column> {
    vec![
        column("Ready", "string", 0, |o| {
            let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = o["status"]["containerStatuses"]
                .as_array()
                .map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
            format!("{ready}/{total}").into()
        }),
        column("Status", "string", 0, |o| {
            if o["metadata"]["deletionTimestamp"].is_string() {
                return "Terminating".into();
            }
            let reason = &o["status"]["reason"];
            text_or(
                if reason.is_string() {
                    reason
                } else {
                    &o["status"]["phase"]
                },
                "Pending",
            )
        }),
        column("Restarts", "integer", 0, |o| {
            let restarts: i64 = o["status"]["containerStatuses"]
                .as_array()
                .map_or(0, |s| s.iter().map(|c| int(&c["restartCount"])).sum());
            restarts.into()
        }),
        age_column(),
        column("IP", "string", 1, |o| {
            text_or(&o["status"]["podIP"], "<none>")
        }),
        column("Node", "string", 1, |o| {
            text_or(&o["spec"]["nodeName"], "<none>")
        }),
        column("Nominated Node", "string", 1, |o| {
            text_or(&o["status"]["nominatedNodeName"], "<none>")
        }),
        column("Readiness Gates", "string", 1, |_| "<none>".into()),
    ]
}

fn builtin_columns(def: &ResourceDef) -> Vec<Column> {
    let replicas = |field: &'static str| move |o: &Value| json!(int(&o["status"][field]));
    match def.kind.as_str() {
        "Pod" => pod_columns(),
        "ConfigMap" => vec![column("Data", "integer", 0, data_count), age_column()],
        "Secret" => vec![
            column("Type", "string", 0, |o| text_or(&o["type"], "Opaque")),
            column("Data", "integer", 0, data_count),
            age_column(),
        ],
        "Namespace" => vec![
            column("Status", "string", 0, |o| {
                text_or(&o["status"]["phase"], "Active")
            }),
            age_column(),
        ],
        "Node" => vec![
            column("Status", "string", 0, |o| {
                let ready = o["status"]["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                    .map(|c| c["status"].clone());
                match ready.as_ref().and_then(Value::as_str) {
                    Some("True") => "Ready".into(),
                    Some("False") => "NotReady".into(),
                    _ => "Unknown".into(),
                }
            }),
            column("Roles", "string", 0, |_| "<none>".into()),
            age_column(),
            column("Version", "string", 0, |o| {
                text_or(&o["status"]["nodeInfo"]["kubeletVersion"], "")
            }),
        ],
        "Service" => vec![
            column("Type", "string", 0, |o| {
                text_or(&o["spec"]["type"], "ClusterIP")
            }),
            column("Cluster-IP", "string", 0, |o| {
                text_or(&o["spec"]["clusterIP"], "<none>")
            }),
            column("External-IP", "string", 0, |_| "<none>".into()),
            column("Port(s)", "string", 0, |o| {
                let ports: Vec<String> = o["spec"]["ports"]
                    .as_array()
                    .map(|ports| {
                        ports
                            .iter()
                            .map(|p| {
                                format!(
                                    "{}/{}",
                                    int(&p["port"]),
                                    p["protocol"].as_str().unwrap_or("TCP")
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if ports.is_empty() {
                    "<none>".into()
                } else {
                    ports.join(",").into()
                }
            }),
            age_column(),
        ],
        "Deployment" => vec![
            column("Ready", "string", 0, |o| {
                let want = o["spec"]["replicas"].as_i64().unwrap_or(1);
                format!("{}/{want}", int(&o["status"]["readyReplicas"])).into()
            }),
            column("Up-to-date", "integer", 0, replicas("updatedReplicas")),
            column("Available", "integer", 0, replicas("availableReplicas")),
            age_column(),
        ],
        "ReplicaSet" => vec![
            column("Desired", "integer", 0, |o| {
                json!(o["spec"]["replicas"].as_i64().unwrap_or(1))
            }),
            column("Current", "integer", 0, replicas("replicas")),
            column("Ready", "integer", 0, replicas("readyReplicas")),
            age_column(),
        ],
        "Lease" => vec![
            column("Holder", "string", 0, |o| {
                text_or(&o["spec"]["holderIdentity"], "")
            }),
            age_column(),
        ],
        "CustomResourceDefinition" => vec![column("Created At", "date", 0, |o| {
            o["metadata"]["creationTimestamp"].clone()
        })],
        _ => vec![age_column()],
    }
}

/// Evaluates a simple JSONPath (`.spec.size`, `.status.items[0].name`).
fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut value = object;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        let (field, index) = match part.split_once('[') {
            Some((field, rest)) => (field, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !field.is_empty() {
            value = value.get(field)?;
        }
        if let Some(i) = index {
            value = value.get(i)?;
        }
    }
    Some(value)
}

fn custom_columns(def: &ResourceDef) -> Vec<Column> {
    if def.columns.is_empty() {
        return vec![age_column()];
    }
    def.columns
        .iter()
        .map(|c| {
            let path = c.json_path.clone();
            let date = c.type_ == "date";
            let kind = match c.type_.as_str() {
                "integer" => "integer",
                "number" => "number",
                "boolean" => "boolean",
                "date" => "date",
                _ => "string",
            };
            column(&c.name, kind, c.priority, move |o| {
                match json_path(o, &path) {
                    Some(v) if date => age(v),
                    Some(Value::String(s)) => s.clone().into(),
                    Some(v @ (Value::Number(_) | Value::Bool(_))) => v.clone(),
                    Some(Value::Null) | None => Value::Null,
                    Some(other) => other.to_string().into(),
                }
            })
        })
        .collect()
}

fn columns(def: &ResourceDef) -> Vec<Column> {
    let mut cols = vec![column("Name", "string", 0, |o| {
        o["metadata"]["name"].clone()
    })];
    cols.extend(if def.custom {
        custom_columns(def)
    } else {
        builtin_columns(def)
    });
    cols
}

/// A `meta.k8s.io/v1` Table of `objects` with list metadata `meta`, each row carrying what
/// `include` says.
pub fn table(def: &ResourceDef, objects: &[&Value], meta: Value, include: IncludeObject) -> Value {
    let cols = columns(def);
    let definitions: Vec<Value> = cols
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.kind,
                "format": if c.name == "Name" { "name" } else { "" },
                "description": "",
                "priority": c.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| (c.cell)(o)).collect();
            let mut row = json!({"cells": cells});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": o["metadata"],
                    });
                }
                IncludeObject::Object => row["object"] = (*o).clone(),
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// Ages as kubectl prints them: `45s`, `12m`, `3h`, `5d`.
pub fn human_duration(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 2 => format!("{}m", s / 60),
        s if s < 86_400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::{PrinterColumn, RESOURCES, find};

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600), "3h");
        assert_eq!(human_duration(5 * 86_400), "5d");
    }

    #[test]
    fn pod_rows_show_readiness_status_and_restarts() {
        let pods = &RESOURCES[find("", "v1", "pods").unwrap()];
        let pod = json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1}]},
        });
        let t = table(pods, &[&pod], json!({}), IncludeObject::None);
        assert_eq!(
            t["rows"][0]["cells"].as_array().unwrap()[..4],
            [json!("p"), json!("1/2"), json!("Running"), json!(3)]
        );
        assert!(t["rows"][0].get("object").is_none());
        let wide: Vec<&Value> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 1)
            .collect();
        assert_eq!(wide[1]["name"], "Node");
    }

    #[test]
    fn custom_resources_show_their_printer_columns() {
        let mut def = RESOURCES[0].clone();
        def.custom = true;
        def.columns = vec![PrinterColumn {
            name: "Size".into(),
            type_: "integer".into(),
            json_path: ".spec.size".into(),
            priority: 0,
        }];
        let widget = json!({"metadata": {"name": "w"}, "spec": {"size": 3}});
        let t = table(&def, &[&widget], json!({}), IncludeObject::Object);
        assert_eq!(t["rows"][0]["cells"], json!(["w", 3]));
        assert_eq!(t["rows"][0]["object"]["spec"]["size"], 3);
    }
}
