# Steps 2 and 3 of scripts/release.sh (sourced): images, plugin artifacts, the chart, SBOMs,
# SHA256SUMS and its signature, all into $out.

# The cross sysroot of ARCH's libraries ("" for this machine's own).
sysroot() { [ "$1" = amd64 ] || echo /usr/aarch64-linux-gnu; }

# Builds IMAGE:VERSION-ARCH from $work/context-NAME-ARCH with CONTAINERFILE.
build_image() {
  local name=$1 arch=$2 containerfile=$3 context="$work/context-$1-$2"
  cp "$containerfile" "$context/Containerfile"
  "${buildah[@]}" bud --quiet --isolation chroot --layers=false --arch "$arch" --os linux \
    -f "$context/Containerfile" -t "$name:$version-$arch" "$context" > /dev/null
}

# Pushes the index NAME:VERSION of both architectures' images to the OCI layout
# images/NAME in $out, and prints each architecture's compressed size.
write_index() {
  local name=$1 arch
  "${buildah[@]}" manifest create "$name:$version" > /dev/null
  for arch in "${arches[@]}"; do
    "${buildah[@]}" manifest add "$name:$version" "containers-storage:localhost/$name:$version-$arch" > /dev/null
  done
  mkdir -p "$out/images"
  "${buildah[@]}" manifest push --quiet --all --format oci "$name:$version" "oci:$out/images/$name:$version"
  local layout="$out/images/$name" index
  index=$(jq -r '.manifests[0].digest' "$layout/index.json")
  echo "$index" > "$work/$name.digest"
  local digest arch_name size
  while read -r digest arch_name; do
    size=$(jq '[.layers[].size] | add' "$layout/blobs/sha256/${digest#sha256:}")
    step "$name linux/$arch_name: $size bytes compressed ($((size / 1000 / 1000)) MB)"
    if [ -z "$quick" ] && [ "$name" = switchyard ] && [ "$size" -gt 25000000 ]; then
      fail "$name linux/$arch_name is over 25 MB compressed"
    fi
  done < <(jq -r '.manifests[] | "\(.digest) \(.platform.architecture)"' "$layout/blobs/sha256/${index#sha256:}")
}

# switchyard and switchyard-plugins, each per architecture and as a multi-arch index.
package_images() {
  local arch
  for arch in "${arches[@]}"; do
    step "laying out and building switchyard:$version-$arch and switchyard-plugins:$version-$arch"
    mkdir -p "$work/context-switchyard-$arch" "$work/context-switchyard-plugins-$arch/rootfs/plugins"
    # shellcheck disable=SC2046 # no sysroot for amd64: no argument
    "$root/deploy/image/rootfs.sh" "$out/bin/switchyard-linux-$arch" \
      "$root/plugins/target/wasm32-wasip2/release" "$work/context-switchyard-$arch/rootfs" $(sysroot "$arch")
    build_image switchyard "$arch" "$root/deploy/image/Containerfile"
    local plugins="$work/context-switchyard-plugins-$arch/rootfs"
    cp "$work/context-switchyard-$arch/rootfs/plugins/"*.wasm "$plugins/plugins/"
    mkdir -p "$plugins/usr/local/bin"
    local cc=gcc
    [ "$arch" = amd64 ] || cc=aarch64-linux-gnu-gcc
    "$cc" -static -Os -Wall -Werror -s -o "$plugins/usr/local/bin/copy-plugins" "$root/deploy/image/copy-plugins.c"
    build_image switchyard-plugins "$arch" "$root/deploy/image/Containerfile.plugins"
  done
  # The arm64 image's own loader and libraries run its daemon (qemu-user, the image as root).
  if [[ " ${arches[*]} " == *" arm64 "* ]]; then
    local rootfs="$work/context-switchyard-arm64/rootfs" said
    said=$(qemu-aarch64 -L "$rootfs" "$rootfs/usr/local/bin/switchyard" --version)
    [ "$said" = "switchyard $version" ] || fail "the arm64 image's daemon said '$said'"
  fi
  write_index switchyard
  write_index switchyard-plugins
}

# Every shipped plugin as a wasm OCI artifact (src/plugin/oci: config
# application/vnd.wasm.config.v0+json, one application/wasm layer, as `switchyard push`
# writes it), each in an OCI layout plugins/NAME tagged VERSION.
package_plugins() {
  step "the plugins as OCI artifacts"
  local name
  while read -r name; do
    local layout="$out/plugins/$name" wasm="$root/plugins/target/wasm32-wasip2/release/${name//-/_}.wasm"
    mkdir -p "$layout/blobs/sha256"
    local layer config manifest
    layer=$(sha256sum "$wasm" | cut -d' ' -f1)
    cp "$wasm" "$layout/blobs/sha256/$layer"
    jq -cn --arg l "sha256:$layer" '{architecture: "wasm", layerDigests: [$l], os: "wasip2"}' > "$work/config.json"
    config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
    mv "$work/config.json" "$layout/blobs/sha256/$config"
    jq -cn --arg c "sha256:$config" --argjson cs "$(stat -c %s "$layout/blobs/sha256/$config")" \
      --arg l "sha256:$layer" --argjson ls "$(stat -c %s "$wasm")" \
      '{schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
        artifactType: "application/vnd.wasm.config.v0+json",
        config: {mediaType: "application/vnd.wasm.config.v0+json", digest: $c, size: $cs},
        layers: [{mediaType: "application/wasm", digest: $l, size: $ls}]}' > "$work/manifest.json"
    manifest=$(sha256sum "$work/manifest.json" | cut -d' ' -f1)
    jq -cn --arg m "sha256:$manifest" --argjson s "$(stat -c %s "$work/manifest.json")" --arg v "$version" \
      '{schemaVersion: 2, manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json",
        digest: $m, size: $s, annotations: {"org.opencontainers.image.ref.name": $v}}]}' > "$layout/index.json"
    mv "$work/manifest.json" "$layout/blobs/sha256/$manifest"
    printf '{"imageLayoutVersion":"1.0.0"}' > "$layout/oci-layout"
    printf '%-20s sha256:%s\n' "$name" "$manifest"
  done < "$work/plugins"
}

# Each recipe's config (plugins/recipes/NAME/switchyard.yaml) as recipes/NAME.yaml.
package_recipes() {
  mkdir -p "$out/recipes"
  local config
  for config in "$root"/plugins/recipes/*/switchyard.yaml; do
    install -m 0644 "$config" "$out/recipes/$(basename "$(dirname "$config")").yaml"
  done
}

# The Python of target/release-tools/venv, with helm-python-sdk, cyclonedx-python-lib and
# PyYAML.
tools_python() {
  local venv="$tools/venv"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import helm_python, cyclonedx, jsonschema, yaml' 2> /dev/null; then
    rm -rf "$venv" && python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
      helm-python-sdk==0.2.2 'cyclonedx-python-lib[json-validation]==11.12.0' 'PyYAML>=6,<7' >&2
  fi
  echo "$venv/bin/python"
}

# Helm's engine (tests/it/chart/helm.py) on one JSON request.
helm_sdk() { "$(tools_python)" "$root/tests/it/chart/helm.py" <<< "$1"; }

# The chart packaged as chart/switchyard-VERSION.tgz.
package_chart() {
  step "packaging the chart (Helm's engine)"
  mkdir -p "$out/chart"
  local answer
  answer=$(helm_sdk "$(jq -cn --arg c "$root/deploy/chart/switchyard" --arg d "$out/chart" \
    '{action: "package", chart: $c, destination: $d}')")
  jq -e .ok <<< "$answer" > /dev/null || fail "helm package: $answer"
  [ -s "$out/chart/switchyard-$version.tgz" ] || fail "the chart is not at chart/switchyard-$version.tgz: $answer"
}

# A CycloneDX SBOM per image and architecture in sbom/, each validated.
write_sboms() {
  step "SBOMs (CycloneDX 1.6)"
  mkdir -p "$out/sbom"
  local arch name
  for arch in "${arches[@]}"; do
    for name in switchyard switchyard-plugins; do
      "$(tools_python)" "$root/scripts/release/sbom.py" --name "$name" --version "$version" \
        --arch "$arch" --triple "$(triple "$arch")" --rootfs "$work/context-$name-$arch/rootfs" \
        --root "$root" --cache "$work/cargo-metadata" --out "$out/sbom/$name-$version-linux-$arch.cdx.json"
    done
  done
}

# SHA256SUMS over every file in $out, signed with minisign and the signature verified.
sign_sums() {
  step "SHA256SUMS, signed with minisign"
  (cd "$out" && find . -type f ! -name SHA256SUMS ! -name 'SHA256SUMS.minisig' -printf '%P\n' \
    | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
  local key=${SWITCHYARD_RELEASE_KEY:-}
  if [ -z "$key" ]; then
    key="$work/test-key/minisign.key"
    mkdir -p "$(dirname "$key")"
    minisign -G -W -f -p "$key.pub" -s "$key" > /dev/null
    echo "(signed with a test key made for this run)"
  fi
  cp "$key.pub" "$out/minisign.pub"
  minisign -S -s "$key" -m "$out/SHA256SUMS" -t "switchyard $version" > /dev/null
  minisign -V -p "$out/minisign.pub" -m "$out/SHA256SUMS"
  (cd "$out" && sha256sum --quiet -c SHA256SUMS) && echo "SHA256SUMS: $(wc -l < "$out/SHA256SUMS") files, each checked"
}
