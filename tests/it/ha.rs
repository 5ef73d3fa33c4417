//! Several replicas in leader mode: two daemons on one simulator elect one leader through
//! a Lease; only the leader's handlers run; a graceful stop hands over at once, a leader
//! that cannot renew steps down before its successor takes over.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard::sim::faults::RequestFailure;
use switchyard::sim::{SimOptions, Simulator};

use crate::support::{TestDaemon, eventually, start_sim};

/// Lease 2s, renew deadline 1.5s, retry 0.3s.
fn config(identity: &str) -> String {
    format!(
        "ha:
  mode: leader
  lease_namespace: default
  lease_name: router
  lease_duration: 2s
  renew_deadline: 1500ms
  retry_period: 300ms
  identity: {identity}
handlers:
  log-events: {{}}
routes:
  - name: configmaps
    resource: configmaps
    handler: log-events
"
    )
}

/// `replica.leader` and the handler's processed count from `/status`.
async fn replica(daemon: &TestDaemon) -> (bool, u64, Value) {
    let status = daemon.status_json().await;
    let leader = status["replica"]["leader"]
        .as_bool()
        .expect("replica.leader");
    let processed = status["handlers"][0]["processed"]
        .as_u64()
        .expect("processed");
    (leader, processed, status)
}

/// Two daemons, `a` then `b`, on one simulated cluster (each through a server of its own,
/// so faults can hit one of them); `a` leads when this returns.
async fn two_replicas() -> (TestDaemon, TestDaemon) {
    let sim_a = start_sim().await;
    let sim_b = Simulator::serve(sim_a.cluster().clone(), SimOptions::default())
        .await
        .expect("a second server on the same cluster");
    let a = TestDaemon::builder(&config("a")).sim(sim_a).start().await;
    eventually("a leads", Duration::from_secs(5), async || {
        replica(&a).await.0.then_some(())
    })
    .await;
    let b = TestDaemon::builder(&config("b")).sim(sim_b).start().await;
    (a, b)
}

async fn create(daemon: &TestDaemon, name: &str) {
    daemon
        .create_configmap(json!({"metadata": {"name": name, "namespace": "default"}}))
        .await;
}

#[tokio::test]
async fn one_replica_leads_and_a_graceful_stop_hands_over_at_once() {
    let (a, b) = two_replicas().await;
    create(&a, "first").await;
    eventually("a handles the event", Duration::from_secs(5), async || {
        (replica(&a).await.1 >= 1).then_some(())
    })
    .await;
    // The follower's caches are warm and it is ready, but its handler has run nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (leader, processed, status) = replica(&b).await;
    assert!(!leader, "{status}");
    assert_eq!(processed, 0, "the follower handled an event: {status}");
    assert_eq!(status["informers"][0]["synced"], true, "{status}");
    assert_eq!(status["replica"]["holder"], "a", "{status}");
    assert_eq!(status["replica"]["lease"], "default/router", "{status}");
    let ready = reqwest::get(b.probes_url("/readyz")).await.expect("readyz");
    assert_eq!(ready.status().as_u16(), 200);
    let metrics = reqwest::get(a.probes_url("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    assert!(metrics.contains("\nswitchyard_leader 1\n"), "{metrics}");
    assert!(
        metrics.contains("switchyard_lease_renewals_total"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nswitchyard_leader_transitions_total 1\n"),
        "{metrics}"
    );

    // The admin API's pause is the user's: it holds when b starts leading.
    let (code, _) = b.post("/handlers/log-events/pause").await;
    assert_eq!(code, 200);
    // A graceful stop releases the Lease: b takes over within a few retry periods, well
    // before the 2s lease would have run out.
    let stopped = Instant::now();
    a.stop().await;
    eventually("b leads", Duration::from_secs(5), async || {
        replica(&b).await.0.then_some(())
    })
    .await;
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "b took over after {took:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, processed, status) = replica(&b).await;
    assert_eq!(
        processed, 0,
        "a paused handler ran on gaining the lead: {status}"
    );
    assert_eq!(status["handlers"][0]["paused"], true, "{status}");
    let (code, _) = b.post("/handlers/log-events/resume").await;
    assert_eq!(code, 200);
    let before = replica(&b).await.1;
    create(&b, "second").await;
    eventually(
        "b handles the new event",
        Duration::from_secs(5),
        async || (replica(&b).await.1 > before).then_some(()),
    )
    .await;
    b.stop().await;
}

#[tokio::test]
async fn a_leader_that_cannot_renew_steps_down_before_the_follower_takes_over() {
    let (a, b) = two_replicas().await;
    // Every Lease write of a's fails from now on, as if it were cut off from the API.
    a.sim()
        .faults()
        .fail_next_requests(RequestFailure::internal_error(u64::MAX / 2).only(&["update"]))
        .expect("a valid fault");
    let cut = Instant::now();
    let mut a_stepped_down = None;
    let mut b_took_over = None;
    while cut.elapsed() < Duration::from_secs(8) && b_took_over.is_none() {
        let (a_leads, _, a_status) = replica(&a).await;
        let (b_leads, _, b_status) = replica(&b).await;
        assert!(
            !(a_leads && b_leads),
            "two leaders at once, {:?} after the cut: {a_status} {b_status}",
            cut.elapsed()
        );
        if !a_leads && a_stepped_down.is_none() {
            a_stepped_down = Some(cut.elapsed());
        }
        if b_leads {
            b_took_over = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stepped = a_stepped_down.expect("a stepped down");
    let took = b_took_over.expect("b took over");
    assert!(
        stepped <= Duration::from_millis(2200),
        "a stepped down after {stepped:?}"
    );
    assert!(
        stepped < took,
        "a stepped down at {stepped:?}, b led at {took:?}"
    );
    let status = a.status_json().await;
    assert_eq!(status["replica"]["losses"], 1, "{status}");
    // Only b handles what comes next.
    let a_before = replica(&a).await.1;
    let b_before = replica(&b).await.1;
    create(&b, "after").await;
    eventually(
        "b handles the new event",
        Duration::from_secs(5),
        async || (replica(&b).await.1 > b_before).then_some(()),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        replica(&a).await.1,
        a_before,
        "the old leader handled an event"
    );
    a.stop().await;
    b.stop().await;
}

/// Regression: a replica whose ServiceAccount may not read or write its Lease (a Role
/// missing, or made for another namespace) got 403 on every attempt, never led, and still
/// answered `/readyz` 200.
#[tokio::test]
async fn a_replica_refused_its_lease_is_not_ready_and_says_why() {
    let sim = start_sim().await;
    sim.faults()
        .fail_next_requests(RequestFailure::forbidden(u64::MAX).on(&["leases"]))
        .unwrap();
    let daemon = TestDaemon::builder(&config("a")).sim(sim).start().await;
    let text = eventually(
        "readyz to fail naming the refused Lease",
        Duration::from_secs(10),
        async || {
            let response = reqwest::get(daemon.url("/readyz?verbose")).await.ok()?;
            let code = response.status().as_u16();
            let text = response.text().await.ok()?;
            (code == 503 && text.contains("[-]lease")).then_some(text)
        },
    )
    .await;
    assert!(
        text.contains(
            "[-]lease: cannot read Lease default/router: forbidden: injected fault (403)"
        ),
        "{text}"
    );
    assert!(text.contains("[+]informer v1/configmaps synced"), "{text}");
    let short = reqwest::get(daemon.url("/readyz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        short.contains("cannot read Lease default/router"),
        "{short}"
    );
    assert!(!replica(&daemon).await.0, "a refused replica cannot lead");

    // Once its Role is there, it leads and is ready.
    daemon.sim().faults().clear();
    eventually("ready and leading", Duration::from_secs(10), async || {
        let ready = reqwest::get(daemon.url("/readyz")).await.ok()?.status() == 200;
        (ready && replica(&daemon).await.0).then_some(())
    })
    .await;
    daemon.stop().await;
}
