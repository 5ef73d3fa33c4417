//! One outbound request, from the plugin's `wasi:http` request to its response: the policy
//! checks, the caps, the deadline, capture, metrics (see the module docs of `outbound`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use super::Outbound;
use super::client::AddressRefused;
use crate::config::HttpScheme;
use crate::metrics::{OutboundLabel, OutboundRefusedLabel};
use crate::plugin::imports::HostContext;
use crate::plugin::imports::capture::CapturedRequest;

/// What `send_request` returns: the response and a future that reports errors of the
/// connection after it (the pooled client drives its connections itself, so it is done).
pub type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

/// Sends a plugin's request for the handler of `context`, within `deadline` (see the
/// module docs of `outbound` for the checks), with `traceparent` unless the plugin set one.
pub async fn send(
    context: Arc<HostContext>,
    deadline: Instant,
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    traceparent: Option<String>,
) -> Result<Sent, Error> {
    let uri = request.uri().clone();
    let scheme = uri
        .scheme_str()
        .and_then(HttpScheme::parse)
        .ok_or(Error::HttpProtocolError)?;
    let host = uri
        .host()
        .ok_or(Error::HttpRequestUriInvalid)?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(scheme.default_port());
    let dest = destination(scheme, &host, port);
    let Some(outbound) = context.outbound().cloned() else {
        tracing::warn!(handler = %context.handler(), host = %dest, "outbound request refused: the handler has no capabilities.http");
        return Err(Error::HttpRequestDenied);
    };
    outbound.check(scheme, &host, port, &dest)?;
    let (mut parts, body) = request.into_parts();
    let body = read_body(&outbound, body, deadline).await?;
    if let Some(capture) = context.capture() {
        capture.record_request(CapturedRequest::new(&parts, &body));
        if context.capturing().is_some() {
            return Ok(stub(outbound.spec.capture_status));
        }
    }
    // Added as the request leaves: a capture holds the request as the plugin made it.
    if let Some(value) = traceparent.and_then(|t| http::HeaderValue::try_from(t).ok()) {
        parts.headers.entry("traceparent").or_insert(value);
    }
    let started = Instant::now();
    let result = outbound.execute(parts, body, options, deadline).await;
    let code = match &result {
        Ok(response) => response.status().as_u16().to_string(),
        Err(e) => error_code(e).to_string(),
    };
    let failed = result
        .as_ref()
        .map_or(true, |r| r.status().is_server_error());
    outbound.made(&dest, &code, started.elapsed(), failed);
    let response = result?;
    let between = clamp(options.and_then(|o| o.between_bytes_timeout), deadline);
    Ok((
        response.map(|body| capped(outbound.clone(), body, between, deadline)),
        Box::new(async { Ok(()) }),
    ))
}

/// `scheme://host:port`, IPv6 hosts in brackets.
fn destination(scheme: HttpScheme, host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("{}://[{host}]:{port}", scheme.as_str())
    } else {
        format!("{}://{host}:{port}", scheme.as_str())
    }
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
        Error::DnsError { .. } => "dns",
        Error::ConnectionRefused | Error::ConnectionTerminated => "connection",
        _ => "error",
    }
}

impl Outbound {
    /// The policy checks before anything is sent: the allow-list, and an IP literal's
    /// address class.
    fn check(&self, scheme: HttpScheme, host: &str, port: u16, dest: &str) -> Result<(), Error> {
        if !self.spec.egress.allows(scheme, host, port) {
            self.stats.refused(dest);
            self.refuse(dest, "not_allowed", || {
                format!(
                    "outbound request to {dest} refused: it is not on the allow-list; add it to handlers.{}.capabilities.http",
                    self.handler
                )
            });
            return Err(Error::HttpRequestDenied);
        }
        if let Ok(ip) = host.parse::<IpAddr>()
            && let Err(class) = self.spec.egress.address(ip)
        {
            self.stats.refused(dest);
            self.refuse(dest, class.as_str(), || {
                format!(
                    "outbound request to {dest} refused: {ip} is a {} address; name it in handlers.{}.capabilities.http to allow it",
                    class.as_str(),
                    self.handler
                )
            });
            return Err(Error::DestinationIpProhibited);
        }
        Ok(())
    }

    /// Sends the request and waits for the response's head, within the first-byte timeout
    /// (clamped to the deadline).
    async fn execute(
        &self,
        mut parts: http::request::Parts,
        body: Bytes,
        options: Option<RequestOptions>,
        deadline: Instant,
    ) -> Result<http::Response<reqwest::Body>, Error> {
        parts.headers.remove(http::header::HOST);
        let url = reqwest::Url::parse(&parts.uri.to_string())
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        let mut request = reqwest::Request::new(parts.method, url);
        *request.headers_mut() = parts.headers;
        *request.body_mut() = Some(body.into());
        let client = self.client().map_err(|e| {
            tracing::error!(handler = %self.handler, error = %e, "outbound request failed: the HTTP client cannot be built");
            Error::ConfigurationError
        })?;
        let wait = clamp(options.and_then(|o| o.first_byte_timeout), deadline);
        let response = tokio::time::timeout(wait, client.execute(request))
            .await
            .map_err(|_| Error::ConnectionReadTimeout)?
            .map_err(|e| self.failed(&e))?;
        Ok(response.into())
    }

    /// The `wasi:http` error for a failed request, counting a refused address.
    fn failed(&self, error: &reqwest::Error) -> Error {
        let causes = causes(error);
        if let Some(refused) = causes
            .iter()
            .find_map(|e| e.downcast_ref::<AddressRefused>())
        {
            self.refuse(&refused.host, refused.class.as_str(), || {
                format!(
                    "outbound request refused: {refused}; name the address in handlers.{}.capabilities.http to allow it",
                    self.handler
                )
            });
            return Error::DestinationIpProhibited;
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
        let kinds = causes
            .iter()
            .filter_map(|e| e.downcast_ref::<std::io::Error>())
            .map(std::io::Error::kind);
        for kind in kinds {
            match kind {
                std::io::ErrorKind::ConnectionRefused => return Error::ConnectionRefused,
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::UnexpectedEof => return Error::ConnectionTerminated,
                _ => {}
            }
        }
        tracing::debug!(handler = %self.handler, error = %crate::util::chain_text(error), "outbound request failed");
        if error.is_timeout() {
            Error::ConnectionTimeout
        } else if error.is_connect() {
            Error::ConnectionRefused
        } else {
            Error::HttpProtocolError
        }
    }

    /// Counts a request made.
    fn made(&self, dest: &str, code: &str, took: Duration, failed: bool) {
        let label = OutboundLabel {
            handler: self.handler.to_string(),
            host: dest.to_string(),
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
        self.stats.made(dest, took, failed);
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

/// The response body as the plugin reads it: at most the handler's cap (past it the read
/// fails with `HTTP-response-body-size`), each chunk within `between` of the last and all
/// within the deadline.
fn capped(
    outbound: Arc<Outbound>,
    body: reqwest::Body,
    between: Duration,
    deadline: Instant,
) -> WasiBody {
    struct Reading {
        body: reqwest::Body,
        read: u64,
        between: Duration,
        deadline: Instant,
        outbound: Arc<Outbound>,
    }
    let start = Reading {
        body,
        read: 0,
        between,
        deadline,
        outbound,
    };
    let frames = futures::stream::unfold(Some(start), |state| async move {
        let mut s = state?;
        let until = (Instant::now() + s.between).min(s.deadline);
        let next = tokio::time::timeout_at(until.into(), s.body.frame()).await;
        let frame = match next {
            Err(_) => return Some((Err(Error::ConnectionReadTimeout), None)),
            Ok(None) => return None,
            Ok(Some(Err(e))) => return Some((Err(s.outbound.failed(&e)), None)),
            Ok(Some(Ok(frame))) => frame,
        };
        let max = s.outbound.spec.max_response_body;
        if let Some(data) = frame.data_ref() {
            s.read += data.len() as u64;
            if s.read > max {
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
        Some((Ok(frame), Some(s)))
    });
    http_body_util::StreamBody::new(frames).boxed_unsync()
}
