//! The chart's values.schema.json: `config:` is `switchyard schema`, so Helm refuses a config
//! `switchyard check` refuses, naming the field; more than one replica needs a mode that
//! shares the work.

use serde_json::{Value, json};

use super::helm::{chart, helm};
use crate::support::process::switchyard;

/// A config with one mistake, where Helm's message places it, and where `switchyard check`
/// does.
const MISTAKES: &[(&str, &str, &str)] = &[
    (
        "handlers:\n  h:\n    concurency: 2\nroutes:\n  - {name: r, resource: configmaps, handler: h}\n",
        "at '/config/handlers/h': additional properties 'concurency' not allowed",
        "handlers.h.concurency: unknown field `concurency`",
    ),
    (
        "handlers:\n  h: {timeout: 5}\nroutes:\n  - {name: r, resource: configmaps, handler: h}\n",
        "at '/config/handlers/h/timeout'",
        "handlers.h.timeout",
    ),
    (
        "handlers:\n  h: {concurrency: 0}\nroutes:\n  - {name: r, resource: configmaps, handler: h}\n",
        "at '/config/handlers/h/concurrency': minimum: got 0, want 1",
        "handlers.h.concurrency",
    ),
    (
        "handlers:\n  h: {}\nroutes:\n  - {name: r, resource: configmaps}\n",
        "at '/config/routes/0': missing property 'handler'",
        "handler",
    ),
    (
        "ha: {mode: leaders}\nhandlers:\n  h: {}\nroutes:\n  - {name: r, resource: configmaps, handler: h}\n",
        "at '/config/ha/mode'",
        "ha.mode",
    ),
    (
        "handlers:\n  h: {memory: 64 Mi}\nroutes:\n  - {name: r, resource: configmaps, handler: h}\n",
        "at '/config/handlers/h/memory'",
        "handlers.h.memory",
    ),
    (
        "informers:\n  pods: {resource: v1/pods, shard_by: node}\nhandlers:\n  h: {}\nroutes:\n  - {name: r, informer: pods, handler: h}\n",
        "at '/config/informers/pods/shard_by'",
        "informers.pods.shard_by",
    ),
    (
        "tracing:\n  otlp_endpoint: http://collector:4318\n  sample_ratio: 1.5\nhandlers:\n  h: {}\nroutes:\n  - {name: r, resource: configmaps, handler: h}\n",
        "at '/config/tracing/sample_ratio'",
        "tracing.sample_ratio",
    ),
];

/// Helm's verdict on the chart's defaults with `values` over them.
fn validate(values: Value) -> Result<(), String> {
    helm(json!({"action": "validate", "chart": chart(), "values": values}))
        .map(|_| ())
        .map_err(|(kind, message)| {
            assert_eq!(kind, "HelmValuesError", "{message}");
            message
        })
}

#[test]
fn the_charts_schema_of_config_is_what_switchyard_schema_prints() {
    let (code, out, err) = switchyard(&["schema"]);
    assert_eq!(code, 0, "{err}");
    let mut printed: Value = serde_json::from_str(&out).expect("switchyard schema prints JSON");
    printed.as_object_mut().unwrap().remove("$schema");
    let text = std::fs::read_to_string(chart().join("values.schema.json")).unwrap();
    let chart_schema: Value = serde_json::from_str(&text).unwrap();
    assert!(
        chart_schema["properties"]["config"] == printed,
        "deploy/chart/switchyard/values.schema.json is out of date: run scripts/chart-schema.sh"
    );
}

#[test]
fn a_config_switchyard_check_refuses_helm_refuses_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    for (yaml, helm_says, check_says) in MISTAKES {
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, yaml).unwrap();
        let (code, _, err) = switchyard(&["check", "--config", path.to_str().unwrap()]);
        assert_eq!(code, 2, "check accepted {yaml}: {err}");
        assert!(err.contains(check_says), "check on {yaml}: {err}");

        let config: Value = serde_saphyr::from_str(yaml).unwrap();
        let values = json!({"config": config});
        let message = validate(values).expect_err(yaml);
        assert!(message.contains(helm_says), "helm on {yaml}: {message}");
    }
}

#[test]
fn the_shipped_configs_pass_the_schema() {
    let root = crate::support::root();
    let mut configs = vec![root.join("config/demo.yaml")];
    for recipe in std::fs::read_dir(root.join("plugins/recipes")).unwrap() {
        let path = recipe.unwrap().path().join("switchyard.yaml");
        if path.exists() {
            configs.push(path);
        }
    }
    for path in configs {
        let config: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let result = validate(json!({"config": config}));
        assert!(result.is_ok(), "{}: {result:?}", path.display());
    }
}

#[test]
fn more_than_one_replica_needs_leader_or_sharded_mode() {
    let message = validate(json!({"replicas": 2})).unwrap_err();
    assert!(
        message.contains("at '/mode': value must be one of 'leader', 'sharded'"),
        "{message}"
    );
    for mode in ["leader", "sharded"] {
        assert_eq!(validate(json!({"replicas": 3, "mode": mode})), Ok(()));
    }
    let message = validate(json!({"mode": "sharding"})).unwrap_err();
    assert!(message.contains("at '/mode'"), "{message}");
    let message = validate(json!({"replicas": 0})).unwrap_err();
    assert!(message.contains("at '/replicas'"), "{message}");
}
