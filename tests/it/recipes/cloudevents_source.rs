//! The recipe cloudevents-source (plugins/recipes/cloudevents-source) played through Knative
//! ApiServerSource's scenario in Resource mode: a ConfigMap created, updated and deleted in
//! the watched namespace becomes three CloudEvents of the types
//! `dev.knative.apiserver.resource.add|update|delete` with the object as data, a Deployment's
//! creation one more, a ConfigMap elsewhere none; then, while the sink answers 503, more
//! changes are made: every attempt at one change carries the same id, and once the sink is
//! back each change arrives, once, in order.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::sinks::header;
use crate::support::receiver::{Mode, Received, Receiver};
use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);
const RECIPE: &str = "cloudevents-source";
const NS: &str = "shop";

/// The fragment as shipped, its allow-list naming the loopback sink instead of the Broker's
/// ingress (what a user edits to name their own sink).
fn fragment(sink: &Receiver) -> String {
    let shipped = super::fragment(RECIPE);
    let entry = "http: [http://broker-ingress.knative-eventing.svc.cluster.local]";
    assert!(shipped.contains(entry), "the fragment allows the Broker");
    shipped.replace(entry, &format!("http: [\"{}\"]", sink.url("http")))
}

/// The Secret `cloudevents-source` the fragment takes the sink's URL from.
async fn create_secret(t: &TestDaemon, sink: &Receiver) {
    let url = format!("{}/shop/default", sink.url("http"));
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(RECIPE.into()),
            ..Default::default()
        },
        data: Some([("sink-url".to_string(), ByteString(url.into_bytes()))].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(t.client(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// Creates the Deployment `name` in `shop`; returns it as stored.
async fn create_deployment(t: &TestDaemon, name: &str) -> Deployment {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
            },
        },
    }))
    .unwrap();
    Api::<Deployment>::namespaced(t.client(), NS)
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap()
}

/// Sets the ConfigMap `name`'s `data.v`; returns its new resourceVersion.
async fn set_value(t: &TestDaemon, name: &str, value: &str) -> String {
    let patched: ConfigMap = t
        .configmaps(NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": value}})),
        )
        .await
        .unwrap();
    patched.metadata.resource_version.unwrap()
}

/// The CloudEvent attributes of a binary-mode request (its `ce-` headers).
fn attributes(request: &Received) -> Value {
    let mut attributes = serde_json::Map::new();
    for name in [
        "specversion",
        "id",
        "source",
        "type",
        "subject",
        "kind",
        "name",
        "namespace",
    ] {
        let value = header(request, &format!("ce-{name}"));
        attributes.insert(name.into(), value.into());
    }
    Value::Object(attributes)
}

/// The `ce-id` of a request.
fn id(request: &Received) -> String {
    header(request, "ce-id").unwrap_or_default().to_string()
}

/// Waits until the sink answered 200 to `count` requests, and returns them in order.
async fn delivered(sink: &Receiver, count: usize) -> Vec<Received> {
    support::eventually_sync(&format!("{count} CloudEvents"), WAIT, || {
        let delivered = sink.delivered();
        (delivered.len() >= count).then_some(delivered)
    })
    .await
}

/// Those of `requests` about the object `name`, in order.
fn about<'a>(requests: &'a [Received], name: &str) -> Vec<&'a Received> {
    requests
        .iter()
        .filter(|r| header(r, "ce-name") == Some(name))
        .collect()
}

/// Creates the ConfigMap `name` in `shop` with `data.v` = `value`; returns it as stored.
async fn create_in_shop(t: &TestDaemon, name: &str, value: &str) -> ConfigMap {
    let object = json!({"metadata": {"name": name}, "data": {"v": value}});
    support::create_configmap(&t.client(), NS, object).await
}

/// ApiServerSource's scenario: a ConfigMap in `default` sends nothing; one in `shop`
/// created, updated and deleted becomes three CloudEvents, add, update, delete, in order,
/// each with the object as it was at that change.
async fn a_configmaps_life_is_three_cloudevents(t: &TestDaemon, sink: &Receiver) {
    // A ConfigMap outside the namespace first: had it been sent, it would come first.
    t.create_configmap(json!({"metadata": {"name": "elsewhere"}}))
        .await;
    let made = create_in_shop(t, "settings", "1").await;
    let uid = made.metadata.uid.clone().unwrap();
    let created = made.metadata.resource_version.clone().unwrap();
    let updated = set_value(t, "settings", "2").await;
    t.configmaps(NS)
        .delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    let three = delivered(sink, 3).await;
    // The deletion carries the object as the API server last wrote it: its version is the
    // deletion's.
    let deleted = three[2].body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        deleted.parse::<u64>().unwrap() > updated.parse::<u64>().unwrap(),
        "{deleted} after {updated}"
    );
    let changes = [
        ("add", &created),
        ("update", &updated),
        ("delete", &deleted),
    ];
    let expected: Vec<Value> = changes
        .into_iter()
        .map(|(change, version)| {
            json!({
                "specversion": "1.0",
                "id": format!("{uid}.{version}.{change}"),
                "source": "https://kubernetes.default.svc",
                "type": format!("dev.knative.apiserver.resource.{change}"),
                "subject": "/apis/v1/namespaces/shop/configmaps/settings",
                "kind": "ConfigMap",
                "name": "settings",
                "namespace": NS,
            })
        })
        .collect();
    assert_eq!(three.iter().map(attributes).collect::<Vec<_>>(), expected);
    let values: Vec<&Value> = three.iter().map(|r| &r.body["data"]["v"]).collect();
    assert_eq!(values, [&json!("1"), &json!("2"), &json!("2")]);
    for request in &three {
        assert_eq!(request.path, "/shop/default");
        assert_eq!(header(request, "content-type"), Some("application/json"));
        assert_eq!(request.body["metadata"]["uid"], uid.as_str());
    }
}

/// A Deployment's creation is one `add`, with its subject under `apps/v1`.
async fn a_deployment_is_one_cloudevent(t: &TestDaemon, sink: &Receiver) {
    let web = create_deployment(t, "web").await;
    let added = delivered(sink, 4).await.remove(3);
    let attributes = attributes(&added);
    assert_eq!(attributes["type"], "dev.knative.apiserver.resource.add");
    assert_eq!(
        attributes["subject"],
        "/apis/apps/v1/namespaces/shop/deployments/web"
    );
    assert_eq!(attributes["kind"], "Deployment");
    assert_eq!(added.body["metadata"]["uid"], web.metadata.uid.unwrap());
    assert_eq!(added.body["spec"]["replicas"], 2);
    assert_eq!(
        sink.received().len(),
        4,
        "the ConfigMap in default was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_update_delete_become_three_cloudevents_and_an_outage_loses_none() {
    let sink = Receiver::start().await;
    let t = TestDaemon::builder(&fragment(&sink)).start().await;
    support::create_namespaces(&t.client(), &[NS]).await;
    create_secret(&t, &sink).await;
    a_configmaps_life_is_three_cloudevents(&t, &sink).await;
    a_deployment_is_one_cloudevent(&t, &sink).await;

    // The outage: the sink answers 503 while a ConfigMap is made and changed and a
    // Deployment made. Both objects fail, the handler goes into quarantine, and its first
    // try from there fails too.
    sink.set(Mode::Down);
    create_in_shop(&t, "flags", "a").await;
    set_value(&t, "flags", "b").await;
    create_deployment(&t, "api").await;
    support::eventually("a failed try in quarantine", WAIT, async || {
        let (_, status) = t.get("/status").await;
        let backoff = status["handlers"][0]["quarantine"]["backoff_seconds"].as_f64();
        (backoff >= Some(10.0)).then_some(())
    })
    .await;
    sink.set(Mode::Ok);
    let after: Vec<Received> = delivered(&sink, 7).await[4..].to_vec();
    let flags = about(&after, "flags");
    let types: Vec<Value> = flags
        .iter()
        .map(|r| attributes(r)["type"].clone())
        .collect();
    assert_eq!(
        types,
        [
            "dev.knative.apiserver.resource.add",
            "dev.knative.apiserver.resource.update"
        ]
    );
    assert_eq!(flags[0].body["data"]["v"], "a");
    assert_eq!(flags[1].body["data"]["v"], "b");
    assert_eq!(about(&after, "api").len(), 1);
    assert_eq!(after.len(), 3, "a change arrived twice");

    // Every refused attempt was at one of the changes delivered since, with its id.
    let refused: Vec<Received> = sink
        .received()
        .into_iter()
        .filter(|r| r.mode == Mode::Down)
        .collect();
    assert!(refused.len() >= 2, "{} refused attempts", refused.len());
    let delivered_ids: Vec<String> = after.iter().map(id).collect();
    for attempt in &refused {
        assert!(
            delivered_ids.contains(&id(attempt)),
            "a retry changed the id: {} not in {delivered_ids:?}",
            id(attempt)
        );
    }
    let (_, letters) = t.get("/handlers/to-sink/dead-letters").await;
    assert_eq!(letters["dead_letters"], json!([]), "{letters:#}");
    t.stop().await;
}

#[test]
fn rbac_grants_reading_the_two_resources_in_the_namespace_and_the_one_secret() {
    assert_eq!(
        super::granted(RECIPE),
        [
            "Role/default core secrets names=cloudevents-source get,list,watch",
            "Role/shop apps deployments get,list,watch",
            "Role/shop core configmaps get,list,watch",
        ]
    );
}
