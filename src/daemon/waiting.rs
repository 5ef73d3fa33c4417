//! Routes waiting for a resource the API server does not serve yet (a CRD not created):
//! the daemon asks discovery again now and then, and starts them once it is served.
//! Handlers whose config reads a Secret: when one changes (created, rotated, deleted), the
//! daemon applies its config again, which replaces each handler whose values changed.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Shared;

/// The first wait between looks; it doubles up to [`MAX_DELAY`] while nothing changes.
const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest wait between looks.
const MAX_DELAY: Duration = Duration::from_secs(10);

/// Looks for the resources the routes wait for until the daemon goes away, starting the
/// routes whose resources became served, and applies the config again when a Secret it
/// reads changes. Holds the daemon weakly.
pub(super) fn spawn(shared: &Arc<Shared>) -> JoinHandle<()> {
    let mut secrets = shared.secrets.changed();
    let shared = Arc::downgrade(shared);
    tokio::spawn(async move {
        let mut delay = FIRST_DELAY;
        loop {
            let secret_changed = tokio::select! {
                () = tokio::time::sleep(delay) => false,
                changed = secrets.changed() => changed.is_ok(),
            };
            let Some(shared) = Weak::upgrade(&shared) else {
                return;
            };
            if secret_changed {
                shared.apply_secrets().await;
                continue;
            }
            delay = match shared.start_waiting().await {
                Some(started) if started > 0 => FIRST_DELAY,
                Some(_) => (delay * 2).min(MAX_DELAY),
                None => FIRST_DELAY,
            };
        }
    })
}

impl Shared {
    /// Applies the running config again after a Secret changed: handlers whose values
    /// changed are replaced (their queues handed over), those waiting for it start.
    pub(super) async fn apply_secrets(&self) {
        let _one_at_a_time = self.reloading.lock().await;
        let running = self.topology();
        match running.apply(running.config.clone(), &self.stages()).await {
            Ok((topology, plan)) => {
                if !plan.handlers.changed.is_empty() {
                    tracing::info!(handlers = %plan.handlers.changed.join(", "), "a Secret changed: these handlers run with its new value");
                }
                *crate::util::write(&self.topology) = Arc::new(topology);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot apply a changed Secret; the handlers keep their values");
            }
        }
    }

    /// Applies the running config again if some of its routes wait for a resource, which
    /// starts those whose resource is served now. Returns how many waiting resources were
    /// started, or `None` when nothing waits.
    pub(super) async fn start_waiting(&self) -> Option<usize> {
        if self.topology().waiting.is_empty() {
            return None;
        }
        let _one_at_a_time = self.reloading.lock().await;
        let running = self.topology();
        if running.waiting.is_empty() {
            return None;
        }
        match running.apply(running.config.clone(), &self.stages()).await {
            Ok((topology, _)) => {
                let started: Vec<String> = running
                    .waiting
                    .iter()
                    .filter(|w| topology.waiting.iter().all(|now| now.watch != w.watch))
                    .map(|w| w.watch.clone())
                    .collect();
                for watch in &started {
                    tracing::info!(%watch, "resource served now: the routes waiting for it start");
                }
                *crate::util::write(&self.topology) = Arc::new(topology);
                Some(started.len())
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the routes waiting for a resource; will try again");
                Some(0)
            }
        }
    }
}
