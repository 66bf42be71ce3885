"""Small helpers for the real-cluster tests: kubectl, waiting, the node, the operator."""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import os
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
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
DRAIN_STARTED = "nodetaint.io/drain-started"
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


_TLS: dict[str, Any] = {}


def api_tls() -> tuple[str, int, ssl.SSLContext]:
    """The API server's host and port and a TLS context with the admin's client
    certificate, from the kubeconfig (for requests kubectl cannot make, such as
    several at the same moment)."""
    if not _TLS:
        cfg = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
        cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
        # the credentials go to files only while the context loads them
        with tempfile.TemporaryDirectory(prefix="taint-operator-real-tls-") as files:

            def pem(name: str, data_key: str, file_key: str) -> str:
                if data_key in cluster or data_key in user:
                    path = os.path.join(files, name)
                    Path(path).write_bytes(base64.b64decode(cluster.get(data_key) or user[data_key]))
                    return path
                return cluster.get(file_key) or user[file_key]

            ctx = ssl.create_default_context(cafile=pem("ca.crt", "certificate-authority-data", "certificate-authority"))
            ctx.load_cert_chain(
                pem("client.crt", "client-certificate-data", "client-certificate"),
                pem("client.key", "client-key-data", "client-key"),
            )
        url = urllib.parse.urlsplit(cluster["server"])
        _TLS.update(host=url.hostname, port=url.port or 443, ctx=ctx)
    return _TLS["host"], _TLS["port"], _TLS["ctx"]


def api_connection() -> http.client.HTTPSConnection:
    """An HTTPS connection to the API server, already open (TLS done)."""
    host, port, ctx = api_tls()
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=20)
    conn.connect()
    return conn


def api_send(conn: http.client.HTTPSConnection, method: str, path: str, body: Any = None) -> tuple[int, list[str], str]:
    """One request on `conn`: (status, the Warning headers, the body)."""
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", "Accept": "application/json"})
    resp = conn.getresponse()
    return resp.status, resp.headers.get_all("Warning") or [], resp.read().decode()


def warning_text(header: str) -> str:
    """The text of an HTTP Warning header as the API server sends it: `299 - "text"`."""
    code, _, rest = header.partition(" ")
    agent, _, text = rest.partition(" ")
    assert code == "299" and agent == "-", header
    return json.loads(text) if text.startswith('"') else text


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
    """A policy owning one taint. The tests time how soon a taint comes off once its
    condition clears, so it says `clearAfter: 0s` unless `spec` says otherwise; the
    default (2m) is what the detector tests (test_detectors.py) rely on."""
    spec.setdefault("clearAfter", "0s")
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


def policy_ready(name: str) -> bool:
    """The policy's Ready condition is True (and is about its current generation)."""
    tp = get("taintpolicy", name) or {}
    status = tp.get("status", {})
    ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
    return bool(ready) and ready[0]["status"] == "True" and status.get("observedGeneration") == tp["metadata"]["generation"]


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
    # The process's own view: its code pages count in VmRSS but are charged to
    # whichever cgroup read the image file first (containerd's, at import).
    status = Path(f"/proc/{container_pid(pod)}/status").read_text()
    vmrss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return {"usage": usage / mib, "working_set": (usage - inactive) / mib, "rss": rss / mib, "vmrss": vmrss / 1024}


def operator_memory() -> str:
    parts = []
    for p in sorted(operator_pods(), key=lambda p: p["metadata"]["name"]):
        m = memory_mib(p)
        role = "leader" if p["metadata"]["name"] == lease_holder() else "standby"
        parts.append(
            f"{role}: cgroup working set {m['working_set']:.1f} MiB (rss {m['rss']:.1f}, usage {m['usage']:.1f}),"
            f" process VmRSS {m['vmrss']:.1f} MiB"
        )
    return "; ".join(parts)


# ---------------------------------------------------------------- operator logs


class LogFollower:
    """Follows the log of every operator pod from its start to its end (deleted
    pods included), so the tests can tell which replica wrote a node and when.

    The node events are no record of that: the operator publishes them in bulk
    once writes go quiet (2 s), stamped when sent, and a pod stopped meanwhile
    never sends them."""

    def __init__(self) -> None:
        self.lines: dict[str, list[dict[str, Any]]] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> "LogFollower":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for proc in self._procs.values():
            proc.terminate()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                for pod in operator_pods():
                    name = pod["metadata"]["name"]
                    running = any("running" in (c.get("state") or {}) for c in pod.get("status", {}).get("containerStatuses") or [])
                    if name not in self._procs and running:
                        self._follow(name)
            except Exception:  # noqa: BLE001 - a kubectl hiccup; try again
                pass
            time.sleep(0.5)

    def _follow(self, pod: str) -> None:
        cmd = ["kubectl", f"--kubeconfig={ENV['KUBECONFIG']}", "logs", "-f", "-n", NAMESPACE, pod]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._procs[pod] = proc
        lines = self.lines.setdefault(pod, [])

        def read() -> None:
            for line in proc.stdout:
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    pass

        threading.Thread(target=read, daemon=True).start()

    def writes(self, node: str | None = None) -> list[tuple[float, str, dict[str, Any]]]:
        """(time, pod, log line) of every taint added or removed, oldest first."""
        out = []
        for pod, lines in self.lines.items():
            for line in list(lines):
                if "added" in line and (node is None or line.get("node") == node):
                    out.append((parse_time(line["timestamp"]), pod, line))
        return sorted(out, key=lambda w: w[0])

    def became_leader(self) -> dict[str, float]:
        return {
            pod: parse_time(line["timestamp"])
            for pod, lines in self.lines.items()
            for line in list(lines)
            if line.get("message") == "became leader"
        }

    def assert_one_writer_at_a_time(self) -> None:
        """Each replica writes only after it became leader, and the spans from a
        replica's first to its last node write never overlap."""
        spans: dict[str, list[float]] = {}
        leaders = self.became_leader()
        for t, pod, line in self.writes():
            assert pod in leaders and t >= leaders[pod], f"{pod} wrote before it led: {line}"
            span = spans.setdefault(pod, [t, t])
            span[1] = t
        ordered = sorted(spans.items(), key=lambda kv: kv[1][0])
        for (a, sa), (b, sb) in zip(ordered, ordered[1:]):
            assert sa[1] <= sb[0], f"replicas {a} {sa} and {b} {sb} wrote nodes in overlapping spans"


def parse_time(s: str) -> float:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def env_for_tools() -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": ENV["KUBECONFIG"]}
