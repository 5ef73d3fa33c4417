//! What may stand under a plugin's name in the plugins folder, over real files and real HTTP:
//! a FIFO, a huge file, a symbolic link out of the folder and garbage are each refused
//! promptly with a one-line error that quotes nothing of the file, while the running
//! version stays, other plugins keep hot-reloading and the daemon shuts down. A trap says
//! why before where.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{self, TestDaemon};
use serde_json::{Value, json};
use switchyard::plugin::{CallLimits, Event, EventKind, PluginHost, PluginLogs, loader};

const WAIT: Duration = Duration::from_secs(30);

/// How long a refused load may take: reading is refused before it starts.
const PROMPT: Duration = Duration::from_secs(5);

/// The handler `bad` uses the plugin `bad` (the file under test), `good` uses `good`.
const TWO_PLUGINS: &str = "
handlers:
  bad:
    plugin: bad
  good:
    plugin: good
routes:
  - name: to-bad
    resource: configmaps
    handler: bad
  - name: to-good
    resource: configmaps
    handler: good
";

struct Fixture {
    t: TestDaemon,
    plugins: PathBuf,
}

/// A daemon whose plugins folder holds `bad.wasm` and `good.wasm`, both log-events.
async fn start() -> Fixture {
    let t = TestDaemon::builder(TWO_PLUGINS)
        .plugin_file("bad", "log-events")
        .plugin_file("good", "log-events")
        .start()
        .await;
    Fixture {
        plugins: t.plugins_dir(),
        t,
    }
}

fn built(name: &str) -> PathBuf {
    support::plugins_dir().join(format!("{name}.wasm"))
}

fn sha256_of(path: &Path) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(std::fs::read(path).unwrap());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Puts `make(temporary path)` in place of `NAME.wasm` with a rename.
fn replace(plugins: &Path, name: &str, make: impl FnOnce(&Path)) {
    let tmp = plugins.join(format!(".{name}.wasm.tmp"));
    make(&tmp);
    std::fs::rename(&tmp, plugins.join(format!("{name}.wasm"))).unwrap();
}

fn mkfifo(path: &Path) {
    let status = support::spawned::status(std::process::Command::new("mkfifo").arg(path), "mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Opens a FIFO for writing and closes it at once, so a reader stuck opening it (the bug
/// this guards against) gets an empty file and the test runtime can stop.
struct UnblockFifo(PathBuf);

impl Drop for UnblockFifo {
    fn drop(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.0);
    }
}

impl Fixture {
    async fn plugin(&self, name: &str) -> Value {
        let (code, body) = support::get_json(&format!("{}/plugins", self.t.admin_url())).await;
        assert_eq!(code, 200);
        body["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no plugin {name} in {body:#}"))
            .clone()
    }

    /// Waits until the plugin `bad` shows a last error containing `text`; returns it.
    async fn bad_fails_with(&self, text: &str) -> String {
        support::eventually(&format!("an error saying {text:?}"), WAIT, async || {
            let view = self.plugin("bad").await;
            let error = view["last_error"].as_str()?;
            error.contains(text).then(|| error.to_string())
        })
        .await
    }

    /// `POST /plugins/NAME/reload`, which must answer within [`PROMPT`].
    async fn reload(&self, name: &str) -> (u16, Value) {
        let url = format!("{}/plugins/{name}/reload", self.t.admin_url());
        let started = Instant::now();
        let answer = tokio::time::timeout(PROMPT, support::post_json(&url))
            .await
            .unwrap_or_else(|_| panic!("POST {url} did not answer within {PROMPT:?}"));
        assert!(started.elapsed() < PROMPT);
        answer
    }

    /// Replaces `good.wasm` with the faulty plugin and waits for the watcher to load it.
    async fn good_still_hot_reloads(&self) {
        replace(&self.plugins, "good", |tmp| {
            std::fs::copy(built("faulty"), tmp).unwrap();
        });
        let faulty = sha256_of(&built("faulty"));
        support::eventually("good.wasm to be reloaded", WAIT, async || {
            (self.plugin("good").await["sha256"] == faulty.as_str()).then_some(())
        })
        .await;
    }

    /// The handler `bad`'s `plugin_error` in /status, checking it still runs a version.
    async fn bad_handler_error(&self) -> String {
        let (code, body) = support::get_json(&format!("{}/status", self.t.admin_url())).await;
        assert_eq!(code, 200);
        let handler = body["handlers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"] == "bad")
            .unwrap()
            .clone();
        assert_eq!(handler["plugin_loaded"], true, "{handler:#}");
        handler["plugin_error"].as_str().unwrap().to_string()
    }

    async fn shut_down(self) {
        tokio::time::timeout(WAIT, self.t.stop_within(Duration::from_secs(5)))
            .await
            .expect("the daemon to shut down");
    }
}

#[tokio::test]
async fn a_fifo_named_as_a_plugin_blocks_neither_reloads_nor_shutdown() {
    let f = start().await;
    let fifo = f.plugins.join("bad.wasm");
    let _unblock = UnblockFifo(fifo.clone());
    replace(&f.plugins, "bad", mkfifo);

    let error = f.bad_fails_with("not a regular file").await;
    assert_eq!(
        error,
        format!(
            "cannot read plugin {}: it is a FIFO (named pipe), not a regular file",
            fifo.display()
        )
    );
    assert!(
        f.bad_handler_error()
            .await
            .starts_with(&format!("{error}; still running the version loaded at ")),
    );
    assert_eq!(
        f.plugin("bad").await["sha256"],
        sha256_of(&built("log-events"))
    );

    let (code, body) = f.reload("bad").await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["error"], error.as_str());

    f.good_still_hot_reloads().await;
    let (_, body) = support::get_json(&format!("{}/plugins", f.t.admin_url())).await;
    assert_eq!(body["watching"], true);
    f.shut_down().await;
}

#[tokio::test]
async fn a_plugin_file_over_the_size_cap_is_refused_quickly_naming_its_size() {
    let f = start().await;
    replace(&f.plugins, "bad", |tmp| {
        // Sparse: 200 MiB of zeros.
        std::fs::File::create(tmp)
            .unwrap()
            .set_len(200 << 20)
            .unwrap();
    });
    let error = f.bad_fails_with("more than").await;
    assert_eq!(
        error,
        format!(
            "cannot read plugin {}: it is 209715200 bytes (200 MiB), more than the 64 MiB a plugin file may be",
            f.plugins.join("bad.wasm").display()
        )
    );
    let (code, body) = f.reload("bad").await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["error"], error.as_str());
    f.good_still_hot_reloads().await;
    f.shut_down().await;
}

#[tokio::test]
async fn a_symlink_out_of_the_plugins_folder_is_refused_and_shows_nothing_of_its_target() {
    let f = start().await;
    replace(&f.plugins, "bad", |tmp| {
        std::os::unix::fs::symlink("/etc/passwd", tmp).unwrap();
    });
    let error = f.bad_fails_with("outside the plugins folder").await;
    assert_eq!(
        error,
        format!(
            "cannot read plugin {}: it resolves to /etc/passwd, outside the plugins folder",
            f.plugins.join("bad.wasm").display()
        )
    );
    assert!(!error.contains("root"), "{error}");
    // Nothing of the file in what anyone can read without a token.
    for page in ["status", "plugins"] {
        let text = reqwest::get(format!("{}/{page}", f.t.admin_url()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!text.contains("root:"), "/{page}: {text}");
        assert!(!text.contains("0x72"), "/{page}: {text}");
    }

    // A link to another file inside the folder is fine.
    let builds = f.plugins.join("builds");
    std::fs::create_dir(&builds).unwrap();
    std::fs::copy(built("faulty"), builds.join("bad-v2.wasm")).unwrap();
    replace(&f.plugins, "bad", |tmp| {
        std::os::unix::fs::symlink("builds/bad-v2.wasm", tmp).unwrap();
    });
    let faulty = sha256_of(&built("faulty"));
    support::eventually("the linked file to load", WAIT, async || {
        let view = f.plugin("bad").await;
        (view["sha256"] == faulty.as_str() && view["last_error"].is_null()).then_some(())
    })
    .await;
    f.shut_down().await;
}

#[tokio::test]
async fn a_file_with_a_bad_magic_number_gets_a_one_line_error() {
    let f = start().await;
    std::fs::write(
        f.plugins.join("bad.wasm"),
        "root:x:0:0:root:/root:/bin/bash\n",
    )
    .unwrap();
    let error = f.bad_fails_with("is invalid").await;
    assert_eq!(
        error,
        "plugin \"bad\" is invalid: not a WebAssembly component (bad magic number)"
    );
    let (code, body) = f.reload("bad").await;
    assert_eq!(code, 422);
    assert_eq!(body, json!({"error": error, "status": 422}));
    f.shut_down().await;
}

#[tokio::test]
async fn a_trap_past_the_memory_cap_says_so_before_the_backtrace() {
    let host = PluginHost::new().unwrap();
    let plugin = loader::load(&host, &support::plugins_dir(), "faulty")
        .await
        .unwrap();
    let object = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "default", "annotations": {"faulty/allocate-mib": "64"}},
    });
    let event = Event {
        kind: EventKind::Added,
        route: "test".into(),
        object: object.to_string(),
        old_object: None,
        attempt: 1,
        final_state_unknown: false,
    };
    let limits = CallLimits {
        timeout: Duration::from_secs(5),
        memory: 16 << 20,
    };
    let error = plugin
        .call(
            Arc::from("faulty"),
            &PluginLogs::default(),
            &limits,
            "null",
            &event,
        )
        .await
        .unwrap_err()
        .to_string();
    let first_line = error.lines().next().unwrap();
    assert!(
        first_line.starts_with(
            "plugin trapped in handle: memory cap of 16 MiB exceeded: the plugin asked to grow its memory from "
        ),
        "{error}"
    );
    assert!(
        error.contains("; error while executing at wasm backtrace:"),
        "{error}"
    );
}
