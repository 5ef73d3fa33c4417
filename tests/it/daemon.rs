//! End to end: changes made in the simulator reach the wasm plugin through the informer,
//! the router and the work queue, and the admin API reports it.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, PostParams};
use reqwest::Method;
use serde_json::json;
use switchyard::admin::openapi;
use switchyard::daemon::Options;
use switchyard::plugin::{PluginHost, loader};
use switchyard::{Daemon, config};

use crate::support::{self, TestDaemon};

use crate::support::CONFIGMAPS_TO_LOG_EVENTS;

#[tokio::test]
async fn a_configmap_created_in_the_simulator_reaches_the_wasm_plugin() {
    let mut t = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    let created = t
        .create_configmap(json!({
            "metadata": {"name": "hello-plugin"},
            "data": {"greeting": "hi", "target": "world"},
        }))
        .await;
    let rv = created.metadata.resource_version.unwrap();

    let line = support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.message.contains("default/hello-plugin")
    })
    .await;
    assert_eq!(line.handler, "log-events");
    assert_eq!(
        line.message,
        format!(
            "added ConfigMap default/hello-plugin rv={rv} route=configmaps data=[greeting,target]"
        )
    );

    let (code, status) = t.get("/status").await;
    assert_eq!(code, 200);
    let handler = &status["handlers"][0];
    assert_eq!(handler["name"], "log-events");
    assert!(handler["processed"].as_u64().unwrap() >= 1, "{status:#}");
    assert_eq!(handler["failed"], 0);
    let route = &status["routes"][0];
    assert_eq!(route["name"], "configmaps");
    assert_eq!(route["delivered"], 1);
    assert_eq!(route["pending"], 0);
    let informer = &status["informers"][0];
    assert_eq!(informer["resource"], "v1/configmaps");
    assert_eq!(informer["synced"], true);
    assert_eq!(informer["objects"], 1);
    t.stop().await;
}

#[tokio::test]
async fn updates_and_deletes_reach_the_plugin_in_order() {
    let mut t = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    let api = t.configmaps("default");
    t.create_configmap(json!({"metadata": {"name": "c"}, "data": {"v": "1"}}))
        .await;
    support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.message.starts_with("added ConfigMap default/c ")
    })
    .await;

    let mut changed = api.get("c").await.unwrap();
    changed
        .data
        .as_mut()
        .unwrap()
        .insert("w".into(), "2".into());
    api.replace("c", &PostParams::default(), &changed)
        .await
        .unwrap();
    support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.message.starts_with("updated ConfigMap default/c ") && l.message.ends_with("data=[v,w]")
    })
    .await;

    api.delete("c", &DeleteParams::default()).await.unwrap();
    support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.message.starts_with("deleted ConfigMap default/c ")
    })
    .await;
    t.stop().await;
}

#[tokio::test]
async fn health_endpoints_answer_over_http() {
    let t = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    for path in ["/livez", "/readyz"] {
        let response = reqwest::get(t.url(path)).await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        assert_eq!(response.text().await.unwrap(), "ok\n");
    }
    t.stop().await;
}

#[tokio::test]
async fn a_missing_plugin_is_reported_and_its_events_wait_in_the_queue() {
    let yaml = "
handlers:
  ghost:
    plugin: does-not-exist
routes:
  - name: configmaps
    resource: configmaps
    handler: ghost
";
    let t = TestDaemon::start(yaml).await;
    t.create_configmap(json!({"metadata": {"name": "waiting"}}))
        .await;

    let status = support::eventually(
        "the event to be queued",
        Duration::from_secs(30),
        async || {
            let status = t.status_json().await;
            (status["handlers"][0]["queue_depth"] == 1).then_some(status)
        },
    )
    .await;
    let handler = &status["handlers"][0];
    assert_eq!(handler["plugin_loaded"], false);
    let error = handler["plugin_error"].as_str().unwrap();
    assert!(error.contains("does-not-exist.wasm"), "{error}");
    assert_eq!(handler["processed"], 0);
    // The daemon itself is fine.
    let live = reqwest::get(t.url("/livez")).await.unwrap();
    assert_eq!(live.status().as_u16(), 200);
    t.stop_within(Duration::from_millis(200)).await;
}

fn configmap(name: &str, annotations: serde_json::Value) -> ConfigMap {
    support::configmap(json!({
        "metadata": {"name": name, "annotations": annotations},
        "data": {"v": "0"},
    }))
}

#[tokio::test]
async fn every_delivery_hands_each_update_to_the_plugin_in_order() {
    let yaml = "
handlers:
  log-events:
    concurrency: 4
routes:
  - name: configmaps
    resource: configmaps
    delivery: every
    handler: log-events
";
    let mut t = TestDaemon::start(yaml).await;
    let api = t.configmaps("default");
    let mut cm = api
        .create(&PostParams::default(), &configmap("counter", json!({})))
        .await
        .unwrap();
    let mut versions = vec![cm.metadata.resource_version.clone().unwrap()];
    for i in 1..=10 {
        cm.data.as_mut().unwrap().insert("v".into(), i.to_string());
        cm = api
            .replace("counter", &PostParams::default(), &cm)
            .await
            .unwrap();
        versions.push(cm.metadata.resource_version.clone().unwrap());
    }
    let mut seen = Vec::new();
    while seen.len() < versions.len() {
        let line = support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
            l.message.contains("default/counter")
        })
        .await;
        let rv = line
            .message
            .split("rv=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_string();
        seen.push(rv);
    }
    assert_eq!(
        seen, versions,
        "every change, in the order the API server made them"
    );
    t.stop().await;
}

const FAULTY: &str = "
handlers:
  faulty:
    max_retries: 2
    backoff_base: 10ms
    backoff_cap: 50ms
routes:
  - name: configmaps
    resource: configmaps
    handler: faulty
";

#[tokio::test]
async fn failures_retry_with_backoff_then_go_to_dead_letters_which_can_be_retried_and_purged() {
    let mut t = TestDaemon::start(FAULTY).await;
    let api = t.configmaps("default");
    api.create(
        &PostParams::default(),
        &configmap(
            "broken",
            json!({"faulty/error": "cannot reach the billing API"}),
        ),
    )
    .await
    .unwrap();
    // One that fails twice, then succeeds on the third attempt (the last allowed).
    api.create(
        &PostParams::default(),
        &configmap("flaky", json!({"faulty/fail-attempts": "2"})),
    )
    .await
    .unwrap();

    let line = support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.message.contains("default/flaky")
    })
    .await;
    assert!(line.message.ends_with("attempt=3"), "{}", line.message);

    let letters = support::eventually("a dead letter", Duration::from_secs(30), async || {
        let (_, body) = t.get("/handlers/faulty/dead-letters").await;
        let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
        (!letters.is_empty()).then_some(letters)
    })
    .await;
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(letter["id"], "configmaps/default/broken");
    assert_eq!(letter["attempts"], 3);
    assert_eq!(letter["last_error"], "cannot reach the billing API");
    assert_eq!(letter["kind"], "added");

    let status = t.daemon().status();
    let handler = &status.handlers[0];
    assert_eq!(
        (handler.failed, handler.retries, handler.dead_lettered),
        (5, 4, 1),
        "{handler:?}"
    );
    assert_eq!(handler.processed, 1);

    // Fix the plugin (swap in one that succeeds), then retry the dead letter.
    let fixed = PluginHost::new().unwrap();
    let plugin = loader::load(&fixed, &support::plugins_dir(), "log-events").await;
    t.daemon().handler("faulty").unwrap().set_plugin(plugin);
    let without_token = reqwest::Client::new();
    // Without the token, nothing changes.
    let response = without_token
        .post(t.url("/handlers/faulty/dead-letters/retry"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let error: serde_json::Value = response.json().await.unwrap();
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer"),
        "{error}"
    );
    let response = without_token
        .post(t.url("/handlers/faulty/dead-letters/purge"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(
        t.daemon().handler("faulty").unwrap().dead_letters().len(),
        1,
        "a refused request changes nothing"
    );
    let response = t
        .request(Method::POST, "/handlers/faulty/dead-letters/retry")
        .json(&json!({"ids": ["configmaps/default/broken", "nope/x/y", "nope/x/y", ""]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let answer = response.json::<serde_json::Value>().await.unwrap();
    assert_eq!(answer["retried"], 1, "{answer}");
    // What it names and is no dead letter is said, once each.
    assert_eq!(answer["unknown"], json!(["", "nope/x/y"]), "{answer}");
    support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.message.starts_with("added ConfigMap default/broken")
    })
    .await;
    let (_, body) = t.get("/handlers/faulty/dead-letters").await;
    assert_eq!(body["dead_letters"], json!([]));

    // Purge: a bad body is refused and changes nothing; an empty body purges all.
    let response = t
        .request(Method::POST, "/handlers/faulty/dead-letters/purge")
        .body("{\"id\": 1}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let error: serde_json::Value = response.json().await.unwrap();
    assert!(error["error"].as_str().unwrap().contains("ids"), "{error}");
    let (code, _) = t.post("/handlers/nope/dead-letters/purge").await;
    assert_eq!(code, 404);
    let (_, body) = t.post("/handlers/faulty/dead-letters/purge").await;
    assert_eq!(body["purged"], 0);
    assert!(body.get("unknown").is_none(), "{body}");
    t.stop().await;
}

#[tokio::test]
async fn metrics_use_client_go_workqueue_names_per_handler() {
    let mut t = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    t.configmaps("default")
        .create(&PostParams::default(), &configmap("m", json!({})))
        .await
        .unwrap();
    support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.message.contains("default/m ")
    })
    .await;
    let response = reqwest::get(t.url("/metrics")).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    for line in [
        "workqueue_adds_total{name=\"log-events\"} 1",
        "workqueue_depth{name=\"log-events\"} 0",
        "workqueue_retries_total{name=\"log-events\"} 0",
        "workqueue_queue_duration_seconds_count{name=\"log-events\"} 1",
        "workqueue_work_duration_seconds_count{name=\"log-events\"} 1",
        "workqueue_unfinished_work_seconds{name=\"log-events\"} 0",
        "workqueue_longest_running_processor_seconds{name=\"log-events\"} 0",
        "switchyard_informer_objects{informer=\"v1/configmaps\"} 1",
        "switchyard_informer_synced{informer=\"v1/configmaps\"} 1",
        "switchyard_route_delivered_total{route=\"configmaps\"} 1",
        "switchyard_route_pending{route=\"configmaps\"} 0",
        "switchyard_handler_processed_total{name=\"log-events\"} 1",
        "switchyard_handler_failed_total{name=\"log-events\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(line)),
            "missing {line:?} in:\n{text}"
        );
    }
    t.stop().await;
}

#[tokio::test]
async fn a_requeue_after_outcome_hands_the_object_to_the_plugin_again_later() {
    let mut t = TestDaemon::start(FAULTY).await;
    let created = t
        .configmaps("default")
        .create(
            &PostParams::default(),
            &configmap("later", json!({"faulty/requeue-ms": "100"})),
        )
        .await
        .unwrap();
    let rv = created.metadata.resource_version.unwrap();
    let wanted = format!("handled added default/later rv={rv} attempt=1");
    support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.message == wanted
    })
    .await;
    // Asked to come back: the same event again, not counted as a failure.
    let again = support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.message.contains("default/later")
    })
    .await;
    assert_eq!(again.message, wanted);
    let status = t.daemon().status();
    assert_eq!(status.handlers[0].failed, 0);
    assert!(status.handlers[0].processed >= 2);
    t.stop().await;
}

/// Starts the daemon by hand: the fixture's config listens on loopback with a token, and
/// this scenario is the refusal to start without either.
#[tokio::test]
async fn the_daemon_refuses_an_admin_api_beyond_loopback_without_a_token() {
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = support::write_config(
        dir.path(),
        &format!("admin:\n  listen: 0.0.0.0:0\n{CONFIGMAPS_TO_LOG_EVENTS}"),
    );
    // Validation refuses such a config with its place; the daemon checks again, as a last
    // guard, whatever config it is handed.
    let refused = config::load(&path).unwrap_err().to_string();
    assert!(refused.contains("admin.listen: "), "{refused}");
    let text = std::fs::read_to_string(&path).unwrap();
    let loopback = dir.path().join("loopback.yaml");
    std::fs::write(&loopback, text.replace("0.0.0.0:0", "127.0.0.1:0")).unwrap();
    let mut config = config::load(&loopback).unwrap();
    config.admin_listen = "0.0.0.0:0".parse().unwrap();
    let options = Options {
        client: Some(sim.client().unwrap()),
        admin_listen: None,
        probes_listen: Some(None),
        watch_config: true,
        ..Options::default()
    };
    let err = Daemon::start(config, options).await.err().expect("refused");
    assert!(
        err.to_string().contains("beyond loopback, without a token"),
        "{err}"
    );
    sim.stop().await;
}

#[tokio::test]
async fn pause_holds_events_in_the_queue_and_resume_hands_them_over() {
    let mut t = TestDaemon::start(FAULTY).await;

    let refused = reqwest::Client::new()
        .post(t.url("/handlers/faulty/pause"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401, "pausing needs the token");
    let (_, paused) = t.post("/handlers/faulty/pause").await;
    assert_eq!(
        paused,
        json!({"handler": "faulty", "paused": true, "changed": true})
    );

    let api = t.configmaps("default");
    api.create(&PostParams::default(), &configmap("held", json!({})))
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &configmap("failing", json!({"faulty/error": "boom"})),
    )
    .await
    .unwrap();
    let detail = support::eventually("both events to wait", Duration::from_secs(30), async || {
        let (_, detail) = t.get("/handlers/faulty").await;
        (detail["queue_depth"] == 2).then_some(detail)
    })
    .await;
    assert_eq!(detail["paused"], true);
    assert_eq!(detail["processed"], 0);
    assert_eq!(detail["max_retries"], 2);

    let (code, _) = t.post("/handlers/faulty/resume").await;
    assert_eq!(code, 200);
    support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.message.contains("default/held")
    })
    .await;
    let detail = support::eventually(
        "the failure to be recorded",
        Duration::from_secs(30),
        async || {
            let (_, detail) = t.get("/handlers/faulty").await;
            (detail["last_errors"]
                .as_array()
                .is_some_and(|e| !e.is_empty()))
            .then_some(detail)
        },
    )
    .await;
    let error = &detail["last_errors"][0];
    assert_eq!(error["object"], "configmaps/default/failing");
    assert_eq!(error["error"], "boom");
    assert!(
        detail["latency"]["calls"].as_u64().unwrap() >= 2,
        "{detail:#}"
    );

    let (_, routes) = t.get("/routes").await;
    assert_eq!(routes["routes"][0]["name"], "configmaps");
    assert_eq!(routes["routes"][0]["handler"], "faulty");
    let missing = reqwest::get(t.url("/handlers/nope")).await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);

    let verbose = reqwest::get(t.url("/readyz?verbose")).await.unwrap();
    assert_eq!(verbose.status().as_u16(), 200);
    let text = verbose.text().await.unwrap();
    assert!(text.contains("[+]informer v1/configmaps synced"), "{text}");
    assert!(text.ends_with("readyz check passed\n"), "{text}");
    t.stop().await;
}

#[tokio::test]
async fn the_openapi_description_lists_every_endpoint_the_api_serves() {
    let t = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    let (code, doc) = support::get_json(&t.url("/openapi.json")).await;
    assert_eq!(code, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    let client = reqwest::Client::new();
    let mut listed = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            listed += 1;
            let path_here = path.replace("{name}", "log-events");
            let request = match method.as_str() {
                "get" => client.get(t.url(&path_here)),
                _ => t.request(Method::POST, &path_here),
            };
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body = response.text().await.unwrap();
            assert!(
                !body.contains("no such endpoint"),
                "{method} {path} is described but not served"
            );
            assert!(status < 500, "{method} {path}: {status} {body}");
        }
    }
    assert_eq!(listed, openapi::ENDPOINTS.len());
    let unknown = client.get(t.url("/nope")).send().await.unwrap();
    assert_eq!(unknown.status().as_u16(), 404);
    assert!(unknown.text().await.unwrap().contains("no such endpoint"));
    t.stop().await;
}

#[tokio::test]
async fn a_second_daemon_on_a_busy_admin_port_fails_before_it_talks_to_the_api_server() {
    let first = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    // The second daemon's own API server counts every request it gets: each would use one of
    // these failures.
    let sim = support::start_sim().await;
    let failures = switchyard::sim::RequestFailure::internal_error(1000);
    sim.faults().fail_next_requests(failures).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = support::write_config(dir.path(), CONFIGMAPS_TO_LOG_EVENTS);
    let options = Options {
        client: Some(sim.client().unwrap()),
        admin_listen: Some(first.daemon().admin_addr()),
        probes_listen: Some(None),
        watch_config: false,
        ..Options::default()
    };
    let err = Daemon::start(config::load(&path).unwrap(), options)
        .await
        .err()
        .expect("the busy port refuses the second daemon");
    assert!(err.to_string().contains("cannot listen on"), "{err}");
    let left = sim.faults().status().failures;
    assert_eq!(left.len(), 1, "no request reached the API server: {left:?}");
    assert_eq!(left[0].count, 1000, "no request reached the API server");
    sim.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn a_body_too_large_is_answered_as_json() {
    let t = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    let response = t
        .request(Method::POST, "/handlers/log-events/dead-letters/purge")
        .body(vec![b' '; 3 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let body: serde_json::Value = response.json().await.expect("a JSON body");
    assert_eq!(body["status"], 413, "{body:#}");
    assert!(
        body["error"].as_str().unwrap().contains("length limit"),
        "{body:#}"
    );
    t.stop().await;
}

#[tokio::test]
async fn a_wrong_method_or_a_path_that_is_not_utf8_is_answered_as_json() {
    let t = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    let response = t.request(Method::PUT, "/status").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 405);
    assert_eq!(response.headers()["allow"], "GET,HEAD");
    let body: serde_json::Value = response.json().await.expect("a JSON body");
    assert_eq!(
        body,
        serde_json::json!({"error": "method not allowed on this endpoint; the Allow header lists those it takes", "status": 405})
    );
    let (code, body) = t.get("/handlers/%ff%fe").await;
    assert_eq!(code, 400, "{body:#}");
    assert_eq!(body["status"], 400, "{body:#}");
    assert!(
        body["error"].as_str().unwrap().contains("Invalid UTF-8"),
        "{body:#}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_verbose_says_forbidden_when_the_api_server_refuses_the_list() {
    let t = TestDaemon::start(CONFIGMAPS_TO_LOG_EVENTS).await;
    // Neither a paged list nor a streaming one (a watch) is allowed.
    let forbidden = switchyard::sim::RequestFailure::forbidden(1000).only(&["list", "watch"]);
    t.sim().faults().fail_next_requests(forbidden).unwrap();
    // A route on secrets: its informer's first list is refused.
    t.write_config(&format!(
        "{CONFIGMAPS_TO_LOG_EVENTS}  - name: secrets\n    resource: secrets\n    handler: log-events\n"
    ));
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 200, "{body:#}");
    let text = support::eventually(
        "readyz says forbidden",
        Duration::from_secs(30),
        async || {
            let response = reqwest::get(t.url("/readyz?verbose")).await.ok()?;
            let code = response.status().as_u16();
            let text = response.text().await.ok()?;
            (code == 503 && text.contains("forbidden")).then_some(text)
        },
    )
    .await;
    assert!(
        text.contains(
            "[-]informer v1/secrets forbidden: listing failed: forbidden: injected fault (403)"
        ),
        "{text}"
    );
    t.sim().faults().clear();
    t.stop().await;
}

#[tokio::test]
async fn the_admin_api_refuses_hosts_it_does_not_answer_for_so_dns_rebinding_reads_nothing() {
    let t = TestDaemon::start(&format!(
        "admin:\n  token_file: admin-token\n  allowed_hosts: [switchyard-admin.ops.svc]\n{CONFIGMAPS_TO_LOG_EVENTS}"
    ))
    .await;
    let port = t.daemon().admin_addr().port();
    let http = reqwest::Client::new();
    let get = async |path: &str, host: &str| {
        let response = http
            .get(t.url(path))
            .header(reqwest::header::HOST, host)
            .send()
            .await
            .unwrap();
        let code = response.status().as_u16();
        (code, response.text().await.unwrap())
    };
    // A page served as evil.example, its name pointed at 127.0.0.1, reads nothing: not the
    // reads that need no token on loopback, not the status page.
    let evil_port = format!("evil.example:{port}");
    for path in ["/status", "/handlers/log-events/dead-letters", "/", "/nope"] {
        for host in ["evil.example", evil_port.as_str()] {
            let (code, body) = get(path, host).await;
            assert_eq!(code, 421, "{path} for {host}: {body}");
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["host"], host, "{body}");
            let error = body["error"].as_str().unwrap();
            assert!(
                error.contains(&format!("does not answer for host {host:?}")),
                "{error}"
            );
            assert!(
                error.contains("add it to admin.allowed_hosts and restart"),
                "{error}"
            );
        }
    }
    // The token does not make another host right.
    let with_token = http
        .post(t.url("/handlers/log-events/pause"))
        .header(reqwest::header::HOST, "evil.example")
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(with_token.status().as_u16(), 421);
    let handler = t.daemon().handler("log-events").unwrap();
    assert!(
        !handler.status().paused,
        "the refused request changed nothing"
    );
    // Its address, loopback's names on any port, and the configured name are answered.
    let own = format!("127.0.0.1:{port}");
    let localhost = format!("localhost:{port}");
    for host in [
        own.as_str(),
        "127.0.0.1",
        localhost.as_str(),
        "localhost:8080",
        "[::1]:9470",
        "switchyard-admin.ops.svc:9470",
        "Switchyard-Admin.ops.svc",
    ] {
        for path in ["/status", "/handlers/log-events/dead-letters", "/"] {
            let (code, body) = get(path, host).await;
            assert_eq!(code, 200, "{path} for {host}: {body}");
        }
    }
    // The probes answer whatever the host: kubelet sends the pod's IP.
    for host in ["evil.example", "10.0.0.5:9471"] {
        let probe = http
            .get(t.probes_url("/livez"))
            .header(reqwest::header::HOST, host)
            .send()
            .await
            .unwrap();
        assert_eq!(probe.status().as_u16(), 200, "{host}");
    }
    t.stop().await;
}
