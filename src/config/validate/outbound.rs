//! A handler's outbound HTTP as validation reads it: the `capabilities.http` allow-list,
//! each entry parsed and any mistake reported at its line and column, and `outbound:`
//! with its defaults filled in and its files made relative to the config's folder.

use std::path::Path;

use super::errors::Errors;
use crate::config::OutboundSpec;
use crate::config::capabilities::CapabilitiesFile;
use crate::config::egress::{Egress, EgressRule};
use crate::config::schema::OutboundFile;

/// The key of `capabilities:` that holds the allow-list instead of Kubernetes verbs.
pub(super) const HTTP_KEY: &str = "http";

/// Builds a handler's outbound spec from `capabilities.http` and `outbound:`.
pub(super) fn build(
    handler: &str,
    capabilities: Option<&CapabilitiesFile>,
    file: Option<OutboundFile>,
    base: &Path,
    errors: &mut Errors,
) -> OutboundSpec {
    let mut rules = Vec::new();
    for (i, entry) in capabilities
        .and_then(|c| c.get(HTTP_KEY))
        .into_iter()
        .flatten()
        .enumerate()
    {
        match EgressRule::parse(entry.trim()) {
            Ok(rule) => rules.push(rule),
            Err(reason) => errors.at(
                format!("handlers.{handler}.capabilities.http[{i}]"),
                format!("invalid destination {entry:?}: {reason}"),
            ),
        }
    }
    let file = file.unwrap_or_default();
    let at = |field: &str| format!("handlers.{handler}.outbound.{field}");
    let path = |p: Option<String>, field: &str, errors: &mut Errors| {
        p.and_then(|p| super::expand_at(Path::new(&p), &at(field), base, errors))
    };
    let ca_bundle = path(file.ca_bundle, "ca_bundle", errors);
    let cert = path(file.client_cert, "client_cert", errors);
    let key = path(file.client_key, "client_key", errors);
    let client_identity = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) => {
            errors.at(
                at("client_cert"),
                "client_cert needs client_key, its private key",
            );
            None
        }
        (None, Some(_)) => {
            errors.at(
                at("client_key"),
                "client_key needs client_cert, its certificate",
            );
            None
        }
    };
    let capture_status = file.capture_status.unwrap_or(200);
    if !(100..=599).contains(&capture_status) {
        errors.at(
            at("capture_status"),
            format!("{capture_status} is not an HTTP status (100 to 599)"),
        );
    }
    let default = OutboundSpec::default();
    OutboundSpec {
        egress: Egress {
            rules,
            refuse_private: file.refuse_private.unwrap_or(false),
        },
        max_request_body: file
            .max_request_body
            .map_or(default.max_request_body, |b| b.0),
        max_response_body: file
            .max_response_body
            .map_or(default.max_response_body, |b| b.0),
        ca_bundle,
        client_identity,
        capture_status,
        max_in_flight: match file.max_in_flight {
            Some(0) => {
                errors.at(
                    at("max_in_flight"),
                    "0 would refuse every request: at least 1",
                );
                default.max_in_flight
            }
            Some(n) => n,
            None => default.max_in_flight,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::HttpScheme;
    use crate::config::egress::{Destination, Host};

    #[test]
    fn the_allow_list_is_read_and_mistakes_are_located() {
        let text = "\
handlers:
  h:
    capabilities:
      configmaps: [patch]
      http:
        - https://hooks.example.com
        - hooks.example.com
        - http://127.0.0.1:9000
    outbound:
      client_cert: /etc/tls/cert.pem
routes:
  - {name: cms, resource: configmaps, handler: h}
";
        let errors = crate::config::validate(Path::new("c.yaml"), text)
            .unwrap_err()
            .0;
        let found: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(
            found[0].starts_with("c.yaml:7:11: handlers.h.capabilities.http[1]: invalid destination \"hooks.example.com\": write the scheme"),
            "{}",
            found[0]
        );
        assert!(
            found[1].contains("handlers.h.outbound.client_cert: client_cert needs client_key"),
            "{}",
            found[1]
        );
        let good = text.replace("        - hooks.example.com\n", "").replace(
            "      client_cert: /etc/tls/cert.pem\n",
            "      refuse_private: true\n      max_response_body: 64Ki\n",
        );
        let config = crate::config::validate(Path::new("c.yaml"), &good).unwrap();
        let out = &config.handlers[0].outbound;
        assert_eq!(out.egress.rules.len(), 2);
        let hooks = Destination {
            scheme: HttpScheme::Https,
            host: Host::Name("hooks.example.com".into()),
            port: 443,
        };
        assert!(out.egress.allows(&hooks));
        assert!(out.egress.refuse_private);
        assert_eq!(out.max_response_body, 64 << 10);
        assert_eq!(out.max_request_body, 1 << 20);
        assert!(
            config.handlers[0]
                .capabilities
                .allows(&["configmaps"], crate::config::Verb::Patch)
        );
    }
}
