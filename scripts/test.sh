#!/usr/bin/env bash
# Runs every test: builds the example plugins, Rust and Python (installing the wasm32-wasip2
# target and componentize-py if needed), then the daemon's unit and integration tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/build-plugins.sh
cargo test --all-targets "$@"
