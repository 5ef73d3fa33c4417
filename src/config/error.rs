//! What a config's validation reports: each problem with its file, line, column and path, and
//! all of them together.

use std::fmt;
use std::path::{Path, PathBuf};

use super::limits::MAX_CONFIG_BYTES;

/// One problem in a config file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The config file.
    pub file: PathBuf,
    /// 1-based line; 0 when the problem has no place in the file.
    pub line: u64,
    /// 1-based column; 0 when the problem has no place in the file.
    pub column: u64,
    /// The path of the offending value (`routes[2].handler`); empty for the whole file.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// A problem with the whole file, which has no place in it.
    pub(super) fn whole_file(file: &Path, message: impl fmt::Display) -> Self {
        Self {
            file: file.to_path_buf(),
            line: 0,
            column: 0,
            path: String::new(),
            message: message.to_string(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Everything wrong with a config file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Why the text of a config file cannot be had.
#[derive(Debug, thiserror::Error)]
pub(super) enum SourceError {
    /// The file cannot be read, or is not UTF-8.
    #[error("cannot read the config file: {0}")]
    Read(#[source] std::io::Error),
    /// The file is larger than [`MAX_CONFIG_BYTES`].
    #[error(
        "the config file is larger than {} KiB; a config needs a few KiB",
        MAX_CONFIG_BYTES >> 10
    )]
    TooLarge,
}
