//! HTTPS for the simulator, as in-cluster clients expect: a certificate authority made at
//! start, a serving certificate it signs for `127.0.0.1` and `localhost`, and a listener
//! that does the TLS handshake before axum sees the connection.
//!
//! A CA and a leaf rather than one self-signed certificate: clients (rustls, kubectl) take
//! the CA as their root, and a self-signed serving certificate used as its own root is
//! refused by some of them. Nothing is written to disk: the CA's PEM goes into the
//! kubeconfig the simulator writes, or wherever a test puts a service account's `ca.crt`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::server::TlsStream;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A simulator's TLS identity: the CA clients trust and the acceptor serving its leaf.
#[derive(Clone)]
pub struct SimTls {
    ca_pem: String,
    ca_der: Vec<u8>,
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for SimTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimTls").finish_non_exhaustive()
    }
}

impl SimTls {
    /// A new CA and a serving certificate for `127.0.0.1`, `::1` and `localhost`.
    pub fn generate() -> io::Result<Self> {
        let fail = |e: rcgen::Error| io::Error::other(format!("cannot make a certificate: {e}"));
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "switchyard-sim CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(fail)?)
            .map_err(fail)?;
        let names = ["127.0.0.1", "::1", "localhost"].map(String::from).to_vec();
        let mut leaf_params = CertificateParams::new(names).map_err(fail)?;
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "switchyard-sim");
        let leaf_key = KeyPair::generate().map_err(fail)?;
        let leaf = leaf_params.signed_by(&leaf_key, &ca).map_err(fail)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let chain = vec![leaf.der().clone(), CertificateDer::from(ca.der().to_vec())];
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(io::Error::other)?;
        Ok(Self {
            ca_pem: ca.pem(),
            ca_der: ca.der().to_vec(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// The CA certificate, PEM-encoded (a service account's `ca.crt`).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate, DER-encoded (kube-rs' `root_cert`).
    pub fn ca_der(&self) -> &[u8] {
        &self.ca_der
    }

    /// The acceptor serving this identity, for a server of one's own.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    /// `listener` serving TLS with this identity.
    pub fn listener(&self, listener: TcpListener) -> TlsListener {
        TlsListener {
            tcp: listener,
            acceptor: self.acceptor.clone(),
        }
    }
}

/// A TCP listener whose connections have finished the TLS handshake.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.tcp.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::debug!(error = %e, "simulator accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // TCP_NODELAY, as kube-apiserver sets it (see `super::nodelay`).
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(error = %e, "simulator: TCP_NODELAY not set");
            }
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream));
            match handshake.await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => tracing::debug!(%addr, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}
