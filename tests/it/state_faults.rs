//! Durable state under faults, with daemons run as child processes: a kill -9 under load
//! loses no deletion of an object a plugin saw alive (write-ahead), a full disk stops the
//! plugin calls and `/readyz` until space is back and then loses nothing (a reload, a stop
//! and a start meanwhile not waiting for it), and a file that is not a complete store is
//! refused.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use switchyard::sim::ChurnConfig;

use crate::state::{Child, WAIT};
use crate::support::spawned::{self, Spawned};
use crate::support::{self, eventually};

/// What the `log-events` plugin logged in `lines`: (kind, route, namespace/name).
fn logged(lines: &[String]) -> Vec<(String, String, String)> {
    lines
        .iter()
        .filter_map(|line| {
            let at = line.find(" ConfigMap ")?;
            let before = line[..at].trim_end_matches(" (final state unknown)");
            let kind = ["added", "updated", "deleted"]
                .into_iter()
                .find(|k| before.ends_with(&format!(" {k}")))?;
            let after = &line[at + " ConfigMap ".len()..];
            let key = after.split_whitespace().next()?.to_string();
            let route = after
                .split_whitespace()
                .find_map(|w| w.strip_prefix("route="))?
                .to_string();
            Some((kind.to_string(), route, key))
        })
        .collect()
}

/// What the `log-events` plugin logged so far in `child`.
fn calls(child: &Child) -> Vec<(String, String, String)> {
    logged(&child.process.lines())
}

/// Waits until every handler's queue is empty and the store has committed everything.
async fn settled(child: &Child) {
    eventually(
        "the queues empty and the store committed",
        WAIT,
        async || {
            let status = child.status().await;
            let idle = status["handlers"]
                .as_array()?
                .iter()
                .all(|h| h["queue_depth"] == 0 && h["in_flight"] == 0);
            (idle && status["state"]["pending_writes"] == 0).then_some(())
        },
    )
    .await;
}

/// Three handlers over every ConfigMap, one of them delivering every change.
const THREE_HANDLERS: &str = "state_dir: state
admin:
  listen: 127.0.0.1:0
  probes_listen: null
handlers:
  h1: {plugin: log-events, concurrency: 4}
  h2: {plugin: log-events, concurrency: 4}
  h3: {plugin: log-events, concurrency: 4}
routes:
  - {name: r1, resource: configmaps, handler: h1}
  - {name: r2, resource: configmaps, handler: h2}
  - {name: r3, resource: configmaps, handler: h3, delivery: every, backlog: 100000}
";

/// Regression: under load the writer's queue ran thousands of changes behind, and a
/// plugin was called before the store held its event; a kill -9 then lost the record of
/// objects the plugins had seen, and their deletions while the daemon was down were never
/// delivered (163 handled, 146 deletions). Now every object a route's plugin saw alive gets
/// its deletion after the restart.
#[tokio::test]
async fn a_kill_under_load_loses_no_deletion_of_an_object_a_plugin_saw() {
    const OBJECTS: usize = 400;
    let sim = support::start_sim().await;
    let client = sim.client().unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let load: Namespace = serde_json::from_value(json!({"metadata": {"name": "load"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &load)
        .await
        .unwrap();
    let churn = sim.start_churn(ChurnConfig {
        namespace: "load".into(),
        objects: 500,
        rate: 500.0,
        prefill: true,
        ..ChurnConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    support::write_config(dir.path(), THREE_HANDLERS);
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let first = Child::start(dir.path(), &kubeconfig).await;
    for i in 0..OBJECTS {
        let cm = support::configmap(json!({"metadata": {"name": format!("cm-{i}")}}));
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let seen_alive = |lines: &[String]| -> BTreeSet<(String, String)> {
        logged(lines)
            .into_iter()
            .filter(|(kind, _, key)| kind != "deleted" && key.starts_with("default/cm-"))
            .map(|(_, route, key)| (route, key))
            .collect()
    };
    let deadline = tokio::time::Instant::now() + WAIT * 2;
    while seen_alive(&first.process.lines()).len() < 150 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "150 objects not handled in time: {:#}",
            first.status().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let pending = first.status().await["state"]["pending_writes"].clone();
    let lines = first.process.kill();
    churn.abort();
    let alive = seen_alive(&lines);
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();

    let second = Child::start(dir.path(), &kubeconfig).await;
    let deleted = || -> BTreeSet<(String, String)> {
        calls(&second)
            .into_iter()
            .filter(|(kind, ..)| kind == "deleted")
            .map(|(_, route, key)| (route, key))
            .collect()
    };
    // The difference is delivered once the informers have listed; then the queues drain.
    let _ = tokio::time::timeout(WAIT, async {
        while !alive.is_subset(&deleted()) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    settled(&second).await;
    let deleted = deleted();
    let missed: Vec<&(String, String)> = alive.difference(&deleted).collect();
    assert!(
        missed.is_empty(),
        "{} of {} objects seen alive by a plugin got no deletion after the restart (pending writes at the kill: {pending}): {missed:?}",
        missed.len(),
        alive.len()
    );
    drop(second);
    sim.stop().await;
}

/// A tmpfs of `size` mounted on a new folder, unmounted when dropped: a disk that fills.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mounted = spawned::status(
            std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir.path()),
            "mount",
        );
        assert!(
            mounted.success(),
            "this test mounts a small tmpfs as a disk that fills up, which needs root"
        );
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file until the disk is full; returns its path.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 << 10];
        while file.write_all(&block).is_ok() {}
        // The last bytes, block by block.
        while file.write_all(&block[..512]).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        spawned::status(
            std::process::Command::new("umount")
                .arg("-l")
                .arg(self.dir.path()),
            "umount",
        );
    }
}

/// `/readyz?verbose` on the admin listener: status code and text.
async fn readyz(child: &Child) -> (u16, String) {
    let answer = reqwest::get(format!("http://{}/readyz?verbose", child.admin))
        .await
        .expect("readyz answers");
    (answer.status().as_u16(), answer.text().await.unwrap())
}

/// Regression: on a full disk the first failed commit made every later one fail until a
/// restart, `/readyz` stayed 200, plugins were called for events the store dropped, and
/// deletions of handled objects were lost. Now the writer keeps the changes and retries,
/// plugins wait for their events to be committed, `/readyz` names the store, and once
/// space is back nothing is lost, across a restart too.
#[tokio::test]
async fn a_full_disk_holds_the_plugin_calls_and_loses_nothing_once_space_is_back() {
    let disk = SmallDisk::mount("64m");
    let sim = support::start_sim().await;
    let kubeconfig = disk.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    // A small bound on the writer's queue: the informer has to wait for the store.
    let config = format!(
        "state_max_pending_writes: 30\n{}",
        crate::state::config("latest")
    );
    support::write_config(disk.path(), &config);
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let create = async |prefix: &str, n: usize, size: usize| {
        let data = "x".repeat(size);
        for i in 0..n {
            let name = format!("{prefix}-{i}");
            let cm = support::configmap(json!({"metadata": {"name": name}, "data": {"d": data}}));
            api.create(&PostParams::default(), &cm).await.unwrap();
        }
    };
    create("early", 20, 100).await;
    let child = Child::start(disk.path(), &kubeconfig).await;
    settled(&child).await;
    let (code, text) = readyz(&child).await;
    assert_eq!(code, 200, "{text}");

    // The config a reload below reads, written while there is space (a rename needs none).
    let every = disk.path().join("every.yaml");
    let written = std::fs::read_to_string(disk.path().join("switchyard.yaml")).unwrap();
    let replaced = written.replace("delivery: latest", "delivery: every\n    backlog: 100000");
    std::fs::write(&every, replaced).unwrap();
    let filler = disk.fill();
    // Objects of 800 KB: the store has to grow to keep them.
    create("late", 20, 800 << 10).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let status = loop {
        let status = child.status().await;
        let failing = status["state"]["failures"].as_u64().unwrap() >= 3;
        if failing && status["state"]["backpressure"] == true {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store not failing, or the informer not held: {:#}",
            status["state"]
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(status["state"]["failing_since"].is_string(), "{status:#}");
    let state = &status["state"];
    assert!(
        state["backpressure_waits"].as_u64().unwrap() >= 1,
        "{state:#}"
    );
    assert!(
        state["pending_writes"].as_u64().unwrap() < 40,
        "the writer's queue is bounded: {state:#}"
    );
    assert!(
        status["routes"][0]["delivered"].as_u64().unwrap() < 40,
        "the informer went on while the store was full: {status:#}"
    );
    let late_calls = |child: &Child| {
        calls(child)
            .into_iter()
            .filter(|(_, _, key)| key.starts_with("default/late-"))
            .count()
    };
    assert_eq!(
        late_calls(&child),
        0,
        "a plugin was called for an event the store could not keep"
    );
    // The events wait outside the work queue: no worker holds a key waiting for the disk.
    let handler = &child.status().await["handlers"][0];
    assert_eq!(handler["in_flight"], 0, "{handler:#}");
    let (code, text) = readyz(&child).await;
    assert_eq!(code, 503, "{text}");
    assert!(
        text.contains("state store") && text.contains("switchyard.redb"),
        "{text}"
    );
    let metrics = reqwest::get(format!("http://{}/metrics", child.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("switchyard_state_failing 1"), "{metrics}");
    assert!(
        metrics.contains("switchyard_state_backpressure 1"),
        "{metrics}"
    );

    // A reload that replaces the route, a stop and a start do not wait for the disk.
    std::fs::rename(&every, disk.path().join("switchyard.yaml")).unwrap();
    eventually("the reload applied", WAIT, async || {
        let status = child.status().await;
        (status["config"]["applied"] == 1).then_some(())
    })
    .await;
    child.process.terminate(WAIT);
    let child = Child::start(disk.path(), &kubeconfig).await;
    eventually("the restarted daemon not ready", WAIT, async || {
        let (code, text) = readyz(&child).await;
        (code == 503 && text.contains("state store")).then_some(())
    })
    .await;

    std::fs::remove_file(filler).unwrap();
    eventually("the late objects handled", WAIT, async || {
        (late_calls(&child) == 20).then_some(())
    })
    .await;
    settled(&child).await;
    assert_eq!(readyz(&child).await.0, 200);
    let status = child.status().await;
    assert!(status["state"]["failing_since"].is_null(), "{status:#}");
    let errors = child
        .process
        .lines()
        .iter()
        .filter(|l| l.contains("ERROR") && l.contains("cannot commit"))
        .count();
    assert!(errors <= 2, "{errors} ERROR lines for one run of failures");
    child.process.terminate(WAIT);

    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let again = Child::start(disk.path(), &kubeconfig).await;
    let _ = tokio::time::timeout(WAIT, async {
        while calls(&again).len() < 40 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    settled(&again).await;
    let deleted: BTreeSet<String> = calls(&again)
        .into_iter()
        .filter(|(kind, ..)| kind == "deleted")
        .map(|(.., key)| key)
        .collect();
    let wanted: BTreeSet<String> = ["early", "late"]
        .iter()
        .flat_map(|p| (0..20).map(move |i| format!("default/{p}-{i}")))
        .collect();
    assert_eq!(deleted, wanted);
    drop(again);
    sim.stop().await;
}

/// `switchyard run` on the config in `dir`, expected to exit: its standard error.
async fn run_refused(dir: &Path, kubeconfig: &Path) -> String {
    let config = dir.join("switchyard.yaml");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"));
    command
        .args(["run", "--config", config.to_str().unwrap()])
        .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut run = Spawned::start(&mut command, "switchyard run");
    let deadline = tokio::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = run.child().try_wait().unwrap() {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the daemon started on a store that is not complete"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut run.child().stderr.take().unwrap(), &mut stderr).unwrap();
    run.stop();
    assert!(!status.success(), "{stderr}");
    stderr
}

/// Regression: an empty `switchyard.redb` was taken for a new store under
/// `state_on_corrupt: refuse`, and every object was delivered again as added. An empty or
/// cut-short file is refused like any damaged store, and set aside with `fresh`.
#[tokio::test]
async fn an_empty_or_cut_short_store_file_is_refused_not_taken_for_a_new_store() {
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    std::fs::create_dir(dir.path().join("state")).unwrap();
    let store = dir.path().join("state").join(switchyard::state::FILE_NAME);
    support::write_config(dir.path(), &crate::state::config("latest"));
    for (content, reason) in [(&b""[..], "the file is empty"), (&b"re"[..], "cut short")] {
        std::fs::write(&store, content).unwrap();
        let stderr = run_refused(dir.path(), &kubeconfig).await;
        let wanted = format!("state store {} cannot be read", store.display());
        assert!(
            stderr.contains(&wanted) && stderr.contains(reason),
            "{stderr}"
        );
        assert_eq!(std::fs::read(&store).unwrap(), content, "the file is kept");
    }
    std::fs::write(&store, b"").unwrap();
    support::write_config(
        dir.path(),
        &format!(
            "state_on_corrupt: fresh\n{}",
            crate::state::config("latest")
        ),
    );
    let child = Child::start(dir.path(), &kubeconfig).await;
    child
        .process
        .wait_for_line(WAIT, |l| l.contains("THE STATE STORE CANNOT BE READ"))
        .await;
    let status: Value = child.status().await;
    assert!(status["state"]["size_bytes"].as_u64().unwrap() > 0);
    drop(child);
    sim.stop().await;
}
