//! The HTTP client the OTLP exporter posts spans with: the daemon's own hyper and rustls
//! (no second HTTP or TLS stack), on the daemon's tokio runtime.
//!
//! # Decision: the request runs on the runtime, the exporter only waits for it
//!
//! The SDK's batch processor exports from a thread of its own, outside any tokio runtime;
//! hyper needs one. Each export is spawned onto the runtime the daemon started on and the
//! processor's thread waits for its result, bounded by [`EXPORT_TIMEOUT`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use opentelemetry_http::{HttpError, Request, Response};

/// How long one export may take, connecting included.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from a collector (it answers with a small status message).
const MAX_ANSWER: usize = 1 << 20;

/// Posts export requests through a pooled hyper client on the daemon's runtime.
#[derive(Clone)]
pub struct Exporter {
    http: HyperClient<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exporter")
    }
}

impl Exporter {
    /// A client on the current tokio runtime, trusting the system's roots for `https`.
    pub fn new() -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut connector = HttpConnector::new();
        connector.enforce_http(false);
        connector.set_connect_timeout(Some(EXPORT_TIMEOUT));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(connector);
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .build(https);
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "traces need the daemon's tokio runtime".to_string())?;
        Ok(Self { http, runtime })
    }

    /// Sends `request` and reads the answer, within [`EXPORT_TIMEOUT`].
    async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let sent = self.runtime.spawn(async move {
            tokio::time::timeout(EXPORT_TIMEOUT, async move {
                let response = http.request(request.map(Full::new)).await?;
                let (parts, body) = response.into_parts();
                let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
                Ok::<_, HttpError>(Response::from_parts(parts, body))
            })
            .await
            .map_err(|_| HttpError::from("the collector did not answer in time"))?
        });
        sent.await.map_err(|e| HttpError::from(e.to_string()))?
    }
}

impl opentelemetry_http::HttpClient for Exporter {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(self.send(request))
    }
}
