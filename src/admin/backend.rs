//! What the admin API needs of the running daemon, as a trait the daemon implements: the
//! admin stage sits below the daemon and never imports it.
//!
//! The status, plan and reload error are associated types: the admin API only serializes
//! them (and lists a rejected reload's config mistakes), so it need not know their shape.

use std::future::Future;
use std::sync::Arc;

use serde::Serialize;

use crate::config::ConfigError;
use crate::handler::Handler;
use crate::informer::Informer;
use crate::plugin::PluginRegistry;
use crate::router::RouteStatus;

/// The running daemon as the admin API sees it.
pub trait Backend: Send + Sync + 'static {
    /// Every stage's state, as `GET /status` shows it.
    type Status: Serialize;
    /// What a config reload changed.
    type Plan: Serialize;
    /// Why a config reload was rejected.
    type ReloadError: ReloadFailure;

    /// The informers running now (for `/readyz`).
    fn informers(&self) -> Vec<Arc<Informer>>;
    /// A snapshot of every stage's state.
    fn status(&self) -> Self::Status;
    /// Every route's state, in config order.
    fn routes(&self) -> Vec<RouteStatus>;
    /// Every metric in the Prometheus text format.
    fn metrics_text(&self) -> String;
    /// Reads the config file again and applies the difference.
    fn reload(&self) -> impl Future<Output = Result<Self::Plan, Self::ReloadError>> + Send;
    /// The plugins in use.
    fn plugins(&self) -> &PluginRegistry;
    /// The running handler named `name`.
    fn handler(&self, name: &str) -> Option<Arc<Handler>>;
    /// Resources the routes need that the API server does not serve yet (for `/readyz`):
    /// each as (the watch, why).
    fn waiting(&self) -> Vec<(String, String)>;
    /// Other reasons the daemon is not ready (for `/readyz`): each a short name and why
    /// (the state store failing to commit, the API server refusing this replica its Lease).
    fn unready(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Whether `/readyz` answers 200 (and `switchyard_ready` is 1).
    fn ready(&self) -> bool {
        is_ready(&self.informers(), &self.waiting(), &self.unready())
    }
}

/// The readiness verdict: every informer synced, no resource the routes need waiting, and no
/// other reason.
pub(crate) fn is_ready(
    informers: &[Arc<Informer>],
    waiting: &[(String, String)],
    unready: &[(String, String)],
) -> bool {
    informers.iter().all(|i| i.is_synced()) && waiting.is_empty() && unready.is_empty()
}

/// A rejected reload: its message, and the config mistakes when the file had some.
pub trait ReloadFailure: std::fmt::Display {
    /// Each config mistake (file, line, column, path), when the file was invalid.
    fn config_errors(&self) -> &[ConfigError];
}
