//! A headless Chromium driven through chromedriver's WebDriver HTTP interface: JSON over
//! HTTP, spoken with reqwest. Needs Debian's `chromium` and `chromium-driver` (`.ci/run`
//! installs them).
//!
//! chromedriver runs in a process group of its own ([`super::spawned`]), which the
//! browser it starts and the browser's helpers join: however a test ends (it passes and
//! stops the browser, panics, or its future is dropped at a timeout), dropping the
//! [`Browser`] kills them all, and the test fails if any is left. Ending the session over
//! WebDriver first is a courtesy, bounded in time; killing only chromedriver orphaned the
//! browser.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use super::spawned::{Spawned, Started};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// The key WebDriver names element references by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long ending the session over WebDriver may take before the processes are killed.
const DELETE_WITHIN: Duration = Duration::from_secs(10);

/// A chromedriver process and one browser session in it, ended on drop.
pub struct Browser {
    driver: Spawned,
    http: reqwest::Client,
    session: String,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium (1280×800, a laptop
    /// screen) that records its console log.
    pub async fn start() -> Self {
        assert!(
            Path::new(CHROMEDRIVER).exists(),
            "{CHROMEDRIVER} is missing: apt-get install -y chromium chromium-driver"
        );
        let port = super::free_port();
        let driver = Spawned::start(
            Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "chromedriver",
        );
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        super::eventually(
            "chromedriver listening",
            Duration::from_secs(20),
            async || http.get(format!("{base}/status")).send().await.ok(),
        )
        .await;
        let answer = call(
            &http,
            reqwest::Method::POST,
            &format!("{base}/session"),
            capabilities(),
        )
        .await;
        let session = answer["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        Self {
            driver,
            http,
            session: format!("{base}/session/{session}"),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        call(&self.http, method, &format!("{}{path}", self.session), body).await
    }

    /// Opens `url` and waits until it has loaded.
    pub async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", json!({"url": url}))
            .await;
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page; its return value.
    pub async fn script(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
        .await
    }

    async fn element(&self, css: &str) -> String {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        match found[ELEMENT].as_str() {
            Some(id) => id.to_string(),
            None => panic!("no element reference for {css}: {found}"),
        }
    }

    /// Clicks the element `css` selects, as a person would.
    pub async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            json!({}),
        )
        .await;
    }

    /// Types `text` into the element `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            json!({"text": text}),
        )
        .await;
    }

    /// Empties the input the element `css` selects.
    pub async fn clear(&self, css: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/clear"),
            json!({}),
        )
        .await;
    }

    /// The text of the element `css` selects, or an empty string when there is none.
    pub async fn text(&self, css: &str) -> String {
        let text = self
            .script(
                "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''",
                json!([css]),
            )
            .await;
        text.as_str().unwrap_or_default().to_string()
    }

    /// Accepts the dialog the page opened (`confirm`).
    pub async fn accept_alert(&self) {
        self.call(reqwest::Method::POST, "/alert/accept", json!({}))
            .await;
    }

    /// The browser's console log since the last call: each entry's `level` and `message`.
    pub async fn console(&self) -> Vec<Value> {
        let log = self
            .call(reqwest::Method::POST, "/se/log", json!({"type": "browser"}))
            .await;
        log.as_array().cloned().unwrap_or_default()
    }

    /// Writes a PNG screenshot of the window to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let png = self
            .call(reqwest::Method::GET, "/screenshot", Value::Null)
            .await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("base64 PNG"))
            .expect("valid base64");
        std::fs::write(path, bytes).expect("write the screenshot");
    }

    /// Every live process of this session: chromedriver, the browser and its helpers.
    pub fn processes(&self) -> Vec<Started> {
        self.driver.processes()
    }

    /// chromedriver's process group and marker, to look for what it started after it ended.
    pub fn trace(&self) -> (u32, String) {
        self.driver.trace()
    }

    /// Ends the session (waiting at most [`DELETE_WITHIN`] for chromedriver to), then
    /// chromedriver, the browser and its helpers; panics if any is left.
    pub async fn stop(mut self) {
        let _ = tokio::time::timeout(DELETE_WITHIN, self.http.delete(&self.session).send()).await;
        self.driver.stop();
    }
}

fn capabilities() -> Value {
    json!({"capabilities": {"alwaysMatch": {
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,800"],
        },
        "goog:loggingPrefs": {"browser": "ALL"},
    }}})
}

/// One WebDriver command: its `value`, or a panic naming the WebDriver error.
async fn call(http: &reqwest::Client, method: reqwest::Method, url: &str, body: Value) -> Value {
    let mut request = http.request(method, url);
    if !body.is_null() {
        request = request.json(&body);
    }
    let response = request.send().await.expect("a WebDriver answer");
    let status = response.status();
    let answer: Value = response.json().await.expect("a WebDriver JSON answer");
    assert!(status.is_success(), "WebDriver {url}: {status} {answer}");
    answer["value"].clone()
}
