//! A real OCI registry on loopback: Debian's `docker-registry` (distribution 2.8), storing
//! into a temporary folder, stopped when dropped (see [`super::spawned`]).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::spawned::Spawned;

/// Where Debian installs the registry.
const BINARY: &str = "/usr/bin/docker-registry";

/// A running registry.
pub struct Registry {
    child: Spawned,
    /// `127.0.0.1:PORT`.
    pub host: String,
    /// The registry's config and storage.
    dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry on a free loopback port and waits until it answers `/v2/`.
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// Starts a registry that wants `user` and `password` (basic authentication, htpasswd).
    pub async fn start_with_login(user: &str, password: &str) -> Self {
        Self::start_with(Some((user, password))).await
    }

    async fn start_with(login: Option<(&str, &str)>) -> Self {
        assert!(
            PathBuf::from(BINARY).exists(),
            "{BINARY} is missing: install Debian's docker-registry package (.ci/run does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let port = super::free_port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        let mut text = format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\nlog:\n  level: error\n",
            dir.path().join("data").display()
        );
        if let Some((user, password)) = login {
            let hash = bcrypt::hash_with_result(password, 4)
                .unwrap()
                .format_for_version(bcrypt::Version::TwoY);
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{user}:{hash}\n")).unwrap();
            text.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(&config, text).unwrap();
        let registry = Self {
            child: serve(&config),
            host,
            dir,
        };
        registry.wait_until_up().await;
        registry
    }

    async fn wait_until_up(&self) {
        let url = format!("http://{}/v2/", self.host);
        super::eventually(
            "the registry answers",
            Duration::from_secs(20),
            async || {
                let response = reqwest::get(&url).await.ok()?;
                // 401 when it wants a login: it is up either way.
                let up = response.status().is_success() || response.status() == 401;
                up.then_some(())
            },
        )
        .await;
    }

    /// Starts the registry again after [`Registry::stop`], on the same port with what it
    /// stored, and waits until it answers.
    pub async fn restart(&mut self) {
        self.stop();
        self.child = serve(&self.dir.path().join("config.yml"));
        self.wait_until_up().await;
    }

    /// `oci://HOST/REPOSITORY_AND_TAG` in this registry.
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://{}/{repository_and_tag}", self.host)
    }

    /// Stops the registry (it no longer answers).
    pub fn stop(&mut self) {
        self.child.stop();
    }
}

/// `docker-registry serve CONFIG`, in a process group of its own.
fn serve(config: &std::path::Path) -> Spawned {
    Spawned::start(
        Command::new(BINARY)
            .arg("serve")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "docker-registry",
    )
}
