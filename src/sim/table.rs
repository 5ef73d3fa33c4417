//! Server-side printing: the `Table` objects `kubectl get` asks for, with the columns
//! kube-apiserver shows for the common kinds.

use serde_json::{Value, json};

use super::resources::ResourceDef;

/// A column: its header and how to compute a cell from an object.
struct Column {
    name: &'static str,
    kind: &'static str,
    cell: fn(&Value) -> Value,
}

fn name_cell(o: &Value) -> Value {
    o["metadata"]["name"].clone()
}

fn age_cell(o: &Value) -> Value {
    let created = o["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap_or_default();
    let age = created
        .parse::<jiff::Timestamp>()
        .map(|t| jiff::Timestamp::now().duration_since(t).as_secs().max(0) as u64)
        .unwrap_or(0);
    Value::String(human_duration(age))
}

fn data_count_cell(o: &Value) -> Value {
    let count = |field: &str| o[field].as_object().map_or(0, |m| m.len());
    json!(count("data") + count("binaryData"))
}

fn columns(def: &ResourceDef) -> Vec<Column> {
    let name = Column {
        name: "Name",
        kind: "string",
        cell: name_cell,
    };
    let age = Column {
        name: "Age",
        kind: "string",
        cell: age_cell,
    };
    let mut cols = vec![name];
    match def.kind {
        "ConfigMap" => cols.push(Column {
            name: "Data",
            kind: "integer",
            cell: data_count_cell,
        }),
        "Secret" => {
            cols.push(Column {
                name: "Type",
                kind: "string",
                cell: |o| o["type"].as_str().unwrap_or("Opaque").into(),
            });
            cols.push(Column {
                name: "Data",
                kind: "integer",
                cell: data_count_cell,
            });
        }
        "Pod" => {
            cols.push(Column {
                name: "Status",
                kind: "string",
                cell: |o| o["status"]["phase"].as_str().unwrap_or("Pending").into(),
            });
            cols.push(Column {
                name: "Node",
                kind: "string",
                cell: |o| o["spec"]["nodeName"].as_str().unwrap_or("<none>").into(),
            });
        }
        "Namespace" | "Node" => cols.push(Column {
            name: "Status",
            kind: "string",
            cell: |o| {
                let phase = &o["status"]["phase"];
                phase.as_str().unwrap_or("Active").into()
            },
        }),
        _ => {}
    }
    cols.push(age);
    cols
}

/// A `meta.k8s.io/v1` Table of `objects`, each row carrying the object's metadata.
pub fn table(def: &ResourceDef, objects: &[&Value], rv: u64) -> Value {
    let cols = columns(def);
    let definitions: Vec<Value> = cols
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.kind,
                "format": if c.name == "Name" { "name" } else { "" },
                "description": "",
                "priority": 0,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| (c.cell)(o)).collect();
            json!({
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o["metadata"],
                },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()},
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

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600), "3h");
        assert_eq!(human_duration(5 * 86_400), "5d");
    }
}
