//! The registry's HTTP API (OCI distribution v2) for one repository: manifests and blobs,
//! down and up, with the registry's token or basic authentication when it asks for it.
//! Credentials come from a docker-style config file (see [`super::credentials`]) and never
//! appear in an error or a log line, nor go over plain HTTP beyond this machine (see
//! [`super::transport`]).
//!
//! Every body read is capped before it is read whole: a manifest at [`MAX_MANIFEST_SIZE`]
//! (what registries themselves accept), a blob at the size its manifest gives, a token
//! answer at [`MAX_TOKEN_ANSWER`], and of an error answer only the first
//! [`MAX_ERROR_BODY`] bytes are read, for its message.

use std::sync::Mutex;

use base64::Engine as _;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use reqwest::{RequestBuilder, Response, StatusCode};

use super::Reference;
use super::transport::Transport;
use crate::config::oci::OciSpec;
use crate::plugin::mib;
use crate::util::lock;

/// The media type of an OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The largest manifest read (4 MiB, what distribution and the hosted registries accept).
pub const MAX_MANIFEST_SIZE: u64 = 4 << 20;
/// The most of an error answer read for its message.
pub const MAX_ERROR_BODY: usize = 4 << 10;
/// The largest token answer read.
pub const MAX_TOKEN_ANSWER: u64 = 256 << 10;

/// A repository in a registry.
pub struct Registry {
    http: reqwest::Client,
    transport: Transport,
    settings: OciSpec,
    reference: Reference,
    base: String,
    /// `user:password` for the registry, from the credentials file.
    basic: Option<String>,
    /// The `Authorization` value that worked last.
    authorization: Mutex<Option<String>>,
}

impl Registry {
    /// The repository `reference` names, with `credentials` (`user:password`) if any,
    /// spoken to as [`Transport::for_registry`] decides (which resolves its name).
    pub async fn new(
        reference: &Reference,
        credentials: Option<String>,
        settings: &OciSpec,
    ) -> Result<Self, String> {
        let transport = Transport::for_registry(
            &reference.registry,
            reference.host(),
            reference.port(),
            settings,
        )
        .await;
        Ok(Self {
            http: transport.client(reference.host(), settings)?,
            base: format!(
                "{}://{}/v2/{}",
                transport.scheme(),
                reference.registry,
                reference.repository
            ),
            transport,
            settings: settings.clone(),
            reference: reference.clone(),
            basic: credentials,
            authorization: Mutex::new(None),
        })
    }

    /// Sends the request `build` makes, answering one authentication challenge.
    async fn send(
        &self,
        build: impl Fn(&reqwest::Client) -> RequestBuilder,
    ) -> Result<Response, String> {
        let with_auth = |auth: &Option<String>| {
            let request = build(&self.http);
            match auth {
                Some(value) => request.header(AUTHORIZATION, value),
                None => request,
            }
        };
        let current = lock(&self.authorization).clone();
        let response = with_auth(&current)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        if !self.transport.carries_credentials() {
            return Err(format!(
                "{} wants credentials, and they are never sent over plain HTTP to a registry that is not this machine (it is in oci.insecure_registries): serve it over HTTPS",
                self.reference.registry
            ));
        }
        let challenge = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let authorization = Some(self.answer(&challenge).await?);
        let response = with_auth(&authorization)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        if response.status() == StatusCode::UNAUTHORIZED {
            return Err(format!(
                "{} refused the credentials{}",
                self.reference.registry,
                if self.basic.is_some() {
                    ""
                } else {
                    " (none configured)"
                }
            ));
        }
        *lock(&self.authorization) = authorization;
        Ok(response)
    }

    fn unreachable(&self, error: &reqwest::Error) -> String {
        let mut text = format!("cannot reach the registry {}", self.reference.registry);
        if error.is_connect() && error.is_timeout() {
            text.push_str(&format!(
                ": no connection within {:?} (oci.connect_timeout)",
                self.settings.connect_timeout
            ));
            return text;
        }
        if let Some(source) = std::error::Error::source(error) {
            text.push_str(": ");
            text.push_str(&crate::util::chain_text(source));
        }
        text
    }

    /// The `Authorization` value answering `challenge` (Basic, or a Bearer token fetched
    /// from the realm the challenge names).
    async fn answer(&self, challenge: &str) -> Result<String, String> {
        let basic = self.basic.as_ref().map(|b| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(b)
            )
        });
        let Some(params) = challenge.strip_prefix("Bearer ") else {
            return basic.ok_or_else(|| {
                format!(
                    "{} wants credentials and none are configured",
                    self.reference.registry
                )
            });
        };
        let param = |key: &str| {
            params.split(',').find_map(|kv| {
                let (k, v) = kv.trim().split_once('=')?;
                (k == key).then(|| v.trim_matches('"').to_string())
            })
        };
        let realm = param("realm").ok_or("the registry's token challenge names no realm")?;
        let realm = reqwest::Url::parse(&realm)
            .map_err(|e| format!("the registry's token realm {realm:?} is not a URL: {e}"))?;
        let transport = Transport::for_url(&realm, self.transport.ca_file()).await?;
        if basic.is_some() && !transport.carries_credentials() {
            return Err(format!(
                "the registry's token service {realm} is plain HTTP to a host that is not this machine: the credentials are not sent there"
            ));
        }
        let http = transport.client(realm.host_str().unwrap_or(""), &self.settings)?;
        let mut request = http.get(realm.clone());
        for key in ["service", "scope"] {
            if let Some(value) = param(key) {
                request = request.query(&[(key, value)]);
            }
        }
        if let Some(basic) = &basic {
            request = request.header(AUTHORIZATION, basic);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("cannot get a registry token: {}", self.unreachable(&e)))?;
        if !response.status().is_success() {
            return Err(format!(
                "the registry's token service answered {}",
                response.status()
            ));
        }
        let body = read_capped(response, MAX_TOKEN_ANSWER, "the token answer")
            .await
            .map_err(|e| format!("the registry's token service: {e}"))?;
        let body: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| format!("the registry's token answer is not JSON: {e}"))?;
        let token = body["token"]
            .as_str()
            .or(body["access_token"].as_str())
            .ok_or("the registry's token answer holds no token")?;
        Ok(format!("Bearer {token}"))
    }

    /// Fails with the registry's own message for an unsuccessful answer.
    async fn ok(&self, what: &str, response: Response) -> Result<Response, String> {
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = first_bytes(response, MAX_ERROR_BODY).await;
        let body = String::from_utf8_lossy(&body);
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["errors"][0]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| body.chars().take(200).collect());
        Err(format!("{what}: the registry answered {status}: {message}"))
    }

    /// The manifest the reference names: its bytes and media type.
    pub async fn manifest(&self) -> Result<(Vec<u8>, String), String> {
        let url = format!("{}/manifests/{}", self.base, self.reference.manifest_ref());
        let response = self
            .send(|http| http.get(&url).header("Accept", MANIFEST_MEDIA_TYPE))
            .await?;
        let response = self
            .ok(&format!("manifest of {}", self.reference), response)
            .await?;
        let media_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let what = format!("the manifest of {}", self.reference);
        let bytes = read_capped(response, MAX_MANIFEST_SIZE, &what)
            .await
            .map_err(|e| format!("{e}, the most a manifest may be"))?;
        Ok((bytes, media_type))
    }

    /// The blob `digest`, which its manifest says is `size` bytes: refused as soon as it
    /// is longer.
    pub async fn blob(&self, digest: &str, size: u64) -> Result<Vec<u8>, String> {
        let url = format!("{}/blobs/{digest}", self.base);
        let response = self.send(|http| http.get(&url)).await?;
        let response = self.ok(&format!("blob {digest}"), response).await?;
        let what = format!("the layer {digest} of {}", self.reference);
        read_capped(response, size, &what)
            .await
            .map_err(|e| format!("{e}, the size its manifest gives"))
    }

    /// Uploads `bytes` as the blob `digest` (one monolithic upload) unless it is there.
    pub async fn push_blob(&self, digest: &str, bytes: Vec<u8>) -> Result<(), String> {
        let head = format!("{}/blobs/{digest}", self.base);
        if self
            .send(|http| http.head(&head))
            .await?
            .status()
            .is_success()
        {
            return Ok(());
        }
        let start = format!("{}/blobs/uploads/", self.base);
        let response = self.send(|http| http.post(&start)).await?;
        let response = self.ok("starting an upload", response).await?;
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or("the registry gave no upload location")?;
        let mut url = reqwest::Url::parse(&start)
            .and_then(|base| base.join(location))
            .map_err(|e| format!("the upload location {location:?} is not a URL: {e}"))?;
        url.query_pairs_mut().append_pair("digest", digest);
        let response = self
            .send(|http| {
                http.put(url.clone())
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .body(bytes.clone())
            })
            .await?;
        self.ok(&format!("uploading blob {digest}"), response)
            .await?;
        Ok(())
    }

    /// Puts `manifest` under `tag` (or its digest).
    pub async fn push_manifest(&self, reference: &str, manifest: Vec<u8>) -> Result<(), String> {
        let url = format!("{}/manifests/{reference}", self.base);
        let response = self
            .send(|http| {
                http.put(&url)
                    .header(CONTENT_TYPE, MANIFEST_MEDIA_TYPE)
                    .body(manifest.clone())
            })
            .await?;
        self.ok("putting the manifest", response).await?;
        Ok(())
    }
}

/// The body of `response`, failing as soon as it is longer than `limit` bytes (at once when
/// its `Content-Length` says so): "`what` is larger than ...". Never holds more than `limit`
/// bytes and one chunk.
async fn read_capped(mut response: Response, limit: u64, what: &str) -> Result<Vec<u8>, String> {
    let too_big = || format!("{what} is larger than {}", bytes_text(limit));
    if response
        .content_length()
        .is_some_and(|length| length > limit)
    {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading {what}: {e}"))?
    {
        if (bytes.len() + chunk.len()) as u64 > limit {
            return Err(too_big());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Up to `limit` bytes of `response`'s body; the rest is never read.
async fn first_bytes(mut response: Response, limit: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    while bytes.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    bytes.truncate(limit);
    bytes
}

/// `1000 bytes`, or `4194304 bytes (4 MiB)` from a MiB on.
pub fn bytes_text(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{bytes} bytes ({})", mib(bytes))
    } else {
        format!("{bytes} bytes")
    }
}
