//! The CloudEvent for one change, in the format Knative's ApiServerSource gives its own:
//! `type` `dev.knative.apiserver.resource.add|update|delete` (`...ref...` in reference
//! mode), `subject` the object's path as ApiServerSource writes it
//! (`/apis/v1/namespaces/default/configmaps/a`), the extensions `kind`, `name` and
//! `namespace`, and the object (or a reference to it) as JSON `data`. Unlike
//! ApiServerSource, whose ids are random, the `id` is the object's uid, its
//! resourceVersion and the change, so a retried delivery carries the id of the first and a
//! receiver can drop the duplicate.

use serde_json::{Map, Value, json};
use switchyard_sdk::EventKind;

/// What `data` holds: the object, or a reference to it (ApiServerSource's `Resource` and
/// `Reference` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Data {
    /// The object as the event carries it.
    Resource,
    /// `apiVersion`, `kind`, `name` and `namespace`.
    Reference,
}

/// A CloudEvent's context attributes (in order) and its JSON data.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudEvent {
    /// Attribute names and values: `specversion`, `id`, `source`, `type`, `subject`,
    /// then the extensions.
    pub attributes: Vec<(&'static str, String)>,
    /// The `data`, sent with `datacontenttype: application/json`.
    pub data: Value,
}

/// The CloudEvent for a change of `kind` to `object`, from `source`. A resync (`sync`) is an
/// update, as an informer's resync is for ApiServerSource.
pub fn build(kind: EventKind, object: &Value, source: &str, data: Data) -> CloudEvent {
    let change = match kind {
        EventKind::Added => "add",
        EventKind::Updated | EventKind::Sync => "update",
        EventKind::Deleted => "delete",
    };
    let meta = &object["metadata"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let (api_version, object_kind) = (text(&object["apiVersion"]), text(&object["kind"]));
    let (name, namespace) = (text(&meta["name"]), text(&meta["namespace"]));
    let id = switchyard_sdk::sink::change_key(kind, object);
    let (event_type, data) = match data {
        Data::Resource => (
            format!("dev.knative.apiserver.resource.{change}"),
            object.clone(),
        ),
        Data::Reference => {
            let mut reference = Map::new();
            reference.insert("kind".into(), json!(object_kind));
            if !namespace.is_empty() {
                reference.insert("namespace".into(), json!(namespace));
            }
            reference.insert("name".into(), json!(name));
            reference.insert("apiVersion".into(), json!(api_version));
            (
                format!("dev.knative.apiserver.ref.{change}"),
                Value::Object(reference),
            )
        }
    };
    let mut attributes = vec![
        ("specversion", "1.0".to_string()),
        ("id", id),
        ("source", source.to_string()),
        ("type", event_type),
        (
            "subject",
            subject(&api_version, &object_kind, &namespace, &name),
        ),
        ("kind", object_kind),
        ("name", name),
    ];
    // A cluster-scoped object has no namespace; an empty attribute is left out.
    if !namespace.is_empty() {
        attributes.push(("namespace", namespace));
    }
    CloudEvent { attributes, data }
}

/// The object's path as ApiServerSource writes it:
/// `/apis/API_VERSION/namespaces/NAMESPACE/RESOURCE/NAME`, the resource guessed from the
/// kind as Kubernetes' `UnsafeGuessKindToResource` does (lowercase; `endpoints` stays,
/// `s` → `ses`, `y` → `ies`, else `s`), the namespace empty for a cluster-scoped object.
fn subject(api_version: &str, kind: &str, namespace: &str, name: &str) -> String {
    let mut version = api_version.to_string();
    if version.contains('.') && !version.contains('/') {
        version.push_str("/versionUnknown");
    }
    let kind = kind.to_lowercase();
    let resource = if kind.ends_with("endpoints") {
        kind
    } else if kind.ends_with('s') {
        format!("{kind}es")
    } else if let Some(stem) = kind.strip_suffix('y') {
        format!("{stem}ies")
    } else {
        format!("{kind}s")
    };
    format!("/apis/{version}/namespaces/{namespace}/{resource}/{name}")
}

/// A header value as the CloudEvents HTTP binding writes attributes: space, `"`, `%` and
/// every byte outside printable ASCII percent-encoded.
pub fn header_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if (0x21..=0x7e).contains(&byte) && byte != b'"' && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(namespace: Option<&str>) -> Value {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "uid": "u-1", "resourceVersion": "42"}});
        if let Some(ns) = namespace {
            pod["metadata"]["namespace"] = json!(ns);
        }
        pod
    }

    #[test]
    fn a_change_carries_apiserversource_s_type_subject_and_extensions() {
        let event = build(
            EventKind::Updated,
            &pod(Some("shop")),
            "https://k8s",
            Data::Resource,
        );
        let attributes: Vec<(&str, &str)> = event
            .attributes
            .iter()
            .map(|(n, v)| (*n, v.as_str()))
            .collect();
        assert_eq!(
            attributes,
            [
                ("specversion", "1.0"),
                ("id", "u-1.42.update"),
                ("source", "https://k8s"),
                ("type", "dev.knative.apiserver.resource.update"),
                ("subject", "/apis/v1/namespaces/shop/pods/web-1"),
                ("kind", "Pod"),
                ("name", "web-1"),
                ("namespace", "shop"),
            ]
        );
        assert_eq!(event.data, pod(Some("shop")));
    }

    #[test]
    fn the_id_is_the_same_for_one_change_and_differs_between_changes() {
        let id = |kind, object: &Value| {
            build(kind, object, "s", Data::Resource).attributes[1]
                .1
                .clone()
        };
        let p = pod(Some("shop"));
        assert_eq!(id(EventKind::Added, &p), id(EventKind::Added, &p));
        assert_ne!(id(EventKind::Added, &p), id(EventKind::Deleted, &p));
        let mut later = p.clone();
        later["metadata"]["resourceVersion"] = json!("43");
        assert_ne!(id(EventKind::Updated, &p), id(EventKind::Updated, &later));
        // A resync is an update of the state the object is in.
        assert_eq!(id(EventKind::Sync, &p), id(EventKind::Updated, &p));
        assert_eq!(
            build(EventKind::Sync, &p, "s", Data::Resource).attributes[3].1,
            "dev.knative.apiserver.resource.update"
        );
    }

    #[test]
    fn reference_mode_sends_a_reference_and_cluster_scoped_objects_no_namespace() {
        let event = build(EventKind::Deleted, &pod(None), "s", Data::Reference);
        assert_eq!(event.attributes[3].1, "dev.knative.apiserver.ref.delete");
        assert_eq!(event.attributes[4].1, "/apis/v1/namespaces//pods/web-1");
        assert!(event.attributes.iter().all(|(n, _)| *n != "namespace"));
        assert_eq!(
            event.data,
            json!({"kind": "Pod", "name": "web-1", "apiVersion": "v1"})
        );
    }

    #[test]
    fn resources_are_guessed_from_kinds_as_kubernetes_does() {
        assert_eq!(
            subject("networking.k8s.io/v1", "NetworkPolicy", "a", "b"),
            "/apis/networking.k8s.io/v1/namespaces/a/networkpolicies/b"
        );
        assert_eq!(
            subject("v1", "Endpoints", "a", "b"),
            "/apis/v1/namespaces/a/endpoints/b"
        );
        assert_eq!(
            subject("networking.k8s.io/v1", "Ingress", "a", "b"),
            "/apis/networking.k8s.io/v1/namespaces/a/ingresses/b"
        );
        assert_eq!(
            subject("apps/v1", "Deployment", "a", "b"),
            "/apis/apps/v1/namespaces/a/deployments/b"
        );
        assert_eq!(
            subject("example.com", "Widget", "a", "b"),
            "/apis/example.com/versionUnknown/namespaces/a/widgets/b"
        );
    }

    #[test]
    fn header_values_are_percent_encoded_as_the_http_binding_says() {
        assert_eq!(header_value("https://k8s:443/a"), "https://k8s:443/a");
        assert_eq!(header_value("a b\"c%d€"), "a%20b%22c%25d%E2%82%AC");
    }
}
