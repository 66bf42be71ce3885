"""The docs against the code they describe.

* docs/api-reference.md names every field of the TaintPolicy CRD (spec and
  status, as full paths such as ``spec.matchers[].conditions[].for``), every
  enum value, printer column and selectable field, the annotations and the
  finalizer, and every reason of the Ready condition; and names no field the CRD
  does not have.
* docs/troubleshooting.md uses real metric names (operator/src/telemetry/metrics.rs) and
  lists them all.
* Every TaintPolicy in the docs (docs/*.md and README.md) is valid: each YAML
  block is run through ``taint-operator plan`` against examples/cluster.yaml,
  which applies the CRD's schema and CEL rules (exit 2 on invalid input) and
  compiles the regexes (reason InvalidSpec). A block whose first line is
  ``# expect: InvalidSpec`` must be reported InvalidSpec instead.

The binary is $TAINT_OPERATOR_BIN, else target/debug/taint-operator, else
``cargo run -q -p taint-operator --``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
API_REFERENCE = DOCS / "api-reference.md"
TROUBLESHOOTING = DOCS / "troubleshooting.md"
CRD_FILE = REPO / "charts" / "taint-operator" / "files" / "taintpolicies.nodetaint.io.yaml"
CLUSTER = REPO / "examples" / "cluster.yaml"
CRD_TYPES = REPO / "crd" / "src" / "types.rs"
REASONS_SOURCE = REPO / "engine" / "src" / "cluster_plan.rs"
METRICS_SOURCE = REPO / "operator" / "src" / "telemetry" / "metrics.rs"
PLAN_NOW = "2026-11-20T12:00:00Z"
EXPECT = re.compile(r"^#\s*expect:\s*(\w+)\s*$")


# --------------------------------------------------------------------------- CRD


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    doc = yaml.safe_load(CRD_FILE.read_text())
    assert doc["kind"] == "CustomResourceDefinition"
    return doc


@pytest.fixture(scope="module")
def version(crd) -> dict[str, Any]:
    versions = crd["spec"]["versions"]
    assert [v["name"] for v in versions] == ["v1alpha1"]
    return versions[0]


@pytest.fixture(scope="module")
def reference() -> str:
    return API_REFERENCE.read_text()


def walk(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, schema) of every property below `schema`; lists add `[]`."""
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], path + "[]")
        return
    for name, sub in (schema.get("properties") or {}).items():
        child = f"{path}.{name}" if path else name
        yield child, sub
        yield from walk(sub, child)


def field_paths(version: dict[str, Any]) -> dict[str, dict[str, Any]]:
    root = version["schema"]["openAPIV3Schema"]
    return {
        path: schema
        for path, schema in walk(root, "")
        if path.split(".")[0] in ("spec", "status") and "." in path
    }


def code_spans(text: str) -> set[str]:
    return set(re.findall(r"`([^`\n]+)`", text))


def test_crd_paths_are_found(version):
    paths = field_paths(version)
    # a sanity check of the walk itself
    for expected in (
        "spec.taints[].effect",
        "spec.matchers[].conditions[].for",
        "spec.readiness.criticalPods[].selector.matchExpressions[].values",
        "status.conditions[].lastTransitionTime",
        "status.pendingNodes",
    ):
        assert expected in paths, sorted(paths)


def test_reference_names_every_crd_field(version, reference):
    spans = code_spans(reference)
    missing = [p for p in field_paths(version) if p not in spans]
    assert missing == [], (
        f"{API_REFERENCE.relative_to(REPO)} does not mention these CRD fields "
        f"(as `path` in backticks): {missing}"
    )


def test_reference_names_no_field_the_crd_lacks(version, reference):
    known = set(field_paths(version))
    path_like = re.compile(r"^(spec|status)(\.[A-Za-z]+(\[\d*\])*)+$")
    unknown = sorted(
        span
        for span in code_spans(reference)
        if path_like.match(span) and re.sub(r"\[\d+\]", "[]", span) not in known
    )
    assert unknown == [], f"{API_REFERENCE.relative_to(REPO)} names fields the CRD lacks: {unknown}"


def test_reference_names_every_enum_value_and_default(version, reference):
    spans = code_spans(reference)
    for path, schema in field_paths(version).items():
        for value in schema.get("enum", []):
            assert value in spans, f"enum value {value!r} of {path} is not mentioned"
        if "default" in schema and schema["default"] not in ([], {}):
            default = schema["default"]
            if not isinstance(default, str):
                default = json.dumps(default)
            assert default in spans, f"default {default!r} of {path} is not mentioned"


def test_reference_names_every_validation_rule_subject(version, reference):
    """Every CEL rule of the CRD sits on a field the reference says has a CEL rule."""
    for path, schema in field_paths(version).items():
        for _ in schema.get("x-kubernetes-validations", []):
            row = next((ln for ln in reference.splitlines() if ln.startswith(f"| `{path}` |")), "")
            assert "CEL" in row, f"{path} has a CEL rule; its row in the reference does not say so"
    # rules across fields sit on spec itself: the reference quotes their messages
    flat = " ".join(reference.split())
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    messages = [rule["message"] for rule in spec.get("x-kubernetes-validations", [])]
    assert messages, "the CRD has no rules across spec fields any more"
    for message in messages:
        assert message in flat, f"the reference does not quote the spec rule {message!r}"


def test_reference_names_printer_columns(version, reference):
    spans = code_spans(reference)
    for column in version["additionalPrinterColumns"]:
        assert column["name"].upper() in spans, f"printer column {column['name']}"
        assert column["jsonPath"] in spans, f"printer column path {column['jsonPath']}"
        if column.get("priority", 0) > 0:
            head = f"| `{column['name'].upper()}` |"
            row = next(ln for ln in reference.splitlines() if ln.startswith(head))
            assert "-o wide" in row, f"{column['name']} is shown only with -o wide; say so"


def test_reference_names_selectable_fields(version, reference):
    spans = code_spans(reference)
    for field in version["selectableFields"]:
        path = field["jsonPath"].lstrip(".")
        assert path in spans, f"selectable field {path}"
        assert f"--field-selector {path}=" in reference


def test_reference_names_names(crd, reference):
    spans = code_spans(reference)
    names = crd["spec"]["names"]
    for value in (
        crd["metadata"]["name"],
        names["kind"],
        names["plural"],
        names["singular"],
        *names["shortNames"],
    ):
        assert value in spans, value


def rust_constants() -> dict[str, str]:
    return dict(re.findall(r'pub const (\w+): &str = "([^"]+)";', CRD_TYPES.read_text()))


def test_reference_names_annotations_finalizer_and_field_manager(reference):
    constants = rust_constants()
    spans = code_spans(reference)
    for name in (
        "FINALIZER",
        "MANAGED_TAINTS_ANNOTATION",
        "BOOTSTRAPPED_ANNOTATION",
        "POD_READY_ANNOTATION",
        "FIELD_MANAGER",
    ):
        assert name in constants, f"{CRD_TYPES.relative_to(REPO)} no longer defines {name}"
        assert constants[name] in spans, f"{name} = {constants[name]!r} is not in the reference"


def ready_reasons() -> list[str]:
    reasons = re.findall(r'Reason::(\w+) => "(\w+)"', REASONS_SOURCE.read_text())
    assert reasons, f"no Reason::X => \"X\" arms found in {REASONS_SOURCE.relative_to(REPO)}"
    return [text for _, text in reasons]


def test_reference_names_every_status_reason(reference):
    section = reference.split("### Reasons of the `Ready` condition")[1].split("\n## ")[0]
    rows = {
        line.split("|")[1].strip().strip("`")
        for line in section.splitlines()
        if line.startswith("| `")
    }
    assert rows == set(ready_reasons())


def test_troubleshooting_names_every_reason():
    text = TROUBLESHOOTING.read_text()
    for reason in ready_reasons():
        assert f"`{reason}`" in text, reason


# --------------------------------------------------------------------------- metrics


def metric_names() -> dict[str, set[str]]:
    """Registered metric → the series names Prometheus sees for it."""
    source = METRICS_SOURCE.read_text()
    prefix = re.search(r'Registry::with_prefix\("(\w+)"\)', source).group(1)
    field_types = dict(re.findall(r"^\s*pub (\w+): (.+),$", source, re.M))
    series: dict[str, set[str]] = {}
    register = r'registry\.register\(\s*"(\w+)",\s*"[^"]*",\s*(\w+)\.clone\(\)'
    registered = re.findall(register, source)
    for name, var in registered:
        kind = field_types[var]
        full = f"{prefix}_{name}"
        if "Counter" in kind:
            series[full] = {f"{full}_total"}
        elif "Histogram" in kind:
            series[full] = {full, f"{full}_bucket", f"{full}_sum", f"{full}_count"}
        else:
            series[full] = {full}
    assert len(series) >= 10, series
    return series


def docs_text() -> str:
    return "\n".join(p.read_text() for p in sorted(DOCS.glob("*.md")))


def test_docs_use_real_metric_names():
    real = set().union(*metric_names().values())
    used = set(re.findall(r"\btaint_operator_[a-z_]+", docs_text()))
    assert used, "the docs name no metric"
    assert sorted(used - real) == [], f"not metrics of the operator: {sorted(used - real)}"


def test_troubleshooting_lists_every_metric():
    text = TROUBLESHOOTING.read_text()
    for metric, names in metric_names().items():
        assert any(f"`{n}`" in text for n in names), f"{metric}: not in {TROUBLESHOOTING.name}"


# --------------------------------------------------------------------------- policies in the docs


def policy_blocks() -> list[tuple[str, str]]:
    """(id, yaml) of every ```yaml block that holds a TaintPolicy."""
    blocks = []
    for doc in [*sorted(DOCS.glob("*.md")), REPO / "README.md"]:
        text = doc.read_text()
        for match in re.finditer(r"^```ya?ml\n(.*?)^```", text, re.S | re.M):
            body = match.group(1)
            if re.search(r"^\s*kind:\s*TaintPolicy\s*$", body, re.M):
                line = text[: match.start()].count("\n") + 1
                blocks.append((f"{doc.relative_to(REPO)}:{line}", body))
    return blocks


BLOCKS = policy_blocks()


def test_docs_have_policies():
    files = {block_id.split(":")[0] for block_id, _ in BLOCKS}
    expected = {"docs/api-reference.md", "docs/troubleshooting.md", "docs/comparison.md"}
    assert expected <= files, files


def plan_command() -> list[str]:
    explicit = os.environ.get("TAINT_OPERATOR_BIN")
    if explicit:
        return [explicit]
    built = REPO / "target" / "debug" / "taint-operator"
    if built.is_file() and os.access(built, os.X_OK):
        return [str(built)]
    if shutil.which("cargo"):
        return ["cargo", "run", "-q", "-p", "taint-operator", "--"]
    pytest.skip("no taint-operator binary and no cargo to build one (set TAINT_OPERATOR_BIN)")


@pytest.mark.parametrize(("block_id", "body"), BLOCKS, ids=[b for b, _ in BLOCKS])
def test_doc_policy_is_valid(block_id, body, tmp_path):
    documents = [d for d in yaml.safe_load_all(body) if d]
    assert documents, f"{block_id}: empty YAML"
    for d in documents:
        assert (d.get("apiVersion"), d.get("kind")) == ("nodetaint.io/v1alpha1", "TaintPolicy"), (
            f"{block_id}: a block with a TaintPolicy must hold only TaintPolicies, "
            f"got {d.get('apiVersion')}/{d.get('kind')}"
        )
    first = body.lstrip().splitlines()[0]
    expect = EXPECT.match(first)
    expected_reason = expect.group(1) if expect else None

    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(body)
    done = subprocess.run(
        [
            *plan_command(),
            "plan",
            *("-f", str(policy_file)),
            *("--cluster", str(CLUSTER)),
            *("--now", PLAN_NOW),
            *("-o", "json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if expected_reason == "InvalidSpec":
        # What the validating webhook refuses, plan refuses too (exit 2, naming the field).
        assert done.returncode == 2, f"{block_id}: plan should refuse it; got:\n{done.stdout}{done.stderr}"
        assert ": spec." in done.stderr, f"{block_id}: the refusal names no field: {done.stderr}"
        return
    assert done.returncode == 0, f"{block_id}: taint-operator plan refused it:\n{done.stderr}"
    result = json.loads(done.stdout)
    reasons = {p["name"]: (p["reason"], p["message"]) for p in result["policies"]}
    assert set(reasons) == {d["metadata"]["name"] for d in documents}
    for name, (reason, message) in reasons.items():
        if expected_reason:
            assert reason == expected_reason, (
                f"{block_id}: {name} is {reason}, expected {expected_reason}"
            )
        else:
            assert reason != "InvalidSpec", f"{block_id}: {name}: {message}"


# --------------------------------------------------------------------------- chart values in the README

VALUES_FILE = REPO / "charts" / "taint-operator" / "values.yaml"


def readme_values_table() -> list[tuple[str, str]]:
    """(value, default cell) of each row of the README's table of chart values."""
    text = (REPO / "README.md").read_text()
    head = "| value | default | what it does |"
    assert head in text, "the README has no table of chart values"
    rows = []
    for line in text.split(head, 1)[1].splitlines()[2:]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append((cells[0].strip("`"), cells[1]))
    return rows


def test_readme_table_of_values_matches_values_yaml():
    values = yaml.safe_load(VALUES_FILE.read_text())
    rows = readme_values_table()
    assert len(rows) >= 9, rows
    for path, default in rows:
        node: Any = values
        for key in path.split("."):
            assert isinstance(node, dict) and key in node, f"README names {path}, which values.yaml lacks"
            node = node[key]
        # a default given as one code span is the value itself
        span = re.fullmatch(r"`([^`]*)`", default)
        if span:
            assert yaml.safe_load(span.group(1)) == node, f"{path}: README says {default}, values.yaml {node!r}"


def test_values_in_the_readme_are_explained_in_values_yaml():
    """Each value the README's table lists carries a `# --` comment in values.yaml
    (on it, or on its section for a nested one)."""
    lines = VALUES_FILE.read_text().splitlines()
    for path, _ in readme_values_table():
        keys = path.split(".")
        depth, found = 0, False
        for i, line in enumerate(lines):
            if line.strip().startswith("#") or not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            if indent == 2 * depth and line.strip().startswith(f"{keys[depth]}:"):
                if depth == len(keys) - 1:
                    j = i - 1
                    while j >= 0 and lines[j].strip().startswith("#") and not lines[j].strip().startswith("# --"):
                        j -= 1
                    found = j >= 0 and lines[j].strip().startswith("# --")
                    break
                depth += 1
        assert found, f"values.yaml: {path} has no `# --` comment"
