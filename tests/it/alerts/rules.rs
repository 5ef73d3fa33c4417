//! The alert rules as Prometheus reads them: `promtool check rules` accepts the file,
//! `promtool test rules` passes its unit tests, and every alert carries a severity, a
//! summary, a description and a `runbook_url` naming a section of docs/operations.md, and
//! has a test that sees it fire and one that sees it quiet.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

use crate::support::{self, prometheus::promtool};

/// The rule file, in deploy/alerts.
const RULES: &str = "switchyard.rules.yaml";
/// Its unit tests, beside it.
const TESTS: &str = "switchyard.rules.test.yaml";

fn alerts_dir() -> PathBuf {
    support::root().join("deploy/alerts")
}

fn yaml(file: &str) -> Value {
    let path = alerts_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{file} is not YAML: {e}"))
}

/// Every alerting rule of the rule file.
fn alerts() -> Vec<Value> {
    let rules = yaml(RULES);
    let groups = rules["groups"].as_array().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

#[test]
fn promtool_checks_the_rules_and_passes_a_test_of_each_alert() {
    let (ok, out) = promtool(&alerts_dir(), &["check", "rules", RULES]);
    assert!(ok, "promtool check rules {RULES}:\n{out}");
    let (ok, out) = promtool(&alerts_dir(), &["test", "rules", TESTS]);
    assert!(ok, "promtool test rules {TESTS}:\n{out}");
}

#[test]
fn every_alert_has_a_severity_a_summary_a_description_and_a_runbook_section() {
    let operations = std::fs::read_to_string(support::root().join("docs/operations.md"))
        .expect("docs/operations.md");
    let sections = crate::docs::anchors(&operations);
    let alerts = alerts();
    assert!(alerts.len() >= 15, "{alerts:#?}");
    for alert in &alerts {
        let name = alert["alert"].as_str().expect("a name");
        let severity = alert["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for key in ["summary", "description"] {
            let text = alert["annotations"][key].as_str().unwrap_or_default();
            assert!(!text.trim().is_empty(), "{name}: no {key}");
        }
        let runbook = alert["annotations"]["runbook_url"].as_str().unwrap_or("");
        let anchor = runbook
            .strip_prefix("docs/operations.md#")
            .unwrap_or_else(|| {
                panic!("{name}: runbook_url {runbook:?} is not in docs/operations.md")
            });
        assert_eq!(anchor, name.to_lowercase(), "{name}: runbook_url");
        assert!(
            sections.contains(anchor),
            "{name}: docs/operations.md has no section #{anchor}"
        );
    }
}

#[test]
fn every_alert_has_a_test_that_sees_it_fire_and_one_that_sees_it_quiet() {
    let tests = yaml(TESTS);
    let (mut fired, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for test in tests["tests"].as_array().expect("tests") {
        for case in test["alert_rule_test"].as_array().into_iter().flatten() {
            let name = case["alertname"]
                .as_str()
                .expect("an alertname")
                .to_string();
            match case["exp_alerts"].as_array() {
                Some(expected) if !expected.is_empty() => fired.insert(name),
                _ => quiet.insert(name),
            };
        }
    }
    for alert in alerts() {
        let name = alert["alert"].as_str().expect("a name");
        assert!(fired.contains(name), "no test of {TESTS} sees {name} fire");
        assert!(quiet.contains(name), "no test of {TESTS} sees {name} quiet");
    }
}
