//! A real Alertmanager on loopback: Debian's `prometheus-alertmanager` package (0.25), with
//! a minimal config (one receiver that sends nowhere), its storage in a temporary folder
//! and clustering off; stopped when dropped (see [`super::spawned`]).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::spawned::Spawned;

/// Where Debian installs it.
const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

/// A running Alertmanager.
pub struct Alertmanager {
    child: Spawned,
    port: u16,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Alertmanager {
    /// Starts Alertmanager on `port` of 127.0.0.1 and waits until it is ready.
    pub async fn start_on(port: u16) -> Self {
        let binary = PathBuf::from(ALERTMANAGER);
        assert!(
            binary.exists(),
            "{ALERTMANAGER} is missing: install Debian's prometheus-alertmanager package \
             (apt-get install prometheus-alertmanager; .ci/run does)"
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(
            &config,
            "route: {receiver: nowhere}\nreceivers: [{name: nowhere}]\n",
        )
        .expect("write alertmanager.yml");
        let log = std::fs::File::create(dir.path().join("alertmanager.log")).expect("a log");
        let child = Spawned::start(
            Command::new(binary)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--cluster.listen-address=")
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("the log file"))
                .stderr(log),
            "alertmanager",
        );
        let started = Self {
            child,
            port,
            dir,
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("an HTTP client"),
        };
        let ready = format!("{}/-/ready", started.url());
        super::wait_until_ready(&started.http, &ready, "alertmanager", || started.log()).await;
        started
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("alertmanager.log")).unwrap_or_default()
    }

    /// The alerts its API v2 lists (`GET /api/v2/alerts`): the active ones; a resolved
    /// alert is left out.
    pub async fn alerts(&self) -> Vec<Value> {
        let response = self
            .http
            .get(format!("{}/api/v2/alerts", self.url()))
            .send()
            .await
            .expect("alertmanager answers");
        let body: Value = response.json().await.expect("a JSON answer");
        body.as_array().cloned().expect("a list of alerts")
    }

    /// Stops it.
    pub fn stop(mut self) {
        self.child.stop();
    }
}
