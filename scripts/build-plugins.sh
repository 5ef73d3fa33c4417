#!/usr/bin/env bash
# Builds every plugin in plugins/examples, the sinks in plugins/sinks, the recipes' plugins in
# plugins/recipes (and the test plugins in plugins/testing), and the Python handlers in
# plugins/python (scripts/build-python-plugins.sh) and the JavaScript handlers in plugins/js
# (scripts/build-js-plugins.sh), each into a component at plugins/NAME.wasm.
# Installs the wasm32-wasip2 target first if it is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
# Always into plugins/target, whatever CARGO_TARGET_DIR says, so the copies below find the
# components this checkout built.
cargo build --quiet --manifest-path "$root/plugins/Cargo.toml" --target wasm32-wasip2 --release \
  --target-dir "$root/plugins/target"
for dir in "$root"/plugins/examples/*/ "$root"/plugins/sinks/*/ "$root"/plugins/testing/*/ \
  "$root"/plugins/recipes/*/; do
  name=$(basename "$dir")
  [ -f "$dir/Cargo.toml" ] || continue
  built="$root/plugins/target/wasm32-wasip2/release/${name//-/_}.wasm"
  # Copy through a temporary name and rename, so a running daemon never sees a half-written file.
  cp "$built" "$root/plugins/.$name.wasm.tmp"
  mv "$root/plugins/.$name.wasm.tmp" "$root/plugins/$name.wasm"
done
# The Python handlers in plugins/python, with componentize-py (cached by source hash).
"$root/scripts/build-python-plugins.sh"
# The JavaScript handlers in plugins/js, with componentize-js (cached by source hash).
"$root/scripts/build-js-plugins.sh"
