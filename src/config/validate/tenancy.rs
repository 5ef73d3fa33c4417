//! `tenancy:`: whether team `Route` and `Handler` resources are read, from which namespaces,
//! and the ceilings they are held to.

use std::time::Duration;

use serde_json::Value;

use super::errors::Errors;
use crate::config::oci::Reference;
use crate::config::schema::TenancyFile;
use crate::config::selector::Selector;
use crate::config::{EgressRule, ResourceName, TenancySpec};

/// Reads and checks `tenancy:`; `None` when it is absent or cannot be read.
pub(super) fn build_tenancy(value: Option<&Value>, errors: &mut Errors) -> Option<TenancySpec> {
    let file: TenancyFile = errors.read("tenancy", value?)?;
    if let Some(selector) = &file.namespaces
        && let Err(e) = Selector::parse(selector)
    {
        errors.at("tenancy.namespaces", format!("not a label selector: {e}"));
    }
    let mut http = Vec::new();
    for (i, entry) in file.http.unwrap_or_default().iter().enumerate() {
        match EgressRule::parse(entry) {
            Ok(rule) => http.push(rule),
            Err(e) => errors.at(format!("tenancy.http[{i}]"), e),
        }
    }
    let mut resources = Vec::new();
    for (i, entry) in file.resources.unwrap_or_default().iter().enumerate() {
        match ResourceName::parse(entry) {
            Ok(name) => resources.push(name),
            Err(e) => errors.at(format!("tenancy.resources[{i}]"), e),
        }
    }
    let registries = file.registries.unwrap_or_default();
    for (i, repository) in registries.iter().enumerate() {
        let probe = format!("oci://{}/x", repository.trim_end_matches('/'));
        if repository.contains("://") || Reference::parse(&probe).is_err() {
            errors.at(
                format!("tenancy.registries[{i}]"),
                format!("{repository:?} is not a registry and repository path (registry.example.com/team-plugins)"),
            );
        }
    }
    let positive = |errors: &mut Errors, field: &str, value: Option<usize>, default: usize| {
        let value = value.unwrap_or(default);
        if value == 0 {
            errors.at(format!("tenancy.{field}"), "must be at least 1");
        }
        value
    };
    let max_qps = file.max_qps.unwrap_or(10.0);
    if !(max_qps.is_finite() && max_qps > 0.0) {
        errors.at(
            "tenancy.max_qps",
            "must be a number of retries per second above 0",
        );
    }
    Some(TenancySpec {
        namespaces: file.namespaces.filter(|s| !s.trim().is_empty()),
        resources,
        registries: registries
            .into_iter()
            .map(|r| r.trim_end_matches('/').to_string())
            .collect(),
        http,
        builtin: file.builtin.unwrap_or(true),
        max_handlers_per_namespace: positive(
            errors,
            "max_handlers_per_namespace",
            file.max_handlers_per_namespace,
            10,
        ),
        max_handlers: positive(errors, "max_handlers", file.max_handlers, 50),
        max_memory: file.max_memory.map_or(64 << 20, |m| m.0),
        max_timeout: file.max_timeout.map_or(Duration::from_secs(30), |d| d.0),
        max_concurrency: positive(errors, "max_concurrency", file.max_concurrency, 4),
        max_qps,
    })
}
