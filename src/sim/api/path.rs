//! Resource URLs taken apart: `/api/VERSION/...` (the core group) and
//! `/apis/GROUP/VERSION/...` into what they name, a group, a group version, or a
//! [`ResourcePath`] (namespace, resource, name, subresource).
//!
//! Parsing is by hand rather than by one axum route per URL shape, because the shapes
//! overlap: `namespaces/NAME/status` is the status of a namespace, while
//! `namespaces/NS/PLURAL` is a collection in a namespace; both are three segments. Whether a
//! parsed path fits its resource (a namespace only for namespaced resources, `status` the
//! only subresource) is checked once the resource is known, by [`ResourcePath::fits`].

use crate::sim::resources::ResourceDef;

/// What a URL under `/api/` or `/apis/` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ApiPath<'a> {
    /// `/apis/GROUP`: a group and its versions.
    Group(&'a str),
    /// `/api/VERSION` or `/apis/GROUP/VERSION`: the resources of a group version (the group
    /// is empty for the core group).
    GroupVersion {
        /// The API group, empty for the core group.
        group: &'a str,
        /// The version.
        version: &'a str,
    },
    /// A collection, an object, or an object's subresource.
    Resource(ResourcePath<'a>),
}

/// A resource URL: `[namespaces/NS/]PLURAL[/NAME[/SUBRESOURCE]]` under a group version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ResourcePath<'a> {
    /// The API group, empty for the core group.
    pub(super) group: &'a str,
    /// The version.
    pub(super) version: &'a str,
    /// The namespace, when the URL is under `namespaces/NS/`.
    pub(super) namespace: Option<&'a str>,
    /// The resource's plural name.
    pub(super) plural: &'a str,
    /// The object's name; `None` for the collection.
    pub(super) name: Option<&'a str>,
    /// The subresource (`status`), if any.
    pub(super) subresource: Option<&'a str>,
}

impl<'a> ApiPath<'a> {
    /// What `path` names, or `None` when it is not a URL the API serves.
    pub(super) fn parse(path: &'a str) -> Option<Self> {
        let core = !path.starts_with("/apis/");
        let segments = segments(path, if core { "/api/" } else { "/apis/" });
        let (group, rest) = match (core, segments.as_slice()) {
            (true, rest) => ("", rest),
            (false, []) => return None,
            (false, [group]) => return Some(Self::Group(group)),
            (false, [group, rest @ ..]) => (*group, rest),
        };
        match rest {
            [] => None,
            [version] => Some(Self::GroupVersion { group, version }),
            [version, rest @ ..] => ResourcePath::parse(group, version, rest).map(Self::Resource),
        }
    }
}

impl<'a> ResourcePath<'a> {
    /// The segments after the version, taken apart.
    fn parse(group: &'a str, version: &'a str, rest: &[&'a str]) -> Option<Self> {
        let (namespace, rest) = match rest {
            // `namespaces/NAME/status` is the status of a namespace, not a resource in it.
            ["namespaces", _, "status"] => (None, rest),
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(*ns), rest),
            _ => (None, rest),
        };
        let (plural, name, subresource) = match *rest {
            [plural] => (plural, None, None),
            [plural, name] => (plural, Some(name), None),
            [plural, name, sub] => (plural, Some(name), Some(sub)),
            _ => return None,
        };
        Some(Self {
            group,
            version,
            namespace,
            plural,
            name,
            subresource,
        })
    }

    /// Whether the URL's shape fits the resource: a namespace only for a namespaced resource
    /// and always for a named object of one, and no subresource but `status`.
    pub(super) fn fits(&self, def: &ResourceDef) -> bool {
        let misplaced = (self.namespace.is_some() && !def.namespaced)
            || (self.name.is_some() && self.namespace.is_none() && def.namespaced)
            || self.subresource.is_some_and(|s| s != "status");
        !misplaced
    }

    /// Whether the URL is of the `status` subresource (the only one [`Self::fits`] lets by).
    pub(super) fn is_status(&self) -> bool {
        self.subresource.is_some()
    }
}

/// The non-empty segments of `path` after `prefix`.
fn segments<'a>(path: &'a str, prefix: &str) -> Vec<&'a str> {
    path.trim_start_matches(prefix)
        .split('/')
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(path: &str) -> ResourcePath<'_> {
        match ApiPath::parse(path) {
            Some(ApiPath::Resource(r)) => r,
            other => panic!("{path} is not a resource path: {other:?}"),
        }
    }

    #[test]
    fn discovery_urls_name_a_group_or_a_group_version() {
        assert_eq!(ApiPath::parse("/apis/apps"), Some(ApiPath::Group("apps")));
        assert_eq!(
            ApiPath::parse("/apis/apps/v1"),
            Some(ApiPath::GroupVersion {
                group: "apps",
                version: "v1"
            })
        );
        assert_eq!(
            ApiPath::parse("/api/v1/"),
            Some(ApiPath::GroupVersion {
                group: "",
                version: "v1"
            })
        );
        assert_eq!(ApiPath::parse("/api/"), None);
        assert_eq!(ApiPath::parse("/apis/"), None);
    }

    #[test]
    fn a_namespaced_object_url_is_taken_apart() {
        let path = resource("/apis/apps/v1/namespaces/default/deployments/web/status");
        assert_eq!(
            path,
            ResourcePath {
                group: "apps",
                version: "v1",
                namespace: Some("default"),
                plural: "deployments",
                name: Some("web"),
                subresource: Some("status"),
            }
        );
    }

    #[test]
    fn a_namespace_status_is_not_a_resource_in_that_namespace() {
        let path = resource("/api/v1/namespaces/team/status");
        assert_eq!(path.namespace, None);
        assert_eq!(
            (path.plural, path.name, path.subresource),
            ("namespaces", Some("team"), Some("status"))
        );
        let collection = resource("/api/v1/namespaces/team/configmaps");
        assert_eq!(
            (collection.namespace, collection.plural, collection.name),
            (Some("team"), "configmaps", None)
        );
    }

    #[test]
    fn too_many_segments_name_nothing() {
        assert_eq!(ApiPath::parse("/api/v1/a/b/c/d/e"), None);
    }
}
