//! Faults injected into the simulator's API, to test how clients cope: the next watches
//! answered 410 Expired, the next requests answered with an error (429 with `Retry-After`,
//! 500, ...), a delay before every answer, and streaming lists accepted and then failed as
//! kube-apiserver fails them over an etcd without `RequestWatchProgress`. Set them from tests through
//! [`super::Simulator::faults`], or over HTTP through [`super::control`].

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ApiError;

/// The verbs a request failure can be limited to.
pub const VERBS: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// Why a request failure was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultError {
    /// The code is not a 4xx or 5xx.
    #[error("code {0} is not an HTTP error code (400-599)")]
    NotAnErrorCode(u16),
    /// A verb is not one of [`VERBS`].
    #[error("unknown verb {0:?}; expected some of {verbs}", verbs = VERBS.join(", "))]
    UnknownVerb(String),
}

/// Answer the next `count` requests (of the given verbs) with an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestFailure {
    /// How many requests fail.
    pub count: u64,
    /// The HTTP status code: 429, 500, 503, 504 or any other 4xx/5xx.
    pub code: u16,
    /// Seconds in `Retry-After` (default 1 for 429, none otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// Only requests with these verbs (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`) fail; empty for every verb.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verbs: Vec<String>,
    /// Only requests on these resources (plurals: `leases`, `configmaps`) fail; empty for
    /// every resource. With 403, a ServiceAccount without a Role for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
}

impl RequestFailure {
    /// `count` requests answered 429 Too Many Requests with `Retry-After: seconds`.
    pub fn too_many_requests(count: u64, seconds: u64) -> Self {
        Self {
            retry_after_seconds: Some(seconds),
            ..Self::with_code(count, 429)
        }
    }

    /// `count` requests answered 500 Internal Server Error.
    pub fn internal_error(count: u64) -> Self {
        Self::with_code(count, 500)
    }

    /// `count` requests answered 403 Forbidden, as to a ServiceAccount without a Role.
    pub fn forbidden(count: u64) -> Self {
        Self::with_code(count, 403)
    }

    /// `count` requests answered with `code`.
    pub fn with_code(count: u64, code: u16) -> Self {
        Self {
            count,
            code,
            retry_after_seconds: None,
            verbs: Vec::new(),
            resources: Vec::new(),
        }
    }

    /// Limits the failure to requests on these resources (plurals).
    pub fn on(mut self, resources: &[&str]) -> Self {
        self.resources = resources.iter().map(|r| r.to_string()).collect();
        self
    }

    /// Limits the failure to requests with these verbs.
    pub fn only(mut self, verbs: &[&str]) -> Self {
        self.verbs = verbs.iter().map(|v| v.to_string()).collect();
        self
    }

    /// Checks the code and the verbs.
    pub fn validate(&self) -> Result<(), FaultError> {
        if !(400..=599).contains(&self.code) {
            return Err(FaultError::NotAnErrorCode(self.code));
        }
        if let Some(verb) = self.verbs.iter().find(|v| !VERBS.contains(&v.as_str())) {
            return Err(FaultError::UnknownVerb(verb.clone()));
        }
        Ok(())
    }

    fn applies_to(&self, verb: &str, plural: &str) -> bool {
        (self.verbs.is_empty() || self.verbs.iter().any(|v| v == verb))
            && (self.resources.is_empty() || self.resources.iter().any(|r| r == plural))
    }
}

/// The faults in force.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultStatus {
    /// How many of the next watches are answered 410 Expired.
    pub expire_watches: u64,
    /// Pending request failures, used in order.
    pub failures: Vec<RequestFailure>,
    /// Milliseconds every API request waits before it is answered.
    pub delay_ms: u64,
    /// Whether streaming lists (watches with `sendInitialEvents=true`) are answered 200 and
    /// then failed with an ERROR event, code 500, "the required storage feature
    /// RequestWatchProgress is disabled", as kube-apiserver 1.36 with `WatchList` on answers
    /// over an etcd older than 3.5.13 / 3.4.31.
    pub watch_list_unsupported_by_storage: bool,
}

/// The faults of one simulator. Every method is safe to call concurrently.
#[derive(Debug, Default)]
pub struct Faults {
    state: Mutex<FaultStatus>,
}

impl Faults {
    fn lock(&self) -> MutexGuard<'_, FaultStatus> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers the next `count` watches with a 410 Expired ERROR event, as a server that
    /// compacted past the client's version does.
    pub fn expire_next_watches(&self, count: u64) {
        self.lock().expire_watches += count;
    }

    /// Answers the next requests with an error; see [`RequestFailure`].
    pub fn fail_next_requests(&self, failure: RequestFailure) -> Result<(), FaultError> {
        failure.validate()?;
        if failure.count > 0 {
            self.lock().failures.push(failure);
        }
        Ok(())
    }

    /// Accepts streaming lists and then fails them with an ERROR event, 500, as an API
    /// server whose storage lacks `RequestWatchProgress` does (`false` ends it).
    pub fn fail_watch_lists_in_storage(&self, fail: bool) {
        self.lock().watch_list_unsupported_by_storage = fail;
    }

    /// Whether streaming lists are failed as [`Faults::fail_watch_lists_in_storage`] says.
    pub(super) fn watch_lists_fail_in_storage(&self) -> bool {
        self.lock().watch_list_unsupported_by_storage
    }

    /// Delays every API request by `delay` before answering it (zero for none).
    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay_ms = delay.as_millis().try_into().unwrap_or(u64::MAX);
    }

    /// Removes every fault.
    pub fn clear(&self) {
        *self.lock() = FaultStatus::default();
    }

    /// The faults in force.
    pub fn status(&self) -> FaultStatus {
        self.lock().clone()
    }

    /// The delay every request waits.
    pub(super) fn delay(&self) -> Duration {
        Duration::from_millis(self.lock().delay_ms)
    }

    /// The error a request with `verb` on the resource `plural` must be answered with, if
    /// a failure applies (using one of its count).
    pub(super) fn take_failure(&self, verb: &str, plural: &str) -> Option<ApiError> {
        let mut state = self.lock();
        let index = state
            .failures
            .iter()
            .position(|f| f.applies_to(verb, plural))?;
        let failure = &mut state.failures[index];
        failure.count -= 1;
        let error = ApiError::with_code(failure.code, failure.retry_after_seconds);
        if failure.count == 0 {
            state.failures.remove(index);
        }
        Some(error)
    }

    /// Whether this watch must be answered 410 Expired (using one of the count).
    pub(super) fn take_watch_expiry(&self) -> bool {
        let mut state = self.lock();
        if state.expire_watches == 0 {
            return false;
        }
        state.expire_watches -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_applies_to_its_verbs_and_runs_out() {
        let faults = Faults::default();
        faults
            .fail_next_requests(RequestFailure::too_many_requests(2, 3).only(&["list"]))
            .unwrap();
        assert!(faults.take_failure("get", "pods").is_none());
        let err = faults.take_failure("list", "pods").unwrap();
        assert_eq!((err.code, err.retry_after()), (429, Some(3)));
        assert!(faults.take_failure("list", "pods").is_some());
        assert!(faults.take_failure("list", "pods").is_none());
        assert_eq!(faults.status(), FaultStatus::default());
    }

    #[test]
    fn a_failure_on_some_resources_leaves_the_others_alone() {
        let faults = Faults::default();
        faults
            .fail_next_requests(RequestFailure::forbidden(1).on(&["leases"]))
            .unwrap();
        assert!(faults.take_failure("get", "configmaps").is_none());
        assert_eq!(faults.take_failure("get", "leases").unwrap().code, 403);
        assert!(faults.take_failure("get", "leases").is_none());
    }

    #[test]
    fn a_failure_with_an_unknown_verb_or_code_is_refused() {
        let faults = Faults::default();
        assert!(
            faults
                .fail_next_requests(RequestFailure::internal_error(1).only(&["frobnicate"]))
                .is_err()
        );
        let mut ok_code = RequestFailure::internal_error(1);
        ok_code.code = 200;
        assert!(faults.fail_next_requests(ok_code).is_err());
    }

    #[test]
    fn watch_expiries_are_counted_down() {
        let faults = Faults::default();
        faults.expire_next_watches(1);
        assert!(faults.take_watch_expiry());
        assert!(!faults.take_watch_expiry());
    }
}
