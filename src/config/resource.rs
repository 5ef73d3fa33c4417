//! How a route names the resource it watches: `configmaps` (core v1), `v1/pods`,
//! `apps/v1/deployments`.

use std::fmt;

/// Why a resource name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceNameError {
    /// A part is empty or has a character other than lower case letters, digits, '-', '.'.
    #[error(
        "invalid resource {text:?}: expected plural, version/plural or group/version/plural in lower case, such as configmaps or apps/v1/deployments"
    )]
    Invalid {
        /// The name as written.
        text: String,
    },
    /// More than three parts.
    #[error("invalid resource {text:?}: expected at most group/version/plural")]
    TooManyParts {
        /// The name as written.
        text: String,
    },
}

/// A resource named by group, version and plural.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceName {
    /// API group; empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
}

impl ResourceName {
    /// Parses `plural` (core v1), `version/plural` (core) or `group/version/plural`.
    pub fn parse(text: &str) -> Result<Self, ResourceNameError> {
        let parts: Vec<&str> = text.split('/').collect();
        let valid = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        };
        if !parts.iter().all(|p| valid(p)) {
            return Err(ResourceNameError::Invalid {
                text: text.to_string(),
            });
        }
        let (group, version, plural) = match parts.as_slice() {
            [plural] => ("", "v1", *plural),
            [version, plural] => ("", *version, *plural),
            [group, version, plural] => (*group, *version, *plural),
            _ => {
                return Err(ResourceNameError::TooManyParts {
                    text: text.to_string(),
                });
            }
        };
        Ok(Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
        })
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.plural)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_default_to_core_v1() {
        let cm = ResourceName::parse("configmaps").unwrap();
        assert_eq!((cm.group.as_str(), cm.version.as_str()), ("", "v1"));
        let deploy = ResourceName::parse("apps/v1/deployments").unwrap();
        assert_eq!(deploy.to_string(), "apps/v1/deployments");
        assert!(ResourceName::parse("ConfigMaps").is_err());
        assert!(ResourceName::parse("a/b/c/d").is_err());
    }
}
