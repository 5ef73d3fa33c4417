//! The probes and metrics listener (`admin.probes_listen`): `/livez`, `/readyz` and
//! `/metrics` open to every caller, nothing else, the admin API's token rules unchanged; its
//! port bound before anything starts; changing it needs a restart. Connections that never
//! finish their headers (slowloris) take neither it nor the admin API away: the oldest are
//! shed at the connection limit and all close after the header read timeout, which the
//! daemon's open file descriptors show (counted in `/proc` of a `switchyard run` child).

use std::net::SocketAddr;
use std::time::Duration;

use switchyard::daemon::Options;
use switchyard::sim::Simulator;
use switchyard::{Daemon, config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::process::Process;
use crate::support::{self, TestDaemon, eventually};

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

/// A `switchyard run` child process on a simulator, its admin section holding `settings`
/// too, and where its admin API and probes listen.
struct Child {
    daemon: Process,
    admin: SocketAddr,
    probes: SocketAddr,
    sim: Simulator,
    _dir: tempfile::TempDir,
}

impl Child {
    async fn start(settings: &str) -> Self {
        let sim = support::start_sim().await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).unwrap();
        let config = support::write_config(
            dir.path(),
            &format!(
                "admin:\n  listen: 127.0.0.1:0\n  probes_listen: 127.0.0.1:0\n  token_file: admin-token\n{settings}{CONFIGMAPS_TO_LOG_EVENTS}"
            ),
        );
        let args = [
            "run",
            "--config",
            config.to_str().unwrap(),
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ];
        let unset = ["RUST_LOG", "SWITCHYARD_LOG_FORMAT", "NO_COLOR"];
        let daemon = Process::start(&args, &[], &unset);
        let started = daemon
            .wait_for_line(Duration::from_secs(60), |l| {
                l.contains("switchyard started")
            })
            .await;
        let addr = |field: &str| -> SocketAddr {
            let value = started.split(field).nth(1).expect(field);
            let value = value.split_whitespace().next().unwrap().trim_matches('"');
            value
                .parse()
                .unwrap_or_else(|e| panic!("{field}{value}: {e}"))
        };
        let (admin, probes) = (addr(" admin="), addr(" probes="));
        Self {
            daemon,
            admin,
            probes,
            sim,
            _dir: dir,
        }
    }

    /// How many files (sockets included) the daemon has open.
    fn open_files(&self) -> usize {
        let fd = format!("/proc/{}/fd", self.daemon.id());
        std::fs::read_dir(&fd)
            .unwrap_or_else(|e| panic!("{fd}: {e}"))
            .count()
    }

    /// `GET /livez` and `/readyz` on the probes port and `/status` (with the token) on the
    /// admin API, each on a new connection: all answer 200.
    async fn answers(&self) {
        // No pooled connections: each request opens its own, as kubelet's probes do.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        for path in ["/livez", "/readyz"] {
            let url = format!("http://{}{path}", self.probes);
            let response = http
                .get(&url)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(response.status().as_u16(), 200, "{url}");
        }
        let url = format!("http://{}/status", self.admin);
        let response = http
            .get(&url)
            .bearer_auth(support::TOKEN)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(response.status().as_u16(), 200, "{url}");
    }

    async fn stop(self) {
        drop(self.daemon);
        self.sim.stop().await;
    }
}

/// Opens `count` connections to `addr` that send the start of a request line and never
/// finish it.
async fn half_open(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"GET /liv").await.unwrap();
        held.push(stream);
    }
    held
}

/// How many of `held` the daemon has closed (a read finds the end, or a reset).
async fn closed_by_the_daemon(held: &mut [TcpStream]) -> usize {
    let mut closed = 0;
    for stream in held {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(1), stream.read(&mut byte)).await;
        if matches!(read, Ok(Ok(0) | Err(_))) {
            closed += 1;
        }
    }
    closed
}

#[tokio::test]
async fn half_open_connections_are_shed_at_the_limit_so_probes_and_the_admin_api_keep_answering() {
    // A header timeout far beyond the test: only the connection limit can make room.
    let child = Child::start(
        "  header_read_timeout: 10m\n  max_connections: 16\n  probes_max_connections: 16\n",
    )
    .await;
    child.answers().await;
    let before = child.open_files();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.extend(half_open(child.probes, 50).await);
        held.extend(half_open(child.admin, 50).await);
        // With every slot taken by a connection that never finishes, requests are answered.
        child.answers().await;
    }
    // 400 half-open connections, at most 16 on each listener kept.
    let bound = before + 16 + 16 + 8;
    eventually(
        "the daemon to keep at most 16 connections on each listener",
        Duration::from_secs(20),
        async || (child.open_files() <= bound).then_some(()),
    )
    .await;
    let closed = closed_by_the_daemon(&mut held).await;
    assert!(closed >= 400 - 32, "the daemon closed {closed} of 400");
    child.answers().await;
    child.stop().await;
}

#[tokio::test]
async fn half_open_connections_are_closed_after_the_header_read_timeout() {
    let child = Child::start("  header_read_timeout: 1s\n").await;
    child.answers().await;
    let before = child.open_files();
    // Under both limits (128 and 256): nothing is shed, only the timeout closes them.
    let mut held = half_open(child.probes, 120).await;
    held.extend(half_open(child.admin, 120).await);
    child.answers().await;
    eventually(
        "the daemon to close every half-open connection after the header read timeout",
        Duration::from_secs(30),
        async || {
            let closed = closed_by_the_daemon(&mut held).await;
            (closed == 240 && child.open_files() <= before + 8).then_some(())
        },
    )
    .await;
    child.answers().await;
    child.stop().await;
}
