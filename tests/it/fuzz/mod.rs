//! Fuzz targets for every parser that reads outside input, run as property tests: the
//! config file and the small parsers it uses ([`config`]), the egress allow-list with the
//! connector's reading of URLs ([`egress`]), a watch stream's frames as the
//! informer reads them over real HTTP ([`watch`]), the simulator's request parsing
//! ([`sim_requests`]), and the plugins folder's file names and contents ([`plugins`]).
//!
//! Each target runs a bounded number of cases by default, so the whole module stays well
//! under a minute of a debug build; `PROPTEST_CASES` raises every count at once for a long
//! run (see docs/development.md, Fuzzing). A failing case prints its minimal input;
//! proptest also saves its seed under `tests/proptest-regressions/` (ignored by git), and
//! each failure found so far is kept as a named regression test next to its target.

mod config;
mod egress;
mod plugins;
mod sim_requests;
mod watch;

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::Value;

/// A proptest config running `default_cases` cases, or `PROPTEST_CASES` when it is set.
pub(crate) fn cases(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// A runtime for the async part of one property (proptest's cases are synchronous).
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A JSON value of any type, some odd (huge numbers, unicode, nesting up to `depth`), its
/// strings drawn from `strings` and its object keys from `keys`.
pub(crate) fn odd_json(
    strings: BoxedStrategy<String>,
    keys: BoxedStrategy<String>,
    depth: u32,
) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        strings.prop_map(Value::from),
    ];
    leaf.prop_recursive(depth, depth * 4, 3, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}
