//! Plugins from OCI registries: a handler's `plugin:` may be
//! `oci://HOST/REPOSITORY:TAG` or `...@sha256:DIGEST`. The artifact follows the wasm OCI
//! convention: an image manifest whose config has the media type
//! `application/vnd.wasm.config.v0+json` and whose one layer, `application/wasm`, is the
//! component.
//!
//! A pull checks every digest (the manifest's against a pinned reference, the layer's
//! content against the manifest) and caches what it fetched in `oci.cache_dir` (default
//! `.oci/` in the plugins folder): `blobs/HEX.wasm` by the layer's digest, and
//! `manifests/REPOSITORY/HEX.json` by the repository it was pulled from and the manifest's
//! digest. So a pinned reference loads from the cache with no registry at all, and a tag
//! fetches only its manifest when the component is already there. `switchyard push`
//! uploads a component as such an artifact.
//!
//! # Decision: a cached manifest counts only for the repository it came from
//!
//! A digest names content, not where it lives: a cache keyed by the digest alone loaded
//! `oci://HOST/team-rs@DIGEST` from what `team-js` had been pulled as, and `check` passed a
//! reference the registry would refuse. So manifests are cached per registry and
//! repository (the name percent-encoded into one folder), and a pin is taken from the cache
//! only where that repository's pull put it. Components stay shared by their digest: their
//! content is all the digest promises.
//!
//! A registry cannot hold the daemon: a whole pull has a deadline (`oci.timeout`, and
//! `oci.connect_timeout` per connection), every body read is capped (see [`client`]), and the
//! component is refused past `oci.max_layer_size` or past the size its manifest gives.
//!
//! - [`Reference`]: an `oci://` reference (parsed in the config);
//! - [`client`]: the registry's HTTP API with its authentication;
//! - [`transport`]: HTTPS (public roots, and a registry's own CA when the config gives one),
//!   or plain HTTP to loopback or a registry listed as insecure;
//! - [`credentials`]: registry credentials from a docker-style config file.

pub mod client;
pub mod credentials;
pub mod transport;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub use crate::config::oci::{OciSpec, Reference, parse_digest};
pub use client::{MANIFEST_MEDIA_TYPE, Registry};

use super::loader::PluginFile;
use crate::util::lock;

/// The media type of a wasm artifact's config.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the layer holding the component.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// `sha256:` and the hex SHA-256 of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The cached component whose layer digest is `digest`, in the cache folder `cache`.
pub fn cached_blob(cache: &Path, digest: &str) -> PathBuf {
    let hex = digest.trim_start_matches("sha256:");
    cache.join("blobs").join(format!("{hex}.wasm"))
}

/// The cached manifest `digest` as pulled from the repository of `reference`, in the cache
/// folder `cache`.
pub fn cached_manifest(cache: &Path, reference: &Reference, digest: &str) -> PathBuf {
    let hex = digest.trim_start_matches("sha256:");
    let repository = format!("{}/{}", reference.registry, reference.repository);
    cache
        .join("manifests")
        .join(folder_name(&repository))
        .join(format!("{hex}.json"))
}

/// `text` as one folder name: every byte but ASCII letters, digits, `.`, `_` and `-`
/// percent-encoded (a `/` becomes `%2F`, so the name is never `.` or `..`).
fn folder_name(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Reads `path` if it is at most `max` bytes and holds exactly the content `digest` names.
async fn read_verified(path: &Path, digest: &str, max: u64) -> Option<Vec<u8>> {
    let metadata = tokio::fs::metadata(path).await.ok()?;
    if !metadata.is_file() || metadata.len() > max {
        return None;
    }
    let bytes = tokio::fs::read(path).await.ok()?;
    (digest_of(&bytes) == digest).then_some(bytes)
}

/// Writes `bytes` to `path` through a temporary name. The error names `oci.cache_dir`: a
/// plugins folder mounted read-only needs the cache elsewhere.
async fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let fail = |e: std::io::Error| {
        format!(
            "cannot cache {}: {e} (set oci.cache_dir to a folder switchyard can write)",
            path.display()
        )
    };
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(fail)?;
    }
    let tmp = path.with_extension("tmp");
    tokio::fs::write(&tmp, bytes).await.map_err(fail)?;
    tokio::fs::rename(&tmp, path).await.map_err(fail)
}

/// The component layer's digest and size, after checking the manifest is a wasm artifact.
pub fn component_layer(manifest: &[u8]) -> Result<(String, u64), String> {
    let manifest: Value =
        serde_json::from_slice(manifest).map_err(|e| format!("the manifest is not JSON: {e}"))?;
    let config_type = manifest["config"]["mediaType"].as_str().unwrap_or("(none)");
    if config_type != CONFIG_MEDIA_TYPE {
        return Err(format!(
            "not a wasm artifact: its config's media type is {config_type}, not {CONFIG_MEDIA_TYPE}"
        ));
    }
    let layers = manifest["layers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let [layer] = layers else {
        return Err(format!(
            "not a wasm artifact: it has {} layers, not one {LAYER_MEDIA_TYPE} layer",
            layers.len()
        ));
    };
    let layer_type = layer["mediaType"].as_str().unwrap_or("(none)");
    if layer_type != LAYER_MEDIA_TYPE {
        return Err(format!(
            "not a wasm artifact: its layer's media type is {layer_type}, not {LAYER_MEDIA_TYPE}"
        ));
    }
    let digest = layer["digest"].as_str().unwrap_or("");
    let digest = parse_digest(digest).map_err(|e| format!("the layer's digest: {e}"))?;
    let size = layer["size"]
        .as_u64()
        .ok_or("its layer gives no size (a number of bytes)")?;
    Ok((digest, size))
}

/// Pulls the plugin `text` names (or takes it from the cache, `oci.cache_dir` or `.oci` in
/// `plugins_dir`), every digest checked, within `settings.timeout`. The file's `sha256` is
/// the component layer's digest.
pub async fn pull(
    plugins_dir: &Path,
    text: &str,
    settings: &OciSpec,
) -> Result<PluginFile, String> {
    let reference = Reference::parse(text)?;
    let step = Mutex::new("starting");
    let cache = settings.cache_dir(plugins_dir);
    let pulling = pull_steps(&cache, &reference, settings, &step);
    match tokio::time::timeout(settings.timeout, pulling).await {
        Ok(pulled) => pulled,
        Err(_) => Err(format!(
            "the pull did not finish within {:?} (oci.timeout) while {}",
            settings.timeout,
            lock(&step)
        )),
    }
}

/// The steps of [`pull`], caching in `cache`; `step` says which one is under way.
async fn pull_steps(
    cache: &Path,
    reference: &Reference,
    settings: &OciSpec,
    step: &Mutex<&'static str>,
) -> Result<PluginFile, String> {
    let at = |now: &'static str| *lock(step) = now;
    let pinned = match &reference.digest {
        Some(d) => {
            let path = cached_manifest(cache, reference, d);
            read_verified(&path, d, client::MAX_MANIFEST_SIZE).await
        }
        None => None,
    };
    let mut registry = None;
    let manifest = match pinned {
        Some(bytes) => bytes,
        None => {
            at("connecting to the registry");
            let connected = registry.insert(connect(reference, settings).await?);
            at("fetching the manifest");
            let (bytes, _) = connected.manifest().await?;
            if let Some(wanted) = &reference.digest {
                let got = digest_of(&bytes);
                if &got != wanted {
                    return Err(format!(
                        "digest mismatch: {reference} was asked for, the registry's manifest has {got}"
                    ));
                }
            }
            bytes
        }
    };
    let (layer, size) = component_layer(&manifest)?;
    if size > settings.max_layer_size {
        return Err(format!(
            "its component is {}, more than oci.max_layer_size ({} bytes)",
            client::bytes_text(size),
            settings.max_layer_size
        ));
    }
    let blob_path = cached_blob(cache, &layer);
    let bytes = match read_verified(&blob_path, &layer, size).await {
        Some(bytes) => bytes,
        None => {
            let registry = match registry {
                Some(r) => r,
                None => {
                    at("connecting to the registry");
                    connect(reference, settings).await?
                }
            };
            at("downloading the component");
            let bytes = registry.blob(&layer, size).await?;
            let got = digest_of(&bytes);
            if got != layer {
                return Err(format!(
                    "digest mismatch: the layer should be {layer}, the registry sent {got}"
                ));
            }
            at("caching the component");
            write_atomically(&blob_path, &bytes).await?;
            bytes
        }
    };
    if let Some(d) = &reference.digest {
        write_atomically(&cached_manifest(cache, reference, d), &manifest).await?;
    }
    Ok(PluginFile {
        sha256: layer.trim_start_matches("sha256:").to_string(),
        bytes,
    })
}

/// The registry `reference` names, with its credentials from the credentials file.
async fn connect(reference: &Reference, settings: &OciSpec) -> Result<Registry, String> {
    let credentials = credentials::for_registry(&reference.registry)?;
    Registry::new(reference, credentials, settings).await
}

/// How long a whole push may take.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(600);

/// Uploads the component `file` as a wasm artifact under the tag `text` names, within
/// [`PUSH_TIMEOUT`], trusting `ca_file` for the registry besides the public roots; returns
/// the reference pinned by the manifest's digest.
pub async fn push(file: &Path, text: &str, ca_file: Option<&Path>) -> Result<String, String> {
    tokio::time::timeout(PUSH_TIMEOUT, push_steps(file, text, ca_file))
        .await
        .unwrap_or_else(|_| Err(format!("the push did not finish within {PUSH_TIMEOUT:?}")))
}

async fn push_steps(file: &Path, text: &str, ca_file: Option<&Path>) -> Result<String, String> {
    let reference = Reference::parse(text)?;
    let mut settings = OciSpec::default();
    if let Some(path) = ca_file {
        crate::config::oci::read_ca_file(path)?;
        settings
            .ca_files
            .insert(reference.registry.clone(), path.to_path_buf());
    }
    if reference.digest.is_some() {
        return Err(format!("{text}: push to a tag, not a digest"));
    }
    let bytes = tokio::fs::read(file)
        .await
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    if !bytes.starts_with(b"\0asm\x0d\x00\x01\x00") {
        return Err(format!("{} is not a WebAssembly component", file.display()));
    }
    let layer = digest_of(&bytes);
    let size = bytes.len();
    let config = serde_json::to_vec(&json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer],
    }))
    .expect("JSON prints");
    let config_digest = digest_of(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": CONFIG_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer, "size": size}],
    }))
    .expect("JSON prints");
    let registry = connect(&reference, &settings).await?;
    registry.push_blob(&config_digest, config).await?;
    registry.push_blob(&layer, bytes).await?;
    let tag = reference.tag.as_deref().unwrap_or("latest");
    registry.push_manifest(tag, manifest.clone()).await?;
    Ok(format!("{reference}@{}", digest_of(&manifest)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_wasm_artifact_with_one_component_layer_is_accepted() {
        let d = digest_of(b"x");
        let manifest = |config: &str, layers: Value| {
            serde_json::to_vec(&json!({"config": {"mediaType": config}, "layers": layers})).unwrap()
        };
        let one = json!([{"mediaType": LAYER_MEDIA_TYPE, "digest": d, "size": 1}]);
        assert_eq!(
            component_layer(&manifest(CONFIG_MEDIA_TYPE, one.clone())),
            Ok((d.clone(), 1))
        );
        let error = component_layer(&manifest("application/vnd.oci.image.config.v1+json", one))
            .unwrap_err();
        assert!(
            error.contains("its config's media type is application/vnd.oci.image.config.v1+json"),
            "{error}"
        );
        let tar = json!([{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d}]);
        let error = component_layer(&manifest(CONFIG_MEDIA_TYPE, tar)).unwrap_err();
        assert!(
            error.contains("its layer's media type is application/vnd.oci.image.layer.v1.tar"),
            "{error}"
        );
        let error = component_layer(&manifest(CONFIG_MEDIA_TYPE, json!([]))).unwrap_err();
        assert!(error.contains("it has 0 layers"), "{error}");
    }

    #[test]
    fn a_manifest_is_cached_under_its_repository_in_one_folder() {
        let d = digest_of(b"m");
        let hex = d.trim_start_matches("sha256:");
        let cache = Path::new("/c");
        let at = |text: &str| {
            let reference = Reference::parse(&format!("{text}@{d}")).unwrap();
            cached_manifest(cache, &reference, &d)
        };
        assert_eq!(
            at("oci://127.0.0.1:5000/team/rs"),
            Path::new(&format!(
                "/c/manifests/127.0.0.1%3A5000%2Fteam%2Frs/{hex}.json"
            ))
        );
        assert_ne!(at("oci://h/team-rs"), at("oci://h/team-js"));
        assert_eq!(
            at("oci://[::1]:5000/x").parent().unwrap(),
            Path::new("/c/manifests/%5B%3A%3A1%5D%3A5000%2Fx")
        );
        assert_eq!(
            cached_blob(cache, &d),
            Path::new(&format!("/c/blobs/{hex}.wasm"))
        );
    }
}
