#!/usr/bin/env bash
# Runs every test: builds the example plugins (installing the wasm32-wasip2 target if
# needed), then the daemon's unit and integration tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/build-plugins.sh
cargo test --all-targets "$@"
