//! The pooled HTTP clients behind plugins' requests, and the DNS resolver that holds every
//! connection to the address rules.
//!
//! # Decision: one client per distinct connection policy, shared
//!
//! A client's pool keeps connections by scheme and authority, and the checks that decide
//! whether a connection may be made (the addresses a name resolves to, the CA bundle and
//! client certificate) belong to the client, not the request. Handlers whose address rules
//! and TLS settings are the same (almost always all of them) share one client and so one
//! pool of keep-alive connections (HTTP/1.1, or HTTP/2 where ALPN picks it); a handler with
//! its own CA bundle or address rules gets its own. A connection is never reused across
//! policies, so a handler never reaches an address through a connection another handler
//! was allowed to open.
//!
//! `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` are honoured. Through a proxy the proxy
//! resolves the destination's name, so the address rules apply to the proxy's address
//! (which is always allowed); the allow-list still applies to every request.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::{Egress, OutboundSpec};
use crate::util::lock;

/// How long a connection may take to open, at most (the call's deadline may cut it
/// shorter).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// What a client's connections depend on: the address rules and the TLS settings.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    egress: Egress,
    ca_bundle: Option<std::path::PathBuf>,
    identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// The daemon's outbound clients, one per connection policy (see the module docs).
#[derive(Default)]
pub struct Clients {
    clients: Mutex<HashMap<ClientKey, reqwest::Client>>,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients")
            .field("clients", &lock(&self.clients).len())
            .finish()
    }
}

impl Clients {
    /// The client for `spec`'s policy, built on first use. Fails when a TLS file cannot be
    /// read or holds no usable PEM.
    pub fn client(&self, spec: &OutboundSpec) -> Result<reqwest::Client, String> {
        let key = ClientKey {
            // Only what decides a connection; the names on the list are checked per request.
            egress: Egress {
                rules: spec
                    .egress
                    .rules
                    .iter()
                    .filter(|r| matches!(r.host, crate::config::egress::HostPattern::Range(_)))
                    .cloned()
                    .collect(),
                refuse_private: spec.egress.refuse_private,
            },
            ca_bundle: spec.ca_bundle.clone(),
            identity: spec.client_identity.clone(),
        };
        if let Some(client) = lock(&self.clients).get(&key) {
            return Ok(client.clone());
        }
        let client = build(&key)?;
        lock(&self.clients).insert(key, client.clone());
        Ok(client)
    }
}

/// Builds a client for `key`: system roots plus the CA bundle, the client identity, the
/// guarded resolver, no redirects.
fn build(key: &ClientKey) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .dns_resolver(Arc::new(GuardedResolver {
            egress: key.egress.clone(),
            proxies: proxy_hosts(),
        }))
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE)
        .tls_built_in_webpki_certs(false)
        .tls_built_in_native_certs(true)
        .user_agent(concat!("switchyard/", env!("CARGO_PKG_VERSION")));
    if let Some(path) = &key.ca_bundle {
        let pem = read(path)?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("{}: not a PEM CA bundle: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{}: holds no certificate", path.display()));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    if let Some((cert, key)) = &key.identity {
        let mut pem = read(cert)?;
        pem.push(b'\n');
        pem.extend(read(key)?);
        let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
            format!(
                "{} and {}: not a PEM certificate and private key: {e}",
                cert.display(),
                key.display()
            )
        })?;
        builder = builder.identity(identity);
    }
    builder
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))
}

/// The host names of the proxies the environment names: their addresses are always allowed.
fn proxy_hosts() -> Vec<String> {
    [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .iter()
    .filter_map(|var| std::env::var(var).ok())
    .filter_map(|url| {
        let url = if url.contains("://") {
            url
        } else {
            format!("http://{url}")
        };
        reqwest::Url::parse(&url)
            .ok()?
            .host_str()
            .map(str::to_ascii_lowercase)
    })
    .collect()
}

/// Resolves names with the system resolver and drops the addresses the rules refuse; a
/// name left with none fails with [`AddressRefused`].
struct GuardedResolver {
    egress: Egress,
    proxies: Vec<String>,
}

/// A name resolved only to addresses the rules refuse.
#[derive(Debug)]
pub(super) struct AddressRefused {
    pub(super) host: String,
    pub(super) address: IpAddr,
    pub(super) class: crate::config::egress::AddressClass,
}

impl std::fmt::Display for AddressRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} resolves to {} ({}), which is refused",
            self.host,
            self.address,
            self.class.as_str()
        )
    }
}

impl std::error::Error for AddressRefused {}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        let egress = self.egress.clone();
        let proxy = self.proxies.iter().any(|p| *p == host.to_ascii_lowercase());
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if proxy {
                return Ok(Box::new(found.into_iter()) as reqwest::dns::Addrs);
            }
            let mut refused = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match egress.address(a.ip()) {
                    Ok(()) => true,
                    Err(class) => {
                        refused.get_or_insert((a.ip(), class));
                        false
                    }
                })
                .collect();
            match (allowed.is_empty(), refused) {
                (true, Some((address, class))) => Err(Box::new(AddressRefused {
                    host,
                    address,
                    class,
                })
                    as Box<dyn std::error::Error + Send + Sync>),
                _ => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}
