//! The simulator's request parsing: arbitrary query strings (selectors, resourceVersions,
//! limits, continue tokens, watch options), content types and bodies (objects, merge
//! patches, JSON patches, apply, garbage) sent to a running `switchyard sim` never make it
//! answer a server error or crash: every refusal is a 4xx Kubernetes Status in JSON whose
//! code is the HTTP status.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::spawned::Spawned;

/// A `switchyard sim` process, ended when dropped.
struct Sim {
    child: Spawned,
    url: String,
}

impl Sim {
    fn start() -> Self {
        let mut child = Spawned::start(
            Command::new(env!("CARGO_BIN_EXE_switchyard"))
                .args(["sim", "--listen", "127.0.0.1:0", "--prefill", "3"])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
            "switchyard sim",
        );
        let stdout = child.child().stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines.next().expect("the simulator's address").unwrap();
            if let Some(url) = line.strip_prefix("simulator: ") {
                break url.trim().to_string();
            }
        };
        // Keep reading its output so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Sim { child, url }
    }

    fn still_running(&mut self) -> bool {
        self.child.child().try_wait().unwrap().is_none()
    }
}

/// One request: method, path, query, content type and body.
#[derive(Debug, Clone)]
struct Request {
    method: reqwest::Method,
    path: String,
    query: Vec<(String, String)>,
    content_type: Option<&'static str>,
    body: Text,
}

/// Bytes shown as text when a case fails.
#[derive(Clone)]
struct Text(Vec<u8>);

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

fn path() -> impl Strategy<Value = String> {
    let collection = prop::sample::select(vec![
        "/api/v1/namespaces/default/configmaps",
        "/api/v1/configmaps",
        "/api/v1/namespaces",
        "/api/v1/namespaces/default/pods",
        "/api/v1/nodes",
        "/apis/apps/v1/namespaces/default/deployments",
        "/apis/apps/v1/deployments",
        "/api/v1/namespaces/default/events",
        "/apis/events.k8s.io/v1/namespaces/default/events",
    ]);
    let name = prop_oneof![
        prop::sample::select(vec!["prefill-0", "x", "", "..", "a%2Fb", "%00", "status"])
            .prop_map(String::from),
        "[a-zA-Z0-9._~%-]{1,20}",
    ];
    let suffix = prop::sample::select(vec!["", "/status", "/scale", "/log", "/x/y/z"]);
    prop_oneof![
        collection.clone().prop_map(String::from),
        (collection, name, suffix).prop_map(|(c, n, s)| format!("{c}/{n}{s}")),
        "/apis?/[a-z0-9./%-]{0,40}".prop_map(String::from),
    ]
}

fn query() -> impl Strategy<Value = Vec<(String, String)>> {
    let key = prop_oneof![
        8 => prop::sample::select(vec![
            "labelSelector", "fieldSelector", "resourceVersion", "resourceVersionMatch",
            "limit", "continue", "watch", "timeoutSeconds", "allowWatchBookmarks",
            "sendInitialEvents", "fieldManager", "force", "dryRun", "propagationPolicy",
            "gracePeriodSeconds", "pretty", "includeObject", "fieldValidation",
        ])
        .prop_map(String::from),
        1 => any::<String>(),
    ];
    let value = prop_oneof![
        prop::sample::select(vec![
            "",
            "0",
            "1",
            "-1",
            "true",
            "false",
            "NotOlderThan",
            "Exact",
            "x",
            "a=b",
            "a in (x,y),!b",
            "metadata.name=prefill-0",
            "metadata.name in (x)",
            "(",
            "!",
            "spec.nope=1",
            "18446744073709551616",
            "1e3",
            "Foreground",
            "All",
        ])
        .prop_map(String::from),
        any::<String>(),
    ];
    prop::collection::vec((key, value), 0..4)
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let name = prop::sample::select(vec!["prefill-0", "new", "", "Bad_Name"]);
    let object = (name, odd_json(), odd_json()).prop_map(|(n, data, meta)| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": n, "labels": meta, "resourceVersion": data}, "data": data})
    });
    let op = prop::sample::select(vec![
        "add", "remove", "replace", "move", "copy", "test", "x",
    ]);
    let pointer = prop::sample::select(vec![
        "",
        "/",
        "/data",
        "/data/a",
        "/metadata/name",
        "/metadata/labels/~1",
        "/a/-",
        "/data/99999999999999999999",
        "/metadata/resourceVersion",
        "~",
    ]);
    let patch =
        prop::collection::vec((op, pointer.clone(), pointer, odd_json()), 0..4).prop_map(|ops| {
            Value::Array(
                ops.into_iter()
                    .map(|(op, path, from, value)| {
                        json!({"op": op, "path": path, "from": from, "value": value})
                    })
                    .collect(),
            )
        });
    prop_oneof![
        3 => object.prop_map(|v| v.to_string().into_bytes()),
        2 => patch.prop_map(|v| v.to_string().into_bytes()),
        2 => odd_json().prop_map(|v| v.to_string().into_bytes()),
        1 => (1usize..300).prop_map(|d| format!("{}{}", "[".repeat(d), "]".repeat(d)).into_bytes()),
        1 => (1usize..300).prop_map(|d| format!("{}1{}", "{\"a\":".repeat(d), "}".repeat(d)).into_bytes()),
        2 => prop::collection::vec(any::<u8>(), 0..128),
    ]
}

/// A JSON value of any type, some odd.
fn odd_json() -> BoxedStrategy<Value> {
    super::odd_json(any::<String>().boxed(), "[a-z]{0,4}".boxed(), 3)
}

fn request() -> impl Strategy<Value = Request> {
    let method = prop::sample::select(vec![
        reqwest::Method::GET,
        reqwest::Method::POST,
        reqwest::Method::PUT,
        reqwest::Method::PATCH,
        reqwest::Method::DELETE,
    ]);
    let content_type = prop::sample::select(vec![
        None,
        Some("application/json"),
        Some("application/merge-patch+json"),
        Some("application/json-patch+json"),
        Some("application/strategic-merge-patch+json"),
        Some("application/apply-patch+yaml"),
        Some("application/vnd.kubernetes.protobuf"),
        Some("text/plain; charset=x-odd"),
        Some("application/json; charset=utf-16"),
    ]);
    (method, path(), query(), content_type, body()).prop_map(
        |(method, path, query, content_type, body)| Request {
            method,
            path,
            query,
            content_type,
            body: Text(body),
        },
    )
}

/// Sends `request`; checks the answer is a success or a 4xx Status.
async fn check(client: &reqwest::Client, url: &str, request: &Request) {
    let mut builder = client
        .request(request.method.clone(), format!("{url}{}", request.path))
        .query(&request.query)
        .body(request.body.0.clone());
    if let Some(content_type) = request.content_type {
        builder = builder.header("content-type", content_type);
    }
    let response = builder
        .send()
        .await
        .unwrap_or_else(|e| panic!("no answer to {request:?}: {e}"));
    let code = response.status().as_u16();
    if code < 400 {
        // A watch stays open: its first answer is enough.
        return;
    }
    let body = tokio::time::timeout(Duration::from_secs(10), response.bytes())
        .await
        .expect("an error body within 10 s")
        .expect("the error body");
    let status: Value = serde_json::from_slice(&body).unwrap_or_else(|_| {
        panic!(
            "{code} without a JSON Status: {:?} for {request:?}",
            String::from_utf8_lossy(&body)
        )
    });
    assert_eq!(status["kind"], "Status", "{status} for {request:?}");
    assert_eq!(status["code"], code, "{status} for {request:?}");
    // A resourceVersion the server has not reached yet is answered as kube-apiserver does.
    let too_large = code == 504
        && status["message"]
            .as_str()
            .is_some_and(|m| m.contains("Too large resource version"));
    assert!(code < 500 || too_large, "{status} for {request:?}");
}

#[test]
fn fuzz_sim_requests_get_a_success_or_a_4xx_status() {
    let mut sim = Sim::start();
    let runtime = super::runtime();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(super::cases(512));
    let url = sim.url.clone();
    let result = runner.run(&prop::collection::vec(request(), 1..4), |requests| {
        runtime.block_on(async {
            for request in &requests {
                check(&client, &url, request).await;
            }
        });
        Ok(())
    });
    assert!(sim.still_running(), "the simulator exited");
    if let Err(e) = result {
        panic!("{e}");
    }
    // And it still serves.
    let version = runtime.block_on(async {
        client
            .get(format!("{url}/version"))
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(version, 200);
}
