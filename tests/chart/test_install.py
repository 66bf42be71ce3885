"""Install, upgrade and uninstall charts/taint-operator in a real cluster.

The chart is installed with helm-python-sdk (``helm_python.Config``: Helm v4's
install/upgrade/uninstall actions, embedded as a library; no ``helm`` binary),
and what it created is checked with ``kubectl``.

Runs only when ``E2E_KUBECONFIG`` names the kubeconfig of a running cluster;
``tests/chart/run-e2e.sh`` starts a bare control plane (e2e/control-plane.sh:
etcd + kube-apiserver, no kubelet, no controllers) and runs this module. Pods
never run there, so nothing waits for readiness: the test checks the API
objects, their contents and the RBAC they grant.

The tests build on each other and run in file order: install with default
values, then upgrade the same release with ``webhook.enabled=true`` (twice, to
see the chart's ``lookup`` keep the generated CA), then uninstall. Each run uses
a fresh release name and namespace. The namespace is left behind (without
kube-controller-manager a deleted namespace stays Terminating forever), and so
is the CRD: it is part of the release but annotated ``helm.sh/resource-policy:
keep`` (``crds.keep``). A CRD an earlier run left is handed to this run's release
first, the way docs/operations.md says to adopt it.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

KUBECONFIG = os.environ.get("E2E_KUBECONFIG", "")

if not KUBECONFIG:
    pytest.skip(
        "E2E_KUBECONFIG is not set (the kubeconfig of a running cluster); "
        "tests/chart/run-e2e.sh starts a control plane and sets it",
        allow_module_level=True,
    )

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "taint-operator"
RULES_FILE = CHART / "files" / "clusterrole-rules.yaml"
CRD_FILE = CHART / "files" / "taintpolicies.nodetaint.io.yaml"
CRD_NAME = "taintpolicies.nodetaint.io"

SUFFIX = secrets.token_hex(3)
RELEASE = f"tpe2e-{SUFFIX}"
NAMESPACE = f"taint-operator-e2e-{SUFFIX}"
FULLNAME = f"{RELEASE}-taint-operator"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"
WEBHOOK_VALUES = {"webhook": {"enabled": True}}
HELM_TIMEOUT = 120

CLUSTER_SCOPED = {
    "FlowSchema",
    "ValidatingWebhookConfiguration",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "CustomResourceDefinition",
}


# --------------------------------------------------------------------------- kubectl


def kubectl(
    *args: str, check: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess:
    cmd = ["kubectl", f"--kubeconfig={KUBECONFIG}", "--request-timeout=30s", *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=90)
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd[1:])} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


def get(kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """The live object, or None when it does not exist."""
    ns = ["-n", namespace] if namespace else []
    out = kubectl("get", kind, name, *ns, "-o", "json", "--ignore-not-found").stdout
    return json.loads(out) if out.strip() else None


def must_get(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    obj = get(kind, name, namespace)
    assert obj is not None, f"{kind} {namespace + '/' if namespace else ''}{name} does not exist"
    return obj


def can_i(verb: str, resource: str, *extra: str, user: str = SERVICE_ACCOUNT) -> str:
    done = kubectl("auth", "can-i", verb, resource, f"--as={user}", *extra, check=False)
    # "no" may come with a reason: "no - RBAC: clusterrole ... not found"
    answer = done.stdout.split()[0] if done.stdout.strip() else ""
    assert answer in ("yes", "no"), f"kubectl auth can-i: {done.stdout}\n{done.stderr}"
    return answer


def manifest_objects(release: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(release["manifest"]) if d]


def object_ref(obj: dict[str, Any]) -> tuple[str, str, str | None]:
    kind = obj["kind"]
    namespace = None if kind in CLUSTER_SCOPED else obj["metadata"].get("namespace", NAMESPACE)
    return kind, obj["metadata"]["name"], namespace


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def chart_version() -> str:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]


def pem(b64: str) -> str:
    text = base64.b64decode(b64).decode()
    assert text.startswith("-----BEGIN CERTIFICATE-----"), text[:40]
    return text


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def chart():
    with helm.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def cfg():
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not in PATH; the install checks need it")
    with helm.Config(kubeconfig_path=KUBECONFIG, namespace=NAMESPACE) as config:
        config.check_reachable()
        yield config


def adopt_crd() -> None:
    """Hands a CRD left by another release to this one (docs/operations.md, Upgrade and uninstall)."""
    crd = get("crd", CRD_NAME)
    if crd is None:
        return
    kubectl("label", "--overwrite", "crd", CRD_NAME, "app.kubernetes.io/managed-by=Helm")
    kubectl(
        "annotate", "--overwrite", "crd", CRD_NAME,
        f"meta.helm.sh/release-name={RELEASE}", f"meta.helm.sh/release-namespace={NAMESPACE}",
    )


@pytest.fixture(scope="module")
def installed(chart, cfg):
    """Release installed with the chart's default values (``helm install --create-namespace``)."""
    adopt_crd()
    # No wait strategy: Helm returns once the objects are created (pods never run here).
    release = cfg.install(
        chart, RELEASE, None, namespace=NAMESPACE, create_namespace=True, timeout=HELM_TIMEOUT
    )
    yield release
    # Safety net when a later phase failed before uninstalling.
    cfg.uninstall(RELEASE, ignore_not_found=True, timeout=HELM_TIMEOUT)


@pytest.fixture(scope="module")
def webhook_release(chart, cfg, installed):
    """The same release upgraded to webhook.enabled=true (``helm upgrade``)."""
    return cfg.upgrade(chart, RELEASE, WEBHOOK_VALUES, namespace=NAMESPACE, timeout=HELM_TIMEOUT)


@pytest.fixture(scope="module")
def uninstalled(cfg, webhook_release):
    """Uninstalls the release; yields the objects its last revision had created."""
    objects = manifest_objects(cfg.status(RELEASE))
    assert objects, "the release manifest is empty"
    cfg.uninstall(RELEASE, timeout=HELM_TIMEOUT)
    return objects


# --------------------------------------------------------------------------- install: defaults


def test_release_is_deployed(installed, cfg):
    assert installed["status"] == "deployed", installed.get("status")
    assert installed["revision"] == 1
    assert installed["namespace"] == NAMESPACE
    status = cfg.status(RELEASE)
    assert status["status"] == "deployed"
    assert [r["name"] for r in cfg.list()] == [RELEASE]


def test_every_manifest_object_exists(installed):
    objects = manifest_objects(installed)
    assert {o["kind"] for o in objects} == {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
        # the TaintPolicy webhook, on by default
        "Secret",
        "ValidatingWebhookConfiguration",
        # the operator's requests served at workload-high (API Priority and Fairness)
        "FlowSchema",
    }
    for obj in objects:
        kind, name, namespace = object_ref(obj)
        live = must_get(kind, name, namespace)
        labels = live["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", (kind, name, labels)
        assert labels.get("app.kubernetes.io/instance") == RELEASE, (kind, name, labels)


def test_crd_is_established(installed):
    kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    crd = must_get("crd", CRD_NAME)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions.get("Established") == "True", conditions
    assert conditions.get("NamesAccepted") == "True", conditions
    assert crd["spec"]["scope"] == "Cluster"
    assert "tp" in crd["spec"]["names"]["shortNames"]
    assert [v["name"] for v in crd["spec"]["versions"] if v["served"]] == ["v1alpha1"]
    # the release's, and kept when it goes
    assert crd["metadata"]["labels"]["helm.sh/chart"] == f"taint-operator-{chart_version()}"
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["spec"]["versions"] == yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"]
    # The API is served: listing works (the short name resolves through discovery).
    kubectl("get", "tp")


def test_deployment(installed):
    dep = must_get("deployment", FULLNAME, NAMESPACE)
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == FULLNAME
    args = container(dep)["args"]
    assert args[0] == "run"
    for arg in ("--leader-elect", "--lease-namespace=$(POD_NAMESPACE)", f"--lease-name={FULLNAME}"):
        assert arg in args, args
    # the TaintPolicy webhook is on by default; the Node webhook is not
    assert "--registered-webhooks=taintpolicy" in args, args


def test_service_account(installed):
    sa = must_get("serviceaccount", FULLNAME, NAMESPACE)
    assert sa["metadata"]["namespace"] == NAMESPACE


def test_cluster_role_rules_equal_rules_file(installed):
    cr = must_get("clusterrole", FULLNAME)
    assert cr["rules"] == yaml.safe_load(RULES_FILE.read_text())


def test_cluster_role_binding(installed):
    crb = must_get("clusterrolebinding", FULLNAME)
    assert crb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": FULLNAME,
    }
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]


def test_leases_role_and_binding(installed):
    name = f"{FULLNAME}-leader-election"
    role = must_get("role", name, NAMESPACE)
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update"],
        }
    ]
    rb = must_get("rolebinding", name, NAMESPACE)
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]


def test_service(installed):
    svc = must_get("service", FULLNAME, NAMESPACE)
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert set(ports) == {"metrics", "webhook"}
    assert ports["metrics"]["port"] == 8080
    assert ports["webhook"]["port"] == 443
    dep = must_get("deployment", FULLNAME, NAMESPACE)
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_pod_disruption_budget(installed):
    pdb = must_get("poddisruptionbudget", FULLNAME, NAMESPACE)
    assert pdb["spec"]["minAvailable"] == 1
    dep = must_get("deployment", FULLNAME, NAMESPACE)
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]


def test_only_the_policy_webhook_by_default(installed):
    assert get("mutatingwebhookconfiguration", FULLNAME) is None
    vwc = must_get("validatingwebhookconfiguration", f"{FULLNAME}-policies")
    secret = must_get("secret", f"{FULLNAME}-webhook-tls", NAMESPACE)
    assert vwc["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]


@pytest.mark.parametrize(
    ("verb", "resource", "extra", "expected"),
    [
        ("patch", "nodes", (), "yes"),
        ("watch", "nodes", (), "yes"),
        ("list", "pods", ("--all-namespaces",), "yes"),
        ("watch", "taintpolicies.nodetaint.io", (), "yes"),
        ("patch", "taintpolicies.nodetaint.io", ("--subresource=status",), "yes"),
        ("patch", "taintpolicies.nodetaint.io", (), "yes"),
        ("create", "events.events.k8s.io", ("-n", "default"), "yes"),
        ("update", "leases.coordination.k8s.io", ("-n", NAMESPACE), "yes"),
        # granted once, never called (#24): gone
        ("get", "pods", ("-n", NAMESPACE), "no"),
        ("update", "taintpolicies.nodetaint.io", (), "no"),
        ("update", "taintpolicies.nodetaint.io", ("--subresource=status",), "no"),
        ("get", "taintpolicies.nodetaint.io", ("--subresource=status",), "no"),
        ("update", "taintpolicies.nodetaint.io", ("--subresource=finalizers",), "no"),
        ("patch", "leases.coordination.k8s.io", ("-n", NAMESPACE), "no"),
        ("delete", "nodes", (), "no"),
        ("patch", "nodes", ("--subresource=status",), "no"),
        ("list", "secrets", ("-n", NAMESPACE), "no"),
        ("list", "secrets", ("--all-namespaces",), "no"),
        ("create", "pods", ("-n", NAMESPACE), "no"),
        ("delete", "taintpolicies.nodetaint.io", (), "no"),
        ("update", "leases.coordination.k8s.io", ("-n", "kube-system"), "no"),
    ],
    ids=lambda v: (" ".join(v).replace(NAMESPACE, "release-ns") or "-")
    if isinstance(v, tuple)
    else v,
)
def test_service_account_permissions(installed, verb, resource, extra, expected):
    assert can_i(verb, resource, *extra) == expected, (
        f"can {SERVICE_ACCOUNT} {verb} {resource} {' '.join(extra)}?"
    )


# --------------------------------------------------------------------------- user roles

TAINTPOLICIES = "taintpolicies.nodetaint.io"
EDITOR = f"{FULLNAME}-editor"
# One user per ClusterRole, bound to it alone: the built-in view, edit and admin
# roles, and the chart's editor.
ROLE_USERS = {
    "view": f"viewer-{SUFFIX}",
    "edit": f"edit-{SUFFIX}",
    "admin": f"admin-{SUFFIX}",
    EDITOR: f"editor-{SUFFIX}",
}


def holds_policy_rules(role: str) -> bool:
    rules = must_get("clusterrole", role).get("rules") or []
    return any("taintpolicies" in r.get("resources", []) for r in rules)


@pytest.fixture(scope="module")
def role_users(installed):
    """The users of ROLE_USERS, bound, once view, edit and admin have taken in the
    chart's viewer role (asynchronously, by kube-controller-manager's
    clusterrole-aggregation controller)."""
    deadline = time.monotonic() + 20
    while not must_get("clusterrole", "view").get("rules"):
        if time.monotonic() > deadline:
            pytest.skip(
                "the built-in view role has no rules: no ClusterRole aggregation runs "
                "(tests/chart/run-e2e.sh runs it with KUBE_CONTROLLER_MANAGER_BIN)"
            )
        time.sleep(1)
    deadline = time.monotonic() + 60
    while not all(holds_policy_rules(role) for role in ("view", "edit", "admin")):
        assert time.monotonic() < deadline, "view, edit or admin never took in the viewer role's rules"
        time.sleep(1)
    for role, user in ROLE_USERS.items():
        kubectl("create", "clusterrolebinding", user, f"--clusterrole={role}", f"--user={user}")
    yield ROLE_USERS
    kubectl("delete", "clusterrolebinding", *ROLE_USERS.values(), "--ignore-not-found")


@pytest.mark.parametrize(
    ("role", "verb", "extra", "expected"),
    [
        # whoever may view the cluster may read policies ...
        ("view", "list", (), "yes"),
        ("view", "watch", (), "yes"),
        ("view", "get", ("--subresource=status",), "yes"),
        ("edit", "list", (), "yes"),
        ("admin", "get", (), "yes"),
        # ... but only a deliberate binding lets anyone write one
        ("view", "create", (), "no"),
        ("edit", "create", (), "no"),
        ("edit", "patch", (), "no"),
        ("admin", "create", (), "no"),
        ("admin", "delete", (), "no"),
        (EDITOR, "create", (), "yes"),
        (EDITOR, "update", (), "yes"),
        (EDITOR, "patch", (), "yes"),
        (EDITOR, "delete", (), "yes"),
        (EDITOR, "list", (), "yes"),
        # status is the operator's to write
        (EDITOR, "patch", ("--subresource=status",), "no"),
        (EDITOR, "update", ("--subresource=status",), "no"),
    ],
    ids=lambda v: (" ".join(v) or "-") if isinstance(v, tuple) else v.replace(FULLNAME, "release"),
)
def test_user_role_permissions(role_users, role, verb, extra, expected):
    user = role_users[role]
    assert can_i(verb, TAINTPOLICIES, *extra, user=user) == expected, (
        f"can {user} (bound to {role}) {verb} {TAINTPOLICIES} {' '.join(extra)}?"
    )


def test_user_roles_in_real_requests(role_users):
    """The same answers for requests the API server serves (server-side dry run of a
    shipped example policy), not only for the reviews of `kubectl auth can-i`."""
    policy = next(
        d for d in yaml.safe_load_all((REPO / "examples" / "nic-kaput.yaml").read_text()) if d
    )
    policy["metadata"] = {"name": f"e2e-roles-{SUFFIX}"}
    manifest = json.dumps(policy)

    def create(role: str) -> subprocess.CompletedProcess:
        return kubectl(
            "create", "--dry-run=server", "-f", "-", f"--as={role_users[role]}", stdin=manifest, check=False
        )

    kubectl("get", "tp", f"--as={role_users['view']}")
    refused = create("view")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    allowed = create(EDITOR)
    assert allowed.returncode == 0, allowed.stderr


# --------------------------------------------------------------------------- upgrade: webhook on


def test_upgrade_is_deployed(webhook_release, cfg):
    assert webhook_release["status"] == "deployed"
    assert webhook_release["revision"] == 2
    assert cfg.get_values(RELEASE) == WEBHOOK_VALUES


def webhook_state() -> tuple[dict[str, Any], dict[str, Any]]:
    mwc = must_get("mutatingwebhookconfiguration", FULLNAME)
    secret = must_get("secret", f"{FULLNAME}-webhook-tls", NAMESPACE)
    return mwc, secret


def test_webhook_configuration_has_ca_bundle(webhook_release):
    mwc, secret = webhook_state()
    assert len(mwc["webhooks"]) == 1
    wh = mwc["webhooks"][0]
    assert wh["name"] == "nodes.nodetaint.io"
    assert wh["failurePolicy"] == "Ignore"
    assert wh["timeoutSeconds"] == 3
    assert wh["sideEffects"] == "None"
    assert [(r["operations"], r["resources"]) for r in wh["rules"]] == [(["CREATE"], ["nodes"])]
    assert wh["clientConfig"]["service"] == {
        "name": FULLNAME,
        "namespace": NAMESPACE,
        "path": "/mutate-node",
        "port": 443,
    }
    ca_bundle = wh["clientConfig"].get("caBundle")
    assert ca_bundle, "caBundle is empty"
    pem(ca_bundle)
    assert ca_bundle == secret["data"]["ca.crt"]


def test_webhook_tls_secret(webhook_release, tmp_path):
    _, secret = webhook_state()
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    for key, value in secret["data"].items():
        (tmp_path / key).write_bytes(base64.b64decode(value))
    assert "PRIVATE KEY" in (tmp_path / "tls.key").read_text()
    if shutil.which("openssl") is None:
        return
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    sans = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", str(tmp_path / "tls.crt")],
        capture_output=True,
        text=True,
    ).stdout
    assert f"DNS:{FULLNAME}.{NAMESPACE}.svc" in sans, sans


def test_webhook_deployment_and_service(webhook_release):
    dep = must_get("deployment", FULLNAME, NAMESPACE)
    assert dep["spec"]["replicas"] == 2
    c = container(dep)
    for arg in (
        "--leader-elect",
        "--webhook-addr=0.0.0.0:9443",
        "--webhook-cert-file=/tls/tls.crt",
        "--webhook-key-file=/tls/tls.key",
    ):
        assert arg in c["args"], c["args"]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert any(
        v.get("secret", {}).get("secretName") == f"{FULLNAME}-webhook-tls" for v in volumes.values()
    ), volumes
    svc = must_get("service", FULLNAME, NAMESPACE)
    ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    assert ports == {"metrics": 8080, "webhook": 443}


def test_second_upgrade_keeps_the_webhook_certificate(webhook_release, chart, cfg):
    """The chart looks the TLS Secret up on upgrade and reuses it: the CA and caBundle stay."""
    before_mwc, before_secret = webhook_state()
    again = cfg.upgrade(chart, RELEASE, WEBHOOK_VALUES, namespace=NAMESPACE, timeout=HELM_TIMEOUT)
    assert again["revision"] == 3
    after_mwc, after_secret = webhook_state()
    assert after_secret["data"] == before_secret["data"]
    assert (
        after_mwc["webhooks"][0]["clientConfig"]["caBundle"]
        == before_mwc["webhooks"][0]["clientConfig"]["caBundle"]
    )


def test_unreachable_webhook_does_not_block_node_registration(webhook_release):
    """failurePolicy Ignore (the default): with no operator pod answering, a Node CREATE
    still succeeds, untouched."""
    node = f"tp-e2e-{SUFFIX}"
    manifest = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    started = time.monotonic()
    try:
        kubectl("create", "-f", "-", stdin=json.dumps(manifest))
        elapsed = time.monotonic() - started
        created = must_get("node", node)
        assert not created.get("spec", {}).get("taints"), created.get("spec")
        # The webhook's timeoutSeconds is 3; the call must not hang beyond it (plus slack).
        assert elapsed < 20, f"Node CREATE took {elapsed:.1f}s"
    finally:
        kubectl("delete", "node", node, "--ignore-not-found", "--wait=false")


# --------------------------------------------------------------------------- uninstall


def test_uninstall_removes_release_objects(uninstalled):
    # the CRD stays: see test_uninstall_keeps_the_crd
    refs = [object_ref(o) for o in uninstalled if o["kind"] != "CustomResourceDefinition"]
    kinds = {kind for kind, _, _ in refs}
    assert {"MutatingWebhookConfiguration", "Secret", "Deployment", "ClusterRole"} <= kinds, kinds
    deadline = time.monotonic() + 60
    remaining = refs
    while remaining and time.monotonic() < deadline:
        remaining = [r for r in remaining if get(*r) is not None]
        if remaining:
            time.sleep(1)
    assert remaining == [], f"still present after uninstall: {remaining}"


def test_uninstall_removes_release_records(uninstalled, cfg):
    assert cfg.list(all_states=True) == []
    # Helm keeps its release records as Secrets (owner=helm, name=<release>) in the namespace.
    out = kubectl(
        "get", "secrets", "-n", NAMESPACE, "-l", f"owner=helm,name={RELEASE}", "-o", "name"
    ).stdout
    assert out.strip() == ""


def test_uninstall_keeps_the_crd(uninstalled):
    """The CRD was the release's, but ``helm.sh/resource-policy: keep`` (crds.keep)
    leaves it: deleting it would delete every TaintPolicy. Remove it by hand
    (kubectl delete crd) when really done."""
    assert "CustomResourceDefinition" in {o["kind"] for o in uninstalled}
    crd = must_get("crd", CRD_NAME)
    assert crd.get("metadata", {}).get("deletionTimestamp") is None


def test_uninstall_revokes_permissions(uninstalled):
    assert can_i("patch", "nodes") == "no"
    assert can_i("update", "leases.coordination.k8s.io", "-n", NAMESPACE) == "no"
    # the editor's binding outlives the release; the role it names does not
    assert can_i("create", TAINTPOLICIES, user=ROLE_USERS[EDITOR]) == "no"



# --------------------------------------------------------------------------- the CRD's owner
# After the uninstall above the CRD stays, annotated as RELEASE's (crds.keep).

OTHER_RELEASE = f"{RELEASE}-b"


def operator_bin() -> list[str] | None:
    explicit = os.environ.get("TAINT_OPERATOR_BIN")
    if explicit:
        return [explicit]
    built = REPO / "target" / "debug" / "taint-operator"
    if built.is_file() and os.access(built, os.X_OK):
        return [str(built)]
    return None


def test_another_release_s_crd_stops_the_install_with_the_commands(uninstalled, chart, cfg):
    """A second release may not take the CRD from the first: the install fails at
    render time, names the owner and what to run, and creates nothing."""
    with pytest.raises(helm.HelmError) as refused:
        cfg.install(chart, OTHER_RELEASE, None, namespace=NAMESPACE, timeout=HELM_TIMEOUT)
    said = str(refused.value)
    assert f'belongs to Helm release "{RELEASE}" in namespace "{NAMESPACE}"' in said, said
    assert "--set crds.install=false" in said, said
    assert (
        f"kubectl annotate crd {CRD_NAME} --overwrite meta.helm.sh/release-name={OTHER_RELEASE} "
        f"meta.helm.sh/release-namespace={NAMESPACE}"
    ) in said, said
    assert get("deployment", f"{OTHER_RELEASE}-taint-operator", NAMESPACE) is None
    assert cfg.list(all_states=True) == []
    annotations = must_get("crd", CRD_NAME)["metadata"]["annotations"]
    assert annotations["meta.helm.sh/release-name"] == RELEASE


def test_adopt_crd_hands_an_unowned_crd_to_a_release(uninstalled, chart, cfg):
    """What the chart's pre-upgrade hook runs for a CRD that chart 0.1.0 installed
    from crds/ (no owner, an older schema): `taint-operator adopt-crd` writes this
    version's schema and the release's ownership onto the same object, and Helm
    then takes it into the release."""
    command = operator_bin()
    if command is None:
        pytest.skip("no taint-operator binary (set TAINT_OPERATOR_BIN)")
    crd = must_get("crd", CRD_NAME)
    uid = crd["metadata"]["uid"]
    # as chart 0.1.0 left it: no Helm metadata, and a schema without today's rules
    old = {
        "metadata": {
            "labels": {"app.kubernetes.io/managed-by": None, "helm.sh/chart": None},
            "annotations": {
                "meta.helm.sh/release-name": None,
                "meta.helm.sh/release-namespace": None,
                "helm.sh/resource-policy": None,
            },
        }
    }
    kubectl("patch", "crd", CRD_NAME, "--type=merge", "-p", json.dumps(old))
    kubectl(
        "patch", "crd", CRD_NAME, "--type=json", "-p",
        json.dumps([{"op": "remove", "path": "/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-validations"}]),
        check=False,
    )
    done = subprocess.run(
        [*command, "adopt-crd", f"--release={OTHER_RELEASE}", f"--release-namespace={NAMESPACE}", "--keep"],
        env={**os.environ, "KUBECONFIG": KUBECONFIG},
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f'handed to Helm release "{OTHER_RELEASE}" in namespace "{NAMESPACE}"' in done.stdout, done.stdout
    crd = must_get("crd", CRD_NAME)
    assert crd["metadata"]["uid"] == uid, "the CRD was recreated"
    want = yaml.safe_load(CRD_FILE.read_text())
    assert crd["spec"]["versions"] == want["spec"]["versions"]
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == OTHER_RELEASE
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

    # the CRD is now the release's: the install renders it and Helm takes it over
    try:
        release = cfg.install(chart, OTHER_RELEASE, None, namespace=NAMESPACE, timeout=HELM_TIMEOUT)
        assert release["status"] == "deployed"
        assert "CustomResourceDefinition" in {o["kind"] for o in manifest_objects(release)}
        crd = must_get("crd", CRD_NAME)
        assert crd["metadata"]["uid"] == uid
        assert crd["metadata"]["labels"]["helm.sh/chart"] == f"taint-operator-{chart_version()}"
    finally:
        cfg.uninstall(OTHER_RELEASE, ignore_not_found=True, timeout=HELM_TIMEOUT)

    # and a second run finds it the release's own: nothing to refuse
    done = subprocess.run(
        [*command, "adopt-crd", f"--release={OTHER_RELEASE}", f"--release-namespace={NAMESPACE}"],
        env={**os.environ, "KUBECONFIG": KUBECONFIG},
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0 and "already" in done.stdout, done.stdout + done.stderr
    assert "helm.sh/resource-policy" not in must_get("crd", CRD_NAME)["metadata"]["annotations"]


def test_adopt_crd_refuses_another_release_s_crd(uninstalled):
    command = operator_bin()
    if command is None:
        pytest.skip("no taint-operator binary (set TAINT_OPERATOR_BIN)")
    before = must_get("crd", CRD_NAME)
    done = subprocess.run(
        [*command, "adopt-crd", "--release=someone-else", f"--release-namespace={NAMESPACE}"],
        env={**os.environ, "KUBECONFIG": KUBECONFIG},
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    assert f'belongs to Helm release "{OTHER_RELEASE}"' in done.stderr, done.stderr
    after = must_get("crd", CRD_NAME)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
