//! Where the admin API's bearer token comes from: a file or an environment variable, read
//! when the config is validated and again when the daemon starts.

use std::path::PathBuf;

/// Why the admin token cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token file cannot be read.
    #[error("cannot read the admin token file {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The token file holds nothing but white space.
    #[error("the admin token file {} is empty", path.display())]
    EmptyFile {
        /// The file.
        path: PathBuf,
    },
    /// The token variable is not set (or not valid Unicode).
    #[error("the admin token variable {var} is not set")]
    Env {
        /// The variable.
        var: String,
        /// Why.
        #[source]
        source: std::env::VarError,
    },
    /// The token variable holds nothing but white space.
    #[error("the admin token variable {var} is empty")]
    EmptyEnv {
        /// The variable.
        var: String,
    },
}

/// Where a secret is read from when the daemon starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// A file (its content, trimmed).
    File(PathBuf),
    /// An environment variable.
    Env(String),
}

impl TokenSource {
    /// Reads the secret, trimmed; an empty one is an error.
    pub fn read(&self) -> Result<String, TokenError> {
        let token = match self {
            TokenSource::File(path) => {
                std::fs::read_to_string(path).map_err(|source| TokenError::File {
                    path: path.clone(),
                    source,
                })?
            }
            TokenSource::Env(var) => std::env::var(var).map_err(|source| TokenError::Env {
                var: var.clone(),
                source,
            })?,
        };
        let token = token.trim();
        if !token.is_empty() {
            return Ok(token.to_string());
        }
        Err(match self {
            TokenSource::File(path) => TokenError::EmptyFile { path: path.clone() },
            TokenSource::Env(var) => TokenError::EmptyEnv { var: var.clone() },
        })
    }
}
