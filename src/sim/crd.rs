//! CustomResourceDefinitions: turning a CRD object into the resource it defines, and the
//! CRD object for a custom resource declared in the simulator config.
//!
//! Creating a CRD (from the config or through the API, as `kubectl apply -f crd.yaml` does)
//! serves its resource at once, with discovery; deleting it deletes every custom object and
//! stops serving the resource. One version per CRD is served: the storage version (or the
//! first served one). Changing the names of an existing CRD does not rename the resource.

use serde_json::{Value, json};

use super::cluster::now_rfc3339;
use super::config::CrdConfig;
use super::resources::{PrinterColumn, ResourceDef};

/// Why a CustomResourceDefinition is invalid, in the API server's `field: problem` form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrdError {
    /// A required field is missing or empty.
    #[error("{0}: Required value")]
    Required(&'static str),
    /// `spec.group` is not a domain.
    #[error("spec.group: Invalid value: {0:?}: should be a domain with at least one dot")]
    GroupNotDomain(String),
    /// A name is not a lowercase RFC 1123 label.
    #[error(
        "{field}: Invalid value: {value:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
    )]
    NotDnsLabel {
        /// The field holding the name.
        field: &'static str,
        /// The name.
        value: String,
    },
    /// `metadata.name` is not `plural.group`.
    #[error("metadata.name: Invalid value: {0:?}: must be spec.names.plural+\".\"+spec.group")]
    NameMismatch(String),
    /// `spec.scope` is neither `Cluster` nor `Namespaced`.
    #[error("spec.scope: Unsupported value: must be \"Cluster\" or \"Namespaced\"")]
    UnsupportedScope,
    /// No version is served.
    #[error(
        "spec.versions: Invalid value: must have exactly one version marked as storage version"
    )]
    NoStorageVersion,
}

/// The resource a CustomResourceDefinition object defines, or why it is invalid.
pub fn definition(crd: &Value) -> Result<ResourceDef, CrdError> {
    let spec = &crd["spec"];
    let group = required(&spec["group"], "spec.group")?;
    if !group.contains('.') {
        return Err(CrdError::GroupNotDomain(group));
    }
    let names = &spec["names"];
    let plural = required(&names["plural"], "spec.names.plural")?;
    let kind = required(&names["kind"], "spec.names.kind")?;
    let singular = names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map_or_else(|| kind.to_lowercase(), str::to_string);
    for (field, value) in [
        ("spec.names.plural", &plural),
        ("spec.names.singular", &singular),
    ] {
        if !is_dns_label(value) {
            let value = value.clone();
            return Err(CrdError::NotDnsLabel { field, value });
        }
    }
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(CrdError::NameMismatch(name.to_string()));
    }
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => return Err(CrdError::UnsupportedScope),
    };
    let version = served_version(spec)?;
    Ok(ResourceDef {
        group,
        version: required(&version["name"], "spec.versions[].name")?,
        plural,
        singular,
        kind,
        short_names: strings(&names["shortNames"]),
        categories: strings(&names["categories"]),
        namespaced,
        columns: printer_columns(version),
        custom: true,
        returns_deleted_object: false,
    })
}

/// A required string field: present and not empty.
fn required(value: &Value, field: &'static str) -> Result<String, CrdError> {
    match value.as_str() {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => Err(CrdError::Required(field)),
    }
}

/// The version served: the storage version, or the first served one.
fn served_version(spec: &Value) -> Result<&Value, CrdError> {
    let versions = spec["versions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    versions
        .iter()
        .find(|v| v["storage"] == true && v["served"] != false)
        .or_else(|| versions.iter().find(|v| v["served"] != false))
        .ok_or(CrdError::NoStorageVersion)
}

/// The strings of a JSON array (other items skipped); empty when it is not an array.
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// A version's `additionalPrinterColumns`; a column without a name or a JSON path is skipped.
fn printer_columns(version: &Value) -> Vec<PrinterColumn> {
    let Some(columns) = version["additionalPrinterColumns"].as_array() else {
        return Vec::new();
    };
    columns
        .iter()
        .filter_map(|c| {
            Some(PrinterColumn {
                name: c["name"].as_str()?.to_string(),
                type_: c["type"].as_str().unwrap_or("string").to_string(),
                json_path: c["jsonPath"].as_str()?.to_string(),
                priority: c["priority"].as_u64().unwrap_or(0) as u32,
            })
        })
        .collect()
}

/// The status the API server gives an accepted CRD: its names accepted, established.
pub fn accepted_status(crd: &Value, def: &ResourceDef) -> Value {
    let now = now_rfc3339();
    let mut names = crd["spec"]["names"].clone();
    names["singular"] = def.singular.clone().into();
    names["listKind"] = format!("{}List", def.kind).into();
    json!({
        "acceptedNames": names,
        "storedVersions": [def.version],
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    })
}

/// The CustomResourceDefinition object for a custom resource declared in the config.
pub fn object_for(config: &CrdConfig) -> Value {
    let kind = &config.kind;
    let singular = config
        .singular
        .clone()
        .unwrap_or_else(|| kind.to_lowercase());
    let plural = config
        .plural
        .clone()
        .unwrap_or_else(|| format!("{singular}s"));
    let columns: Vec<Value> = config
        .columns
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.type_.clone().unwrap_or_else(|| "string".into()),
                "jsonPath": c.json_path,
                "priority": c.priority,
            })
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{}", config.group)},
        "spec": {
            "group": config.group,
            "names": {
                "plural": plural,
                "singular": singular,
                "kind": kind,
                "listKind": format!("{kind}List"),
                "shortNames": config.short_names,
                "categories": config.categories,
            },
            "scope": if config.namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{
                "name": config.version,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "additionalPrinterColumns": columns,
            }],
        },
    })
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CrdConfig {
        CrdConfig {
            group: "example.com".into(),
            version: "v1alpha1".into(),
            kind: "Widget".into(),
            plural: None,
            singular: None,
            short_names: vec!["wd".into()],
            categories: Vec::new(),
            namespaced: true,
            columns: Vec::new(),
        }
    }

    #[test]
    fn a_configured_crd_defines_its_resource_with_default_names() {
        let def = definition(&object_for(&config())).unwrap();
        assert_eq!(
            (
                def.plural.as_str(),
                def.singular.as_str(),
                def.kind.as_str()
            ),
            ("widgets", "widget", "Widget")
        );
        assert_eq!(def.api_version(), "example.com/v1alpha1");
        assert!(def.namespaced && def.custom);
        assert_eq!(def.short_names, ["wd"]);
    }

    #[test]
    fn a_crd_whose_name_does_not_match_its_names_is_invalid() {
        let mut crd = object_for(&config());
        crd["metadata"]["name"] = "gadgets.example.com".into();
        let err = definition(&crd).unwrap_err().to_string();
        assert!(err.starts_with("metadata.name: Invalid value"), "{err}");
        let mut crd = object_for(&config());
        crd["spec"]["group"] = "example".into();
        assert!(
            definition(&crd)
                .unwrap_err()
                .to_string()
                .starts_with("spec.group")
        );
    }
}
