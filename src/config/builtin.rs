//! The resources a Kubernetes API server (1.34) serves without any CRD, so validation can
//! tell offline that `v1/pod` names nothing (`v1/pods` does), and which kind a built-in
//! plural has (a capability or a route's `kinds:` names the kind exactly as the API server
//! does, so `configmap` is not `ConfigMap`).

/// (group, version, plural, kind) of every built-in resource a route might watch.
const BUILT_IN: &[(&str, &str, &str, &str)] = &[
    ("", "v1", "bindings", "Binding"),
    ("", "v1", "componentstatuses", "ComponentStatus"),
    ("", "v1", "configmaps", "ConfigMap"),
    ("", "v1", "endpoints", "Endpoints"),
    ("", "v1", "events", "Event"),
    ("", "v1", "limitranges", "LimitRange"),
    ("", "v1", "namespaces", "Namespace"),
    ("", "v1", "nodes", "Node"),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    ("", "v1", "persistentvolumes", "PersistentVolume"),
    ("", "v1", "pods", "Pod"),
    ("", "v1", "podtemplates", "PodTemplate"),
    ("", "v1", "replicationcontrollers", "ReplicationController"),
    ("", "v1", "resourcequotas", "ResourceQuota"),
    ("", "v1", "secrets", "Secret"),
    ("", "v1", "serviceaccounts", "ServiceAccount"),
    ("", "v1", "services", "Service"),
    (
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
    ),
    ("apiregistration.k8s.io", "v1", "apiservices", "APIService"),
    ("apps", "v1", "controllerrevisions", "ControllerRevision"),
    ("apps", "v1", "daemonsets", "DaemonSet"),
    ("apps", "v1", "deployments", "Deployment"),
    ("apps", "v1", "replicasets", "ReplicaSet"),
    ("apps", "v1", "statefulsets", "StatefulSet"),
    (
        "autoscaling",
        "v1",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
    ),
    (
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
    ),
    ("batch", "v1", "cronjobs", "CronJob"),
    ("batch", "v1", "jobs", "Job"),
    (
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        "CertificateSigningRequest",
    ),
    ("coordination.k8s.io", "v1", "leases", "Lease"),
    ("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
    ("events.k8s.io", "v1", "events", "Event"),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "flowschemas",
        "FlowSchema",
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "prioritylevelconfigurations",
        "PriorityLevelConfiguration",
    ),
    ("networking.k8s.io", "v1", "ingressclasses", "IngressClass"),
    ("networking.k8s.io", "v1", "ingresses", "Ingress"),
    ("networking.k8s.io", "v1", "ipaddresses", "IPAddress"),
    (
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
    ),
    ("networking.k8s.io", "v1", "servicecidrs", "ServiceCIDR"),
    ("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass"),
    (
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
    ),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    ("resource.k8s.io", "v1", "deviceclasses", "DeviceClass"),
    ("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim"),
    (
        "resource.k8s.io",
        "v1",
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
    ),
    ("resource.k8s.io", "v1", "resourceslices", "ResourceSlice"),
    (
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "PriorityClass",
    ),
    ("storage.k8s.io", "v1", "csidrivers", "CSIDriver"),
    ("storage.k8s.io", "v1", "csinodes", "CSINode"),
    (
        "storage.k8s.io",
        "v1",
        "csistoragecapacities",
        "CSIStorageCapacity",
    ),
    ("storage.k8s.io", "v1", "storageclasses", "StorageClass"),
    (
        "storage.k8s.io",
        "v1",
        "volumeattachments",
        "VolumeAttachment",
    ),
    (
        "storage.k8s.io",
        "v1",
        "volumeattributesclasses",
        "VolumeAttributesClass",
    ),
];

/// Whether `group` is one Kubernetes itself serves (so a CRD cannot add to it).
pub fn is_built_in_group(group: &str) -> bool {
    BUILT_IN.iter().any(|(g, ..)| *g == group)
}

/// Whether Kubernetes serves `group`/`version` (so every resource of it is in the table).
pub fn is_built_in_version(group: &str, version: &str) -> bool {
    BUILT_IN
        .iter()
        .any(|(g, v, ..)| *g == group && *v == version)
}

/// The kind of the built-in resource `group`/`version`/`plural`, if it is one.
pub fn kind_of(group: &str, version: &str, plural: &str) -> Option<&'static str> {
    BUILT_IN
        .iter()
        .find(|(g, v, p, _)| *g == group && *v == version && *p == plural)
        .map(|(.., k)| *k)
}

/// The plural of the built-in kind `group`/`version`/`kind`, if it is one.
pub fn plural_of(group: &str, version: &str, kind: &str) -> Option<&'static str> {
    BUILT_IN
        .iter()
        .find(|(g, v, _, k)| *g == group && *v == version && *k == kind)
        .map(|(_, _, p, _)| *p)
}

/// Why `group`/`version` has no resource `plural` (or kind `kind`), with the nearest it has;
/// `None` when it is built in.
pub fn unknown(
    group: &str,
    version: &str,
    plural: Option<&str>,
    kind: Option<&str>,
) -> Option<String> {
    let in_version: Vec<_> = BUILT_IN
        .iter()
        .filter(|(g, v, ..)| *g == group && *v == version)
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    if in_version.is_empty() {
        let mut versions: Vec<&str> = BUILT_IN
            .iter()
            .filter(|(g, ..)| *g == group)
            .map(|(_, v, ..)| *v)
            .collect();
        versions.dedup();
        return Some(format!(
            "Kubernetes serves no {gv}; {} has: {}",
            if group.is_empty() {
                "the core group"
            } else {
                group
            },
            versions.join(", ")
        ));
    }
    let (name, names): (&str, Vec<&str>) = match (plural, kind) {
        (Some(p), _) => (p, in_version.iter().map(|(_, _, p, _)| *p).collect()),
        (None, Some(k)) => (k, in_version.iter().map(|(.., k)| *k).collect()),
        (None, None) => return None,
    };
    if names.contains(&name) {
        return None;
    }
    let what = if plural.is_some() { "resource" } else { "kind" };
    Some(match super::nearest(name, &names) {
        Some(near) => format!("{gv} has no {what} {name:?}; did you mean {near:?}?"),
        None => format!("{gv} has no {what} {name:?}; it has: {}", names.join(", ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_singular_or_misspelt_built_in_resource_is_told_with_the_nearest_name() {
        assert_eq!(unknown("", "v1", Some("pods"), None), None);
        assert_eq!(
            unknown("", "v1", Some("pod"), None).unwrap(),
            "v1 has no resource \"pod\"; did you mean \"pods\"?"
        );
        assert!(
            unknown("apps", "v1", Some("deploymnets"), None)
                .unwrap()
                .contains("\"deployments\"")
        );
        assert_eq!(unknown("apps", "v1", None, Some("Deployment")), None);
        assert!(
            unknown("apps", "v1", None, Some("Deploymnt"))
                .unwrap()
                .contains("did you mean \"Deployment\"")
        );
        assert!(
            unknown("apps", "v1beta1", Some("deployments"), None)
                .unwrap()
                .contains("Kubernetes serves no apps/v1beta1; apps has: v1")
        );
        assert!(is_built_in_group("apps") && is_built_in_group(""));
        assert!(!is_built_in_group("example.com"));
        assert!(is_built_in_version("apps", "v1") && !is_built_in_version("apps", "v1beta1"));
        assert_eq!(kind_of("", "v1", "configmaps"), Some("ConfigMap"));
        assert_eq!(kind_of("", "v1", "configmap"), None);
        assert_eq!(
            plural_of("networking.k8s.io", "v1", "Ingress"),
            Some("ingresses")
        );
    }
}
