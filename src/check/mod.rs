//! `switchyard check`: every problem a config has that can be found without running it,
//! in one run. Config mistakes (all of them, as `run` would refuse them: a resource of a
//! built-in API group that Kubernetes does not serve among them), plugins that do not
//! load, and the probable mistakes `run` accepts as warnings (a built-in group's version
//! Kubernetes does not serve). With a client, API discovery is asked too, and a resource it
//! does not serve is a warning (its routes would wait for it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::config::{
    self, Checked, Config, ConfigError, InformerSpec, ROUTE_INFORMER_PREFIX, ResourceRef,
};
use crate::informer::InformerFactory;
use crate::plugin::{PluginHost, loader};

/// How bad a finding is: errors make `check` fail, warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// `run` would refuse the config, or a handler's plugin would not load.
    Error,
    /// Probably a mistake: a resource that names nothing.
    Warning,
    /// No problem: what a setting adds that is easy to overlook (the writes and waits of a
    /// route's finalizer).
    Note,
}

/// One problem, with where it is.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Error or warning.
    pub severity: Severity,
    /// 1-based line; 0 when it has no place in the file.
    pub line: u64,
    /// 1-based column; 0 when it has no place in the file.
    pub column: u64,
    /// The path of the value (`handlers.h1.plugin`).
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// As printed: `file:line:column: path: message`.
    #[serde(skip)]
    shown: String,
}

impl Finding {
    fn new(severity: Severity, error: ConfigError) -> Self {
        Self {
            severity,
            line: error.line,
            column: error.column,
            path: error.path.clone(),
            message: error.message.clone(),
            shown: error.to_string(),
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        };
        write!(f, "{severity}: {}", self.shown)
    }
}

/// Everything `check` found in one config.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The config file.
    pub file: PathBuf,
    /// Whether it has no errors (warnings allowed).
    pub ok: bool,
    /// Errors and warnings, in file order.
    pub findings: Vec<Finding>,
    /// Handlers and routes the config defines (as far as they could be read).
    pub handlers: usize,
    /// See `handlers`.
    pub routes: usize,
}

impl Report {
    /// How many findings have `severity`.
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }
}

/// Checks the config at `path`; with `cluster`, also asks its API server whether each
/// resource is served.
pub async fn check(
    path: &Path,
    cluster: Option<kube::Client>,
    plugins_dir: Option<&Path>,
) -> anyhow::Result<Report> {
    let owned = path.to_path_buf();
    let dir = plugins_dir.map(Path::to_path_buf);
    let checked =
        tokio::task::spawn_blocking(move || config::check_in(&owned, dir.as_deref())).await?;
    let errors = checked.errors.iter().map(|e| (Severity::Error, e));
    let warnings = checked.warnings.iter().map(|e| (Severity::Warning, e));
    let mut findings: Vec<Finding> = errors
        .chain(warnings)
        .map(|(severity, e)| Finding::new(severity, e.clone()))
        .collect();
    if let Some(config) = &checked.config {
        // Plugins are looked for only where the folder is known.
        if checked.errors.iter().all(|e| e.path != "plugins_dir") {
            findings.extend(plugins(&checked, config).await?);
        }
        if let Some(client) = cluster {
            findings.extend(served(&checked, config, client).await);
        }
        findings.extend(finalizer_notes(&checked, config));
    }
    findings.sort_by_key(|f| (f.line, f.column));
    let config = checked.config.as_ref();
    Ok(Report {
        file: path.to_path_buf(),
        ok: findings.iter().all(|f| f.severity != Severity::Error),
        findings,
        handlers: config.map_or(0, |c| c.handlers.len()),
        routes: config.map_or(0, |c| c.routes.len()),
    })
}

/// What each route with a finalizer adds: a write per object it delivers, objects held in
/// Terminating while its handler fails on their deletion, and the permission it needs.
fn finalizer_notes(checked: &Checked, config: &Config) -> Vec<Finding> {
    let mut notes = Vec::new();
    for (index, route) in config.routes.iter().enumerate() {
        let Some(finalizer) = &route.finalizer else {
            continue;
        };
        let resources: Vec<String> = crate::rbac::feeding_route(config, route)
            .iter()
            .map(|i| crate::rbac::resource_of(i).plural)
            .collect();
        let message = format!(
            "route {:?} puts the finalizer {finalizer} on every object it delivers (one patch per object) and removes it once handler {:?} has handled the object's deletion: while the handler fails on it, the object stays Terminating; needs patch on {} (`switchyard rbac` grants it)",
            route.name,
            route.handler,
            resources.join(", ")
        );
        let path = format!("routes[{index}].finalizer");
        notes.push(Finding::new(
            Severity::Note,
            checked.problem_at(&path, message),
        ));
    }
    notes
}

/// Each handler whose plugin, or shadow plugin, does not load (missing, not a component, not
/// our contract).
async fn plugins(checked: &Checked, config: &Config) -> anyhow::Result<Vec<Finding>> {
    let host: Arc<PluginHost> = PluginHost::new()?;
    let mut findings = Vec::new();
    for handler in &config.handlers {
        let shadow = handler.shadow.as_ref().map(|s| ("shadow", s));
        for (field, plugin) in [("plugin", &handler.plugin)].into_iter().chain(shadow) {
            let (path, problem) =
                match loader::load_with(&host, &config.plugins_dir, plugin, &config.oci).await {
                    Err(e) => (format!("handlers.{}.{field}", handler.name), e.to_string()),
                    Ok(loaded)
                        if field == "plugin"
                            && handler.batch.is_some()
                            && !loaded.handles_batches() =>
                    {
                        let path = format!("handlers.{}.batch", handler.name);
                        (path, crate::plugin::lacks_handle_batch(plugin))
                    }
                    Ok(_) => continue,
                };
            findings.push(Finding::new(
                Severity::Error,
                checked.problem_at(&path, problem),
            ));
        }
    }
    Ok(findings)
}

/// Where the informer's resource is written: `routes[i].resource` for a route's own watch,
/// else `informers.NAME.resource` (or `.kind`).
fn resource_path(config: &Config, spec: &InformerSpec) -> String {
    if let Some(route) = spec.name.strip_prefix(ROUTE_INFORMER_PREFIX) {
        let index = config
            .routes
            .iter()
            .position(|r| r.name == route)
            .unwrap_or(0);
        return format!("routes[{index}].resource");
    }
    let field = match spec.resource {
        ResourceRef::Plural(_) => "resource",
        ResourceRef::Kind { .. } => "kind",
    };
    format!("informers.{}.{field}", spec.name)
}

/// Asks the API server for each informer's resource: a warning for each it does not serve
/// (its routes would wait), an error when it cannot be asked.
async fn served(checked: &Checked, config: &Config, client: kube::Client) -> Vec<Finding> {
    let factory = InformerFactory::new(client);
    let mut findings = Vec::new();
    for spec in &config.informers {
        let answer = match &spec.resource {
            ResourceRef::Plural(name) => factory.kind_of(name).await.map(|_| ()),
            ResourceRef::Kind {
                group,
                version,
                kind,
            } => factory.resolve_kind(group, version, kind).await.map(|_| ()),
        };
        let Err(e) = answer else { continue };
        let path = resource_path(config, spec);
        let finding = if e.is_not_served() {
            let message = format!("{e}; its routes would wait until it is served");
            Finding::new(Severity::Warning, checked.problem_at(&path, message))
        } else {
            Finding::new(Severity::Error, checked.problem_at(&path, e))
        };
        findings.push(finding);
    }
    findings
}
