//! How a registry is spoken to, decided from where its name actually leads.
//!
//! # Decision: plain HTTP only to an address that is loopback, pinned, without a proxy
//!
//! Container tools speak plain HTTP to a registry on this machine. Deciding that by the
//! name's text (`127.` at the start) sent `oci://127.example.com/…` over plain HTTP through
//! `HTTP_PROXY` with its Basic credentials. So the name is resolved, and plain HTTP is used
//! only when every address it resolves to is loopback; the connection then goes to those
//! addresses (the name cannot resolve elsewhere between the check and the connection) and
//! never through a proxy. A registry the config lists in `oci.insecure_registries` is also
//! spoken to over plain HTTP, proxy and all, but no credentials (Basic or a token) are ever
//! sent to it. Everything else is HTTPS; a redirect from HTTPS to plain HTTP is refused.
//!
//! # Decision: a registry's own CA is added to the public roots, for it alone
//!
//! A registry inside a company is often signed by the company's CA. Its `ca_file`
//! (`oci.registries.HOST.ca_file`) is trusted besides the public roots, as container tools
//! trust `certs.d/HOST/ca.crt`, and only for connections to that registry and the token
//! service it names, never for other registries. A registry given a CA is spoken to over
//! HTTPS even on loopback. The file is read again for each pull, so a renewed CA needs no
//! reload.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use reqwest::Url;

use crate::config::oci::{OciSpec, read_ca_file};

/// The most redirects a request follows.
const MAX_REDIRECTS: usize = 10;

/// How requests reach one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// HTTPS (public roots, and the registry's own CA file if the config gives one),
    /// through a proxy if the environment names one.
    Https(Option<PathBuf>),
    /// Plain HTTP to this machine: the addresses the name resolved to, every one loopback,
    /// connected to directly.
    Loopback(Vec<SocketAddr>),
    /// Plain HTTP to a registry `oci.insecure_registries` lists: no credentials are sent.
    Insecure,
}

impl Transport {
    /// The transport for the registry `host` (`[v6]` with brackets) at `port`, as written
    /// in a reference (`registry` is `host[:port]`).
    pub async fn for_registry(
        registry: &str,
        host: &str,
        port: Option<u16>,
        settings: &OciSpec,
    ) -> Self {
        if let Some(ca_file) = settings.ca_file(registry) {
            Transport::Https(Some(ca_file.to_path_buf()))
        } else if let Some(addresses) = loopback_addresses(host, port.unwrap_or(80)).await {
            Transport::Loopback(addresses)
        } else if settings.is_insecure(registry) {
            Transport::Insecure
        } else {
            Transport::Https(None)
        }
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        match self {
            Transport::Https(_) => "https",
            Transport::Loopback(_) | Transport::Insecure => "http",
        }
    }

    /// The registry's own CA file, when it is spoken to over HTTPS with one.
    pub fn ca_file(&self) -> Option<&Path> {
        match self {
            Transport::Https(ca_file) => ca_file.as_deref(),
            Transport::Loopback(_) | Transport::Insecure => None,
        }
    }

    /// Whether credentials may go this way: over TLS, or to this machine.
    pub fn carries_credentials(&self) -> bool {
        !matches!(self, Transport::Insecure)
    }

    /// An HTTP client that speaks to `host` this way, with the connect timeout of
    /// `settings` (a pull or push as a whole has its own deadline).
    pub fn client(&self, host: &str, settings: &OciSpec) -> Result<reqwest::Client, String> {
        let builder = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .redirect(redirects());
        let builder = match self {
            Transport::Loopback(addresses) => builder.no_proxy().resolve_to_addrs(
                host.trim_start_matches('[').trim_end_matches(']'),
                addresses,
            ),
            Transport::Https(Some(ca_file)) => {
                let mut builder = builder;
                for der in read_ca_file(ca_file)? {
                    let certificate = reqwest::Certificate::from_der(&der)
                        .map_err(|e| format!("the CA file {}: {e}", ca_file.display()))?;
                    builder = builder.add_root_certificate(certificate);
                }
                builder
            }
            Transport::Https(None) | Transport::Insecure => builder,
        };
        builder
            .build()
            .map_err(|e| format!("HTTP client setup: {e}"))
    }

    /// The transport for a URL a registry named (a token service's realm): HTTPS (trusting
    /// `ca_file` too, the CA of the registry that named it), plain HTTP to loopback, or
    /// plain HTTP elsewhere, which carries no credentials.
    pub async fn for_url(url: &Url, ca_file: Option<&Path>) -> Result<Self, String> {
        match url.scheme() {
            "https" => Ok(Transport::Https(ca_file.map(Path::to_path_buf))),
            "http" => {
                let host = url.host_str().unwrap_or("");
                let port = url.port_or_known_default().unwrap_or(80);
                Ok(match loopback_addresses(host, port).await {
                    Some(addresses) => Transport::Loopback(addresses),
                    None => Transport::Insecure,
                })
            }
            other => Err(format!("{url} is neither https nor http but {other}")),
        }
    }
}

/// The addresses `host` resolves to, when it resolves and every one is loopback.
pub async fn loopback_addresses(host: &str, port: u16) -> Option<Vec<SocketAddr>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await.ok()?.collect();
    let loopback = !addresses.is_empty()
        && addresses
            .iter()
            .all(|a| a.ip().to_canonical().is_loopback());
    loopback.then_some(addresses)
}

/// Follows up to [`MAX_REDIRECTS`] redirects, none from HTTPS to plain HTTP. (reqwest drops
/// the `Authorization` header on a redirect to another host or port.)
fn redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let downgrade = attempt
            .previous()
            .last()
            .is_some_and(|from| from.scheme() == "https")
            && attempt.url().scheme() != "https";
        if downgrade {
            let to = attempt.url().clone();
            attempt.error(format!("refused a redirect from HTTPS to {to}"))
        } else if attempt.previous().len() >= MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_names_that_resolve_to_loopback_are_loopback() {
        for host in ["127.0.0.1", "127.1.2.3", "[::1]", "localhost"] {
            let addresses = loopback_addresses(host, 5000).await;
            assert!(
                addresses.is_some_and(|a| a.iter().all(|a| a.port() == 5000)),
                "{host}"
            );
        }
        for host in ["127.example.invalid", "10.0.0.1", "0.0.0.0", ""] {
            assert_eq!(loopback_addresses(host, 5000).await, None, "{host}");
        }
    }

    #[tokio::test]
    async fn plain_http_goes_only_to_loopback_or_a_listed_registry() {
        let settings = OciSpec {
            insecure_registries: vec!["registry.invalid:5000".into()],
            ..OciSpec::default()
        };
        let of = |registry: &'static str, host: &'static str| {
            let settings = settings.clone();
            async move { Transport::for_registry(registry, host, Some(5000), &settings).await }
        };
        assert!(matches!(
            of("127.0.0.1:5000", "127.0.0.1").await,
            Transport::Loopback(_)
        ));
        assert_eq!(
            of("registry.invalid:5000", "registry.invalid").await,
            Transport::Insecure
        );
        assert_eq!(
            of("127.registry.invalid:5000", "127.registry.invalid").await,
            Transport::Https(None)
        );
        let realm = Url::parse("http://auth.invalid/token").unwrap();
        assert_eq!(
            Transport::for_url(&realm, None).await,
            Ok(Transport::Insecure)
        );
        assert!(!Transport::Insecure.carries_credentials());
    }

    #[tokio::test]
    async fn a_registry_given_a_ca_file_is_https_with_it_even_on_loopback() {
        let ca = PathBuf::from("/etc/registry-ca.pem");
        let settings = OciSpec {
            ca_files: [("127.0.0.1:5000".to_string(), ca.clone())].into(),
            ..OciSpec::default()
        };
        let transport =
            Transport::for_registry("127.0.0.1:5000", "127.0.0.1", Some(5000), &settings).await;
        assert_eq!(transport, Transport::Https(Some(ca.clone())));
        assert_eq!(transport.scheme(), "https");
        let other =
            Transport::for_registry("127.0.0.1:5001", "127.0.0.1", Some(5001), &settings).await;
        assert!(matches!(other, Transport::Loopback(_)), "{other:?}");
        // Its token service is trusted with the same CA.
        let realm = Url::parse("https://auth.invalid/token").unwrap();
        assert_eq!(
            Transport::for_url(&realm, transport.ca_file()).await,
            Ok(Transport::Https(Some(ca)))
        );
        // A CA file that cannot be read fails the client, naming it.
        let error = transport.client("127.0.0.1", &settings).unwrap_err();
        assert!(
            error.contains("cannot read the CA file /etc/registry-ca.pem"),
            "{error}"
        );
    }
}
