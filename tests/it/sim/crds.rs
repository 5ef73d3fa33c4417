//! Custom resources: declared in the simulator config, or created as CRDs through the API,
//! served with discovery so that kubectl finds them by plural, short name and kind, and
//! kube-rs works with them as dynamic objects.

use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::GroupVersionKind;
use serde_json::json;

use crate::support::sim::{Kubectl, Lines, blocking, start_with_config};
use crate::support::spawned;

const CONFIG: &str = "
crds:
  - group: example.com
    version: v1
    kind: Widget
    shortNames: [wd]
    columns:
      - {name: Size, jsonPath: .spec.size, type: integer}
  - group: example.com
    version: v1
    kind: Zone
    namespaced: false
objects:
  - apiVersion: example.com/v1
    kind: Widget
    metadata: {name: first}
    spec: {size: 3}
";

fn table(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_finds_a_configured_custom_resource_by_plural_short_name_and_kind() {
    let sim = start_with_config(CONFIG).await;
    let kubectl = Kubectl::new(&sim);
    let outputs = blocking(move || {
        [
            "widgets",
            "wd",
            "Widget",
            "widget",
            "widgets.example.com",
            "Widget.v1.example.com",
        ]
        .map(|name| kubectl.run(&["get", name]))
    })
    .await;
    for out in &outputs {
        assert!(out.ok, "{out:?}");
        assert_eq!(
            table(&out.stdout)[..2],
            [vec!["NAME", "SIZE"], vec!["first", "3"]],
            "{out:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_custom_resources_with_their_scope_and_names() {
    let sim = start_with_config(CONFIG).await;
    let kubectl = Kubectl::new(&sim);
    let out = blocking(move || kubectl.run(&["api-resources", "--api-group=example.com"])).await;
    assert!(out.ok, "{out:?}");
    let rows = table(&out.stdout);
    assert_eq!(
        rows[0],
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    );
    assert!(
        rows.contains(
            &["widgets", "wd", "example.com/v1", "true", "Widget"]
                .map(String::from)
                .to_vec()
        ),
        "{rows:?}"
    );
    assert!(
        rows.contains(
            &["zones", "example.com/v1", "false", "Zone"]
                .map(String::from)
                .to_vec()
        ),
        "{rows:?}"
    );
}

#[tokio::test]
async fn kube_rs_creates_lists_and_watches_custom_objects() {
    let sim = start_with_config(CONFIG).await;
    let client = sim.client().unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let (resource, capabilities) = kube::discovery::pinned_kind(&client, &gvk)
        .await
        .expect("discovery finds the kind");
    assert_eq!(resource.plural, "widgets");
    assert_eq!(capabilities.scope, kube::discovery::Scope::Namespaced);
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &resource);

    let rv = sim.cluster().resource_version().to_string();
    let mut events = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    let second: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "second"},
        "spec": {"size": 5},
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &second).await.unwrap();
    assert!(created.metadata.uid.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    let list = api.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = list
        .items
        .iter()
        .map(|o| o.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["first", "second"]);
    let event = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match event {
        WatchEvent::Added(o) => assert_eq!(o.data["spec"]["size"], 5),
        other => panic!("expected ADDED, got {other:?}"),
    }
}

const GADGET_CRD: &str = "
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.org
spec:
  group: example.org
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gd]}
  versions:
    - name: v1beta1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

const GADGET: &str = "
apiVersion: example.org/v1beta1
kind: Gadget
metadata: {name: g1}
spec: {colour: red}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_applied_with_kubectl_is_served_until_it_is_deleted() {
    let sim = start_with_config("").await;
    let kubectl = Kubectl::new(&sim);
    let crd = kubectl.file("crd.yaml", GADGET_CRD);
    let gadget = kubectl.file("gadget.yaml", GADGET);
    let outputs = blocking(move || {
        let crd = crd.to_str().unwrap();
        let gadget = gadget.to_str().unwrap();
        [
            kubectl.run(&["apply", "-f", crd]),
            kubectl.run(&["apply", "-f", gadget]),
            kubectl.run(&["get", "gd", "-o", "jsonpath={.items[*].spec.colour}"]),
            kubectl.run(&[
                "get",
                "crd",
                "gadgets.example.org",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
            ]),
            kubectl.run(&["delete", "crd", "gadgets.example.org"]),
            kubectl.run(&["get", "gadgets.example.org"]),
        ]
    })
    .await;
    assert_eq!(
        outputs[0].stdout.trim(),
        "customresourcedefinition.apiextensions.k8s.io/gadgets.example.org created",
        "{:?}",
        outputs[0]
    );
    assert_eq!(
        outputs[1].stdout.trim(),
        "gadget.example.org/g1 created",
        "{:?}",
        outputs[1]
    );
    assert_eq!(outputs[2].stdout, "red", "{:?}", outputs[2]);
    assert_eq!(outputs[3].stdout, "True", "{:?}", outputs[3]);
    assert!(outputs[4].ok, "{:?}", outputs[4]);
    assert!(
        !outputs[5].ok,
        "the resource is still served: {:?}",
        outputs[5]
    );
    let gadgets = sim
        .cluster()
        .find_resource("example.org", "v1beta1", "gadgets");
    assert_eq!(gadgets, None);
}

#[test]
fn switchyard_sim_serves_the_crds_of_its_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sim.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut lines = Lines::start(
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["sim", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .arg("--kubeconfig-out")
            .arg(&kubeconfig),
        "switchyard sim",
    );
    lines.wait_for(Duration::from_secs(20), |l| l.starts_with("kubeconfig:"));
    let kubectl = Kubectl::with_kubeconfig(&kubeconfig);
    let out = kubectl.run(&["get", "wd", "-o", "name"]);
    assert!(out.ok, "{out:?}");
    assert_eq!(out.stdout.trim(), "widget.example.com/first");
}

#[test]
fn switchyard_sim_names_the_file_of_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.yaml");
    std::fs::write(&config, "crds:\n  - {group: example.com, version: v1}\n").unwrap();
    let output = spawned::output(
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["sim", "--config"])
            .arg(&config),
        "switchyard sim",
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{}:", config.display())) && stderr.contains("kind"),
        "{stderr}"
    );
}
