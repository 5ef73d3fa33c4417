//! The registry's HTTP API (OCI distribution v2) for one repository: manifests and blobs,
//! down and up, with the registry's token or basic authentication when it asks for it.
//! Credentials come from a docker-style config file (see [`super::credentials`]) and never
//! appear in an error or a log line.

use std::sync::Mutex;

use base64::Engine as _;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use reqwest::{RequestBuilder, Response, StatusCode};

use super::Reference;
use crate::util::lock;

/// The media type of an OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// A repository in a registry.
pub struct Registry {
    http: reqwest::Client,
    reference: Reference,
    base: String,
    /// `user:password` for the registry, from the credentials file.
    basic: Option<String>,
    /// The `Authorization` value that worked last.
    authorization: Mutex<Option<String>>,
}

/// An HTTP client trusting the public web's roots (rustls with ring, webpki roots).
fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .timeout(std::time::Duration::from_secs(120))
        .build()
        .map_err(|e| format!("HTTP client setup: {e}"))
}

impl Registry {
    /// The repository `reference` names, with `credentials` (`user:password`) if any.
    pub fn new(reference: &Reference, credentials: Option<String>) -> Result<Self, String> {
        Ok(Self {
            http: http_client()?,
            base: reference.base_url(),
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
        let mut source: Option<&dyn std::error::Error> = std::error::Error::source(error);
        while let Some(e) = source {
            text.push_str(&format!(": {e}"));
            source = e.source();
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
        let mut request = self.http.get(&realm);
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
        let body: serde_json::Value = response
            .json()
            .await
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
        let body = response.text().await.unwrap_or_default();
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
        let bytes = response
            .bytes()
            .await
            .map_err(|e| format!("reading the manifest: {e}"))?;
        Ok((bytes.to_vec(), media_type))
    }

    /// The blob `digest`, refused past `max` bytes.
    pub async fn blob(&self, digest: &str, max: u64) -> Result<Vec<u8>, String> {
        let url = format!("{}/blobs/{digest}", self.base);
        let response = self.send(|http| http.get(&url)).await?;
        let mut response = self.ok(&format!("blob {digest}"), response).await?;
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("reading blob {digest}: {e}"))?
        {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > max {
                return Err(format!("blob {digest} is larger than {max} bytes"));
            }
        }
        Ok(bytes)
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
