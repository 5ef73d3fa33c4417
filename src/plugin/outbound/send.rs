//! One outbound request, from the plugin's `wasi:http` request to its response: the policy
//! checks, the caps, the deadline, capture, metrics (see the module docs of `outbound`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use super::connector::ConnectError;
use super::{MAX_IN_FLIGHT_PER_CALL, Outbound};
use crate::config::egress::Destination;
use crate::metrics::{OutboundLabel, OutboundRefusedLabel};
use crate::plugin::imports::HostContext;
use crate::plugin::imports::capture::CapturedRequest;

/// What `send_request` returns: the response and a future that reports errors of the
/// connection after it (the pooled client drives its connections itself, so it is done).
pub type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

/// What a request's `traceparent` names as its parent.
pub enum Parent {
    /// The value derived from the event ([`super::trace`]), if any: no traces are sent.
    Derived(Option<String>),
    /// The plugin call's span: the request gets a span of its own under it, named in the
    /// header.
    Span(crate::traces::CallTrace),
}

/// Sends a plugin's request for the handler of `context`, within `deadline` (see the
/// module docs of `outbound` for the checks), with a `traceparent` naming `parent` unless
/// the plugin set one; `call` bounds the requests the call has in flight.
pub async fn send(
    context: Arc<HostContext>,
    deadline: Instant,
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    parent: Parent,
    call: Arc<Semaphore>,
) -> Result<Sent, Error> {
    // One reading of the URL, by the parser the connector uses: the allow-list is matched
    // on what will be connected to, and the request goes out with that URL.
    let url =
        url::Url::parse(&request.uri().to_string()).map_err(|_| Error::HttpRequestUriInvalid)?;
    let dest = Destination::of(&url).map_err(|_| Error::HttpRequestUriInvalid)?;
    let canonical: http::Uri = url
        .as_str()
        .parse()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    let (mut parts, body) = request.into_parts();
    parts.uri = canonical;
    let Some(outbound) = context.outbound().cloned() else {
        // The body is read before the refusal, as below.
        let _ = tokio::time::timeout(
            clamp(None, deadline),
            http_body_util::Limited::new(body, 1 << 20).collect(),
        )
        .await;
        let host = crate::util::redact::redact_owned(dest.to_string());
        tracing::warn!(handler = %context.handler(), host, "outbound request refused: the handler has no capabilities.http");
        return Err(Error::HttpRequestDenied);
    };
    // The body is read (up to its cap) before any refusal: a guest still writing it would
    // otherwise see its write fail before the refusal, which some languages' runtimes
    // (JavaScript's `fetch`) turn into a trap instead of the error value.
    let body = read_body(&outbound, body, deadline).await?;
    let entry = outbound.check(&dest)?;
    let permits = outbound.admit(&call, &entry)?;
    if let Some(capture) = context.capture() {
        capture.record_request(CapturedRequest::new(&parts, &body));
        if context.capturing().is_some() {
            return Ok(stub(outbound.spec.capture_status));
        }
    }
    // Added as the request leaves: a capture holds the request as the plugin made it.
    let (span, traceparent) = match parent {
        Parent::Derived(traceparent) => (None, traceparent),
        Parent::Span(call) => {
            let span = call.request(
                parts.method.as_str(),
                &dest.host.to_string(),
                Some(dest.port),
            );
            let traceparent = span.traceparent();
            (Some(span), Some(traceparent))
        }
    };
    if let Some(value) = traceparent.and_then(|t| http::HeaderValue::try_from(t).ok()) {
        parts.headers.entry("traceparent").or_insert(value);
    }
    let started = Instant::now();
    let result = outbound.execute(parts, body, options, deadline).await;
    let code = match &result {
        Ok(response) => response.status().as_u16().to_string(),
        Err(e) => error_code(e).to_string(),
    };
    if let Some(span) = span {
        span.end(
            result
                .as_ref()
                .map(|r| r.status().as_u16())
                .map_err(|e| error_code(e)),
        );
    }
    let failed = result
        .as_ref()
        .map_or(true, |r| r.status().is_server_error());
    outbound.made(&entry, &code, started.elapsed(), failed);
    let response = result?;
    let between = clamp(options.and_then(|o| o.between_bytes_timeout), deadline);
    let reading = Reading {
        outbound: outbound.clone(),
        between,
        deadline,
        _permits: permits,
    };
    Ok((
        response.map(|body| capped(body, reading)),
        Box::new(async { Ok(()) }),
    ))
}

/// The shorter of `wanted` and what is left until `deadline`.
fn clamp(wanted: Option<Duration>, deadline: Instant) -> Duration {
    let left = deadline.saturating_duration_since(Instant::now());
    wanted.map_or(left, |w| w.min(left))
}

/// A response for a request that is recorded, not sent.
fn stub(status: u16) -> Sent {
    let body = http_body_util::Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = http::Response::new(body);
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    (response, Box::new(async { Ok(()) }))
}

/// The label a failed request is counted under.
fn error_code(error: &Error) -> &'static str {
    match error {
        Error::ConnectionTimeout | Error::ConnectionReadTimeout | Error::HttpResponseTimeout => {
            "timeout"
        }
        Error::DestinationIpProhibited => "refused",
        Error::TlsCertificateError | Error::TlsProtocolError => "tls",
        Error::DnsError { .. } | Error::DestinationNotFound => "dns",
        Error::ConnectionRefused | Error::ConnectionTerminated => "connection",
        Error::InternalError(_) => "resources",
        _ => "error",
    }
}

/// The permits a request holds while it is in flight: one of its call's and one of its
/// handler's. Dropped when its response body is read to the end or dropped.
pub(super) struct Permits {
    _call: OwnedSemaphorePermit,
    _handler: OwnedSemaphorePermit,
}

impl Outbound {
    /// The policy check before anything is sent: the allow-list. Returns the entry that
    /// allows the request, as written in short: requests are counted under it, never under
    /// a host that may have come from a Secret.
    fn check(&self, dest: &Destination) -> Result<String, Error> {
        if let Some(rule) = self.spec.egress.rules.iter().find(|r| r.allows(dest)) {
            return Ok(rule.to_string());
        }
        self.stats.refused(NOT_ALLOWED);
        self.refuse(&dest.to_string(), "not_allowed", || {
            format!(
                "outbound request to {dest} refused: it is not on the allow-list; add it to handlers.{}.capabilities.http",
                self.handler
            )
        });
        Err(Error::HttpRequestDenied)
    }

    /// Admits a request within the call's and the handler's bounds on requests in flight;
    /// past either the request is refused (`too_many_requests`), never queued.
    fn admit(&self, call: &Arc<Semaphore>, entry: &str) -> Result<Permits, Error> {
        let permits = call
            .clone()
            .try_acquire_owned()
            .ok()
            .zip(self.in_flight.clone().try_acquire_owned().ok());
        let Some((call, handler)) = permits else {
            self.stats.refused(entry);
            self.refuse(entry, "too_many_requests", || {
                format!(
                    "outbound request to {entry} refused: more than {MAX_IN_FLIGHT_PER_CALL} requests of one call or {} of handler {} in flight",
                    self.spec.max_in_flight, self.handler
                )
            });
            return Err(Error::InternalError(Some(
                "too many outbound requests in flight".into(),
            )));
        };
        Ok(Permits {
            _call: call,
            _handler: handler,
        })
    }

    /// Sends the request and waits for the response's head, within the first-byte timeout
    /// (clamped to the deadline).
    async fn execute(
        &self,
        mut parts: http::request::Parts,
        body: Bytes,
        options: Option<RequestOptions>,
        deadline: Instant,
    ) -> Result<http::Response<hyper::body::Incoming>, Error> {
        parts.headers.remove(http::header::HOST);
        let request = http::Request::from_parts(parts, Full::new(body));
        let client = self.client().map_err(|e| {
            tracing::error!(handler = %self.handler, error = %e, "outbound request failed: the HTTP client cannot be built");
            Error::ConfigurationError
        })?;
        let wait = clamp(options.and_then(|o| o.first_byte_timeout), deadline);
        tokio::time::timeout(wait, client.send(request))
            .await
            .map_err(|_| Error::ConnectionReadTimeout)?
            .map_err(|e| self.failed(&e))
    }

    /// The `wasi:http` error for a failed request, counting a refused address.
    fn failed(&self, error: &(dyn std::error::Error + 'static)) -> Error {
        let causes = causes(error);
        if let Some(connect) = causes.iter().find_map(|e| e.downcast_ref::<ConnectError>()) {
            return self.connect_failed(connect);
        }
        if let Some(tls) = causes
            .iter()
            .find_map(|e| e.downcast_ref::<rustls::Error>())
        {
            return match tls {
                rustls::Error::InvalidCertificate(_) => Error::TlsCertificateError,
                _ => Error::TlsProtocolError,
            };
        }
        if causes
            .iter()
            .filter_map(|e| e.downcast_ref::<hyper::Error>())
            .any(|e| e.is_incomplete_message() || e.is_closed() || e.is_canceled())
        {
            return Error::ConnectionTerminated;
        }
        if let Some(kind) = causes
            .iter()
            .filter_map(|e| e.downcast_ref::<std::io::Error>())
            .find_map(io_error)
        {
            return kind;
        }
        let text = crate::util::redact::redact_owned(crate::util::chain_text(error));
        tracing::debug!(handler = %self.handler, error = %text, "outbound request failed");
        Error::HttpProtocolError
    }

    /// The `wasi:http` error for a connection the connector did not open.
    fn connect_failed(&self, error: &ConnectError) -> Error {
        match error {
            ConnectError::Refused { host, class, .. } => {
                self.refuse(host, class.as_str(), || {
                    format!(
                        "outbound request refused: {error}; name the address (with its port) in handlers.{}.capabilities.http to allow it",
                        self.handler
                    )
                });
                Error::DestinationIpProhibited
            }
            ConnectError::Dns { source, .. } => {
                let unknown = source.kind() == std::io::ErrorKind::NotFound
                    || source.to_string().contains("not known");
                Error::DnsError {
                    rcode: unknown.then(|| "NXDOMAIN".to_string()),
                    info_code: None,
                }
            }
            ConnectError::Timeout(_) => Error::ConnectionTimeout,
            ConnectError::Io { source, .. } => io_error(source).unwrap_or(Error::ConnectionRefused),
            ConnectError::Uri(_) => Error::HttpRequestUriInvalid,
            ConnectError::Tunnel(_) => Error::ConnectionRefused,
        }
    }

    /// Counts a request made, under the allow-list entry that let it through.
    fn made(&self, entry: &str, code: &str, took: Duration, failed: bool) {
        let label = OutboundLabel {
            handler: self.handler.to_string(),
            host: entry.to_string(),
            code: code.to_string(),
        };
        self.families.requests.get_or_create(&label).inc();
        self.families
            .duration
            .get_or_create(&crate::metrics::OutboundHostLabel {
                handler: label.handler,
                host: label.host,
            })
            .observe(took.as_secs_f64());
        self.stats.made(entry, took, failed);
    }
}

/// What requests refused as not on the allow-list are counted under in `/status`.
const NOT_ALLOWED: &str = "(not on the allow-list)";

/// The `wasi:http` error an I/O error stands for, if it says something specific.
fn io_error(error: &std::io::Error) -> Option<Error> {
    if error.raw_os_error() == Some(libc::EMFILE) || error.raw_os_error() == Some(libc::ENFILE) {
        return Some(Error::InternalError(Some(
            "the daemon has no file descriptors left".into(),
        )));
    }
    match error.kind() {
        std::io::ErrorKind::ConnectionRefused => Some(Error::ConnectionRefused),
        std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::ConnectionAborted
        | std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::UnexpectedEof => Some(Error::ConnectionTerminated),
        std::io::ErrorKind::TimedOut => Some(Error::ConnectionTimeout),
        _ => None,
    }
}

/// An error's causes, outermost first, with the errors I/O errors wrap (an I/O error's
/// `source` skips the error it holds, and TLS failures come wrapped twice).
fn causes<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Vec<&'a (dyn std::error::Error + 'static)> {
    let mut found = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        found.push(e);
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    found
}

/// Reads the plugin's request body, up to the handler's cap and within the deadline.
async fn read_body(outbound: &Outbound, body: WasiBody, deadline: Instant) -> Result<Bytes, Error> {
    let max = outbound.spec.max_request_body;
    let limited = http_body_util::Limited::new(body, usize::try_from(max).unwrap_or(usize::MAX));
    let collected = tokio::time::timeout(clamp(None, deadline), limited.collect())
        .await
        .map_err(|_| Error::ConnectionWriteTimeout)?;
    match collected {
        Ok(body) => Ok(body.to_bytes()),
        Err(e) => match e.downcast::<Error>() {
            Ok(e) => Err(*e),
            Err(_) => {
                outbound
                    .families
                    .refused
                    .get_or_create(&OutboundRefusedLabel {
                        handler: outbound.handler.to_string(),
                        reason: "request_body_too_large".into(),
                    })
                    .inc();
                Err(Error::HttpRequestBodySize(Some(max)))
            }
        },
    }
}

/// What reading a response body needs: the handler's caps, the waits, and the permits the
/// request holds until its body is done.
struct Reading {
    outbound: Arc<Outbound>,
    between: Duration,
    deadline: Instant,
    _permits: Permits,
}

/// The response body as the plugin reads it: at most the handler's cap (past it the read
/// fails with `HTTP-response-body-size`), each chunk within `between` of the last and all
/// within the deadline.
fn capped(body: hyper::body::Incoming, reading: Reading) -> WasiBody {
    let frames = futures::stream::unfold(Some((body, reading, 0u64)), |state| async move {
        let (mut body, s, mut read) = state?;
        let until = (Instant::now() + s.between).min(s.deadline);
        let next = tokio::time::timeout_at(until.into(), body.frame()).await;
        let frame = match next {
            Err(_) => return Some((Err(Error::ConnectionReadTimeout), None)),
            Ok(None) => return None,
            Ok(Some(Err(e))) => return Some((Err(s.outbound.failed(&e)), None)),
            Ok(Some(Ok(frame))) => frame,
        };
        let max = s.outbound.spec.max_response_body;
        if let Some(data) = frame.data_ref() {
            read += data.len() as u64;
            if read > max {
                s.outbound
                    .families
                    .refused
                    .get_or_create(&OutboundRefusedLabel {
                        handler: s.outbound.handler.to_string(),
                        reason: "response_body_too_large".into(),
                    })
                    .inc();
                return Some((Err(Error::HttpResponseBodySize(Some(max))), None));
            }
        }
        Some((Ok(frame), Some((body, s, read))))
    });
    http_body_util::StreamBody::new(frames).boxed_unsync()
}
