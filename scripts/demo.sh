#!/usr/bin/env bash
# Runs the demo: builds the example plugins (installing the wasm32-wasip2 target if needed),
# then runs switchyard against the built-in simulator with steady churn. Ctrl-C stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/build-plugins.sh
exec cargo run --quiet -- demo "$@"
