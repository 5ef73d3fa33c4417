#!/usr/bin/env bash
# Runs every test: builds the example plugins, Rust, Python and JavaScript (installing the
# wasm32-wasip2 target, componentize-py and componentize-js if needed), then the plugins'
# own tests (natively), then the daemon's unit and integration tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/build-plugins.sh
# The plugins' own tests (the SDK's test host, label-guard), natively.
cargo test --quiet --manifest-path plugins/Cargo.toml --workspace --target-dir plugins/target
cargo test --all-targets "$@"
