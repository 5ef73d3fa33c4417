#!/usr/bin/env bash
# Builds every release artifact of switchyard into one folder, offline, then proves them:
#  1. the daemon for linux/amd64 and linux/arm64 (cross-compiled with Debian's
#     gcc-aarch64-linux-gnu), each run for `--version` and `check` on config/demo.yaml (arm64
#     under qemu-user), and the wasm plugins (examples, sinks, recipes);
#  2. the images, with buildah from scratch: switchyard per architecture and their multi-arch
#     index, switchyard-plugins (the plugins and a static copier, no daemon) likewise, as OCI
#     layouts; every plugin as an OCI artifact (the format `switchyard push` writes and an
#     `oci://` pull reads); each recipe's config; the chart packaged (Helm's engine, helm-python-sdk); a CycloneDX
#     SBOM per image (cyclonedx-python-lib, validated against the CycloneDX schema);
#  3. SHA256SUMS over every file, signed with minisign and verified;
#  4. in network and mount namespaces of their own: everything pushed to a docker-registry on
#     loopback, pulled back by digest (each checked), the arm64 image's daemon run under qemu
#     from its pulled layers, the chart installed from oci:// into `switchyard sim` with the
#     images and a plugin pinned by digest, and the daemon of the pulled amd64 image run with
#     the config the chart made, pulling its plugin from the registry, until it handles a
#     ConfigMap.
# Prints each step's time and each image's compressed size per architecture; a full release
# refuses an image over 25 MB compressed.
#
# Usage: scripts/release.sh [--quick] [--only amd64|arm64] [--out DIR]
#   (default)  what ships: both daemons with the release profile (fat LTO, one codegen unit)
#   --quick    for development and CI: the amd64 debug build the tests use, and arm64 with
#              the dev profile without debug info; the images are then large and not shipped
#   --only A   one architecture (CI's smoke: amd64, whose debug build the tests made; the
#              arm64 cross build of every crate does not fit in CI's time)
#   --out DIR  the artifacts' folder (default target/dist/VERSION, replaced)
# A signing key: SWITCHYARD_RELEASE_KEY=FILE (a minisign secret key without a password, its
# public key in FILE.pub); without it, a test key is made for this run.
#
# Needs root (buildah's storage, namespaces), and from Debian: buildah skopeo docker-registry
# qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross minisign kubectl curl jq python3-venv;
# rustup's aarch64-unknown-linux-gnu target (added if missing); PyPI for helm-python-sdk and
# cyclonedx-python-lib (installed once into target/release-tools/venv).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
quick="" out="" arches=(amd64 arm64)
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1; shift ;;
    --out) out=$2; shift 2 ;;
    --only) [[ $2 == amd64 || $2 == arm64 ]] || { echo "--only amd64 or --only arm64" >&2; exit 2; }
      arches=("$2"); shift 2 ;;
    --inside) shift; inside=1 ;;
    *) echo "usage: $0 [--quick] [--only amd64|arm64] [--out DIR]" >&2; exit 2 ;;
  esac
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
out=$(realpath -m "${out:-$root/target/dist/$version}")
work="$root/target/release-work"
tools="$root/target/release-tools"
cross_target="$root/target/cross"
registry=127.0.0.1:5000
export RELEASE_STARTED=${RELEASE_STARTED:-$(date +%s)}
buildah=(buildah --root "$work/storage" --runroot "$work/runroot" --storage-driver vfs)

step() { printf '== [%4ss] %s\n' "$(($(date +%s) - RELEASE_STARTED))" "$*"; }
fail() { echo "release: $*" >&2; exit 1; }
# The Rust target triple of an architecture.
triple() { case $1 in amd64) echo x86_64-unknown-linux-gnu ;; arm64) echo aarch64-unknown-linux-gnu ;; esac; }

# shellcheck source=release/build.sh
source "$root/scripts/release/build.sh"
# shellcheck source=release/package.sh
source "$root/scripts/release/package.sh"
# shellcheck source=release/publish.sh
source "$root/scripts/release/publish.sh"

if [ -n "${inside:-}" ]; then
  # The registry, the simulator and the daemon stop with the script, however it ends.
  trap 'kill $(jobs -p) 2> /dev/null || true' EXIT
  publish_and_install
  exit
fi

[ "$(id -u)" = 0 ] || fail "run it as root (buildah's storage, namespaces, mounts)"
tools_needed=(buildah skopeo docker-registry minisign kubectl curl jq unshare)
[[ " ${arches[*]} " != *" arm64 "* ]] || tools_needed+=(qemu-aarch64 aarch64-linux-gnu-gcc)
for tool in "${tools_needed[@]}"; do
  command -v "$tool" > /dev/null || fail "$tool is missing (see the Debian packages in $0's header)"
done
step "switchyard $version for ${arches[*]}, $([ -n "$quick" ] && echo "quick build (not for shipping)" || echo "release build") into $out"
rm -rf "$out" "$work" && mkdir -p "$out" "$work"
build_daemons
build_plugins
package_images
package_plugins
package_recipes
package_chart
write_sboms
sign_sums
only=()
[ ${#arches[@]} = 2 ] || only=(--only "${arches[0]}")
unshare --net --mount --propagation private -- "$0" --inside ${quick:+--quick} "${only[@]}" --out "$out"
step "done: $out"
(cd "$out" && find . -maxdepth 2 | sort)
