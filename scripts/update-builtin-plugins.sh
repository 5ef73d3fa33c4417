#!/usr/bin/env bash
# Builds the shipped sinks (plugins/sinks: webhook, slack, cloudevents, aws) and puts the
# components the binary carries as `builtin:NAME` into src/plugin/builtin/, with the digest
# of the sources they were built from (sources.sha256). Run it after changing a sink, the
# SDK, the WIT contract or plugins/Cargo.lock: a test fails until the components match
# their sources (see src/plugin/builtin.rs for why they are committed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --quiet --manifest-path plugins/Cargo.toml --target wasm32-wasip2 --release \
  --target-dir plugins/target -p webhook -p slack -p cloudevents -p aws
for name in webhook slack cloudevents aws; do
  cp "plugins/target/wasm32-wasip2/release/$name.wasm" "src/plugin/builtin/$name.wasm"
done
scripts/builtin-sources-digest.sh > src/plugin/builtin/sources.sha256
