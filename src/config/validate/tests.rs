//! Validation of whole configs: every section at once, defaults, and the places reported.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::routes::DEFAULT_BACKLOG;
use super::validate;
use crate::config::{DEFAULT_ADMIN_LISTEN, Delivery, RouteSource, Test};

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
    // The unknown field, and the handler the route lacks: both, each at its line.
    let found: Vec<(u64, &str)> = errors.iter().map(|e| (e.line, e.path.as_str())).collect();
    assert_eq!(
        found,
        [(4, "routes[0]"), (5, "routes[0].bogus")],
        "{errors:?}"
    );
    assert!(
        errors[0].message.contains("missing field `handler`"),
        "{}",
        errors[0]
    );
    assert!(errors[1].message.contains("bogus"), "{}", errors[1]);
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
    let own = config
        .informers
        .iter()
        .find(|i| i.name == "route:b")
        .unwrap();
    assert_eq!(
        own.indexes,
        vec![("by-node".to_string(), vec!["spec.nodeName".to_string()])]
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
fn mistakes_of_every_kind_in_every_section_are_reported_together() {
    let text = "\
informers:
  pods:
    resource: v1/pods
    indexes:
      node: spec.nodeName
  deploys:
    group: apps
    version: v1
    kind: Deployment
    namespaces: [web]
handlers:
  h:
    concurrency: lots
  g:
    timeout: 5x
routes:
  - name: a
    informer: pod
    handler: h
  - name: b
    kinds: [Deployment, Service]
    handler: g
    when:
      - path: spec
        changed: true
        exists: true
  - name: c
    resource: configmaps
    handler: g
    delivery: sometimes
";
    let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
    let found: Vec<(u64, u64, &str)> = errors
        .iter()
        .map(|e| (e.line, e.column, e.path.as_str()))
        .collect();
    let all = errors
        .iter()
        .map(|e| e.to_string() + "\n")
        .collect::<String>();
    assert_eq!(
        found,
        vec![
            (13, 18, "handlers.h.concurrency"),
            (15, 14, "handlers.g.timeout"),
            (18, 15, "routes[0].informer"),
            (21, 25, "routes[1].kinds[1]"),
            (24, 9, "routes[1].when[0]"),
            (30, 15, "routes[2].delivery"),
        ],
        "{all}"
    );
    assert!(errors[2].message.contains("did you mean \"pods\""), "{all}");
    assert!(
        errors[3]
            .message
            .contains("no informer watches kind \"Service\""),
        "{all}"
    );
}

#[test]
fn informers_routes_and_conditions_are_read_into_the_config() {
    let text = "\
informers:
  pods:
    resource: v1/pods
    namespaces: [a, b]
    labels: app=web
    transform:
      drop_fields: [/metadata/annotations]
    indexes:
      node: spec.nodeName
handlers:
  h: {}
routes:
  - name: spec-changes
    kinds: [Pod]
    namespaces: [a]
    events: [updated]
    when:
      - path: .spec
        changed: true
      - path: /metadata/labels/tier
        equals: db
    handler: h
";
    let config = validate(Path::new("c.yaml"), text).unwrap();
    let pods = &config.informers[0];
    assert_eq!(pods.namespaces, ["a", "b"]);
    assert_eq!(pods.drop_fields, ["/metadata/annotations"]);
    let route = &config.routes[0];
    assert_eq!(route.source, RouteSource::Kinds(vec!["Pod".into()]));
    assert_eq!(route.filter.namespaces, ["a"]);
    assert_eq!(route.filter.when.len(), 2);
    assert_eq!(route.filter.when[1].test, Test::Equals("db".into()));
    assert!(!route.events.added && route.events.updated);
}

#[test]
fn every_wrong_item_of_a_list_is_reported_at_its_own_index() {
    let text = "\
handlers:
  h: {}
routes:
  - name: a
    resource: configmaps
    events: [bogus, added, nope]
    when:
      - path: [1]
        exists: true
      - path: spec
        equal: 1
    handler: h
";
    let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
    let found: Vec<(u64, u64, &str)> = errors
        .iter()
        .map(|e| (e.line, e.column, e.path.as_str()))
        .collect();
    let all = errors
        .iter()
        .map(|e| e.to_string() + "\n")
        .collect::<String>();
    assert_eq!(
        found,
        vec![
            (6, 14, "routes[0].events[0]"),
            (6, 28, "routes[0].events[2]"),
            (8, 16, "routes[0].when[0].path[0]"),
            (11, 9, "routes[0].when[1].equal"),
        ],
        "{all}"
    );
    assert!(!all.contains("missing field"), "{all}");
    assert!(
        errors[3].message.contains("did you mean `equals`?"),
        "{all}"
    );
}

#[test]
fn a_file_larger_than_a_config_can_be_is_refused_before_it_is_parsed() {
    let padding = "# padding\n".repeat(crate::config::limits::MAX_CONFIG_BYTES / 10 + 1);
    let text = format!("{GOOD}{padding}");
    let errors = validate(Path::new("c.yaml"), &text).unwrap_err().0;
    assert_eq!(errors.len(), 1);
    assert_eq!(
        errors[0].to_string(),
        "c.yaml: the config file is larger than 1024 KiB; a config needs a few KiB"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.yaml");
    std::fs::write(&path, &text).unwrap();
    let loaded = crate::config::load(&path).unwrap_err().0;
    assert!(
        loaded[0].message.contains("larger than 1024 KiB"),
        "{loaded:?}"
    );
}

#[tokio::test]
async fn load_runs_on_a_blocking_thread_and_reports_like_validate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, GOOD.replace("timeout: 2s", "timeout: 0s")).unwrap();
    let errors = tokio::task::spawn_blocking(move || crate::config::load(&path))
        .await
        .unwrap()
        .unwrap_err()
        .0;
    assert_eq!(
        (errors[0].line, errors[0].path.as_str()),
        (4, "handlers.log-events.timeout")
    );
}

/// Every error of `text`, as `line:column: path: message`.
fn all_errors(text: &str) -> Vec<String> {
    validate(Path::new("c.yaml"), text)
        .unwrap_err()
        .0
        .iter()
        .map(|e| format!("{}:{}: {}: {}", e.line, e.column, e.path, e.message))
        .collect()
}

#[test]
fn a_wrong_value_in_an_item_does_not_hide_the_names_it_gets_wrong() {
    let text = "\
informers:
  cms: {resource: configmaps, namespaces: default}
handlers:
  h: {concurrency: lots}
routes:
  - {name: a, informer: cmz, handler: g, delivery: 7}
";
    let found = all_errors(text);
    let expected = [
        "2:43: informers.cms.namespaces: invalid type",
        "4:20: handlers.h.concurrency: invalid type: string \"lots\", expected a whole number, 0 or more",
        "6:25: routes[0].informer: unknown informer \"cmz\"; did you mean \"cms\"?",
        "6:39: routes[0].handler: unknown handler \"g\"; did you mean \"h\"?",
        "6:52: routes[0].delivery: invalid type",
    ];
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    for (found, expected) in found.iter().zip(expected) {
        assert!(found.starts_with(expected), "{found} is not {expected}");
    }
}

#[test]
fn a_value_left_out_is_not_also_reported_missing_nor_moves_later_places() {
    let text = "\
handlers:
  h: {}
routes:
  - {name: a, resource: 5, handler: h}
  - {name: b, resourse: configmaps, handler: h}
  - {name: c, kinds: [1], handler: h}
  - name: d
    resource: configmaps
    namespaces: [1, Bad]
    delivery: 7
    backlog: 3
    handler: h
";
    let found = all_errors(text);
    let expected = [
        "4:25: routes[0].resource: invalid type",
        "5:15: routes[1].resourse: unknown field `resourse`",
        "6:23: routes[2].kinds[0]: invalid type",
        "9:18: routes[3].namespaces[0]: invalid type",
        "9:21: routes[3].namespaces[1]: invalid namespace \"Bad\"",
        "10:15: routes[3].delivery: invalid type",
    ];
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    for (found, expected) in found.iter().zip(expected) {
        assert!(found.starts_with(expected), "{found} is not {expected}");
    }
}

#[test]
fn a_misspelt_built_in_resource_is_an_error_and_an_unserved_version_a_warning() {
    let text = "\
informers:
  deps: {group: apps, version: v1, kind: deployment}
  old: {resource: apps/v1beta1/deployments}
handlers:
  h: {}
routes:
  - {name: a, resource: configmap, handler: h}
  - {name: b, resource: example.com/v1/configmap, handler: h}
";
    let found = all_errors(text);
    assert_eq!(
        found,
        [
            "2:42: informers.deps.kind: apps/v1 has no kind \"deployment\"; did you mean \"Deployment\"?",
            "7:25: routes[0].resource: v1 has no resource \"configmap\"; did you mean \"configmaps\"?",
        ]
    );
    let validated = super::validate_all(Path::new("c.yaml"), text);
    let warnings: Vec<String> = validated
        .warnings
        .iter()
        .map(|e| format!("{}:{}: {}", e.line, e.column, e.message))
        .collect();
    assert_eq!(
        warnings,
        ["3:19: Kubernetes serves no apps/v1beta1; apps has: v1"]
    );
}

#[test]
fn capabilities_and_kinds_name_a_resource_exactly_as_the_daemon_matches_it() {
    let text = "\
informers:
  cms: {resource: configmaps}
  widgets: {resource: example.com/v1/widgets}
handlers:
  h:
    capabilities:
      configmaps: [patch]
      v1/configmaps: [patch]
      ConfigMap: [patch]
      Widget: [patch]
      configmap: [patch]
      Configmap: [patch]
routes:
  - {name: a, kinds: [ConfigMap, Widget, configmap], handler: h}
";
    let found = all_errors(text);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found[0].starts_with("11:7: handlers.h.capabilities.configmap: handler \"h\" neither watches nor reads \"configmap\", so it grants nothing; did you mean \"configmaps\"?"),
        "{found:#?}"
    );
    assert!(
        found[1].ends_with("so it grants nothing; did you mean \"ConfigMap\"?"),
        "{found:#?}"
    );
    assert_eq!(
        found[2],
        "14:42: routes[0].kinds[2]: no informer watches kind \"configmap\"; did you mean \"ConfigMap\"?"
    );
}

#[test]
fn a_malformed_value_from_is_placed_and_a_good_one_read() {
    let text = "\
handlers:
  h:
    config:
      url: {valueFrom: {secretKeyRef: {name: hook, key: url}}}
      token: {valueFrom: {secretKeyRef: {name: Hook, key: token}}}
routes:
  - {name: r, resource: configmaps, handler: h}
";
    let errors = all_errors(text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0]
            .starts_with("5:26: handlers.h.config.token.valueFrom: secretKeyRef name \"Hook\""),
        "{errors:?}"
    );
    let good = text.replace("name: Hook", "name: hook");
    let config = validate(Path::new("c.yaml"), &good).unwrap();
    let refs = &config.handlers[0].value_refs;
    assert_eq!(refs.len(), 2);
    assert_eq!(refs[1].path, "url");
}

#[test]
fn a_route_finalizer_is_named_after_the_route_or_as_given_and_checked() {
    let text = "\
handlers:
  h: {}
routes:
  - {name: a, resource: configmaps, handler: h, finalizer: true}
  - {name: b, resource: configmaps, handler: h, finalizer: example.com/cleanup}
  - {name: c, resource: configmaps, handler: h, finalizer: false}
";
    let config = validate(Path::new("c.yaml"), text).expect("a valid config");
    let finalizers: Vec<_> = config.routes.iter().map(|r| r.finalizer.clone()).collect();
    assert_eq!(
        finalizers,
        [
            Some("switchyard.dev/a".to_string()),
            Some("example.com/cleanup".to_string()),
            None
        ]
    );
}

#[test]
fn a_route_finalizer_that_cannot_work_is_refused_with_its_place() {
    let text = "\
handlers:
  h: {}
routes:
  - {name: a, resource: configmaps, handler: h, finalizer: cleanup}
  - {name: b, resource: configmaps, handler: h, finalizer: Example.com/x}
  - {name: c, resource: configmaps, handler: h, finalizer: true, events: [added]}
  - {name: d, resource: configmaps, handler: h, finalizer: true, drop_fields: [/metadata/finalizers]}
  - {name: -e-, resource: configmaps, handler: h, finalizer: true}
  - {name: f, resource: configmaps, handler: h, finalizer: 3}
";
    let found = all_errors(text);
    assert_eq!(found.len(), 6, "{found:#?}");
    assert!(
        found[5].contains("routes[5].finalizer: invalid type: integer `3`, expected true, false or a finalizer name such as example.com/cleanup"),
        "{found:#?}"
    );
    assert!(
        found[0].starts_with("4:60: routes[0].finalizer: invalid finalizer name \"cleanup\": a finalizer needs a domain prefix"),
        "{found:#?}"
    );
    assert!(
        found[1].contains("routes[1].finalizer: invalid finalizer name \"Example.com/x\": the prefix \"Example.com\" must be a DNS subdomain"),
        "{found:#?}"
    );
    assert!(
        found[2].contains(
            "routes[2].finalizer: a route with a finalizer must deliver `deleted` events"
        ),
        "{found:#?}"
    );
    assert!(
        found[3].contains("routes[3].drop_fields: \"/metadata/finalizers\" cannot be dropped"),
        "{found:#?}"
    );
    assert!(
        found[4]
            .contains("routes[4].finalizer: the route name \"-e-\" cannot end a finalizer name"),
        "{found:#?}"
    );
}

#[test]
fn a_finalizer_route_reading_an_informer_that_drops_its_finalizers_is_refused() {
    let text = "\
informers:
  cms:
    resource: configmaps
    transform: {drop_fields: [/metadata/finalizers]}
  pods:
    resource: pods
    transform: {drop_fields: [/metadata/deletionTimestamp]}
  secrets:
    resource: secrets
    transform: {drop_fields: [/metadata/annotations]}
handlers:
  h: {}
routes:
  - {name: a, informer: cms, handler: h, finalizer: true}
  - {name: b, kinds: [Pod, Secret], handler: h, finalizer: true}
  - {name: c, informer: secrets, handler: h, finalizer: true}
  - {name: d, informer: cms, handler: h}
";
    let found = all_errors(text);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].contains("routes[0].finalizer: informers.cms.transform.drop_fields drops \"/metadata/finalizers\" from the cache this route reads"),
        "{found:#?}"
    );
    assert!(
        found[1].contains("routes[1].finalizer: informers.pods.transform.drop_fields drops \"/metadata/deletionTimestamp\""),
        "{found:#?}"
    );
}

#[test]
fn an_index_takes_one_source_or_a_list_and_a_malformed_path_is_located() {
    let text = "\
informers:
  deployments:
    resource: apps/v1/deployments
    indexes:
      by-node: spec.nodeName
      by-configmap:
        - spec.template.spec.volumes[].configMap.name
        - spec.template.spec.containers[].envFrom[].configMapRef.name
handlers:
  h: {}
routes:
  - {name: r, informer: deployments, handler: h}
";
    let config = validate(Path::new("c.yaml"), text).unwrap();
    assert_eq!(
        config.informers[0].indexes,
        vec![
            (
                "by-configmap".to_string(),
                vec![
                    "spec.template.spec.volumes[].configMap.name".to_string(),
                    "spec.template.spec.containers[].envFrom[].configMapRef.name".to_string()
                ]
            ),
            ("by-node".to_string(), vec!["spec.nodeName".to_string()]),
        ]
    );
    let bad = text
        .replace("volumes[].configMap", "volumes[0].configMap")
        .replace("by-node: spec.nodeName", "by-node: 'label:'");
    let errors = all_errors(&bad);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[1].contains("7:11: informers.deployments.indexes.by-configmap[0]")
            && errors[1].contains("segment \"volumes[0]\""),
        "{errors:?}"
    );
    assert!(
        errors[0].contains("informers.deployments.indexes.by-node")
            && errors[0].contains("label:app"),
        "{errors:?}"
    );
}

#[test]
fn a_handler_reads_informers_by_name_and_may_be_granted_writes_on_them() {
    let text = "\
informers:
  deployments:
    resource: apps/v1/deployments
handlers:
  h:
    reads: [deployments]
    capabilities:
      deployments: [patch]
routes:
  - {name: r, resource: configmaps, handler: h}
";
    let config = validate(Path::new("c.yaml"), text).unwrap();
    assert_eq!(config.handlers[0].reads, ["deployments"]);
    // The grant may be meant for the misspelt informer: only the name is reported.
    let errors = all_errors(&text.replace("reads: [deployments]", "reads: [deploymnets]"));
    assert_eq!(
        errors,
        [
            "6:13: handlers.h.reads[0]: \"deploymnets\" is not an informer under `informers:`; did you mean \"deployments\"?"
        ]
    );
    let errors =
        all_errors(&text.replace("reads: [deployments]", "reads: [deployments, deployments]"));
    assert_eq!(
        errors,
        ["6:26: handlers.h.reads[1]: \"deployments\" is read already"]
    );
    // Without the read, the grant names nothing the handler has.
    let errors = all_errors(&text.replace("    reads: [deployments]\n", ""));
    assert!(
        errors[0].contains("handlers.h.capabilities.deployments: handler \"h\" neither watches nor reads \"deployments\""),
        "{errors:?}"
    );
}

#[test]
fn initial_and_timestamp_conditions_are_read_and_their_mistakes_located() {
    let text = "\
handlers:
  h: {}
routes:
  - name: events
    resource: v1/events
    initial: skip
    when:
      - path: [lastTimestamp, eventTime]
        newer_than: 1h
      - path: metadata.creationTimestamp
        older_than: 90s
    handler: h
";
    let config = validate(Path::new("c.yaml"), text).unwrap();
    let route = &config.routes[0];
    assert_eq!(route.initial, crate::config::Initial::Skip);
    assert_eq!(route.filter.when[0].paths.len(), 2);
    assert_eq!(
        route.filter.when[0].test,
        Test::NewerThan(Duration::from_secs(3600))
    );
    assert_eq!(
        route.filter.when[1].test,
        Test::OlderThan(Duration::from_secs(90))
    );
    assert_eq!(
        validate(Path::new("c.yaml"), GOOD).unwrap().routes[0].initial,
        crate::config::Initial::Deliver
    );
    let wrong = "\
handlers:
  h: {}
routes:
  - name: events
    resource: v1/events
    initial: sometimes
    when:
      - path: [lastTimestamp, a..b]
        newer_than: 1h
      - path: lastTimestamp
        newer_than: an hour
      - path: lastTimestamp
        newer_than: 1h
        exists: true
      - path: []
        newer_than: 1h
    handler: h
";
    let errors = all_errors(wrong);
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert!(
        errors[0].starts_with(
            "6:14: routes[0].initial: unknown variant `sometimes`, expected `deliver` or `skip`"
        ),
        "{errors:#?}"
    );
    assert!(
        errors[1].starts_with("8:31: routes[0].when[0].path[1]: invalid field path \"a..b\""),
        "{errors:#?}"
    );
    assert!(
        errors[2].starts_with("11:21: routes[0].when[1].newer_than: invalid duration \"an hour\""),
        "{errors:#?}"
    );
    assert!(
        errors[3]
            .starts_with("12:9: routes[0].when[2]: a condition has a `path` and exactly one of"),
        "{errors:#?}"
    );
    assert!(
        errors[4].starts_with("15:15: routes[0].when[3].path: an empty list"),
        "{errors:#?}"
    );
}

#[test]
fn a_builtin_plugin_is_named_by_builtin_name_and_an_unknown_one_located() {
    let text = "\
handlers:
  hook:
    plugin: builtin:webhook
  typo:
    plugin: builtin:webhok
routes:
  - name: cms
    resource: configmaps
    handler: hook
";
    let errors = all_errors(text);
    assert_eq!(
        errors,
        [
            "5:13: handlers.typo.plugin: there is no built-in plugin \"builtin:webhok\"; the binary carries builtin:webhook, builtin:slack, builtin:cloudevents, builtin:alertmanager, builtin:rabbitmq, builtin:otlp, builtin:pagerduty, builtin:opsgenie, builtin:teams, builtin:discord, builtin:aws, builtin:loki, builtin:elasticsearch"
        ]
    );
}

#[test]
fn tracing_is_off_by_default_and_its_endpoint_gets_the_traces_path() {
    let config = validate(Path::new("c.yaml"), GOOD).unwrap();
    assert_eq!(config.tracing, None);
    let text = format!(
        "tracing:\n  otlp_endpoint: http://collector:4318\n  headers: {{x-api-key: k}}\n{GOOD}"
    );
    let tracing = validate(Path::new("c.yaml"), &text)
        .unwrap()
        .tracing
        .unwrap();
    assert_eq!(tracing.endpoint.as_str(), "http://collector:4318/v1/traces");
    assert_eq!(
        (tracing.sample_ratio, tracing.service_name.as_str()),
        (1.0, "switchyard")
    );
    assert_eq!(
        tracing.headers,
        [("x-api-key".to_string(), "k".to_string())]
    );
    let text = format!("tracing:\n  otlp_endpoint: https://c.example/otlp/v1/traces\n{GOOD}");
    let tracing = validate(Path::new("c.yaml"), &text).unwrap().tracing;
    assert_eq!(
        tracing.unwrap().endpoint.as_str(),
        "https://c.example/otlp/v1/traces"
    );
}

#[test]
fn tracing_mistakes_are_located() {
    let text = format!(
        "tracing:\n  otlp_endpoint: grpc://collector:4317\n  sample_ratio: 1.5\n  service_name: ''\n  headers:\n    'bad name': v\n{GOOD}"
    );
    let errors = all_errors(&text);
    let places: Vec<&str> = errors
        .iter()
        .map(|e| e.split(": ").take(2).collect::<Vec<_>>()[1])
        .collect();
    assert_eq!(
        places,
        [
            "tracing.otlp_endpoint",
            "tracing.sample_ratio",
            "tracing.service_name",
            "tracing.headers.bad name",
        ],
        "{errors:#?}"
    );
    assert!(errors[0].starts_with("2:18: ") && errors[0].contains("http://HOST:PORT"));
    assert!(errors[1].starts_with("3:17: ") && errors[1].contains("from 0"));
    let errors = all_errors(&format!("tracing:\n  sample_ratio: 0.5\n{GOOD}"));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("tracing: tracing has settings but no otlp_endpoint"));
    let errors = all_errors(&format!(
        "tracing:\n  otlp_endpoint: http://c:4318\n  ratio: 1\n{GOOD}"
    ));
    assert!(
        errors[0].contains("tracing.ratio") && errors[0].contains("sample_ratio"),
        "{errors:?}"
    );
}

#[test]
fn batch_settings_get_their_defaults_and_each_bad_one_is_reported_at_its_place() {
    let text = "\
handlers:
  a:
    batch: {}
  b:
    batch:
      max_events: 0
      max_bytes: 0
      max_wait: 2m
  c:
    shadow: other
    batch: {}
routes:
  - name: r
    resource: configmaps
    handler: a
";
    let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
    // c: a shadow goes with batch: (the shadow is called with the same batches).
    let found: Vec<(u64, u64, &str, &str)> = errors
        .iter()
        .filter(|e| e.path != "handlers.c.shadow" || e.message.contains("batch"))
        .map(|e| (e.line, e.column, e.path.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                6,
                19,
                "handlers.b.batch.max_events",
                "batch.max_events must be 1 to 10000, not 0"
            ),
            (
                7,
                18,
                "handlers.b.batch.max_bytes",
                "batch.max_bytes must be more than 0"
            ),
            (
                8,
                17,
                "handlers.b.batch.max_wait",
                "batch.max_wait must be at most 1m: a worker holds its first event that long"
            ),
        ]
    );
    let config = validate(
        Path::new("c.yaml"),
        "handlers:\n  a:\n    batch: {}\nroutes:\n  - name: r\n    resource: configmaps\n    handler: a\n",
    )
    .unwrap();
    assert_eq!(
        config.handlers[0].batch,
        Some(crate::config::BatchSpec::default())
    );
    let config = validate(
        Path::new("c.yaml"),
        "handlers:\n  a: {}\nroutes:\n  - name: r\n    resource: configmaps\n    handler: a\n",
    )
    .unwrap();
    assert_eq!(config.handlers[0].batch, None);
}
