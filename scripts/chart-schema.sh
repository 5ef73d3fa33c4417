#!/usr/bin/env bash
# Writes deploy/chart/switchyard/values.schema.json: deploy/chart/schema/values.schema.in.json
# with the daemon's config schema (`switchyard schema`) as the schema of `config:`. Run it
# after changing the config's types; tests/it/chart fails while the two differ.
#   scripts/chart-schema.sh [SWITCHYARD]   (default: target/debug/switchyard, built first)
set -euo pipefail
cd "$(dirname "$0")/.."
switchyard=${1:-}
if [[ -z $switchyard ]]; then
  cargo build --quiet --bin switchyard
  switchyard=${CARGO_TARGET_DIR:-target}/debug/switchyard
fi
"$switchyard" schema >/dev/null
jq --indent 2 --argjson config "$("$switchyard" schema)" \
  '.properties.config = ($config | del(.["$schema"]))' \
  deploy/chart/schema/values.schema.in.json > deploy/chart/switchyard/values.schema.json
echo "wrote deploy/chart/switchyard/values.schema.json"
