//! A watch stream's frames, read by the informer's list+watch loop over real HTTP: a
//! loopback API server lists ConfigMaps truthfully, then answers the informer's watches
//! with generated bodies (valid events, truncated and merged lines, garbage bytes, wrong
//! JSON types, objects without metadata or resourceVersion, ERROR events with odd Status,
//! very long lines, split at random byte boundaries across chunks, or cut off mid-body)
//! and generated error answers. The informer must never panic or stop: it reports each
//! failure in its health and retries, and once the server expires the watch (410) and
//! lists again its cache equals the server's content, then follows a valid watch event.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::{Value, json};
use switchyard::config::ResourceName;
use switchyard::informer::{CacheOptions, InformerFactory, WatchKey};

use crate::support;

/// The list's resourceVersion; the objects of the list are older.
const LIST_RV: u64 = 300;

/// How long a case may take to converge after its garbage.
const CONVERGE: Duration = Duration::from_secs(15);

/// How one watch request is answered.
#[derive(Debug, Clone)]
enum Answer {
    /// An HTTP error status with this body.
    Failure(u16, Vec<u8>),
    /// 200 and a body sent in these chunks, then ended, or cut off when `abort`.
    Stream { chunks: Vec<Vec<u8>>, abort: bool },
}

/// What the server answers: the truth for every list, the scripted watches in order, then
/// a 410 ERROR event, then a valid ADDED event on a watch that stays open.
struct Server {
    truth: Vec<Value>,
    watches: Mutex<VecDeque<Answer>>,
    expired: Mutex<bool>,
}

fn configmap(name: &str, rv: u64) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": rv.to_string()},
        "data": {"v": rv.to_string()},
    })
}

fn fresh() -> Value {
    configmap("fresh", LIST_RV + 1)
}

fn line(value: &Value) -> Bytes {
    Bytes::from(format!("{value}\n"))
}

async fn core_resources() -> impl IntoResponse {
    axum::Json(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "v1",
        "resources": [{
            "name": "configmaps", "singularName": "configmap", "namespaced": true,
            "kind": "ConfigMap", "verbs": ["get", "list", "watch"],
        }],
    }))
}

async fn configmaps(
    State(server): State<Arc<Server>>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    if query.get("watch").map(String::as_str) != Some("true") {
        return axum::Json(json!({
            "kind": "ConfigMapList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": LIST_RV.to_string()},
            "items": server.truth,
        }))
        .into_response();
    }
    // A server without streaming lists (the WatchList feature) refuses them as invalid.
    if query.contains_key("sendInitialEvents") {
        let refused = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422,
            "reason": "Invalid", "message": "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"});
        return (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(refused)).into_response();
    }
    let next = server.watches.lock().unwrap().pop_front();
    match next {
        Some(Answer::Failure(code, body)) => {
            let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (code, body).into_response()
        }
        Some(Answer::Stream { chunks, abort }) => {
            let chunks = chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from(c)));
            let end = abort.then(|| Err(std::io::Error::other("cut off")));
            Body::from_stream(futures::stream::iter(chunks.chain(end))).into_response()
        }
        None => {
            let mut expired = server.expired.lock().unwrap();
            if !*expired {
                *expired = true;
                let status = json!({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "too old resource version", "reason": "Expired", "code": 410,
                }});
                return Body::from(line(&status)).into_response();
            }
            let added = futures::stream::iter([Ok::<_, Infallible>(line(
                &json!({"type": "ADDED", "object": fresh()}),
            ))])
            .chain(futures::stream::pending());
            Body::from_stream(added).into_response()
        }
    }
}

/// Serves `server` on a free loopback port; returns its URL.
async fn serve(server: Arc<Server>) -> String {
    let app = axum::Router::new()
        .route(
            "/api",
            get(async || axum::Json(json!({"kind": "APIVersions", "versions": ["v1"]}))),
        )
        .route("/api/v1", get(core_resources))
        .route("/api/v1/namespaces/default/configmaps", get(configmaps))
        .with_state(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// One frame of a watch body, without its line end.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    let name = prop::sample::select(vec!["a", "b", "c", "d", "e", "fresh", ""]);
    let rv = 1u64..1000;
    let kind = prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED"]);
    let valid = (kind, name.clone(), rv.clone())
        .prop_map(|(k, n, rv)| json!({"type": k, "object": configmap(n, rv)}));
    let bookmark = rv.clone().prop_map(|rv| {
        json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1",
               "metadata": {"resourceVersion": rv.to_string()}}})
    });
    let odd = odd_json();
    let error = (odd.clone(), any::<String>(), odd.clone(), any::<bool>()).prop_map(
        |(code, message, details, gone)| {
            let code = if gone { json!(410) } else { code };
            json!({"type": "ERROR", "object": {"kind": "Status", "code": code,
                   "message": message, "reason": "x", "details": details}})
        },
    );
    let broken_object = (
        prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED"]),
        odd.clone(),
        odd.clone(),
    )
        .prop_map(|(k, metadata, rv)| {
            json!({"type": k, "object": {"kind": "ConfigMap", "apiVersion": "v1",
                   "metadata": {"name": metadata, "resourceVersion": rv, "labels": metadata}}})
        });
    let no_metadata = prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED"])
        .prop_map(|k| json!({"type": k, "object": {"kind": "ConfigMap", "data": {}}}));
    let no_rv = (name, prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED"])).prop_map(
        |(n, k)| json!({"type": k, "object": {"metadata": {"name": n, "namespace": "default"}}}),
    );
    let wrong_types = prop_oneof![
        odd.clone(),
        odd.clone().prop_map(|t| json!({"type": t, "object": {}})),
        (
            prop::sample::select(vec!["ADDED", "BOOKMARK", "ERROR", "NOPE"]),
            odd
        )
            .prop_map(|(k, o)| json!({"type": k, "object": o})),
    ];
    let as_bytes = |v: Value| v.to_string().into_bytes();
    prop_oneof![
        6 => valid.clone().prop_map(as_bytes),
        1 => bookmark.prop_map(as_bytes),
        2 => error.prop_map(as_bytes),
        2 => broken_object.prop_map(as_bytes),
        1 => no_metadata.prop_map(as_bytes),
        1 => no_rv.prop_map(as_bytes),
        2 => wrong_types.prop_map(as_bytes),
        2 => prop::collection::vec(any::<u8>(), 0..64),
        2 => (valid.clone(), any::<prop::sample::Index>()).prop_map(|(v, cut)| {
            let bytes = v.to_string().into_bytes();
            bytes[..cut.index(bytes.len())].to_vec()
        }),
        1 => (valid, 100_000usize..400_000).prop_map(|(mut v, size)| {
            v["object"]["data"] = json!({"big": "x".repeat(size)});
            v.to_string().into_bytes()
        }),
        1 => (100_000usize..400_000).prop_map(|size| vec![b'{'; size]),
    ]
}

/// A JSON value of any type, some odd.
fn odd_json() -> BoxedStrategy<Value> {
    super::odd_json(any::<String>().boxed(), "[a-z]{0,4}".boxed(), 4)
}

/// A watch body: frames, each followed by a line end or (merged with the next) not, split
/// into chunks at random byte boundaries.
fn stream() -> impl Strategy<Value = Answer> {
    (
        prop::collection::vec((frame(), prop::bool::weighted(0.85)), 0..8),
        prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(frames, cuts, abort)| {
            let mut body = Vec::new();
            for (frame, newline) in frames {
                body.extend(frame);
                if newline {
                    body.push(b'\n');
                }
            }
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut chunks = Vec::new();
            let mut start = 0;
            for cut in cuts.into_iter().chain([body.len()]) {
                chunks.push(body[start..cut.max(start)].to_vec());
                start = cut.max(start);
            }
            Answer::Stream { chunks, abort }
        })
}

fn answer() -> impl Strategy<Value = Answer> {
    let failure = (
        prop::sample::select(vec![400u16, 401, 403, 404, 410, 422, 429, 500, 503, 504]),
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..64),
            (odd_json(), any::<String>()).prop_map(|(code, message)| json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "code": code, "message": message,
            })
            .to_string()
            .into_bytes()),
        ],
    )
        .prop_map(|(code, body)| Answer::Failure(code, body));
    prop_oneof![1 => failure, 4 => stream()]
}

/// Runs one case: returns once the informer converged, panics if it did not.
async fn run_case(truth: BTreeMap<&'static str, u64>, answers: Vec<Answer>) {
    let failures = answers
        .iter()
        // kube's client retries 429, 503 and 504 itself.
        .filter(|a| matches!(a, Answer::Failure(code, _) if ![429, 503, 504].contains(code)))
        .count() as u64;
    let server = Arc::new(Server {
        truth: truth.iter().map(|(n, rv)| configmap(n, *rv)).collect(),
        watches: Mutex::new(answers.into()),
        expired: Mutex::new(false),
    });
    let url = serve(server).await;
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let factory = InformerFactory::new(client).with_retry_delay(Duration::from_millis(2));
    let key = WatchKey {
        resource: ResourceName::parse("configmaps").unwrap(),
        namespace: Some("default".into()),
        label_selector: None,
        field_selector: None,
    };
    let informer = factory
        .informer(key, CacheOptions::default())
        .await
        .unwrap();
    let mut want: BTreeMap<String, String> = truth
        .iter()
        .map(|(n, rv)| (format!("default/{n}"), rv.to_string()))
        .collect();
    want.insert("default/fresh".into(), (LIST_RV + 1).to_string());
    crate::support::eventually(
        "the cache to equal the server's content and the valid watch event",
        CONVERGE,
        async || (support::cached(&informer) == want && informer.is_synced()).then_some(()),
    )
    .await;
    let health = informer.health();
    assert!(
        health.restarts > failures,
        "each failed watch and the expiry counted: {health:?}"
    );
    assert_eq!(health.last_error, None, "cleared once watching again");
    factory.shutdown();
}

fn truth() -> impl Strategy<Value = BTreeMap<&'static str, u64>> {
    prop::collection::btree_map(
        prop::sample::select(vec!["a", "b", "c", "d", "e"]),
        1..LIST_RV,
        0..5,
    )
}

proptest! {
    #![proptest_config(super::cases(32))]

    #[test]
    fn fuzz_watch_frames_never_stop_the_informer_and_it_converges(
        truth in truth(),
        answers in prop::collection::vec(answer(), 1..4),
    ) {
        // A runtime per case: dropping it ends the watches the server still holds open.
        super::runtime().block_on(run_case(truth, answers));
    }
}
