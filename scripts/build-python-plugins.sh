#!/usr/bin/env bash
# Builds every Python handler in plugins/python/NAME/ (module app.py, plus any files beside
# it) into a component at plugins/NAME.wasm with componentize-py.
#
# componentize-py is installed at the version pinned below into a private virtual
# environment (plugins/target/python-venv; with `pip install --target` when the venv module
# is unavailable), only when something has to be built. Built components are cached in
# ${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/python-plugins/HASH.wasm, where HASH covers the
# handler's files, the whole plugins/wit folder and the componentize-py version, so a
# handler is rebuilt exactly when one of those changes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The contract version the handlers are built against, from the WIT package line.
contract=$(sed -n 's/^package switchyard:plugin@\(.*\);$/\1/p' "$root/plugins/wit/world.wit")
componentize_py_version=0.25.1
python=${PYTHON:-python3}
venv="$root/plugins/target/python-venv"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/python-plugins"

shopt -s nullglob
apps=("$root"/plugins/python/*/app.py)
[ ${#apps[@]} -gt 0 ] || exit 0
mkdir -p "$cache"
# One build at a time (test binaries may run this script concurrently).
exec 9>"$cache/.lock"
if command -v flock >/dev/null; then flock 9; fi

# Installs componentize-py at the pinned version as $venv/bin/componentize-py unless it is there.
install_componentize_py() {
  local stamp="$venv/.componentize-py-$componentize_py_version"
  if [ ! -f "$stamp" ]; then
    echo "python plugins: installing componentize-py==$componentize_py_version into $venv"
    rm -rf "$venv"
    if "$python" -m venv "$venv" >/dev/null 2>&1; then
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
        "componentize-py==$componentize_py_version"
    else
      echo "python plugins: no venv module; using pip install --target"
      rm -rf "$venv"
      "$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
        --target "$venv/site-packages" "componentize-py==$componentize_py_version"
      mkdir -p "$venv/bin"
      printf '#!/bin/sh\nPYTHONPATH="%s/site-packages" exec "%s" -c "import sys; from componentize_py import script; sys.exit(script())" "$@"\n' \
        "$venv" "$(command -v "$python")" >"$venv/bin/componentize-py"
      chmod +x "$venv/bin/componentize-py"
    fi
    touch "$stamp"
  fi
}

# `--print-tool`: install componentize-py if needed and print its path, building nothing.
if [ "${1:-}" = "--print-tool" ]; then
  install_componentize_py >&2
  echo "$venv/bin/componentize-py"
  exit 0
fi

for app in "${apps[@]}"; do
  dir=$(dirname "$app")
  name=$(basename "$dir")
  # The hash of everything the component is built from, by path relative to the repository.
  hash=$(
    cd "$root"
    {
      echo "componentize-py $componentize_py_version world handler module app names types http_types"
      find "plugins/python/$name" plugins/python/sdk plugins/wit -type f ! -path '*/__pycache__/*' -print0 |
        LC_ALL=C sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-32
  )
  cached="$cache/$hash.wasm"
  if [ -f "$cached" ]; then
    echo "python plugin $name: taken from the cache ($cached)"
  else
    start=$SECONDS
    install_componentize_py
    # componentize-py writes __pycache__ and scratch files; build from a copy of the sources.
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp -R "$dir"/. "$work/app"
    # The SDK's helpers (switchyard_http) beside the handler's own modules.
    cp "$root"/plugins/python/sdk/*.py "$work/app/"
    (cd "$work" && "$venv/bin/componentize-py" -d "$root/plugins/wit" -w handler \
      --import-interface-name "switchyard:plugin/types@$contract=types" \
      --import-interface-name wasi:http/types@0.2.12=http_types \
      componentize -p app app -o out.wasm >/dev/null)
    mv "$work/out.wasm" "$cache/.$hash.wasm.tmp"
    mv "$cache/.$hash.wasm.tmp" "$cached"
    rm -rf "$work"
    trap - EXIT
    echo "python plugin $name: built in $((SECONDS - start))s ($cached)"
  fi
  # Copy through a temporary name and rename, so a running daemon never sees a half-written file.
  cp "$cached" "$root/plugins/.$name.wasm.tmp"
  mv "$root/plugins/.$name.wasm.tmp" "$root/plugins/$name.wasm"
done
