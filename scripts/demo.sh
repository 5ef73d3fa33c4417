#!/usr/bin/env bash
# Runs the demo: builds the example plugins (installing the wasm32-wasip2 target and
# componentize-py if needed) and switchyard, saying what it builds, then runs switchyard
# against the built-in simulator with steady churn. Ctrl-C stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "==> building the example plugins, Rust and Python (the first build takes a few minutes)"
scripts/build-plugins.sh
echo "==> building switchyard (the first build takes several minutes; cargo shows its progress)"
cargo build
echo "==> running the demo"
exec cargo run --quiet -- demo --config config/demo.yaml "$@"
