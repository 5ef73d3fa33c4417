//! AWS Signature Version 4, as the AWS sinks sign their requests: the canonical request,
//! the string to sign, the signing key and the `Authorization` header.
//!
//! # Decision: a small signer of our own, not `aws-sigv4`
//!
//! The AWS SDK's `aws-sigv4` pulls in the smithy runtime types, `time`, `http` and more
//! for what is, for a plugin that sends a body to one endpoint, a few dozen lines over
//! SHA-256 and HMAC. This one is checked against AWS's published test suite
//! (`aws-sig-v4-test-suite`: its requests, canonical requests, strings to sign and
//! signatures are reproduced in the tests below).
//!
//! ```
//! use sigv4::{Credentials, Request, Scope, sign};
//!
//! let credentials = Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
//! let scope = Scope { region: "us-east-1", service: "sqs" };
//! let request = Request::new("POST", "sqs.us-east-1.amazonaws.com", b"{}")
//!     .header("content-type", "application/x-amz-json-1.0");
//! let signed = sign(&request, &credentials, &scope, 1_440_938_160);
//! assert!(signed.authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/"));
//! ```

#![forbid(unsafe_code)]

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// An access key, its secret and, for temporary credentials, the session token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key id (`AKIA…`, `ASIA…`).
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials (from STS), sent as
    /// `x-amz-security-token` and signed.
    pub session_token: Option<String>,
}

impl Credentials {
    /// Long-term credentials: a key and its secret.
    pub fn new(access_key_id: &str, secret_access_key: &str) -> Self {
        Self {
            access_key_id: access_key_id.to_string(),
            secret_access_key: secret_access_key.to_string(),
            session_token: None,
        }
    }

    /// The same credentials with a session token.
    #[must_use]
    pub fn with_session_token(mut self, token: &str) -> Self {
        self.session_token = Some(token.to_string());
        self
    }
}

/// Never prints the secret or the token.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"***")
            .field("session_token", &self.session_token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Where a signature is valid: the region and the service's signing name (`sqs`, `sns`,
/// `events`, `firehose`, `logs`, `sts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope<'a> {
    /// The region, `eu-west-1`.
    pub region: &'a str,
    /// The service's signing name.
    pub service: &'a str,
}

/// The parts of a request that are signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// `GET`, `POST`, ...
    pub method: &'a str,
    /// The `host` header: the URL's authority (with a port other than the scheme's).
    pub host: &'a str,
    /// The path, already URI-encoded (`/`).
    pub path: &'a str,
    /// The query string, already URI-encoded, without `?` (empty for none).
    pub query: &'a str,
    /// Headers to sign besides `host`, `x-amz-date` and `x-amz-security-token`.
    pub headers: Vec<(&'a str, &'a str)>,
    /// The body.
    pub payload: &'a [u8],
}

impl<'a> Request<'a> {
    /// A request to `/` of `host` with `payload`, no query, no other header.
    pub fn new(method: &'a str, host: &'a str, payload: &'a [u8]) -> Self {
        Self {
            method,
            host,
            path: "/",
            query: "",
            headers: Vec::new(),
            payload,
        }
    }

    /// Adds a header to sign (and to send).
    #[must_use]
    pub fn header(mut self, name: &'a str, value: &'a str) -> Self {
        self.headers.push((name, value));
        self
    }
}

/// A signed request: the headers to add to it, and the steps that led to the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// `x-amz-date`: `20150830T123600Z`.
    pub amz_date: String,
    /// The `Authorization` header's value.
    pub authorization: String,
    /// `x-amz-security-token`'s value, when the credentials have a session token.
    pub security_token: Option<String>,
    /// The canonical request (for tests and debugging).
    pub canonical_request: String,
    /// The string to sign.
    pub string_to_sign: String,
    /// The signature, hex.
    pub signature: String,
}

impl Signed {
    /// The headers to add to the request: `x-amz-date`, `authorization` and, with a
    /// session token, `x-amz-security-token`.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("x-amz-date", self.amz_date.clone()),
            ("authorization", self.authorization.clone()),
        ];
        if let Some(token) = &self.security_token {
            headers.push(("x-amz-security-token", token.clone()));
        }
        headers
    }
}

/// Signs `request` with `credentials` for `scope` at `unix_seconds` (the time the request
/// is sent; AWS refuses a signature more than 5 minutes off its clock).
pub fn sign(
    request: &Request<'_>,
    credentials: &Credentials,
    scope: &Scope<'_>,
    unix_seconds: u64,
) -> Signed {
    let amz_date = amz_date(unix_seconds);
    let day = &amz_date[..8];
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), canonical_value(v)))
        .collect();
    headers.push(("host".into(), request.host.to_string()));
    headers.push(("x-amz-date".into(), amz_date.clone()));
    if let Some(token) = &credentials.session_token {
        headers.push(("x-amz-security-token".into(), token.clone()));
    }
    let (canonical_headers, signed_headers) = canonical_headers(headers);
    let canonical_request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        request.method.to_ascii_uppercase(),
        request.path,
        canonical_query(request.query),
        canonical_headers,
        signed_headers,
        hex(&Sha256::digest(request.payload)),
    );
    let credential_scope = format!("{day}/{}/{}/aws4_request", scope.region, scope.service);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{credential_scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let key = signing_key(&credentials.secret_access_key, day, scope);
    let signature = hex(&hmac(&key, string_to_sign.as_bytes()));
    let authorization = format!(
        "AWS4-HMAC-SHA256 Credential={}/{credential_scope}, SignedHeaders={signed_headers}, Signature={signature}",
        credentials.access_key_id
    );
    Signed {
        amz_date,
        authorization,
        security_token: credentials.session_token.clone(),
        canonical_request,
        string_to_sign,
        signature,
    }
}

/// The canonical headers block (each `name:value\n`, sorted by name, a repeated name's
/// values joined by `,` in their order) and the signed header names (`a;b;c`).
fn canonical_headers(mut headers: Vec<(String, String)>) -> (String, String) {
    // A stable sort keeps a repeated header's values in the order they were given.
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let mut merged: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        match merged.last_mut() {
            Some((last, values)) if *last == name => {
                values.push(',');
                values.push_str(&value);
            }
            _ => merged.push((name, value)),
        }
    }
    let block = merged.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let names: Vec<&str> = merged.iter().map(|(n, _)| n.as_str()).collect();
    (block, names.join(";"))
}

/// A header value trimmed, its runs of spaces made one.
fn canonical_value(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The query's parameters sorted by name, then value (already URI-encoded, as sent);
/// a parameter without `=` gets an empty value.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(&str, &str)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    pairs.sort();
    let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join("&")
}

/// `kSigning`: the secret's HMAC chain over the day, region, service and `aws4_request`.
fn signing_key(secret: &str, day: &str, scope: &Scope<'_>) -> Vec<u8> {
    let date = hmac(format!("AWS4{secret}").as_bytes(), day.as_bytes());
    let region = hmac(&date, scope.region.as_bytes());
    let service = hmac(&region, scope.service.as_bytes());
    hmac(&service, b"aws4_request")
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `YYYYMMDDTHHMMSSZ` (UTC) for seconds since the Unix epoch.
pub fn amz_date(unix_seconds: u64) -> String {
    let (year, month, day) = civil(unix_seconds / 86_400);
    let secs = unix_seconds % 86_400;
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Seconds since the Unix epoch of an ISO 8601 UTC time, as AWS writes them
/// (`2026-11-27T19:00:00Z`, fractions of a second ignored); `None` for anything else.
pub fn parse_iso8601(text: &str) -> Option<u64> {
    let text = text.trim().strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let date: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let time = time.split('.').next()?;
    let time: Vec<u64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let ([year, month, day], [h, m, s]) = (date.as_slice(), time.as_slice()) else {
        return None;
    };
    if !(1..=12).contains(month) || !(1..=31).contains(day) || *h > 23 || *m > 59 || *s > 60 {
        return None;
    }
    let days = u64::try_from(days_from_civil(*year, *month, *day)).ok()?;
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day since 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
