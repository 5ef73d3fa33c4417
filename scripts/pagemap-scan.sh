#!/usr/bin/env bash
# Builds and runs scripts/pagemap-scan.c: which pages the kernel's PAGEMAP_SCAN reports as
# written in a plugin-sized memory, and what a scan costs (BENCHMARKS.md, "Plugin call cost").
# Needs a C compiler and Linux 6.7 or later.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 -o "$out/pagemap-scan" "$root/scripts/pagemap-scan.c"
"$out/pagemap-scan"
