"""The conditions come from node-problem-detector, as in users' clusters: one real
NPD (NPD_BIN) per node of the multi-node cluster, with --hostname-override, and
problems injected the way they happen (a kernel line in the log its filelog monitor
follows, a network interface whose sysfs state goes down, a spot notice from a
stand-in instance metadata service). No test here writes a condition itself.

Collected with the multi-node suite (E2E_NODES=4 E2E_ZONES=a,b); skipped, saying
so, without NPD_BIN. The plugins and their monitor configurations are the shipped
ones (examples/node-problem-detector/plugins/), pointed at per-node stand-ins.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import k8s
from conftest import MEASUREMENTS
from k8s import kubectl, wait_until
from test_multinode import (
    APP_NS,
    ReadySampler,
    app_pods,
    cluster_script,
    nodes,
    ready_on,
    start_workload,
    stop_workload,
    stop_workload_anywhere,
)

PLUGINS = k8s.REPO / "examples" / "node-problem-detector" / "plugins"
POLICIES = k8s.REPO / "examples" / "node-problem-detector" / "policies"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
READONLY_LINE = "EXT4-fs error (device vda1): ext4_journal_check_start: Detected aborted journal; Remounting filesystem read-only"


# ---------------------------------------------------------------- stand-ins


class Metadata:
    """A stand-in for AWS's instance metadata service (IMDSv2), one per cluster on
    loopback, each node under a path of its own (`/NODE/latest/...`): a token for
    every PUT, and `spot/instance-action` 404 until `notice(node)`."""

    def __init__(self) -> None:
        self.notices: dict[str, str] = {}
        meta = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                if self.path.endswith("/latest/api/token"):
                    self.answer(200, "e2e-token")
                else:
                    self.answer(404, "")

            def do_GET(self) -> None:
                node, _, rest = self.path.lstrip("/").partition("/")
                if self.headers.get("X-aws-ec2-metadata-token") != "e2e-token":
                    self.answer(401, "")
                elif rest == "latest/meta-data/spot/instance-action" and node in meta.notices:
                    self.answer(200, meta.notices[node])
                else:
                    self.answer(404, "")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def endpoint(self, node: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{node}"

    def notice(self, node: str) -> None:
        self.notices[node] = json.dumps({"action": "terminate", "time": k8s.now_rfc3339()})

    def clear(self, node: str) -> None:
        self.notices.pop(node, None)

    def close(self) -> None:
        self.server.shutdown()


class Detector:
    """node-problem-detector for one node, outside any pod: a filelog monitor on the
    node's kernel log (as NPD's readonly monitor reads the kernel's), and the shipped
    NIC and AWS spot plugins, the NIC check reading a sysfs tree of the node's own."""

    def __init__(self, node: str, root: Path, metadata: Metadata) -> None:
        self.node = node
        self.dir = root / node
        self.dir.mkdir(parents=True)
        self.kern_log = self.dir / "kern.log"
        self.kern_log.touch()
        self.nic = self.dir / "net" / "eth0"
        self.nic.mkdir(parents=True)
        (self.nic / "device").touch()
        self.nic_state("up")
        readonly = {
            "plugin": "filelog",
            "pluginConfig": {
                "timestamp": "^.{15}",
                "message": "kernel: \\[.*\\] (.*)",
                "timestampFormat": "Jan _2 15:04:05",
            },
            "logPath": str(self.kern_log),
            "lookback": "5m",
            "bufferSize": 10,
            "source": "kernel-monitor",
            "conditions": [
                {"type": "ReadonlyFilesystem", "reason": "FilesystemIsNotReadOnly", "message": "Filesystem is not read-only"}
            ],
            "rules": [
                {
                    "type": "permanent",
                    "condition": "ReadonlyFilesystem",
                    "reason": "FilesystemIsReadOnly",
                    "pattern": ".*Remounting filesystem read-only",
                }
            ],
        }
        (self.dir / "readonly-monitor.json").write_text(json.dumps(readonly))
        for name, script in [("network-interface-card", "check-nic.sh"), ("spot-interruption-aws", "spot-interruption-aws.sh")]:
            config = json.loads((PLUGINS / f"{name}.json").read_text())
            for rule in config["rules"]:
                rule["path"] = str(PLUGINS / script)
            (self.dir / f"{name}.json").write_text(json.dumps(config))
        self.env = {
            **os.environ,
            "SYSFS_NET": str(self.dir / "net"),
            "AWS_IMDS_ENDPOINT": metadata.endpoint(node),
            "METADATA_TIMEOUT": "2",
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.dir / f"npd-{self.starts}.log", "wb")
        server = k8s.ENV["KUBE_APISERVER_URL"]
        self.proc = subprocess.Popen(
            [
                os.environ["NPD_BIN"],
                f"--hostname-override={self.node}",
                f"--apiserver-override={server}?inClusterConfig=false&auth={k8s.ENV['KUBECONFIG']}",
                f"--config.system-log-monitor={self.dir / 'readonly-monitor.json'}",
                f"--config.custom-plugin-monitor={self.dir / 'network-interface-card.json'},{self.dir / 'spot-interruption-aws.json'}",
                "--port=0",
                "--prometheus-port=0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def kernel_says(self, message: str) -> float:
        """Appends a kernel line as syslog writes it; returns when (monotonic)."""
        stamp = time.strftime("%b %e %H:%M:%S", time.gmtime())
        with open(self.kern_log, "a") as f:
            f.write(f"{stamp} {self.node} kernel: [ 1234.567890] {message}\n")
        return time.monotonic()

    def forget_kernel_log(self) -> None:
        self.kern_log.write_text("")

    def nic_state(self, state: str) -> None:
        (self.nic / "operstate").write_text(state + "\n")


def condition(node: str, ctype: str) -> dict[str, Any]:
    for c in (k8s.get("node", node) or {}).get("status", {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return {}


def taint_keys(node: str) -> set[str]:
    return {f"{t['key']}:{t['effect']}" for t in k8s.taints(k8s.get("node", node))}


class NodeWatch:
    """Every event of one node's watch, as (monotonic time, taints as key:effect, the
    node's conditions by type), until stopped: the tests judge each of them, not
    samples."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.events: list[tuple[float, set[str], dict[str, dict[str, Any]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rv = k8s.get("node", self.node)["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            conn = k8s.api_connection()
            conn.sock.settimeout(5)
            path = f"/api/v1/nodes?watch=1&fieldSelector=metadata.name%3D{self.node}&resourceVersion={rv}&allowWatchBookmarks=false"
            conn.request("GET", path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            buffered = b""
            while not self._stop.is_set():
                try:
                    chunk = resp.read1(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                buffered += chunk
                while b"\n" in buffered:
                    line, buffered = buffered.split(b"\n", 1)
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] not in ("ADDED", "MODIFIED"):
                        continue
                    rv = obj["metadata"]["resourceVersion"]
                    taints = {f"{t['key']}:{t['effect']}" for t in obj.get("spec", {}).get("taints") or []}
                    conds = {c["type"]: c for c in obj.get("status", {}).get("conditions") or []}
                    self.events.append((time.monotonic(), taints, conds))
            conn.close()

    def __enter__(self) -> "NodeWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def detectors(release):
    if not os.environ.get("NPD_BIN"):
        pytest.skip("NPD_BIN is not set: the detector tests need a node-problem-detector binary (see e2e/README.md)")
    if len(nodes()) < 4:
        pytest.skip("the detector tests need e2e/cluster.sh up DIR --nodes 4 --zones a,b (E2E_NODES=4 E2E_ZONES=a,b)")
    k8s.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APP_NS}})
    metadata = Metadata()
    root = Path(tempfile.mkdtemp(prefix="taint-operator-npd-"))
    found = {n: Detector(n, root, metadata) for n in nodes()}
    for d in found.values():
        d.start()
    try:
        wait_until(
            "every node's detector posted its default conditions",
            lambda: all(
                condition(n, t).get("status") == "False"
                for n in found
                for t in ("ReadonlyFilesystem", "NetworkInterfaceCard", "SpotInterruption")
            ),
            60,
            0.5,
        )
        yield found, metadata
    finally:
        for d in found.values():
            d.stop()
        metadata.close()
        print(f"node-problem-detector logs in {root}")


def shipped(name: str, **spec: Any) -> dict[str, Any]:
    """A shipped policy from examples/node-problem-detector/policies/, with `spec`
    fields replaced."""
    obj = yaml.safe_load((POLICIES / f"{name}.yaml").read_text())
    obj["metadata"] = {"name": obj["metadata"]["name"]}
    obj["spec"].update(spec)
    return obj


def reset_detector(d: Detector) -> None:
    """The node healthy again, as after a reboot: an empty kernel log, the NIC up,
    the detector started afresh (its default statuses)."""
    d.forget_kernel_log()
    d.nic_state("up")
    d.restart()
    wait_until(
        f"{d.node}: default conditions again",
        lambda: condition(d.node, "ReadonlyFilesystem").get("status") == "False"
        and condition(d.node, "NetworkInterfaceCard").get("status") == "False",
        60,
        0.5,
    )


# ---------------------------------------------------------------- D1: a kernel line drains its node


def test_d1_a_read_only_filesystem_line_drains_its_node_within_the_budget(detectors):
    found, _ = detectors
    # The shipped policy as it is, but for its cap: 10% of 4 nodes rounds down to 0.
    policy = shipped("readonly-filesystem", maxTaintedNodes=1)
    name = policy["metadata"]["name"]
    key = policy["spec"]["taints"][0]["key"]
    placement = start_workload("readonly")
    victim = sorted(set(placement.values()))[0]
    k8s.apply(policy)
    wait_until(f"{name} Ready", lambda: k8s.policy_ready(name), 60)
    try:
        with ReadySampler("readonly") as sampler:
            written = found[victim].kernel_says(READONLY_LINE)
            wait_until(
                f"{victim}: ReadonlyFilesystem=True",
                lambda: condition(victim, "ReadonlyFilesystem").get("status") == "True",
                30,
                0.1,
            )
            to_condition = time.monotonic() - written

            def drained():
                if f"{key}:NoExecute" not in taint_keys(victim):
                    return None
                ready = ready_on("readonly")
                on_victim = [p for p in app_pods("readonly") if p["spec"].get("nodeName") == victim]
                return ready if not on_victim and sum(ready.values()) == 4 else None

            wait_until(f"{victim} NoExecute, 4 replicas Ready elsewhere", drained, 180, 0.2)
            to_drained = time.monotonic() - written
            time.sleep(1)
        MEASUREMENTS["NPD: read-only line → condition"] = f"{to_condition:.1f} s"
        MEASUREMENTS["NPD: read-only line → drained (NoExecute, 4 Ready elsewhere)"] = (
            f"{to_drained:.1f} s, fewest Ready {sampler.minimum()} of 4"
        )
        assert sampler.minimum() >= 3, f"the drain left {sampler.minimum()} Ready replicas"
    finally:
        k8s.delete_policies(name)
        stop_workload("readonly")
        reset_detector(found[victim])


# ---------------------------------------------------------------- D2: detector restarts


def test_d2_a_detector_restart_never_lifts_a_taint(detectors):
    found, _ = detectors
    n1, n2 = nodes()[0], nodes()[1]
    key = k8s.TEST_TAINT_PREFIX + "npd"
    plain = k8s.policy(
        "e2e-npd-readonly",
        key + "-readonly",
        "NoSchedule",
        nodeSelector={"matchLabels": {"kubernetes.io/hostname": n1}},
        matchers=[{"conditions": [{"type": "ReadonlyFilesystem", "status": "True"}]}],
        clearAfter="2m",
    )
    windowed = k8s.policy(
        "e2e-npd-nic",
        key + "-nic",
        "NoSchedule",
        nodeSelector={"matchLabels": {"kubernetes.io/hostname": n2}},
        matchers=[{"conditions": [{"type": "NetworkInterfaceCard", "status": "True", "reason": "NICDown", "for": "15s"}]}],
        clearAfter="2m",
    )
    want = {n1: f"{key}-readonly:NoSchedule", n2: f"{key}-nic:NoSchedule"}
    k8s.apply(plain, windowed)
    try:
        found[n1].kernel_says(READONLY_LINE)
        found[n2].nic_state("down")
        for n, taint in want.items():
            wait_until(f"{n}: {taint}", lambda n=n, taint=taint: taint in taint_keys(n), 60, 0.2)
        before = {n: condition(n, t)["lastTransitionTime"] for n, t in [(n1, "ReadonlyFilesystem"), (n2, "NetworkInterfaceCard")]}
        with NodeWatch(n1) as w1, NodeWatch(n2) as w2:
            time.sleep(1)
            restarted = time.monotonic()
            found[n1].restart()
            found[n2].restart()
            # Both detectors posted their problem again: the NIC check with a new
            # lastTransitionTime (its 15 s `for` window would start over), the filelog
            # monitor with the kernel line's own time, replayed from its lookback.
            wait_until(
                "both conditions True again, the NIC's with a new lastTransitionTime",
                lambda: condition(n1, "ReadonlyFilesystem").get("status") == "True"
                and condition(n2, "NetworkInterfaceCard").get("status") == "True"
                and condition(n2, "NetworkInterfaceCard")["lastTransitionTime"] != before[n2],
                90,
                0.5,
            )
            time.sleep(20)
        moved = {
            n1: condition(n1, "ReadonlyFilesystem")["lastTransitionTime"] != before[n1],
            n2: True,
        }
        blinked = {}
        for w, ctype in [(w1, "ReadonlyFilesystem"), (w2, "NetworkInterfaceCard")]:
            events = [e for e in w.events if e[0] >= restarted]
            assert events, f"no watch event of {w.node} after the restart"
            for t, taints, _ in events:
                assert want[w.node] in taints, f"{w.node} lost {want[w.node]} {t - restarted:.1f} s after the restart: {taints}"
            blinked[w.node] = any(c.get(ctype, {}).get("status") == "False" for _, _, c in events)
        MEASUREMENTS["NPD restart: watch events judged, taint present in every one"] = (
            f"{len(w1.events)} ({n1}, no for) + {len(w2.events)} ({n2}, for 15s); "
            f"default status seen: {blinked}; new lastTransitionTime: {moved}"
        )
    finally:
        k8s.delete_policies("e2e-npd-readonly", "e2e-npd-nic")
        reset_detector(found[n1])
        reset_detector(found[n2])


# ---------------------------------------------------------------- D3: a check that passes again


def test_d3_a_check_that_passes_again_lifts_the_taint_after_clear_after(detectors):
    found, _ = detectors
    victim = nodes()[2]
    clear_after = 10
    policy = shipped("nic-down", clearAfter=f"{clear_after}s", maxTaintedNodes=1)
    name = policy["metadata"]["name"]
    taint = f"{policy['spec']['taints'][0]['key']}:{policy['spec']['taints'][0]['effect']}"
    interval = float(json.loads((PLUGINS / "network-interface-card.json").read_text())["pluginConfig"]["invoke_interval"].rstrip("s"))
    for_window = max(
        (float(c.get("for", "0s").rstrip("s")) for m in policy["spec"]["matchers"] for c in m["conditions"]), default=0.0
    )
    k8s.apply(policy)
    try:
        down = time.monotonic()
        found[victim].nic_state("down")
        wait_until(f"{victim}: {taint}", lambda: taint in taint_keys(victim), interval + for_window + 60, 0.2)
        on = time.monotonic() - down
        up = time.monotonic()
        found[victim].nic_state("up")
        wait_until(f"{victim}: NetworkInterfaceCard False", lambda: condition(victim, "NetworkInterfaceCard").get("status") == "False", interval + 15, 0.2)
        cleared = time.monotonic() - up
        wait_until(f"{victim}: {taint} off", lambda: taint not in taint_keys(victim), interval + clear_after + 30, 0.2)
        off = time.monotonic() - up
        MEASUREMENTS["NPD NIC check: down → taint"] = f"{on:.1f} s (interval {interval:.0f} s, for {for_window:.0f} s)"
        MEASUREMENTS["NPD NIC check: up again → condition False / taint off"] = f"{cleared:.1f} s / {off:.1f} s (clearAfter {clear_after} s)"
        assert off >= clear_after - 1, f"the taint came off {off:.1f} s after the check passed, before clearAfter"
        assert off <= interval + clear_after + 5, f"the taint came off {off:.1f} s after the check passed"
    finally:
        k8s.delete_policies(name)
        reset_detector(found[victim])


# ---------------------------------------------------------------- D4: the spot files end to end


def test_d4_the_spot_files_drain_at_the_notice_and_mark_a_node_out_of_service_once_it_is_down(detectors):
    found, metadata = detectors
    victim = nodes()[-1]
    files = list(yaml.safe_load_all((k8s.REPO / "examples" / "spot-out-of-service.yaml").read_text()))
    names = [f["metadata"]["name"] for f in files]
    drain_key = files[0]["spec"]["taints"][0]["key"]
    kubectl("label", "node", victim, "node.kubernetes.io/lifecycle=spot", "--overwrite")
    kubectl("apply", "-f", str(k8s.REPO / "examples" / "spot-out-of-service.yaml"))
    placement = start_workload("spot-npd")
    assert victim in placement.values(), placement
    try:
        with NodeWatch(victim) as watch, ReadySampler("spot-npd") as sampler:
            noticed = time.monotonic()
            metadata.notice(victim)
            wait_until(
                f"{victim}: SpotInterruption=True",
                lambda: condition(victim, "SpotInterruption").get("status") == "True",
                30,
                0.2,
            )
            to_condition = time.monotonic() - noticed

            def drained():
                if f"{drain_key}:NoExecute" not in taint_keys(victim):
                    return None
                on_victim = [p for p in app_pods("spot-npd") if p["spec"].get("nodeName") == victim and k8s.pod_ready(p)]
                return not on_victim and sum(ready_on("spot-npd").values()) == 4

            wait_until(f"{victim} drained while it runs", drained, 180, 0.2)
            to_drained = time.monotonic() - noticed
            assert f"{OUT_OF_SERVICE}:NoExecute" not in taint_keys(victim)
            # The machine goes down: its detector with it.
            found[victim].stop()
            powered_off = time.monotonic()
            cluster_script("node-stop", k8s.ENV["CLUSTER_DIR"], victim)
            wait_until(
                f"{victim} out-of-service",
                lambda: f"{OUT_OF_SERVICE}:NoExecute" in taint_keys(victim),
                120,
                0.2,
            )
            to_oos = time.monotonic() - powered_off
            assert condition(victim, "Ready").get("status") != "True"
            wait_until("4 replicas Ready elsewhere", lambda: sum(n for node, n in ready_on("spot-npd").items() if node != victim) == 4, 60, 0.5)
            time.sleep(1)
        for t, taints, conds in watch.events:
            if f"{OUT_OF_SERVICE}:NoExecute" in taints:
                assert conds.get("Ready", {}).get("status") != "True", f"out-of-service on {victim} while Ready=True, {t - noticed:.1f} s after the notice"
        MEASUREMENTS["NPD spot: notice → condition / drained (fewest Ready)"] = f"{to_condition:.1f} s / {to_drained:.1f} s ({sampler.minimum()} of 4)"
        MEASUREMENTS["NPD spot: power-off → out-of-service"] = f"{to_oos:.1f} s ({len(watch.events)} watch events, none with out-of-service while Ready=True)"
        assert sampler.minimum() >= 3, f"the drain at the notice left {sampler.minimum()} Ready replicas"
    finally:
        metadata.clear(victim)
        stop_workload_anywhere("spot-npd")
        k8s.delete_policies(*names)
        cluster_script("node-start", k8s.ENV["CLUSTER_DIR"], victim)
        found[victim].forget_kernel_log()
        found[victim].start()
        wait_until(
            f"{victim} Ready, SpotInterruption False",
            lambda: condition(victim, "Ready").get("status") == "True"
            and condition(victim, "SpotInterruption").get("status") == "False",
            180,
            1.0,
        )
        kubectl("label", "node", victim, "node.kubernetes.io/lifecycle-")
