# Step 1 of scripts/release.sh (sourced): the daemon for each architecture and the plugins.

# The cross toolchain for arm64: Debian's gcc-aarch64-linux-gnu links, and builds the C of
# the crates that have some (ring, zstd-sys).
cross_env() {
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
  export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
}

# Builds the daemon for ARCH and prints the binary's path. A release builds with the release
# profile (fat LTO) into target/cross; --quick takes the amd64 debug build the tests use and
# builds arm64 with the dev profile without debug info.
build_daemon() {
  local arch=$1 triple
  triple=$(triple "$arch")
  if [ -z "$quick" ]; then
    (cross_env && cargo build --quiet --locked --profile release --target "$triple" \
      --target-dir "$cross_target" --manifest-path "$root/Cargo.toml") >&2
    echo "$cross_target/$triple/release/switchyard"
  elif [ "$arch" = amd64 ]; then
    local target=${CARGO_TARGET_DIR:-$root/target}
    cargo build --quiet --locked --manifest-path "$root/Cargo.toml" --target-dir "$target" >&2
    echo "$target/debug/switchyard"
  else
    (cross_env && CARGO_PROFILE_DEV_DEBUG=0 cargo build --quiet --locked --target "$triple" \
      --target-dir "$cross_target" --manifest-path "$root/Cargo.toml") >&2
    echo "$cross_target/$triple/debug/switchyard"
  fi
}

# Runs the daemon for ARCH (arm64 under qemu-user, its libraries from Debian's cross sysroot).
run_daemon() {
  local arch=$1
  shift
  case $arch in
    amd64) "$out/bin/switchyard-linux-amd64" "$@" ;;
    arm64) qemu-aarch64 -L /usr/aarch64-linux-gnu "$out/bin/switchyard-linux-arm64" "$@" ;;
  esac
}

# Both daemons into bin/, each run for --version and `check` on the demo config.
build_daemons() {
  if [[ " ${arches[*]} " == *" arm64 "* ]] && ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
    rustup target add aarch64-unknown-linux-gnu
  fi
  mkdir -p "$out/bin"
  local arch binary started
  for arch in "${arches[@]}"; do
    started=$(date +%s)
    step "building the daemon for linux/$arch ($(triple "$arch"))"
    binary=$(build_daemon "$arch")
    objcopy --strip-debug "$binary" "$out/bin/switchyard-linux-$arch" 2>/dev/null \
      || aarch64-linux-gnu-objcopy --strip-debug "$binary" "$out/bin/switchyard-linux-$arch"
    file "$out/bin/switchyard-linux-$arch" 2>/dev/null | cut -d, -f1-2 || true
    step "linux/$arch built in $(($(date +%s) - started))s; $(du -h "$out/bin/switchyard-linux-$arch" | cut -f1)"
    local said
    said=$(run_daemon "$arch" --version)
    [ "$said" = "switchyard $version" ] || fail "linux/$arch --version said '$said'"
    echo "$said"
    run_daemon "$arch" check --config "$root/config/demo.yaml" \
      || fail "linux/$arch: check refused config/demo.yaml"
  done
}

# The shipped plugins (examples, sinks, recipes) as scripts/build-image.sh builds them:
# wasm32-wasip2, release, into plugins/target. Lists their names in $work/plugins.
build_plugins() {
  step "building the plugins (wasm32-wasip2, release)"
  rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
  cargo build --quiet --release --locked --manifest-path "$root/plugins/Cargo.toml" \
    --target wasm32-wasip2 --target-dir "$root/plugins/target"
  local dir
  for dir in "$root"/plugins/examples/*/ "$root"/plugins/sinks/*/ "$root"/plugins/recipes/*/; do
    [ -f "$dir/Cargo.toml" ] && basename "$dir"
  done > "$work/plugins"
  echo "$(wc -l < "$work/plugins") plugins: $(tr '\n' ' ' < "$work/plugins")"
}
