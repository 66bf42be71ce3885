"""Small helpers for the real-cluster tests: kubectl, waiting, the node, the operator."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

# Set by conftest.py once the cluster is up (from DIR/env).
ENV: dict[str, str] = {}

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "taint-operator"
RELEASE = "tpreal"
NAMESPACE = "taint-operator"
FULLNAME = f"{RELEASE}-taint-operator"
OPERATOR_SELECTOR = f"app.kubernetes.io/name=taint-operator,app.kubernetes.io/instance={RELEASE}"
MANAGED = "nodetaint.io/managed-taints"
BOOTSTRAPPED = "nodetaint.io/bootstrapped"
# Every taint the tests' policies own has this key prefix.
TEST_TAINT_PREFIX = "e2e.nodetaint.io/"


def kubectl(
    *args: str, check: bool = True, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    cmd = ["kubectl", f"--kubeconfig={ENV['KUBECONFIG']}", "--request-timeout=20s", *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd[2:])} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def get(kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    ns = ["-n", namespace] if namespace else []
    out = kubectl("get", kind, name, *ns, "-o", "json", "--ignore-not-found").stdout
    return json.loads(out) if out.strip() else None


def items(kind: str, *args: str) -> list[dict[str, Any]]:
    return json.loads(kubectl("get", kind, *args, "-o", "json").stdout)["items"]


def apply(*objects: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def wait_until(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    """Calls probe until it returns something truthy; fails naming what and the last value seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except AssertionError as e:  # a kubectl hiccup: keep trying until the deadline
            last = e
        if last and not isinstance(last, AssertionError):
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout}s: {what}; last seen: {last!r}")
        time.sleep(interval)


def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- the node


def node_name() -> str:
    return ENV["NODE_NAME"]


def node() -> dict[str, Any]:
    obj = get("node", node_name())
    assert obj, f"node {node_name()} not found"
    return obj


def taints(obj: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return (obj or node()).get("spec", {}).get("taints") or []


def taint_keys(obj: dict[str, Any] | None = None) -> set[str]:
    return {f"{t['key']}:{t['effect']}" for t in taints(obj)}


def has_taint(key: str, obj: dict[str, Any] | None = None) -> bool:
    return any(t["key"] == key for t in taints(obj))


def annotations(obj: dict[str, Any] | None = None) -> dict[str, str]:
    return (obj or node())["metadata"].get("annotations") or {}


def set_condition(ctype: str, status: str, name: str | None = None) -> None:
    """Sets a custom condition through the status subresource (the kubelet keeps
    condition types it does not own)."""
    stamp = now_rfc3339()
    patch = {
        "status": {
            "conditions": [
                {
                    "type": ctype,
                    "status": status,
                    "reason": "E2E",
                    "message": "set by the e2e tests",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ]
        }
    }
    kubectl("patch", "node", name or node_name(), "--subresource=status", "--type=strategic", "-p", json.dumps(patch))


# ---------------------------------------------------------------- policies


def policy(name: str, taint_key: str, effect: str = "NoSchedule", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodetaint.io/v1alpha1",
        "kind": "TaintPolicy",
        "metadata": {"name": name},
        "spec": {"taints": [{"key": taint_key, "effect": effect}], **spec},
    }


def matcher_policy(name: str, taint_key: str, condition: str, effect: str = "NoSchedule") -> dict[str, Any]:
    return policy(
        name, taint_key, effect, matchers=[{"conditions": [{"type": condition, "status": "True"}]}]
    )


def delete_policies(*names: str) -> None:
    """Deletes policies and waits for their finalizer (the operator removes their taints)."""
    if names:
        kubectl("delete", "taintpolicy", *names, "--ignore-not-found", "--timeout=60s", timeout=90)


# ---------------------------------------------------------------- pods


def pods(namespace: str, selector: str) -> list[dict[str, Any]]:
    return items("pods", "-n", namespace, "-l", selector)


def pod_ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conds = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def operator_pods() -> list[dict[str, Any]]:
    return pods(NAMESPACE, OPERATOR_SELECTOR)


def live_operator_pods() -> list[dict[str, Any]]:
    return [p for p in operator_pods() if not p["metadata"].get("deletionTimestamp")]


def lease_holder() -> str | None:
    lease = get("lease", FULLNAME, NAMESPACE)
    return (lease or {}).get("spec", {}).get("holderIdentity") or None


def wait_rollout(timeout: float = 120) -> list[dict[str, Any]]:
    """Waits until the Deployment's pods are all of the newest template, Ready, and alone."""

    def done():
        dep = get("deployment", FULLNAME, NAMESPACE) or {}
        st, want = dep.get("status", {}), dep.get("spec", {}).get("replicas")
        if st.get("observedGeneration") != dep["metadata"]["generation"]:
            return None
        if not (st.get("updatedReplicas") == st.get("readyReplicas") == st.get("replicas") == want):
            return None
        ps = operator_pods()
        if len(ps) != want or not all(pod_ready(p) for p in ps):
            return None
        return ps

    return wait_until("operator rollout complete (all pods new and Ready)", done, timeout, interval=0.5)


# ---------------------------------------------------------------- containerd and cgroups


def ctr(*args: str) -> str:
    cmd = ["ctr", "--address", ENV["CONTAINERD_ADDRESS"], "--namespace", "k8s.io", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=30).stdout


def container_pid(pod: dict[str, Any]) -> int:
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    for line in ctr("tasks", "ls").splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == cid:
            return int(fields[1])
    raise AssertionError(f"no containerd task for container {cid} of pod {pod['metadata']['name']}")


def memory_cgroup(pod: dict[str, Any]) -> Path:
    """The operator container's memory cgroup (cgroupfs driver, cgroup v1 or v2)."""
    pid = container_pid(pod)
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/")
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return Path("/sys/fs/cgroup/unified") / line[3:].lstrip("/")
    raise AssertionError(f"no memory cgroup for pid {pid}")


def memory_mib(pod: dict[str, Any]) -> dict[str, float]:
    """usage, working set (usage minus inactive file cache, what the kubelet reports) and rss."""
    cg = memory_cgroup(pod)
    stat = dict(
        (k, int(v)) for k, v in (line.split() for line in (cg / "memory.stat").read_text().splitlines())
    )
    if (cg / "memory.usage_in_bytes").exists():
        usage = int((cg / "memory.usage_in_bytes").read_text())
        inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
        rss = stat.get("total_rss", stat.get("rss", 0))
    else:
        usage = int((cg / "memory.current").read_text())
        inactive, rss = stat.get("inactive_file", 0), stat.get("anon", 0)
    mib = 1024 * 1024
    return {"usage": usage / mib, "working_set": (usage - inactive) / mib, "rss": rss / mib}


def operator_memory() -> str:
    parts = []
    for p in sorted(operator_pods(), key=lambda p: p["metadata"]["name"]):
        m = memory_mib(p)
        role = "leader" if p["metadata"]["name"] == lease_holder() else "standby"
        parts.append(f"{role} working set {m['working_set']:.1f} MiB (rss {m['rss']:.1f}, usage {m['usage']:.1f})")
    return "; ".join(parts)


# ---------------------------------------------------------------- events


def node_write_events() -> list[dict[str, Any]]:
    """The operator's TaintAdded/TaintRemoved events on the node: who wrote and when."""
    out = []
    for e in items("events.v1.events.k8s.io", "-A"):
        if e.get("regarding", {}).get("name") != node_name():
            continue
        if e.get("reason") not in ("TaintAdded", "TaintRemoved"):
            continue
        first = e.get("eventTime") or e["metadata"]["creationTimestamp"]
        last = (e.get("series") or {}).get("lastObservedTime") or first
        out.append({"instance": e.get("reportingInstance"), "first": first, "last": last, "note": e.get("note", "")})
    return out


def parse_time(s: str) -> float:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def assert_one_writer_at_a_time() -> None:
    """Per replica, the span from its first to its last node write; spans must not overlap."""
    spans: dict[str, list[float]] = {}
    for e in node_write_events():
        span = spans.setdefault(e["instance"], [float("inf"), float("-inf")])
        span[0] = min(span[0], parse_time(e["first"]))
        span[1] = max(span[1], parse_time(e["last"]))
    ordered = sorted(spans.items(), key=lambda kv: kv[1][0])
    for (a, sa), (b, sb) in zip(ordered, ordered[1:]):
        assert sa[1] <= sb[0], f"replicas {a} ({sa}) and {b} ({sb}) both wrote the node in overlapping spans"


def env_for_tools() -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": ENV["KUBECONFIG"]}
