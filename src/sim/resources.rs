//! The catalogue of resource kinds the simulator serves, with what discovery reports for each.

/// One kind of resource the simulator serves.
#[derive(Debug)]
pub struct ResourceDef {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// API version within the group.
    pub version: &'static str,
    /// Plural name used in URLs (`configmaps`).
    pub plural: &'static str,
    /// Singular name (`configmap`).
    pub singular: &'static str,
    /// Kind (`ConfigMap`).
    pub kind: &'static str,
    /// Short names kubectl accepts (`cm`).
    pub short_names: &'static [&'static str],
    /// Whether objects live in a namespace.
    pub namespaced: bool,
}

impl ResourceDef {
    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

macro_rules! def {
    ($group:literal, $version:literal, $plural:literal, $singular:literal, $kind:literal, [$($short:literal),*], $namespaced:literal) => {
        ResourceDef {
            group: $group,
            version: $version,
            plural: $plural,
            singular: $singular,
            kind: $kind,
            short_names: &[$($short),*],
            namespaced: $namespaced,
        }
    };
}

/// Every resource kind the simulator serves.
pub static RESOURCES: &[ResourceDef] = &[
    def!("", "v1", "pods", "pod", "Pod", ["po"], true),
    def!(
        "",
        "v1",
        "configmaps",
        "configmap",
        "ConfigMap",
        ["cm"],
        true
    ),
    def!("", "v1", "secrets", "secret", "Secret", [], true),
    def!("", "v1", "services", "service", "Service", ["svc"], true),
    def!(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        ["ns"],
        false
    ),
    def!("", "v1", "nodes", "node", "Node", ["no"], false),
    def!("", "v1", "events", "event", "Event", ["ev"], true),
    def!(
        "apps",
        "v1",
        "deployments",
        "deployment",
        "Deployment",
        ["deploy"],
        true
    ),
    def!(
        "apps",
        "v1",
        "replicasets",
        "replicaset",
        "ReplicaSet",
        ["rs"],
        true
    ),
    def!("batch", "v1", "jobs", "job", "Job", [], true),
    def!(
        "coordination.k8s.io",
        "v1",
        "leases",
        "lease",
        "Lease",
        [],
        true
    ),
];

/// The index in [`RESOURCES`] of the resource served at `group`/`version`/`plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The distinct non-core groups, in catalogue order, each with its version.
pub fn groups() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !out.iter().any(|(g, v)| *g == r.group && *v == r.version) {
            out.push((r.group, r.version));
        }
    }
    out
}
