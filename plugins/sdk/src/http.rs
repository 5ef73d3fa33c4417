//! Outbound HTTP: requests to destinations the handler's `capabilities.http` allows, over
//! the standard `wasi:http` interface.
//!
//! ```ignore
//! use switchyard_sdk::http::Request;
//!
//! let response = Request::post("https://hooks.example.com/notify")
//!     .header("authorization", &format!("Bearer {token}"))
//!     .json(&serde_json::json!({"text": "a pod failed"}))
//!     .send()?;
//! if response.status >= 500 {
//!     return Err(format!("the receiver answered {}", response.status));
//! }
//! ```
//!
//! A request the allow-list refuses is [`Error::Denied`]; a timeout, a refused or dropped
//! connection is [`Error::Timeout`] or [`Error::Connection`]. Each converts into the
//! `String` error `handle` returns, so `?` makes the daemon retry the event with backoff
//! (and, after `max_retries`, keep it as a dead letter). Built natively for `cargo test`,
//! requests go to the [`crate::testing::TestHost`], which records them and answers with the
//! responses the test gave it.

use std::fmt;
use std::time::Duration;

/// An HTTP request to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The method: `GET`, `POST`, ...
    pub method: String,
    /// The absolute URL: `https://host[:port]/path?query`.
    pub url: String,
    /// Header names and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// How long to wait for the response's first byte; the daemon also bounds every wait
    /// by what is left of the call's `timeout`.
    pub timeout: Option<Duration>,
}

impl Request {
    /// A request with `method` to `url`, no headers, no body.
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.to_string(),
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        }
    }

    /// A `GET` request.
    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    /// A `POST` request.
    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    /// A `PUT` request.
    pub fn put(url: &str) -> Self {
        Self::new("PUT", url)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the body to `value` as JSON, with `content-type: application/json`.
    pub fn json(self, value: &serde_json::Value) -> Self {
        self.header("content-type", "application/json")
            .body(value.to_string())
    }

    /// Sets how long to wait for the response's first byte.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends the request and reads the whole response.
    pub fn send(self) -> Result<Response, Error> {
        #[cfg(target_arch = "wasm32")]
        return wasm::send(&self);
        #[cfg(not(target_arch = "wasm32"))]
        return crate::testing::host::http_send(self);
    }
}

/// Sends every request of `requests` at once (all in flight before any response is read)
/// and returns each one's response or error, in order. The daemon bounds how many requests
/// a call and a handler may have in flight (`outbound.max_in_flight`); past that a request
/// is refused with [`Error::Other`]. Natively (`cargo test`), they are sent one by one to the
/// [`crate::testing::TestHost`].
pub fn send_all(requests: Vec<Request>) -> Vec<Result<Response, Error>> {
    #[cfg(target_arch = "wasm32")]
    return wasm::send_all(&requests);
    #[cfg(not(target_arch = "wasm32"))]
    return requests
        .into_iter()
        .map(crate::testing::host::http_send)
        .collect();
}

/// A response, read whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names (lowercase) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A response with `status` and `body`, no headers.
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    /// The first value of the header `name` (any case).
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body's first `max` characters, for an error message.
    pub fn excerpt(&self, max: usize) -> String {
        let text = self.text();
        match text.char_indices().nth(max) {
            Some((i, _)) => format!("{}…", &text[..i]),
            None => text,
        }
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The response itself when its status is 2xx; otherwise the error for `handle` to
    /// return, so the daemon retries the event (and its dead letter says why): the status,
    /// the `Retry-After` header of a 429 or 503 that has one, and the body's first 200
    /// characters, as in `the receiver answered 503 (Retry-After: 30): maintenance`.
    pub fn error_for_status(self) -> Result<Response, String> {
        if self.is_success() {
            return Ok(self);
        }
        let mut message = format!("the receiver answered {}", self.status);
        if matches!(self.status, 429 | 503)
            && let Some(after) = self.header_value("retry-after")
        {
            message.push_str(&format!(" (Retry-After: {})", after.trim()));
        }
        let excerpt = self.excerpt(200);
        let excerpt = excerpt.trim();
        if !excerpt.is_empty() {
            message.push_str(&format!(": {excerpt}"));
        }
        // A 4xx will not get better by itself (a 429 will): no retries, a dead letter at once.
        if (400..500).contains(&self.status) && self.status != 429 {
            return Err(crate::permanent(&message));
        }
        Err(message)
    }

    /// The `Retry-After` header as a wait from now: a number of seconds, or an HTTP date
    /// (`Wed, 21 Oct 2015 07:28:00 GMT`; one in the past is no wait).
    pub fn retry_after(&self) -> Option<Duration> {
        let value = self.header_value("retry-after")?.trim();
        if let Ok(seconds) = value.parse::<u64>() {
            return Some(Duration::from_secs(seconds));
        }
        let at = http_date(value)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs();
        Some(Duration::from_secs(at.saturating_sub(now)))
    }

    /// How long to wait before sending the event again when the receiver asked to be left
    /// alone for a while: a 429 (after its `Retry-After`, or [`DEFAULT_RETRY_AFTER`]
    /// without one) and a 503 with a `Retry-After`; at most [`MAX_RETRY_AFTER`]. `None` for
    /// any other answer.
    ///
    /// Return it as `Outcome::RequeueAfter` rather than an error: the daemon then calls the
    /// plugin again after that wait, and the wait does not count toward the handler's
    /// `max_retries` (a receiver busy for a minute does not turn events into dead letters).
    pub fn retry_later(&self) -> Option<Duration> {
        let after = self.retry_after();
        let wait = match self.status {
            429 => after.unwrap_or(DEFAULT_RETRY_AFTER),
            503 => after?,
            _ => return None,
        };
        Some(wait.min(MAX_RETRY_AFTER))
    }
}

/// The wait after a 429 that has no `Retry-After` header.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The longest wait a `Retry-After` header gets: a receiver that asks for an hour is asked
/// again after this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Seconds since the Unix epoch of an HTTP date in the preferred format (RFC 9110's
/// IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date(text: &str) -> Option<u64> {
    let (_, rest) = text.split_once(", ")?;
    let parts: Vec<&str> = rest.split(' ').collect();
    let [day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| m == month)? as i64
        + 1;
    let (day, year): (i64, i64) = (day.parse().ok()?, year.parse().ok()?);
    let hms: Vec<u64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [h, m, sec] = hms.as_slice() else {
        return None;
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(days * 86_400 + h * 3600 + m * 60 + sec)
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// The handler's `capabilities.http` does not allow the destination, or its address
    /// is refused (loopback, link-local, ...).
    Denied(String),
    /// No response within the request's timeout or the call's deadline.
    Timeout(String),
    /// The connection could not be made or was dropped (refused, reset, DNS, TLS).
    Connection(String),
    /// The response's body is larger than the handler's `outbound.max_response_body`, or
    /// the request's larger than `outbound.max_request_body`.
    TooLarge(String),
    /// Anything else: an invalid URL or header, a protocol error.
    Other(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Denied(m) => write!(f, "request refused: {m}"),
            Error::Timeout(m) => write!(f, "request timed out: {m}"),
            Error::Connection(m) => write!(f, "connection failed: {m}"),
            Error::TooLarge(m) => write!(f, "too large: {m}"),
            Error::Other(m) => write!(f, "request failed: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// Whether the request's own body was too large for the handler's
    /// `outbound.max_request_body`: no retry can help that.
    pub fn is_request_too_large(&self) -> bool {
        matches!(self, Error::TooLarge(m) if m.starts_with("HttpRequestBodySize"))
    }

    /// The handler's `outbound.max_request_body` in bytes, when the error is a request
    /// too large and names it (`HttpRequestBodySize(Some(1048576))`).
    pub fn request_body_limit(&self) -> Option<usize> {
        let Error::TooLarge(m) = self else {
            return None;
        };
        let digits = m.strip_prefix("HttpRequestBodySize(Some(")?;
        let end = digits.find(|c: char| !c.is_ascii_digit())?;
        digits[..end].parse().ok()
    }
}

/// The error `handle` returns: [`Error`]'s text, made [`crate::permanent`] for a request
/// too large (saying which limit to raise), which no retry can send.
impl From<Error> for String {
    fn from(error: Error) -> Self {
        if error.is_request_too_large() {
            return crate::permanent(&format!(
                "{error}: the request body is larger than the handler's \
                 outbound.max_request_body; raise that limit, or send less"
            ));
        }
        error.to_string()
    }
}

/// The URL's scheme, authority and path with query; an error for anything not
/// `http(s)://authority[/path]`. (Built natively, only the tests use it.)
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) fn split_url(url: &str) -> Result<(&str, &str, &str), Error> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| Error::Other(format!("{url:?} is not an absolute URL")))?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() {
        return Err(Error::Other(format!("{url:?} names no host")));
    }
    Ok((scheme, authority, if path.is_empty() { "/" } else { path }))
}

#[cfg(target_arch = "wasm32")]
mod wasm {
    use super::{Error, Request, Response, split_url};
    use crate::bindings::wasi::http::outgoing_handler;
    use crate::bindings::wasi::http::types::{
        ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions,
        Scheme,
    };
    use crate::bindings::wasi::io::streams::StreamError;

    /// What the host's error code means for the plugin.
    fn error(code: ErrorCode) -> Error {
        let text = format!("{code:?}");
        let text = text.trim_start_matches("ErrorCode::").to_string();
        match code {
            ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => Error::Denied(
                format!("{text} (see the handler's capabilities.http in the daemon's config)"),
            ),
            ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::ConnectionWriteTimeout
            | ErrorCode::HttpResponseTimeout
            | ErrorCode::DnsTimeout => Error::Timeout(text),
            ErrorCode::HttpRequestBodySize(_) | ErrorCode::HttpResponseBodySize(_) => {
                Error::TooLarge(text)
            }
            ErrorCode::ConnectionRefused
            | ErrorCode::ConnectionTerminated
            | ErrorCode::ConnectionLimitReached
            | ErrorCode::DnsError(_)
            | ErrorCode::DestinationNotFound
            | ErrorCode::DestinationUnavailable
            | ErrorCode::DestinationIpUnroutable
            | ErrorCode::TlsProtocolError
            | ErrorCode::TlsCertificateError
            | ErrorCode::TlsAlertReceived(_) => Error::Connection(text),
            _ => Error::Other(text),
        }
    }

    fn method(name: &str) -> Method {
        match name.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            other => Method::Other(other.to_string()),
        }
    }

    /// A request sent, its response not read yet.
    pub(super) struct Started {
        pending: crate::bindings::wasi::http::types::FutureIncomingResponse,
        finished: Result<(), Error>,
    }

    pub(super) fn send(request: &Request) -> Result<Response, Error> {
        finish(start(request)?)
    }

    /// Sends every request before reading any response: they are in flight together.
    pub(super) fn send_all(requests: &[Request]) -> Vec<Result<Response, Error>> {
        let started: Vec<Result<Started, Error>> = requests.iter().map(start).collect();
        started.into_iter().map(|s| s.and_then(finish)).collect()
    }

    /// Sends `request` and writes its body; the response is read by [`finish`].
    fn start(request: &Request) -> Result<Started, Error> {
        let (scheme, authority, path) = split_url(&request.url)?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            other => Scheme::Other(other.to_string()),
        };
        let entries: Vec<(String, Vec<u8>)> = request
            .headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec()))
            .collect();
        let headers = Fields::from_list(&entries)
            .map_err(|e| Error::Other(format!("header refused: {e:?}")))?;
        let outgoing = OutgoingRequest::new(headers);
        let invalid = |what: &str| Error::Other(format!("invalid {what} in {:?}", request.url));
        outgoing
            .set_method(&method(&request.method))
            .map_err(|()| invalid("method"))?;
        outgoing
            .set_scheme(Some(&scheme))
            .map_err(|()| invalid("scheme"))?;
        outgoing
            .set_authority(Some(authority))
            .map_err(|()| invalid("host"))?;
        outgoing
            .set_path_with_query(Some(path))
            .map_err(|()| invalid("path"))?;
        let body = outgoing.body().map_err(|()| invalid("body"))?;
        let options = request.timeout.map(|t| {
            let options = RequestOptions::new();
            let _ = options.set_first_byte_timeout(Some(t.as_nanos() as u64));
            options
        });
        let pending = outgoing_handler::handle(outgoing, options).map_err(error)?;
        // A request the host refuses or fails stops reading the body: the write then fails,
        // and the host's answer (below) says why.
        let written = {
            let stream = body.write().map_err(|()| invalid("body"))?;
            request
                .body
                .chunks(4096)
                .try_for_each(|chunk| stream.blocking_write_and_flush(chunk))
        };
        let finished = match written {
            Ok(()) => OutgoingBody::finish(body, None).map_err(error),
            Err(e) => Err(Error::Connection(format!("writing the body: {e:?}"))),
        };
        Ok(Started { pending, finished })
    }

    /// Waits for a started request's response and reads it whole.
    fn finish(started: Started) -> Result<Response, Error> {
        let Started { pending, finished } = started;
        pending.subscribe().block();
        let response = pending
            .get()
            .ok_or_else(|| Error::Other("the response never arrived".into()))?
            .map_err(|()| Error::Other("the response was taken twice".into()))?
            .map_err(error)?;
        finished?;
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(n, v)| (n, String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let incoming = response
            .consume()
            .map_err(|()| Error::Other("the body was taken twice".into()))?;
        let mut bytes = Vec::new();
        {
            let stream = incoming
                .stream()
                .map_err(|()| Error::Other("the body was taken twice".into()))?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => bytes.extend_from_slice(&chunk),
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        let detail = e.to_debug_string();
                        return Err(
                            match crate::bindings::wasi::http::types::http_error_code(&e) {
                                Some(code) => error(code),
                                None => Error::Connection(format!("reading the body: {detail}")),
                            },
                        );
                    }
                }
            }
        }
        IncomingBody::finish(incoming);
        Ok(Response {
            status,
            headers,
            body: bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        assert_eq!(
            split_url("https://hooks.example.com/a/b?c=d").unwrap(),
            ("https", "hooks.example.com", "/a/b?c=d")
        );
        assert_eq!(
            split_url("http://127.0.0.1:8080").unwrap(),
            ("http", "127.0.0.1:8080", "/")
        );
        assert_eq!(split_url("http://h?x=1").unwrap(), ("http", "h", "?x=1"));
        assert!(split_url("hooks.example.com/x").is_err());
        assert!(split_url("http:///x").is_err());
    }

    #[test]
    fn retry_after_and_excerpts_read_from_the_response() {
        let r = Response::new(503, "x".repeat(300)).header("Retry-After", "7");
        assert_eq!(r.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(r.retry_later(), Some(Duration::from_secs(7)));
        let dated = |date: &str| Response::new(429, "").header("retry-after", date);
        assert_eq!(
            dated("Sun, 06 Nov 1994 08:49:37 GMT").retry_after(),
            Some(Duration::ZERO)
        );
        assert_eq!(
            http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            http_date("Tue, 29 Feb 2028 23:59:59 GMT"),
            Some(1_835_481_599)
        );
        assert_eq!(http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        let future = dated("Fri, 01 Jan 2100 00:00:00 GMT");
        assert_eq!(future.retry_later(), Some(MAX_RETRY_AFTER));
        assert_eq!(
            Response::new(429, "").retry_later(),
            Some(DEFAULT_RETRY_AFTER)
        );
        assert_eq!(Response::new(503, "").retry_later(), None);
        assert_eq!(
            Response::new(500, "")
                .header("retry-after", "3")
                .retry_later(),
            None
        );
        assert_eq!(r.excerpt(5), "xxxxx…");
        assert!(!r.is_success());
    }

    #[test]
    fn a_status_other_than_2xx_is_an_error_naming_it() {
        let ok = Response::new(204, "");
        assert_eq!(ok.clone().error_for_status(), Ok(ok));
        assert_eq!(
            Response::new(503, "maintenance\n")
                .header("Retry-After", "30")
                .error_for_status(),
            Err("the receiver answered 503 (Retry-After: 30): maintenance".into())
        );
        assert_eq!(
            Response::new(429, "").error_for_status(),
            Err("the receiver answered 429".into())
        );
        // Retry-After is mentioned only where it means "come back later".
        let error = Response::new(400, "y".repeat(500))
            .header("retry-after", "5")
            .error_for_status()
            .unwrap_err();
        assert_eq!(
            error,
            format!("permanent: the receiver answered 400: {}…", "y".repeat(200))
        );
        assert!(Response::new(302, "").error_for_status().is_err());
    }

    #[test]
    fn a_request_too_large_is_permanent_and_names_the_limit() {
        let error = String::from(Error::TooLarge("HttpRequestBodySize(Some(1048576))".into()));
        assert!(
            error.starts_with("permanent: too large: HttpRequestBodySize"),
            "{error}"
        );
        assert!(error.contains("outbound.max_request_body"), "{error}");
        let response = String::from(Error::TooLarge("HttpResponseBodySize(Some(9))".into()));
        assert_eq!(response, "too large: HttpResponseBodySize(Some(9))");
    }

    #[test]
    fn a_request_too_large_names_its_limit_when_the_host_gives_it() {
        let limit = |text: &str| Error::TooLarge(text.into()).request_body_limit();
        assert_eq!(limit("HttpRequestBodySize(Some(1048576))"), Some(1_048_576));
        assert_eq!(limit("HttpRequestBodySize(None)"), None);
        assert_eq!(limit("HttpResponseBodySize(Some(9))"), None);
        assert_eq!(Error::Other("x".into()).request_body_limit(), None);
    }
}
