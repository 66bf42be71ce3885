"""Chart.yaml's Artifact Hub annotations against what they describe.

Artifact Hub shows them on the chart's page; nothing else reads them, so nothing
else would notice them going stale. ``artifacthub.io/changes`` is the newest
CHANGELOG.md entry (its version the chart's, as operator/tests/versions.rs keeps
it), item by item; the image is the one the chart deploys; the CRD, the example
and the license are the repository's own.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from test_chart import CARGO_TOML, CHART, CRD_FILE, REPO, chart, default, render  # noqa: F401

CHANGELOG = REPO / "CHANGELOG.md"
# Artifact Hub's kinds of change; the CHANGELOG's other sections (Upgrade) have none.
CHANGE_KINDS = ("added", "changed", "deprecated", "removed", "fixed", "security")


def annotation(chart, key: str) -> Any:
    text = chart.metadata["annotations"][key]
    assert isinstance(text, str), f"{key}: Chart.yaml annotations are strings"
    return yaml.safe_load(text)


def newest_changelog_entry() -> tuple[str, list[dict[str, str]]]:
    """The version of CHANGELOG.md's first `## [X.Y.Z]` heading, and its items as
    Artifact Hub changes: one per bullet, lines joined, Markdown links as their text."""
    text = CHANGELOG.read_text()
    heading = re.search(r"^## \[([^\]]+)\][^\n]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert heading, "CHANGELOG.md has no `## [version]` entry"
    version, body = heading.groups()
    changes = []
    for section in re.split(r"^### ", body, flags=re.M)[1:]:
        title, items = section.split("\n", 1)
        kind = title.strip().lower()
        if kind not in CHANGE_KINDS:
            continue
        for item in re.split(r"^- ", items, flags=re.M)[1:]:
            description = " ".join(line.strip() for line in item.strip().splitlines())
            description = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", description)
            changes.append({"kind": kind, "description": description})
    return version, changes


def test_changes_are_the_newest_changelog_entry(chart):
    version, changes = newest_changelog_entry()
    assert chart.metadata["version"] == chart.metadata["appVersion"] == version
    assert changes, "the newest CHANGELOG.md entry lists no change"
    listed = annotation(chart, "artifacthub.io/changes")
    assert [{"kind": c["kind"], "description": c["description"]} for c in listed] == changes


def test_images_are_what_the_chart_deploys(chart, default):
    version, _ = newest_changelog_entry()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    image = f"{values['image']['repository']}:{chart.metadata['appVersion']}"
    assert annotation(chart, "artifacthub.io/images") == [{"name": "taint-operator", "image": image}]
    assert default.container["image"] == image
    assert image.endswith(f":{version}")


def test_crds_name_the_chart_s_crd(chart):
    crd = yaml.safe_load(CRD_FILE.read_text())
    (served,) = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    (listed,) = annotation(chart, "artifacthub.io/crds")
    assert listed["kind"] == crd["spec"]["names"]["kind"]
    assert listed["version"] == served
    assert listed["name"] == crd["metadata"]["name"]
    assert listed["displayName"] and listed["description"]


def test_crd_examples_are_shipped_examples(chart):
    """Each example is a policy of examples/ (there checked against the CRD), as
    a user would write it: without the fixture's uid and creationTimestamp."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    (served,) = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    examples = annotation(chart, "artifacthub.io/crdsExamples")
    assert examples
    for example in examples:
        assert example["apiVersion"] == f"{crd['spec']['group']}/{served}"
        assert example["kind"] == crd["spec"]["names"]["kind"]
        assert list(example["metadata"]) == ["name"]
        (shipped,) = [
            doc
            for doc in yaml.safe_load_all((REPO / "examples" / f"{example['metadata']['name']}.yaml").read_text())
            if doc and doc.get("kind") == example["kind"]
        ]
        assert example["apiVersion"] == shipped["apiVersion"]
        assert example["spec"] == shipped["spec"]


def test_license_is_the_workspace_license(chart):
    license_ = re.search(r'^\[workspace\.package\][^\[]*?^license = "([^"]+)"', CARGO_TOML.read_text(), re.M | re.S)
    assert license_, "no license in Cargo.toml's [workspace.package]"
    assert chart.metadata["annotations"]["artifacthub.io/license"] == license_.group(1)
