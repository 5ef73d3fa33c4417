//! The simulator's server-side sharded list and watch (KEP-5866) behind its feature gate:
//! `shardSelector` filters lists and watches by the FNV-1a hash of the uid or namespace and
//! is echoed in `ListMeta.shardInfo`; a bad selector is a 400 Status saying why; with the
//! gate off the parameter is ignored, as an older API server does.

use serde_json::{Value, json};
use switchyard::sharding::{ShardSelector, fnv1a64};
use switchyard::sim::{SimOptions, Simulator, resources};

use crate::support::sim::{Lines, RawWatch, blocking, get_json};
use crate::support::spawned::{self, Spawned};

const LOWER: &str = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";

async fn sim(gate: bool) -> Simulator {
    let sim = Simulator::start(SimOptions {
        sharded_list_and_watch: gate,
        ..SimOptions::default()
    })
    .await
    .expect("start the simulator");
    let configmaps = resources::find("", "v1", "configmaps").unwrap();
    for i in 0..40 {
        sim.cluster()
            .create(
                configmaps,
                "default",
                json!({"metadata": {"name": format!("cm-{i}")}}),
            )
            .unwrap();
    }
    sim
}

fn url(sim: &Simulator, query: &str) -> String {
    format!("{}/api/v1/namespaces/default/configmaps?{query}", sim.url())
}

fn selector_query(selector: &str) -> String {
    format!("shardSelector={}", urlencode(selector))
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn in_lower_half(object: &Value) -> bool {
    fnv1a64(object["metadata"]["uid"].as_str().unwrap().as_bytes()) < 1 << 63
}

#[tokio::test]
async fn with_the_gate_on_a_list_holds_only_the_shard_and_echoes_the_selector() {
    let sim = sim(true).await;
    let (code, list) = get_json(&url(&sim, &selector_query(LOWER))).await;
    assert_eq!(code, 200, "{list}");
    let items = list["items"].as_array().unwrap();
    let expected = ShardSelector::parse(LOWER).unwrap().to_string();
    assert_eq!(list["metadata"]["shardInfo"]["selector"], expected.as_str());
    assert!(
        !items.is_empty() && items.len() < 40,
        "{} items",
        items.len()
    );
    assert!(items.iter().all(in_lower_half));
    let upper = "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')";
    let (_, rest) = get_json(&url(&sim, &selector_query(upper))).await;
    assert_eq!(
        items.len() + rest["items"].as_array().unwrap().len(),
        40,
        "the two halves add up to the whole"
    );
    // Pages keep the shard.
    let (_, page) = get_json(&url(&sim, &format!("{}&limit=5", selector_query(LOWER)))).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 5);
    assert!(page["items"].as_array().unwrap().iter().all(in_lower_half));
    assert!(page["metadata"]["shardInfo"].is_object(), "{page}");
}

#[tokio::test]
async fn with_the_gate_off_the_selector_is_ignored_and_nothing_is_echoed() {
    let sim = sim(false).await;
    let (code, list) = get_json(&url(&sim, &selector_query(LOWER))).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 40);
    assert!(list["metadata"].get("shardInfo").is_none(), "{list}");
    // Even one that would not parse: an older server does not read it.
    let (code, _) = get_json(&url(&sim, "shardSelector=nonsense")).await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn a_bad_selector_is_a_400_status_that_says_why() {
    let sim = sim(true).await;
    let bad = "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')";
    for path in [
        url(&sim, &selector_query(bad)),
        url(&sim, &format!("watch=true&{}", selector_query(bad))),
    ] {
        let (code, status) = get_json(&path).await;
        assert_eq!(code, 400, "{status}");
        assert_eq!(status["kind"], "Status");
        let message = status["message"].as_str().unwrap();
        assert!(
            message.starts_with("invalid shardSelector")
                && message.contains("unsupported field \"object.metadata.name\""),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_watch_sends_only_changes_to_objects_in_its_shard() {
    let sim = sim(true).await;
    let (_, list) = get_json(&url(&sim, "")).await;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = RawWatch::open(&url(
        &sim,
        &format!("watch=true&resourceVersion={rv}&{}", selector_query(LOWER)),
    ))
    .await;
    let configmaps = resources::find("", "v1", "configmaps").unwrap();
    let mut inside = 0;
    for i in 0..20 {
        let created = sim
            .cluster()
            .create(
                configmaps,
                "default",
                json!({"metadata": {"name": format!("new-{i}")}}),
            )
            .unwrap();
        inside += usize::from(in_lower_half(&created));
    }
    assert!(inside > 0);
    for _ in 0..inside {
        let event = watch.next().await.expect("an event");
        assert_eq!(event["type"], "ADDED");
        assert!(in_lower_half(&event["object"]), "{event}");
    }
}

#[tokio::test]
async fn switchyard_sim_takes_the_gate_from_its_flag_and_refuses_an_unknown_gate() {
    let refused = spawned::output(
        std::process::Command::new(env!("CARGO_BIN_EXE_switchyard")).args([
            "sim",
            "--feature-gates",
            "Sharded=true",
        ]),
        "switchyard sim",
    );
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("unknown feature gate \"Sharded\""),
        "{stderr}"
    );
    let child = Spawned::start(
        std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args([
                "sim",
                "--prefill",
                "20",
                "--feature-gates",
                "ShardedListAndWatch=true",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
        "switchyard sim",
    );
    let (line, _running) = blocking(move || {
        let mut lines = Lines::follow(child);
        let line = lines.wait_for(std::time::Duration::from_secs(20), |l| {
            l.starts_with("simulator: ")
        });
        (line, lines)
    })
    .await;
    let base = line.trim_start_matches("simulator: ").trim();
    let (code, list) = get_json(&format!(
        "{base}/api/v1/namespaces/default/configmaps?{}",
        selector_query(LOWER)
    ))
    .await;
    assert_eq!(code, 200, "{list}");
    assert!(
        list["metadata"]["shardInfo"]["selector"].is_string(),
        "{list}"
    );
    assert!(list["items"].as_array().unwrap().iter().all(in_lower_half));
}
