//! A config as `switchyard check` reads it: every mistake at once, the config as far as it
//! could be built despite them, and places in the file for what later checks find (plugins,
//! resource names).

use std::fmt;
use std::path::{Path, PathBuf};

use super::document::Document;
use super::{Config, ConfigError};

/// The outcome of reading a config for `check`.
#[derive(Debug)]
pub struct Checked {
    /// The config file.
    pub file: PathBuf,
    /// The config as far as it could be built: items that could not be read are left out.
    /// `None` when the file cannot be read or is not YAML.
    pub config: Option<Config>,
    /// Every mistake, in file order.
    pub errors: Vec<ConfigError>,
    /// Probable mistakes that `run` accepts (a resource of a built-in group in a version
    /// Kubernetes 1.34 does not serve), in file order.
    pub warnings: Vec<ConfigError>,
    document: Option<Document>,
}

/// Reads and checks the config at `path`, keeping what could be built. Blocking, like
/// [`super::load`].
pub fn check(path: &Path) -> Checked {
    check_in(path, None)
}

/// [`check`], with plugins looked for in `plugins_dir` instead of the config's own folder
/// when it is given: a config written for a cluster (`plugins_dir: /plugins`) checked
/// against a local folder.
pub fn check_in(path: &Path, plugins_dir: Option<&Path>) -> Checked {
    let (document, config, errors, warnings) = match super::read_bounded(path) {
        Ok(text) => {
            let v = super::validate::validate_all_in(path, &text, plugins_dir);
            (v.document, v.config, v.errors, v.warnings)
        }
        Err(e) => (
            None,
            None,
            vec![ConfigError::whole_file(path, e)],
            Vec::new(),
        ),
    };
    Checked {
        file: path.to_path_buf(),
        config,
        errors,
        warnings,
        document,
    }
}

impl Checked {
    /// A problem with the value at `path` (`handlers.h1.plugin`), placed where that value
    /// is written, or its nearest written parent (a default has no place of its own).
    pub fn problem_at(&self, path: &str, message: impl fmt::Display) -> ConfigError {
        let place = self
            .document
            .as_ref()
            .map(|d| d.value_place(path))
            .unwrap_or_default();
        ConfigError {
            file: self.file.clone(),
            line: place.line,
            column: place.column,
            path: path.to_string(),
            message: message.to_string(),
        }
    }
}
