//! Churn: steady creates, updates and deletes of ConfigMaps and Pods, counted for
//! benchmarks, and visible live in `kubectl get pods -A -w` against `switchyard sim`.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use switchyard::sim::cluster::ChangeType;
use switchyard::sim::{ChurnConfig, ChurnKind, resources};

use crate::support::sim::{Kubectl, Lines, start_with_config};

#[tokio::test]
async fn churn_creates_updates_and_deletes_and_counts_them() {
    let sim = start_with_config("").await;
    let mut changes = sim.cluster().changes();
    let churn = sim.start_churn(ChurnConfig {
        objects: 5,
        rate: 2_000.0,
        object_size: 100,
        max_changes: Some(300),
        ..ChurnConfig::default()
    });
    let counts = tokio::time::timeout(Duration::from_secs(10), churn.finished())
        .await
        .expect("300 changes at 2000/s finish");
    assert_eq!(counts.total(), 300);
    assert!(
        counts.created > 0 && counts.updated > 0 && counts.deleted > 0,
        "{counts:?}"
    );

    let mut seen: HashMap<&str, u64> = HashMap::new();
    while let Ok(change) = changes.try_recv() {
        *seen.entry(change.change_type.as_str()).or_default() += 1;
        if change.change_type != ChangeType::Deleted {
            let payload = change.object["data"]["payload"].as_str().unwrap();
            assert_eq!(payload.len(), 100);
        }
    }
    assert_eq!(seen["ADDED"], counts.created);
    assert_eq!(seen["MODIFIED"], counts.updated);
    assert_eq!(seen["DELETED"], counts.deleted);
    let live = sim
        .cluster()
        .list(resources::find("", "v1", "configmaps").unwrap(), None);
    assert!(live.items.len() <= 5);
}

#[tokio::test]
async fn churn_moves_pods_through_their_phases() {
    let sim = start_with_config("").await;
    let pods = resources::find("", "v1", "pods").unwrap();
    let mut changes = sim.cluster().changes();
    let churn = sim.start_churn(ChurnConfig {
        objects: 4,
        rate: 2_000.0,
        kinds: vec![ChurnKind::Pods],
        max_changes: Some(200),
        ..ChurnConfig::default()
    });
    let counts = churn.finished().await;
    assert!(
        counts.created > 0 && counts.updated > 0 && counts.deleted > 0,
        "{counts:?}"
    );
    let mut phases = Vec::new();
    while let Ok(change) = changes.try_recv() {
        assert_eq!(change.at.resource, pods, "only pods are churned");
        let pod = &change.object;
        assert!(
            pod["spec"]["nodeName"]
                .as_str()
                .unwrap()
                .starts_with("node-")
        );
        phases.push(pod["status"]["phase"].as_str().unwrap().to_string());
    }
    assert!(phases.iter().any(|p| p == "Pending"));
    assert!(phases.iter().any(|p| p == "Running"));
}

#[tokio::test]
async fn a_prefilled_churn_starts_with_its_whole_population() {
    let sim = start_with_config("").await;
    let churn = sim.start_churn(ChurnConfig {
        objects: 10,
        kinds: vec![ChurnKind::ConfigMaps, ChurnKind::Pods],
        prefill: true,
        max_changes: Some(0),
        ..ChurnConfig::default()
    });
    let counts = churn.finished().await;
    assert_eq!(counts.created, 20);
    for plural in ["configmaps", "pods"] {
        let resource = resources::find("", "v1", plural).unwrap();
        assert_eq!(
            sim.cluster().list(resource, Some("default")).items.len(),
            10
        );
    }
}

#[test]
fn kubectl_get_pods_all_namespaces_watch_shows_the_churn_of_switchyard_sim_live() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut sim = Lines::start(
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args([
                "sim",
                "--listen",
                "127.0.0.1:0",
                "--churn-rate",
                "20",
                "--churn-objects",
                "4",
                "--churn-kinds",
                "pods",
                "--kubeconfig-out",
            ])
            .arg(&kubeconfig),
        "switchyard sim",
    );
    sim.wait_for(Duration::from_secs(20), |l| l.starts_with("kubeconfig:"));

    let kubectl = Kubectl::with_kubeconfig(&kubeconfig);
    let mut watch = kubectl.spawn(&["get", "pods", "-A", "-w"]);
    let header = watch.wait_for(Duration::from_secs(10), |l| l.starts_with("NAMESPACE"));
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    // At 20 changes a second, ten rows come within a second or two of watching.
    let mut rows = Vec::new();
    while rows.len() < 10 {
        let row = watch.wait_for(Duration::from_secs(10), |l| l.starts_with("default "));
        rows.push(row);
    }
    let pods: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.split_whitespace().nth(1))
        .collect();
    assert!(
        pods.iter().all(|p| p.starts_with("churn-pod-")),
        "{rows:#?}"
    );
    let statuses: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.split_whitespace().nth(3))
        .collect();
    assert!(
        statuses.iter().all(|s| ["Pending", "Running"].contains(s)),
        "{rows:#?}"
    );
}
