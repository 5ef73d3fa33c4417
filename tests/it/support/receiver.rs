//! An HTTP receiver on loopback for outbound tests: speaks HTTP/1.1 (keep-alive) over a real
//! socket, optionally TLS, and does what the test sets: answer 200, answer 503, answer 400
//! (or either echoing the request), reset the connection, or stall without answering. It counts every connection it accepts, so a test
//! can show that a refused destination was never reached.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the receiver does with the next requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Answers 200.
    Ok,
    /// Answers 503 with `Retry-After: 1`.
    Unavailable,
    /// Answers 400 with the body `invalid_payload`, as Slack refuses a message.
    Reject,
    /// Closes the connection without answering.
    Reset,
    /// Reads the request and never answers.
    Stall,
    /// Answers 503 without `Retry-After`, as a receiver that is down does (one that sends
    /// the header is waited for by the shipped sinks, and no failure).
    Down,
    /// Answers 429 with `Retry-After: 1`, as a rate-limited API does.
    RateLimited,
    /// Answers 400 with a body that echoes the request: its target and headers.
    EchoReject,
    /// Answers 503 (without `Retry-After`) with a body that echoes the request likewise.
    EchoUnavailable,
    /// Answers 500 with an AWS JSON error (`InternalFailure`), as a failing AWS API does.
    InternalError,
}

/// One request the receiver read.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request line's target (path and query).
    pub path: String,
    /// Header names (lowercase) and values.
    pub headers: Vec<(String, String)>,
    /// The body, parsed as JSON (null if it is not).
    pub body: Value,
    /// The body as it came (a protobuf one, say).
    pub raw: Vec<u8>,
    /// What the receiver did with it.
    pub mode: Mode,
    /// When it was read.
    pub at: std::time::Instant,
}

struct Shared {
    mode: Mutex<Mode>,
    received: Mutex<Vec<Received>>,
    connections: AtomicUsize,
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a plain HTTP receiver on 127.0.0.1, answering 200.
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// Starts a receiver; with `tls`, it speaks HTTPS with that server config.
    pub async fn start_with(tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve_on(listener, tls)
    }

    /// Starts a plain HTTP receiver on 127.0.0.1:`port`, answering 200: one that comes back
    /// where an earlier one (dropped) listened. Tries for up to 5 s while the port is busy.
    pub async fn start_on(port: u16) -> Self {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            match TcpListener::bind(("127.0.0.1", port)).await {
                Ok(listener) => return Self::serve_on(listener, None),
                Err(e) if tokio::time::Instant::now() > deadline => {
                    panic!("bind 127.0.0.1:{port} again: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Serves `listener`, with `tls` if given.
    fn serve_on(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Ok),
            received: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
        });
        let acceptor = tls;
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    shared.connections.fetch_add(1, Ordering::SeqCst);
                    let shared = shared.clone();
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        match acceptor {
                            Some(acceptor) => {
                                if let Ok(stream) = acceptor.accept(stream).await {
                                    serve(stream, shared).await;
                                }
                            }
                            None => serve(stream, shared).await,
                        }
                    });
                }
            }
        });
        Self { addr, shared, task }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT` (or https).
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.port())
    }

    /// Sets what it does with the next requests.
    pub fn set(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
    }

    /// Every request read so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// The requests answered 200 so far.
    pub fn delivered(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.mode == Mode::Ok)
            .collect()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one connection: requests in turn, each answered as the mode says.
async fn serve(mut stream: impl AsyncRead + AsyncWrite + Unpin, shared: Arc<Shared>) {
    let mut buffer = Vec::new();
    loop {
        let Some((path, headers, body)) = read_request(&mut stream, &mut buffer).await else {
            return;
        };
        let mode = *shared.mode.lock().unwrap();
        let echo = echo(&path, &headers);
        shared.received.lock().unwrap().push(Received {
            path,
            headers,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            raw: body,
            mode,
            at: std::time::Instant::now(),
        });
        let echoed = |status: &str| {
            format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{echo}",
                echo.len()
            )
            .into_bytes()
        };
        let answer: &[u8] = &match mode {
            Mode::EchoReject => echoed("400 Bad Request"),
            Mode::EchoUnavailable => echoed("503 Service Unavailable"),
            _ => Vec::new(),
        };
        let answer: &[u8] = match mode {
            Mode::EchoReject | Mode::EchoUnavailable => answer,
            Mode::Ok => b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            Mode::Unavailable => {
                b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 11\r\n\r\nmaintenance"
            }
            Mode::Down => {
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\ndown"
            }
            Mode::InternalError => {
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 45\r\n\r\n{\"__type\":\"InternalFailure\",\"message\":\"down\"}"
            }
            Mode::RateLimited => {
                b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 12\r\n\r\nrate_limited"
            }
            Mode::Reject => {
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 15\r\n\r\ninvalid_payload"
            }
            Mode::Reset => return,
            Mode::Stall => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
        };
        if stream.write_all(answer).await.is_err() {
            return;
        }
    }
}

/// What an echoing answer's body says: the request's target, then each header but the
/// ones about the body, as a receiver's error page quoting the request would.
fn echo(path: &str, headers: &[(String, String)]) -> String {
    let mut text = format!("path={path}");
    for (name, value) in headers {
        if !matches!(name.as_str(), "content-length" | "content-type" | "host") {
            text.push_str(&format!(" {name}={value}"));
        }
    }
    text
}

/// Reads one request (head and a `content-length` body); `None` at the end of the stream.
async fn read_request(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
) -> Option<(String, Vec<(String, String)>, Vec<u8>)> {
    let head_end = loop {
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = buffer[head_end..head_end + length].to_vec();
    buffer.drain(..head_end + length);
    Some((path, headers, body))
}
