//! The catalogue of resource kinds the simulator serves, with what discovery reports for each:
//! the built-in kinds every cluster has, and custom resources that CustomResourceDefinitions
//! add while the cluster runs (see [`super::crd`]).

use std::sync::{Arc, LazyLock};

/// An extra column `kubectl get` shows for a custom resource (a CRD's
/// `additionalPrinterColumns`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Column header (`Size`).
    pub name: String,
    /// OpenAPI type of the cell: `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// Simple JSONPath of the value (`.spec.size`); only dotted field paths are evaluated.
    pub json_path: String,
    /// 0 shows the column by default, more only with `-o wide`.
    pub priority: u32,
}

/// One kind of resource the simulator serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group.
    pub version: String,
    /// Plural name used in URLs (`configmaps`).
    pub plural: String,
    /// Singular name (`configmap`).
    pub singular: String,
    /// Kind (`ConfigMap`).
    pub kind: String,
    /// Short names kubectl accepts (`cm`).
    pub short_names: Vec<String>,
    /// Categories kubectl accepts (`all`).
    pub categories: Vec<String>,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Printer columns of a custom resource; built-in kinds have theirs in [`super::table`].
    pub columns: Vec<PrinterColumn>,
    /// Whether a CustomResourceDefinition defines this resource.
    pub custom: bool,
    /// Whether a DELETE answers with the deleted object (as kube-apiserver does for pods,
    /// services and namespaces) rather than a `Status`.
    pub returns_deleted_object: bool,
}

impl ResourceDef {
    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural` for the core group, `plural.group` otherwise, as API errors name resources.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether this is the resource at `group`/`version`/`plural`.
    pub fn is(&self, group: &str, version: &str, plural: &str) -> bool {
        self.group == group && self.version == version && self.plural == plural
    }
}

/// Builds a built-in resource definition.
fn builtin(
    (group, version): (&str, &str),
    (plural, singular, kind): (&str, &str, &str),
    short_names: &[&str],
    namespaced: bool,
) -> ResourceDef {
    let returns_deleted_object =
        group.is_empty() && matches!(kind, "Pod" | "Service" | "Namespace");
    let in_all = matches!(
        kind,
        "Pod"
            | "Service"
            | "Deployment"
            | "ReplicaSet"
            | "StatefulSet"
            | "DaemonSet"
            | "Job"
            | "CronJob"
    );
    ResourceDef {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        singular: singular.into(),
        kind: kind.into(),
        short_names: short_names.iter().map(|s| s.to_string()).collect(),
        categories: if in_all {
            vec!["all".into()]
        } else {
            Vec::new()
        },
        namespaced,
        columns: Vec::new(),
        custom: false,
        returns_deleted_object,
    }
}

/// Every built-in resource kind the simulator serves. A cluster's catalogue starts with these,
/// in this order, so an index into this list is also an index into every cluster's catalogue.
pub static RESOURCES: LazyLock<Vec<ResourceDef>> = LazyLock::new(|| {
    let core = ("", "v1");
    let rbac = ("rbac.authorization.k8s.io", "v1");
    vec![
        builtin(core, ("pods", "pod", "Pod"), &["po"], true),
        builtin(
            core,
            ("configmaps", "configmap", "ConfigMap"),
            &["cm"],
            true,
        ),
        builtin(core, ("secrets", "secret", "Secret"), &[], true),
        builtin(core, ("services", "service", "Service"), &["svc"], true),
        builtin(
            core,
            ("namespaces", "namespace", "Namespace"),
            &["ns"],
            false,
        ),
        builtin(core, ("nodes", "node", "Node"), &["no"], false),
        builtin(core, ("events", "event", "Event"), &["ev"], true),
        builtin(
            ("apps", "v1"),
            ("deployments", "deployment", "Deployment"),
            &["deploy"],
            true,
        ),
        builtin(
            ("apps", "v1"),
            ("replicasets", "replicaset", "ReplicaSet"),
            &["rs"],
            true,
        ),
        builtin(
            ("apps", "v1"),
            ("daemonsets", "daemonset", "DaemonSet"),
            &["ds"],
            true,
        ),
        builtin(("batch", "v1"), ("jobs", "job", "Job"), &[], true),
        builtin(
            ("coordination.k8s.io", "v1"),
            ("leases", "lease", "Lease"),
            &[],
            true,
        ),
        builtin(
            ("apiextensions.k8s.io", "v1"),
            (
                "customresourcedefinitions",
                "customresourcedefinition",
                "CustomResourceDefinition",
            ),
            &["crd", "crds"],
            false,
        ),
        builtin(
            core,
            ("serviceaccounts", "serviceaccount", "ServiceAccount"),
            &["sa"],
            true,
        ),
        builtin(rbac, ("roles", "role", "Role"), &[], true),
        builtin(
            rbac,
            ("rolebindings", "rolebinding", "RoleBinding"),
            &[],
            true,
        ),
        builtin(
            rbac,
            ("clusterroles", "clusterrole", "ClusterRole"),
            &[],
            false,
        ),
        builtin(
            rbac,
            (
                "clusterrolebindings",
                "clusterrolebinding",
                "ClusterRoleBinding",
            ),
            &[],
            false,
        ),
        builtin(
            ("networking.k8s.io", "v1"),
            ("networkpolicies", "networkpolicy", "NetworkPolicy"),
            &["netpol"],
            true,
        ),
        builtin(
            ("policy", "v1"),
            (
                "poddisruptionbudgets",
                "poddisruptionbudget",
                "PodDisruptionBudget",
            ),
            &["pdb"],
            true,
        ),
        builtin(
            core,
            ("resourcequotas", "resourcequota", "ResourceQuota"),
            &["quota"],
            true,
        ),
        builtin(
            core,
            (
                "persistentvolumeclaims",
                "persistentvolumeclaim",
                "PersistentVolumeClaim",
            ),
            &["pvc"],
            true,
        ),
        builtin(
            ("apps", "v1"),
            ("statefulsets", "statefulset", "StatefulSet"),
            &["sts"],
            true,
        ),
        builtin(
            ("batch", "v1"),
            ("cronjobs", "cronjob", "CronJob"),
            &["cj"],
            true,
        ),
        builtin(
            ("networking.k8s.io", "v1"),
            ("ingresses", "ingress", "Ingress"),
            &["ing"],
            true,
        ),
    ]
});

/// The index of the built-in resource served at `group`/`version`/`plural`. Custom resources
/// are found with [`super::Cluster::find_resource`].
pub fn find(group: &str, version: &str, plural: &str) -> Option<usize> {
    RESOURCES.iter().position(|r| r.is(group, version, plural))
}

/// The index of a built-in resource that must exist.
pub(crate) fn builtin_index(group: &str, version: &str, plural: &str) -> usize {
    find(group, version, plural).expect("the resource is in the built-in catalogue")
}

/// Why a resource cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServeError {
    /// Another served resource in the group already has this plural or kind.
    #[error("{plural} or {kind} is already served in group {group:?}")]
    NameTaken {
        /// The plural of the refused resource.
        plural: String,
        /// Its kind.
        kind: String,
        /// Its group.
        group: String,
    },
    /// The same resource is already served.
    #[error("{api_version}/{plural} is already served")]
    AlreadyServed {
        /// `group/version` (or `version`) of the resource.
        api_version: String,
        /// Its plural.
        plural: String,
    },
}

/// The resources a cluster serves: the built-ins, then custom resources in the order their
/// CRDs were created. Indexes never change; a resource whose CRD was deleted stays in the
/// list, marked as not served, and comes back at the same index if the CRD is recreated.
#[derive(Debug, Clone)]
pub struct Catalogue {
    entries: Vec<(Arc<ResourceDef>, bool)>,
}

impl Default for Catalogue {
    fn default() -> Self {
        Self {
            entries: RESOURCES
                .iter()
                .map(|def| (Arc::new(def.clone()), true))
                .collect(),
        }
    }
}

impl Catalogue {
    /// The resource at `index`, served or not.
    pub fn get(&self, index: usize) -> Option<&Arc<ResourceDef>> {
        self.entries.get(index).map(|(def, _)| def)
    }

    /// The index of the served resource at `group`/`version`/`plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.entries
            .iter()
            .position(|(def, served)| *served && def.is(group, version, plural))
    }

    /// Every served resource with its index.
    pub fn served(&self) -> impl Iterator<Item = (usize, &Arc<ResourceDef>)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, (_, served))| *served)
            .map(|(i, (def, _))| (i, def))
    }

    /// Serves `def`, reusing the index of an earlier definition of the same resource; returns
    /// the index. Fails naming the clash when another served resource already uses one of its
    /// names in the same group.
    pub fn serve(&mut self, def: ResourceDef) -> Result<usize, ServeError> {
        for (other, served) in &self.entries {
            let same_resource = other.is(&def.group, &def.version, &def.plural);
            if !*served || same_resource || other.group != def.group {
                continue;
            }
            if other.plural == def.plural || other.kind == def.kind {
                return Err(ServeError::NameTaken {
                    plural: def.plural,
                    kind: def.kind,
                    group: def.group,
                });
            }
        }
        match self
            .entries
            .iter()
            .position(|(other, _)| other.is(&def.group, &def.version, &def.plural))
        {
            Some(index) if self.entries[index].1 => Err(ServeError::AlreadyServed {
                api_version: def.api_version(),
                plural: def.plural,
            }),
            Some(index) => {
                self.entries[index] = (Arc::new(def), true);
                Ok(index)
            }
            None => {
                self.entries.push((Arc::new(def), true));
                Ok(self.entries.len() - 1)
            }
        }
    }

    /// Stops serving the resource at `index`.
    pub fn withdraw(&mut self, index: usize) {
        if let Some(entry) = self.entries.get_mut(index) {
            entry.1 = false;
        }
    }

    /// The served API groups other than the core group, in catalogue order, each with its
    /// served versions (the first is the preferred one).
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for (_, def) in self.served().filter(|(_, d)| !d.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == def.group) {
                Some((_, versions)) if !versions.contains(&def.version) => {
                    versions.push(def.version.clone());
                }
                Some(_) => {}
                None => out.push((def.group.clone(), vec![def.version.clone()])),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget(version: &str) -> ResourceDef {
        ResourceDef {
            group: "example.com".into(),
            version: version.into(),
            plural: "widgets".into(),
            singular: "widget".into(),
            kind: "Widget".into(),
            short_names: vec!["wd".into()],
            categories: Vec::new(),
            namespaced: true,
            columns: Vec::new(),
            custom: true,
            returns_deleted_object: false,
        }
    }

    #[test]
    fn a_withdrawn_resource_comes_back_at_the_same_index() {
        let mut catalogue = Catalogue::default();
        let index = catalogue.serve(widget("v1")).unwrap();
        assert_eq!(index, RESOURCES.len());
        assert_eq!(catalogue.find("example.com", "v1", "widgets"), Some(index));
        catalogue.withdraw(index);
        assert_eq!(catalogue.find("example.com", "v1", "widgets"), None);
        assert_eq!(catalogue.serve(widget("v1")), Ok(index));
    }

    #[test]
    fn a_kind_cannot_be_served_twice_in_one_group() {
        let mut catalogue = Catalogue::default();
        catalogue.serve(widget("v1")).unwrap();
        assert!(catalogue.serve(widget("v1")).is_err());
        assert!(catalogue.serve(widget("v2")).is_err());
    }

    #[test]
    fn groups_list_each_group_once_with_its_versions() {
        let groups = Catalogue::default().groups();
        let apps: Vec<_> = groups.iter().filter(|(g, _)| g == "apps").collect();
        assert_eq!(apps.len(), 1);
        assert_eq!(apps[0].1, ["v1"]);
    }
}
