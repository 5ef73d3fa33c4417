#!/usr/bin/env bash
# Usage: deploy/image/rootfs.sh BINARY PLUGINS_BUILD_DIR OUT [SYSROOT]
# Lays out the switchyard image's whole file system in OUT, for a `FROM scratch` image to
# copy in (deploy/Dockerfile's runtime stage and deploy/image/Containerfile both do):
#   /usr/local/bin/switchyard       BINARY, its debug info stripped (a release build has
#                                   none; symbols stay)
#   the shared libraries it loads   at the paths `ldd BINARY` gives (the loader, libc, libm,
#                                   libgcc_s): the glibc of the machine that built it, whose
#                                   allocator the benchmarks measured. For a BINARY built for
#                                   another architecture (cross-compiled), SYSROOT is its
#                                   toolchain's (Debian's /usr/aarch64-linux-gnu): the loader
#                                   its ELF header names, at that path, and each library it
#                                   needs (readelf -d), from SYSROOT/lib into /lib/TRIPLE/,
#                                   where that glibc's loader looks (Debian's multiarch path)
#   /plugins/NAME.wasm              each example, sink and recipe plugin (plugins/examples/NAME,
#                                   plugins/sinks/NAME, plugins/recipes/NAME), from
#                                   PLUGINS_BUILD_DIR (plugins/target/wasm32-wasip2/release)
#   /etc/ssl/certs/ca-certificates.crt   this machine's CA bundle (Debian's ca-certificates)
#   /etc/passwd, /etc/group         root and nonroot (65532), the user the image runs as
#   /etc/nsswitch.conf              names from /etc/hosts, then DNS
#   /home/nonroot, /tmp             as distroless images have them
# Nothing else: no shell, no package manager, no other library.
set -euo pipefail
[ $# -eq 3 ] || [ $# -eq 4 ] || { echo "usage: $0 BINARY PLUGINS_BUILD_DIR OUT [SYSROOT]" >&2; exit 2; }
binary=$1 built=$2 out=$3 sysroot=${4:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=/etc/ssl/certs/ca-certificates.crt
[ -s "$bundle" ] || { echo "$bundle is missing: install ca-certificates" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/usr/local/bin" "$out/plugins" "$out/etc/ssl/certs" "$out/home/nonroot" "$out/tmp"
# objcopy reads any ELF machine; Debian's binutils-multiarch is not needed to strip debug info.
objcopy --strip-debug "$binary" "$out/usr/local/bin/switchyard" 2>/dev/null \
  || "$(basename "$sysroot")-objcopy" --strip-debug "$binary" "$out/usr/local/bin/switchyard"
chmod 0755 "$out/usr/local/bin/switchyard"
# Copies FILE to PATH inside the image, following links.
place() { mkdir -p "$out$(dirname "$2")" && cp -L "$1" "$out$2" && chmod 0755 "$out$2"; }
if [ -z "$sysroot" ]; then
  # Every library the loader resolves for the binary, and the loader itself, at its path.
  libraries=$(ldd "$binary" | grep -o '/[^ ]*' || true)
  [ -n "$libraries" ] || { echo "ldd found no libraries for $binary" >&2; exit 1; }
  for library in $libraries; do place "$library" "$library"; done
else
  loader=$(readelf -l "$binary" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
  [ -n "$loader" ] || { echo "$binary names no program interpreter" >&2; exit 1; }
  place "$sysroot/lib/$(basename "$loader")" "$loader"
  for library in $(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -e "$sysroot/lib/$library" ] || { echo "$library is not in $sysroot/lib" >&2; exit 1; }
    place "$sysroot/lib/$library" "/lib/$(basename "$sysroot")/$library"
  done
fi
for dir in "$root"/plugins/examples/*/ "$root"/plugins/sinks/*/ "$root"/plugins/recipes/*/; do
  name=$(basename "$dir")
  [ -f "$dir/Cargo.toml" ] || continue
  install -m 0644 "$built/${name//-/_}.wasm" "$out/plugins/$name.wasm"
done
install -m 0644 "$bundle" "$out/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$out/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$out/etc/group"
printf 'hosts: files dns\n' > "$out/etc/nsswitch.conf"
chmod 0644 "$out/etc/passwd" "$out/etc/group" "$out/etc/nsswitch.conf"
chmod 1777 "$out/tmp"
