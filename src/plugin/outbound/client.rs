//! The pooled HTTP clients behind plugins' requests, each connecting through the guarded
//! [`connector`](super::connector).
//!
//! # Decision: one client per distinct connection policy, shared
//!
//! A client's pool keeps connections by scheme and authority, and the checks that decide
//! whether a connection may be made (the address rules, the CA bundle and client
//! certificate) belong to the client, not the request. Handlers whose address rules and TLS
//! settings are the same (almost always all of them) share one client and so one pool of
//! keep-alive connections (HTTP/1.1, or HTTP/2 where ALPN picks it); a handler with its own
//! CA bundle or address rules gets its own. A connection is never reused across policies,
//! so a handler never reaches an address through a connection another handler was allowed
//! to open.
//!
//! `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (and their lowercase forms) are
//! read when a client is built; the connector decides per request whether a proxy carries
//! it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::connector::Guarded;
use crate::config::egress::HostPattern;
use crate::config::{Egress, OutboundSpec};
use crate::util::lock;

/// How long a connection may take to open, at most (the call's deadline may cut it
/// shorter).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);
/// Idle connections kept per destination.
const POOL_IDLE_PER_HOST: usize = 16;

/// What a client's connections depend on: the address rules and the TLS settings.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    egress: Egress,
    ca_bundle: Option<std::path::PathBuf>,
    identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// A pooled client and the connector it opens connections with.
#[derive(Clone)]
pub struct Client {
    http: HyperClient<hyper_rustls::HttpsConnector<Guarded>, Full<Bytes>>,
    connector: Guarded,
}

impl Client {
    /// Sends `request` (its URI canonical, as the allow-list read it), adding the proxy's
    /// credentials when a plain-HTTP proxy forwards it.
    pub(super) async fn send(
        &self,
        mut request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        if let Some(auth) = self.connector.proxy_authorization(request.uri()) {
            request
                .headers_mut()
                .insert(http::header::PROXY_AUTHORIZATION, auth);
        }
        self.http.request(request).await
    }
}

/// The daemon's outbound clients, one per connection policy (see the module docs).
#[derive(Default)]
pub struct Clients {
    clients: Mutex<HashMap<ClientKey, Client>>,
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
    pub fn client(&self, spec: &OutboundSpec) -> Result<Client, String> {
        let key = ClientKey {
            // Only what decides a connection: the IP and range entries (names are matched
            // per request, before the connector is asked).
            egress: Egress {
                rules: spec
                    .egress
                    .rules
                    .iter()
                    .filter(|r| matches!(r.host, HostPattern::Range(_)))
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
/// guarded connector, the environment's proxies.
fn build(key: &ClientKey) -> Result<Client, String> {
    let tls = tls_config(key)?;
    let connector = Guarded::new(key.egress.clone(), Matcher::from_env(), CONNECT_TIMEOUT);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(connector.clone());
    let http = HyperClient::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(POOL_IDLE_PER_HOST)
        .pool_timer(TokioTimer::new())
        .build(https);
    Ok(Client { http, connector })
}

/// The TLS settings of `key`: the system's roots and the CA bundle, and the client
/// identity if any.
fn tls_config(key: &ClientKey) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = &key.ca_bundle {
        let pem = read(path)?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: not a PEM CA bundle: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{}: holds no certificate", path.display()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("{}: not a usable CA certificate: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_root_certificates(roots);
    let Some((cert, private)) = &key.identity else {
        return Ok(builder.with_no_client_auth());
    };
    let pair = || format!("{} and {}", cert.display(), private.display());
    let chain = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not a PEM certificate and private key: {e}", pair()))?;
    let secret = PrivateKeyDer::from_pem_slice(&read(private)?)
        .map_err(|e| format!("{}: not a PEM certificate and private key: {e}", pair()))?;
    builder
        .with_client_auth_cert(chain, secret)
        .map_err(|e| format!("{}: not a PEM certificate and private key: {e}", pair()))
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))
}
