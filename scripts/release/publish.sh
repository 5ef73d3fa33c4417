# Step 4 of scripts/release.sh (sourced), run in network and mount namespaces of its own:
# everything in $out pushed to a docker-registry on loopback, pulled back by digest, the
# chart installed from there into `switchyard sim` and the daemon run as the chart made it.

# A docker-registry on $registry, its storage under $work/registry.
start_registry() {
  mkdir -p "$work/registry"
  cat > "$work/registry/config.yml" << EOF
version: 0.1
storage:
  filesystem:
    rootdirectory: $work/registry/data
http:
  addr: $registry
log:
  level: error
EOF
  docker-registry serve "$work/registry/config.yml" > "$work/registry/log" 2>&1 &
  for _ in $(seq 100); do curl -fsS "http://$registry/v2/" > /dev/null 2>&1 && return; sleep 0.1; done
  fail "the registry did not start: $(cat "$work/registry/log")"
}

# Each plugin's OCI layout pushed as switchyard/plugins/NAME:VERSION (its digest kept) and
# pulled back by digest.
push_plugins() {
  local name
  while read -r name; do
    skopeo copy --quiet --preserve-digests --dest-tls-verify=false \
      "oci:$out/plugins/$name:$version" "docker://$registry/switchyard/plugins/$name:$version"
    pull_by_digest "switchyard/plugins/$name" "$(jq -r '.manifests[0].digest' "$out/plugins/$name/index.json")" > /dev/null
  done < "$work/plugins"
}

# Fetches REPOSITORY@DIGEST's manifest (and, with a third argument, its blobs into that
# folder), each checked against its digest; prints the manifest.
pull_by_digest() {
  local repository=$1 digest=$2 into=${3:-} file="$work/pulled.json"
  curl -fsS -H 'Accept: application/vnd.oci.image.index.v1+json' \
    -H 'Accept: application/vnd.oci.image.manifest.v1+json' -o "$file" \
    "http://$registry/v2/$repository/manifests/$digest"
  [ "sha256:$(sha256sum "$file" | cut -d' ' -f1)" = "$digest" ] || fail "$repository@$digest: the manifest does not match"
  if [ -n "$into" ]; then
    mkdir -p "$into"
    local blob
    for blob in $(jq -r '.config.digest, .layers[].digest' "$file"); do
      curl -fsS -o "$into/blob" "http://$registry/v2/$repository/blobs/$blob"
      [ "sha256:$(sha256sum "$into/blob" | cut -d' ' -f1)" = "$blob" ] || fail "$repository: blob $blob does not match"
      if [ "$(jq -r --arg b "$blob" '.config.digest == $b' "$file")" = true ]; then
        mv "$into/blob" "$into/config.json"  # the image's config, beside its file system
      else
        tar -xzf "$into/blob" -C "$into" && rm "$into/blob"
      fi
    done
  fi
  cat "$file"
}

# The images (each index with both architectures, digests kept) and their pull by digest:
# each architecture's layers unpacked under $work/pulled/NAME-ARCH.
push_and_pull_images() {
  local name
  for name in switchyard switchyard-plugins; do
    local index
    index=$(cat "$work/$name.digest")
    step "pushing $name:$version (index $index) and pulling it back by digest"
    skopeo copy --quiet --all --preserve-digests --dest-tls-verify=false \
      "oci:$out/images/$name:$version" "docker://$registry/$name:$version"
    local digest arch
    while read -r digest arch; do
      rm -rf "$work/pulled/$name-$arch"
      pull_by_digest "$name" "$digest" "$work/pulled/$name-$arch" > /dev/null
      echo "$name@$digest linux/$arch: $(du -sh "$work/pulled/$name-$arch" | cut -f1) unpacked"
    done < <(pull_by_digest "$name" "$index" | jq -r '.manifests[] | "\(.digest) \(.platform.architecture)"')
  done
  [[ " ${arches[*]} " == *" arm64 "* ]] || return 0
  local said
  said=$(qemu-aarch64 -L "$work/pulled/switchyard-arm64" "$work/pulled/switchyard-arm64/usr/local/bin/switchyard" --version)
  [ "$said" = "switchyard $version" ] || fail "the pulled arm64 image's daemon said '$said'"
  echo "the pulled arm64 image runs its daemon (qemu-user): $said"
}

# The chart pushed to oci://$registry/charts and installed from there into the simulator,
# with both images and the log-events plugin pinned by digest; then the daemon of the
# pulled amd64 image run with the config the chart made.
install_from_registry() {
  local run="$work/run" python
  python=$(tools_python)
  mkdir -p "$run/plugins" "$run/cache"
  step "pushing the chart to oci://$registry/charts"
  helm_sdk "$(jq -cn --arg a "$out/chart/switchyard-$version.tgz" --arg r "oci://$registry/charts" \
    '{action: "push", archive: $a, remote: $r}')" | jq -e .ok > /dev/null || fail "helm push failed"
  local plugin
  plugin="oci://$registry/switchyard/plugins/log-events@$(jq -r '.manifests[0].digest' "$out/plugins/log-events/index.json")"
  "$work/pulled/switchyard-amd64/usr/local/bin/switchyard" sim --listen 127.0.0.1:6443 \
    --kubeconfig-out "$run/kubeconfig" > "$run/sim.log" 2>&1 &
  for _ in $(seq 100); do [ -s "$run/kubeconfig" ] && break; sleep 0.1; done
  [ -s "$run/kubeconfig" ] || fail "the simulator did not start: $(cat "$run/sim.log")"
  step "installing oci://$registry/charts/switchyard $version into the simulator, the plugin $plugin"
  local values answer
  values=$(jq -n --arg r "$registry" --arg i "$(cat "$work/switchyard.digest")" \
    --arg p "$(cat "$work/switchyard-plugins.digest")" --argjson c "$(sed "s|plugin: log-events$|plugin: $plugin|" \
    "$root/deploy/chart/switchyard/files/config.yaml" | "$python" -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))')" \
    '{image: {repository: "\($r)/switchyard", digest: $i},
      plugins: {initImage: {repository: "\($r)/switchyard-plugins", digest: $p}}, config: $c}')
  answer=$(helm_sdk "$(jq -cn --arg k "$run/kubeconfig" --arg c "oci://$registry/charts/switchyard" \
    --arg v "$version" --argjson values "$values" '{action: "install", kubeconfig: $k, chart: $c,
    version: $v, plain_http: true, name: "switchyard", namespace: "switchyard", create_namespace: true,
    values: $values}')")
  jq -e .ok <<< "$answer" > /dev/null || fail "helm install: $answer"
  local kubectl=(kubectl --kubeconfig "$run/kubeconfig" -n switchyard)
  "${kubectl[@]}" get deployment switchyard -o jsonpath='{range .spec.template.spec.initContainers[*]}{.image}{"\n"}{end}{range .spec.template.spec.containers[*]}{.image}{"\n"}{end}' > "$run/images"
  cat "$run/images"
  grep -qx "$registry/switchyard@$(cat "$work/switchyard.digest")" "$run/images" || fail "the Deployment does not run the image by its digest"
  grep -qx "$registry/switchyard-plugins@$(cat "$work/switchyard-plugins.digest")" "$run/images" || fail "the init container is not the plugins image by its digest"
  "${kubectl[@]}" get configmap switchyard-config -o jsonpath='{.data.config\.yaml}' > "$run/chart-config.yaml"
  grep -q "plugin: $plugin" "$run/chart-config.yaml" || fail "the chart's config does not name $plugin"
  run_as_the_chart_made_it "$plugin"
}

# The pulled amd64 daemon with the chart's config (its pod's paths moved under $work/run),
# until it pulls PLUGIN from the registry and handles a ConfigMap.
run_as_the_chart_made_it() {
  local run="$work/run" plugin=$1
  # The init container: the plugins image's entrypoint, as its user, fills the plugins volume.
  local image="$work/pulled/switchyard-plugins-amd64" user
  user=$(jq -r .config.User "$image/config.json")
  mkdir -p "$image/mnt/plugins" && chown "$user" "$run/plugins"
  mount --bind "$run/plugins" "$image/mnt/plugins"
  mapfile -t entrypoint < <(jq -r '.config.Entrypoint[]' "$image/config.json")
  "$(command -v chroot)" --userspec="$user" "$image" "${entrypoint[@]}" \
    || fail "the plugins image's entrypoint failed"
  umount "$image/mnt/plugins"
  [ -s "$run/plugins/log-events.wasm" ] || fail "the plugins image's entrypoint copied no log-events.wasm"
  sed -e "s|/var/cache/switchyard|$run/cache|; s|^plugins_dir: /plugins|plugins_dir: $run/plugins|" \
    "$run/chart-config.yaml" > "$run/config.yaml"
  step "running the pulled image's daemon with the chart's config"
  KUBECONFIG="$run/kubeconfig" XDG_CACHE_HOME="$run/cache" \
    "$work/pulled/switchyard-amd64/usr/local/bin/switchyard" run --config "$run/config.yaml" > "$run/daemon.log" 2>&1 &
  local daemon=$! ready=""
  for _ in $(seq 600); do
    if curl -fsS http://127.0.0.1:9471/readyz > /dev/null 2>&1; then ready=1; break; fi
    kill -0 "$daemon" 2> /dev/null || break
    sleep 0.1
  done
  [ -n "$ready" ] || fail "the daemon is not ready: $(tail -20 "$run/daemon.log")"
  kubectl --kubeconfig "$run/kubeconfig" create configmap from-the-release -n default --from-literal=built=by-release.sh > /dev/null
  for _ in $(seq 300); do grep -q 'default/from-the-release ' "$run/daemon.log" && break; sleep 0.1; done
  grep 'default/from-the-release ' "$run/daemon.log" | head -1 || fail "the event was not handled: $(tail -20 "$run/daemon.log")"
  local layer
  layer=$(jq -r '.layers[0].digest' "$out/plugins/log-events/blobs/sha256/$(jq -r '.manifests[0].digest' "$out/plugins/log-events/index.json" | cut -d: -f2)")
  [ -f "$run/cache/oci/blobs/${layer#sha256:}.wasm" ] || fail "the plugin was not pulled into the cache: $(cd "$run/cache" && find . -type f)"
  echo "pulled from the registry: $plugin (layer $layer)"
  kill -TERM "$daemon"
  wait "$daemon" || fail "the daemon exited with $? on SIGTERM"
}

# Step 4, inside the namespaces.
publish_and_install() {
  ip link set lo up
  start_registry
  push_and_pull_images
  step "pushing the plugins as OCI artifacts, each pulled back by digest"
  push_plugins
  install_from_registry
}
