//! The connector every outbound request's socket is opened by: the address rules are
//! applied here, on the addresses the socket is about to connect to and on the peer address
//! it got, for every path a request can take (an IP literal, a resolved name, a proxy).
//!
//! # Decision: the check sits where the socket is made
//!
//! A check in one layer (the URL, a DNS resolver) and the connection in another is a bypass
//! waiting for the two to disagree: a resolver that is never asked for an IP literal, a
//! proxy exemption keyed by a host name that a direct request shares. Here the connector
//! knows the request's scheme, host and port and whether a proxy carries it, resolves the
//! name itself, refuses each address the rules refuse before connecting, and checks the
//! connected socket's peer address again.
//!
//! Through a proxy the proxy resolves the destination's name, so a name's addresses cannot
//! be checked here: the proxy's own address is the operator's choice and always allowed,
//! an IP literal is still checked (the proxy will connect to exactly it), and the proxy must
//! enforce the address rules for names itself (docs/outbound.md says so).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::config::egress::{AddressClass, Destination, Egress, Host};

/// Why the connector opened no connection.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnectError {
    /// Every address the destination has is refused by the address rules.
    #[error("{host} is {address} ({}), which is refused", class.as_str())]
    Refused {
        /// The destination as the request names it.
        host: String,
        /// The first refused address.
        address: IpAddr,
        /// Why it is refused.
        class: AddressClass,
    },
    /// The name could not be resolved.
    #[error("cannot resolve {host}: {source}")]
    Dns {
        /// The name.
        host: String,
        /// The resolver's error.
        #[source]
        source: std::io::Error,
    },
    /// The URL the client was given is not one the connector can connect to.
    #[error("{0}")]
    Uri(String),
    /// No address answered in time.
    #[error("connecting to {0} timed out")]
    Timeout(String),
    /// Connecting failed.
    #[error("connecting to {host}: {source}")]
    Io {
        /// The destination.
        host: String,
        /// The socket's error.
        #[source]
        source: std::io::Error,
    },
    /// The proxy's tunnel could not be opened.
    #[error("the proxy's tunnel failed: {0}")]
    Tunnel(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A connection the connector opened: a TCP stream to the destination, to a proxy that
/// forwards plain HTTP (requests then go in absolute form), or through a proxy's tunnel.
pub(super) struct Conn {
    io: TokioIo<TcpStream>,
    /// A plain-HTTP proxy: the client sends the request's full URL to it.
    forwarding: bool,
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.forwarding)
    }
}

impl hyper::rt::Read for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The guarded connector (see the module docs). Cheap to clone.
#[derive(Clone)]
pub(super) struct Guarded {
    inner: Arc<Inner>,
}

struct Inner {
    egress: Egress,
    proxies: Matcher,
    connect_timeout: Duration,
}

impl Guarded {
    /// A connector holding every connection to `egress`'s address rules, through the proxies
    /// `proxies` names for each request.
    pub(super) fn new(egress: Egress, proxies: Matcher, connect_timeout: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                egress,
                proxies,
                connect_timeout,
            }),
        }
    }

    /// The `Proxy-Authorization` a plain-HTTP request to `uri` carries to its proxy, if a
    /// proxy with credentials forwards it.
    pub(super) fn proxy_authorization(&self, uri: &Uri) -> Option<http::HeaderValue> {
        let intercept = self.inner.proxies.intercept(uri)?;
        (uri.scheme_str() == Some("http"))
            .then(|| intercept.basic_auth().cloned())
            .flatten()
    }
}

impl tower_service::Service<Uri> for Guarded {
    type Response = Conn;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move { inner.connect(uri).await })
    }
}

impl Inner {
    /// Opens a connection for a request to `uri`: through the proxy that takes it, or
    /// straight to the destination's allowed addresses.
    async fn connect(self: Arc<Self>, uri: Uri) -> Result<Conn, ConnectError> {
        let url = url::Url::parse(&uri.to_string())
            .map_err(|e| ConnectError::Uri(format!("{uri}: {e}")))?;
        let dest = Destination::of(&url).map_err(ConnectError::Uri)?;
        // NO_PROXY is matched on the host as the allow-list read it (`LOCALHOST.` is
        // `localhost`), so a spelling cannot send a direct request to the proxy.
        let plain: Uri = format!("{}://{}:{}/", dest.scheme.as_str(), dest.host, dest.port)
            .parse()
            .map_err(|_| ConnectError::Uri(format!("{uri}: not a URL")))?;
        let intercept = self.proxies.intercept(&plain);
        let Some(intercept) = intercept else {
            let io = self.direct(&dest).await?;
            return Ok(Conn {
                io,
                forwarding: false,
            });
        };
        // The proxy connects to an IP literal as it is: hold it to the rules here.
        if let Host::Ip(ip) = dest.host {
            self.allowed(&dest, ip)?;
        }
        let proxy = ProxyTcp {
            inner: self.clone(),
        };
        if dest.scheme == crate::config::HttpScheme::Https {
            let mut tunnel = Tunnel::new(intercept.uri().clone(), proxy);
            if let Some(auth) = intercept.basic_auth() {
                tunnel = tunnel.with_auth(auth.clone());
            }
            let io = tower_service::Service::call(&mut tunnel, uri)
                .await
                .map_err(|e| ConnectError::Tunnel(Box::new(e)))?;
            Ok(Conn {
                io,
                forwarding: false,
            })
        } else {
            let io = self.to_proxy(intercept.uri()).await?;
            Ok(Conn {
                io,
                forwarding: true,
            })
        }
    }

    /// Whether `ip` may be connected to for a request to `dest`.
    fn allowed(&self, dest: &Destination, ip: IpAddr) -> Result<(), ConnectError> {
        self.egress
            .connect(dest.scheme, ip, dest.port)
            .map_err(|class| ConnectError::Refused {
                host: dest.host.to_string(),
                address: ip,
                class,
            })
    }

    /// Connects straight to `dest`: its IP literal or each address its name resolves to,
    /// refusing every address the rules refuse, in order until one answers.
    async fn direct(&self, dest: &Destination) -> Result<TokioIo<TcpStream>, ConnectError> {
        let addresses: Vec<SocketAddr> = match &dest.host {
            Host::Ip(ip) => vec![SocketAddr::new(*ip, dest.port)],
            Host::Name(name) => resolve(name, dest.port).await?,
        };
        let mut refused = None;
        let mut last = None;
        for address in addresses {
            if let Err(e) = self.allowed(dest, address.ip()) {
                refused.get_or_insert(e);
                continue;
            }
            match self.open(address, &dest.host.to_string()).await {
                Ok(stream) => {
                    // The address actually connected, checked again.
                    let peer = stream.peer_addr().map_err(|source| ConnectError::Io {
                        host: dest.host.to_string(),
                        source,
                    })?;
                    self.allowed(dest, peer.ip())?;
                    return Ok(TokioIo::new(stream));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.or(refused).unwrap_or_else(|| ConnectError::Dns {
            host: dest.host.to_string(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no addresses"),
        }))
    }

    /// Connects to the proxy `uri` names (any of its addresses: the operator's proxy).
    async fn to_proxy(&self, uri: &Uri) -> Result<TokioIo<TcpStream>, ConnectError> {
        let host = uri
            .host()
            .ok_or_else(|| ConnectError::Uri(format!("the proxy {uri} names no host")))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let addresses = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => resolve(host, port).await?,
        };
        let mut last = None;
        for address in addresses {
            match self.open(address, host).await {
                Ok(stream) => return Ok(TokioIo::new(stream)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ConnectError::Uri(format!("the proxy {uri} has no address"))))
    }

    /// Opens a TCP connection to `address`, within the connect timeout.
    async fn open(&self, address: SocketAddr, host: &str) -> Result<TcpStream, ConnectError> {
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(address))
            .await
            .map_err(|_| ConnectError::Timeout(host.to_string()))?
            .map_err(|source| ConnectError::Io {
                host: host.to_string(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

/// The addresses `name` resolves to, with `port`.
async fn resolve(name: &str, port: u16) -> Result<Vec<SocketAddr>, ConnectError> {
    tokio::net::lookup_host((name, port))
        .await
        .map(Iterator::collect)
        .map_err(|source| ConnectError::Dns {
            host: name.to_string(),
            source,
        })
}

/// The connector a proxy's tunnel is opened with: a plain TCP connection to the proxy.
#[derive(Clone)]
struct ProxyTcp {
    inner: Arc<Inner>,
}

impl tower_service::Service<Uri> for ProxyTcp {
    type Response = TokioIo<TcpStream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<TokioIo<TcpStream>, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, proxy: Uri) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move { inner.to_proxy(&proxy).await })
    }
}
