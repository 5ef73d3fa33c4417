//! The integration tests, as one test binary: one module per stage or scenario family,
//! over real HTTP, real wasm plugins, the built-in simulator and kubectl.
//!
//! One binary rather than a binary per file: linking each file against wasmtime and kube
//! separately cost more than the tests themselves, and the example plugins are built once
//! for the whole run (see [`support::plugins_dir`]).
//!
//! [`support`] holds what the scenarios share: a [`support::TestDaemon`] fixture (a
//! simulator, a config in a temporary folder, a daemon, an authorized admin client),
//! `eventually` for waiting on a condition, and kubectl and raw watches for the simulator.

mod support;

mod chart {
    //! The Helm chart, with Helm's own engine.
    mod cluster;
    pub(crate) mod helm;
    mod render;
    mod schema;
}
mod batch;
mod cli;
mod cluster_access;
mod daemon;
mod demo;
mod deploy;
mod deploy_layout;
mod deploy_manifests;
mod doc_examples;
mod docs;
mod egress;
mod faults_handlers;
mod finalizer;
mod fuzz;
mod ha;
mod informer;
mod informer_relist;
mod informer_streaming;
mod leftovers;
mod logs;
mod oci;
mod oci_pins;
mod oci_tls;
mod outbound;
mod page;
mod probes;
mod quarantine;
mod queue;
mod recipes;
mod replay;
mod scaffold;
mod secret_leak;
mod secrets;
mod shadow;
mod sharded;
mod sinks;
mod sinks_aws;
mod state;
mod state_faults;
mod tenancy;
mod traces;
mod unserved;

mod alerts {
    //! The alert rules and the Grafana dashboard, checked by promtool and a real Prometheus.
    mod metrics;
    mod rules;
    mod scrape;
}

mod config {
    //! Config reload and routing, end to end.
    mod reload;
    mod routing;
}

mod plugin {
    //! Plugins in the daemon: capabilities, hot swaps and reloads, limits, JavaScript, Python.
    mod capabilities;
    mod files;
    mod hot_swap;
    mod isolation;
    mod js;
    mod limits;
    mod python;
    mod reload;
    mod reuse;
}

mod sim {
    //! The Kubernetes API simulator against independent clients.
    mod authz;
    mod churn;
    mod clients;
    mod crds;
    mod faults;
    mod lists;
    mod sharding;
    mod watch;
    mod writes;
}
