//! What the simulator records of each write, as kube-apiserver's audit log does: the verb,
//! the object, the client's `User-Agent` and the `fieldManager` it named. Tests read it
//! through [`super::Simulator::writes`] to check who wrote what; it keeps the last
//! [`KEPT`] writes.
//!
//! The manager recorded in `managedFields` follows kube-apiserver's rule
//! ([`manager_of`]): the `fieldManager` given, else the User-Agent up to its first `/`.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;

/// Writes kept, the oldest dropped first.
pub const KEPT: usize = 10_000;

/// One write request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Write {
    /// `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: String,
    /// The resource's plural (`configmaps`, `leases`).
    pub resource: String,
    /// The namespace, empty for a cluster-scoped resource.
    pub namespace: String,
    /// The object's name, empty for a create (the name is in the body) or a collection.
    pub name: String,
    /// The request's `User-Agent`, if it sent one.
    pub user_agent: Option<String>,
    /// The request's `fieldManager` parameter, if it named one.
    pub field_manager: Option<String>,
}

/// The writes the simulator served, newest last.
#[derive(Debug, Default)]
pub struct WriteLog {
    writes: Mutex<VecDeque<Write>>,
}

impl WriteLog {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Write>> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a write.
    pub fn record(&self, write: Write) {
        let mut writes = self.lock();
        if writes.len() == KEPT {
            writes.pop_front();
        }
        writes.push_back(write);
    }

    /// The writes recorded, oldest first.
    pub fn all(&self) -> Vec<Write> {
        self.lock().iter().cloned().collect()
    }
}

/// The manager kube-apiserver records in `managedFields` for a write: the `fieldManager`
/// given, else the User-Agent's product (up to its first `/`), else `unknown`.
pub fn manager_of(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    let from_agent = user_agent.and_then(|ua| ua.split('/').next());
    field_manager
        .or(from_agent)
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_is_the_field_manager_else_the_user_agents_product() {
        assert_eq!(
            manager_of(Some("switchyard-x"), Some("kubectl/v1")),
            "switchyard-x"
        );
        assert_eq!(manager_of(None, Some("kubectl/v1.34 (linux)")), "kubectl");
        assert_eq!(manager_of(None, None), "unknown");
    }

    #[test]
    fn only_the_last_writes_are_kept() {
        let log = WriteLog::default();
        for i in 0..=KEPT {
            log.record(Write {
                verb: "create".into(),
                resource: "configmaps".into(),
                namespace: "default".into(),
                name: i.to_string(),
                user_agent: None,
                field_manager: None,
            });
        }
        let all = log.all();
        assert_eq!((all.len(), all[0].name.as_str()), (KEPT, "1"));
    }
}
