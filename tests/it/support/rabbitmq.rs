//! A real RabbitMQ on loopback: Debian's `rabbitmq-server` (3.10) with its management
//! plugin, a node of its own (name, data, logs, cookie and config in a temporary folder, its
//! AMQP, management, distribution and epmd ports free ones), and an `epmd` the test starts
//! for it in the foreground (one the node started would daemonize and outlive the test).
//! Both are stopped when dropped (see [`super::spawned`]).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::spawned::Spawned;

/// Where Debian installs the server's start script (not the `/usr/sbin` wrapper, which
/// switches to the `rabbitmq` user).
const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
/// The Erlang port mapper.
const EPMD: &str = "/usr/bin/epmd";

/// A running RabbitMQ node; the default `guest` user may use it from loopback.
pub struct Rabbitmq {
    server: Spawned,
    epmd: Spawned,
    api: u16,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Rabbitmq {
    /// Starts a node and waits until its management API answers.
    pub async fn start() -> Self {
        assert!(
            Path::new(SERVER).exists(),
            "{SERVER} is missing: install Debian's rabbitmq-server package \
             (apt-get install rabbitmq-server; .ci/run does)"
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = |name: &str| dir.path().join(name).display().to_string();
        let [amqp, api, dist, epmd_port] = [(); 4].map(|()| super::free_port());
        let conf = format!(
            "listeners.tcp.default = 127.0.0.1:{amqp}\nmanagement.tcp.ip = 127.0.0.1\n\
             management.tcp.port = {api}\n"
        );
        std::fs::write(path("rabbitmq.conf"), conf).expect("write rabbitmq.conf");
        let log = std::fs::File::create(path("server.log")).expect("a log file");
        let epmd = Spawned::start(
            Command::new(EPMD)
                .args(["-address", "127.0.0.1", "-port", &epmd_port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "epmd",
        );
        let server = Spawned::start(
            Command::new(SERVER)
                .current_dir(dir.path())
                .env("HOME", dir.path())
                .env("RABBITMQ_NODENAME", format!("switchyard{api}@localhost"))
                .env("RABBITMQ_MNESIA_BASE", path("mnesia"))
                .env("RABBITMQ_LOG_BASE", path("log"))
                .env("RABBITMQ_PID_FILE", path("rabbitmq.pid"))
                .env("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf"))
                .env("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins"))
                .env("RABBITMQ_ENABLED_PLUGINS", "rabbitmq_management")
                .env("RABBITMQ_DIST_PORT", dist.to_string())
                .env("ERL_EPMD_PORT", epmd_port.to_string())
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("the log file"))
                .stderr(log),
            "rabbitmq-server",
        );
        let started = Self {
            server,
            epmd,
            api,
            dir,
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("an HTTP client"),
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        while started.call("GET", "overview", None).await.0 != 200 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "rabbitmq's management API did not answer within 90 s; its log:\n{}",
                std::fs::read_to_string(started.dir.path().join("server.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        started
    }

    /// The management API's base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.api)
    }

    /// `METHOD /api/PATH` as `guest`, with `body` as JSON: the status and the answer.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self
            .http
            .request(method, format!("{}/api/{path}", self.url()))
            .basic_auth("guest", Some("guest"));
        if let Some(body) = body {
            request = request.json(&body);
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                (status, response.json().await.unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        }
    }

    /// `METHOD /api/PATH`, which must succeed.
    pub async fn ok(&self, method: &str, path: &str, body: Value) {
        let (status, answer) = self.call(method, path, Some(body)).await;
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {answer}"
        );
    }

    /// The messages waiting in `queue` of the vhost `/`, taken off it
    /// (`POST /api/queues/%2F/QUEUE/get`).
    pub async fn take(&self, queue: &str) -> Vec<Value> {
        let request = json!({"count": 100, "ackmode": "ack_requeue_false", "encoding": "auto"});
        let (status, answer) = self
            .call("POST", &format!("queues/%2F/{queue}/get"), Some(request))
            .await;
        assert_eq!(status, 200, "{answer}");
        answer.as_array().cloned().unwrap_or_default()
    }

    /// Stops the node, then its epmd.
    pub fn stop(mut self) {
        self.server.stop();
        self.epmd.stop();
    }
}
