//! Files a handler's config reads (`valueFrom: {file: PATH}`): a projected service account
//! token, which the kubelet rewrites before it expires. Each file named is read again every
//! [`POLL`]; a change in its content bumps the same counter a Secret's change does, so the
//! daemon applies its config again and the handlers whose value changed get new instances
//! with the new value.
//!
//! # Decision: polling, not inotify
//!
//! The kubelet swaps a projected volume's files by renaming a symlinked folder (`..data`),
//! which file watches on the path see unevenly; a token lives an hour or more and is
//! rewritten at 80% of that, so reading a small file every few seconds is exact and cheap.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often each file is read again.
pub const POLL: Duration = Duration::from_secs(5);

/// The polling task of one file, stopped when dropped.
pub(super) struct Polled {
    task: JoinHandle<()>,
}

impl Drop for Polled {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads `path` every [`POLL`] and bumps `changed` when what it reads (the content, or
/// why it cannot be read) differs from the time before.
pub(super) fn poll(path: String, changed: watch::Sender<u64>) -> Polled {
    let task = tokio::spawn(async move {
        let mut last = digest(&read(&path));
        loop {
            tokio::time::sleep(POLL).await;
            let now = digest(&read(&path));
            if now != last {
                tracing::info!(file = %path, "a file a handler's config reads changed");
                last = now;
                changed.send_modify(|n| *n += 1);
            }
        }
    });
    Polled { task }
}

/// The file's text, or why it cannot be had.
pub(super) fn read(path: &str) -> Result<String, String> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| "the file is not UTF-8 text".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("no such file".into()),
        Err(e) => Err(format!("cannot be read: {e}")),
    }
}

/// A digest of a read, so the task keeps no copy of the value.
fn digest(read: &Result<String, String>) -> [u8; 32] {
    let text = match read {
        Ok(text) => format!("ok:{text}"),
        Err(why) => format!("err:{why}"),
    };
    Sha256::digest(text.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_changed_file_bumps_the_counter_and_an_unchanged_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "one").unwrap();
        let (changed, mut seen) = watch::channel(0);
        let _polled = poll(path.to_str().unwrap().to_string(), changed);
        tokio::time::sleep(POLL * 3).await;
        assert!(!seen.has_changed().unwrap());
        std::fs::write(&path, "two").unwrap();
        tokio::time::sleep(POLL + Duration::from_millis(10)).await;
        assert!(seen.has_changed().unwrap());
        seen.mark_unchanged();
        std::fs::remove_file(&path).unwrap();
        tokio::time::sleep(POLL + Duration::from_millis(10)).await;
        assert!(seen.has_changed().unwrap());
        assert_eq!(read(path.to_str().unwrap()), Err("no such file".into()));
    }
}
