//! The simulator config: a small YAML file (`switchyard sim --config FILE`) declaring custom
//! resources to serve and objects to start with.
//!
//! ```yaml
//! authorization: RBAC             # default: AlwaysAllow (every request is allowed)
//! users:                          # bearer tokens and who they authenticate
//!   - name: system:serviceaccount:team-a:runner
//!     token: runner-a-token
//!     groups: [extra]             # default: none; a ServiceAccount also gets its own
//! crds:
//!   - group: example.com          # required; a domain with a dot
//!     version: v1                 # required
//!     kind: Widget                # required
//!     plural: widgets             # default: lower-case kind + "s"
//!     singular: widget            # default: lower-case kind
//!     shortNames: [wd]            # default: none
//!     categories: [all]           # default: none
//!     namespaced: true            # default: true
//!     columns:                    # extra `kubectl get` columns (additionalPrinterColumns)
//!       - name: Size
//!         jsonPath: .spec.size
//!         type: integer           # default: string
//! objects:                        # created at start, in order (namespace default: default)
//!   - apiVersion: example.com/v1
//!     kind: Widget
//!     metadata: {name: first}
//!     spec: {size: 3}
//! ```

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// The parsed simulator config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Custom resources to serve, each created as a CustomResourceDefinition at start.
    #[serde(default)]
    pub crds: Vec<CrdConfig>,
    /// Objects to create at start (after the CRDs), each with `apiVersion` and `kind`.
    #[serde(default)]
    pub objects: Vec<Value>,
    /// How requests are authorized.
    #[serde(default)]
    pub authorization: AuthorizationMode,
    /// The users bearer tokens authenticate, besides the admin.
    #[serde(default)]
    pub users: Vec<UserConfig>,
}

/// How the simulator authorizes requests (kube-apiserver's `--authorization-mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum AuthorizationMode {
    /// Every request is allowed.
    #[default]
    #[serde(alias = "alwaysAllow")]
    AlwaysAllow,
    /// Roles, ClusterRoles and their bindings stored in the simulator decide.
    #[serde(alias = "rbac")]
    RBAC,
}

/// A user a bearer token authenticates.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The username (`system:serviceaccount:NS:NAME` for a ServiceAccount).
    pub name: String,
    /// The bearer token.
    pub token: String,
    /// Groups besides those every user (and every ServiceAccount) gets.
    #[serde(default)]
    pub groups: Vec<String>,
    /// The user's uid, if any.
    #[serde(default)]
    pub uid: Option<String>,
}

/// One custom resource of the config.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CrdConfig {
    /// API group (`example.com`).
    pub group: String,
    /// The served version (`v1`).
    pub version: String,
    /// Kind (`Widget`).
    pub kind: String,
    /// Plural name in URLs; defaults to the lower-case kind plus `s`.
    #[serde(default)]
    pub plural: Option<String>,
    /// Singular name; defaults to the lower-case kind.
    #[serde(default)]
    pub singular: Option<String>,
    /// Short names kubectl accepts.
    #[serde(default)]
    pub short_names: Vec<String>,
    /// Categories kubectl accepts (`kubectl get all` lists the `all` category).
    #[serde(default)]
    pub categories: Vec<String>,
    /// Whether objects live in namespaces (default true).
    #[serde(default = "default_true")]
    pub namespaced: bool,
    /// Extra columns `kubectl get` shows.
    #[serde(default)]
    pub columns: Vec<ColumnConfig>,
}

/// One extra printer column of a custom resource.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ColumnConfig {
    /// Column header.
    pub name: String,
    /// Dotted path of the value, such as `.spec.size`.
    pub json_path: String,
    /// `string` (default), `integer`, `number`, `boolean` or `date`.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    /// 0 (default) shows the column always, 1 only with `-o wide`.
    #[serde(default)]
    pub priority: u32,
}

fn default_true() -> bool {
    true
}

/// Why a simulator config could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The YAML does not describe a simulator config.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong, with its place in the file.
        message: String,
    },
}

impl SimConfig {
    /// Parses a config from YAML text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let config: Self = serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        config.check_users().map_err(|message| ConfigError::Parse {
            path: origin.to_string(),
            message,
        })?;
        Ok(config)
    }

    /// Every user has a name and a token of its own.
    fn check_users(&self) -> Result<(), String> {
        for (i, user) in self.users.iter().enumerate() {
            if user.name.trim().is_empty() {
                return Err(format!("users[{i}].name: must not be empty"));
            }
            if user.token.trim().is_empty() {
                return Err(format!("users[{i}].token: must not be empty"));
            }
            if let Some(j) = self.users[..i].iter().position(|u| u.token == user.token) {
                return Err(format!("users[{i}].token: the same as users[{j}].token"));
            }
        }
        Ok(())
    }

    /// Reads a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: origin.clone(),
            source,
        })?;
        Self::from_yaml(&text, &origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_declares_crds_with_defaults_and_objects() {
        let config = SimConfig::from_yaml(
            "crds:\n  - {group: example.com, version: v1, kind: Widget, shortNames: [wd]}\n  - group: example.com\n    version: v1\n    kind: Gizmo\n    namespaced: false\n    columns: [{name: Size, jsonPath: .spec.size, type: integer}]\nobjects:\n  - apiVersion: example.com/v1\n    kind: Widget\n    metadata: {name: w}\n    spec: {size: 3}\n",
            "sim.yaml",
        )
        .unwrap();
        assert_eq!(config.crds.len(), 2);
        assert!(config.crds[0].namespaced);
        assert_eq!(config.crds[0].short_names, ["wd"]);
        assert!(!config.crds[1].namespaced);
        assert_eq!(config.crds[1].columns[0].type_.as_deref(), Some("integer"));
        assert_eq!(config.objects[0]["spec"]["size"], 3);
    }

    #[test]
    fn a_config_declares_users_and_rbac() {
        let config = SimConfig::from_yaml(
            "authorization: RBAC\nusers:\n  - {name: alice, token: t1, groups: [dev]}\n",
            "sim.yaml",
        )
        .unwrap();
        assert_eq!(config.authorization, AuthorizationMode::RBAC);
        assert_eq!(config.users[0].groups, ["dev"]);
        let default = SimConfig::from_yaml("crds: []\n", "sim.yaml").unwrap();
        assert_eq!(default.authorization, AuthorizationMode::AlwaysAllow);
    }

    #[test]
    fn users_need_a_token_of_their_own() {
        let err = SimConfig::from_yaml(
            "users:\n  - {name: a, token: t}\n  - {name: b, token: t}\n",
            "sim.yaml",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(err, "sim.yaml: users[1].token: the same as users[0].token");
        let err = SimConfig::from_yaml("users: [{name: a, token: ' '}]\n", "sim.yaml")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "sim.yaml: users[0].token: must not be empty");
    }

    #[test]
    fn an_unknown_field_is_an_error_naming_the_file() {
        let err = SimConfig::from_yaml(
            "crds:\n  - {group: a.b, version: v1, kind: K, colour: red}\n",
            "sim.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("sim.yaml: "), "{err}");
        assert!(err.contains("colour"), "{err}");
    }
}
