//! The fields a field selector may name, per kind, as kube-apiserver defines them: every kind
//! has `metadata.name` and `metadata.namespace`, some kinds more (`spec.nodeName` and
//! `status.phase` for pods, `type` for secrets, ...). A field the kind does not define is an
//! error, and a defined field that the object leaves unset reads as its zero value (`""`,
//! `false`, `0`), so `spec.nodeName=` selects unscheduled pods.

use serde_json::Value;

use super::resources::ResourceDef;

/// How a field's value is read from an object.
enum Field {
    /// A string at this dotted path; unset reads as "".
    Text(&'static str),
    /// A boolean at this dotted path; unset reads as "false".
    Flag(&'static str),
    /// An integer at this dotted path; unset reads as "0".
    Number(&'static str),
}

/// The fields of a built-in kind beyond `metadata.name` and `metadata.namespace`.
fn kind_fields(kind: &str) -> &'static [(&'static str, Field)] {
    use Field::*;
    match kind {
        "Pod" => &[
            ("spec.nodeName", Text("spec.nodeName")),
            ("spec.restartPolicy", Text("spec.restartPolicy")),
            ("spec.schedulerName", Text("spec.schedulerName")),
            ("spec.serviceAccountName", Text("spec.serviceAccountName")),
            ("spec.hostNetwork", Flag("spec.hostNetwork")),
            ("status.phase", Text("status.phase")),
            ("status.podIP", Text("status.podIP")),
            ("status.nominatedNodeName", Text("status.nominatedNodeName")),
        ],
        "Secret" => &[("type", Text("type"))],
        "Namespace" => &[("status.phase", Text("status.phase"))],
        "Node" => &[("spec.unschedulable", Flag("spec.unschedulable"))],
        "ReplicaSet" => &[("status.replicas", Number("status.replicas"))],
        "Job" => &[("status.successful", Number("status.successful"))],
        "Service" => &[
            ("spec.clusterIP", Text("spec.clusterIP")),
            ("spec.type", Text("spec.type")),
        ],
        "Event" => &[
            ("involvedObject.kind", Text("involvedObject.kind")),
            ("involvedObject.namespace", Text("involvedObject.namespace")),
            ("involvedObject.name", Text("involvedObject.name")),
            ("involvedObject.uid", Text("involvedObject.uid")),
            (
                "involvedObject.apiVersion",
                Text("involvedObject.apiVersion"),
            ),
            (
                "involvedObject.resourceVersion",
                Text("involvedObject.resourceVersion"),
            ),
            ("involvedObject.fieldPath", Text("involvedObject.fieldPath")),
            ("reason", Text("reason")),
            ("reportingComponent", Text("reportingComponent")),
            ("source", Text("source.component")),
            ("type", Text("type")),
        ],
        _ => &[],
    }
}

/// Whether field selectors on `def` may name `field`.
pub fn supported(def: &ResourceDef, field: &str) -> bool {
    matches!(field, "metadata.name" | "metadata.namespace")
        || (!def.custom && kind_fields(&def.kind).iter().any(|(f, _)| *f == field))
}

/// The value of a selectable field of `object`, or `None` when the kind has no such field.
pub fn value(def: &ResourceDef, object: &Value, field: &str) -> Option<String> {
    let at = |path: &str| {
        path.split('.')
            .try_fold(object, |v, part| v.get(part))
            .filter(|v| !v.is_null())
    };
    match field {
        "metadata.name" | "metadata.namespace" => {
            return Some(at(field).and_then(Value::as_str).unwrap_or("").to_string());
        }
        _ if def.custom => return None,
        _ => {}
    }
    let (_, how) = kind_fields(&def.kind).iter().find(|(f, _)| *f == field)?;
    Some(match how {
        Field::Text(path) => at(path).and_then(Value::as_str).unwrap_or("").to_string(),
        Field::Flag(path) => at(path)
            .and_then(Value::as_bool)
            .unwrap_or(false)
            .to_string(),
        Field::Number(path) => at(path).and_then(Value::as_i64).unwrap_or(0).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::{RESOURCES, find};
    use serde_json::json;

    fn pods() -> &'static ResourceDef {
        &RESOURCES[find("", "v1", "pods").unwrap()]
    }

    #[test]
    fn unset_pod_fields_read_as_zero_values() {
        let pod = json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {}});
        assert_eq!(value(pods(), &pod, "spec.nodeName").as_deref(), Some(""));
        assert_eq!(
            value(pods(), &pod, "spec.hostNetwork").as_deref(),
            Some("false")
        );
        assert_eq!(
            value(pods(), &pod, "metadata.namespace").as_deref(),
            Some("default")
        );
    }

    #[test]
    fn fields_a_kind_does_not_define_are_unsupported() {
        let configmaps = &RESOURCES[find("", "v1", "configmaps").unwrap()];
        assert!(!supported(configmaps, "spec.nodeName"));
        assert!(supported(configmaps, "metadata.name"));
        assert!(supported(pods(), "status.phase"));
        let pod = json!({"status": {"phase": "Running"}});
        assert_eq!(value(configmaps, &pod, "status.phase"), None);
        assert_eq!(
            value(pods(), &pod, "status.phase").as_deref(),
            Some("Running")
        );
    }
}
