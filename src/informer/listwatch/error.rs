//! Why a list or watch failed, and which failures make the loop list again: those that say
//! the version it would resume from is gone from the server, or was never there.

use kube::core::Status;

use crate::informer::shown;

/// Why listing or watching failed. The loop carries on after each (the caller backs off).
#[derive(Debug, thiserror::Error)]
pub(in crate::informer) enum Error {
    /// The list request failed.
    #[error("listing failed: {}", shown(.0))]
    List(#[source] kube::Error),
    /// A list page came without a resourceVersion to watch from.
    #[error("the list has no metadata.resourceVersion to watch from")]
    NoResourceVersion,
    /// Reading the server's current resourceVersion before resuming failed.
    #[error(
        "reading the API server's resourceVersion before resuming the watch failed: {}",
        shown(.0)
    )]
    Check(#[source] kube::Error),
    /// The server is behind the version the watch has seen.
    #[error(
        "the API server is at resourceVersion {server}, behind the {seen} this watch has seen \
         (it restarted empty or was restored from a backup)"
    )]
    ServerBehind {
        /// The server's current resourceVersion.
        server: String,
        /// The newest resourceVersion the watch has seen.
        seen: String,
    },
    /// The watch request failed.
    #[error("starting the watch failed: {}", shown(.0))]
    WatchStart(#[source] kube::Error),
    /// The server ended the watch with an error.
    #[error("the API server ended the watch: {} ({})", .0.message, .0.code)]
    Server(Box<Status>),
    /// The watch stream broke.
    #[error("the watch stream failed: {}", shown(.0))]
    Stream(#[source] kube::Error),
}

impl Error {
    /// The HTTP status code of the API server's answer, when it answered with a `Status`
    /// (403 when the list or watch is forbidden).
    pub(in crate::informer) fn code(&self) -> Option<u16> {
        match self {
            Error::List(e) | Error::Check(e) | Error::WatchStart(e) | Error::Stream(e) => match e {
                kube::Error::Api(status) => Some(status.code),
                _ => None,
            },
            Error::Server(status) => Some(status.code),
            Error::NoResourceVersion | Error::ServerBehind { .. } => None,
        }
    }

    /// Whether the loop lists again after this error, because the version it would resume
    /// from is gone from the server, or was never there.
    pub(in crate::informer) fn relists(&self) -> bool {
        match self {
            Error::ServerBehind { .. } => true,
            Error::Server(status) => version_unusable(status),
            Error::WatchStart(kube::Error::Api(status)) => version_unusable(status),
            _ => false,
        }
    }
}

/// Whether the server says the requested resourceVersion cannot be served: 410 (compacted),
/// 504 "Too large resource version" (the server is behind it), or a resourceVersion it finds
/// invalid.
fn version_unusable(status: &Status) -> bool {
    const TOO_LARGE: &str = "Too large resource version";
    let too_large = status.message.contains(TOO_LARGE)
        || status.details.as_ref().is_some_and(|d| {
            d.causes
                .iter()
                .any(|c| c.reason == "ResourceVersionTooLarge" || c.message == TOO_LARGE)
        });
    let message = status.message.to_ascii_lowercase();
    let invalid = matches!(status.code, 400 | 422)
        && (message.contains("resourceversion") || message.contains("resource version"));
    status.code == 410 || too_large || invalid
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    fn status(code: u16, reason: &str, message: &str) -> Status {
        Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..Status::default()
        }
    }

    #[test]
    fn answers_that_say_the_version_is_unusable_are_told_apart_from_other_failures() {
        let gone = status(410, "Expired", "too old resource version: 5 (10)");
        let mut too_large = status(
            504,
            "Timeout",
            "Too large resource version: 15437, current: 71",
        );
        assert!(version_unusable(&gone));
        assert!(version_unusable(&too_large));
        too_large.message = "Timeout".into();
        too_large.details = Some(StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: vec![StatusCause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            retry_after_seconds: 1,
        });
        assert!(version_unusable(&too_large), "the cause alone is enough");
        let invalid = status(
            422,
            "Invalid",
            r#"resourceVersion: Invalid value: "x": invalid resource version"#,
        );
        assert!(version_unusable(&invalid));
        for other in [
            status(
                504,
                "Timeout",
                "the server was unable to return a response in time",
            ),
            status(500, "InternalError", "etcdserver: leader changed"),
            status(403, "Forbidden", "configmaps is forbidden"),
            status(400, "BadRequest", "unable to parse the label selector"),
        ] {
            assert!(!version_unusable(&other), "{}", other.message);
        }
    }

    #[test]
    fn errors_that_relist_are_the_server_behind_and_unusable_versions() {
        let behind = Error::ServerBehind {
            server: "71".into(),
            seen: "15437".into(),
        };
        assert!(behind.relists());
        assert!(
            behind
                .to_string()
                .starts_with("the API server is at resourceVersion 71, behind the 15437")
        );
        let too_large = status(
            504,
            "Timeout",
            "Too large resource version: 15437, current: 71",
        );
        assert!(Error::Server(Box::new(too_large.clone())).relists());
        let refused = Error::WatchStart(kube::Error::Api(Box::new(too_large)));
        assert!(refused.relists());
        assert_eq!(
            refused.to_string(),
            "starting the watch failed: Too large resource version: 15437, current: 71 (504)",
            "a Status is shown by its message"
        );
        let internal = status(500, "InternalError", "boom");
        assert!(!Error::Server(Box::new(internal)).relists());
        assert!(!Error::NoResourceVersion.relists());
    }
}
