//! Routes on a resource the API server does not serve (a CRD not created yet): the rest of
//! the daemon runs, /readyz and /status name what is missing, and the routes start once the
//! resource is served.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

const WIDGETS_AND_CONFIGMAPS: &str = "
handlers:
  log-events: {}
routes:
  - name: configmaps
    resource: configmaps
    handler: log-events
  - name: widgets
    resource: example.com/v1/widgets
    handler: log-events
";

/// Creates the `widgets.example.com` CRD and one widget through the API.
async fn create_widgets(client: &kube::Client) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create the CRD");
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 3},
    }))
    .unwrap();
    // Discovery of a CRD just created may lag a moment.
    support::eventually("the widget created", WAIT, async || {
        widgets.create(&PostParams::default(), &widget).await.ok()
    })
    .await;
}

fn route<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no route {name} in {status:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_on_a_resource_not_served_waits_while_the_rest_runs_and_starts_once_served() {
    let mut t = TestDaemon::start(WIDGETS_AND_CONFIGMAPS).await;
    // The configmaps route works.
    t.create_configmap(json!({"metadata": {"name": "c1"}}))
        .await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.starts_with("added ConfigMap default/c1 ")
    })
    .await;
    // Not ready, naming the missing resource; /status says which routes wait for it.
    let readyz = reqwest::get(t.url("/readyz")).await.unwrap();
    assert_eq!(readyz.status().as_u16(), 503);
    let body = readyz.text().await.unwrap();
    assert!(
        body.contains("not served: example.com/v1/widgets"),
        "{body}"
    );
    let verbose = reqwest::get(t.url("/readyz?verbose")).await.unwrap();
    let text = verbose.text().await.unwrap();
    assert!(
        text.contains("[-]informer example.com/v1/widgets not served: the API server does not serve this group/version"),
        "{text}"
    );
    let status = t.status_json().await;
    assert_eq!(
        status["waiting"][0]["watch"], "example.com/v1/widgets",
        "{status:#}"
    );
    assert_eq!(status["waiting"][0]["routes"], json!(["widgets"]));
    assert_eq!(route(&status, "widgets")["delivered"], 0);

    // Once the CRD exists, the route starts by itself and gets the widget.
    create_widgets(&t.client()).await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.starts_with("added Widget default/w1 ")
    })
    .await;
    let status = t.status_json().await;
    assert_eq!(status["waiting"], json!([]), "{status:#}");
    assert_eq!(route(&status, "widgets")["delivered"], 1);
    support::eventually("ready", WAIT, async || {
        let r = reqwest::get(t.url("/readyz")).await.ok()?;
        (r.status().as_u16() == 200).then_some(())
    })
    .await;
    // The configmaps route kept running: a new object reaches it once, the old one not again.
    t.create_configmap(json!({"metadata": {"name": "c2"}}))
        .await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.starts_with("added ConfigMap default/c2 ")
    })
    .await;
    let status = t.status_json().await;
    assert_eq!(route(&status, "configmaps")["delivered"], 2, "{status:#}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_adds_a_route_on_a_resource_not_served_is_applied_with_the_route_waiting() {
    let t = TestDaemon::start(support::CONFIGMAPS_TO_LOG_EVENTS).await;
    t.write_config(WIDGETS_AND_CONFIGMAPS);
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 200, "{body:#}");
    let plan = &body["plan"];
    assert_eq!(plan["routes"]["added"], json!(["widgets"]), "{plan:#}");
    assert_eq!(plan["waiting"][0]["watch"], "example.com/v1/widgets");
    assert_eq!(plan["waiting"][0]["routes"], json!(["widgets"]));
    let readyz = reqwest::get(t.url("/readyz")).await.unwrap();
    assert_eq!(readyz.status().as_u16(), 503);
    // Reloading the same file again keeps the route waiting, unchanged.
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 200, "{body:#}");
    assert_eq!(
        body["plan"]["routes"]["unchanged"],
        json!(["configmaps", "widgets"])
    );
    create_widgets(&t.client()).await;
    support::eventually("the widgets route started", WAIT, async || {
        let status = t.status_json().await;
        (route(&status, "widgets")["delivered"] == 1).then_some(())
    })
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_by_kind_waits_for_an_informer_named_by_a_kind_not_served() {
    let mut t = TestDaemon::start(
        "
informers:
  widgets:
    group: example.com
    version: v1
    kind: Widget
  configmaps:
    resource: configmaps
handlers:
  log-events: {}
routes:
  - name: by-kind
    kinds: [Widget]
    handler: log-events
  - name: configmaps
    kinds: [ConfigMap]
    handler: log-events
",
    )
    .await;
    let status = t.status_json().await;
    assert_eq!(
        status["waiting"][0]["watch"], "example.com/v1 Widget",
        "{status:#}"
    );
    assert_eq!(status["waiting"][0]["routes"], json!(["by-kind"]));
    t.create_configmap(json!({"metadata": {"name": "c1"}}))
        .await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.starts_with("added ConfigMap default/c1 ")
    })
    .await;
    create_widgets(&t.client()).await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.starts_with("added Widget default/w1 ")
    })
    .await;
    let status = t.status_json().await;
    assert_eq!(status["waiting"], json!([]), "{status:#}");
    t.stop().await;
}
