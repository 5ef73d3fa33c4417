//! A registry that misbehaves as a real one never does, on a loopback port: a tiny HTTP/1.1
//! server on tokio's TCP whose answer to each request the test scripts (stream a body
//! without end, never answer), one request per connection. It records every request head it
//! reads, so it also serves as a fake HTTP proxy that shows what a client sent through it.
//! Stopped when dropped.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// How much an [`Reply::Endless`] body streams before it stops writing and holds the
/// connection open: far past every cap, yet bounded, so that a client without caps fills
/// its memory this far and then waits, instead of filling the machine's.
pub const STREAM_BUDGET: u64 = 64 << 20;

/// What the server answers to one request.
pub enum Reply {
    /// Nothing: the request is read and the connection stays open, silent.
    Never,
    /// `status` with `headers` and `body`, then the connection closes.
    Full {
        /// The status code.
        status: u16,
        /// Extra headers.
        headers: Vec<(&'static str, String)>,
        /// The body.
        body: Vec<u8>,
    },
    /// `status` and no length, then a body without end (up to [`STREAM_BUDGET`], then
    /// silence with the connection open).
    Endless {
        /// The status code.
        status: u16,
    },
}

impl Reply {
    /// `200` with `body` (of `content_type`).
    pub fn ok(content_type: &str, body: Vec<u8>) -> Self {
        Reply::Full {
            status: 200,
            headers: vec![("content-type", content_type.to_string())],
            body,
        }
    }
}

/// What a script sees of a request: its first line (`GET /v2/x/manifests/v1 HTTP/1.1`).
type Script = dyn Fn(&str) -> Reply + Send + Sync;

/// The running server.
pub struct Hostile {
    /// `127.0.0.1:PORT`.
    pub host: String,
    requests: Arc<Mutex<Vec<String>>>,
    accepted: Arc<AtomicUsize>,
    streamed: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Hostile {
    /// Starts a server on a free loopback port answering each request as `script` says.
    pub async fn start(script: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let script: Arc<Script> = Arc::new(script);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let streamed = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn({
            let (requests, accepted, streamed) =
                (requests.clone(), accepted.clone(), streamed.clone());
            async move {
                // Dropped with the task: every connection ends with the server.
                let mut connections = JoinSet::new();
                while let Ok((stream, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let (script, requests, streamed) =
                        (script.clone(), requests.clone(), streamed.clone());
                    connections.spawn(async move {
                        serve(stream, &*script, &requests, &streamed).await;
                    });
                }
            }
        });
        Self {
            host,
            requests,
            accepted,
            streamed,
            task,
        }
    }

    /// `oci://HOST/REPOSITORY_AND_TAG` on this server.
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://{}/{repository_and_tag}", self.host)
    }

    /// The URL of this server as a proxy: `http://HOST`.
    pub fn url(&self) -> String {
        format!("http://{}", self.host)
    }

    /// Every request head read so far (request line and headers, as sent).
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Bytes of endless bodies written so far.
    pub fn streamed(&self) -> u64 {
        self.streamed.load(Ordering::SeqCst)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request head and answers it as `script` says.
async fn serve(
    mut stream: TcpStream,
    script: &Script,
    requests: &Mutex<Vec<String>>,
    streamed: &AtomicU64,
) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 << 10 {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let line = head.lines().next().unwrap_or("").to_string();
    requests.lock().unwrap().push(head);
    match script(&line) {
        Reply::Never => std::future::pending::<()>().await,
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut answer = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                answer.push_str(&format!("{name}: {value}\r\n"));
            }
            answer.push_str("\r\n");
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = stream.write_all(&body).await;
            let _ = stream.shutdown().await;
        }
        Reply::Endless { status } => {
            let answer = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/vnd.oci.image.manifest.v1+json\r\nconnection: close\r\n\r\n"
            );
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            let chunk = vec![b' '; 64 << 10];
            while streamed.load(Ordering::SeqCst) < STREAM_BUDGET {
                if stream.write_all(&chunk).await.is_err() {
                    return;
                }
                streamed.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
            std::future::pending::<()>().await;
        }
    }
}
