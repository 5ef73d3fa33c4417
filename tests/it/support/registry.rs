//! A real OCI registry on loopback: Debian's `docker-registry` (distribution 2.8), storing
//! into a temporary folder, stopped when dropped (see [`super::spawned`]); over plain HTTP,
//! or over HTTPS with a certificate signed by a test CA of its own ([`Registry::start_tls`]).

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
    /// The file of the CA that signed its certificate, when it serves HTTPS.
    ca_file: Option<PathBuf>,
}

/// A test CA's certificate (PEM) and a serving certificate and key it signed for
/// `127.0.0.1` and `localhost` (PEM); the CA is named after `host`, so two registries' CAs
/// differ in name as well as in key.
fn test_certificates(host: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(
        DnType::CommonName,
        format!("switchyard test registry CA {host}"),
    );
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let names = ["127.0.0.1", "localhost"].map(String::from).to_vec();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(names)
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    (ca.pem(), leaf.pem(), leaf_key.serialize_pem())
}

impl Registry {
    /// Starts a registry on a free loopback port and waits until it answers `/v2/`.
    pub async fn start() -> Self {
        Self::start_with(None, false).await
    }

    /// Starts a registry that wants `user` and `password` (basic authentication, htpasswd).
    pub async fn start_with_login(user: &str, password: &str) -> Self {
        Self::start_with(Some((user, password)), false).await
    }

    /// Starts a registry serving HTTPS with a certificate for `127.0.0.1` signed by a CA
    /// made for it (see [`Registry::ca_file`]).
    pub async fn start_tls() -> Self {
        Self::start_with(None, true).await
    }

    /// The PEM file of the CA that signed its certificate (HTTPS registries only).
    pub fn ca_file(&self) -> &std::path::Path {
        self.ca_file.as_deref().expect("a registry serving HTTPS")
    }

    async fn start_with(login: Option<(&str, &str)>, tls: bool) -> Self {
        assert!(
            PathBuf::from(BINARY).exists(),
            "{BINARY} is missing: install Debian's docker-registry package (.ci/run does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let port = super::free_port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        // The certificate and key it serves HTTPS with, and the CA that signed them.
        let tls = tls.then(|| {
            let (ca, certificate, key) = test_certificates(&host);
            let file = |name: &str, text: &str| {
                let path = dir.path().join(name);
                std::fs::write(&path, text).unwrap();
                path
            };
            (
                file("ca.pem", &ca),
                file("tls.crt", &certificate),
                file("tls.key", &key),
            )
        });
        let mut text = format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nlog:\n  level: error\nhttp:\n  addr: {host}\n",
            dir.path().join("data").display()
        );
        if let Some((_, certificate, key)) = &tls {
            text.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                certificate.display(),
                key.display()
            ));
        }
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
        let ca_file = tls.map(|(ca, _, _)| ca);
        std::fs::write(&config, text).unwrap();
        let registry = Self {
            child: serve(&config),
            host,
            dir,
            ca_file,
        };
        registry.wait_until_up().await;
        registry
    }

    async fn wait_until_up(&self) {
        let (mut scheme, mut http) = ("http", reqwest::Client::builder().no_proxy());
        if let Some(ca) = &self.ca_file {
            let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
            (scheme, http) = ("https", http.add_root_certificate(ca));
        }
        let http = http.build().unwrap();
        let url = format!("{scheme}://{}/v2/", self.host);
        super::eventually(
            "the registry answers",
            Duration::from_secs(20),
            async || {
                let response = http.get(&url).send().await.ok()?;
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
