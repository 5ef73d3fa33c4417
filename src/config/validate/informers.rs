//! `informers.NAME:`: one resource watched and cached, named by `resource` or by
//! `group`/`version`/`kind`, with its watch settings.

use super::errors::Errors;
use super::watch::{
    check_built_in, check_drop_fields, check_indexes, check_namespaces, check_selectors,
};
use crate::config::schema::{InformerFile, ShardByFile};
use crate::config::{InformerSpec, ResourceName, ResourceRef, ShardBy};

/// Builds the informer `name`, reporting each problem; `None` when its resource cannot be
/// told (the caller keeps an informer only when it has no problem).
pub(super) fn build_informer(
    name: &str,
    f: InformerFile,
    errors: &mut Errors,
) -> Option<InformerSpec> {
    let at = |field: &str| format!("informers.{name}.{field}");
    let resource = resource_ref(name, &f, errors);
    let namespaces = f.namespaces.unwrap_or_default();
    check_namespaces(&at("namespaces"), &namespaces, errors);
    check_selectors(&at(""), f.labels.as_deref(), f.fields.as_deref(), errors);
    let transform = f.transform.unwrap_or_default();
    let drop_fields =
        check_drop_fields(&at("transform.drop_fields"), transform.drop_fields, errors);
    let indexes = check_indexes(&at("indexes"), f.indexes, errors);
    Some(InformerSpec {
        name: name.to_string(),
        resource: resource?,
        namespaces,
        label_selector: f.labels,
        field_selector: f.fields,
        indexes,
        keep_managed_fields: transform.keep_managed_fields.unwrap_or(false),
        drop_fields,
        shard_by: match f.shard_by {
            Some(ShardByFile::Namespace) => ShardBy::Namespace,
            Some(ShardByFile::Uid) | None => ShardBy::Uid,
        },
    })
}

/// The resource an informer names: by `resource`, or by `group`, `version` and `kind`.
fn resource_ref(name: &str, f: &InformerFile, errors: &mut Errors) -> Option<ResourceRef> {
    let at = |field: &str| format!("informers.{name}.{field}");
    match (&f.resource, &f.kind) {
        (Some(_), Some(_)) => {
            errors.at_key(
                at("kind"),
                "name the resource by `resource` or by `group`/`version`/`kind`, not both",
            );
            None
        }
        (Some(text), None) => {
            for (field, set) in [
                ("group", f.group.is_some()),
                ("version", f.version.is_some()),
            ] {
                if set {
                    errors.at_key(
                        at(field),
                        format!("`{field}` goes with `kind`; `resource` already names the version"),
                    );
                }
            }
            let resource = ResourceName::parse(text)
                .map_err(|e| errors.at(at("resource"), e))
                .ok()
                .map(ResourceRef::Plural)?;
            check_built_in(&at("resource"), &resource, errors);
            Some(resource)
        }
        (None, Some(kind)) => match &f.version {
            None if errors.unreadable(&at("version")) => None,
            None => {
                errors.at_key(
                    at("kind"),
                    "`kind` needs a `version` (and a `group` unless it is a core kind)",
                );
                None
            }
            Some(version) => {
                let resource = ResourceRef::Kind {
                    group: f.group.clone().unwrap_or_default(),
                    version: version.clone(),
                    kind: kind.clone(),
                };
                // A group that could not be read is not the core group.
                if !errors.unreadable(&at("group")) {
                    check_built_in(&at("kind"), &resource, errors);
                }
                Some(resource)
            }
        },
        (None, None) if errors.unreadable(&at("resource")) || errors.unreadable(&at("kind")) => {
            None
        }
        (None, None) => {
            errors.at_key(
                format!("informers.{name}"),
                "an informer needs `resource` (such as apps/v1/deployments) or `group`, `version` and `kind`",
            );
            None
        }
    }
}
