#!/usr/bin/env bash
# Profiles `switchyard run` (the noop plugin on every ConfigMap of `default`) with perf
# during the initial list of N ConfigMaps (default 20000) from a `switchyard sim` churning
# 2,000 changes a second, and prints the top symbols by self time, the split by DSO and the
# memory-reset costs. Needs perf (Debian: linux-perf) and a release build:
#   cargo build --release && scripts/build-plugins.sh && scripts/profile-pipeline.sh [N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-20000}
bin="$root/target/release/switchyard"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
"$bin" sim --prefill "$n" --churn-size 1100 --churn-rate 2000 --churn-objects 1000 \
  --history 240000 --kubeconfig-out kubeconfig >sim.log 2>&1 &
for _ in $(seq 600); do [ -s kubeconfig ] && break; sleep 0.1; done
echo profile >token
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >switchyard.yaml <<EOC
plugins_dir: $root/plugins
admin:
  listen: 127.0.0.1:$port
  token_file: token
handlers:
  noop: {plugin: noop, concurrency: 2}
routes:
  - {name: all, resource: configmaps, namespaces: [default], handler: noop}
EOC
perf record -F 2999 -g -o perf.data -- "$bin" run --config switchyard.yaml --kubeconfig kubeconfig >daemon.log 2>&1 &
perf_pid=$!
handled=0
for _ in $(seq 1200); do
  handled=$(curl -s -H "Authorization: Bearer profile" "http://127.0.0.1:$port/status" |
    python3 -c 'import sys, json; print(json.load(sys.stdin)["handlers"][0]["processed"])' 2>/dev/null || echo 0)
  [ "$handled" -ge "$n" ] && break
  sleep 0.1
done
echo "stopped after $handled calls"
pkill -INT -f "switchyard run --config switchyard.yaml" || true
wait "$perf_pid" || true
set +o pipefail
report() { perf report -i perf.data --stdio "$@" 2>/dev/null | grep -E '^ +[0-9]' | sed 's/  \+/ /g'; }
echo "== by self time"; report --no-children --sort symbol | head -12
echo "== by DSO"; report --no-children --sort dso | head -6
echo "== memory reset, inclusive"
report --children --sort symbol | grep -E 'exc_page_fault|decommit_pages|do_pagemap_scan|smp_call_function_many_cond' | head -6
