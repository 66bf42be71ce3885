#!/usr/bin/env python3
"""Checks the image archive `just image` writes, and the SBOM beside it.

    scripts/check-image.py target/image/taint-operator.tar [--ref REF] [--sbom FILE]

The archive (docker-archive, as `buildah push` writes it) must hold exactly what
the Dockerfile promises: the statically linked binary at
/usr/local/bin/taint-operator, the kubectl plugin name beside it as a symlink to
it, nothing else but their directories; run as 65532:65532 with the binary as
entrypoint. The SBOM must be CycloneDX JSON naming taint-operator and every
registry crate of Cargo.lock the binary is built from, at the locked version.

Exits 1 naming each problem; scripts/build-image.sh runs it after a build and
tests/chart/test_image.py runs it on made-up archives (and on a real one when
present).
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import sys
import tarfile
from pathlib import Path, PurePosixPath

BIN_DIR = "usr/local/bin"
BINARY = f"{BIN_DIR}/taint-operator"
PLUGIN = f"{BIN_DIR}/kubectl-taintpolicy"
USER = "65532:65532"
ENTRYPOINT = ["/usr/local/bin/taint-operator"]
PT_INTERP = 3


def elf_interpreter(data: bytes) -> str | None:
    """Why `data` is no static ELF executable, or None when it is one."""
    if data[:4] != b"\x7fELF":
        return "not an ELF file"
    if data[4] != 2 or data[5] != 1:
        return "not a 64-bit little-endian ELF file"
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, = struct.unpack_from("<I", data, phoff + i * phentsize)
        if p_type == PT_INTERP:
            return "dynamically linked (it requests a program interpreter)"
    return None


def layer_entries(archive: tarfile.TarFile, layers: list[str]) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
    """The image's filesystem: every layer applied in order (whiteouts honoured)."""
    files: dict[str, tuple[tarfile.TarInfo, bytes]] = {}
    for name in layers:
        member = archive.extractfile(name)
        if member is None:
            raise ValueError(f"layer {name} is not in the archive")
        with tarfile.open(fileobj=member) as layer:
            for info in layer:
                path = str(PurePosixPath(info.name.lstrip("./").lstrip("/")))
                if path in ("", "."):
                    continue
                base = PurePosixPath(path)
                if base.name.startswith(".wh."):
                    gone = str(base.parent / base.name[len(".wh."):])
                    files = {p: v for p, v in files.items() if p != gone and not p.startswith(gone + "/")}
                    continue
                data = b""
                if info.isreg():
                    extracted = layer.extractfile(info)
                    data = extracted.read() if extracted else b""
                files[path] = (info, data)
    return files


def check_archive(path: Path, ref: str | None = None) -> list[str]:
    try:
        return _check_archive(path, ref)
    except (OSError, tarfile.TarError, ValueError, KeyError) as e:
        return [f"{path}: not a readable docker-archive: {e!r}"]


def _check_archive(path: Path, ref: str | None) -> list[str]:
    problems: list[str] = []
    with tarfile.open(path) as archive:
        names = set(archive.getnames())
        if "manifest.json" not in names:
            return [f"{path}: no manifest.json: not a docker-archive"]
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        if len(manifest) != 1:
            return [f"{path}: {len(manifest)} images in the archive, want 1"]
        image = manifest[0]
        if ref is not None and ref not in (image.get("RepoTags") or []):
            problems.append(f"tagged {image.get('RepoTags')}, want {ref}")
        config = json.load(archive.extractfile(image["Config"]))  # type: ignore[arg-type]
        run = config.get("config") or {}
        if run.get("User") != USER:
            problems.append(f"runs as user {run.get('User')!r}, want {USER}")
        if run.get("Entrypoint") != ENTRYPOINT:
            problems.append(f"entrypoint {run.get('Entrypoint')}, want {ENTRYPOINT}")
        files = layer_entries(archive, image["Layers"])

    binary = files.get(BINARY)
    if binary is None or not binary[0].isreg():
        problems.append(f"/{BINARY} is missing or not a regular file")
    else:
        info, data = binary
        if not info.mode & 0o111:
            problems.append(f"/{BINARY} is not executable (mode {info.mode:o})")
        why = elf_interpreter(data)
        if why:
            problems.append(f"/{BINARY}: {why}")
    plugin = files.get(PLUGIN)
    if plugin is None:
        problems.append(f"/{PLUGIN} is missing: `kubectl taintpolicy` would not find the plugin")
    elif not plugin[0].issym():
        problems.append(f"/{PLUGIN} is not a symlink (a copy doubles the image)")
    elif plugin[0].linkname not in ("taint-operator", f"/{BINARY}"):
        problems.append(f"/{PLUGIN} points to {plugin[0].linkname!r}, want taint-operator")
    allowed_dirs = {"usr", "usr/local", BIN_DIR}
    extra = sorted(
        p for p, (info, _) in files.items()
        if p not in (BINARY, PLUGIN) and not (info.isdir() and p in allowed_dirs)
    )
    if extra:
        problems.append(f"the image holds more than the binary and its plugin name: {extra}")
    return problems


def locked_packages(lock: Path) -> dict[str, set[str]]:
    """Cargo.lock's registry packages: name -> versions. (Read by hand: tomllib
    needs Python 3.11, the test venv accepts 3.10.)"""
    packages: dict[str, set[str]] = {}
    for block in lock.read_text().split("[[package]]")[1:]:
        fields = dict(re.findall(r'^(name|version|source) = "([^"]*)"$', block, re.MULTILINE))
        if fields.get("source", "").startswith("registry+"):
            packages.setdefault(fields["name"], set()).add(fields["version"])
    return packages


def check_sbom(path: Path, required: dict[str, str], lock: Path | None = None) -> list[str]:
    """`required`: crates (name -> locked version) the SBOM must list."""
    try:
        bom = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return [f"{path}: not a JSON document: {e}"]
    problems: list[str] = []
    if bom.get("bomFormat") != "CycloneDX":
        problems.append(f"{path}: bomFormat {bom.get('bomFormat')!r}, want CycloneDX")
    subject = (bom.get("metadata") or {}).get("component") or {}
    if subject.get("name") != "taint-operator":
        problems.append(f"{path}: describes {subject.get('name')!r}, want taint-operator")
    listed: dict[str, set[str]] = {}
    for component in bom.get("components") or []:
        listed.setdefault(component.get("name", ""), set()).add(component.get("version", ""))
    for name, version in required.items():
        if version not in listed.get(name, set()):
            problems.append(f"{path}: lists {name} {sorted(listed.get(name, []))}, want {version} (Cargo.lock)")
    if lock is not None:
        locked = locked_packages(lock)
        strays = sorted(
            f"{name} {version}" for name, versions in listed.items()
            for version in versions
            if name in locked and version not in locked[name]
        )
        if strays:
            problems.append(f"{path}: versions Cargo.lock does not have: {strays}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("archive", type=Path)
    parser.add_argument("--ref", help="the tag the image must carry")
    parser.add_argument("--sbom", type=Path, help="the CycloneDX SBOM written beside the archive")
    args = parser.parse_args()

    problems = check_archive(args.archive, args.ref)
    if args.sbom is not None:
        lock = Path(__file__).resolve().parents[1] / "Cargo.lock"
        locked = locked_packages(lock)
        # Crates the binary cannot be without: the API client, the TLS stack, the YAML stack.
        required = {
            name: max(locked[name])
            for name in ("kube-client", "rustls", "serde-saphyr", "tokio")
            if len(locked.get(name, ())) == 1
        }
        problems += check_sbom(args.sbom, required, lock)
    for p in problems:
        print(f"check-image: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-image: {args.archive} holds /{BINARY} (static) and /{PLUGIN} -> taint-operator"
          + (f"; {args.sbom} lists the locked crates" if args.sbom else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
