//! The rules for the objects the API server writes: valid names, the metadata the server
//! owns (uid, creationTimestamp, resourceVersion, generation), defaults filled in on create,
//! and the type meta every stored object carries.

use serde_json::{Value, json};

use super::cluster::ObjectRef;
use super::error::ApiError;
use super::resources::ResourceDef;

/// The object's finalizers.
pub(super) fn finalizers(object: &Value) -> Vec<&str> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The object's metadata map, created if missing.
pub(super) fn metadata_mut(
    object: &mut Value,
) -> Result<&mut serde_json::Map<String, Value>, ApiError> {
    let map = object
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the object must be a JSON object".to_string()))?;
    map.entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be a JSON object".to_string()))
}

/// Refuses a namespace in the object that differs from the request's.
pub(super) fn check_namespace_field(
    def: &ResourceDef,
    meta: &serde_json::Map<String, Value>,
    namespace: &str,
) -> Result<(), ApiError> {
    match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if def.namespaced && !ns.is_empty() && ns != namespace => {
            Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({ns}) does not match the namespace sent on the request ({namespace})"
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses a name that is not a lowercase RFC 1123 subdomain.
pub(super) fn validate_name(def: &ResourceDef, name: &str) -> Result<(), ApiError> {
    let ok = name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            def,
            name,
            &format!(
                "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ))
    }
}

/// Whether anything but metadata and status changed (what bumps `metadata.generation`).
pub(super) fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            for field in ["metadata", "status", "kind", "apiVersion"] {
                map.remove(field);
            }
        }
        v
    };
    strip(old) != strip(new)
}

/// Defaults the API server fills in on create.
pub(super) fn apply_defaults(def: &ResourceDef, object: &mut Value) {
    if def.custom || !def.group.is_empty() {
        return;
    }
    match def.kind.as_str() {
        "Secret" if object["type"].as_str().is_none_or(str::is_empty) => {
            object["type"] = "Opaque".into();
        }
        "Pod" => {
            let spec = &mut object["spec"];
            if !spec.is_object() {
                *spec = json!({});
            }
            for (field, value) in [
                ("restartPolicy", "Always"),
                ("schedulerName", "default-scheduler"),
                ("serviceAccountName", "default"),
                ("dnsPolicy", "ClusterFirst"),
            ] {
                if spec[field].is_null() {
                    spec[field] = value.into();
                }
            }
            if object["status"]["phase"].is_null() {
                object["status"]["phase"] = "Pending".into();
            }
        }
        _ => {}
    }
}

/// A core Secret's `stringData`, which is write-only, merged into `data` (base64), as
/// kube-apiserver does on every write; its keys win over `data`'s.
pub(super) fn fold_string_data(def: &ResourceDef, object: &mut Value) {
    use base64::Engine as _;
    if def.custom || !def.group.is_empty() || def.kind != "Secret" {
        return;
    }
    let Some(Value::Object(strings)) = object.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    if !object["data"].is_object() {
        object["data"] = json!({});
    }
    for (key, value) in strings {
        let text = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string);
        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
        object["data"][key] = encoded.into();
    }
}

/// Sets `apiVersion` and `kind`.
pub(super) fn set_type_meta(def: &ResourceDef, object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), def.api_version().into());
        map.insert("kind".into(), def.kind.clone().into());
    }
}

/// The resourceVersion of a stored object.
pub fn object_rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Where a stored object of `resource` lives.
pub fn ref_of(resource: usize, object: &Value) -> ObjectRef {
    let meta = &object["metadata"];
    ObjectRef {
        resource,
        namespace: meta["namespace"].as_str().unwrap_or_default().to_string(),
        name: meta["name"].as_str().unwrap_or_default().to_string(),
    }
}

/// The random suffix `generateName` gets.
pub(super) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The current time as the API server writes timestamps (`2024-01-02T03:04:05Z`).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
