//! `admin:`: where the admin API listens and where its bearer token comes from.

use std::net::SocketAddr;
use std::path::Path;

use serde_json::Value;

use super::errors::Errors;
use crate::config::schema::AdminFile;
use crate::config::{DEFAULT_ADMIN_LISTEN, TokenSource};

/// The admin API's settings, with defaults filled in.
pub(super) struct Admin {
    /// Where it listens.
    pub listen: SocketAddr,
    /// Where its token comes from, if anywhere.
    pub token: Option<TokenSource>,
}

/// Reads `admin:`; its defaults when it is absent or cannot be read.
pub(super) fn read_admin(value: Option<&Value>, errors: &mut Errors) -> AdminFile {
    match value {
        Some(value) => errors.read("admin", value).unwrap_or_default(),
        None => AdminFile::default(),
    }
}

/// Builds the admin settings; a token file is relative to `base`, the config's folder.
pub(super) fn build_admin(admin: AdminFile, base: &Path, errors: &mut Errors) -> Admin {
    let token = match (admin.token_file, admin.token_env) {
        (Some(_), Some(_)) => {
            errors.at("admin.token_env", "set token_file or token_env, not both");
            None
        }
        (Some(path), None) => Some(TokenSource::File(if path.is_absolute() {
            path
        } else {
            base.join(path)
        })),
        (None, Some(var)) => Some(TokenSource::Env(var)),
        (None, None) => None,
    };
    Admin {
        listen: admin.listen.unwrap_or(DEFAULT_ADMIN_LISTEN),
        token,
    }
}
