"""The chart half of `just release` (scripts/release_chart.py), without a registry.

The pinned chart's values name the pushed image by digest and keep every comment
of values.yaml; the packaged chart renders its Deployment with exactly
repository@digest and lints clean; a bad digest or a values file without the
keys is refused with the key named. The push itself runs in the real-cluster
suite, against a registry (e2e/real).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import helm_python as helm
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "taint-operator"
DIGEST = "sha256:" + "ab" * 32
REPOSITORY = "registry.example.com:5000/taint-operator"

_spec = importlib.util.spec_from_file_location("release_chart", REPO / "scripts" / "release_chart.py")
assert _spec and _spec.loader
release_chart = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(release_chart)


def test_pin_image_sets_repository_and_digest_and_keeps_comments():
    original = (CHART / "values.yaml").read_text()
    pinned = release_chart.pin_image(original, REPOSITORY, DIGEST)
    image = yaml.safe_load(pinned)["image"]
    assert image["repository"] == REPOSITORY
    assert image["digest"] == DIGEST
    assert image["tag"] == yaml.safe_load(original)["image"]["tag"]
    comments = lambda text: [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert comments(pinned) == comments(original)
    # only the two lines change
    changed = [(a, b) for a, b in zip(original.splitlines(), pinned.splitlines()) if a != b]
    assert len(changed) == 2 and len(pinned.splitlines()) == len(original.splitlines())
    assert {k: v for k, v in yaml.safe_load(pinned).items() if k != "image"} == {
        k: v for k, v in yaml.safe_load(original).items() if k != "image"
    }


@pytest.mark.parametrize("digest", ["sha256:abc", "ab" * 32, "sha512:" + "ab" * 64, ""])
def test_pin_image_refuses_a_digest_that_is_not_sha256(digest):
    with pytest.raises(release_chart.ReleaseError, match="--image-digest"):
        release_chart.pin_image((CHART / "values.yaml").read_text(), REPOSITORY, digest)


def test_pin_image_names_the_missing_key():
    with pytest.raises(release_chart.ReleaseError, match=r"image\.digest is missing"):
        release_chart.pin_image("image:\n  repository: x\n  tag: ''\nreplicaCount: 2\n", REPOSITORY, DIGEST)
    with pytest.raises(release_chart.ReleaseError, match="no top-level image"):
        release_chart.pin_image("replicaCount: 2\n", REPOSITORY, DIGEST)


def test_the_packaged_chart_runs_the_pinned_image(tmp_path):
    archive = release_chart.package(CHART, tmp_path, REPOSITORY, DIGEST)
    assert archive.name == f"taint-operator-{yaml.safe_load((CHART / 'Chart.yaml').read_text())['version']}.tgz"
    with helm.Chart.load(archive) as chart:
        rendered = chart.render(None, name="taint-operator", namespace="taint-operator-system")
    docs = [d for path, text in rendered.items() if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    images = {c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert images == {f"{REPOSITORY}@{DIGEST}"}


def test_the_unpinned_package_keeps_the_default_image(tmp_path):
    archive = release_chart.package(CHART, tmp_path, None, None)
    with helm.Chart.load(archive) as chart:
        assert chart.values["image"] == yaml.safe_load((CHART / "values.yaml").read_text())["image"]
