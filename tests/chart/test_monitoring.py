"""The chart's alerts and dashboard, as files (the chart carries them unchanged).

* files/prometheus-rules.yaml passes ``promtool check rules`` and the unit tests in
  prometheus-rules.test.yaml (``promtool test rules``), which give every alert input
  that fires it and input that does not.
* Every alert has a severity, a summary and a description, and a runbook_url
  pointing at a section of docs/troubleshooting.md that exists.
* files/grafana-dashboard.json is a dashboard whose panels all query Prometheus
  through the data source variable, and cover what an SRE looks at.

Whether the metrics the rules and the dashboard name are ones the operator exports
is checked against a real scrape by tests/tests/metrics_scrape.rs.

promtool is $PROMTOOL (tests/chart/run.sh fetches it), else the one on PATH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RULES_FILE = REPO / "charts" / "taint-operator" / "files" / "prometheus-rules.yaml"
DASHBOARD_FILE = REPO / "charts" / "taint-operator" / "files" / "grafana-dashboard.json"
RULE_TESTS = HERE / "prometheus-rules.test.yaml"
TROUBLESHOOTING = REPO / "docs" / "troubleshooting.md"
RUNBOOKS = "https://github.com/taint-operator/taint-operator/blob/main/docs/troubleshooting.md#"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not found:
        pytest.fail("no promtool: run the chart tests with tests/chart/run.sh, which fetches it")
    return found


def run_promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=HERE, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert rules and all("alert" in r for r in rules), "the rules file holds alerts only"
    return rules


def test_rules_pass_promtool_check(promtool):
    done = run_promtool(promtool, "check", "rules", str(RULES_FILE))
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_pass_their_unit_tests(promtool):
    done = run_promtool(promtool, "test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_unit_tests_fire_and_spare_every_alert(alerts):
    """Each alert has a case where it fires and one where it must not."""
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == ["../../charts/taint-operator/files/prometheus-rules.yaml"]
    fired: set[str] = set()
    spared: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else spared).add(check["alertname"])
    names = {a["alert"] for a in alerts}
    assert sorted(names - fired) == [], "alerts no test fires"
    assert sorted(names - spared) == [], "alerts no test expects to stay quiet"
    assert sorted((fired | spared) - names) == [], "tests of alerts that do not exist"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def test_every_alert_says_what_and_links_its_runbook(alerts):
    anchors = {
        github_anchor(line.lstrip("#"))
        for line in TROUBLESHOOTING.read_text().splitlines()
        if line.startswith("#")
    }
    for alert in alerts:
        name = alert["alert"]
        assert alert["labels"]["severity"] in ("critical", "warning"), name
        annotations = alert["annotations"]
        assert annotations["summary"] and annotations["description"], name
        url = annotations["runbook_url"]
        assert url.startswith(RUNBOOKS), f"{name}: {url}"
        anchor = url.removeprefix(RUNBOOKS)
        assert anchor == name.lower(), f"{name}: the runbook is the section named after it"
        assert anchor in anchors, f"{name}: {TROUBLESHOOTING.name} has no section #{anchor}"


# --------------------------------------------------------------------------- dashboard


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD_FILE.read_text())


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_dashboard_identity(dashboard):
    assert dashboard["uid"] == "taint-operator"
    assert dashboard["title"] == "taint-operator"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"


def test_dashboard_panels_query_prometheus_through_the_variable(dashboard):
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels(dashboard):
        assert p["title"] and p.get("description"), p["id"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert "taint_operator_" in t["expr"], (p["title"], t["expr"])
            # every query follows the namespace picker
            assert 'namespace=~"$namespace"' in t["expr"], (p["title"], t["expr"])


def test_dashboard_covers_what_an_sre_looks_at(dashboard):
    exprs = " ".join(t["expr"] for p in panels(dashboard) for t in p["targets"])
    for metric in (
        "taint_operator_leader",
        "taint_operator_reconciles_total",
        "taint_operator_reconcile_errors_total",
        "taint_operator_reconcile_duration_seconds_bucket",
        "taint_operator_tainted_nodes",
        "taint_operator_taints_added_total",
        "taint_operator_taints_removed_total",
        "taint_operator_api_requests_total",
        "taint_operator_resync_corrections_total",
        "taint_operator_policy_ready",
    ):
        assert metric in exprs, f"no panel shows {metric}"


def test_dashboard_panels_do_not_overlap(dashboard):
    taken: set[tuple[int, int]] = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells
