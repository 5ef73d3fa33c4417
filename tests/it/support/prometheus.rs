//! A real Prometheus on loopback: Debian's `prometheus` package (2.42), with a config and
//! its storage in a temporary folder, scraping every second; stopped when dropped (see
//! [`super::spawned`]). And `promtool`, from the same package.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::spawned::Spawned;

/// Where Debian installs the server.
const PROMETHEUS: &str = "/usr/bin/prometheus";
/// Where Debian installs its checker.
const PROMTOOL: &str = "/usr/bin/promtool";

/// `binary`, or a failure saying which package brings it.
fn required(binary: &str) -> PathBuf {
    let path = PathBuf::from(binary);
    assert!(
        path.exists(),
        "{binary} is missing: install Debian's prometheus package (apt-get install prometheus; .ci/run does)"
    );
    path
}

/// Runs `promtool ARGS` in `dir`; its exit status and what it printed (stdout, then stderr).
pub fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let output = super::spawned::output(
        Command::new(required(PROMTOOL)).current_dir(dir).args(args),
        "promtool",
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// A running Prometheus.
pub struct Prometheus {
    child: Spawned,
    url: String,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port, scraping `/metrics` of each of `targets`
    /// (`HOST:PORT`) every second as the job `switchyard`, evaluating `rule_files` every
    /// second, and waits until it is ready.
    pub async fn start(targets: &[String], rule_files: &[PathBuf]) -> Self {
        let prometheus = required(PROMETHEUS);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("prometheus.yml");
        let config_text = serde_json::json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": rule_files,
            "scrape_configs": [{
                "job_name": "switchyard",
                "static_configs": [{"targets": targets}],
            }],
        });
        // JSON is YAML.
        std::fs::write(&config, config_text.to_string()).expect("write prometheus.yml");
        let port = super::free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("a log file");
        let child = Spawned::start(
            Command::new(prometheus)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("the log file"))
                .stderr(log),
            "prometheus",
        );
        let started = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("an HTTP client"),
        };
        let ready = format!("{}/-/ready", started.url);
        super::wait_until_ready(&started.http, &ready, "prometheus", || started.log()).await;
        started
    }

    /// What Prometheus logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/PATH?QUERY`: the answer's `data`; panics with Prometheus's error.
    pub async fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let response = self
            .http
            .get(format!("{}/api/v1/{path}", self.url))
            .query(query)
            .send()
            .await
            .expect("prometheus answers");
        let body: Value = response.json().await.expect("a JSON answer");
        assert_eq!(
            body["status"], "success",
            "prometheus refused {path} {query:?}: {body}"
        );
        body["data"].clone()
    }

    /// The instant vector `expr` evaluates to now.
    pub async fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api("query", &[("query", expr)]).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// Stops Prometheus.
    pub fn stop(mut self) {
        self.child.stop();
    }
}
