"""Render and lint charts/taint-operator with the real Helm v4 engine.

helm-python-sdk (import name ``helm_python``) embeds Helm's Go SDK as a shared
library, so no ``helm`` binary and no cluster are needed: ``Chart.render`` is
``helm template``, ``lint`` is ``helm lint`` and ``Chart.validate_schema``
checks values against values.schema.json.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import ssl
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "taint-operator"
RULES_FILE = CHART / "files" / "clusterrole-rules.yaml"
CRD_FILE = CHART / "files" / "taintpolicies.nodetaint.io.yaml"
CARGO_TOML = REPO / "Cargo.toml"
ALERTS_FILE = CHART / "files" / "prometheus-rules.yaml"
DASHBOARD_FILE = CHART / "files" / "grafana-dashboard.json"

RELEASE = "tp"
NAMESPACE = "taint-system"
FULLNAME = "tp-taint-operator"
# The oldest Kubernetes the chart admits (Chart.yaml kubeVersion).
KUBE_VERSION = "v1.32.0"

WEBHOOK = {"webhook": {"enabled": True}}
CERT_MANAGER = {"webhook": {"enabled": True, "certManager": {"enabled": True}}}
MONITORING = {
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "grafanaDashboard": {"enabled": True},
}
NON_DEFAULT: dict[str, Any] = {
    "replicaCount": 3,
    "image": {"tag": "v9.9.9", "pullPolicy": "Always"},
    "logLevel": "debug",
    "logFormat": "text",
    "resyncInterval": "0",
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/out-of-service", "operator": "Exists", "effect": "NoExecute"},
    ],
    "webhook": {
        "enabled": True,
        "failurePolicy": "Fail",
        "timeoutSeconds": 5,
        "objectSelector": {"matchLabels": {"nodetaint.io/webhook": "enabled"}},
    },
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}, "interval": "15s"},
}

# What the operator's code calls, verb by verb (operator/src: the watches, the node
# patch and its re-read after a conflict, the finalizer's and the status' patches, the
# drain's pod list and evictions, kube's event Recorder). The rules file must say
# exactly this: a verb more is a grant nothing uses.
EXPECTED_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": ["nodetaint.io"], "resources": ["taintpolicies"], "verbs": ["list", "watch", "patch"]},
    {"apiGroups": ["nodetaint.io"], "resources": ["taintpolicies/status"], "verbs": ["patch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]

CLUSTER_SCOPED = {
    "CustomResourceDefinition",
    "FlowSchema",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}


# --------------------------------------------------------------------------- helpers


class Rendered:
    """The objects of one render, plus NOTES.txt."""

    def __init__(self, manifests: dict[str, str]) -> None:
        self.notes = ""
        self.objects: list[dict[str, Any]] = []
        for path, text in sorted(manifests.items()):
            if path.endswith("NOTES.txt"):
                self.notes = text
                continue
            for doc in yaml.safe_load_all(text):
                if doc:
                    assert "kind" in doc, f"{path}: object without kind: {doc}"
                    self.objects.append(doc)

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.all(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
        return found[0]

    def kinds(self) -> set[str]:
        return {o["kind"] for o in self.objects}

    @property
    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment")

    @property
    def pod(self) -> dict[str, Any]:
        return self.deployment["spec"]["template"]["spec"]

    @property
    def container(self) -> dict[str, Any]:
        containers = self.pod["containers"]
        assert len(containers) == 1
        return containers[0]


@pytest.fixture(scope="session")
def chart():
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> Rendered:
    return Rendered(
        chart.render(
            copy.deepcopy(values), name=RELEASE, namespace=NAMESPACE, is_install=True
        )
    )


@pytest.fixture(scope="session")
def default(chart) -> Rendered:
    return render(chart)


@pytest.fixture(scope="session")
def webhook(chart) -> Rendered:
    return render(chart, WEBHOOK)


@pytest.fixture(scope="session")
def cert_manager(chart) -> Rendered:
    return render(chart, CERT_MANAGER)


@pytest.fixture(scope="session")
def non_default(chart) -> Rendered:
    return render(chart, NON_DEFAULT)


def lint_problems(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    report = helm.lint(
        CHART, copy.deepcopy(values), strict=True, namespace=NAMESPACE, kube_version=KUBE_VERSION
    )
    assert report["total_charts_linted"] == 1
    # severity: 1=info (e.g. "icon is recommended"), 2=warning, 3=error
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    return problems + [{"severity": 3, "error": e} for e in report["errors"]]


def webhook_config(r: Rendered) -> dict[str, Any]:
    mwc = r.one("MutatingWebhookConfiguration", FULLNAME)
    assert len(mwc["webhooks"]) == 1
    return mwc


def pem_cert(b64: str) -> str:
    pem = base64.b64decode(b64).decode()
    assert pem.startswith("-----BEGIN CERTIFICATE-----"), pem[:40]
    return pem


# --------------------------------------------------------------------------- engine, metadata, lint


def test_engine_is_helm_v4():
    assert helm.helm_sdk_version().startswith("v4."), helm.helm_sdk_version()


def test_chart_metadata(chart):
    meta = chart.metadata
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == "taint-operator"
    assert meta["version"] == "0.3.1"
    assert meta["appVersion"] == "0.3.1"
    assert chart.schema is not None, "values.schema.json must ship with the chart"


def version_floor(constraint: str) -> tuple[int, int, int]:
    """The version a `>=X.Y.Z-0` constraint starts at. Only that form is accepted:
    one lower bound, and `-0` so that pre-release and vendor builds (v1.32.4-eks-…)
    of a supported version are admitted too."""
    assert re.fullmatch(r">=\d+\.\d+\.\d+-0", constraint), constraint
    major, minor, patch = constraint[2:-2].split(".")
    return int(major), int(minor), int(patch)


def test_kube_version_is_what_the_crd_and_the_binary_need(chart):
    floor = version_floor(chart.metadata["kubeVersion"])
    crd = yaml.safe_load(CRD_FILE.read_text())
    needs = [(1, 29, 0)]  # x-kubernetes-validations (CEL) are GA from 1.29
    if any(v.get("selectableFields") for v in crd["spec"]["versions"]):
        needs.append((1, 32, 0))  # CRD field selectors are GA from 1.32
    assert floor == max(needs), f"kubeVersion floor {floor}, the CRD needs {max(needs)}"
    # The binary is built against one Kubernetes API version (k8s-openapi's
    # feature): the chart must admit the version it is built and tested for.
    built = re.search(r'k8s-openapi = \{[^}]*"v(\d+)_(\d+)"', CARGO_TOML.read_text())
    assert built, "no k8s-openapi version feature in Cargo.toml"
    assert floor <= (int(built.group(1)), int(built.group(2)), 0)


def test_no_crds_directory(chart):
    """Helm never upgrades crds/: the CRD must come from the templates instead."""
    assert chart.crds == []
    assert not (CHART / "crds").exists()


@pytest.mark.parametrize(
    "values",
    [
        None,
        WEBHOOK,
        CERT_MANAGER,
        NON_DEFAULT,
        MONITORING,
        {"replicaCount": 1, "rbac": {"create": False}},
        {"image": {"digest": "sha256:" + "0" * 64}, "networkPolicy": {"enabled": True}},
    ],
    ids=["default", "webhook", "cert-manager", "non-default", "monitoring", "minimal", "hardening"],
)
def test_lint_is_clean(values):
    assert lint_problems(values) == []


def test_lint_reports_invalid_values():
    problems = lint_problems({"webhook": {"failurePolicy": "Sometimes"}})
    assert problems, "lint accepted failurePolicy: Sometimes"
    assert any("failurePolicy" in p["error"] for p in problems)


# --------------------------------------------------------------------------- the CRD


def without_release_metadata(crd: dict[str, Any]) -> dict[str, Any]:
    crd = copy.deepcopy(crd)
    crd["metadata"].pop("labels", None)
    crd["metadata"].pop("annotations", None)
    return crd


def test_crd_is_the_generated_file_with_the_release_labels(default):
    crd = default.one("CustomResourceDefinition", "taintpolicies.nodetaint.io")
    # exactly what `taint-operator crd` prints (operator/tests/crd_in_chart.rs checks the file)
    assert without_release_metadata(crd) == yaml.safe_load(CRD_FILE.read_text())
    labels = crd["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "Helm"
    assert labels["app.kubernetes.io/instance"] == RELEASE
    assert labels["helm.sh/chart"] == "taint-operator-0.3.1"
    # helm uninstall leaves it, and every TaintPolicy with it
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert "namespace" not in crd["metadata"]


def test_crd_not_kept_when_told(chart):
    crd = render(chart, {"crds": {"keep": False}}).one("CustomResourceDefinition")
    assert "annotations" not in crd["metadata"]
    assert without_release_metadata(crd) == yaml.safe_load(CRD_FILE.read_text())


def test_crd_left_to_the_user_when_told(chart):
    r = render(chart, {"crds": {"install": False}})
    assert r.all("CustomResourceDefinition") == []
    assert r.one("Deployment", FULLNAME)


# --------------------------------------------------------------------------- defaults


def test_default_objects(default):
    assert default.kinds() == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
        # The TaintPolicy validating webhook is on by default: its configuration
        # and the chart-generated serving certificate.
        "Secret",
        "ValidatingWebhookConfiguration",
        # installed and upgraded with the release, kept on uninstall
        "CustomResourceDefinition",
        # the operator's requests served at workload-high (API Priority and Fairness)
        "FlowSchema",
    }
    for obj in default.objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace") == NAMESPACE, obj["metadata"]


def test_default_deployment(default):
    dep = default.one("Deployment", FULLNAME)
    assert dep["spec"]["replicas"] == 2
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert default.pod["serviceAccountName"] == FULLNAME

    c = default.container
    assert c["image"] == "ghcr.io/taint-operator/taint-operator:0.3.1"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["command"] == ["/usr/local/bin/taint-operator"]
    assert c["args"] == [
        "run",
        "--metrics-addr=0.0.0.0:8080",
        "--leader-elect",
        "--lease-namespace=$(POD_NAMESPACE)",
        f"--lease-name={FULLNAME}",
        "--log-format=json",
        "--log-level=info",
        "--resync-interval=5m",
        "--event-qps=20",
        "--webhook-addr=0.0.0.0:9443",
        "--webhook-cert-file=/tls/tls.crt",
        "--webhook-key-file=/tls/tls.key",
        "--registered-webhooks=taintpolicy",
    ]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert c["ports"] == [
        {"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
        {"name": "webhook", "containerPort": 9443, "protocol": "TCP"},
    ]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["resources"] == {
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "limits": {"memory": "128Mi"},
    }


def test_default_security_context(default):
    sc = default.container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 65532
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    psc = default.pod["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}


UNHEALTHY_NODE_TOLERATIONS = [
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
]


def tolerated(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> dict[str, Any] | None:
    """The toleration the taint eviction controller applies to `taint`: the first that
    matches it (Kubernetes' GetMatchingTolerations), or None."""
    for t in tolerations:
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("key", "") == "" and t.get("operator") == "Exists":
            return t
        if t.get("key") == taint["key"] and (
            t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", "")
        ):
            return t
    return None


def test_default_tolerations(default):
    tolerations = default.pod["tolerations"]
    # the unhealthy-node ones first, so that they are the ones applied to those taints
    assert tolerations[:2] == UNHEALTHY_NODE_TOLERATIONS
    assert tolerations[2:] == [
        {"operator": "Exists", "effect": "NoExecute"},
        {"operator": "Exists", "effect": "NoSchedule"},
    ]
    # a replica on a dead node goes after 60 s ...
    for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"):
        assert tolerated(tolerations, {"key": key, "effect": "NoExecute"})["tolerationSeconds"] == 60
    # ... but stays, and schedules, wherever the shipped examples' policies put their taints
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "TaintPolicy":
                continue
            for taint in doc["spec"]["taints"]:
                found = tolerated(tolerations, taint)
                assert found is not None, f"{path.name}: {taint} not tolerated"
                assert "tolerationSeconds" not in found, f"{path.name}: {taint} tolerated for {found}"


def test_unhealthy_node_toleration_seconds(chart):
    r = render(chart, {"unhealthyNodeTolerationSeconds": 300})
    assert [t["tolerationSeconds"] for t in r.pod["tolerations"][:2]] == [300, 300]
    # null: left to the tolerations list, and NOTES say so
    r = render(chart, {"unhealthyNodeTolerationSeconds": None})
    assert not any(t.get("key", "").startswith("node.kubernetes.io/") for t in r.pod["tolerations"])
    assert "unhealthyNodeTolerationSeconds is null" in r.notes
    assert "unhealthyNodeTolerationSeconds" not in render(chart).notes
    # the unhealthy-node tolerations come first even before a blanket toleration
    r = render(chart, {"tolerations": [{"operator": "Exists"}]})
    assert r.pod["tolerations"] == [*UNHEALTHY_NODE_TOLERATIONS, {"operator": "Exists"}]
    assert tolerated(r.pod["tolerations"], {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"})[
        "tolerationSeconds"
    ] == 60


def test_priority_class(default, chart):
    assert default.pod["priorityClassName"] == "system-cluster-critical"
    assert render(chart, {"priorityClassName": "platform-critical"}).pod["priorityClassName"] == "platform-critical"
    assert "priorityClassName" not in render(chart, {"priorityClassName": ""}).pod


def test_api_priority(default, chart):
    fs = default.one("FlowSchema", FULLNAME)["spec"]
    assert fs["priorityLevelConfiguration"] == {"name": "workload-high"}
    # before the built-in schema for every ServiceAccount (9000), after kube-system's (900)
    assert 900 < fs["matchingPrecedence"] < 9000
    assert fs["distinguisherMethod"] == {"type": "ByUser"}
    (rule,) = fs["rules"]
    assert rule["subjects"] == [
        {"kind": "ServiceAccount", "serviceAccount": {"name": FULLNAME, "namespace": NAMESPACE}}
    ]
    (resources,) = rule["resourceRules"]
    assert resources == {
        "verbs": ["*"],
        "apiGroups": ["*"],
        "resources": ["*"],
        "namespaces": ["*"],
        "clusterScope": True,
    }
    other = render(
        chart,
        {
            "apiPriority": {"priorityLevel": "platform", "matchingPrecedence": 500},
            "serviceAccount": {"create": False, "name": "ops"},
        },
    ).one("FlowSchema", FULLNAME)["spec"]
    assert other["priorityLevelConfiguration"] == {"name": "platform"}
    assert other["matchingPrecedence"] == 500
    assert other["rules"][0]["subjects"][0]["serviceAccount"]["name"] == "ops"
    assert len(render(chart, {"apiPriority": {"priorityLevel": ""}}).all("FlowSchema")) == 1


def test_the_lease_has_a_priority_level_of_its_own(default, chart):
    main = default.one("FlowSchema", FULLNAME)["spec"]
    lease = default.one("FlowSchema", f"{FULLNAME}-leader-election")["spec"]
    assert lease["priorityLevelConfiguration"] == {"name": "leader-election"}
    # matched before the schema for the rest of the operator's requests
    assert lease["matchingPrecedence"] == main["matchingPrecedence"] - 1
    (rule,) = lease["rules"]
    assert rule["subjects"] == main["rules"][0]["subjects"]
    assert rule["resourceRules"] == [
        {
            "verbs": ["get", "create", "update"],
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "namespaces": [NAMESPACE],
        }
    ]
    moved = render(chart, {"apiPriority": {"matchingPrecedence": 500}})
    assert moved.one("FlowSchema", f"{FULLNAME}-leader-election")["spec"]["matchingPrecedence"] == 499
    assert len(render(chart, {"apiPriority": {"leaderElectionPriorityLevel": ""}}).all("FlowSchema")) == 1
    assert "FlowSchema" not in render(
        chart, {"apiPriority": {"priorityLevel": "", "leaderElectionPriorityLevel": ""}}
    ).kinds()


def test_event_qps(chart):
    args = render(chart, {"eventQPS": 5}).container["args"]
    assert "--event-qps=5" in args and "--event-qps=20" not in args
    assert "--event-qps=0" in render(chart, {"eventQPS": 0}).container["args"]


def test_event_qps_default_is_the_binary_default():
    """The chart passes the flag's own default, so leaving it unset means the same."""
    source = (REPO / "operator" / "src" / "controller" / "node_events.rs").read_text()
    binary = re.search(r"pub const DEFAULT_EVENT_QPS: u32 = (\d+);", source)
    assert binary, "DEFAULT_EVENT_QPS not found"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["eventQPS"] == int(binary.group(1))


# --------------------------------------------------------------------------- image


DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_image_digest_alone(chart):
    r = render(chart, {"image": {"digest": DIGEST}})
    assert r.container["image"] == f"ghcr.io/taint-operator/taint-operator@{DIGEST}"
    assert r.deployment["metadata"]["labels"]["app.kubernetes.io/version"] == "0.3.1"


def test_image_digest_with_tag(chart):
    r = render(chart, {"image": {"tag": "v1.2.3", "digest": DIGEST}})
    assert r.container["image"] == f"ghcr.io/taint-operator/taint-operator:v1.2.3@{DIGEST}"
    assert r.deployment["metadata"]["labels"]["app.kubernetes.io/version"] == "v1.2.3"


def test_digest_in_the_tag_keeps_the_version_label_valid(chart):
    r = render(chart, {"image": {"tag": f"0.1.0@{DIGEST}"}})
    assert r.container["image"] == f"ghcr.io/taint-operator/taint-operator:0.1.0@{DIGEST}"
    for obj in r.objects:
        assert obj["metadata"]["labels"]["app.kubernetes.io/version"] == "0.1.0", obj["kind"]


def test_version_label_of_odd_tags(chart):
    label_value = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    for tag, label in [
        ("x" * 70 + "-", "x" * 63),  # a label value holds 63 characters
        ("_v1.", "v1"),  # and starts and ends alphanumeric
    ]:
        r = render(chart, {"image": {"tag": tag}})
        got = r.deployment["metadata"]["labels"]["app.kubernetes.io/version"]
        assert got == label and label_value.match(got) and len(got) <= 63, (tag, got)


def test_digest_twice_is_refused(chart):
    with pytest.raises(helm.HelmError) as refused:
        render(chart, {"image": {"tag": f"0.1.0@{DIGEST}", "digest": DIGEST}})
    assert "not both" in str(refused.value)


def test_default_zone_spread(default):
    (constraint,) = default.pod["topologySpreadConstraints"]
    assert constraint == {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "matchLabelKeys": ["pod-template-hash"],
        "labelSelector": {"matchLabels": default.deployment["spec"]["selector"]["matchLabels"]},
    }


def test_zone_spread_can_be_replaced_or_removed(chart):
    mine = {"maxSkew": 2, "topologyKey": "example.com/rack", "whenUnsatisfiable": "DoNotSchedule"}
    selector = {"matchLabels": {"team": "ops"}}
    r = render(chart, {"topologySpreadConstraints": [mine, {**mine, "labelSelector": selector}]})
    first, second = r.pod["topologySpreadConstraints"]
    # one without a selector gets the operator pods' labels; one with its own keeps it
    assert first == {**mine, "labelSelector": {"matchLabels": r.deployment["spec"]["selector"]["matchLabels"]}}
    assert second == {**mine, "labelSelector": selector}
    assert "topologySpreadConstraints" not in render(chart, {"topologySpreadConstraints": []}).pod
    # the hostname anti-affinity stays either way
    assert "podAntiAffinity" in r.pod["affinity"]


def test_default_anti_affinity_and_pdb(default):
    preferred = default.pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert len(preferred) == 1
    term = preferred[0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == default.deployment["spec"]["selector"][
        "matchLabels"
    ]
    pdb = default.one("PodDisruptionBudget", FULLNAME)
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == default.deployment["spec"]["selector"]


def test_rules_file_is_what_the_operator_uses():
    rules = yaml.safe_load(RULES_FILE.read_text())
    assert rules == EXPECTED_RULES


def test_cluster_role_rules_equal_rules_file(default):
    cr = default.one("ClusterRole", FULLNAME)
    assert cr["rules"] == yaml.safe_load(RULES_FILE.read_text())
    assert not any("leases" in r["resources"] for r in cr["rules"])
    crb = default.one("ClusterRoleBinding", FULLNAME)
    assert crb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": FULLNAME,
    }
    assert crb["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    ]
    assert default.one("ServiceAccount", FULLNAME)["metadata"]["namespace"] == NAMESPACE


def test_leases_role_in_release_namespace(default):
    roles = default.all("Role")
    assert len(roles) == 1
    role = roles[0]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update"],
        }
    ]
    rb = default.one("RoleBinding")
    assert rb["metadata"]["namespace"] == NAMESPACE
    assert rb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert rb["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    ]


AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
READ_VERBS = {"get", "list", "watch"}


def test_viewer_role_reads_policies_and_is_aggregated_to_view(default):
    viewer = default.one("ClusterRole", f"{FULLNAME}-viewer")
    labels = viewer["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == RELEASE
    # edit and admin take it in through view (view is aggregated to edit, edit to admin)
    assert {k: v for k, v in labels.items() if k.startswith(AGGREGATE)} == {f"{AGGREGATE}view": "true"}
    assert viewer["rules"] == [
        {
            "apiGroups": ["nodetaint.io"],
            "resources": ["taintpolicies", "taintpolicies/status"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert "aggregationRule" not in viewer


def test_editor_role_writes_policies_and_is_aggregated_to_nothing(default):
    editor = default.one("ClusterRole", f"{FULLNAME}-editor")
    # a policy can taint any node and evict any pod: never handed out with edit or admin
    assert not [k for k in editor["metadata"]["labels"] if k.startswith(AGGREGATE)]
    (rule,) = editor["rules"]
    assert rule["apiGroups"] == ["nodetaint.io"]
    assert rule["resources"] == ["taintpolicies"]
    assert set(rule["verbs"]) == READ_VERBS | {"create", "update", "patch", "delete"}
    # neither role is bound by the chart: binding the editor is the cluster admin's call
    bound = {b["roleRef"]["name"] for b in default.all("ClusterRoleBinding")}
    assert bound.isdisjoint({f"{FULLNAME}-viewer", f"{FULLNAME}-editor"})


def test_user_roles_can_be_left_out(chart):
    for values in ({"userRoles": {"enabled": False}}, {"rbac": {"create": False}}):
        names = {o["metadata"]["name"] for o in render(chart, values).all("ClusterRole")}
        assert names.isdisjoint({f"{FULLNAME}-viewer", f"{FULLNAME}-editor"}), values
    assert lint_problems({"userRoles": {"enabled": False}}) == []


def test_default_has_the_policy_webhook_and_not_the_node_webhook(default):
    assert default.all("MutatingWebhookConfiguration") == []
    assert default.all("Certificate") == []
    assert default.all("ServiceMonitor") == []
    vwc = default.one("ValidatingWebhookConfiguration", f"{FULLNAME}-policies")
    (wh,) = vwc["webhooks"]
    assert wh["name"] == "taintpolicies.nodetaint.io"
    assert wh["failurePolicy"] == "Ignore"
    assert wh["timeoutSeconds"] == 5
    # It writes nothing, so dry runs reach it (kubectl apply --dry-run=server shows the impact).
    assert wh["sideEffects"] == "None"
    assert wh["admissionReviewVersions"] == ["v1"]
    assert wh["rules"] == [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["nodetaint.io"],
            "apiVersions": ["v1alpha1"],
            "resources": ["taintpolicies"],
            "scope": "Cluster",
        }
    ]
    assert wh["clientConfig"]["service"] == {
        "name": FULLNAME,
        "namespace": NAMESPACE,
        "path": "/validate-taintpolicy",
        "port": 443,
    }
    # The same certificate as the Node webhook would use.
    secret = default.one("Secret", f"{FULLNAME}-webhook-tls")
    assert wh["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert any(m["mountPath"] == "/tls" for m in default.container["volumeMounts"])
    svc = default.one("Service", FULLNAME)
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"},
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"},
    ]
    assert svc["spec"]["selector"] == default.deployment["spec"]["selector"]["matchLabels"]


def test_no_webhook_at_all_runs_no_webhook_server(chart):
    r = render(chart, {"policyWebhook": {"enabled": False}})
    assert r.all("MutatingWebhookConfiguration") == []
    assert r.all("ValidatingWebhookConfiguration") == []
    assert r.all("Secret") == []
    assert not any(a.startswith("--webhook") or a.startswith("--registered") for a in r.container["args"])
    assert not any(m["mountPath"] == "/tls" for m in r.container["volumeMounts"])
    assert [p["name"] for p in r.one("Service", FULLNAME)["spec"]["ports"]] == ["metrics"]


def test_policy_webhook_values(chart):
    r = render(chart, {"policyWebhook": {"failurePolicy": "Fail", "timeoutSeconds": 10}})
    (wh,) = r.one("ValidatingWebhookConfiguration", f"{FULLNAME}-policies")["webhooks"]
    assert (wh["failurePolicy"], wh["timeoutSeconds"]) == ("Fail", 10)


def test_notes_say_how_to_check(default):
    notes = default.notes
    assert f"kubectl -n {NAMESPACE} get pods" in notes
    assert "kubectl get tp" in notes
    assert f"logs deploy/{FULLNAME}" in notes
    assert f"port-forward svc/{FULLNAME} 8080:8080" in notes
    assert "/metrics" in notes


# --------------------------------------------------------------------------- webhook (genCA)


def test_webhook_configuration(webhook):
    mwc = webhook_config(webhook)
    wh = mwc["webhooks"][0]
    assert wh["name"] == "nodes.nodetaint.io"
    assert wh["failurePolicy"] == "Ignore"
    assert wh["timeoutSeconds"] == 3
    assert wh["sideEffects"] == "None"
    assert wh["admissionReviewVersions"] == ["v1"]
    assert wh["reinvocationPolicy"] == "Never"
    assert wh["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["nodes"],
            "scope": "Cluster",
        }
    ]
    assert "objectSelector" not in wh
    assert "namespaceSelector" not in wh
    assert wh["clientConfig"]["service"] == {
        "name": FULLNAME,
        "namespace": NAMESPACE,
        "path": "/mutate-node",
        "port": 443,
    }
    assert "cert-manager.io/inject-ca-from" not in (mwc["metadata"].get("annotations") or {})


def test_webhook_genca_secret_and_ca_bundle(webhook):
    secret = webhook.one("Secret", f"{FULLNAME}-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    ca_bundle = webhook_config(webhook)["webhooks"][0]["clientConfig"]["caBundle"]
    assert ca_bundle, "caBundle is empty"
    assert ca_bundle == secret["data"]["ca.crt"]
    pem_cert(ca_bundle)
    pem_cert(secret["data"]["tls.crt"])
    assert "PRIVATE KEY" in base64.b64decode(secret["data"]["tls.key"]).decode()
    assert webhook.all("Certificate") == [] and webhook.all("Issuer") == []


def test_webhook_genca_certificate_is_served_for_the_service(webhook, tmp_path):
    """A TLS handshake in memory: the serving cert verifies against caBundle for
    the Service's DNS name, the way the API server calls the webhook."""
    data = webhook.one("Secret", f"{FULLNAME}-webhook-tls")["data"]
    for key in data:
        (tmp_path / key).write_bytes(base64.b64decode(data[key]))
    ca_bundle = webhook_config(webhook)["webhooks"][0]["clientConfig"]["caBundle"]

    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    client_ctx.load_verify_locations(cadata=pem_cert(ca_bundle))

    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=f"{FULLNAME}.{NAMESPACE}.svc")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for name, end in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    assert all(done.values()), done
    peer = client.getpeercert()
    sans = {v for k, v in peer["subjectAltName"] if k == "DNS"}
    assert {
        FULLNAME,
        f"{FULLNAME}.{NAMESPACE}.svc",
        f"{FULLNAME}.{NAMESPACE}.svc.cluster.local",
    } <= sans


def test_webhook_deployment_and_service(webhook):
    c = webhook.container
    for arg in (
        "--webhook-addr=0.0.0.0:9443",
        "--webhook-cert-file=/tls/tls.crt",
        "--webhook-key-file=/tls/tls.key",
    ):
        assert arg in c["args"]
    assert "--leader-elect" in c["args"]
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in c["ports"]
    mounts = [m for m in c["volumeMounts"] if m["mountPath"] == "/tls"]
    assert len(mounts) == 1 and mounts[0]["readOnly"] is True
    volumes = {v["name"]: v for v in webhook.pod["volumes"]}
    assert volumes[mounts[0]["name"]]["secret"]["secretName"] == f"{FULLNAME}-webhook-tls"
    svc = webhook.one("Service", FULLNAME)
    assert {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"} in svc[
        "spec"
    ]["ports"]
    assert "Node admission webhook is enabled" in webhook.notes


# --------------------------------------------------------------------------- webhook (cert-manager)


def test_webhook_cert_manager(cert_manager):
    assert cert_manager.all("Secret") == [], "no chart-generated CA with cert-manager"
    issuer = cert_manager.one("Issuer")
    assert issuer["apiVersion"] == "cert-manager.io/v1"
    assert issuer["spec"] == {"selfSigned": {}}
    assert issuer["metadata"]["namespace"] == NAMESPACE
    cert = cert_manager.one("Certificate", f"{FULLNAME}-webhook")
    assert cert["apiVersion"] == "cert-manager.io/v1"
    assert cert["metadata"]["namespace"] == NAMESPACE
    assert cert["spec"]["secretName"] == f"{FULLNAME}-webhook-tls"
    assert f"{FULLNAME}.{NAMESPACE}.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    assert cert["spec"]["issuerRef"]["kind"] == "Issuer"

    mwc = webhook_config(cert_manager)
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{NAMESPACE}/{FULLNAME}-webhook"
    )
    assert "caBundle" not in mwc["webhooks"][0]["clientConfig"]

    volumes = {v["name"]: v for v in cert_manager.pod["volumes"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == cert["spec"]["secretName"]
    assert "--webhook-cert-file=/tls/tls.crt" in cert_manager.container["args"]


def test_webhook_cert_manager_existing_issuer(chart):
    values = copy.deepcopy(CERT_MANAGER)
    values["webhook"]["certManager"]["issuerRef"] = {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    r = render(chart, values)
    assert r.all("Issuer") == []
    assert r.one("Certificate")["spec"]["issuerRef"] == values["webhook"]["certManager"][
        "issuerRef"
    ]


# --------------------------------------------------------------------------- non-default values


def test_non_default_values(non_default):
    assert non_default.deployment["spec"]["replicas"] == 3
    c = non_default.container
    assert c["image"] == "ghcr.io/taint-operator/taint-operator:v9.9.9"
    assert c["imagePullPolicy"] == "Always"
    assert "--log-level=debug" in c["args"]
    assert "--log-format=text" in c["args"]
    assert "--resync-interval=0" in c["args"]
    assert non_default.pod["tolerations"] == [*UNHEALTHY_NODE_TOLERATIONS, *NON_DEFAULT["tolerations"]]

    wh = webhook_config(non_default)["webhooks"][0]
    assert wh["failurePolicy"] == "Fail"
    assert wh["timeoutSeconds"] == 5
    assert wh["objectSelector"] == {"matchLabels": {"nodetaint.io/webhook": "enabled"}}
    assert "failurePolicy Fail" in non_default.notes

    sm = non_default.one("ServiceMonitor", FULLNAME)
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["namespace"] == NAMESPACE
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    assert sm["spec"]["endpoints"] == [
        {
            "port": "metrics",
            "path": "/metrics",
            "scheme": "http",
            "interval": "15s",
            "scrapeTimeout": "10s",
        }
    ]
    assert sm["spec"]["selector"]["matchLabels"].items() <= non_default.one("Service")["metadata"][
        "labels"
    ].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert non_default.one("PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_tolerations_can_be_removed(chart):
    r = render(chart, {"tolerations": []})
    assert r.pod["tolerations"] == UNHEALTHY_NODE_TOLERATIONS
    assert "WARNING: tolerations is empty" in r.notes
    r = render(chart, {"tolerations": [], "unhealthyNodeTolerationSeconds": None})
    assert "tolerations" not in r.pod


def test_single_replica_has_no_pdb(chart):
    r = render(chart, {"replicaCount": 1})
    assert r.deployment["spec"]["replicas"] == 1
    assert r.all("PodDisruptionBudget") == []


def test_custom_affinity_replaces_anti_affinity(chart):
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "role", "operator": "In", "values": ["infra"]}]}
                ]
            }
        }
    }
    assert render(chart, {"affinity": affinity}).pod["affinity"] == affinity


def test_names_follow_fullname_override(chart):
    r = render(chart, {"fullnameOverride": "to", **WEBHOOK})
    assert r.one("Deployment", "to")
    assert "--lease-name=to" in r.container["args"]
    assert r.one("ClusterRole", "to")
    mwc = r.one("MutatingWebhookConfiguration", "to")
    assert mwc["webhooks"][0]["clientConfig"]["service"]["name"] == "to"


def test_rbac_and_service_account_can_be_external(chart):
    r = render(chart, {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "ops"}})
    assert r.kinds().isdisjoint({"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})
    assert r.all("ServiceAccount") == []
    assert r.pod["serviceAccountName"] == "ops"


# --------------------------------------------------------------------------- NetworkPolicy

NETWORK_POLICY = {"networkPolicy": {"enabled": True}}


def ingress_to(policy: dict[str, Any], port: int) -> list[dict[str, Any]]:
    return [r for r in policy["spec"]["ingress"] if {"port": port, "protocol": "TCP"} in r["ports"]]


def test_no_network_policy_by_default(default):
    assert default.all("NetworkPolicy") == []


def test_network_policy_defaults(chart):
    r = render(chart, NETWORK_POLICY)
    np = r.one("NetworkPolicy", FULLNAME)
    assert np["apiVersion"] == "networking.k8s.io/v1"
    assert np["metadata"]["namespace"] == NAMESPACE
    spec = np["spec"]
    assert spec["podSelector"] == r.deployment["spec"]["selector"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    # the webhook port stays open to anyone: the API server is not a pod
    webhook_port = next(p["containerPort"] for p in r.container["ports"] if p["name"] == "webhook")
    (webhook_rule,) = ingress_to(np, webhook_port)
    assert "from" not in webhook_rule and webhook_rule["ports"] == [{"port": webhook_port, "protocol": "TCP"}]
    # metrics only from the monitoring namespace
    (metrics_rule,) = ingress_to(np, 8080)
    assert metrics_rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    assert len(spec["ingress"]) == 2
    # egress: the API server only; no DNS (the operator resolves no names)
    assert spec["egress"] == [
        {
            "to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
            "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
        }
    ]


def test_network_policy_values(chart):
    peers = [{"namespaceSelector": {"matchLabels": {"team": "obs"}}, "podSelector": {"matchLabels": {"app": "prometheus"}}}]
    r = render(
        chart,
        {
            "webhook": {"enabled": True, "port": 10250},
            "metrics": {"port": 9090},
            "networkPolicy": {
                "enabled": True,
                "metricsFrom": peers,
                "apiServer": {"cidrs": ["10.0.0.10/32"], "ports": [6443]},
                "dns": {"enabled": True},
            },
        },
    )
    np = r.one("NetworkPolicy", FULLNAME)
    (webhook_rule,) = ingress_to(np, 10250)
    assert "from" not in webhook_rule
    assert ingress_to(np, 9443) == []
    assert ingress_to(np, 9090)[0]["from"] == peers
    api, dns = np["spec"]["egress"]
    assert api == {"to": [{"ipBlock": {"cidr": "10.0.0.10/32"}}], "ports": [{"port": 6443, "protocol": "TCP"}]}
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert sorted(p["protocol"] for p in dns["ports"]) == ["TCP", "UDP"] and {p["port"] for p in dns["ports"]} == {53}


def test_network_policy_without_webhooks_or_scrapers_admits_nothing(chart):
    r = render(chart, {"policyWebhook": {"enabled": False}, "networkPolicy": {"enabled": True, "metricsFrom": []}})
    # `ingress: []` with policyType Ingress: no pod may connect (an absent `from` would mean anyone)
    assert r.one("NetworkPolicy")["spec"]["ingress"] == []


# --------------------------------------------------------------------------- alerts and dashboard


def test_default_has_no_alerts_and_no_dashboard(default):
    assert default.all("PrometheusRule") == []
    assert default.all("ConfigMap") == []


def test_prometheus_rule_is_the_rules_file(chart):
    r = render(chart, {"prometheusRule": {"enabled": True}})
    rule = r.one("PrometheusRule", FULLNAME)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    # promtool tests the file; the cluster gets exactly the file
    assert rule["spec"] == yaml.safe_load(ALERTS_FILE.read_text())
    assert len(rule["spec"]["groups"][0]["rules"]) >= 7


def alert(rule: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == name]
    return found


def test_replica_down_alert_selects_the_service_monitors_job(chart):
    r = render(chart, {**MONITORING})
    sm = r.one("ServiceMonitor", FULLNAME)
    # the job is the Service's app.kubernetes.io/name, whatever the release is called
    assert sm["spec"]["jobLabel"] == "app.kubernetes.io/name"
    job = r.one("Service", FULLNAME)["metadata"]["labels"]["app.kubernetes.io/name"]
    assert job == "taint-operator"
    down = alert(r.one("PrometheusRule", FULLNAME), "TaintOperatorDown")
    assert down["expr"].strip() == 'up{job="taint-operator"} == 0'
    assert down["for"] == "5m"


def test_replica_down_alert_follows_name_override(chart):
    r = render(chart, {**MONITORING, "nameOverride": "nodetaints"})
    name = "tp-nodetaints"
    assert r.one("Service", name)["metadata"]["labels"]["app.kubernetes.io/name"] == "nodetaints"
    rule = r.one("PrometheusRule", name)
    assert alert(rule, "TaintOperatorDown")["expr"].strip() == 'up{job="nodetaints"} == 0'
    # nothing else changes
    def others(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for g in groups for r in g["rules"] if r["alert"] != "TaintOperatorDown"]

    assert others(rule["spec"]["groups"]) == others(yaml.safe_load(ALERTS_FILE.read_text())["groups"])


def test_prometheus_rule_namespace_and_labels(chart):
    r = render(
        chart,
        {
            "prometheusRule": {
                "enabled": True,
                "namespace": "monitoring",
                "labels": {"release": "prometheus"},
            }
        },
    )
    rule = r.one("PrometheusRule", FULLNAME)
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "taint-operator"


def test_dashboard_config_map_holds_the_dashboard_file(chart):
    r = render(chart, {"grafanaDashboard": {"enabled": True}})
    cm = r.one("ConfigMap", f"{FULLNAME}-dashboard")
    assert cm["metadata"]["namespace"] == NAMESPACE
    # the label Grafana's dashboard sidecar looks for, by default
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "annotations" not in cm["metadata"]
    assert list(cm["data"]) == ["taint-operator.json"]
    assert cm["data"]["taint-operator.json"] == DASHBOARD_FILE.read_text().rstrip("\n")
    assert json.loads(cm["data"]["taint-operator.json"])["uid"] == "taint-operator"


def test_dashboard_label_namespace_and_annotations_are_configurable(chart):
    r = render(
        chart,
        {
            "grafanaDashboard": {
                "enabled": True,
                "namespace": "grafana",
                "label": "example.com/dashboard",
                "labelValue": "taint",
                "annotations": {"grafana_folder": "Kubernetes"},
            }
        },
    )
    cm = r.one("ConfigMap", f"{FULLNAME}-dashboard")
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["labels"]["example.com/dashboard"] == "taint"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Kubernetes"}


# --------------------------------------------------------------------------- values.schema.json


CHART_HARDENING: dict[str, Any] = {
    "crds": {"install": False, "keep": False},
    "image": {"tag": f"0.1.0@{DIGEST}"},
    "eventQPS": 0,
    "priorityClassName": "",
    "unhealthyNodeTolerationSeconds": 0,
    "topologySpreadConstraints": [],
    "networkPolicy": {
        "enabled": True,
        "metricsFrom": [{"ipBlock": {"cidr": "10.1.0.0/16", "except": ["10.1.2.0/24"]}}],
        "apiServer": {"cidrs": ["fd00::1/128"], "ports": [443]},
        "dns": {"enabled": True, "podSelector": {"matchLabels": {"k8s-app": "coredns"}}},
    },
}


@pytest.mark.parametrize(
    "values",
    [
        None,
        WEBHOOK,
        CERT_MANAGER,
        NON_DEFAULT,
        MONITORING,
        CHART_HARDENING,
        {"image": {"digest": DIGEST, "tag": "v1.2.3"}},
        {"unhealthyNodeTolerationSeconds": None},
    ],
    ids=["default", "webhook", "cert-manager", "non-default", "monitoring", "hardening", "digest", "no-unhealthy"],
)
def test_schema_accepts_valid_values(chart, values):
    chart.validate_schema(copy.deepcopy(values))


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"webhook": {"failurePolicy": "Sometimes"}}, "/webhook/failurePolicy"),
        ({"replicaCount": 0}, "/replicaCount"),
        ({"replicaCount": "2"}, "/replicaCount"),
        ({"logFormat": "xml"}, "/logFormat"),
        ({"resyncInterval": "5 minutes"}, "/resyncInterval"),
        ({"webhook": {"timeoutSeconds": 31}}, "/webhook/timeoutSeconds"),
        ({"webhook": {"enabled": "yes"}}, "/webhook/enabled"),
        ({"tolerations": [{"operator": "Sometimes"}]}, "/tolerations/0/operator"),
        ({"tolerations": {"operator": "Exists"}}, "/tolerations"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"replicas": 2}, "replicas"),
        ({"prometheusRule": {"enabled": "yes"}}, "/prometheusRule/enabled"),
        ({"prometheusRule": {"labels": {"release": 1}}}, "/prometheusRule/labels/release"),
        ({"prometheusRule": {"rules": []}}, "rules"),
        ({"grafanaDashboard": {"labelValue": 1}}, "/grafanaDashboard/labelValue"),
        ({"grafanaDashboard": {"label": "grafana dashboard"}}, "/grafanaDashboard/label"),
        ({"grafanaDashboard": {"label": ""}}, "/grafanaDashboard/label"),
        ({"grafanaDashboard": {"namespace": 3}}, "/grafanaDashboard/namespace"),
        ({"policyWebhook": {"failurePolicy": "Never"}}, "/policyWebhook/failurePolicy"),
        ({"apiPriority": {"priorityLevel": "Workload High"}}, "/apiPriority/priorityLevel"),
        ({"apiPriority": {"matchingPrecedence": 0}}, "/apiPriority/matchingPrecedence"),
        ({"apiPriority": {"matchingPrecedence": 1}}, "/apiPriority/matchingPrecedence"),
        ({"apiPriority": {"leaderElectionPriorityLevel": "Leader Election"}}, "/apiPriority/leaderElectionPriorityLevel"),
        ({"apiPriority": {"level": "workload-high"}}, "level"),
        ({"policyWebhook": {"timeoutSeconds": 0}}, "/policyWebhook/timeoutSeconds"),
        ({"policyWebhook": {"enabled": "no"}}, "/policyWebhook/enabled"),
        ({"policyWebhook": {"port": 9443}}, "port"),
        ({"networkPolicy": {"enabled": "yes"}}, "/networkPolicy/enabled"),
        ({"networkPolicy": {"metricsFrom": [{}]}}, "/networkPolicy/metricsFrom/0"),
        ({"networkPolicy": {"metricsFrom": [{"namespace": "monitoring"}]}}, "namespace"),
        ({"networkPolicy": {"apiServer": {"cidrs": ["10.0.0.1"]}}}, "/networkPolicy/apiServer/cidrs/0"),
        ({"networkPolicy": {"apiServer": {"cidrs": []}}}, "/networkPolicy/apiServer/cidrs"),
        ({"networkPolicy": {"apiServer": {"ports": [0]}}}, "/networkPolicy/apiServer/ports/0"),
        ({"networkPolicy": {"dns": {"enabled": 1}}}, "/networkPolicy/dns/enabled"),
        ({"crds": {"install": "yes"}}, "/crds/install"),
        ({"crds": {"keep": 1}}, "/crds/keep"),
        ({"crds": {"enabled": True}}, "enabled"),
        ({"userRoles": {"enabled": "yes"}}, "/userRoles/enabled"),
        ({"image": {"digest": "sha256:abc"}}, "/image/digest"),
        ({"image": {"digest": "0123456789abcdef" * 4}}, "/image/digest"),
        ({"image": {"digest": DIGEST.upper()}}, "/image/digest"),
        ({"image": {"tag": "v1 2"}}, "/image/tag"),
        ({"image": {"tag": "v1@sha256:abc"}}, "/image/tag"),
        ({"eventQPS": -1}, "/eventQPS"),
        ({"eventQPS": "20"}, "/eventQPS"),
        ({"eventQPS": 2.5}, "/eventQPS"),
        ({"priorityClassName": "System Critical"}, "/priorityClassName"),
        ({"unhealthyNodeTolerationSeconds": -1}, "/unhealthyNodeTolerationSeconds"),
        ({"unhealthyNodeTolerationSeconds": "60s"}, "/unhealthyNodeTolerationSeconds"),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z"}]}, "whenUnsatisfiable"),
        (
            {"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway"}]},
            "/topologySpreadConstraints/0/maxSkew",
        ),
        (
            {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Sometimes"}]},
            "/topologySpreadConstraints/0/whenUnsatisfiable",
        ),
    ],
    ids=[
        "failurePolicy",
        "replicas-zero",
        "replicas-string",
        "logFormat",
        "resyncInterval",
        "timeout",
        "enabled-string",
        "toleration-operator",
        "tolerations-object",
        "pullPolicy",
        "unknown-key",
        "rule-enabled-string",
        "rule-label-number",
        "rule-unknown-key",
        "dashboard-label-value-number",
        "dashboard-label-space",
        "dashboard-label-empty",
        "dashboard-namespace-number",
        "policy-webhook-failurePolicy",
        "api-priority-level-space",
        "api-priority-precedence-zero",
        "api-priority-precedence-one",
        "api-priority-lease-level-space",
        "api-priority-unknown-key",
        "policy-webhook-timeout",
        "policy-webhook-enabled-string",
        "policy-webhook-unknown-key",
        "network-policy-enabled-string",
        "network-policy-empty-peer",
        "network-policy-unknown-peer-key",
        "network-policy-cidr-no-prefix",
        "network-policy-no-cidr",
        "network-policy-port-zero",
        "network-policy-dns-number",
        "crds-install-string",
        "crds-keep-number",
        "crds-unknown-key",
        "user-roles-enabled-string",
        "digest-short",
        "digest-no-algorithm",
        "digest-upper-case",
        "tag-space",
        "tag-short-digest",
        "event-qps-negative",
        "event-qps-string",
        "event-qps-fraction",
        "priority-class-name",
        "unhealthy-seconds-negative",
        "unhealthy-seconds-string",
        "spread-no-when",
        "spread-skew-zero",
        "spread-when",
    ],
)
def test_schema_rejects_invalid_values(chart, values, where):
    with pytest.raises(helm.HelmValuesError) as validated:
        chart.validate_schema(copy.deepcopy(values))
    assert where in str(validated.value)
    # rendering (helm template / install) refuses them too
    with pytest.raises(helm.HelmValuesError):
        render(chart, values)
