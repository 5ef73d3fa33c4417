//! The demo's webhook receiver: a Slack-style endpoint on loopback that the demo's `alerts`
//! handler posts Warning Events to. It answers its first request `503` with `Retry-After: 1`,
//! as a receiver in trouble would, and every later one `200`, so the demo shows a failed
//! delivery retried with backoff and arriving. Each request is printed as `[receiver] ...`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;

/// The address the built-in demo config posts to; the demo takes another port when this one
/// is in use and points its copy of the config there.
pub const ADDRESS: &str = "127.0.0.1:9472";

/// A running receiver; stops when dropped.
pub struct Receiver {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the receiver on [`ADDRESS`], or on a free loopback port if that is taken.
pub async fn start() -> std::io::Result<Receiver> {
    let listener = match TcpListener::bind(ADDRESS).await {
        Ok(listener) => listener,
        Err(_) => TcpListener::bind("127.0.0.1:0").await?,
    };
    let addr = listener.local_addr()?;
    let requests = Arc::new(AtomicU64::new(0));
    let app = Router::new().fallback(receive).with_state(requests);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(Receiver { addr, task })
}

/// Answers one request: `503` the first time, `200` after.
async fn receive(State(requests): State<Arc<AtomicU64>>, uri: Uri, body: Bytes) -> Response {
    let n = requests.fetch_add(1, Ordering::Relaxed) + 1;
    let text = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["text"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{} bytes", body.len()));
    if n == 1 {
        println!(
            "[receiver] request {n} to {uri}: answered 503, as a receiver in trouble would: {text}"
        );
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            "the demo's receiver fails its first request",
        )
            .into_response();
    }
    println!("[receiver] request {n} to {uri}: answered 200: {text}");
    StatusCode::OK.into_response()
}
