//! Which `Host` the admin API answers for: a guard against DNS rebinding. On loopback its
//! reads need no token, so a web page whose own name an attacker points at 127.0.0.1 could
//! otherwise read `/status` and dead letters from the browser of someone running the
//! daemon. Such a request carries the attacker's name as its `Host`; the API answers only
//! its own address, loopback's names and the names the config lists.
//!
//! When the API listens on every address (`0.0.0.0`, `[::]`), any IP address is taken as
//! its own: a page cannot be served from an IP address it does not own, so an address in
//! `Host` is never a rebinding. A request without `Host` (HTTP/1.0) comes from no browser
//! and is answered. The probes listener has no such guard: kubelet sends the pod's IP, and
//! the probes carry no data.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::ApiError;
use crate::config::{HostPattern, HostPort};

/// The host names loopback always answers to, on any port.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The hosts the admin API answers for.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    listen: SocketAddr,
    configured: Vec<HostPattern>,
}

impl AllowedHosts {
    /// The hosts of an API bound to `listen` (its real port, not 0), and `configured` (from
    /// `admin.allowed_hosts`).
    pub fn new(listen: SocketAddr, configured: Vec<HostPattern>) -> Self {
        Self { listen, configured }
    }

    /// Whether a request whose `Host` is `given` is answered.
    pub fn allows(&self, given: &str) -> bool {
        let Ok(given) = given.parse::<HostPort>() else {
            return false;
        };
        if self.configured.iter().any(|p| p.matches(&given)) {
            return true;
        }
        let own_port = given.port.is_none_or(|p| p == self.listen.port());
        match given.ip() {
            Some(ip) if ip.is_loopback() => true,
            Some(_) if self.listen.ip().is_unspecified() => own_port,
            Some(ip) => ip == self.listen.ip() && own_port,
            None => given.host == "localhost",
        }
    }

    /// What the refusal of `given` says: the host refused and how to allow it.
    fn refusal(&self, given: &str) -> ApiError {
        let own = if self.listen.ip().is_unspecified() {
            format!(
                "any IP address of this machine (port {})",
                self.listen.port()
            )
        } else {
            format!("{} (with or without the port)", self.listen)
        };
        let listed = match self.configured.len() {
            0 => "none listed".to_string(),
            _ => self
                .configured
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        };
        ApiError::misdirected(format!(
            "the admin API does not answer for host {given:?} (a guard against DNS rebinding): it answers for {own}, for {} on any port, and for the hosts in admin.allowed_hosts ({listed}); to reach it by this name, add it to admin.allowed_hosts and restart",
            LOOPBACK_NAMES.join(", ")
        ))
        .with_details(json!({"host": given}))
    }
}

/// Middleware answering 421 to a request whose `Host` the API does not answer for.
pub async fn require_allowed_host(
    State(hosts): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let given = match request.headers().get(header::HOST) {
        Some(value) => Some(String::from_utf8_lossy(value.as_bytes()).into_owned()),
        None => request.uri().authority().map(ToString::to_string),
    };
    match given {
        Some(given) if !hosts.allows(&given) => hosts.refusal(&given).into_response(),
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(listen: &str, configured: &[&str]) -> AllowedHosts {
        let configured = configured.iter().map(|c| c.parse().unwrap()).collect();
        AllowedHosts::new(listen.parse().unwrap(), configured)
    }

    #[test]
    fn loopback_names_on_any_port_and_the_listen_address_are_answered() {
        let api = hosts("127.0.0.1:9470", &[]);
        for allowed in [
            "127.0.0.1:9470",
            "127.0.0.1",
            "localhost",
            "localhost:8080",
            "LocalHost.:1",
            "[::1]:9470",
            "[::1]",
            "127.0.0.1:18080",
        ] {
            assert!(api.allows(allowed), "{allowed}");
        }
        for refused in [
            "evil.example",
            "evil.example:9470",
            "localhost.evil.example",
            "",
            "a b",
        ] {
            assert!(!api.allows(refused), "{refused}");
        }
    }

    #[test]
    fn a_specific_address_answers_its_own_port_and_every_address_any_ip() {
        let pod = hosts("10.0.0.5:9470", &[]);
        assert!(pod.allows("10.0.0.5:9470"));
        assert!(pod.allows("10.0.0.5"));
        assert!(!pod.allows("10.0.0.5:80"));
        assert!(!pod.allows("10.0.0.6:9470"));
        let every = hosts("0.0.0.0:9470", &[]);
        assert!(every.allows("10.0.0.5:9470"));
        assert!(every.allows("[fd00::5]:9470"));
        assert!(!every.allows("10.0.0.5:80"));
        assert!(!every.allows("switchyard.ops.svc:9470"));
    }

    #[test]
    fn configured_names_and_a_star_are_answered() {
        let named = hosts("0.0.0.0:9470", &["switchyard.ops.svc", "admin.example:443"]);
        assert!(named.allows("switchyard.ops.svc:9470"));
        assert!(named.allows("admin.example:443"));
        assert!(!named.allows("admin.example"));
        assert!(!named.allows("evil.example"));
        assert!(hosts("127.0.0.1:9470", &["*"]).allows("evil.example"));
    }

    #[test]
    fn a_refusal_names_the_host_and_how_to_allow_it() {
        let error = hosts("127.0.0.1:9470", &[]).refusal("evil.example");
        let message = error.message();
        assert!(message.contains("host \"evil.example\""), "{message}");
        assert!(message.contains("127.0.0.1:9470"), "{message}");
        assert!(
            message.contains("add it to admin.allowed_hosts"),
            "{message}"
        );
    }
}
