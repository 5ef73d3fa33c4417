#!/usr/bin/env bash
# Builds every JavaScript handler in plugins/js/NAME/ (module handler.js, plus any modules it
# imports beside it) into a component at plugins/NAME.wasm with componentize-js.
#
# componentize-js is installed from npm at the version pinned in plugins/js/package-lock.json
# into plugins/target/js-tools (`npm install` with that lock file), only when something has to be built. Built
# components are cached in ${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/js-plugins/HASH.wasm,
# where HASH covers the handler's files, the plugins/wit folder, build.mjs and the lock file,
# so a handler is rebuilt exactly when one of those changes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/plugins/target/js-tools"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/js-plugins"

shopt -s nullglob
handlers=("$root"/plugins/js/*/handler.js)
[ ${#handlers[@]} -gt 0 ] || exit 0
mkdir -p "$cache"
# One build at a time (test binaries may run this script concurrently).
exec 9>"$cache/.lock"
if command -v flock >/dev/null; then flock 9; fi

# Installs the locked componentize-js into $tools unless that lock is installed there.
install_componentize_js() {
  local lock_hash
  lock_hash=$(sha256sum "$root/plugins/js/package-lock.json" | cut -c1-16)
  if [ ! -f "$tools/.installed-$lock_hash" ]; then
    command -v npm >/dev/null || { echo "js plugins: npm (Node.js 20 or later) is needed" >&2; exit 1; }
    echo "js plugins: installing componentize-js into $tools"
    rm -rf "$tools"
    mkdir -p "$tools"
    cp "$root/plugins/js/package.json" "$root/plugins/js/package-lock.json" "$tools/"
    (cd "$tools" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$tools/.installed-$lock_hash"
  fi
  # build.mjs resolves componentize-js from its own folder.
  cp "$root/plugins/js/build.mjs" "$tools/build.mjs"
}

for handler in "${handlers[@]}"; do
  dir=$(dirname "$handler")
  name=$(basename "$dir")
  # The hash of everything the component is built from, by path relative to the repository.
  hash=$(
    cd "$root"
    find "plugins/js/$name" plugins/wit plugins/js/build.mjs plugins/js/package-lock.json \
      -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-32
  )
  cached="$cache/$hash.wasm"
  if [ -f "$cached" ]; then
    echo "js plugin $name: taken from the cache ($cached)"
  else
    start=$SECONDS
    install_componentize_js
    node "$tools/build.mjs" "$handler" "$root/plugins/wit" "$cache/.$hash.wasm"
    mv "$cache/.$hash.wasm" "$cached"
    echo "js plugin $name: built in $((SECONDS - start))s ($cached)"
  fi
  # Copy through a temporary name and rename, so a running daemon never sees a half-written file.
  cp "$cached" "$root/plugins/.$name.wasm.tmp"
  mv "$root/plugins/.$name.wasm.tmp" "$root/plugins/$name.wasm"
done
