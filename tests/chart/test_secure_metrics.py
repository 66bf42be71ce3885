"""metrics.secure: /metrics over HTTPS behind TokenReview + SubjectAccessReview.

What the chart must add when it is on (the operator's flags, HTTPS probes, the
RBAC for the reviews, a ClusterRole for scrapers and the ServiceMonitor's token),
and that none of it is there when it is off.
"""

from __future__ import annotations

import copy
from typing import Any

import helm_python as helm
import pytest

from test_chart import FULLNAME, MONITORING, NAMESPACE, Rendered, chart, lint_problems, render  # noqa: F401

SECURE = {"metrics": {"secure": True}, "serviceMonitor": {"enabled": True}}
SECURE_WITH_CERT = {"metrics": {"secure": True, "certSecret": "metrics-tls"}}
READERS = [
    {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
    {"kind": "Group", "name": "metrics-scrapers"},
]
AUTH_ROLE = f"{FULLNAME}-metrics-auth"
READER_ROLE = f"{FULLNAME}-metrics-reader"
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def named(r: Rendered, kind: str, name: str) -> list[dict[str, Any]]:
    return [o for o in r.all(kind) if o["metadata"]["name"] == name]


def endpoint(r: Rendered) -> dict[str, Any]:
    (ep,) = r.one("ServiceMonitor", FULLNAME)["spec"]["endpoints"]
    return ep


def test_plain_by_default(chart):
    r = render(chart, MONITORING)
    args = r.container["args"]
    assert "--metrics-addr=0.0.0.0:8080" in args
    assert not [a for a in args if a.startswith("--metrics-secure") or a.startswith("--metrics-cert")]
    for probe in ("livenessProbe", "readinessProbe"):
        assert "scheme" not in r.container[probe]["httpGet"], probe
    for role in (AUTH_ROLE, READER_ROLE):
        assert not named(r, "ClusterRole", role)
        assert not named(r, "ClusterRoleBinding", role)
    ep = endpoint(r)
    assert ep["scheme"] == "http"
    assert "bearerTokenFile" not in ep and "tlsConfig" not in ep


def test_secure_serves_https_with_a_self_signed_certificate(chart):
    r = render(chart, SECURE)
    c = r.container
    assert c["args"][:3] == ["run", "--metrics-addr=0.0.0.0:8080", "--metrics-secure"]
    assert not [a for a in c["args"] if a.startswith("--metrics-cert-dir")]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics", "scheme": "HTTPS"}
    assert "metrics-tls" not in {v["name"] for v in r.pod["volumes"]}


def test_secure_lets_the_operator_create_the_reviews(chart):
    r = render(chart, SECURE)
    role = r.one("ClusterRole", AUTH_ROLE)
    assert role["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]
    binding = r.one("ClusterRoleBinding", AUTH_ROLE)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": AUTH_ROLE,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": r.pod["serviceAccountName"], "namespace": NAMESPACE}
    ]
    # The operator's own ClusterRole is unchanged: the reviews are only for secure metrics.
    main_rules = r.one("ClusterRole", FULLNAME)["rules"]
    assert not [rule for rule in main_rules if "tokenreviews" in rule.get("resources", [])]


def test_secure_has_a_reader_role_for_scrapers(chart):
    r = render(chart, SECURE)
    assert r.one("ClusterRole", READER_ROLE)["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    assert not named(r, "ClusterRoleBinding", READER_ROLE), "no readers given, no binding"

    with_readers = render(chart, {"metrics": {"secure": True, "readers": READERS}})
    binding = with_readers.one("ClusterRoleBinding", READER_ROLE)
    assert binding["roleRef"]["name"] == READER_ROLE
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
        {"kind": "Group", "name": "metrics-scrapers", "apiGroup": "rbac.authorization.k8s.io"},
    ]


def test_secure_service_monitor_sends_its_token_over_tls(chart):
    ep = endpoint(render(chart, SECURE))
    assert ep["scheme"] == "https"
    assert ep["port"] == "metrics" and ep["path"] == "/metrics"
    assert ep["bearerTokenFile"] == TOKEN_FILE
    assert ep["tlsConfig"] == {"insecureSkipVerify": True}

    pinned = copy.deepcopy(SECURE)
    pinned["serviceMonitor"]["tlsConfig"] = {
        "ca": {"secret": {"name": "metrics-ca", "key": "ca.crt"}},
        "serverName": f"{FULLNAME}.{NAMESPACE}.svc",
    }
    ep = endpoint(render(chart, pinned))
    assert ep["tlsConfig"] == pinned["serviceMonitor"]["tlsConfig"]


def test_secure_with_a_certificate_secret_mounts_it(chart):
    r = render(chart, SECURE_WITH_CERT)
    assert "--metrics-cert-dir=/metrics-tls" in r.container["args"]
    volumes = {v["name"]: v for v in r.pod["volumes"]}
    assert volumes["metrics-tls"]["secret"] == {"secretName": "metrics-tls", "defaultMode": 0o440}
    mounts = {m["name"]: m for m in r.container["volumeMounts"]}
    assert mounts["metrics-tls"] == {"name": "metrics-tls", "mountPath": "/metrics-tls", "readOnly": True}


def test_a_certificate_secret_alone_changes_nothing(chart):
    """certSecret without secure would serve plain HTTP with an unused Secret mounted."""
    r = render(chart, {"metrics": {"certSecret": "metrics-tls"}})
    assert [a for a in r.container["args"] if a.startswith("--metrics-")] == [
        "--metrics-addr=0.0.0.0:8080"
    ]
    assert "metrics-tls" not in {v["name"] for v in r.pod["volumes"]}


def test_secure_without_rbac_creates_no_roles(chart):
    r = render(chart, {"metrics": {"secure": True}, "rbac": {"create": False}})
    assert "--metrics-secure" in r.container["args"]
    assert not r.all("ClusterRole") and not r.all("ClusterRoleBinding")


@pytest.mark.parametrize(
    "values",
    [SECURE, SECURE_WITH_CERT, {"metrics": {"secure": True, "readers": READERS}}],
    ids=["secure", "cert-secret", "readers"],
)
def test_secure_values_lint_and_validate(chart, values):
    chart.validate_schema(copy.deepcopy(values))
    assert lint_problems(values) == []


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"metrics": {"secure": "yes"}}, "/metrics/secure"),
        ({"metrics": {"certSecret": 1}}, "/metrics/certSecret"),
        ({"metrics": {"readers": {"kind": "Group", "name": "g"}}}, "/metrics/readers"),
        ({"metrics": {"readers": [{"kind": "Pod", "name": "p"}]}}, "/metrics/readers/0/kind"),
        ({"metrics": {"readers": [{"kind": "Group"}]}}, "/metrics/readers/0"),
        ({"metrics": {"readers": [{"kind": "ServiceAccount", "name": "p"}]}}, "/metrics/readers/0"),
        ({"metrics": {"readers": [{"kind": "User", "name": ""}]}}, "/metrics/readers/0/name"),
        ({"metrics": {"authCacheTTL": "1m"}}, "authCacheTTL"),
        ({"serviceMonitor": {"tlsConfig": "insecure"}}, "/serviceMonitor/tlsConfig"),
    ],
    ids=[
        "secure-string",
        "cert-secret-number",
        "readers-object",
        "reader-kind",
        "reader-without-name",
        "service-account-without-namespace",
        "reader-empty-name",
        "unknown-key",
        "tls-config-string",
    ],
)
def test_schema_rejects_bad_secure_metrics_values(chart, values, where):
    with pytest.raises(helm.HelmValuesError) as validated:
        chart.validate_schema(copy.deepcopy(values))
    assert where in str(validated.value)
