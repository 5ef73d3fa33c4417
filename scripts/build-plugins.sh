#!/usr/bin/env bash
# Builds every plugin in plugins/examples (and the test plugins in plugins/testing) into a
# component at plugins/NAME.wasm.
# Installs the wasm32-wasip2 target first if it is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
cargo build --quiet --manifest-path "$root/plugins/Cargo.toml" --target wasm32-wasip2 --release
for dir in "$root"/plugins/examples/*/ "$root"/plugins/testing/*/; do
  name=$(basename "$dir")
  [ -f "$dir/Cargo.toml" ] || continue
  built="$root/plugins/target/wasm32-wasip2/release/${name//-/_}.wasm"
  # Copy through a temporary name and rename, so a running daemon never sees a half-written file.
  cp "$built" "$root/plugins/.$name.wasm.tmp"
  mv "$root/plugins/.$name.wasm.tmp" "$root/plugins/$name.wasm"
done
