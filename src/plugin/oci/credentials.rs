//! Registry credentials from a docker-style config file (`{"auths": {"HOST": {"auth":
//! "BASE64(user:password)"}}}`, or `username` and `password`): the file named by
//! `SWITCHYARD_REGISTRY_AUTH` (a mounted `kubernetes.io/dockerconfigjson` Secret's
//! `.dockerconfigjson`), else `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.

use std::path::PathBuf;

use base64::Engine as _;

/// The environment variable naming the credentials file.
pub const ENV: &str = "SWITCHYARD_REGISTRY_AUTH";

/// The credentials file in use, if one exists.
pub fn file() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(ENV) {
        return Some(PathBuf::from(path));
    }
    let path = match std::env::var_os("DOCKER_CONFIG") {
        Some(dir) => PathBuf::from(dir).join("config.json"),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".docker/config.json"),
    };
    path.is_file().then_some(path)
}

/// `user:password` for `registry` from the credentials file, if it has some. A file that
/// cannot be read or parsed is an error naming the file (never its content).
pub fn for_registry(registry: &str) -> Result<Option<String>, String> {
    let Some(path) = file() else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "cannot read the registry credentials {}: {e}",
            path.display()
        )
    })?;
    lookup(&text, registry).map_err(|reason| format!("{}: {reason}", path.display()))
}

/// `user:password` for `registry` in a docker config's text.
pub fn lookup(text: &str, registry: &str) -> Result<Option<String>, String> {
    let config: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| format!("not a docker config (JSON): line {}", e.line()))?;
    let Some(auths) = config["auths"].as_object() else {
        return Ok(None);
    };
    let entry = auths.iter().find(|(key, _)| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next() == Some(registry)
    });
    let Some((_, entry)) = entry else {
        return Ok(None);
    };
    if let Some(auth) = entry["auth"].as_str() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .filter(|s| s.contains(':'))
            .ok_or_else(|| format!("the \"auth\" of {registry} is not base64 of user:password"))?;
        return Ok(Some(decoded));
    }
    match (entry["username"].as_str(), entry["password"].as_str()) {
        (Some(user), Some(password)) => Ok(Some(format!("{user}:{password}"))),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_found_by_registry_in_either_form() {
        let text = r#"{"auths": {
            "https://ghcr.io": {"auth": "dXNlcjpzM2NyZXQ="},
            "127.0.0.1:5000": {"username": "ci", "password": "pw"}}}"#;
        assert_eq!(
            lookup(text, "ghcr.io").unwrap().as_deref(),
            Some("user:s3cret")
        );
        assert_eq!(
            lookup(text, "127.0.0.1:5000").unwrap().as_deref(),
            Some("ci:pw")
        );
        assert_eq!(lookup(text, "quay.io").unwrap(), None);
    }

    #[test]
    fn a_broken_file_is_an_error_that_does_not_quote_it() {
        let error = lookup("{\"auths\": {\"h\": {\"auth\": \"c2VjcmV0\"}}}", "h").unwrap_err();
        assert!(error.contains("not base64 of user:password"), "{error}");
        assert!(
            !error.contains("secret") && !error.contains("c2VjcmV0"),
            "{error}"
        );
        let error = lookup("password=hunter2", "h").unwrap_err();
        assert!(!error.contains("hunter2"), "{error}");
    }
}
