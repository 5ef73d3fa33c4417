//! What the informer pays to take one object off the wire, for a ConfigMap of about 1.1 KB
//! of data as a real API server sends it (with `metadata.managedFields`) and as the
//! simulator sends it (without), in the same run:
//!
//! - `wire`: the informer's decoder (`informer::wire`): the text kept, `kind` put first,
//!   managedFields cut from the text, only the metadata decoded;
//! - `tree`: the full decode into a `DynamicObject`, managedFields dropped, and the object
//!   serialized again (the informer's way before the decoder, and its way still for a
//!   transform with `drop_fields`);
//! - `typed`: decoding into `k8s_openapi`'s `ConfigMap`, as a kube-rs reflector does.
//!
//! And what a route's `when:` condition (`metadata.annotations.owner` exists) costs per
//! object: `route_filter/pruned`, the route's filter as the router runs it (only the paths
//! its tests read are parsed), against `route_filter/whole`, the whole object parsed into a
//! JSON tree (the filter's way before).
//!
//! Run: `cargo bench --bench decode`

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};
use std::sync::Arc;
use switchyard::config::field_path::FieldPath;
use switchyard::config::{Condition, RouteFilter, Test};
use switchyard::informer::wire::Decoder;
use switchyard::informer::{CachedObject, Delta, Transform};
use switchyard::router::filter::ObjectFilter;

/// A list item of `default/name`, with the managedFields kubectl's server-side apply and a
/// controller leave when `managed`.
fn item(name: &str, managed: bool) -> String {
    let mut metadata = json!({
        "name": name,
        "namespace": "default",
        "uid": "6f1c2a4e-3b7d-4f7e-9a51-2d0c7a0e8b11",
        "resourceVersion": "184467",
        "creationTimestamp": "2026-11-24T06:00:00Z",
        "labels": {"app": "web", "tier": "frontend"},
        "annotations": {"owner": "team-a"},
    });
    if managed {
        metadata["managedFields"] = json!([
            {"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
             "time": "2026-11-24T06:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:config": {}, "f:extra": {}},
                          "f:metadata": {"f:labels": {"f:app": {}, "f:tier": {}},
                                         "f:annotations": {"f:owner": {}}}}},
            {"manager": "controller", "operation": "Update", "apiVersion": "v1",
             "time": "2026-11-24T06:01:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:status": {}}}},
        ]);
    }
    json!({
        "metadata": metadata,
        "data": {"config": "x".repeat(1000), "extra": "y".repeat(80), "status": "ok"},
    })
    .to_string()
}

fn decode(c: &mut Criterion) {
    let resource = ApiResource::erase::<ConfigMap>(&());
    let decoder = Decoder::new(&resource, Transform::default());
    let transform = Transform::default();
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(1));
    for (label, managed) in [("with managedFields", true), ("without", false)] {
        let text = item("cm-1", managed);
        group.bench_with_input(BenchmarkId::new("wire", label), &text, |b, text| {
            b.iter(|| decoder.decode(text).expect("decodes"));
        });
        group.bench_with_input(BenchmarkId::new("tree", label), &text, |b, text| {
            b.iter(|| {
                let mut object: DynamicObject = serde_json::from_str(text).expect("decodes");
                transform.apply(&mut object);
                serde_json::to_string(&object).expect("serializes")
            });
        });
        group.bench_with_input(BenchmarkId::new("typed", label), &text, |b, text| {
            b.iter(|| serde_json::from_str::<ConfigMap>(text).expect("decodes"));
        });
    }
    group.finish();
}

fn route_filter(c: &mut Criterion) {
    let resource = ApiResource::erase::<ConfigMap>(&());
    let decoder = Decoder::new(&resource, Transform::default());
    let received = decoder.decode(&item("cm-1", false)).expect("decodes");
    let object = Arc::new(CachedObject::received(received, Vec::new()));
    let delta = Delta::Added(object.clone());
    let filter = ObjectFilter::new(&RouteFilter {
        when: vec![Condition::new(
            FieldPath::parse("metadata.annotations.owner").unwrap(),
            Test::Exists(true),
        )],
        ..RouteFilter::default()
    });
    let mut group = c.benchmark_group("route_filter");
    group.throughput(Throughput::Elements(1));
    group.bench_function("pruned", |b| {
        b.iter(|| filter.apply(&delta).expect("the condition holds"));
    });
    group.bench_function("whole", |b| {
        b.iter(|| serde_json::from_str::<Value>(object.json_str()).expect("parses"));
    });
    group.finish();
}

criterion_group!(benches, decode, route_filter);
criterion_main!(benches);
