//! `tracing:`: where spans go (an OTLP/HTTP collector), what share of events is traced,
//! the service name and the export's headers. Without `otlp_endpoint` there are no traces,
//! and settings that would do nothing without it are refused rather than ignored.

use serde_json::Value;

use super::errors::Errors;
use crate::config::TracingSpec;
use crate::config::document::join;
use crate::config::schema::TracingFile;

/// `service.name` when the config does not say.
const DEFAULT_SERVICE_NAME: &str = "switchyard";
/// The path OTLP/HTTP takes spans at, under the collector's address.
const TRACES_PATH: &str = "/v1/traces";

/// Reads and checks `tracing:`; `None` when it is absent, has no endpoint, or cannot be read.
pub(super) fn build_tracing(value: Option<&Value>, errors: &mut Errors) -> Option<TracingSpec> {
    let file: TracingFile = errors.read("tracing", value?)?;
    let Some(written) = file.otlp_endpoint.as_deref() else {
        if file.sample_ratio.is_some() || file.service_name.is_some() || file.headers.is_some() {
            errors.at(
                "tracing",
                "tracing has settings but no otlp_endpoint: set tracing.otlp_endpoint (http://collector:4318) to send traces, or remove the section",
            );
        }
        return None;
    };
    let endpoint = endpoint(written, errors);
    let sample_ratio = file.sample_ratio.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample_ratio) {
        errors.at(
            "tracing.sample_ratio",
            format!("{sample_ratio} is not a share of events: give a number from 0 (none) to 1 (every event)"),
        );
    }
    let service_name = file
        .service_name
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
    if service_name.trim().is_empty() {
        errors.at("tracing.service_name", "service_name must not be empty");
    }
    let headers = headers(file.headers.unwrap_or_default(), errors);
    Some(TracingSpec {
        endpoint: endpoint?,
        sample_ratio,
        service_name,
        headers,
    })
}

/// The URL spans are posted to: `written` with `/v1/traces` added (unless it ends so).
fn endpoint(written: &str, errors: &mut Errors) -> Option<url::Url> {
    let path = "tracing.otlp_endpoint";
    let mut url = match url::Url::parse(written) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => url,
        Ok(_) | Err(_) => {
            errors.at(
                path,
                format!("{written:?} is not an OTLP/HTTP address: give http://HOST:PORT or https://HOST:PORT (a collector listens on 4318)"),
            );
            return None;
        }
    };
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        errors.at(
            path,
            "give the collector's address without a query, fragment or credentials (send credentials in tracing.headers)",
        );
        return None;
    }
    if !url.path().ends_with(TRACES_PATH) {
        let joined = format!("{}{TRACES_PATH}", url.path().trim_end_matches('/'));
        url.set_path(&joined);
    }
    Some(url)
}

/// The export's headers, each name and value one HTTP allows.
fn headers(
    written: std::collections::BTreeMap<String, String>,
    errors: &mut Errors,
) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    for (name, value) in written {
        let path = join("tracing.headers", &name);
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            errors.at_key(path, format!("{name:?} is not an HTTP header name"));
        } else if http::HeaderValue::from_str(&value).is_err() {
            errors.at(
                path,
                "the value is not one an HTTP header may carry (no line breaks or control characters)",
            );
        } else {
            headers.push((name, value));
        }
    }
    headers
}
