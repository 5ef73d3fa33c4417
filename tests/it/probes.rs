//! The probes and metrics listener (`admin.probes_listen`): `/livez`, `/readyz` and
//! `/metrics` open to every caller, nothing else, the admin API's token rules unchanged; its
//! port bound before anything starts; changing it needs a restart.

use std::time::Duration;

use switchyard::daemon::Options;
use switchyard::{Daemon, config};

use crate::support::{self, TestDaemon};

use crate::support::CONFIGMAPS_TO_LOG_EVENTS;

#[tokio::test]
async fn probes_answer_without_a_token_while_the_admin_api_still_demands_one() {
    // Beyond loopback, the admin API needs the token for every request, reads included.
    let t = TestDaemon::builder(CONFIGMAPS_TO_LOG_EVENTS)
        .admin_listen("0.0.0.0:0")
        .start()
        .await;
    let http = reqwest::Client::new();
    for path in ["/livez", "/readyz", "/metrics"] {
        let admin = http.get(t.url(path)).send().await.unwrap();
        assert_eq!(admin.status().as_u16(), 401, "admin {path}");
        let probe = http.get(t.probes_url(path)).send().await.unwrap();
        assert_eq!(probe.status().as_u16(), 200, "probes {path}");
        let body = probe.text().await.unwrap();
        if path == "/metrics" {
            assert!(
                body.contains("switchyard_informer_synced{informer=\"v1/configmaps\"} 1"),
                "{body}"
            );
        } else {
            assert_eq!(body, "ok\n", "{path}");
        }
    }
    let verbose = http
        .get(t.probes_url("/readyz?verbose"))
        .send()
        .await
        .unwrap();
    let text = verbose.text().await.unwrap();
    assert!(text.contains("[+]informer v1/configmaps synced"), "{text}");
    // Nothing else is there: no status, no reload, no dead letters.
    for path in ["/status", "/handlers/log-events/dead-letters", "/plugins"] {
        let response = http.get(t.probes_url(path)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 404, "{path}");
        let body = response.text().await.unwrap();
        assert!(
            body.contains("serves /livez, /readyz and /metrics"),
            "{body}"
        );
    }
    let reload = http.post(t.probes_url("/reload")).send().await.unwrap();
    assert_eq!(reload.status().as_u16(), 404);
    let (code, _) = t.get("/status").await;
    assert_eq!(code, 200, "the admin API answers with its token");
    t.stop().await;
}

#[tokio::test]
async fn a_daemon_on_a_busy_probes_port_fails_before_it_talks_to_the_api_server() {
    let first = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    let busy = first.daemon().probes_addr().unwrap();
    let sim = support::start_sim().await;
    let failures = switchyard::sim::RequestFailure::internal_error(1000);
    sim.faults().fail_next_requests(failures).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = support::write_config(
        dir.path(),
        &format!(
            "admin:\n  listen: 127.0.0.1:0\n  probes_listen: {busy}\n{CONFIGMAPS_TO_LOG_EVENTS}"
        ),
    );
    let options = Options {
        client: Some(sim.client().unwrap()),
        watch_config: false,
        ..Options::default()
    };
    let err = Daemon::start(config::load(&path).unwrap(), options)
        .await
        .err()
        .expect("the busy probes port refuses the second daemon");
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "cannot listen on {busy} for the probes and metrics (admin.probes_listen)"
        )),
        "{message}"
    );
    let left = sim.faults().status().failures;
    assert_eq!(left.len(), 1, "no request reached the API server: {left:?}");
    assert_eq!(left[0].count, 1000, "no request reached the API server");
    sim.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn probes_can_be_turned_off_and_changing_them_needs_a_restart() {
    let t = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    t.write_config(&format!(
        "admin:\n  token_file: admin-token\n  probes_listen: null\n{CONFIGMAPS_TO_LOG_EVENTS}"
    ));
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 422, "{body:#}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("admin.probes_listen cannot change while running (restart to apply)"),
        "{body:#}"
    );
    // The listener it started with still answers.
    let live = reqwest::get(t.probes_url("/livez")).await.unwrap();
    assert_eq!(live.status().as_u16(), 200);
    t.stop().await;

    // Started with `null`, there is no probes listener.
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = support::write_config(
        dir.path(),
        &format!(
            "admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\n{CONFIGMAPS_TO_LOG_EVENTS}"
        ),
    );
    let loaded = config::load(&path).unwrap();
    assert_eq!(loaded.probes_listen, None);
    let options = Options {
        client: Some(sim.client().unwrap()),
        ..Options::default()
    };
    let daemon = Daemon::start(loaded, options).await.unwrap();
    assert_eq!(daemon.probes_addr(), None);
    daemon.shut_down(Duration::from_secs(1)).await;
    sim.stop().await;
}
