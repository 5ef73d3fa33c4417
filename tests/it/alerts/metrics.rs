//! The metrics the alerts watch that the daemon measures for them: `switchyard_ready`
//! (what `/readyz` answers), `switchyard_informer_failing` (a list or watch failing now) and
//! `switchyard_queue_oldest_seconds` (how long the oldest queued key has waited), each seen
//! to change with what it measures on the probes listener's `/metrics`.

use std::time::Duration;

use serde_json::json;

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

const LOG_CONFIGMAPS: &str = "handlers:\n  log-events: {}\nroutes:\n  - {name: configmaps, resource: configmaps, handler: log-events}\n";

/// The value of `series` (`name{labels}` as the text format prints it) on `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next()?.parse().ok())
}

/// Polls the probes listener's `/metrics` until every series in `wanted` holds its value.
async fn wait_for_samples(t: &TestDaemon, what: &str, wanted: &[(&str, f64)]) -> String {
    let url = t.probes_url("/metrics");
    support::eventually(what, WAIT, async || {
        let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
        wanted
            .iter()
            .all(|(series, value)| sample(&text, series) == Some(*value))
            .then_some(text)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_and_informer_failing_follow_a_list_the_api_server_refuses() {
    let t = TestDaemon::start(LOG_CONFIGMAPS).await;
    wait_for_samples(
        &t,
        "ready with the configmaps informer well",
        &[
            ("switchyard_ready", 1.0),
            (
                r#"switchyard_informer_failing{informer="v1/configmaps"}"#,
                0.0,
            ),
        ],
    )
    .await;
    let forbidden = switchyard::sim::RequestFailure::forbidden(1000).only(&["list", "watch"]);
    t.sim().faults().fail_next_requests(forbidden).unwrap();
    t.write_config(&format!(
        "{LOG_CONFIGMAPS}  - {{name: secrets, resource: secrets, handler: log-events}}\n"
    ));
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 200, "{body:#}");
    wait_for_samples(
        &t,
        "not ready, the secrets informer failing",
        &[
            ("switchyard_ready", 0.0),
            (r#"switchyard_informer_failing{informer="v1/secrets"}"#, 1.0),
            (r#"switchyard_informer_synced{informer="v1/secrets"}"#, 0.0),
            (
                r#"switchyard_informer_failing{informer="v1/configmaps"}"#,
                0.0,
            ),
        ],
    )
    .await;
    t.sim().faults().clear();
    wait_for_samples(
        &t,
        "ready again once the list is allowed",
        &[
            ("switchyard_ready", 1.0),
            (r#"switchyard_informer_failing{informer="v1/secrets"}"#, 0.0),
            (r#"switchyard_informer_synced{informer="v1/secrets"}"#, 1.0),
        ],
    )
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_queued_key_ages_while_its_handler_is_paused_and_resets_when_taken() {
    let t = TestDaemon::start(LOG_CONFIGMAPS).await;
    let oldest = r#"switchyard_queue_oldest_seconds{name="log-events"}"#;
    wait_for_samples(&t, "an empty queue", &[(oldest, 0.0)]).await;
    let (code, _) = t.post("/handlers/log-events/pause").await;
    assert_eq!(code, 200);
    t.create_configmap(json!({"metadata": {"name": "held"}}))
        .await;
    let url = t.probes_url("/metrics");
    let waited = support::eventually("the queued key to age past 1 s", WAIT, async || {
        let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
        let age = sample(&text, oldest)?;
        (age >= 1.0).then_some(age)
    })
    .await;
    let (_, detail) = t.get("/handlers/log-events").await;
    assert_eq!(detail["queue_depth"], 1, "{detail:#}");
    assert!(waited < WAIT.as_secs_f64(), "{waited}");
    let (code, _) = t.post("/handlers/log-events/resume").await;
    assert_eq!(code, 200);
    wait_for_samples(
        &t,
        "the key taken and handled",
        &[
            (oldest, 0.0),
            (
                r#"switchyard_handler_processed_total{name="log-events"}"#,
                1.0,
            ),
        ],
    )
    .await;
    t.stop().await;
}
