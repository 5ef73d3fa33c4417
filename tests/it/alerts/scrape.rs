//! A real Prometheus scraping a running daemon: every metric the alert rules
//! (deploy/alerts) and the Grafana dashboard (deploy/grafana) name, read out of their PromQL,
//! has series in Prometheus; every dashboard query answers with data for the job; and every
//! rule evaluates without error on what the daemon exports.
//!
//! The daemon runs on the simulator with a state store, a handler posting each ConfigMap to
//! a receiver on loopback and one whose destination is off its allow-list, so the outbound
//! and state metrics have series too.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::prometheus::Prometheus;
use crate::support::promql::{dashboard_expressions, metric_names, rule_expressions};
use crate::support::receiver::Receiver;
use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(20);

/// A state store; `notify` posts every ConfigMap to `url` on `allowed`, `refused` to a
/// destination off that allow-list.
fn config(allowed: &str, url: &str) -> String {
    format!(
        "
state_dir: state
handlers:
  notify:
    plugin: outbound
    config: {{url: \"{url}\"}}
    capabilities:
      http: [\"{allowed}\"]
  refused:
    plugin: outbound
    max_retries: 0
    quarantine_after: 0
    config: {{url: \"http://192.0.2.1:9/hook\"}}
    capabilities:
      http: [\"{allowed}\"]
routes:
  - {{name: notify, resource: configmaps, handler: notify}}
  - {{name: refused, resource: configmaps, handler: refused}}
"
    )
}

/// The dashboard's Grafana variables as the test's Prometheus has them: the job, and a
/// minute for the rate and range windows (scraped every second).
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__range", "1m")
        .replace("$job", "switchyard")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scraping_a_daemon_has_every_metric_the_rules_and_dashboard_query() {
    let rules_file = support::root().join("deploy/alerts/switchyard.rules.yaml");
    let rules = rule_expressions(&rules_file);
    let dashboard = dashboard_expressions(&support::root().join("deploy/grafana/switchyard.json"));
    let mut wanted: Vec<(String, String)> = Vec::new();
    for (source, expr) in rules.iter().chain(&dashboard) {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{source}: no metric in {expr}");
        wanted.extend(names.into_iter().map(|n| (source.clone(), n)));
    }

    let receiver = Receiver::start().await;
    let url = format!("{}/hook", receiver.url("http"));
    let t = TestDaemon::builder(&config(&receiver.url("http"), &url))
        .plugin_file("outbound", "outbound")
        .start()
        .await;
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    // Outbound families have series once a request was made or refused.
    support::eventually("a request made and one refused", WAIT, async || {
        let text = t.metrics_text().await;
        let has = |p: &str| text.lines().any(|l| l.starts_with(p));
        (has("switchyard_outbound_requests_total{") && has("switchyard_outbound_refused_total{"))
            .then_some(())
    })
    .await;

    let addr = t.daemon().probes_addr().expect("a probes listener");
    let prometheus = Prometheus::start(&[addr.to_string()], &[rules_file]).await;
    let names: BTreeSet<&str> = wanted.iter().map(|(_, n)| n.as_str()).collect();
    let selector = format!(
        "count by (__name__) ({{__name__=~\"{}\"}})",
        names.iter().copied().collect::<Vec<_>>().join("|")
    );
    poll("a series for every metric named", async || {
        let found: BTreeSet<String> = prometheus
            .query(&selector)
            .await
            .iter()
            .filter_map(|s| s["metric"]["__name__"].as_str().map(String::from))
            .collect();
        let missing: Vec<_> = wanted.iter().filter(|(_, n)| !found.contains(n)).collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("no series for {missing:?}"))
        }
    })
    .await;
    poll("data for every dashboard query", async || {
        let mut empty = Vec::new();
        for (panel, expr) in &dashboard {
            if prometheus.query(&substitute(expr)).await.is_empty() {
                empty.push((panel, expr));
            }
        }
        if empty.is_empty() {
            Ok(())
        } else {
            Err(format!("no data for {empty:#?}"))
        }
    })
    .await;
    // Rules evaluated from now on see rates over at least two samples, as the dashboard's did.
    let since = jiff::Timestamp::now();
    poll("every rule evaluated without error", async || {
        let data = prometheus.api("rules", &[]).await;
        let loaded: Vec<&Value> = data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        let evaluated = |r: &Value| {
            r["lastEvaluation"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| t > since)
        };
        let unwell: Vec<String> = loaded
            .iter()
            .filter(|r| r["health"] != "ok" || !evaluated(r))
            .map(|r| {
                let (name, health) = (&r["name"], &r["health"]);
                format!(
                    "{name}: {health} at {} {}",
                    r["lastEvaluation"], r["lastError"]
                )
            })
            .collect();
        if loaded.len() == rules.len() && unwell.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} of {} rules loaded; not evaluated well: {unwell:#?}",
                loaded.len(),
                rules.len()
            ))
        }
    })
    .await;
    prometheus.stop();
    t.stop().await;
}

/// Polls `check` until it is `Ok`, or panics after [`WAIT`] with what it last said.
async fn poll(what: &str, mut check: impl AsyncFnMut() -> Result<(), String>) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match check().await {
            Ok(()) => return,
            Err(last) if tokio::time::Instant::now() > deadline => {
                panic!("timed out after {WAIT:?} waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
