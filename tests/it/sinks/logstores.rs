//! The batch sinks `builtin:loki` and `builtin:elasticsearch` in the daemon, against
//! receivers on loopback that read the request as the vendor documents it (Loki's push JSON,
//! Elasticsearch's `_bulk` NDJSON) and answer as the vendor does (204; a bulk answer with an
//! outcome per document).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use super::{WAIT, config_for};
use crate::support::{self, TestDaemon};

/// A receiver's address and what it was sent.
struct Server<T> {
    url: String,
    seen: Arc<Mutex<T>>,
}

/// Serves `router` on a loopback port.
async fn serve<T: Default + Send + 'static>(
    router: impl FnOnce(Arc<Mutex<T>>) -> axum::Router,
) -> Server<T> {
    let seen = Arc::new(Mutex::new(T::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = router(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server { url, seen }
}

/// The yaml for handler `sink` running `plugin` in batches with one worker.
fn batch_config(plugin: &str, config: Value, allow: &str) -> String {
    config_for(
        plugin,
        config,
        allow,
        "    resource: configmaps\n    namespace: default",
    )
    .replace(
        "    instance: reuse\n",
        "    instance: reuse\n    concurrency: 1\n    batch:\n      max_wait: 1s\n",
    )
}

/// A stream as Loki reads it: its labels, and its lines (timestamp, line, structured
/// metadata).
type Stream = (
    BTreeMap<String, String>,
    Vec<(u128, String, BTreeMap<String, String>)>,
);

/// One push as Loki reads it: the tenant, the authorization, and each stream's labels and
/// lines (timestamp, line, structured metadata).
#[derive(Debug, Clone)]
struct Push {
    tenant: Option<String>,
    authorization: Option<String>,
    streams: Vec<Stream>,
}

/// Loki's push endpoint: the body must be the documented JSON (string labels; values of
/// `[<unix ns as a string>, <line>]` or with a third element of string metadata), or it is
/// refused with a 400 as Loki refuses it; a push is answered 204. With `refuse` set, a
/// valid push is refused as Loki refuses an entry too old.
#[derive(Default)]
struct LokiSeen {
    pushes: Vec<Push>,
    refuse: bool,
}

async fn loki_push(
    State(seen): State<Arc<Mutex<LokiSeen>>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_string());
    let push = match parse_push(&body) {
        Ok(streams) => Push {
            tenant: header("x-scope-orgid"),
            authorization: header("authorization"),
            streams,
        },
        Err(why) => return (StatusCode::BAD_REQUEST, why).into_response(),
    };
    let mut seen = seen.lock().unwrap();
    if seen.refuse {
        return (StatusCode::BAD_REQUEST, "entry too far behind").into_response();
    }
    seen.pushes.push(push);
    StatusCode::NO_CONTENT.into_response()
}

/// The streams of a push body, or why Loki would refuse it.
fn parse_push(body: &str) -> Result<Vec<Stream>, String> {
    let body: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let strings = |v: &Value| -> Result<BTreeMap<String, String>, String> {
        v.as_object()
            .ok_or("not an object")?
            .iter()
            .map(|(k, v)| {
                Ok((
                    k.clone(),
                    v.as_str().ok_or("a value is not a string")?.to_string(),
                ))
            })
            .collect()
    };
    let mut streams = Vec::new();
    for stream in body["streams"].as_array().ok_or("no streams")? {
        let labels = strings(&stream["stream"])?;
        let mut lines = Vec::new();
        for value in stream["values"].as_array().ok_or("no values")? {
            let value = value.as_array().ok_or("a value is not an array")?;
            if !(2..=3).contains(&value.len()) {
                return Err("a value has neither 2 nor 3 elements".into());
            }
            let ns = value[0].as_str().ok_or("a timestamp is not a string")?;
            let ns: u128 = ns.parse().map_err(|_| "a timestamp is not a number")?;
            let line = value[1]
                .as_str()
                .ok_or("a line is not a string")?
                .to_string();
            let metadata = value.get(2).map(strings).transpose()?.unwrap_or_default();
            lines.push((ns, line, metadata));
        }
        streams.push((labels, lines));
    }
    Ok(streams)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loki_pushes_a_batch_as_streams_with_the_tenant_and_a_token_from_a_secret() {
    let loki = serve::<LokiSeen>(|seen| {
        axum::Router::new()
            .route("/loki/api/v1/push", axum::routing::post(loki_push))
            .with_state(seen)
    })
    .await;
    let sink = json!({
        "url": loki.url,
        "tenant": "team-a",
        "labels": {"namespace": "{{object.metadata.namespace}}", "app": "{{object.metadata.labels.app}}"},
        "line": "{{kind}} {{object.metadata.name}}",
        "structured_metadata": {"uid": "{{object.metadata.uid}}"},
        "bearer_token": {"valueFrom": {"secretKeyRef": {"name": "loki", "key": "token"}}},
    });
    let t = TestDaemon::start(&batch_config("builtin:loki", sink, &loki.url)).await;
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "loki"}})).unwrap();
    let secret = Secret {
        data: Some(BTreeMap::from([(
            "token".to_string(),
            ByteString(b"t0ken\n".to_vec()),
        )])),
        ..secret
    };
    Api::<Secret>::namespaced(t.client(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    for (name, app) in [("a", "shop"), ("b", "shop"), ("c", "db")] {
        t.create_configmap(json!({"metadata": {"name": name, "labels": {"app": app}}}))
            .await;
    }
    let pushes = support::eventually_sync("three lines pushed", WAIT, || {
        let pushes = loki.seen.lock().unwrap().pushes.clone();
        let lines: usize = pushes
            .iter()
            .flat_map(|p| &p.streams)
            .map(|(_, l)| l.len())
            .sum();
        (lines == 3).then_some(pushes)
    })
    .await;
    assert_eq!(pushes.len(), 1, "one push for the batch: {pushes:#?}");
    let push = &pushes[0];
    assert_eq!(push.tenant.as_deref(), Some("team-a"));
    assert_eq!(push.authorization.as_deref(), Some("Bearer t0ken"));
    let mut streams: Vec<(String, Vec<String>)> = push
        .streams
        .iter()
        .map(|(labels, lines)| {
            assert_eq!(labels["namespace"], "default");
            assert!(
                lines.iter().all(|(_, _, m)| m["uid"].len() > 10),
                "{lines:?}"
            );
            let texts = lines.iter().map(|(_, line, _)| line.clone()).collect();
            (labels["app"].clone(), texts)
        })
        .collect();
    streams.sort();
    assert_eq!(streams.len(), 2);
    assert_eq!(streams[0], ("db".to_string(), vec!["added c".to_string()]));
    assert_eq!(streams[1].0, "shop");
    let mut shop = streams[1].1.clone();
    shop.sort();
    assert_eq!(shop, ["added a", "added b"]);

    // Loki refuses a push whole: every event of it goes to the dead letters, saying why.
    loki.seen.lock().unwrap().refuse = true;
    t.create_configmap(json!({"metadata": {"name": "d", "labels": {"app": "shop"}}}))
        .await;
    let letters = support::eventually("a dead letter", WAIT, async || {
        let (_, body) = t.get("/handlers/sink/dead-letters").await;
        let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
        (!letters.is_empty()).then_some(letters)
    })
    .await;
    assert_eq!(letters[0]["id"], "sink/default/d", "{letters:#?}");
    assert_eq!(
        letters[0]["last_error"],
        "permanent: the receiver answered 400: entry too far behind"
    );
    t.stop().await;
}

/// An Elasticsearch `_bulk` endpoint: reads the NDJSON (an action line naming `_index` and
/// `_id`, then the document), keeps each document by index and id, and answers with an item
/// per document as Elasticsearch does: 201 created, 409 for a `create` of an id already
/// there, 400 `mapper_parsing_exception` for a document whose `name` is `bad`.
#[derive(Default)]
struct EsSeen {
    documents: BTreeMap<(String, String), Value>,
    requests: usize,
}

async fn es_bulk(
    State(seen): State<Arc<Mutex<EsSeen>>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if headers.get("content-type").map(|v| v.to_str().unwrap()) != Some("application/x-ndjson") {
        return (
            StatusCode::NOT_ACCEPTABLE,
            "bulk needs application/x-ndjson",
        )
            .into_response();
    }
    let lines: Vec<Value> = match body.lines().map(serde_json::from_str).collect() {
        Ok(lines) => lines,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}")).into_response(),
    };
    let mut seen = seen.lock().unwrap();
    seen.requests += 1;
    let mut items = Vec::new();
    for pair in lines.chunks(2) {
        let [action, document] = pair else {
            return (StatusCode::BAD_REQUEST, "an action without its document").into_response();
        };
        let (name, meta) = action.as_object().unwrap().iter().next().unwrap();
        let key = (
            meta["_index"].as_str().unwrap().to_string(),
            meta["_id"].as_str().unwrap().to_string(),
        );
        let (status, error) = if document["name"] == "bad" {
            (
                400,
                json!({"type": "mapper_parsing_exception", "reason": "failed to parse field [name] of type [long]"}),
            )
        } else if name == "create" && seen.documents.contains_key(&key) {
            (
                409,
                json!({"type": "version_conflict_engine_exception", "reason": "document already exists"}),
            )
        } else {
            seen.documents.insert(key.clone(), document.clone());
            (201, Value::Null)
        };
        let mut item = json!({"_index": key.0, "_id": key.1, "status": status});
        if error.is_null() {
            item["result"] = json!("created");
        } else {
            item["error"] = error;
        }
        items.push(json!({ name.as_str(): item }));
    }
    let errors = items
        .iter()
        .any(|i| i.as_object().unwrap().values().next().unwrap()["status"] != 201);
    axum::Json(json!({"took": 1, "errors": errors, "items": items})).into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elasticsearch_indexes_a_batch_by_idempotency_key_and_dead_letters_only_the_refused_document()
 {
    let es = serve::<EsSeen>(|seen| {
        axum::Router::new()
            .route("/_bulk", axum::routing::post(es_bulk))
            .with_state(seen)
    })
    .await;
    let sink = json!({
        "url": es.url,
        "index": "k8s-{{object.metadata.namespace}}",
        "action": "create",
        "document": {"name": "{{object.metadata.name}}", "change": "{{kind}}"},
        "username": "elastic",
        "password": "changeme",
    });
    let t = TestDaemon::start(&batch_config("builtin:elasticsearch", sink, &es.url)).await;
    let mut uids = BTreeMap::new();
    for name in ["good-1", "bad", "good-2"] {
        let made = t
            .create_configmap(json!({"metadata": {"name": name}}))
            .await;
        let meta = made.metadata;
        uids.insert(
            name,
            format!(
                "{}.{}.add",
                meta.uid.unwrap(),
                meta.resource_version.unwrap()
            ),
        );
    }
    let letters = support::eventually("the bad document in the dead letters", WAIT, async || {
        let (_, body) = t.get("/handlers/sink/dead-letters").await;
        let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
        (!letters.is_empty()).then_some(letters)
    })
    .await;
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0]["id"], "sink/default/bad");
    assert_eq!(
        letters[0]["last_error"],
        "permanent: the bulk item answered 400: mapper_parsing_exception: failed to parse field [name] of type [long]"
    );
    support::eventually("the two good ones done", WAIT, async || {
        let status = t.status_json().await;
        (status["handlers"][0]["processed"] == 2).then_some(())
    })
    .await;
    let seen = es.seen.lock().unwrap();
    let ids: Vec<(String, String)> = seen.documents.keys().cloned().collect();
    let mut expected = [
        ("k8s-default".to_string(), uids["good-1"].clone()),
        ("k8s-default".to_string(), uids["good-2"].clone()),
    ];
    expected.sort();
    assert_eq!(
        ids, expected,
        "each document under its change's idempotency key"
    );
    let good = ("k8s-default".to_string(), uids["good-1"].clone());
    assert_eq!(
        seen.documents[&good],
        json!({"name": "good-1", "change": "added"})
    );
    assert_eq!(seen.requests, 1, "one bulk request for the batch");
}
