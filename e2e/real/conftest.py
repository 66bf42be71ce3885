"""Fixtures shared by the whole run: the operator image, a real cluster, the chart installed.

The cluster comes from e2e/cluster.sh (up before the first test, down after the
last, whatever happened). Without the Kubernetes binaries every test is skipped
with the reason. E2E_REAL_KEEP=1 keeps the cluster directory (logs) after down;
E2E_REAL_CLUSTER_DIR=DIR uses a cluster already up (and leaves it up).

E2E_NODES (default 1) and E2E_ZONES (e.g. a,b) size the cluster. One node runs
the one-node suite (test_real.py); several run the multi-node suite
(test_multinode.py, and test_detectors.py with NPD_BIN). Each suite is collected
only for its size.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import helm_python as helm
import pytest
from helm_python import registry

import k8s

BINARIES = (
    "ETCD_BIN",
    "KUBE_APISERVER_BIN",
    "KUBE_CONTROLLER_MANAGER_BIN",
    "KUBE_SCHEDULER_BIN",
    "KUBELET_BIN",
    "KUBE_PROXY_BIN",
)
HELM_TIMEOUT = 120
# The operator's namespace enforces Pod Security "restricted": every operator pod of
# the run (installs, upgrades, the previous chart's) must pass it to exist.
POD_SECURITY = {
    f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")
}

NODES = int(os.environ.get("E2E_NODES", "1") or "1")
ZONES = os.environ.get("E2E_ZONES", "")
collect_ignore = ["test_real.py"] if NODES > 1 else ["test_multinode.py", "test_detectors.py"]

# Filled by the tests, printed at the end of the run.
MEASUREMENTS: dict[str, str] = {}


def pytest_terminal_summary(terminalreporter):
    if MEASUREMENTS:
        terminalreporter.section("measurements")
        for key, value in MEASUREMENTS.items():
            terminalreporter.write_line(f"{key}: {value}")


def missing_binary() -> str | None:
    for var in BINARIES:
        path = os.environ.get(var, "")
        if not path:
            return f"{var} is not set (see e2e/README.md)"
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"{var}={path} is not an executable file (see e2e/README.md)"
    return None


def read_env(directory: str) -> None:
    for line in Path(directory, "env").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            # a value with spaces (NODES) is quoted so that the file stays sourceable
            k8s.ENV[key] = shlex.split(value)[0] if value else value


@pytest.fixture(scope="session")
def cluster():
    existing = os.environ.get("E2E_REAL_CLUSTER_DIR")
    if existing:
        # a cluster from `e2e/cluster.sh up DIR`, left up
        read_env(existing)
        yield existing
        return
    reason = missing_binary()
    if reason:
        pytest.skip(reason)
    directory = tempfile.mkdtemp(prefix="taint-operator-real-")
    script = k8s.REPO / "e2e" / "cluster.sh"
    size = ["--nodes", str(NODES)] + (["--zones", ZONES] if ZONES else [])
    up = subprocess.run(["bash", str(script), "up", directory, *size], capture_output=True, text=True)
    try:
        if up.returncode == 3:
            pytest.skip(up.stderr.strip().splitlines()[-1])
        assert up.returncode == 0, f"cluster.sh up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}"
        read_env(directory)
        yield directory
    finally:
        env = {**os.environ, "KEEP": "1" if os.environ.get("E2E_REAL_KEEP") == "1" else "0"}
        down = subprocess.run(["bash", str(script), "down", directory], capture_output=True, text=True, env=env)
        if down.returncode != 0:
            print(f"cluster.sh down failed ({down.returncode}):\n{down.stdout}\n{down.stderr}")
        if os.path.isdir(directory) and env["KEEP"] != "1" and not os.listdir(directory):
            os.rmdir(directory)


@pytest.fixture(scope="session")
def published(cluster):
    """`just release` against the cluster's registry (REGISTRY in the cluster's env):
    the image pushed, the chart pinned to its digest and pushed. Nothing is imported
    into a node: the nodes pull what the chart names. Returns release.json."""
    registry = k8s.ENV.get("REGISTRY")
    if not registry:
        pytest.fail("the cluster's env has no REGISTRY (a cluster from an older e2e/cluster.sh?)")
    dist = Path(tempfile.mkdtemp(prefix="taint-operator-dist-"))
    env = {**os.environ, "REGISTRY": registry, "DIST": str(dist)}
    started = time.monotonic()
    # a static release build when the sources changed: a few minutes
    done = subprocess.run(["bash", str(k8s.REPO / "scripts" / "release.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"scripts/release.sh failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    MEASUREMENTS["just release (build, push image and chart)"] = f"{time.monotonic() - started:.1f} s"
    record = json.loads((dist / "release.json").read_text())
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True, text=True)
    assert sums.returncode == 0, f"SHA256SUMS does not check:\n{sums.stdout}{sums.stderr}"
    yield {**record, "dist": dist}
    shutil.rmtree(dist, ignore_errors=True)


@pytest.fixture(scope="session")
def chart(published):
    """The chart as the registry serves it (pulled from oci://, pinned to the pushed
    image), for the tests' upgrades: every install and upgrade runs that image."""
    pulled = Path(tempfile.mkdtemp(prefix="taint-operator-chart-"))
    registry.pull(published["chart"], destination=pulled, version=published["version"], plain_http=True)
    archive = pulled / f"taint-operator-{published['version']}.tgz"
    with helm.Chart.load(archive) as loaded:
        image = loaded.values["image"]
        assert (image["repository"], image["digest"]) == (published["imageRepository"], published["imageDigest"])
        yield loaded
    shutil.rmtree(pulled, ignore_errors=True)


@pytest.fixture(scope="session")
def helm_cfg(cluster):
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not in PATH")
    with helm.Config(kubeconfig_path=k8s.ENV["KUBECONFIG"], namespace=k8s.NAMESPACE) as cfg:
        cfg.check_reachable()
        yield cfg


@pytest.fixture(scope="session")
def release(cluster, published, helm_cfg):
    """The chart installed from the registry with its default values, as
    `helm install taint-operator oci://REGISTRY/charts/taint-operator --version X`
    does: the nodes pull the pushed image by digest.

    Also measures the time from `helm install` to the first policy enforced: a
    matcher policy on a condition the node already has, applied as soon as the
    CRD is served; the clock stops when the node carries its taint.

    The namespace is made first, labelled to enforce Pod Security "restricted".
    """
    key = k8s.TEST_TAINT_PREFIX + "install-probe"
    logs = k8s.LogFollower().start()
    k8s.set_condition("E2EInstallProbe", "True")
    k8s.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": k8s.NAMESPACE, "labels": POD_SECURITY}})
    started = time.monotonic()
    rel = helm_cfg.install(
        published["chart"], k8s.RELEASE, None, namespace=k8s.NAMESPACE, timeout=HELM_TIMEOUT,
        chart_version=published["version"], plain_http=True,
    )
    installed = time.monotonic()
    probe = k8s.matcher_policy("e2e-install-probe", key, "E2EInstallProbe")
    k8s.wait_until(
        "the TaintPolicy CRD served",
        lambda: k8s.kubectl("apply", "-f", "-", stdin=json.dumps(probe), check=False).returncode == 0,
        30,
    )
    k8s.wait_until(f"taint {key} on the node", lambda: k8s.has_taint(key), 90, interval=0.1)
    enforced = time.monotonic()
    MEASUREMENTS["helm install returned after"] = f"{installed - started:.1f} s"
    MEASUREMENTS["helm install to first policy enforced"] = f"{enforced - started:.1f} s"
    k8s.delete_policies("e2e-install-probe")
    k8s.set_condition("E2EInstallProbe", "False")
    yield {"release": rel, "started": started, "logs": logs, "published": published}
    logs.stop()
    helm_cfg.uninstall(k8s.RELEASE, ignore_not_found=True, timeout=HELM_TIMEOUT)
