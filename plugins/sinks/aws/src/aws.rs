//! One signed call to an AWS API and what its answer means: done, come back later
//! (throttled), or failed (retried, or permanent for a refusal no retry changes), with
//! AWS's error code and message in the error.

use std::cell::Cell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sigv4::{Credentials, Scope};
use switchyard_sdk::http::{MAX_RETRY_AFTER, Request, Response};

/// The protocol of an API: how its requests are framed and its errors written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `application/x-www-form-urlencoded` with `Action=…`; XML answers (SNS, STS).
    Query,
    /// `application/x-amz-json-1.0` with `X-Amz-Target` (SQS).
    Json10(&'static str),
    /// `application/x-amz-json-1.1` with `X-Amz-Target` (EventBridge, Firehose, Logs).
    Json11(&'static str),
}

/// Where and how to call.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// `https://host[:port][/path]`.
    pub endpoint: &'a str,
    /// The region and the service's signing name.
    pub scope: Scope<'a>,
    /// The API's protocol.
    pub protocol: Protocol,
}

/// Why a call did not succeed.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// AWS asked to slow down (a throttling code, 429, 503): send again after the wait.
    Throttled(Duration),
    /// AWS refused: the status, its error code and message.
    Refused(AwsError),
    /// No answer (a timeout, a refused connection, the allow-list): the SDK's error.
    Failed(String),
    /// The request's body is larger than the handler's `outbound.max_request_body`: the
    /// limit when the host names it, and the SDK's error (permanent, naming the setting).
    TooLarge(Option<usize>, String),
}

/// An error AWS answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsError {
    /// The HTTP status.
    pub status: u16,
    /// The error code: `QueueDoesNotExist`, `ResourceNotFoundException`, ...
    pub code: String,
    /// The message.
    pub message: String,
}

impl AwsError {
    /// The error for `handle`: permanent for a 4xx, which no retry changes, except for
    /// credentials that expired (new ones are fetched on the next call).
    pub fn into_error(self) -> String {
        let text = format!(
            "AWS answered {} {}: {}",
            self.status, self.code, self.message
        );
        let expired = ["ExpiredToken", "ExpiredTokenException", "RequestExpired"]
            .contains(&self.code.as_str());
        if (400..500).contains(&self.status) && !expired {
            switchyard_sdk::permanent(&text)
        } else {
            text
        }
    }
}

/// Error codes that mean "too fast", as the AWS SDKs' retry strategies list them.
const THROTTLING: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "ServiceUnavailable",
    "ServiceUnavailableException",
];

/// Whether `code` asks the caller to slow down.
pub fn is_throttling(code: &str) -> bool {
    THROTTLING.contains(&code)
}

thread_local! {
    /// Throttled answers in a row in this instance: the wait doubles with each.
    static THROTTLED: Cell<u32> = const { Cell::new(0) };
}

/// The wait after a throttled answer: its `Retry-After` (capped at 5 minutes), else 1 s
/// doubled for each throttled answer in a row this instance has had, at most 30 s.
pub fn throttle_wait(response: Option<&Response>) -> Duration {
    let in_a_row = THROTTLED.with(|t| {
        t.set(t.get().saturating_add(1));
        t.get()
    });
    if let Some(after) = response.and_then(Response::retry_after) {
        return after.min(MAX_RETRY_AFTER);
    }
    Duration::from_secs(1u64 << in_a_row.saturating_sub(1).min(5)).min(Duration::from_secs(30))
}

/// Seconds since the Unix epoch, now.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Sends `body` to `target`, signed with `credentials` when given (STS's web identity call
/// is not signed); a 2xx answer is returned, anything else a [`Refusal`].
pub fn call(
    target: &Target<'_>,
    credentials: Option<&Credentials>,
    body: &[u8],
) -> Result<Response, Refusal> {
    let (host, path) = split(target.endpoint).map_err(Refusal::Failed)?;
    let (content_type, amz_target) = match target.protocol {
        Protocol::Query => ("application/x-www-form-urlencoded; charset=utf-8", None),
        Protocol::Json10(t) => ("application/x-amz-json-1.0", Some(t)),
        Protocol::Json11(t) => ("application/x-amz-json-1.1", Some(t)),
    };
    let mut request = Request::post(&format!("{}{path}", target.endpoint_base()))
        .header("content-type", content_type);
    let mut signed = sigv4::Request {
        path,
        ..sigv4::Request::new("POST", host, body)
    }
    .header("content-type", content_type);
    if let Some(amz_target) = amz_target {
        request = request.header("x-amz-target", amz_target);
        signed = signed.header("x-amz-target", amz_target);
    }
    if let Some(credentials) = credentials {
        let signed = sigv4::sign(&signed, credentials, &target.scope, now());
        for (name, value) in signed.headers() {
            request = request.header(name, &value);
        }
    }
    let response = request.body(body.to_vec()).send().map_err(|e| {
        if e.is_request_too_large() {
            Refusal::TooLarge(e.request_body_limit(), String::from(e))
        } else {
            Refusal::Failed(String::from(e))
        }
    })?;
    if response.is_success() {
        THROTTLED.with(|t| t.set(0));
        return Ok(response);
    }
    let error = parse_error(&response);
    if is_throttling(&error.code) || matches!(response.status, 429 | 503) {
        return Err(Refusal::Throttled(throttle_wait(Some(&response))));
    }
    Err(Refusal::Refused(error))
}

impl Target<'_> {
    /// The endpoint's scheme and authority, without its path.
    fn endpoint_base(&self) -> &str {
        let after_scheme = self.endpoint.find("://").map_or(0, |i| i + 3);
        match self.endpoint[after_scheme..].find('/') {
            Some(i) => &self.endpoint[..after_scheme + i],
            None => self.endpoint,
        }
    }
}

/// The endpoint's authority (the `host` signed) and path (`/` when it has none).
fn split(endpoint: &str) -> Result<(&str, &str), String> {
    let rest = endpoint
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{endpoint:?} is not an absolute URL"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    if host.is_empty() {
        return Err(format!("{endpoint:?} names no host"));
    }
    Ok((host, path))
}

/// AWS's error from an answer: JSON (`__type`, `message`) or XML (`<Code>`,
/// `<Message>`), else the body's start.
pub fn parse_error(response: &Response) -> AwsError {
    let body = response.text();
    let from_header = response
        .header_value("x-amzn-errortype")
        .map(|t| t.split(':').next().unwrap_or(t).to_string());
    let (code, message) = match serde_json::from_str::<serde_json::Value>(&body) {
        Ok(json) => {
            let code = json["__type"]
                .as_str()
                .or(json["code"].as_str())
                .or(json["Code"].as_str())
                .map(|t| t.rsplit('#').next().unwrap_or(t).to_string());
            let message = json["message"]
                .as_str()
                .or(json["Message"].as_str())
                .map(str::to_string);
            (code, message)
        }
        Err(_) => (
            xml_tag(&body, "Code").map(xml_unescape),
            xml_tag(&body, "Message").map(xml_unescape),
        ),
    };
    let code = code
        .filter(|c| !c.is_empty())
        .or(from_header)
        .unwrap_or_else(|| format!("HTTP{}", response.status));
    AwsError {
        status: response.status,
        code: code.trim().to_string(),
        message: message.unwrap_or_else(|| response.excerpt(200).trim().to_string()),
    }
}

/// The text between the first `<name>` and the `</name>` after it.
pub fn xml_tag<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))?;
    Some(&xml[start..start + end])
}

/// XML's five predefined entities and numeric references replaced.
pub fn xml_unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(end) = rest.find(';') else { break };
        let entity = &rest[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `application/x-www-form-urlencoded` of `pairs` (every byte but the unreserved ones
/// percent-encoded, as the query protocol signs it).
pub fn form(pairs: &[(&str, &str)]) -> String {
    let encode = |text: &str| -> String {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let pairs: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    pairs.join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_read_from_json_and_xml_answers() {
        let json = Response::new(
            400,
            r#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."}"#,
        );
        assert_eq!(
            parse_error(&json).into_error(),
            "permanent: AWS answered 400 QueueDoesNotExist: The specified queue does not exist."
        );
        let xml = Response::new(
            404,
            "<ErrorResponse><Error><Type>Sender</Type><Code>NotFound</Code>\
             <Message>Topic &quot;t&quot; does not exist</Message></Error></ErrorResponse>",
        );
        let error = parse_error(&xml);
        assert_eq!(
            (error.code.as_str(), error.message.as_str()),
            ("NotFound", "Topic \"t\" does not exist")
        );
        let plain = Response::new(500, "upstream down")
            .header("x-amzn-ErrorType", "InternalFailure:http://x");
        assert_eq!(
            parse_error(&plain).into_error(),
            "AWS answered 500 InternalFailure: upstream down"
        );
        let expired = Response::new(
            400,
            r#"{"__type":"ExpiredTokenException","message":"expired"}"#,
        );
        assert!(!parse_error(&expired).into_error().starts_with("permanent:"));
    }

    #[test]
    fn throttling_waits_double_in_a_row_and_honour_retry_after() {
        THROTTLED.with(|t| t.set(0));
        let waits: Vec<u64> = (0..7).map(|_| throttle_wait(None).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        let asked = Response::new(503, "").header("Retry-After", "7");
        assert_eq!(throttle_wait(Some(&asked)), Duration::from_secs(7));
        let long = Response::new(429, "").header("Retry-After", "86400");
        assert_eq!(throttle_wait(Some(&long)), MAX_RETRY_AFTER);
        assert!(is_throttling("ThrottlingException"));
        assert!(!is_throttling("QueueDoesNotExist"));
    }

    #[test]
    fn forms_and_xml_round_trip_what_aws_sends() {
        assert_eq!(
            form(&[("Action", "Publish"), ("Message", "a b&c=d/é")]),
            "Action=Publish&Message=a%20b%26c%3Dd%2F%C3%A9"
        );
        assert_eq!(
            xml_unescape("a &amp; b &lt;&#65;&#x42;&gt; &bogus"),
            "a & b <AB> &bogus"
        );
        assert_eq!(xml_tag("<A><B>x</B></A>", "B"), Some("x"));
        assert_eq!(xml_tag("<A></A>", "B"), None);
        assert_eq!(
            split("http://127.0.0.1:5000").unwrap(),
            ("127.0.0.1:5000", "/")
        );
        assert_eq!(split("https://h/vpc/").unwrap(), ("h", "/vpc/"));
    }
}
