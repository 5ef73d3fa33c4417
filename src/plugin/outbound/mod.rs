//! Outbound HTTP for plugins: the host side of `wasi:http/outgoing-handler`.
//!
//! Every request a plugin makes goes through [`send`], which holds it to the handler's
//! policy before anything reaches the network:
//!
//! 1. the destination (scheme, host, port) must be on `capabilities.http`, or the plugin
//!    gets the error `HTTP-request-denied` (a value, never a trap), logged once per
//!    handler and host with the config path to change, and counted;
//! 2. the address it connects to, after DNS (or the IP literal it names), must not be
//!    loopback, link-local or unspecified (nor private with `refuse_private`) unless an
//!    entry names it ([`client`]);
//! 3. the request body is capped, the response body is capped, and every wait is bounded
//!    by what is left of the call's deadline;
//! 4. in a shadow run or a replay, the request is recorded and answered by a stub, never
//!    sent;
//! 5. a request that is sent carries a W3C `traceparent` header ([`trace`]) unless the
//!    plugin set one: one trace id per event, the same across its retries; when the
//!    daemon sends traces, the request's own span (under the plugin call's) is the parent
//!    it names.
//!
//! # Decision: redirects are not followed
//!
//! A 3xx reaches the plugin as it is. Following it would send the request (and its
//! headers, credentials among them) to a destination the allow-list was never asked about;
//! a plugin that wants to follow one makes the second request itself, and the allow-list
//! sees it.
//!
//! # Decision: a failed delivery is the plugin's error, so the daemon's retries apply
//!
//! The host does not retry. The plugin returns an error for a 5xx, a timeout or a
//! connection failure; the handler's per-key backoff, dead letters and durable state then
//! apply exactly as to any failure, which is what makes outbound delivery lose nothing.

mod client;
mod connector;
mod send;
mod stats;
pub mod trace;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

pub use client::{Client, Clients};
pub use send::{Parent, send};
pub use stats::HostStatus;

use tokio::sync::Semaphore;

use crate::config::OutboundSpec;
use crate::metrics::OutboundFamilies;
use crate::util::lock;

/// The most requests one call may have in flight at once; past it a request is refused.
pub const MAX_IN_FLIGHT_PER_CALL: usize = 8;

/// One handler's outbound HTTP: its policy, the pooled client for it, its metrics and
/// statistics. Built when the handler starts, shared by all its calls.
pub struct Outbound {
    handler: Arc<str>,
    spec: OutboundSpec,
    clients: Arc<Clients>,
    /// Built on the first request sent (a shadow run or a replay never needs one).
    client: std::sync::OnceLock<client::Client>,
    /// Bounds the requests the handler's calls have in flight (`outbound.max_in_flight`).
    in_flight: Arc<Semaphore>,
    families: OutboundFamilies,
    stats: stats::Stats,
    /// Hosts whose refusal has been logged (once each).
    refused: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("handler", &self.handler)
            .field("rules", &self.spec.egress.rules.len())
            .finish()
    }
}

impl Outbound {
    /// The outbound HTTP of `handler` under `spec`, through a client from `clients` (shared
    /// with every handler whose address rules and TLS settings are the same).
    pub fn new(
        handler: Arc<str>,
        spec: OutboundSpec,
        clients: Arc<Clients>,
        families: OutboundFamilies,
    ) -> Self {
        Self {
            handler,
            in_flight: Arc::new(Semaphore::new(spec.max_in_flight as usize)),
            spec,
            clients,
            client: std::sync::OnceLock::new(),
            families,
            stats: stats::Stats::default(),
            refused: Mutex::new(HashSet::new()),
        }
    }

    /// The client requests go through, built on first use; the error says which TLS file
    /// could not be used.
    pub fn client(&self) -> Result<&client::Client, String> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let client = self.clients.client(&self.spec)?;
        Ok(self.client.get_or_init(|| client))
    }

    /// The handler's policy.
    pub fn spec(&self) -> &OutboundSpec {
        &self.spec
    }

    /// Requests per destination host so far: counts, errors, latency.
    pub fn status(&self) -> Vec<HostStatus> {
        self.stats.status()
    }

    /// Logs a refusal once per host, with what to change; counts every one.
    fn refuse(&self, host: &str, reason: &str, message: impl FnOnce() -> String) {
        self.families
            .refused
            .get_or_create(&crate::metrics::OutboundRefusedLabel {
                handler: self.handler.to_string(),
                reason: reason.to_string(),
            })
            .inc();
        if lock(&self.refused).insert(format!("{reason} {host}")) {
            let message = crate::util::redact::redact_owned(message());
            tracing::warn!(handler = %self.handler, host, reason, "{message}");
        }
    }
}

/// The `wasi:http` hooks of one call: every request goes through [`send`] with the
/// calling handler's context and the call's deadline.
pub struct CallHooks {
    context: Arc<crate::plugin::imports::HostContext>,
    /// When the call ends; requests are bounded by it.
    pub deadline: std::time::Instant,
    /// The trace of the event being handled, set as each call starts, when the daemon
    /// sends no traces.
    pub trace: Option<trace::Trace>,
    /// The call's trace, when the daemon sends traces: each request sent gets a span under
    /// it, named in its `traceparent`.
    pub call_trace: Option<crate::traces::CallTrace>,
    /// Bounds the requests this call has in flight; made at its first request (most calls
    /// make none).
    in_flight: Option<Arc<Semaphore>>,
}

impl CallHooks {
    /// Hooks for a call of the handler of `context` ending at `deadline`.
    pub fn new(
        context: Arc<crate::plugin::imports::HostContext>,
        deadline: std::time::Instant,
    ) -> Self {
        Self {
            context,
            deadline,
            trace: None,
            call_trace: None,
            in_flight: None,
        }
    }
}

impl CallHooks {
    /// Starts the next call of a reused instance: its deadline, and its own bound on
    /// requests in flight.
    pub fn next_call(&mut self, deadline: std::time::Instant) {
        self.deadline = deadline;
        self.in_flight = None;
    }
}

impl wasmtime_wasi_http::WasiHttpHooks for CallHooks {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<dyn Future<Output = Result<send::Sent, wasmtime_wasi_http::Error>> + Send> {
        let parent = match &self.call_trace {
            Some(call) => send::Parent::Span(call.clone()),
            None => send::Parent::Derived(self.trace.as_mut().map(trace::Trace::next_parent)),
        };
        Box::new(send(
            self.context.clone(),
            self.deadline,
            request,
            options,
            parent,
            self.in_flight
                .get_or_insert_with(|| Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CALL)))
                .clone(),
        ))
    }
}
