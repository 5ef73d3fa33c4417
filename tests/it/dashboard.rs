//! The Grafana dashboard in deploy/grafana names only metrics a running daemon exports: a
//! daemon on the simulator with churn is scraped on its probes listener, and every metric
//! each panel's PromQL names must be there.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use switchyard::sim::ChurnConfig;

use crate::support::{self, TestDaemon};

/// PromQL words that are not metric names.
const KEYWORDS: &[&str] = &["bool", "and", "or", "unless", "offset"];

/// Words followed by a list of label names.
const GROUPINGS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression reads: identifiers outside label matchers (`{}`),
/// ranges (`[]`), strings and `by (...)` lists that are not function calls or keywords.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let chars: Vec<char> = expr.chars().collect();
    let (mut i, mut depth_braces, mut depth_brackets) = (0, 0, 0);
    let mut grouping = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' => depth_braces += 1,
            '}' => depth_braces -= 1,
            '[' => depth_brackets += 1,
            ']' => depth_brackets -= 1,
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += 1;
                }
            }
            ')' => grouping = false,
            c if (c.is_ascii_alphabetic() || c == '_' || c == ':')
                && depth_braces == 0
                && depth_brackets == 0 =>
            {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i]))
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let rest: String = chars[i..].iter().collect::<String>();
                let rest = rest.trim_start();
                // `sum by (...)`: an aggregation, named before its grouping.
                let aggregation = ["by", "without"].iter().any(|k| {
                    rest.strip_prefix(k)
                        .is_some_and(|r| r.starts_with([' ', '(']))
                });
                if GROUPINGS.contains(&word.as_str()) {
                    grouping = rest.starts_with('(');
                } else if !grouping
                    && !rest.starts_with('(')
                    && !aggregation
                    && !KEYWORDS.contains(&word.as_str())
                {
                    names.push(word);
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    names
}

/// The sample names on a /metrics page.
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(String::from)
        .collect()
}

#[test]
fn metric_names_are_read_out_of_promql() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (name, le) (rate(workqueue_work_duration_seconds_bucket{job=~"a|b"}[5m]))) / on(name) group_left x_total"#,
    );
    assert_eq!(names, ["workqueue_work_duration_seconds_bucket", "x_total"]);
}

#[tokio::test]
async fn every_metric_the_grafana_dashboard_queries_is_exported() {
    let text = std::fs::read_to_string(support::root().join("deploy/grafana/switchyard.json"))
        .expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut wanted = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or("?").to_string();
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for target in targets {
            let expr = target["expr"].as_str().expect("a PromQL expression");
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{title:?}: no metric in {expr}");
            wanted.extend(names.into_iter().map(|n| (title.clone(), n)));
        }
    }

    let t = TestDaemon::start(
        "handlers:\n  log-events: {}\nroutes:\n  - {name: configmaps, resource: configmaps, handler: log-events}\n",
    )
    .await;
    let churn = t.sim().start_churn(ChurnConfig {
        rate: 50.0,
        objects: 10,
        ..ChurnConfig::default()
    });
    let page = support::eventually("handled churn", Duration::from_secs(30), async || {
        let text = reqwest::get(t.probes_url("/metrics"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let processed = text
            .lines()
            .find(|l| l.starts_with("switchyard_handler_processed_total{"))?
            .rsplit(' ')
            .next()?
            .parse::<u64>()
            .ok()?;
        (processed >= 10).then_some(text)
    })
    .await;
    churn.abort();
    let names = exported(&page);
    let missing: Vec<_> = wanted.iter().filter(|(_, n)| !names.contains(n)).collect();
    assert!(missing.is_empty(), "not on /metrics: {missing:?}\n{page}");
    t.stop().await;
}
