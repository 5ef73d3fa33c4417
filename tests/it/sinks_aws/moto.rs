//! moto in server mode (PyPI `moto[server]`): a real implementation of the AWS APIs the
//! sinks call, on loopback, with boto3 beside it (`boto.py`) to make the destinations and
//! read back what reached them.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, spawned::Spawned};

/// The moto release the tests are written against.
pub const MOTO: &str = "5.2.5";

/// The boto3 release beside it.
pub const BOTO3: &str = "1.44.8";

/// The virtual environment's `bin` folder, moto and boto3 installed in it.
fn bin() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let python = support::python::venv(
            &format!("moto-{MOTO}"),
            &[&format!("moto[server]=={MOTO}"), &format!("boto3=={BOTO3}")],
        );
        python.parent().expect("bin").to_path_buf()
    })
}

/// A moto server on a free loopback port, ended when dropped.
pub struct Moto {
    _process: Spawned,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

impl Moto {
    /// Starts the server and waits until it answers.
    pub async fn start() -> Moto {
        let port = support::free_port();
        // `python -m`, not the `moto_server` script: a script's first line names the
        // folder the environment was made in, before it was moved in place.
        let mut command = Command::new(bin().join("python"));
        command
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let process = Spawned::start(&mut command, "moto_server");
        let endpoint = format!("http://127.0.0.1:{port}");
        let probe = format!("{endpoint}/moto-api/data.json");
        support::eventually("moto answers", Duration::from_secs(60), async || {
            reqwest::get(&probe)
                .await
                .ok()
                .filter(|r| r.status().is_success())
        })
        .await;
        Moto {
            _process: process,
            endpoint,
        }
    }

    /// Runs `request` through boto.py against this server.
    pub fn boto(&self, mut request: Value) -> Value {
        request["endpoint"] = json!(self.endpoint);
        let script = support::root().join("tests/it/sinks_aws/boto.py");
        let mut command = Command::new(bin().join("python"));
        command
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = Spawned::start(&mut command, "boto.py");
        {
            use std::io::Write;
            let mut stdin = child.child().stdin.take().expect("piped stdin");
            stdin
                .write_all(request.to_string().as_bytes())
                .expect("write the request");
        }
        let output = child.wait_with_output();
        assert!(
            output.status.success(),
            "boto.py {request}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("boto.py prints JSON")
    }
}
