//! Traces: with `tracing.otlp_endpoint` set, a trace per event a handler is given, exported
//! to an OpenTelemetry collector over OTLP/HTTP (protobuf) by a batch processor.
//!
//! ```text
//! event            from the informer taking the change in to its outcome (done, requeue,
//! │                dead_letter, coalesced): handler, route, object, resourceVersion
//! ├─ informer      caching the change and handing it to the route
//! ├─ route         the route's filters, until the event is in the handler's queue
//! ├─ queue         waiting in the handler's queue (again after each retry's backoff)
//! └─ plugin.call   one per attempt, with its outcome
//!    ├─ apply configmaps     each Kubernetes write: verb, resource, object, status code
//!    └─ POST                 each outbound request: method, host, port, status code; its
//!                            span id is the parent id in the request's `traceparent`
//! ```
//!
//! # Decision: the OpenTelemetry API directly, not `tracing` spans bridged to it
//!
//! The daemon's `tracing` spans are for its log, scoped to code that runs; an event's
//! stages are not: it waits in a queue with no code running for it, across tasks and
//! retries. The event's span travels with the event ([`EventTrace`] in the handler's
//! pending event) and the spans of its stages are made with the times they began, so no
//! log filter or subscriber decides what is traced.
//!
//! # Decision: off costs a check of an `Option`
//!
//! Each daemon has its own [`Traces`] (tests run several in one process); a route holds
//! it as an `Option`, and with `None` no span, no clock reading and no attribute is made:
//! the events carry `None` and every later stage checks only that.

mod export;

use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

use crate::config::TracingSpec;

pub use export::EXPORT_TIMEOUT;

/// The exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot export traces to {endpoint}: {reason}")]
pub struct Error {
    /// Where spans were to go.
    pub endpoint: String,
    /// What went wrong.
    pub reason: String,
}

/// A daemon's traces: the provider exporting them and the tracer making spans.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Traces {
    /// Starts exporting to the collector `spec` names, sampling `spec.sample_ratio` of the
    /// events (a trace continued from a parent follows the parent's decision). Must run on
    /// the daemon's tokio runtime: exports are sent from it.
    pub fn start(spec: &TracingSpec) -> Result<Arc<Self>, Error> {
        let failed = |reason: String| Error {
            endpoint: spec.endpoint.to_string(),
            reason,
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(spec.endpoint.as_str())
            .with_timeout(EXPORT_TIMEOUT)
            .with_headers(spec.headers.iter().cloned().collect())
            .with_http_client(export::Exporter::new().map_err(failed)?)
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_service_name(spec.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                spec.sample_ratio,
            ))))
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("switchyard");
        Ok(Arc::new(Self { provider, tracer }))
    }

    /// Sends what is batched and stops exporting; blocks for up to [`EXPORT_TIMEOUT`].
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(EXPORT_TIMEOUT) {
            tracing::warn!(error = %e, "traces: the last spans could not be sent");
        }
    }

    /// The trace of an event `about` an object, which the informer took in at `received`
    /// and handed to the route at `routed`: its `event` span, the `informer` span between
    /// the two, and the `route` span from `routed` to now, when the route hands the event to
    /// its handler.
    pub fn event(
        &self,
        (received, routed): (SystemTime, SystemTime),
        about: &About<'_>,
    ) -> EventTrace {
        let mut span = self
            .tracer
            .span_builder("event")
            .with_kind(SpanKind::Consumer)
            .with_start_time(received)
            .start(&self.tracer);
        // An event not sampled costs no attributes (nor the parse of its kind and uid).
        let attributes: Arc<[KeyValue]> = if span.is_recording() {
            about.attributes().into()
        } else {
            Arc::new([])
        };
        span.set_attributes(attributes.iter().cloned());
        let context = Context::new().with_span(span);
        let now = SystemTime::now();
        self.tracer
            .span_builder("informer")
            .with_start_time(received)
            .start_with_context(&self.tracer, &context)
            .end_with_timestamp(routed);
        self.tracer
            .span_builder("route")
            .with_start_time(routed)
            .with_attributes([KeyValue::new("switchyard.route", about.route.to_string())])
            .start_with_context(&self.tracer, &context)
            .end_with_timestamp(now);
        EventTrace(Box::new(EventState {
            tracer: self.tracer.clone(),
            context,
            attributes,
            queued: now,
        }))
    }
}

/// What an event is about, for its span's attributes.
#[derive(Debug, Clone, Copy)]
pub struct About<'a> {
    /// The handler given the event.
    pub handler: &'a str,
    /// The route that gave it.
    pub route: &'a str,
    /// `added`, `updated`, `deleted` or `sync`.
    pub change: &'a str,
    /// The object's key: `namespace/name`, or `name` for a cluster-scoped object.
    pub object: &'a str,
    /// The object's resourceVersion.
    pub resource_version: &'a str,
    /// The object as JSON (its kind and uid are read from it).
    pub json: &'a str,
}

impl About<'_> {
    fn attributes(&self) -> Vec<KeyValue> {
        #[derive(serde::Deserialize, Default)]
        #[serde(default)]
        struct Meta {
            uid: String,
        }
        #[derive(serde::Deserialize, Default)]
        #[serde(default)]
        struct Head {
            kind: String,
            metadata: Meta,
        }
        let head: Head = serde_json::from_str(self.json).unwrap_or_default();
        let (namespace, name) = match self.object.split_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (None, self.object),
        };
        let mut attributes = vec![
            KeyValue::new("switchyard.handler", self.handler.to_string()),
            KeyValue::new("switchyard.route", self.route.to_string()),
            KeyValue::new("switchyard.change", self.change.to_string()),
            KeyValue::new("switchyard.object", self.object.to_string()),
            KeyValue::new("k8s.object.name", name.to_string()),
            KeyValue::new("k8s.object.kind", head.kind),
            KeyValue::new("k8s.object.uid", head.metadata.uid),
            KeyValue::new(
                "k8s.object.resource_version",
                self.resource_version.to_string(),
            ),
        ];
        if let Some(ns) = namespace {
            attributes.push(KeyValue::new("k8s.namespace.name", ns.to_string()));
        }
        attributes
    }
}

/// The trace of one event, carried with it through the handler's queue: its `event` span
/// is ended with the event's outcome. One pointer: an event not traced carries a `None` of
/// 8 bytes.
#[derive(Debug, Clone)]
pub struct EventTrace(Box<EventState>);

/// What an [`EventTrace`] holds.
#[derive(Debug, Clone)]
pub struct EventState {
    tracer: SdkTracer,
    context: Context,
    attributes: Arc<[KeyValue]>,
    /// When it last went into the queue.
    queued: SystemTime,
}

impl std::ops::Deref for EventTrace {
    type Target = EventState;

    fn deref(&self) -> &EventState {
        &self.0
    }
}

impl std::ops::DerefMut for EventTrace {
    fn deref_mut(&mut self) -> &mut EventState {
        &mut self.0
    }
}

impl EventTrace {
    /// A worker took the event: the `queue` span, from when it was queued to now.
    pub fn dequeued(&self, attempt: u32) {
        self.tracer
            .span_builder("queue")
            .with_start_time(self.queued)
            .with_attributes([KeyValue::new("switchyard.attempt", i64::from(attempt))])
            .start_with_context(&self.tracer, &self.context)
            .end();
    }

    /// The event went back into the queue (a retry): its next wait starts now.
    pub fn queued_again(&mut self) {
        self.queued = SystemTime::now();
    }

    /// Starts the `plugin.call` span of attempt `attempt`.
    pub fn call(&self, attempt: u32) -> CallTrace {
        let span = self
            .tracer
            .span_builder("plugin.call")
            .with_attributes([KeyValue::new("switchyard.attempt", i64::from(attempt))])
            .start_with_context(&self.tracer, &self.context);
        CallTrace {
            tracer: self.tracer.clone(),
            context: self.context.with_span(span),
        }
    }

    /// Ends the event's span with `outcome` (`done`, `requeue`, `dead_letter`,
    /// `coalesced`), as an error with `error` if one is given.
    pub fn end(&self, outcome: &'static str, error: Option<&str>) {
        end_span(&self.context, outcome, error);
    }

    /// The event was folded into an earlier one of the same object, whose trace goes on.
    pub fn coalesced(&self) {
        self.end("coalesced", None);
    }

    /// After a `requeue`: the trace of the event's next delivery, a new `event` span linked
    /// to this one, waiting in the queue from now.
    pub fn requeued(&self) -> EventTrace {
        self.end("requeue", None);
        let link =
            opentelemetry::trace::Link::with_context(self.context.span().span_context().clone());
        let span = self
            .tracer
            .span_builder("event")
            .with_kind(SpanKind::Consumer)
            .with_attributes(self.attributes.iter().cloned())
            .with_links(vec![link])
            .start(&self.tracer);
        EventTrace(Box::new(EventState {
            tracer: self.tracer.clone(),
            context: Context::new().with_span(span),
            attributes: self.attributes.clone(),
            queued: SystemTime::now(),
        }))
    }
}

/// The trace of one plugin call: the parent of what the call writes and sends.
#[derive(Debug, Clone)]
pub struct CallTrace {
    tracer: SdkTracer,
    context: Context,
}

impl CallTrace {
    /// Ends the call's span with `outcome` (`done`, `requeue`, `retry`, `dead_letter`), as
    /// an error with `error` if one is given.
    pub fn end(&self, outcome: &'static str, error: Option<&str>) {
        end_span(&self.context, outcome, error);
    }

    /// Starts the span of a Kubernetes write: `verb` (`apply`, `merge-patch`, `delete`,
    /// `create`) of `resource` `object`.
    pub fn write(&self, verb: &str, resource: &str, object: String) -> ChildSpan {
        let span = self
            .tracer
            .span_builder(format!("{verb} {resource}"))
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("switchyard.write.verb", verb.to_string()),
                KeyValue::new("switchyard.write.resource", resource.to_string()),
                KeyValue::new("switchyard.object", object),
            ])
            .start_with_context(&self.tracer, &self.context);
        ChildSpan(self.context.with_span(span))
    }

    /// Starts the span of an outbound request, `method` to `host`:`port`; its
    /// [`ChildSpan::traceparent`] goes out with the request.
    pub fn request(&self, method: &str, host: &str, port: Option<u16>) -> ChildSpan {
        let mut attributes = vec![
            KeyValue::new("http.request.method", method.to_string()),
            KeyValue::new("server.address", host.to_string()),
        ];
        if let Some(port) = port {
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
        let span = self
            .tracer
            .span_builder(method.to_string())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.context);
        ChildSpan(self.context.with_span(span))
    }
}

/// A Kubernetes write's or an outbound request's span, ended with its answer.
#[derive(Debug)]
pub struct ChildSpan(Context);

impl ChildSpan {
    /// The W3C `traceparent` naming this span as the parent: version 00, the trace id, the
    /// span id, sampled or not.
    pub fn traceparent(&self) -> String {
        let span = self.0.span();
        let context = span.span_context();
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    }

    /// Ends the span with the HTTP status the server answered, or the error that stopped
    /// the request before an answer.
    pub fn end(self, answer: Result<u16, &str>) {
        let span = self.0.span();
        match answer {
            Ok(code) => {
                span.set_attribute(KeyValue::new("http.response.status_code", i64::from(code)));
                if code >= 400 {
                    span.set_status(Status::error(format!("status {code}")));
                }
            }
            Err(error) => {
                span.set_attribute(KeyValue::new("error.type", error.to_string()));
                span.set_status(Status::error(crate::util::redact::redact_owned(
                    error.to_string(),
                )));
            }
        }
        span.end();
    }
}

/// Ends the span of `context` with `outcome`, as an error with `error` (redacted) if one is
/// given.
fn end_span(context: &Context, outcome: &'static str, error: Option<&str>) {
    let span = context.span();
    span.set_attribute(KeyValue::new("switchyard.outcome", outcome));
    if let Some(error) = error {
        span.set_status(Status::error(crate::util::redact::redact_owned(
            error.to_string(),
        )));
    }
    span.end();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_not_traced_carries_one_word() {
        assert_eq!(
            std::mem::size_of::<Option<EventTrace>>(),
            std::mem::size_of::<usize>()
        );
    }
}
