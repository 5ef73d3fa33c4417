//! How the daemon finds its cluster, in the order controller-runtime uses: the
//! `--kubeconfig` given (or the config's `kubeconfig`), then `KUBECONFIG`, then the pod's
//! service account when `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` are set,
//! then `~/.kube/config`. `--context` picks a context of whichever kubeconfig is used.
//!
//! The in-cluster config is built here rather than by kube-rs' `Config::incluster`, which
//! reads fixed paths under `/var/run/secrets`: the service account folder can be moved with
//! [`SERVICE_ACCOUNT_DIR_ENV`], so the in-cluster path is tested for real (HTTPS, the CA
//! from the folder, the token file) without root.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::{Error, Result};

pub use crate::util::identity::{
    SERVICE_ACCOUNT_DIR, SERVICE_ACCOUNT_DIR_ENV, service_account_dir,
};

/// Why the in-cluster config cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum InClusterError {
    /// `KUBERNETES_SERVICE_PORT` is not a port number.
    #[error("KUBERNETES_SERVICE_PORT {0:?} is not a port number")]
    Port(String),
    /// The API server address does not make a URL.
    #[error("KUBERNETES_SERVICE_HOST {0:?} does not make a URL")]
    Host(String),
    /// A service account file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The CA file holds no PEM certificate.
    #[error("{} holds no PEM certificate", .0.display())]
    NoCertificate(PathBuf),
}

/// The client config for `kubeconfig` (a file given on the command line or in the config)
/// and `context`, else what the environment offers; see the module doc for the order. The
/// API server is reached through the proxy `HTTPS_PROXY` (or `HTTP_PROXY` for a plain-HTTP
/// server) names unless `NO_PROXY` covers it ([`proxy_for`]). Every request carries the
/// User-Agent `switchyard/VERSION`.
pub async fn client_config(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Config> {
    let mut config = load(kubeconfig, context).await?;
    config.proxy_url = proxy_for(&config);
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(crate::util::identity::USER_AGENT),
    ));
    Ok(config)
}

/// The proxy the API server is reached through: a kubeconfig's own `proxy-url` as it is;
/// else the environment's, as curl reads `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and
/// `NO_PROXY`, matched against the API server's URL.
///
/// kube-rs takes `HTTPS_PROXY` and matches `NO_PROXY` against the proxy's own address, so a
/// `NO_PROXY` naming the API server would not keep its requests off the proxy.
pub fn proxy_for(config: &kube::Config) -> Option<http::Uri> {
    let from_env = ["HTTPS_PROXY", "https_proxy"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .and_then(|p| p.parse::<http::Uri>().ok());
    match &config.proxy_url {
        Some(own) if Some(own) != from_env.as_ref() => Some(own.clone()),
        _ => hyper_util::client::proxy::matcher::Matcher::from_env()
            .intercept(&config.cluster_url)
            .map(|i| i.uri().clone()),
    }
}

/// `ha` with the Lease namespace the daemon uses: the config's `ha.lease_namespace`, else
/// the daemon's namespace ([`crate::util::identity::daemon_namespace`]: the pod's, else the
/// kubeconfig context's, else `default`), the rule `switchyard rbac` follows too.
pub fn with_lease_namespace(
    ha: &crate::config::HaSpec,
    client: &kube::Client,
) -> crate::config::HaSpec {
    let mut ha = ha.clone();
    if !ha.lease_namespace_written {
        ha.lease_namespace = crate::util::identity::namespace_of(client);
    }
    ha
}

/// The config [`client_config`] starts from.
async fn load(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<kube::Config> {
    let options = KubeConfigOptions {
        context: context.map(String::from),
        ..KubeConfigOptions::default()
    };
    if let Some(path) = kubeconfig {
        let kubeconfig = |source| Error::Kubeconfig {
            path: path.to_path_buf(),
            source,
        };
        let file = Kubeconfig::read_from(path).map_err(kubeconfig)?;
        return kube::Config::from_custom_kubeconfig(file, &options)
            .await
            .map_err(kubeconfig);
    }
    let env_kubeconfig = std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty());
    let service = in_cluster_service();
    if !env_kubeconfig
        && context.is_none()
        && let Some((host, port)) = service
    {
        return in_cluster(&host, &port, &service_account_dir()).map_err(Error::InCluster);
    }
    kube::Config::from_kubeconfig(&options)
        .await
        .map_err(Error::NoKubeconfig)
}

/// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`, when both are set.
fn in_cluster_service() -> Option<(String, String)> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").ok()?;
    (!host.is_empty() && !port.is_empty()).then_some((host, port))
}

/// The config a pod's service account gives: `https://HOST:PORT`, the CA in `dir/ca.crt`,
/// the token in `dir/token` (read again as kubelet rotates it), the namespace in
/// `dir/namespace` (else `default`).
pub fn in_cluster(host: &str, port: &str, dir: &Path) -> Result<kube::Config, InClusterError> {
    let port: u16 = port
        .trim()
        .parse()
        .map_err(|_| InClusterError::Port(port.to_string()))?;
    let authority = match host.parse::<std::net::IpAddr>() {
        Ok(ip @ std::net::IpAddr::V6(_)) => format!("[{ip}]:{port}"),
        _ => format!("{host}:{port}"),
    };
    let url = format!("https://{authority}")
        .parse()
        .map_err(|_| InClusterError::Host(host.to_string()))?;
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| InClusterError::Read { path, source })
    };
    let ca_file = dir.join("ca.crt");
    let certificates: Vec<Vec<u8>> = pem::parse_many(read("ca.crt")?)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(pem::Pem::into_contents)
        .collect();
    if certificates.is_empty() {
        return Err(InClusterError::NoCertificate(ca_file));
    }
    // Read now so a missing token fails the start; kube-rs reads it again as it rotates.
    // kubelet writes the token bare; one written with a newline (by hand, by a test) would
    // make an invalid header as kube-rs reads it, so that one is used as read now.
    let token = read("token")?;
    let trimmed = String::from_utf8_lossy(&token).trim().to_string();
    let namespace = read("namespace")
        .ok()
        .and_then(|n| String::from_utf8(n).ok())
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    let mut config = kube::Config::new(url);
    config.default_namespace = namespace;
    config.root_cert = Some(certificates);
    config.root_cert_file = Some(ca_file);
    if trimmed.as_bytes() == token.as_slice() {
        config.auth_info.token_file = Some(dir.join("token").to_string_lossy().into_owned());
    } else {
        config.auth_info.token = Some(trimmed.into());
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_service_account_file_or_a_bad_port_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = in_cluster("10.0.0.1", "443", dir.path()).unwrap_err();
        assert!(err.to_string().contains("ca.crt"), "{err}");
        let err = in_cluster("10.0.0.1", "https", dir.path()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "KUBERNETES_SERVICE_PORT \"https\" is not a port number"
        );
        std::fs::write(dir.path().join("ca.crt"), "not pem").unwrap();
        let err = in_cluster("10.0.0.1", "443", dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("holds no PEM certificate"),
            "{err}"
        );
    }
}
