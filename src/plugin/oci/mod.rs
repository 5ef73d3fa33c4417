//! Plugins from OCI registries: a handler's `plugin:` may be
//! `oci://HOST/REPOSITORY:TAG` or `...@sha256:DIGEST`. The artifact follows the wasm OCI
//! convention: an image manifest whose config has the media type
//! `application/vnd.wasm.config.v0+json` and whose one layer, `application/wasm`, is the
//! component.
//!
//! A pull checks every digest (the manifest's against a pinned reference, the layer's
//! content against the manifest) and caches what it fetched in the plugins folder under
//! `.oci/` (`blobs/HEX.wasm` by the layer's digest, `manifests/HEX.json` by the manifest's),
//! so a pinned reference loads from the cache with no registry at all, and a tag fetches
//! only its manifest when the component is already there. `switchyard push` uploads a
//! component as such an artifact.
//!
//! - [`Reference`]: an `oci://` reference (parsed in the config);
//! - [`client`]: the registry's HTTP API with its authentication;
//! - [`credentials`]: registry credentials from a docker-style config file.

pub mod client;
pub mod credentials;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub use crate::config::oci::{Reference, parse_digest};
pub use client::{MANIFEST_MEDIA_TYPE, Registry};

use super::loader::{MAX_PLUGIN_FILE_SIZE, PluginFile};

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

/// Where pulled artifacts are cached in the plugins folder.
pub fn cache_dir(plugins_dir: &Path) -> PathBuf {
    plugins_dir.join(".oci")
}

/// The cache file of `kind` (`blobs`, `manifests`) for `digest`.
fn cached(plugins_dir: &Path, kind: &str, digest: &str, extension: &str) -> PathBuf {
    let hex = digest.trim_start_matches("sha256:");
    cache_dir(plugins_dir)
        .join(kind)
        .join(format!("{hex}.{extension}"))
}

/// Reads `path` if it holds exactly the content `digest` names.
async fn read_verified(path: &Path, digest: &str) -> Option<Vec<u8>> {
    let bytes = tokio::fs::read(path).await.ok()?;
    (digest_of(&bytes) == digest).then_some(bytes)
}

/// Writes `bytes` to `path` through a temporary name.
async fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("cannot cache {}: {e}", path.display());
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
    Ok((digest, layer["size"].as_u64().unwrap_or(0)))
}

/// Pulls the plugin `text` names (or takes it from the cache under `plugins_dir`), every
/// digest checked. The file's `sha256` is the component layer's digest.
pub async fn pull(plugins_dir: &Path, text: &str) -> Result<PluginFile, String> {
    let reference = Reference::parse(text)?;
    let mut registry = None;
    let connect = || -> Result<Registry, String> {
        Registry::new(&reference, credentials::for_registry(&reference.registry)?)
    };
    let pinned = match &reference.digest {
        Some(d) => read_verified(&cached(plugins_dir, "manifests", d, "json"), d).await,
        None => None,
    };
    let manifest = match pinned {
        Some(bytes) => bytes,
        None => {
            let (bytes, _) = registry.insert(connect()?).manifest().await?;
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
    if size > MAX_PLUGIN_FILE_SIZE {
        return Err(format!(
            "the component is {size} bytes, more than {MAX_PLUGIN_FILE_SIZE}"
        ));
    }
    let blob_path = cached(plugins_dir, "blobs", &layer, "wasm");
    let bytes = match read_verified(&blob_path, &layer).await {
        Some(bytes) => bytes,
        None => {
            let registry = match registry {
                Some(r) => r,
                None => connect()?,
            };
            let bytes = registry.blob(&layer, MAX_PLUGIN_FILE_SIZE).await?;
            let got = digest_of(&bytes);
            if got != layer {
                return Err(format!(
                    "digest mismatch: the layer should be {layer}, the registry sent {got}"
                ));
            }
            write_atomically(&blob_path, &bytes).await?;
            bytes
        }
    };
    if let Some(d) = &reference.digest {
        write_atomically(&cached(plugins_dir, "manifests", d, "json"), &manifest).await?;
    }
    Ok(PluginFile {
        sha256: layer.trim_start_matches("sha256:").to_string(),
        bytes,
    })
}

/// Uploads the component `file` as a wasm artifact under the tag `text` names; returns the
/// reference pinned by the manifest's digest.
pub async fn push(file: &Path, text: &str) -> Result<String, String> {
    let reference = Reference::parse(text)?;
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
    let registry = Registry::new(&reference, credentials::for_registry(&reference.registry)?)?;
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
}
