"""The image archive and SBOM `just image` writes: scripts/check-image.py.

Made-up docker-archives, one right and each of the others wrong in one way the
checker must name (the `kubectl-taintpolicy` link missing, a copy instead of a
link, a link elsewhere, a dynamically linked binary, a shell added, root user),
and made-up SBOMs. When target/image/taint-operator.tar exists (after `just
image`), the real archive and its SBOM are checked too.
"""

from __future__ import annotations

import importlib.util
import io
import json
import struct
import tarfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
REAL_ARCHIVE = REPO / "target" / "image" / "taint-operator.tar"
REAL_SBOM = REPO / "target" / "image" / "taint-operator.cdx.json"
REF = "ghcr.io/taint-operator/taint-operator:0.3.1"

_spec = importlib.util.spec_from_file_location("check_image", REPO / "scripts" / "check-image.py")
assert _spec and _spec.loader
check_image = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_image)


def elf(interpreter: bool) -> bytes:
    """A 64-bit little-endian ELF header with one program header: PT_INTERP or PT_LOAD."""
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5], header[6] = 2, 1, 1
    struct.pack_into("<Q", header, 0x20, 64)  # e_phoff
    struct.pack_into("<HH", header, 0x36, 56, 1)  # e_phentsize, e_phnum
    program = bytearray(56)
    struct.pack_into("<I", program, 0, 3 if interpreter else 1)
    return bytes(header + program)


def tar_bytes(entries: list[tarfile.TarInfo], data: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info in entries:
            payload = data.get(info.name)
            if payload is not None:
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                tar.addfile(info)
    return out.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o755, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


def good_layer() -> tuple[list[tarfile.TarInfo], dict[str, bytes]]:
    entries = [
        entry("usr", tarfile.DIRTYPE),
        entry("usr/local", tarfile.DIRTYPE),
        entry("usr/local/bin", tarfile.DIRTYPE),
        entry("usr/local/bin/taint-operator"),
        entry("usr/local/bin/kubectl-taintpolicy", tarfile.SYMTYPE, 0o777, "taint-operator"),
    ]
    return entries, {"usr/local/bin/taint-operator": elf(interpreter=False)}


def archive(tmp_path: Path, layer=None, user: str = "65532:65532", name: str = "image.tar") -> Path:
    entries, data = layer if layer is not None else good_layer()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"User": user, "Entrypoint": ["/usr/local/bin/taint-operator"], "Cmd": ["--help"]},
    }
    files = {
        "manifest.json": json.dumps([{"Config": "config.json", "RepoTags": [REF], "Layers": ["layer.tar"]}]).encode(),
        "config.json": json.dumps(config).encode(),
        "layer.tar": tar_bytes(entries, data),
    }
    path = tmp_path / name
    path.write_bytes(tar_bytes([entry(n, mode=0o644) for n in files], files))
    return path


def without(layer, name: str):
    entries, data = layer
    return [e for e in entries if e.name != name], data


def test_a_right_archive_passes(tmp_path):
    assert check_image.check_archive(archive(tmp_path), REF) == []


def test_the_plugin_link_missing_is_named(tmp_path):
    problems = check_image.check_archive(archive(tmp_path, without(good_layer(), "usr/local/bin/kubectl-taintpolicy")))
    assert len(problems) == 1 and "kubectl-taintpolicy is missing" in problems[0], problems


def test_a_copy_instead_of_the_link_is_named(tmp_path):
    entries, data = without(good_layer(), "usr/local/bin/kubectl-taintpolicy")
    entries.append(entry("usr/local/bin/kubectl-taintpolicy"))
    data = {**data, "usr/local/bin/kubectl-taintpolicy": data["usr/local/bin/taint-operator"]}
    problems = check_image.check_archive(archive(tmp_path, (entries, data)))
    assert any("not a symlink" in p for p in problems), problems


def test_a_link_elsewhere_is_named(tmp_path):
    entries, data = without(good_layer(), "usr/local/bin/kubectl-taintpolicy")
    entries.append(entry("usr/local/bin/kubectl-taintpolicy", tarfile.SYMTYPE, 0o777, "/bin/true"))
    problems = check_image.check_archive(archive(tmp_path, (entries, data)))
    assert any("points to '/bin/true'" in p for p in problems), problems


def test_a_dynamically_linked_binary_is_named(tmp_path):
    entries, _ = good_layer()
    problems = check_image.check_archive(
        archive(tmp_path, (entries, {"usr/local/bin/taint-operator": elf(interpreter=True)}))
    )
    assert problems == ["/usr/local/bin/taint-operator: dynamically linked (it requests a program interpreter)"]


def test_anything_else_in_the_image_is_named(tmp_path):
    entries, data = good_layer()
    entries += [entry("bin", tarfile.DIRTYPE), entry("bin/sh")]
    problems = check_image.check_archive(archive(tmp_path, (entries, {**data, "bin/sh": b"#!"})))
    assert problems == ["the image holds more than the binary and its plugin name: ['bin', 'bin/sh']"]


def test_root_and_a_wrong_tag_are_named(tmp_path):
    problems = check_image.check_archive(archive(tmp_path, user="0:0"), "example.com/other:1")
    assert any("runs as user '0:0'" in p for p in problems), problems
    assert any("want example.com/other:1" in p for p in problems), problems


def sbom(components: list[dict[str, Any]], name: str = "taint-operator") -> dict[str, Any]:
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "metadata": {"component": {"type": "application", "name": name, "version": "0.1.0"}},
        "components": components,
    }


def test_sbom_must_name_the_locked_crates(tmp_path):
    path = tmp_path / "bom.json"
    required = {"kube-client": "5.0.0", "rustls": "0.23.1"}
    path.write_text(json.dumps(sbom([{"name": "kube-client", "version": "5.0.0"}, {"name": "rustls", "version": "0.23.1"}])))
    assert check_image.check_sbom(path, required) == []

    path.write_text(json.dumps(sbom([{"name": "kube-client", "version": "4.9.0"}])))
    problems = check_image.check_sbom(path, required)
    assert any("kube-client ['4.9.0'], want 5.0.0" in p for p in problems), problems
    assert any("rustls [], want 0.23.1" in p for p in problems), problems

    path.write_text(json.dumps(sbom([], name="something-else")))
    assert any("describes 'something-else'" in p for p in check_image.check_sbom(path, {}))

    path.write_text("not json")
    assert "not a JSON document" in check_image.check_sbom(path, {})[0]


def test_sbom_versions_must_be_the_locked_ones(tmp_path):
    lock = REPO / "Cargo.lock"
    (locked_kube,) = check_image.locked_packages(lock)["kube-client"]
    path = tmp_path / "bom.json"
    path.write_text(json.dumps(sbom([{"name": "kube-client", "version": locked_kube}])))
    assert check_image.check_sbom(path, {}, lock) == []
    path.write_text(json.dumps(sbom([{"name": "kube-client", "version": "0.0.1"}])))
    problems = check_image.check_sbom(path, {}, lock)
    assert problems == [f"{path}: versions Cargo.lock does not have: ['kube-client 0.0.1']"], problems


@pytest.mark.skipif(not REAL_ARCHIVE.exists(), reason="no target/image/taint-operator.tar (run `just image`)")
def test_the_built_image_and_its_sbom():
    assert check_image.check_archive(REAL_ARCHIVE, REF) == []
    assert REAL_SBOM.exists(), "just image writes the SBOM beside the archive"
    lock = REPO / "Cargo.lock"
    locked = check_image.locked_packages(lock)
    required = {name: next(iter(locked[name])) for name in ("kube-client", "rustls", "serde-saphyr")}
    assert check_image.check_sbom(REAL_SBOM, required, lock) == []
