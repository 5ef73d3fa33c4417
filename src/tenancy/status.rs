//! What the daemon tells a team on its resources: `status` (the generation looked at,
//! `Ready` and `Invalid` conditions with the problems found) and, when a resource is
//! refused, an Event on it, so `kubectl describe` shows why.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::config::crds::{GROUP, ResourceStatus, StatusCondition, VERSION};
use crate::config::tenancy::{TeamKind, Verdict};
use crate::util::{kube_error, rfc3339};

/// The status of a resource: whether it runs, and the problems that keep it out.
pub fn status_of(verdict: &Verdict, now: &str) -> ResourceStatus {
    let ok = verdict.problems.is_empty();
    let message = if ok {
        format!("{} runs", verdict.kind.as_str())
    } else {
        verdict.problems.join("; ")
    };
    let condition = |kind: &str, status: bool, reason: &str| StatusCondition {
        kind: kind.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.clone(),
        last_transition_time: now.into(),
        observed_generation: verdict.generation,
    };
    ResourceStatus {
        observed_generation: verdict.generation,
        conditions: vec![
            condition("Ready", ok, if ok { "Running" } else { "Refused" }),
            condition("Invalid", !ok, if ok { "Valid" } else { "Refused" }),
        ],
        ..ResourceStatus::default()
    }
}

/// A team resource: kind, namespace and name.
type ResourceKey = (TeamKind, String, String);

/// What a team Handler has done, for its status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Events finished.
    pub processed: u64,
    /// Failed calls.
    pub failed: u64,
    /// Dead letters kept now.
    pub dead_letters: u64,
    /// The last error, secrets redacted.
    pub last_error: Option<String>,
}

/// Writes each resource's status when what it says changes, and an Event when a resource
/// is refused.
pub struct StatusWriter {
    client: kube::Client,
    /// What was last written, by kind, namespace and name: problems and generation.
    written: BTreeMap<ResourceKey, (Option<i64>, Vec<String>)>,
    /// The counts last written, by the Handler's namespace and name.
    counted: BTreeMap<(String, String), Counts>,
}

impl StatusWriter {
    /// Writes through `client` (the daemon's own).
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            written: BTreeMap::new(),
            counted: BTreeMap::new(),
        }
    }

    /// Writes the verdicts that differ from the last ones written; failures are logged and
    /// tried again at the next call.
    pub async fn write(&mut self, verdicts: &[Verdict]) {
        let now = rfc3339(SystemTime::now());
        for verdict in verdicts {
            let key = (
                verdict.kind,
                verdict.namespace.clone(),
                verdict.name.clone(),
            );
            let said = (verdict.generation, verdict.problems.clone());
            if self.written.get(&key) == Some(&said) {
                continue;
            }
            match self.patch_status(verdict, &now).await {
                Ok(()) => {
                    if !verdict.problems.is_empty() {
                        self.event(verdict).await;
                    }
                    self.written.insert(key, said);
                }
                Err(e) => {
                    tracing::warn!(kind = verdict.kind.as_str(), namespace = %verdict.namespace, name = %verdict.name, error = %e, "cannot write the status of a team resource");
                }
            }
        }
        self.written.retain(|(kind, namespace, name), _| {
            verdicts
                .iter()
                .any(|v| v.kind == *kind && v.namespace == *namespace && v.name == *name)
        });
    }

    /// Writes the counts of each team Handler (`namespace`, `name`) that changed since last
    /// written.
    pub async fn write_counts(&mut self, counts: &[((String, String), Counts)]) {
        for (key, now) in counts {
            if self.counted.get(key) == Some(now) {
                continue;
            }
            let patch = json!({"status": {
                "processed": now.processed,
                "failed": now.failed,
                "deadLetters": now.dead_letters,
                "lastError": now.last_error.as_deref().map(|e| crate::util::redact::redact(e).into_owned()),
            }});
            match self.patch(TeamKind::Handler, &key.0, &key.1, &patch).await {
                Ok(()) => {
                    self.counted.insert(key.clone(), now.clone());
                }
                Err(e) => {
                    tracing::debug!(namespace = %key.0, name = %key.1, error = %e, "cannot write a team Handler's counts")
                }
            }
        }
        self.counted
            .retain(|key, _| counts.iter().any(|(k, _)| k == key));
    }

    async fn patch_status(&self, verdict: &Verdict, now: &str) -> Result<(), String> {
        let patch = json!({"status": status_of(verdict, now)});
        self.patch(verdict.kind, &verdict.namespace, &verdict.name, &patch)
            .await
    }

    /// A merge patch of a team resource's status subresource.
    async fn patch(
        &self,
        kind: TeamKind,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), String> {
        let resource = ApiResource {
            group: GROUP.into(),
            version: VERSION.into(),
            api_version: format!("{GROUP}/{VERSION}"),
            kind: kind.as_str().into(),
            plural: format!("{}s", kind.as_str().to_lowercase()),
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|e| kube_error(&e))
    }

    /// An Event on the refused resource (a failure to write one is only logged).
    async fn event(&self, verdict: &Verdict) {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &verdict.namespace);
        let time = Time(jiff::Timestamp::now());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", verdict.name)),
                namespace: Some(verdict.namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(format!("{GROUP}/{VERSION}")),
                kind: Some(verdict.kind.as_str().into()),
                namespace: Some(verdict.namespace.clone()),
                name: Some(verdict.name.clone()),
                ..ObjectReference::default()
            },
            reason: Some("Refused".into()),
            message: Some(verdict.problems.join("; ")),
            type_: Some("Warning".into()),
            source: Some(EventSource {
                component: Some("switchyard".into()),
                ..EventSource::default()
            }),
            first_timestamp: Some(time.clone()),
            last_timestamp: Some(time),
            count: Some(1),
            ..Event::default()
        };
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::debug!(error = %kube_error(&e), "cannot record an Event on a team resource");
        }
    }
}
