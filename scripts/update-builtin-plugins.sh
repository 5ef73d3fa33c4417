#!/usr/bin/env bash
# Builds the shipped sinks (plugins/sinks: webhook, slack, cloudevents, alertmanager, ...) and puts the
# components the binary carries as `builtin:NAME` into src/plugin/builtin/, with the digest
# of the sources they were built from (sources.sha256). Run it after changing a sink, the
# SDK, the WIT contract or plugins/Cargo.lock: a test fails until the components match
# their sources (see src/plugin/builtin.rs for why they are committed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# One name a line, so a sink added is a line added.
names=(
  webhook
  slack
  cloudevents
  alertmanager
  rabbitmq
  otlp
  pagerduty
  opsgenie
  teams
  discord
  aws
  loki
  elasticsearch
)
cargo build --quiet --manifest-path plugins/Cargo.toml --target wasm32-wasip2 --release \
  --target-dir plugins/target "${names[@]/#/--package=}"
for name in "${names[@]}"; do
  cp "plugins/target/wasm32-wasip2/release/$name.wasm" "src/plugin/builtin/$name.wasm"
done
scripts/builtin-sources-digest.sh > src/plugin/builtin/sources.sha256
