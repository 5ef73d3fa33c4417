//! Reads plugins from the plugins folder: `NAME.wasm` is the plugin `NAME`.
//!
//! # Decision: only regular files inside the folder, capped, read off the runtime
//!
//! Anything can end up under a plugin's name: a FIFO (opening it for reading waits for a
//! writer, forever), a socket, a device, a directory, a huge file, a symbolic link to
//! `/etc/passwd`. A read that blocks would hold the plugin's load lock and the folder watcher
//! with it, so [`read_plugin_file`] accepts only a regular file of at most
//! [`MAX_PLUGIN_FILE_SIZE`] that resolves inside the plugins folder (a symbolic link to
//! another file in the folder is fine). It checks the file's metadata before opening it,
//! opens it without blocking (`O_NONBLOCK`, `O_NOFOLLOW` on the resolved path) and checks
//! the opened file again, so a FIFO or link swapped in between is refused too. Reading and
//! hashing run on a blocking thread, and the caller stops waiting after [`READ_DEADLINE`]
//! (a hung network file system). No error quotes the file's content.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{Error, Plugin, PluginHost, Result, mib};
use crate::config::oci::OciSpec;

/// The largest plugin file read, in bytes (64 MiB). Components are a few hundred KiB
/// (Rust) to a few tens of MiB (Python, with its interpreter); anything larger is refused
/// before it is read.
pub const MAX_PLUGIN_FILE_SIZE: u64 = 64 << 20;

/// How long reading a plugin file may take before the load gives up on it.
pub const READ_DEADLINE: Duration = Duration::from_secs(10);

/// Why a plugin file was not read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    /// There is no file at the path (or a symbolic link there points nowhere).
    #[error("there is no such file")]
    Gone,
    /// The path names a FIFO, socket, device or directory.
    #[error("it is a {0}, not a regular file")]
    NotRegular(&'static str),
    /// The path resolves (through symbolic links) to a file outside the plugins folder.
    #[error("it resolves to {target}, outside the plugins folder")]
    OutsideFolder {
        /// Where it resolves to.
        target: String,
    },
    /// The file is larger than [`MAX_PLUGIN_FILE_SIZE`].
    #[error(
        "it is {size} bytes ({}), more than the {} a plugin file may be",
        mib(*size),
        mib(MAX_PLUGIN_FILE_SIZE)
    )]
    TooLarge {
        /// Its size in bytes.
        size: u64,
    },
    /// The file was replaced by a symbolic link between resolving and opening it.
    #[error("it was replaced while being opened")]
    Replaced,
    /// Reading did not finish within [`READ_DEADLINE`].
    #[error("reading it did not finish within {0:?}")]
    TimedOut(Duration),
    /// The operating system refused to open or read it.
    #[error("{0}")]
    Io(#[source] Arc<io::Error>),
}

/// A plugin file's content, read by [`read_plugin_file`].
#[derive(Debug, Clone)]
pub struct PluginFile {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Their SHA-256, in lower-case hex.
    pub sha256: String,
}

/// The file the plugin `name` is loaded from.
pub fn plugin_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.wasm"))
}

/// Reads and hashes the plugin file of `name` in `dir` on a blocking thread, within
/// [`READ_DEADLINE`]; see the module docs for what is refused.
pub async fn read_plugin_file(dir: &Path, name: &str) -> Result<PluginFile> {
    read_plugin_file_within(dir, name, READ_DEADLINE).await
}

/// Like [`read_plugin_file`] with another deadline.
pub async fn read_plugin_file_within(
    dir: &Path,
    name: &str,
    deadline: Duration,
) -> Result<PluginFile> {
    let path = plugin_path(dir, name);
    let read = tokio::task::spawn_blocking({
        let dir = dir.to_path_buf();
        let path = path.clone();
        move || read_blocking(&dir, &path)
    });
    let problem = match tokio::time::timeout(deadline, read).await {
        Ok(Ok(Ok(file))) => return Ok(file),
        Ok(Ok(Err(problem))) => problem,
        Ok(Err(join)) => ReadError::Io(Arc::new(io::Error::other(format!(
            "the reading thread failed: {join}"
        )))),
        Err(_) => ReadError::TimedOut(deadline),
    };
    Err(Error::Read {
        path: path.display().to_string(),
        problem,
    })
}

/// The plugin `name`'s content: its file in `dir`, for an `oci://` reference the component
/// pulled from the registry as `oci` says (cached in `dir`; see [`super::oci`]), for
/// `builtin:NAME` the component the binary carries ([`super::builtin`]).
pub async fn fetch(dir: &Path, name: &str, oci: &OciSpec) -> Result<PluginFile> {
    if super::builtin::is_builtin(name) {
        return super::builtin::component(name)
            .ok_or_else(|| Error::UnknownBuiltin(super::builtin::unknown(name)));
    }
    if crate::config::oci::Reference::is_oci(name) {
        return super::oci::pull(dir, name, oci)
            .await
            .map_err(|reason| Error::Pull {
                reference: name.to_string(),
                reason,
            });
    }
    read_plugin_file(dir, name).await
}

/// Reads (or pulls, with the default `oci:` settings) and compiles the plugin `name` from
/// `dir`.
pub async fn load(host: &Arc<PluginHost>, dir: &Path, name: &str) -> Result<Plugin> {
    load_with(host, dir, name, &OciSpec::default()).await
}

/// Reads (or pulls, as `oci` says) and compiles the plugin `name` from `dir`.
pub async fn load_with(
    host: &Arc<PluginHost>,
    dir: &Path,
    name: &str,
    oci: &OciSpec,
) -> Result<Plugin> {
    let file = fetch(dir, name, oci).await?;
    host.compile(name, file.bytes).await
}

fn read_blocking(dir: &Path, path: &Path) -> Result<PluginFile, ReadError> {
    let real = resolve_inside(dir, path)?;
    check_kind_and_size(&std::fs::metadata(&real).map_err(io_problem)?)?;
    let file = open_without_blocking(&real)?;
    let metadata = file.metadata().map_err(io_problem)?;
    check_kind_and_size(&metadata)?;
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(MAX_PLUGIN_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(io_problem)?;
    let read = bytes.len() as u64;
    if read > MAX_PLUGIN_FILE_SIZE {
        return Err(ReadError::TooLarge {
            size: read.max(metadata.len()),
        });
    }
    let sha256 = hex(&Sha256::digest(&bytes));
    Ok(PluginFile { bytes, sha256 })
}

/// `path` with every symbolic link resolved, if that is inside `dir`.
fn resolve_inside(dir: &Path, path: &Path) -> Result<PathBuf, ReadError> {
    let real = std::fs::canonicalize(path).map_err(io_problem)?;
    let real_dir = std::fs::canonicalize(dir).map_err(io_problem)?;
    if real.starts_with(&real_dir) {
        Ok(real)
    } else {
        Err(ReadError::OutsideFolder {
            target: real.display().to_string(),
        })
    }
}

fn check_kind_and_size(metadata: &std::fs::Metadata) -> Result<(), ReadError> {
    let kind = metadata.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotRegular(kind_name(&kind)));
    }
    if metadata.len() > MAX_PLUGIN_FILE_SIZE {
        return Err(ReadError::TooLarge {
            size: metadata.len(),
        });
    }
    Ok(())
}

/// What a file that is not a regular file is, in words.
fn kind_name(kind: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "FIFO (named pipe)";
        }
        if kind.is_socket() {
            return "socket";
        }
        if kind.is_block_device() {
            return "block device";
        }
        if kind.is_char_device() {
            return "character device";
        }
    }
    if kind.is_dir() {
        "directory"
    } else if kind.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Opens `path` for reading such that opening never waits (a FIFO swapped in after the
/// checks opens at once, and the opened file's metadata then refuses it), and a symbolic
/// link swapped in is not followed.
fn open_without_blocking(path: &Path) -> Result<File, ReadError> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    }
    options.open(path).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return ReadError::Replaced;
        }
        io_problem(e)
    })
}

fn io_problem(error: io::Error) -> ReadError {
    if error.kind() == io::ErrorKind::NotFound {
        ReadError::Gone
    } else {
        ReadError::Io(Arc::new(error))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn folder() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    async fn read_error(dir: &Path, name: &str) -> String {
        let started = std::time::Instant::now();
        let error = read_plugin_file_within(dir, name, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "refusing {name} took {:?}",
            started.elapsed()
        );
        error.to_string()
    }

    #[tokio::test]
    async fn a_regular_file_is_read_and_hashed() {
        let dir = folder();
        std::fs::write(dir.path().join("p.wasm"), b"abc").unwrap();
        let file = read_plugin_file(dir.path(), "p").await.unwrap();
        assert_eq!(file.bytes, b"abc");
        assert_eq!(
            file.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[tokio::test]
    async fn a_missing_file_is_gone() {
        let dir = folder();
        let error = read_plugin_file(dir.path(), "p").await.unwrap_err();
        assert!(error.is_file_gone(), "{error}");
        assert!(
            error.to_string().ends_with("p.wasm: there is no such file"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_fifo_named_as_a_plugin_is_refused_at_once() {
        let dir = folder();
        let fifo = dir.path().join("p.wasm");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let error = read_error(dir.path(), "p").await;
        assert!(
            error.ends_with("p.wasm: it is a FIFO (named pipe), not a regular file"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_fifo_is_opened_without_waiting_for_a_writer() {
        let dir = folder();
        let fifo = dir.path().join("p.wasm");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        // What happens when a FIFO is swapped in after the metadata check.
        let file = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::task::spawn_blocking(move || open_without_blocking(&fifo)),
        )
        .await
        .expect("opening a FIFO must not wait for a writer")
        .unwrap()
        .unwrap();
        let refused = check_kind_and_size(&file.metadata().unwrap()).unwrap_err();
        assert!(matches!(refused, ReadError::NotRegular(_)), "{refused}");
    }

    #[tokio::test]
    async fn a_directory_named_as_a_plugin_is_refused() {
        let dir = folder();
        std::fs::create_dir(dir.path().join("p.wasm")).unwrap();
        let error = read_error(dir.path(), "p").await;
        assert!(
            error.ends_with("it is a directory, not a regular file"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_file_over_the_cap_is_refused_before_it_is_read() {
        let dir = folder();
        let file = File::create(dir.path().join("p.wasm")).unwrap();
        // Sparse: 200 MiB that take no disk and would take long to read.
        file.set_len(200 << 20).unwrap();
        let error = read_error(dir.path(), "p").await;
        assert!(
            error.ends_with(
                "p.wasm: it is 209715200 bytes (200 MiB), more than the 64 MiB a plugin file may be"
            ),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_symlink_out_of_the_folder_is_refused_without_quoting_the_target() {
        let dir = folder();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("p.wasm")).unwrap();
        let error = read_error(dir.path(), "p").await;
        assert!(
            error.ends_with("p.wasm: it resolves to /etc/passwd, outside the plugins folder"),
            "{error}"
        );
        assert!(!error.contains("root:"), "{error}");
    }

    #[tokio::test]
    async fn a_symlink_to_another_file_in_the_folder_is_read() {
        let dir = folder();
        std::fs::create_dir(dir.path().join("builds")).unwrap();
        std::fs::write(dir.path().join("builds/p-v2.wasm"), b"v2").unwrap();
        std::os::unix::fs::symlink("builds/p-v2.wasm", dir.path().join("p.wasm")).unwrap();
        let file = read_plugin_file(dir.path(), "p").await.unwrap();
        assert_eq!(file.bytes, b"v2");
    }

    #[tokio::test]
    async fn a_dangling_symlink_is_a_gone_file() {
        let dir = folder();
        std::os::unix::fs::symlink("nowhere.wasm", dir.path().join("p.wasm")).unwrap();
        let error = read_plugin_file(dir.path(), "p").await.unwrap_err();
        assert!(error.is_file_gone(), "{error}");
    }
}
