//! The egress table: every spelling of a loopback or unspecified destination a plugin might
//! try, against one allow-list, run by the `probe` plugin in one call, in a daemon without a
//! proxy in its environment and in one with `HTTP_PROXY` at `localhost`. Each row's result
//! is asserted, and the listener the refused rows point at must never see a connection
//! (nor the proxy a request).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::process::Process;
use crate::support::receiver::Receiver;
use crate::support::{self};

const WAIT: Duration = Duration::from_secs(60);

/// What a row must meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The request reaches the allowed listener: status 200.
    Reached,
    /// Refused by the allow-list (`HttpRequestDenied`).
    NotAllowed,
    /// On the list, refused by the address rules (`DestinationIpProhibited`).
    Address,
    /// Refused one way or the other, or rejected as an invalid URL: never sent.
    Refused,
    /// On the list, and the name does not resolve (`DNS-error`).
    Dns,
}

/// The rows: a URL (`T` the allowed port, `F` the forbidden one) and what it must meet.
const ROWS: &[(&str, Expect)] = &[
    ("http://127.0.0.1:T/plain", Expect::Reached),
    // An IPv4 literal in other spellings is still 127.0.0.1, matched as it.
    ("http://2130706433:T/number", Expect::Reached),
    ("http://127.1:T/short", Expect::Reached),
    // `0.0.0.0/0` and `[::]/0` allow every IP literal, and unlock no loopback address.
    ("http://127.0.0.1:F/", Expect::Address),
    ("http://2130706433:F/", Expect::Address),
    ("http://127.1:F/", Expect::Address),
    ("http://0x7f.0.0.1:F/", Expect::Address),
    ("http://0177.0.0.1:F/", Expect::Address),
    ("http://127.0.0.1.:F/", Expect::Address),
    ("HTTP://127.0.0.1:F/", Expect::Address),
    ("http://user:pw@127.0.0.1:F/", Expect::Address),
    ("http://[::ffff:127.0.0.1]:F/", Expect::Address),
    ("http://[::ffff:7f00:1]:F/", Expect::Address),
    ("http://[::1]:F/", Expect::Address),
    // Unspecified addresses, which Linux connects to the local host.
    ("http://0.0.0.0:F/", Expect::Address),
    ("http://0:F/", Expect::Address),
    ("http://[::]:F/", Expect::Address),
    ("http://[::ffff:0.0.0.0]:F/", Expect::Address),
    // A name on the list that resolves to loopback.
    ("http://localhost:F/", Expect::Address),
    ("http://LOCALHOST.:F/", Expect::Address),
    // Not on the list at all.
    ("http://other.switchyard.invalid:F/", Expect::NotAllowed),
    // On the list, resolving nowhere: a DNS error, not a refused connection.
    ("http://nowhere.switchyard.invalid:F/", Expect::Dns),
    ("https://127.0.0.1:T/", Expect::Address),
    // Escapes and zone ids: whatever they parse to, never sent.
    ("http://%31%32%37.0.0.1:F/", Expect::Refused),
    ("http://[fe80::1%25lo]:F/", Expect::Refused),
];

/// The allow-list: the allowed port by IP, every IP literal by range, the forbidden port by
/// name (`localhost` resolves to loopback), and the report's address.
fn allow(target: u16, forbidden: u16, report: u16) -> Vec<String> {
    vec![
        format!("http://127.0.0.1:{target}"),
        "http://0.0.0.0/0:*".into(),
        "http://[::]/0:*".into(),
        "https://0.0.0.0/0:*".into(),
        format!("http://localhost:{forbidden}"),
        "http://nowhere.switchyard.invalid:*".into(),
        format!("http://127.0.0.1:{report}"),
    ]
}

/// Runs the table in a daemon started with `env` (and every other proxy variable unset);
/// returns each row's result text.
async fn run_table(env: &[(&str, &str)], proxy: Option<&Receiver>) {
    let target = Receiver::start().await;
    let forbidden = Receiver::start().await;
    let report = Receiver::start().await;
    let urls: Vec<String> = ROWS
        .iter()
        .map(|(url, _)| {
            url.replace(":T/", &format!(":{}/", target.port()))
                .replace(":F/", &format!(":{}/", forbidden.port()))
        })
        .collect();
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let config = json!({
        "urls": urls,
        "report": format!("http://127.0.0.1:{}/report", report.port()),
    });
    let yaml = format!(
        "admin:\n  listen: 127.0.0.1:0\n  probes_listen: null
handlers:
  probe:
    plugin: probe
    timeout: 20s
    max_retries: 0
    config: {config}
    capabilities:
      http: {allow:?}
routes:
  - name: cms
    resource: configmaps
    handler: probe
",
        allow = allow(target.port(), forbidden.port(), report.port()),
    );
    support::write_config(dir.path(), &yaml);
    support::create_configmap(
        &sim.client().unwrap(),
        "default",
        json!({"metadata": {"name": "a"}}),
    )
    .await;
    let config_path = dir.path().join("switchyard.yaml");
    let args = [
        "run",
        "--config",
        config_path.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ];
    let unset: Vec<&str> = [
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "no_proxy",
        "NO_PROXY",
        "ALL_PROXY",
        "all_proxy",
    ]
    .into_iter()
    .filter(|v| !env.iter().any(|(set, _)| set == v))
    .collect();
    let daemon = Process::start(&args, env, &unset);
    let deadline = tokio::time::Instant::now() + WAIT;
    let reported = loop {
        if let Some(first) = report.delivered().first() {
            break first.body.clone();
        }
        if tokio::time::Instant::now() > deadline {
            let lines = daemon.kill();
            panic!(
                "no report from the probe in {WAIT:?}; the daemon said:\n{}",
                lines.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    daemon.kill();
    let results: Vec<String> = reported["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["result"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(results.len(), ROWS.len(), "{reported:#}");
    let mut wrong = Vec::new();
    for ((row, expect), result) in ROWS.iter().zip(&results) {
        let ok = match expect {
            Expect::Reached => result == "status 200",
            Expect::NotAllowed => result.contains("HttpRequestDenied"),
            Expect::Address => result.contains("DestinationIpProhibited"),
            Expect::Refused => !result.starts_with("status"),
            Expect::Dns => result.contains("DnsError"),
        };
        if !ok {
            wrong.push(format!("{row}: expected {expect:?}, met {result}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "rows that met the wrong end:\n{}",
        wrong.join("\n")
    );
    let reached: Vec<String> = target.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        reached,
        ["/plain", "/number", "/short"],
        "the allowed listener saw other requests"
    );
    assert_eq!(
        forbidden.connections(),
        0,
        "a refused request connected to the forbidden listener"
    );
    if let Some(proxy) = proxy {
        let seen: Vec<Value> = proxy.received().iter().map(|r| json!(r.path)).collect();
        assert!(seen.is_empty(), "the proxy was asked for {seen:?}");
    }
}

/// Regression for five bypasses: `0.0.0.0/0` unlocking 0.0.0.0, IPv4 addresses spelled as
/// names connecting to loopback unchecked, an IP entry unlocking its address on every port,
/// and (below) a direct request exempted because the proxy shared its host name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_local_address_is_refused_before_a_connection() {
    run_table(&[], None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_proxy_at_localhost_a_direct_request_to_localhost_is_still_checked() {
    let proxy = Receiver::start().await;
    let proxy_url = format!("http://localhost:{}", proxy.port());
    run_table(
        &[
            ("HTTP_PROXY", proxy_url.as_str()),
            ("HTTPS_PROXY", proxy_url.as_str()),
            ("NO_PROXY", "localhost,127.0.0.1,nowhere.switchyard.invalid"),
        ],
        Some(&proxy),
    )
    .await;
}

/// Regression: one call started 4,000 requests to a silent receiver, and the daemon ran out
/// of descriptors. A call has at most 8 requests in flight; the rest are refused at once,
/// counted, and never connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_requests_is_bounded_per_call_and_the_rest_refused() {
    use crate::support::TestDaemon;
    use crate::support::receiver::Mode;
    let silent = Receiver::start().await;
    silent.set(Mode::Stall);
    let report = Receiver::start().await;
    let config = json!({
        "urls": [],
        "burst": {"url": format!("http://127.0.0.1:{}/burst", silent.port()), "count": 200},
        "report": format!("http://127.0.0.1:{}/report", report.port()),
    });
    // One range entry for both: requests are counted under it, not under each address.
    let allow = ["http://127.0.0.0/8:*"];
    let t = TestDaemon::builder(&format!(
        "
handlers:
  probe:
    plugin: probe
    timeout: 20s
    max_retries: 0
    config: {config}
    capabilities:
      http: {allow:?}
routes:
  - name: cms
    resource: configmaps
    handler: probe
"
    ))
    .plugin_file("probe", "probe")
    .start()
    .await;
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    let reported = support::eventually_sync("the probe's report", WAIT, || {
        report.delivered().first().map(|r| r.body.clone())
    })
    .await;
    let burst = reported["burst"].as_object().expect("burst counts");
    let count = |what: &str| {
        burst
            .iter()
            .filter(|(text, _)| text.contains(what))
            .map(|(_, n)| n.as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    assert_eq!(count("in flight"), 192, "{burst:?}");
    assert_eq!(count("ConnectionReadTimeout"), 8, "{burst:?}");
    assert!(
        silent.connections() <= 8,
        "{} connections",
        silent.connections()
    );
    let metrics = t.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("switchyard_outbound_refused_total")
                && l.contains("reason=\"too_many_requests\"")
                && l.ends_with(" 192")),
        "{metrics}"
    );
    // Regression: the URL's host (which may come from a Secret) was the label.
    let requests: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("switchyard_outbound_requests_total{"))
        .collect();
    assert!(!requests.is_empty(), "{metrics}");
    assert!(
        requests
            .iter()
            .all(|l| l.contains("host=\"http://127.0.0.0/8:*\"") && !l.contains("127.0.0.1")),
        "{requests:#?}"
    );
    t.stop().await;
}
