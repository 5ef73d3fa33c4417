//! Config reload: read the file again, validate it, refuse what cannot change while running,
//! apply the difference ([`super::Topology::apply`]) and remember how each attempt went.
//! A rejected reload changes nothing: the running config, handlers, queues and plugins stay.

use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

use super::{Plan, Shared};
use crate::config::{Config, ConfigError, ConfigErrors};
use crate::util::{lock, rfc3339};

/// Why a reload was rejected. The running config stays in place.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file cannot be read or has mistakes.
    #[error("the config has errors; the running config stays:\n{0}")]
    Invalid(ConfigErrors),
    /// The file changes settings that take effect only at start.
    #[error("{} cannot change while running (restart to apply); the running config stays", .0.join(", "))]
    NeedsRestart(Vec<String>),
    /// The thread parsing the file failed.
    #[error("the config could not be parsed: {0}; the running config stays")]
    Parse(#[source] tokio::task::JoinError),
    /// A new stage could not be started (a resource that cannot be watched).
    #[error("cannot apply the config: {0}; the running config stays")]
    Apply(#[source] super::Error),
}

impl ReloadError {
    /// Each config mistake, when the file was invalid.
    pub fn config_errors(&self) -> &[ConfigError] {
        match self {
            ReloadError::Invalid(errors) => &errors.0,
            _ => &[],
        }
    }
}

impl crate::admin::ReloadFailure for ReloadError {
    fn config_errors(&self) -> &[ConfigError] {
        ReloadError::config_errors(self)
    }
}

/// One reload attempt.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadRecord {
    /// When it finished (RFC 3339).
    pub at: String,
    /// What asked for it: `file` (the config file changed), `api` (POST /reload).
    pub trigger: &'static str,
    /// Whether it was applied.
    pub applied: bool,
    /// What changed, when applied.
    pub plan: Option<Plan>,
    /// Why it was rejected, when it was.
    pub error: Option<String>,
}

/// Reload counts and the last attempt, for /status.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReloadHistory {
    /// Reloads applied since start.
    pub applied: u64,
    /// Reloads rejected since start.
    pub rejected: u64,
    /// The most recent attempt.
    pub last: Option<ReloadRecord>,
}

/// The config section of /status.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigStatus {
    /// The config file.
    pub file: String,
    /// Reloads so far.
    #[serde(flatten)]
    pub reloads: ReloadHistory,
}

impl Shared {
    /// Reads the config file again and applies it: see [`Shared::reload_from`].
    pub async fn reload(&self) -> Result<Plan, ReloadError> {
        self.reload_from("api").await
    }

    /// Reads the running config's file again, validates it and applies only the difference.
    /// `trigger` names what asked (`api`, `file`) in /status. Reloads run one at a time.
    pub async fn reload_from(&self, trigger: &'static str) -> Result<Plan, ReloadError> {
        let _one_at_a_time = self.reloading.lock().await;
        let running = self.topology();
        let result = self.try_reload(&running).await;
        let mut history = lock(&self.reloads);
        let record = ReloadRecord {
            at: rfc3339(SystemTime::now()),
            trigger,
            applied: result.is_ok(),
            plan: result.as_ref().ok().cloned(),
            error: result.as_ref().err().map(ToString::to_string),
        };
        match &result {
            Ok(plan) => {
                history.applied += 1;
                tracing::info!(trigger, plan = %summary(plan), "config reloaded");
            }
            Err(e) => {
                history.rejected += 1;
                tracing::error!(trigger, error = %e, "config reload rejected");
            }
        }
        history.last = Some(record);
        result
    }

    async fn try_reload(&self, running: &Arc<super::Topology>) -> Result<Plan, ReloadError> {
        let source = running.config.source.clone();
        // Parsing is CPU work bounded by the config's limits: off the async runtime, so a
        // large or hostile file never stalls the admin API or the workers.
        let (config, verdicts) = self.load_with_teams(&source).await?;
        let mut fixed = fixed_at_start(&running.config, &config);
        // The instance pool was sized at start; a larger memory cap would not fit in it.
        for h in config
            .handlers
            .iter()
            .filter(|h| h.memory > self.pool_memory)
        {
            fixed.push(format!(
                "handlers.{}.memory above the {} bytes the plugin pool was sized for",
                h.name, self.pool_memory
            ));
        }
        // Each handler owns as many pool slots as its concurrency: they must all fit.
        let workers: usize = config.handlers.iter().map(|h| h.concurrency).sum();
        if workers > self.pool_instances as usize {
            fixed.push(format!(
                "handlers' total concurrency of {workers} above the {} plugin instances the pool was sized for",
                self.pool_instances
            ));
        }
        if !fixed.is_empty() {
            return Err(ReloadError::NeedsRestart(fixed));
        }
        let (topology, plan) = running
            .apply(config, &self.stages())
            .await
            .map_err(ReloadError::Apply)?;
        *crate::util::write(&self.topology) = Arc::new(topology);
        self.write_team_status(&verdicts).await;
        Ok(plan)
    }

    /// The config section of /status.
    pub fn config_status(&self) -> ConfigStatus {
        ConfigStatus {
            file: self.topology().config.source.display().to_string(),
            reloads: lock(&self.reloads).clone(),
        }
    }
}

/// The settings that differ between `running` and `new` but take effect only at start.
fn fixed_at_start(running: &Config, new: &Config) -> Vec<String> {
    let mut fixed = Vec::new();
    if running.admin_listen != new.admin_listen {
        fixed.push("admin.listen");
    }
    if running.probes_listen != new.probes_listen {
        fixed.push("admin.probes_listen");
    }
    if running.admin_token != new.admin_token {
        fixed.push("admin.token_file/token_env");
    }
    if running.admin_allowed_hosts != new.admin_allowed_hosts {
        fixed.push("admin.allowed_hosts");
    }
    if running.header_read_timeout != new.header_read_timeout {
        fixed.push("admin.header_read_timeout");
    }
    if running.admin_max_connections != new.admin_max_connections {
        fixed.push("admin.max_connections");
    }
    if running.probes_max_connections != new.probes_max_connections {
        fixed.push("admin.probes_max_connections");
    }
    if running.ha != new.ha {
        fixed.push("ha");
    }
    if running.tracing != new.tracing {
        fixed.push("tracing");
    }
    if running.kubeconfig != new.kubeconfig {
        fixed.push("kubeconfig");
    }
    if running.plugins_dir != new.plugins_dir {
        fixed.push("plugins_dir");
    }
    fixed.into_iter().map(String::from).collect()
}

/// `handlers +a -b ~c; routes +x` for the log.
fn summary(plan: &Plan) -> String {
    let part = |what: &str, c: &super::Changes| {
        let mut items: Vec<String> = Vec::new();
        items.extend(c.added.iter().map(|n| format!("+{n}")));
        items.extend(c.removed.iter().map(|n| format!("-{n}")));
        items.extend(c.changed.iter().map(|n| format!("~{n}")));
        (!items.is_empty()).then(|| format!("{what} {}", items.join(" ")))
    };
    let parts: Vec<String> = [
        part("informers", &plan.informers),
        part("handlers", &plan.handlers),
        part("routes", &plan.routes),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "no changes".into()
    } else {
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::validate;

    const ROUTES: &str =
        "handlers:\n  h: {}\nroutes:\n  - {name: a, resource: configmaps, handler: h}\n";

    #[test]
    fn a_changed_ha_section_needs_a_restart() {
        let file = Path::new("/tmp/c.yaml");
        let single = validate(file, ROUTES).unwrap();
        let leader = validate(file, &format!("ha:\n  mode: leader\n{ROUTES}")).unwrap();
        assert_eq!(super::fixed_at_start(&single, &leader), vec!["ha"]);
        assert!(super::fixed_at_start(&single, &single.clone()).is_empty());
    }

    #[test]
    fn a_changed_tracing_section_needs_a_restart() {
        let file = Path::new("/tmp/c.yaml");
        let off = validate(file, ROUTES).unwrap();
        let on = validate(
            file,
            &format!("tracing:\n  otlp_endpoint: http://c:4318\n{ROUTES}"),
        )
        .unwrap();
        assert_eq!(super::fixed_at_start(&off, &on), vec!["tracing"]);
    }
}
