//! Values of a handler's `config:` that are not written in the file: a mapping whose one key
//! is `valueFrom:` takes its value from a key of a Kubernetes Secret, from an environment
//! variable of the daemon, or from a file the daemon reads (a projected service account
//! token), when the plugin's instances are made.
//!
//! ```yaml
//! config:
//!   url: {valueFrom: {secretKeyRef: {name: slack, key: url}}}
//!   headers:
//!     Authorization: {valueFrom: {secretKeyRef: {name: receiver, key: token, namespace: ops}}}
//!   channel: {valueFrom: {env: SLACK_CHANNEL}}
//!   token: {valueFrom: {file: /var/run/secrets/eks.amazonaws.com/serviceaccount/token}}
//! ```
//!
//! The config keeps the reference (what `/status`, `/handlers/…` and `check` show); only the
//! plugin's `init` sees the value.

use std::fmt;

use serde_json::Value;

/// The key that marks a value taken from elsewhere.
pub const VALUE_FROM: &str = "valueFrom";

/// A key of a Secret: in the daemon's namespace unless `namespace` is named.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecretKeyRef {
    /// The Secret's namespace; `None` for the namespace the daemon runs in.
    pub namespace: Option<String>,
    /// The Secret's name.
    pub name: String,
    /// The key in its `data` (or `stringData`).
    pub key: String,
}

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ValueSource {
    /// A key of a Secret.
    Secret(SecretKeyRef),
    /// An environment variable of the daemon.
    Env(String),
    /// A file the daemon reads, by absolute path (a projected token the kubelet rotates).
    File(String),
}

impl fmt::Display for ValueSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSource::Secret(s) => match &s.namespace {
                Some(ns) => write!(f, "Secret {ns}/{} key {:?}", s.name, s.key),
                None => write!(f, "Secret {} key {:?}", s.name, s.key),
            },
            ValueSource::Env(var) => write!(f, "environment variable {var}"),
            ValueSource::File(path) => write!(f, "file {path}"),
        }
    }
}

/// One `valueFrom:` in a handler's config.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ValueRef {
    /// Where it is in the config, as a JSON pointer (`/headers/Authorization`).
    pub pointer: String,
    /// Where it is in the config, as the config's paths are written
    /// (`headers.Authorization`).
    pub path: String,
    /// Where its value comes from.
    pub source: ValueSource,
}

/// Every `valueFrom:` in `config`, or each malformed one as (its path below `config`,
/// written `headers.Authorization.valueFrom`, and what is wrong).
pub fn collect(config: &Value) -> (Vec<ValueRef>, Vec<(String, String)>) {
    let mut found = (Vec::new(), Vec::new());
    walk(config, "", "", &mut found);
    found
}

fn walk(
    value: &Value,
    pointer: &str,
    path: &str,
    found: &mut (Vec<ValueRef>, Vec<(String, String)>),
) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::Object(map) => {
            if let Some(from) = map.get(VALUE_FROM) {
                let at = join(VALUE_FROM);
                if map.len() > 1 {
                    found.1.push((
                        at,
                        "a value taken from elsewhere is a mapping with `valueFrom:` alone".into(),
                    ));
                    return;
                }
                match source(from) {
                    Ok(source) => found.0.push(ValueRef {
                        pointer: pointer.to_string(),
                        path: path.to_string(),
                        source,
                    }),
                    Err(why) => found.1.push((at, why)),
                }
                return;
            }
            for (key, item) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                walk(item, &format!("{pointer}/{escaped}"), &join(key), found);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(
                    item,
                    &format!("{pointer}/{i}"),
                    &format!("{path}[{i}]"),
                    found,
                );
            }
        }
        _ => {}
    }
}

const EXPECTED: &str = "expected {secretKeyRef: {name: NAME, key: KEY}} (namespace: optional), {env: VARIABLE} or {file: /ABSOLUTE/PATH}";

/// The source a `valueFrom:` names.
fn source(from: &Value) -> Result<ValueSource, String> {
    let Some(map) = from.as_object().filter(|m| m.len() == 1) else {
        return Err(EXPECTED.into());
    };
    if let Some(env) = map.get("env") {
        return match env.as_str() {
            Some(var) if is_env_name(var) => Ok(ValueSource::Env(var.to_string())),
            _ => Err(format!(
                "env: {env} is not an environment variable name (letters, digits and '_', not starting with a digit)"
            )),
        };
    }
    if let Some(file) = map.get("file") {
        return match file.as_str() {
            Some(path) if path.starts_with('/') && !path.split('/').any(|p| p == "..") => {
                Ok(ValueSource::File(path.to_string()))
            }
            _ => Err(format!(
                "file: {file} is not an absolute path without `..` (the daemon's file system)"
            )),
        };
    }
    let Some(secret) = map.get("secretKeyRef").and_then(Value::as_object) else {
        return Err(EXPECTED.into());
    };
    let field = |name: &str| secret.get(name).and_then(Value::as_str);
    if let Some(unknown) = secret
        .keys()
        .find(|k| !["name", "key", "namespace"].contains(&k.as_str()))
    {
        return Err(format!(
            "secretKeyRef has no field {unknown:?}: it takes name, key and namespace"
        ));
    }
    let (Some(name), Some(key)) = (field("name"), field("key")) else {
        return Err("secretKeyRef needs name and key, both strings".into());
    };
    if !is_dns_subdomain(name) {
        return Err(format!(
            "secretKeyRef name {name:?} is not a Secret name (lower case letters, digits, '-' and '.')"
        ));
    }
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(format!(
            "secretKeyRef key {key:?} is not a Secret key (letters, digits, '-', '_' and '.')"
        ));
    }
    let namespace = match secret.get("namespace") {
        None => None,
        Some(Value::String(ns)) if is_dns_subdomain(ns) && !ns.contains('.') => Some(ns.clone()),
        Some(other) => return Err(format!("secretKeyRef namespace {other} is not a namespace")),
    };
    Ok(ValueSource::Secret(SecretKeyRef {
        namespace,
        name: name.to_string(),
        key: key.to_string(),
    }))
}

fn is_env_name(var: &str) -> bool {
    !var.is_empty()
        && !var.starts_with(|c: char| c.is_ascii_digit())
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.'])
}

/// `config` with each reference replaced by the value `value` gives it (a string), or the
/// references `value` has no value for, described.
pub fn substitute(
    config: &Value,
    refs: &[ValueRef],
    mut value: impl FnMut(&ValueSource) -> Option<String>,
) -> Result<Value, Vec<String>> {
    let mut resolved = config.clone();
    let mut missing = Vec::new();
    for r in refs {
        match value(&r.source) {
            Some(v) => {
                if let Some(slot) = resolved.pointer_mut(&r.pointer) {
                    *slot = Value::String(v);
                }
            }
            None => missing.push(r.source.to_string()),
        }
    }
    if missing.is_empty() {
        Ok(resolved)
    } else {
        missing.sort();
        missing.dedup();
        Err(missing)
    }
}

/// `config` with each reference replaced by a placeholder naming where its value would come
/// from (`<Secret slack key "url">`): what `replay` passes, so the value is never read.
pub fn placeholders(config: &Value, refs: &[ValueRef]) -> Value {
    substitute(config, refs, |source| Some(format!("<{source}>")))
        .expect("every reference gets a placeholder")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_references_anywhere_and_substitutes_them() {
        let config = json!({
            "url": {"valueFrom": {"secretKeyRef": {"name": "slack", "key": "url"}}},
            "headers": {"X-Token": {"valueFrom": {"secretKeyRef": {"name": "r", "key": "t", "namespace": "ops"}}}},
            "list": [1, {"valueFrom": {"env": "CHANNEL"}}],
            "plain": {"env": "not a reference"},
            "token": {"valueFrom": {"file": "/var/run/token"}},
        });
        let (refs, errors) = collect(&config);
        assert!(errors.is_empty(), "{errors:?}");
        let pointers: Vec<_> = refs.iter().map(|r| r.pointer.as_str()).collect();
        assert_eq!(pointers, ["/headers/X-Token", "/list/1", "/token", "/url"]);
        let resolved = substitute(&config, &refs, |s| Some(s.to_string())).unwrap();
        assert_eq!(resolved["url"], json!("Secret slack key \"url\""));
        assert_eq!(
            resolved["headers"]["X-Token"],
            json!("Secret ops/r key \"t\"")
        );
        assert_eq!(resolved["list"][1], json!("environment variable CHANNEL"));
        assert_eq!(resolved["plain"], json!({"env": "not a reference"}));
        assert_eq!(resolved["token"], json!("file /var/run/token"));
        let missing = substitute(&config, &refs, |s| match s {
            ValueSource::Env(_) => None,
            _ => Some("v".into()),
        })
        .unwrap_err();
        assert_eq!(missing, ["environment variable CHANNEL"]);
    }

    #[test]
    fn malformed_references_are_placed() {
        let config = json!({
            "a": {"valueFrom": {"secretKeyRef": {"name": "Bad_Name", "key": "k"}}},
            "b": {"valueFrom": {"env": "1X"}},
            "c": {"valueFrom": {"secretKeyRef": {"name": "s"}}},
            "d": {"valueFrom": {"env": "X"}, "other": 1},
            "e": {"valueFrom": "X"},
            "f": {"valueFrom": {"file": "token"}},
            "g": {"valueFrom": {"file": "/var/../etc/shadow"}},
        });
        let (refs, errors) = collect(&config);
        assert!(refs.is_empty());
        let paths: Vec<_> = errors.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "a.valueFrom",
                "b.valueFrom",
                "c.valueFrom",
                "d.valueFrom",
                "e.valueFrom",
                "f.valueFrom",
                "g.valueFrom"
            ]
        );
        assert!(
            errors[5].1.contains("not an absolute path"),
            "{}",
            errors[5].1
        );
        assert!(errors[0].1.contains("\"Bad_Name\""), "{}", errors[0].1);
        assert!(errors[2].1.contains("name and key"), "{}", errors[2].1);
    }
}
