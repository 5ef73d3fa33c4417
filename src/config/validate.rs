//! Turns the text of a config file into a [`Config`], collecting every problem with its
//! file, line, column and path before failing.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_saphyr::Spanned;

use super::schema::{ConfigFile, DeliveryFile, EventKindFile, RouteFile};
use crate::queue::Delivery;

/// Events kept per object by an `every` route when the config does not say.
pub const DEFAULT_BACKLOG: usize = 100;
use super::{
    Config, ConfigError, ConfigErrors, DEFAULT_ADMIN_LISTEN, EventFilter, HandlerSpec,
    ResourceName, RouteSpec,
};

/// Parses and checks the config in `text`, read from `file`.
pub fn validate(file: &Path, text: &str) -> Result<Config, ConfigErrors> {
    let parsed: ConfigFile = serde_saphyr::from_str(text).map_err(|e| {
        let (line, column) = e
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((0, 0));
        ConfigErrors(vec![ConfigError {
            file: file.to_path_buf(),
            line,
            column,
            path: String::new(),
            message: first_line(&e.to_string()),
        }])
    })?;
    let mut errors = Errors {
        file: file.to_path_buf(),
        found: Vec::new(),
    };
    let config = build(file, parsed, &mut errors);
    if errors.found.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(errors.found))
    }
}

/// The parser's message, without what the error line already says (the word "error" and
/// the location) and with the nearest valid name for an unknown field.
fn first_line(message: &str) -> String {
    let mut text = message.lines().next().unwrap_or_default().trim();
    text = text.strip_prefix("error:").unwrap_or(text).trim();
    if let Some(rest) = text.strip_prefix("line ")
        && let Some((_, after)) = rest.split_once(": ")
    {
        text = after;
    }
    let mut text = text.to_string();
    if let Some(hint) = unknown_field_hint(&text) {
        text.push_str(&hint);
    }
    text
}

/// For serde's "unknown field `x`, expected one of a, b, c": "; did you mean `b`?".
fn unknown_field_hint(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let expected = rest
        .split_once("expected one of ")
        .map(|(_, list)| list)
        .or_else(|| rest.split_once("expected ").map(|(_, one)| one))?;
    let candidates: Vec<&str> = expected
        .split(',')
        .map(|c| c.trim().trim_matches('`'))
        .filter(|c| !c.is_empty())
        .collect();
    nearest(field, &candidates).map(|near| format!("; did you mean `{near}`?"))
}

/// The problems found so far.
pub(super) struct Errors {
    file: PathBuf,
    found: Vec<ConfigError>,
}

impl Errors {
    pub(super) fn at<T>(&mut self, spanned: &Spanned<T>, path: String, message: String) {
        self.found.push(ConfigError {
            file: self.file.clone(),
            line: spanned.referenced.line(),
            column: spanned.referenced.column(),
            path,
            message,
        });
    }

    pub(super) fn nowhere(&mut self, path: String, message: String) {
        self.found.push(ConfigError {
            file: self.file.clone(),
            line: 0,
            column: 0,
            path,
            message,
        });
    }
}

fn build(file: &Path, parsed: ConfigFile, errors: &mut Errors) -> Config {
    let base = file.parent().unwrap_or(Path::new("."));
    let relative = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    let mut handlers = Vec::new();
    let mut capability_files = Vec::new();
    for (name, h) in parsed.handlers {
        if !is_valid_name(&name) {
            errors.nowhere(
                format!("handlers.{name}"),
                format!("invalid handler name {name:?}: use lower case letters, digits and '-'"),
            );
        }
        let plugin = match &h.plugin {
            Some(p) if !is_valid_name(&p.value) => {
                errors.at(
                    p,
                    format!("handlers.{name}.plugin"),
                    format!(
                        "invalid plugin name {:?}: name the file NAME.wasm in the plugins folder by NAME (lower case letters, digits and '-')",
                        p.value
                    ),
                );
                p.value.clone()
            }
            Some(p) => p.value.clone(),
            None => name.clone(),
        };
        let concurrency = match &h.concurrency {
            Some(c) if c.value == 0 => {
                errors.at(
                    c,
                    format!("handlers.{name}.concurrency"),
                    "concurrency must be at least 1".into(),
                );
                1
            }
            Some(c) => c.value,
            None => 2,
        };
        let backoff_base = h.backoff_base.map_or(Duration::from_millis(100), |d| d.0);
        let backoff_cap = h.backoff_cap.map_or(Duration::from_secs(30), |d| d.0);
        if backoff_cap < backoff_base {
            errors.nowhere(
                format!("handlers.{name}.backoff_cap"),
                "backoff_cap must not be shorter than backoff_base".into(),
            );
        }
        let qps = match &h.qps {
            Some(q) if !(q.value.is_finite() && q.value >= 0.0) => {
                errors.at(
                    q,
                    format!("handlers.{name}.qps"),
                    "qps must be a non-negative number (0 turns the retry bucket off)".into(),
                );
                None
            }
            Some(q) if q.value == 0.0 => None,
            Some(q) => Some(q.value),
            None => Some(10.0),
        };
        let capabilities = super::capabilities::build(&name, h.capabilities.as_ref(), errors);
        capability_files.push(h.capabilities);
        handlers.push(HandlerSpec {
            capabilities,
            resync: h.resync.map(|d| d.0).filter(|d| !d.is_zero()),
            qps,
            burst: h.burst.unwrap_or(100).max(1),
            plugin,
            concurrency,
            timeout: h.timeout.map_or(Duration::from_secs(5), |d| d.0),
            memory: h.memory.map_or(64 << 20, |m| m.0),
            max_retries: h.max_retries.unwrap_or(5),
            backoff_base,
            backoff_cap,
            config: h.config.unwrap_or(serde_json::Value::Null),
            name,
        });
    }
    let known: Vec<&str> = handlers.iter().map(|h| h.name.as_str()).collect();
    let mut route_names = HashSet::new();
    let mut routes = Vec::new();
    for (i, r) in parsed.routes.into_iter().enumerate() {
        if let Some(route) = build_route(i, r, &known, &mut route_names, errors) {
            routes.push(route);
        }
    }
    for (handler, file) in handlers.iter().zip(&capability_files) {
        super::capabilities::check_resources(handler, file, &routes, errors);
    }
    if routes.is_empty() && errors.found.is_empty() {
        errors.nowhere(
            "routes".into(),
            "no routes: add at least one route from a resource to a handler".into(),
        );
    }
    let admin_token = match (parsed.admin.token_file, parsed.admin.token_env) {
        (Some(_), Some(_)) => {
            errors.nowhere(
                "admin".into(),
                "set token_file or token_env, not both".into(),
            );
            None
        }
        (Some(path), None) => Some(super::TokenSource::File(relative(path))),
        (None, Some(var)) => Some(super::TokenSource::Env(var)),
        (None, None) => None,
    };
    Config {
        source: file.to_path_buf(),
        admin_token,
        kubeconfig: parsed.kubeconfig.map(relative),
        plugins_dir: relative(
            parsed
                .plugins_dir
                .unwrap_or_else(|| PathBuf::from("plugins")),
        ),
        admin_listen: parsed.admin.listen.unwrap_or(DEFAULT_ADMIN_LISTEN),
        handlers,
        routes,
    }
}

fn build_route(
    i: usize,
    r: RouteFile,
    known_handlers: &[&str],
    names: &mut HashSet<String>,
    errors: &mut Errors,
) -> Option<RouteSpec> {
    let at = |field: &str| format!("routes[{i}].{field}");
    let before = errors.found.len();
    if r.name.value.is_empty() {
        errors.at(&r.name, at("name"), "a route needs a name".into());
    } else if !names.insert(r.name.value.clone()) {
        errors.at(
            &r.name,
            at("name"),
            format!("duplicate route name {:?}", r.name.value),
        );
    }
    let resource = ResourceName::parse(&r.resource.value)
        .map_err(|e| errors.at(&r.resource, at("resource"), e))
        .ok();
    if !known_handlers.contains(&r.handler.value.as_str()) {
        let message = match nearest(&r.handler.value, known_handlers) {
            Some(near) => format!(
                "unknown handler {:?}; did you mean {near:?}?",
                r.handler.value
            ),
            None if known_handlers.is_empty() => format!(
                "unknown handler {:?}: no handlers are defined under `handlers:`",
                r.handler.value
            ),
            None => format!(
                "unknown handler {:?}; defined handlers: {}",
                r.handler.value,
                known_handlers.join(", ")
            ),
        };
        errors.at(&r.handler, at("handler"), message);
    }
    for (field, selector) in [("labels", &r.labels), ("fields", &r.fields)] {
        if let Some(s) = selector
            && let Err(e) = crate::selector::Selector::parse(&s.value)
        {
            errors.at(s, at(field), e);
        }
    }
    let delivery = match (r.delivery, &r.backlog) {
        (Some(DeliveryFile::Every), backlog) => {
            let backlog = match backlog {
                Some(b) if b.value == 0 => {
                    errors.at(b, at("backlog"), "backlog must be at least 1".into());
                    1
                }
                Some(b) => b.value,
                None => DEFAULT_BACKLOG,
            };
            Delivery::Every { backlog }
        }
        (_, Some(b)) => {
            errors.at(
                b,
                at("backlog"),
                "backlog applies only to `delivery: every`".into(),
            );
            Delivery::Latest
        }
        (_, None) => Delivery::Latest,
    };
    let mut drop_fields = Vec::new();
    for (j, pointer) in r.drop_fields.iter().flatten().enumerate() {
        match crate::informer::transform::validate_pointer(&pointer.value) {
            Ok(()) => drop_fields.push(pointer.value.clone()),
            Err(e) => errors.at(pointer, at(&format!("drop_fields[{j}]")), e),
        }
    }
    let mut indexes = Vec::new();
    for (name, path) in r.indexes.iter().flatten() {
        if name == crate::informer::store::NAMESPACE_INDEX || path.trim().is_empty() {
            errors.nowhere(
                at(&format!("indexes.{name}")),
                format!("index {name:?} needs a field path such as spec.nodeName or label:KEY, and `namespace` is built in"),
            );
        } else {
            indexes.push((name.clone(), path.clone()));
        }
    }
    let events = match &r.events {
        None => EventFilter::default(),
        Some(kinds) => EventFilter {
            added: kinds.contains(&EventKindFile::Added),
            updated: kinds.contains(&EventKindFile::Updated),
            deleted: kinds.contains(&EventKindFile::Deleted),
        },
    };
    if errors.found.len() > before {
        return None;
    }
    Some(RouteSpec {
        name: r.name.value,
        resource: resource?,
        namespace: r.namespace,
        label_selector: r.labels.map(|s| s.value),
        field_selector: r.fields.map(|s| s.value),
        indexes,
        keep_managed_fields: r.keep_managed_fields.unwrap_or(false),
        drop_fields,
        events,
        delivery,
        handler: r.handler.value,
    })
}

fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
pub(crate) fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(row[j + 1])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
handlers:
  log-events:
    concurrency: 3
    timeout: 2s
routes:
  - name: cms
    resource: configmaps
    namespace: default
    events: [added, deleted]
    handler: log-events
";

    #[test]
    fn a_valid_config_gets_its_defaults() {
        let config = validate(Path::new("/etc/sy/c.yaml"), GOOD).unwrap();
        assert_eq!(config.plugins_dir, PathBuf::from("/etc/sy/plugins"));
        assert_eq!(config.admin_listen, DEFAULT_ADMIN_LISTEN);
        let h = &config.handlers[0];
        assert_eq!(
            (h.plugin.as_str(), h.concurrency, h.max_retries),
            ("log-events", 3, 5)
        );
        assert_eq!(h.timeout, Duration::from_secs(2));
        let r = &config.routes[0];
        assert!(r.events.added && !r.events.updated && r.events.deleted);
    }

    #[test]
    fn every_mistake_is_reported_with_its_line_column_and_path() {
        let text = "\
handlers:
  log-events: {}
routes:
  - name: a
    resource: configmaps
    handler: log-event
  - name: a
    resource: Apps/V1
    handler: nope
";
        let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
        let found: Vec<(u64, u64, &str)> = errors
            .iter()
            .map(|e| (e.line, e.column, e.path.as_str()))
            .collect();
        assert_eq!(
            found,
            vec![
                (6, 14, "routes[0].handler"),
                (7, 11, "routes[1].name"),
                (8, 15, "routes[1].resource"),
                (9, 14, "routes[1].handler"),
            ]
        );
        assert!(errors[0].message.contains("did you mean \"log-events\""));
        assert!(
            errors[0]
                .to_string()
                .starts_with("c.yaml:6:14: routes[0].handler: ")
        );
    }

    #[test]
    fn a_yaml_error_names_its_line() {
        let text = "handlers:\n  a: {}\nroutes:\n  - name: x\n    bogus: 1\n";
        let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].line, 5, "{}", errors[0]);
        assert!(errors[0].message.contains("bogus"), "{}", errors[0]);
    }

    #[test]
    fn informer_and_delivery_settings_are_checked() {
        let text = "\
handlers:
  h:
    resync: 1m
routes:
  - name: a
    resource: configmaps
    handler: h
    backlog: 5
  - name: b
    resource: configmaps
    handler: h
    delivery: every
    drop_fields: [metadata/annotations/x]
    indexes:
      by-node: spec.nodeName
";
        let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
        let found: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.path.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, "routes[0].backlog");
        assert!(found[0].1.contains("only to `delivery: every`"));
        assert_eq!(found[1].0, "routes[1].drop_fields[0]");
        assert!(found[1].1.contains("must start with '/'"));
        let good = text
            .replace("    backlog: 5\n", "")
            .replace("[metadata/", "[/metadata/");
        let config = validate(Path::new("c.yaml"), &good).unwrap();
        assert_eq!(config.handlers[0].resync, Some(Duration::from_secs(60)));
        assert_eq!(
            config.routes[1].delivery,
            Delivery::Every {
                backlog: DEFAULT_BACKLOG
            }
        );
        assert_eq!(
            config.routes[1].indexes,
            vec![("by-node".to_string(), "spec.nodeName".to_string())]
        );
    }

    #[test]
    fn an_unknown_field_gets_the_nearest_valid_name() {
        let text =
            "handlers:\n  a: {}\nroutes:\n  - name: x\n    resource: configmaps\n    handlr: a\n";
        let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
        assert_eq!((errors[0].line, errors[0].column), (6, 5));
        assert!(
            errors[0].message.starts_with("unknown field `handlr`")
                && errors[0].message.ends_with("did you mean `handler`?"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn nearest_suggests_only_close_names() {
        assert_eq!(
            nearest("log-event", &["log-events", "x"]),
            Some("log-events")
        );
        assert_eq!(nearest("zzzzzz", &["log-events"]), None);
    }
}
