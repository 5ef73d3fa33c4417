use serde_json::Value;

use super::*;

/// Every way a node can fail the API server's structural-schema rules, with its path.
fn structural_faults(node: &Value, path: &str, faults: &mut Vec<String>) {
    let Some(object) = node.as_object() else {
        faults.push(format!("{path}: not an object"));
        return;
    };
    for key in [
        "$ref",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
        "const",
        "definitions",
        "default",
    ] {
        if object.contains_key(key) {
            faults.push(format!("{path}: has {key}"));
        }
    }
    let preserve = object.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    match object.get("type") {
        Some(Value::String(_)) => {}
        None if preserve => {}
        other => faults.push(format!("{path}: type {other:?}")),
    }
    if object.contains_key("properties") && object.contains_key("additionalProperties") {
        faults.push(format!("{path}: properties beside additionalProperties"));
    }
    if let Some(format) = object.get("format").and_then(Value::as_str)
        && !["int32", "int64", "float", "double"].contains(&format)
    {
        faults.push(format!("{path}: format {format}"));
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, inner) in properties {
            structural_faults(inner, &format!("{path}.{name}"), faults);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(inner) = object.get(key) {
            structural_faults(inner, &format!("{path}.{key}"), faults);
        }
    }
}

fn schema_of(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

#[test]
fn every_node_of_both_crds_is_structural() {
    let crds = crds();
    assert_eq!(crds.len(), 2);
    for crd in &crds {
        let mut faults = Vec::new();
        structural_faults(schema_of(crd), "openAPIV3Schema", &mut faults);
        assert!(
            faults.is_empty(),
            "{}: {faults:#?}",
            crd["metadata"]["name"]
        );
    }
}

#[test]
fn the_specs_have_the_config_items_fields_and_their_enums() {
    let crds = crds();
    let handler = &schema_of(&crds[0])["properties"]["spec"];
    let route = &schema_of(&crds[1])["properties"]["spec"];
    for field in [
        "plugin",
        "concurrency",
        "timeout",
        "capabilities",
        "batch",
        "config",
    ] {
        assert!(
            handler["properties"][field].is_object(),
            "Handler spec lacks {field}"
        );
    }
    assert!(
        handler["required"]
            .as_array()
            .unwrap()
            .contains(&"service_account".into())
    );
    assert_eq!(
        handler["properties"]["instance"]["enum"],
        serde_json::json!(["per-event", "reuse"]),
        "{:#}",
        handler["properties"]["instance"]
    );
    assert_eq!(
        handler["properties"]["config"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert!(
        route["properties"].get("name").is_none(),
        "a Route's name is its metadata.name"
    );
    assert_eq!(route["required"], serde_json::json!(["handler"]));
    assert_eq!(
        route["properties"]["delivery"]["enum"],
        serde_json::json!(["latest", "every"])
    );
    assert_eq!(
        route["properties"]["finalizer"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
}

#[test]
fn the_chart_ships_the_crds_switchyard_prints() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/chart/switchyard/crds/switchyard.dev.yaml"
    );
    let shipped = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        shipped == crds_yaml(),
        "{path} differs from `switchyard crds`; run `switchyard crds > {path}`"
    );
}
