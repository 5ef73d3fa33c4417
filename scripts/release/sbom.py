"""A CycloneDX SBOM of one switchyard image, for scripts/release.sh.

What the image holds, from the image's file system (--rootfs) and what built it:
- the switchyard binary (image switchyard) and the Rust crates compiled into it: the normal
  dependencies of the package switchyard for the target triple (`cargo metadata
  --filter-platform`), each with its version, license and purl;
- each plugin /plugins/NAME.wasm, with its SHA-256, and the crates compiled into the plugins
  (the plugins workspace for wasm32-wasip2);
- every other file (the glibc libraries and loader, CA certificates, the static copier),
  by the Debian package that installed it (`dpkg -S`), with that package's version.
Written with cyclonedx-python-lib and validated against the CycloneDX 1.6 JSON schema.
"""

import argparse
import hashlib
import json
import pathlib
import subprocess
import sys

from cyclonedx.model import HashAlgorithm, HashType
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.license import DisjunctiveLicense, LicenseExpression
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.validation.json import JsonStrictValidator
from cyclonedx.schema import SchemaVersion
from packageurl import PackageURL

ARGS = None  # the command line, once parsed


def cargo_metadata(manifest, triple):
    """`cargo metadata` for `triple`, kept in --cache (one workspace serves several images)."""
    cache = pathlib.Path(ARGS.cache) / f"{hashlib.sha256(f'{manifest} {triple}'.encode()).hexdigest()}.json"
    if not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(subprocess.check_output(
            ["cargo", "metadata", "--format-version", "1", "--locked", "--manifest-path",
             str(manifest), "--filter-platform", triple]))
    return cache.read_bytes()


def crates(manifest, triple, root_name):
    """The crates `root_name` compiles in for `triple`: its normal dependencies, transitively."""
    metadata = json.loads(cargo_metadata(manifest, triple))
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    roots = [p["id"] for p in metadata["packages"]
             if p["id"] in metadata["workspace_members"] and (root_name is None or p["name"] == root_name)]
    seen, todo = set(), list(roots)
    while todo:
        node = nodes[todo.pop()]
        for dep in node["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]) and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    def compiled_in(package):  # a proc-macro runs in the compiler, not in the binary
        return package["source"] and all("proc-macro" not in t["kind"] for t in package["targets"])
    return [packages[i] for i in sorted(seen) if compiled_in(packages[i])]


def crate_component(package):
    license = package.get("license")
    return Component(
        type=ComponentType.LIBRARY, name=package["name"], version=package["version"],
        bom_ref=f"crate:{package['name']}@{package['version']}",
        purl=PackageURL("cargo", name=package["name"], version=package["version"]),
        licenses=[LicenseExpression(license)] if license else [],
    )


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def debian_package(path, arch):
    """The Debian package (name, version, architecture) that installed `path`, or None."""
    found = subprocess.run(["dpkg", "-S", str(path)], capture_output=True, text=True)
    if found.returncode != 0:
        return None
    name = found.stdout.split(":")[0].split(",")[0].strip()
    fields = subprocess.check_output(
        ["dpkg-query", "-W", "-f", "${Version} ${Architecture}", name], text=True).split()
    return name, fields[0], fields[1]


def source_of(relative, arch, sysroot):
    """Where a file of the image came from on this machine, to ask dpkg about it."""
    if relative == "usr/local/bin/copy-plugins":  # built static against glibc's libc.a
        return pathlib.Path(f"{sysroot}/lib/libc.a" if sysroot else "/usr/lib/x86_64-linux-gnu/libc.a")
    if relative == "etc/ssl/certs/ca-certificates.crt":  # made by update-ca-certificates
        return pathlib.Path("/usr/share/ca-certificates")
    if sysroot and relative.startswith("lib"):
        return pathlib.Path(sysroot) / "lib" / pathlib.Path(relative).name
    return pathlib.Path("/") / relative


def main():
    parser = argparse.ArgumentParser()
    for flag in ["--name", "--version", "--arch", "--triple", "--rootfs", "--root", "--out", "--cache"]:
        parser.add_argument(flag, required=True)
    global ARGS
    ARGS = args = parser.parse_args()
    rootfs, root = pathlib.Path(args.rootfs), pathlib.Path(args.root)
    sysroot = "/usr/aarch64-linux-gnu" if args.arch == "arm64" else None

    bom = Bom()
    image = Component(
        type=ComponentType.CONTAINER, name=args.name, version=args.version,
        bom_ref=f"image:{args.name}",
        purl=PackageURL("oci", name=args.name, version=args.version,
                        qualifiers={"arch": args.arch}),
    )
    bom.metadata.component = image
    components = {}

    def add(component):
        components.setdefault(component.bom_ref.value, component)

    if (rootfs / "usr/local/bin/switchyard").exists():
        binary = rootfs / "usr/local/bin/switchyard"
        add(Component(type=ComponentType.APPLICATION, name="switchyard", version=args.version,
                      bom_ref="switchyard", licenses=[DisjunctiveLicense(id="Apache-2.0")],
                      hashes=[HashType(alg=HashAlgorithm.SHA_256, content=sha256(binary))]))
        for package in crates(root / "Cargo.toml", args.triple, "switchyard"):
            add(crate_component(package))
    plugins = sorted((rootfs / "plugins").glob("*.wasm"))
    for wasm in plugins:
        add(Component(type=ComponentType.LIBRARY, name=f"plugin:{wasm.stem}", version=args.version,
                      bom_ref=f"plugin:{wasm.stem}",
                      hashes=[HashType(alg=HashAlgorithm.SHA_256, content=sha256(wasm))]))
    if plugins:
        for package in crates(root / "plugins/Cargo.toml", "wasm32-wasip2", None):
            add(crate_component(package))
    for path in sorted(p for p in rootfs.rglob("*") if p.is_file()):
        relative = str(path.relative_to(rootfs))
        if relative.startswith("plugins/") or relative == "usr/local/bin/switchyard":
            continue
        found = debian_package(source_of(relative, args.arch, sysroot), args.arch)
        if found is None:
            continue  # files the image's layout writes itself: /etc/passwd, /etc/group...
        name, version, deb_arch = found
        add(Component(type=ComponentType.LIBRARY, name=name, version=version,
                      bom_ref=f"deb:{name}@{version}",
                      purl=PackageURL("deb", namespace="debian", name=name, version=version,
                                      qualifiers={"arch": deb_arch})))
    for component in components.values():
        bom.components.add(component)
    bom.register_dependency(image, components.values())

    text = JsonV1Dot6(bom).output_as_string(indent=1)
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if errors:
        sys.exit(f"sbom.py: {args.out} is not valid CycloneDX 1.6: {errors}")
    pathlib.Path(args.out).write_text(text)
    print(f"{pathlib.Path(args.out).name}: {len(components)} components")


if __name__ == "__main__":
    main()
