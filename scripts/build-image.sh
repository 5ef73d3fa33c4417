#!/usr/bin/env bash
# Builds the switchyard container image without Docker, then proves the image it built:
#  1. the release binary and the example plugins (cargo), laid out by deploy/image/rootfs.sh
#     with the glibc libraries the binary loads, CA certificates and the user nonroot;
#  2. the image, with buildah: deploy/image/Containerfile (FROM scratch, the steps of
#     deploy/Dockerfile's runtime stage), in buildah storage of its own under target/image;
#  3. pushed to a docker-registry on loopback, and pulled back over the registry's HTTP API
#     with curl: manifest, config and layers, each checked against its digest, the layers
#     unpacked into a folder;
#  4. run from that folder as the Helm chart's Deployment (deploy/chart/switchyard) runs it:
#     the image's entrypoint as its user (65532) on a read-only root, the chart's default
#     config (files/config.yaml, with what the chart fills in) at /etc/switchyard, the example plugins on a read-only /plugins, a
#     writable cache at /var/cache/switchyard (XDG_CACHE_HOME, and oci.cache_dir below it),
#     a service account's token and CA, in-cluster against `switchyard sim --tls`, with its
#     handler's plugin pulled from the registry (oci://) instead of /plugins, until it
#     handles a ConfigMap, answers /readyz and shows the event in /metrics.
# Steps 3 and 4 run in network and mount namespaces of their own (unshare): the config's
# fixed ports (9470, 9471) and the registry's are free there, and nothing stays mounted.
#
# Needs root, buildah, docker-registry, kubectl, curl, jq and unshare (Debian:
# `apt-get install buildah docker-registry kubectl curl jq`). Idempotent: cargo builds
# incrementally; the image, the registry and every folder under target/image are replaced.
# The release build (fat LTO) takes a long while the first time. Prints each step's time and
# the image's size.
#
# Usage: scripts/build-image.sh           (the image is switchyard:0.1.0 in target/image/storage)
#        SWITCHYARD_IMAGE=switchyard:dev scripts/build-image.sh
#        SWITCHYARD_IMAGE_PROFILE=dev scripts/build-image.sh   (the debug build: quick, large;
#                                                               to try the script, not to ship)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
image=${SWITCHYARD_IMAGE:-switchyard:0.1.0}
profile=${SWITCHYARD_IMAGE_PROFILE:-release}
work="$root/target/image"
case $profile in
  release) binary="$root/target/release/switchyard" ;;
  dev) binary="$root/target/debug/switchyard" ;;
  *) echo "SWITCHYARD_IMAGE_PROFILE is release or dev, not $profile" >&2; exit 2 ;;
esac
buildah=(buildah --root "$work/storage" --runroot "$work/runroot" --storage-driver vfs)
registry=127.0.0.1:5000
token=build-image-token
export BUILD_IMAGE_STARTED=${BUILD_IMAGE_STARTED:-$(date +%s)}
started=$BUILD_IMAGE_STARTED

step() { printf '== [%4ss] %s\n' "$(($(date +%s) - started))" "$*"; }
fail() { echo "build-image: $*" >&2; exit 1; }

# Step 4: the pod, from the unpacked image in $work/unpacked. Runs inside the namespaces.
run_the_pod() {
  local run="$work/run" rootfs="$work/unpacked"
  rm -rf "$run" && mkdir -p "$run"/{config,plugins,cache,account}
  # The config map, the plugins volume (what the init container copies from the image) and
  # the service account, as the kubelet mounts them; the cache, writable by the pod's user.
  # The chart's default config with what the chart fills in for the pod (templates/_helpers.tpl).
  { printf 'plugins_dir: /plugins\nadmin:\n  listen: 127.0.0.1:9470\n  probes_listen: 0.0.0.0:9471\n'
    printf 'oci:\n  cache_dir: /var/cache/switchyard/oci\n'
    sed "s|plugin: log-events$|plugin: oci://$registry/plugins/log-events:v1|" \
      "$root/deploy/chart/switchyard/files/config.yaml"; } > "$run/config/config.yaml"
  grep -q "oci://$registry/" "$run/config/config.yaml" || fail "the shipped config has no handler plugin log-events"
  cp "$rootfs"/plugins/*.wasm "$run/plugins/"
  chown 65532:65532 "$run/cache"
  printf '%s' "$token" > "$run/account/token"
  printf 'switchyard' > "$run/account/namespace"
  "$binary" push "$rootfs/plugins/log-events.wasm" "oci://$registry/plugins/log-events:v1"

  "$binary" sim --listen 127.0.0.1:6443 --tls --token "$token" --ca-out "$run/account/ca.crt" \
    --kubeconfig-out "$run/kubeconfig" > "$run/sim.log" 2>&1 &
  sim=$!
  for _ in $(seq 100); do [ -s "$run/kubeconfig" ] && break; sleep 0.1; done
  [ -s "$run/kubeconfig" ] || fail "the simulator did not start: $(cat "$run/sim.log")"

  # The pod's file system: mount points made first (as the container runtime does), then
  # the volumes, /proc and a few devices, then the root made read-only.
  mkdir -p "$rootfs"/{etc/switchyard,var/cache/switchyard,var/run/secrets/kubernetes.io/serviceaccount,proc,dev}
  mount --bind "$rootfs" "$rootfs"
  mount --bind -o ro "$run/config" "$rootfs/etc/switchyard"
  mount --bind -o ro "$run/plugins" "$rootfs/plugins"
  mount --bind "$run/cache" "$rootfs/var/cache/switchyard"
  mount --bind -o ro "$run/account" "$rootfs/var/run/secrets/kubernetes.io/serviceaccount"
  mount -t proc proc "$rootfs/proc"
  mount -t tmpfs -o size=1m,mode=0755 tmpfs "$rootfs/dev"
  for dev in null zero random urandom; do
    touch "$rootfs/dev/$dev" && mount --bind "/dev/$dev" "$rootfs/dev/$dev"
  done
  mount -o remount,bind,ro "$rootfs"
  touch "$rootfs/written" 2>/dev/null && fail "the root file system is writable"

  # The image's own entrypoint and user, from the config pulled back.
  local user
  user=$(jq -r '.config.User' "$work/pulled/config.json")
  mapfile -t entrypoint < <(jq -r '.config.Entrypoint[]' "$work/pulled/config.json")
  step "running ${entrypoint[*]} as $user on the read-only root"
  env -i KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=6443 \
    XDG_CACHE_HOME=/var/cache/switchyard HOME=/home/nonroot \
    "$(command -v chroot)" --userspec="$user" --groups="${user#*:}" "$rootfs" "${entrypoint[@]}" \
    > "$run/daemon.log" 2>&1 &
  daemon=$!
  local ready=""
  for _ in $(seq 600); do
    if curl -fsS http://127.0.0.1:9471/readyz > /dev/null 2>&1; then ready=1; break; fi
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$ready" ] || fail "the daemon is not ready: $(cat "$run/daemon.log")"
  step "ready; creating ConfigMap default/from-the-image"
  kubectl --kubeconfig "$run/kubeconfig" --token "$token" create configmap from-the-image -n default \
    --from-literal=built=without-docker
  local handled=""
  for _ in $(seq 300); do
    if grep -q 'default/from-the-image ' "$run/daemon.log"; then handled=1; break; fi
    sleep 0.1
  done
  [ -n "$handled" ] || fail "the event was not handled: $(cat "$run/daemon.log")"
  grep 'default/from-the-image ' "$run/daemon.log" | head -1
  curl -fsS http://127.0.0.1:9471/metrics | grep '^switchyard_handler_processed_total'
  step "the pulled plugin is cached in the cache volume; /plugins is as the init container left it"
  (cd "$run/cache" && find . -type f | sort)
  [ -z "$(find "$run/plugins" -mindepth 1 -name '.*')" ] || fail "something was written into /plugins"
  kill -TERM "$daemon"
  local code=0
  wait "$daemon" || code=$?
  [ "$code" -eq 0 ] || fail "the daemon exited with $code on SIGTERM: $(tail -5 "$run/daemon.log")"
  step "stopped on SIGTERM (exit 0); the daemon's log:"
  sed -n '1,40p' "$run/daemon.log"
  kill "$sim" 2>/dev/null || true
}

# Steps 3 and 4, inside the namespaces.
inside() {
  ip link set lo up
  rm -rf "$work/registry"
  # shellcheck source=scripts/release/publish.sh
  source "$root/scripts/release/publish.sh"
  start_registry
  local registry_pid=$!
  local repository=${image%%:*} tag=${image#*:}
  step "pushing $image to the registry at $registry"
  "${buildah[@]}" push --quiet --tls-verify=false "$image" "docker://$registry/$repository:$tag"

  step "pulling it back with curl and unpacking its layers"
  local pulled="$work/pulled"
  rm -rf "$pulled" "$work/unpacked" && mkdir -p "$pulled" "$work/unpacked"
  curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    -o "$pulled/manifest.json" "http://$registry/v2/$repository/manifests/$tag"
  jq . "$pulled/manifest.json"
  blob() { # DIGEST FILE: fetches a blob and checks its digest
    curl -fsS -o "$2" "http://$registry/v2/$repository/blobs/$1"
    [ "sha256:$(sha256sum "$2" | cut -d' ' -f1)" = "$1" ] || fail "blob $1 does not match its digest"
  }
  blob "$(jq -r .config.digest "$pulled/manifest.json")" "$pulled/config.json"
  jq '{architecture, os, config}' "$pulled/config.json"
  local total=0 i=0 digest type size
  while read -r digest type size; do
    blob "$digest" "$pulled/layer-$i"
    case $type in
      *gzip) tar -xzf "$pulled/layer-$i" -C "$work/unpacked" ;;
      *tar) tar -xf "$pulled/layer-$i" -C "$work/unpacked" ;;
      *) fail "layer $digest has the media type $type" ;;
    esac
    total=$((total + size)); i=$((i + 1))
  done < <(jq -r '.layers[] | "\(.digest) \(.mediaType) \(.size)"' "$pulled/manifest.json")
  step "image: $i layer(s), $total bytes compressed ($((total / 1024 / 1024)) MiB); unpacked $(du -sh "$work/unpacked" | cut -f1)"
  for shell in bin/sh bin/bash usr/bin/sh bin/busybox; do
    [ ! -e "$work/unpacked/$shell" ] || fail "the image has /$shell"
  done
  (cd "$work/unpacked" && find . -type f -printf '%m %u:%g %10s %p\n' | sort -k4)
  run_the_pod
  kill "$registry_pid" 2>/dev/null || true
}

if [ "${1:-}" = "--inside" ]; then
  inside
  exit
fi

[ "$(id -u)" = 0 ] || fail "run it as root (buildah's storage, mounts, chroot)"
for tool in buildah docker-registry kubectl curl jq unshare; do
  command -v "$tool" > /dev/null || fail "$tool is missing (Debian: apt-get install buildah docker-registry kubectl curl jq)"
done
step "building the $profile binary (cargo build --profile $profile --locked)"
cargo build --profile "$profile" --locked --manifest-path "$root/Cargo.toml"
step "building the example plugins (wasm32-wasip2, release)"
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
cargo build --release --locked --manifest-path "$root/plugins/Cargo.toml" \
  --target wasm32-wasip2 --target-dir "$root/plugins/target"
step "laying out the image's file system (deploy/image/rootfs.sh)"
mkdir -p "$work/context"
"$root/deploy/image/rootfs.sh" "$binary" "$root/plugins/target/wasm32-wasip2/release" "$work/context/rootfs"
cp "$root/deploy/image/Containerfile" "$work/context/Containerfile"
step "building $image with buildah (FROM scratch)"
"${buildah[@]}" rmi --force "$image" > /dev/null 2>&1 || true
"${buildah[@]}" bud --quiet --isolation chroot --layers=false -f "$work/context/Containerfile" \
  -t "$image" "$work/context"
"${buildah[@]}" images "$image"
unshare --net --mount --propagation private -- "$0" --inside
step "done: $image is in buildah storage of its own: ${buildah[*]} images"
