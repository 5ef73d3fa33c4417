//! The CustomResourceDefinitions of the team-owned resources, `Route` and `Handler` in
//! `switchyard.dev/v1alpha1`: their specs are a config file's route and handler items, so
//! their OpenAPI schemas are made from the same serde types ([`RouteFile`], [`HandlerFile`])
//! and turned into the *structural* schemas the API server requires (every node typed, no
//! `$ref`, unions left to the daemon's own validation).
//!
//! [`RouteFile`]: super::schema::RouteFile
//! [`HandlerFile`]: super::schema::HandlerFile

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::schema::{HandlerFile, RouteFile};

/// The API group of the resources.
pub const GROUP: &str = "switchyard.dev";
/// The one version served and stored.
pub const VERSION: &str = "v1alpha1";

/// `status` of a Route or a Handler, as the daemon writes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` and `Invalid`, each `True` or `False` with a reason and a message.
    #[serde(default)]
    pub conditions: Vec<StatusCondition>,
    /// Events the handler has finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processed: Option<u64>,
    /// Failed calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
    /// Events given up on and kept as dead letters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letters: Option<u64>,
    /// The last error, with secrets redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One condition, in the shape of `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusCondition {
    /// `Ready` or `Invalid`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// One word, CamelCase, for machines.
    pub reason: String,
    /// For people: what is wrong and where.
    pub message: String,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// The `metadata.generation` the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One resource kind: its names and the serde type its spec is read with.
struct Kind {
    kind: &'static str,
    plural: &'static str,
    short: &'static str,
    spec: Value,
    columns: Value,
}

/// Every CRD, as YAML documents separated by `---`: what `switchyard crds` prints and the
/// Helm chart's `crds/` folder holds.
pub fn crds_yaml() -> String {
    let mut out = String::from(
        "# The CustomResourceDefinitions of switchyard's team-owned resources, from `switchyard crds`.\n",
    );
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd).expect("a CRD serializes to YAML"));
    }
    out
}

/// Every CRD, as JSON objects: `handlers.switchyard.dev` and `routes.switchyard.dev`.
pub fn crds() -> Vec<Value> {
    let ready = json!({"name": "Ready", "type": "string",
        "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"});
    let age = json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"});
    let mut route = spec_schema::<RouteFile>();
    forget_property(&mut route, "name");
    let mut handler = spec_schema::<HandlerFile>();
    add_service_account(&mut handler);
    [
        Kind {
            kind: "Handler",
            plural: "handlers",
            short: "syh",
            spec: handler,
            columns: json!([
                {"name": "Plugin", "type": "string", "jsonPath": ".spec.plugin"},
                {"name": "ServiceAccount", "type": "string", "jsonPath": ".spec.service_account"},
                ready, age
            ]),
        },
        Kind {
            kind: "Route",
            plural: "routes",
            short: "syr",
            spec: route,
            columns: json!([
                {"name": "Resource", "type": "string", "jsonPath": ".spec.resource"},
                {"name": "Handler", "type": "string", "jsonPath": ".spec.handler"},
                ready, age
            ]),
        },
    ]
    .into_iter()
    .map(crd)
    .collect()
}

/// The CRD of one kind.
fn crd(kind: Kind) -> Value {
    let Kind {
        kind,
        plural,
        short,
        spec,
        columns,
    } = kind;
    let status = spec_schema::<ResourceStatus>();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
                "shortNames": [short],
                "categories": ["switchyard"],
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status,
                    },
                }},
            }],
        },
    })
}

/// The structural OpenAPI v3 schema of `T`.
fn spec_schema<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
    }
    structural(schema)
}

/// `spec.service_account` of a Handler: the ServiceAccount of its namespace whose rights
/// the handler's Kubernetes calls are held to.
fn add_service_account(spec: &mut Value) {
    spec["properties"]["service_account"] = json!({
        "description": "The ServiceAccount, in the Handler's namespace, that the handler's Kubernetes reads and writes are made as.",
        "type": "string",
    });
    push_required(spec, "service_account");
}

/// Drops a property (and its `required` entry) from an object schema.
fn forget_property(spec: &mut Value, name: &str) {
    if let Some(properties) = spec["properties"].as_object_mut() {
        properties.remove(name);
    }
    if let Some(required) = spec["required"].as_array_mut() {
        required.retain(|r| r != name);
    }
}

fn push_required(spec: &mut Value, name: &str) {
    match spec.get_mut("required").and_then(Value::as_array_mut) {
        Some(required) => required.push(name.into()),
        None => spec["required"] = json!([name]),
    }
}

/// A schemars schema made structural: unions of string enums merged into one enum, other
/// unions and free-form values left unchecked (`x-kubernetes-preserve-unknown-fields`), and
/// what the API server's schema language lacks dropped.
fn structural(schema: Value) -> Value {
    let Value::Object(mut node) = schema else {
        // `true`: anything.
        return json!({"x-kubernetes-preserve-unknown-fields": true});
    };
    for key in ["$schema", "default", "examples", "example", "definitions"] {
        node.remove(key);
    }
    if let Some(format) = node.get("format").and_then(Value::as_str)
        && !matches!(format, "int32" | "int64" | "float" | "double")
    {
        node.remove("format");
    }
    if let Some(union) = node.remove("oneOf").or_else(|| node.remove("anyOf")) {
        return structural_union(node, union);
    }
    if node.get("type").is_some_and(Value::is_array) {
        return unchecked(node);
    }
    if node.contains_key("properties") {
        node.remove("additionalProperties");
    }
    if let Some(Value::Object(properties)) = node.remove("properties") {
        let properties: Map<String, Value> = properties
            .into_iter()
            .map(|(name, schema)| (name, structural(schema)))
            .collect();
        node.insert("properties".into(), Value::Object(properties));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(inner) = node.remove(key) {
            node.insert(key.into(), structural(inner));
        }
    }
    if !node.contains_key("type") && !node.contains_key("x-kubernetes-preserve-unknown-fields") {
        return unchecked(node);
    }
    Value::Object(node)
}

/// `oneOf`/`anyOf`: one string enum when every branch is a string enum (a `null` branch
/// makes it nullable), else unchecked.
fn structural_union(mut node: Map<String, Value>, union: Value) -> Value {
    let mut values = Vec::new();
    let mut nullable = false;
    if string_enum(&union, &mut values, &mut nullable) && !values.is_empty() {
        node.insert("type".into(), "string".into());
        node.insert("enum".into(), Value::Array(values));
        if nullable {
            node.insert("nullable".into(), true.into());
        }
        return Value::Object(node);
    }
    if nullable {
        node.insert("nullable".into(), true.into());
    }
    unchecked(node)
}

/// Gathers the strings of a union's branches into `values`; false when a branch is not a
/// string enum (nested unions are looked into; a `null` branch sets `nullable`).
fn string_enum(union: &Value, values: &mut Vec<Value>, nullable: &mut bool) -> bool {
    let Some(branches) = union.as_array() else {
        return false;
    };
    branches.iter().all(|branch| {
        if let Some(inner) = branch.get("oneOf").or_else(|| branch.get("anyOf")) {
            return string_enum(inner, values, nullable);
        }
        let list = branch.get("enum").and_then(Value::as_array);
        match list {
            Some(list) if list.iter().all(Value::is_null) => {
                *nullable = true;
                true
            }
            Some(list) if branch.get("type").is_none_or(|t| t == "string") => {
                values.extend(list.iter().filter(|v| v.is_string()).cloned());
                true
            }
            _ => false,
        }
    })
}

/// A node the API server does not check (the daemon does, with located errors): its
/// description and nullability kept.
fn unchecked(node: Map<String, Value>) -> Value {
    let mut out = Map::new();
    for key in ["description", "nullable"] {
        if let Some(value) = node.get(key) {
            out.insert(key.into(), value.clone());
        }
    }
    out.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
    Value::Object(out)
}

#[cfg(test)]
mod tests;
