"""Drains that keep workloads up, on several real kubelets (e2e/cluster.sh --nodes 4
--zones a,b): evictions whose pods reschedule on other nodes, a PodDisruptionBudget
the disruption controller keeps current, a zone-wide fault held whole, a powered-off
spot node recovered with node.kubernetes.io/out-of-service, and the leader's own
node powered off. Run with `E2E_NODES=4 E2E_ZONES=a,b e2e/real/run.sh` (= just
e2e-multinode); the one-node suite (test_real.py) runs without E2E_NODES.

Each test reports what it measured at the end of the run (conftest's MEASUREMENTS).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

import k8s
from conftest import MEASUREMENTS
from k8s import kubectl, wait_until

KEY = k8s.TEST_TAINT_PREFIX + "drain"
APP_NS = "e2e-drain"
SAMPLE_EVERY = 0.2


def nodes() -> list[str]:
    return k8s.ENV["NODES"].split()


def zone_of(node: str) -> str:
    return k8s.get("node", node)["metadata"]["labels"].get("topology.kubernetes.io/zone", "")


def cluster_script(*args: str) -> None:
    script = k8s.REPO / "e2e" / "cluster.sh"
    done = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"cluster.sh {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module", autouse=True)
def several_nodes(release):
    if len(nodes()) < 4:
        pytest.skip("the multi-node suite needs e2e/cluster.sh up DIR --nodes 4 --zones a,b (E2E_NODES=4 E2E_ZONES=a,b)")
    zones = {n: zone_of(n) for n in nodes()}
    assert sorted(set(zones.values())) == ["a", "b"], f"zones a and b round-robin: {zones}"
    k8s.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APP_NS}})
    yield zones


# ---------------------------------------------------------------- the workload


def workload(name: str, replicas: int = 4) -> list[dict[str, Any]]:
    """A Deployment of busybox pods, spread one a node where it can be, Ready once
    they run (a readiness probe), that exit at once on SIGTERM; and a
    PodDisruptionBudget allowing one of them down."""
    labels = {"app": name}
    script = "trap 'exit 0' TERM; touch /tmp/ready; while true; do sleep 1; done"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": APP_NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    # the image is FROM scratch: no /tmp of its own
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                    "affinity": {
                        "podAntiAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 100,
                                    "podAffinityTerm": {
                                        "labelSelector": {"matchLabels": labels},
                                        "topologyKey": "kubernetes.io/hostname",
                                    },
                                }
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "app",
                            "image": k8s.ENV["BUSYBOX_IMAGE"],
                            "imagePullPolicy": "Never",
                            "command": ["/bin/sh", "-c", script],
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                            "readinessProbe": {
                                "exec": {"command": ["/bin/sh", "-c", "test -f /tmp/ready"]},
                                "periodSeconds": 1,
                                "initialDelaySeconds": 1,
                            },
                        }
                    ],
                },
            },
        },
    }
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": APP_NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
    }
    return [deployment, budget]


def app_pods(name: str) -> list[dict[str, Any]]:
    return k8s.pods(APP_NS, f"app={name}")


def ready_on(name: str) -> dict[str, int]:
    """Ready pods of the workload (not terminating) per node."""
    out: dict[str, int] = {}
    for p in app_pods(name):
        if k8s.pod_ready(p):
            node = p["spec"].get("nodeName", "")
            out[node] = out.get(node, 0) + 1
    return out


def start_workload(name: str, replicas: int = 4) -> dict[str, str]:
    """Creates the workload and waits until every replica is Ready, one a node;
    returns pod name -> node."""
    k8s.apply(*workload(name, replicas))

    def spread():
        ready = ready_on(name)
        return ready if sum(ready.values()) == replicas and len(ready) == replicas else None

    wait_until(f"{name}: {replicas} replicas Ready, one a node", spread, 120, 0.5)
    # the disruption controller has seen them: the budget allows one disruption
    wait_until(
        f"{name}: the PodDisruptionBudget counts {replicas} healthy",
        lambda: (k8s.get("pdb", name, APP_NS) or {}).get("status", {}).get("currentHealthy") == replicas,
        60,
        0.5,
    )
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in app_pods(name)}


def stop_workload(name: str) -> None:
    kubectl("delete", "deployment,pdb", name, "-n", APP_NS, "--ignore-not-found", "--timeout=90s", timeout=120)
    wait_until(f"{name}'s pods gone", lambda: not app_pods(name), 90, 0.5)


class ReadySampler:
    """Counts the workload's Ready pods every SAMPLE_EVERY seconds through one API
    connection (kubectl would take longer than the period), until stopped."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = k8s.api_connection()
        path = f"/api/v1/namespaces/{APP_NS}/pods?labelSelector=app%3D{self.name}"
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                status, _, body = k8s.api_send(conn, "GET", path)
                if status == 200:
                    ready = sum(1 for p in json.loads(body)["items"] if k8s.pod_ready(p))
                    self.samples.append((t, ready))
            except OSError:
                conn = k8s.api_connection()
            self._stop.wait(max(0.0, SAMPLE_EVERY - (time.monotonic() - t)))

    def __enter__(self) -> "ReadySampler":
        self._thread.start()
        wait_until("the first sample", lambda: self.samples, 10, 0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)

    def minimum(self) -> int:
        return min(ready for _, ready in self.samples)


# ---------------------------------------------------------------- policies and nodes


def drain_policy(name: str, condition: str, eviction: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"matchers": [{"conditions": [{"type": condition, "status": "True"}]}]}
    if eviction is not None:
        spec["eviction"] = eviction
    return k8s.policy(name, KEY, "NoExecute", **spec)


def effects_on(node: str) -> set[str]:
    return {t["effect"] for t in k8s.taints(k8s.get("node", node)) if t["key"] == KEY}


def flip_within_a_second(condition: str, status: str, targets: list[str]) -> float:
    """Sets the condition on every target, one after the other; returns when the first was set."""
    started = time.monotonic()
    for n in targets:
        k8s.set_condition(condition, status, n)
    spent = time.monotonic() - started
    assert spent < 1.0 * len(targets), f"setting {len(targets)} conditions took {spent:.1f} s"
    return started


def reset(policy: str, condition: str) -> None:
    k8s.delete_policies(policy)
    for n in nodes():
        k8s.set_condition(condition, "False", n)
    wait_until(
        f"{KEY} off every node",
        lambda: not any(effects_on(n) for n in nodes()),
        60,
    )


def policy_ready_condition(name: str) -> dict[str, Any]:
    obj = k8s.get("taintpolicy", name) or {}
    for c in obj.get("status", {}).get("conditions") or []:
        if c["type"] == "Ready":
            return c
    return {}


# ---------------------------------------------------------------- 1: a drain keeps a workload up


def run_drain(app: str, policy: str, condition: str, eviction: dict[str, Any] | None) -> tuple[int, float, list[str]]:
    """Two nodes' conditions flip within a second under a NoExecute policy; returns
    the fewest Ready replicas sampled, the drain's duration (first flip until both
    nodes are NoExecute and hold none of the workload) and the drained nodes."""
    placement = start_workload(app)
    drained = sorted(set(placement.values()))[:2]
    k8s.apply(drain_policy(policy, condition, eviction))
    with ReadySampler(app) as sampler:
        started = flip_within_a_second(condition, "True", drained)

        def done():
            if not all(effects_on(n) == {"NoExecute"} for n in drained):
                return None
            on_drained = [p for p in app_pods(app) if p["spec"].get("nodeName") in drained]
            ready = ready_on(app)
            if on_drained or sum(ready.values()) != 4:
                return None
            return ready

        ready = wait_until(f"{drained} NoExecute, the workload's 4 replicas Ready elsewhere", done, 180, 0.2)
        took = time.monotonic() - started
        time.sleep(1)
    assert not set(ready) & set(drained), ready
    return sampler.minimum(), took, drained


def test_1_a_drain_keeps_the_workload_up(several_nodes):
    condition = "E2EDrainFault"
    try:
        minimum, took, drained = run_drain("drained", "e2e-drain", condition, {})
    finally:
        reset("e2e-drain", condition)
        stop_workload("drained")
    try:
        raw_minimum, raw_took, _ = run_drain("undrained", "e2e-no-drain", condition, None)
    finally:
        reset("e2e-no-drain", condition)
        stop_workload("undrained")
    MEASUREMENTS["drain of 2 nodes, spec.eviction: fewest Ready of 4"] = f"{minimum} (drain {took:.1f} s)"
    MEASUREMENTS["same without spec.eviction: fewest Ready of 4"] = f"{raw_minimum} ({raw_took:.1f} s)"
    assert minimum >= 3, f"with spec.eviction the workload fell to {minimum} Ready replicas while {drained} drained"
    assert raw_minimum <= 2, f"without spec.eviction the workload kept {raw_minimum}: the comparison shows nothing"


# ---------------------------------------------------------------- 2: a failing zone keeps its pods


def test_2_a_failing_zone_keeps_its_pods(several_nodes):
    condition = "E2EZoneFault"
    zone_a = [n for n, z in several_nodes.items() if z == "a"]
    zone_b = [n for n, z in several_nodes.items() if z == "b"]
    placement = start_workload("zoned")
    k8s.apply(drain_policy("e2e-zone", condition, {"pauseWhenZoneUnhealthy": "50%"}))
    try:
        flip_within_a_second(condition, "True", zone_a)
        wait_until(f"{zone_a} NoSchedule", lambda: all(effects_on(n) == {"NoSchedule"} for n in zone_a), 30, 0.2)
        # Held for longer than zoneSettle (5 s) and a recheck (10 s): nothing moves.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for n in zone_a:
                assert effects_on(n) == {"NoSchedule"}, f"{n} of the failing zone changed: {k8s.taints(k8s.get('node', n))}"
            on_a = [p for p in app_pods("zoned") if p["spec"]["nodeName"] in zone_a]
            assert len(on_a) == 2 and all(k8s.pod_ready(p) for p in on_a), f"zone a's pods: {on_a}"
            time.sleep(0.5)
        ready = policy_ready_condition("e2e-zone")
        assert ready.get("reason") == "ZoneUnhealthy" and "a" in ready.get("message", ""), ready
        assert sorted(p for p, n in placement.items() if n in zone_a) == sorted(
            p["metadata"]["name"] for p in app_pods("zoned") if p["spec"]["nodeName"] in zone_a
        ), "zone a's pods were replaced"
        # One match in zone b (1 of 2 is not more than half) drains and switches.
        k8s.set_condition(condition, "True", zone_b[0])
        wait_until(f"{zone_b[0]} NoExecute", lambda: effects_on(zone_b[0]) == {"NoExecute"}, 90, 0.5)
        for n in zone_a:
            assert effects_on(n) == {"NoSchedule"}, f"{n} switched while its zone failed"
    finally:
        reset("e2e-zone", condition)
        stop_workload("zoned")


# ---------------------------------------------------------------- 3: the seed story


def spot_policies() -> list[dict[str, Any]]:
    """The two policies of examples/spot-out-of-service.yaml: drain at the notice,
    out-of-service once the node is down."""
    objs = list(yaml.safe_load_all((k8s.REPO / "examples" / "spot-out-of-service.yaml").read_text()))
    for obj in objs:
        obj["metadata"] = {"name": obj["metadata"]["name"]}
    return objs


def power_off_and_recover(app: str, victim: str, with_policy: bool, timeout: float) -> float:
    """Powers `victim` off (as a termination handler would, its SpotInterruption
    condition goes True at once); returns the seconds until the workload has 4
    Ready replicas again, none on the victim. out-of-service goes on once the node
    lifecycle controller has marked the node down, never before."""
    placement = start_workload(app)
    assert victim in placement.values(), placement
    started = time.monotonic()
    cluster_script("node-stop", k8s.ENV["CLUSTER_DIR"], victim)
    patch = {
        "status": {
            "conditions": [
                {
                    "type": "SpotInterruption",
                    "status": "True",
                    "reason": "PreemptionNotice",
                    "message": "set by the e2e tests as a termination handler would",
                    "lastHeartbeatTime": k8s.now_rfc3339(),
                    "lastTransitionTime": k8s.now_rfc3339(),
                }
            ]
        }
    }
    kubectl("patch", "node", victim, "--subresource=status", "--type=strategic", "-p", json.dumps(patch))
    if with_policy:
        wait_until(
            f"{victim} out-of-service",
            lambda: any(t["key"] == "node.kubernetes.io/out-of-service" for t in k8s.taints(k8s.get("node", victim))),
            # out-of-service waits until the node lifecycle controller marks the node
            # down (NODE_MONITOR_GRACE_SECONDS, 20 s here)
            60,
            0.2,
        )

    def recovered():
        ready = ready_on(app)
        return sum(n for node, n in ready.items() if node != victim) == 4

    wait_until(f"{app}: 4 replicas Ready off {victim}", recovered, timeout, 1.0)
    return time.monotonic() - started


def restore(victim: str) -> None:
    cluster_script("node-start", k8s.ENV["CLUSTER_DIR"], victim)
    k8s.set_condition("SpotInterruption", "False", victim)
    wait_until(
        f"{victim} Ready again",
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in k8s.get("node", victim)["status"]["conditions"]
        ),
        180,
        1.0,
    )


def test_3_a_powered_off_spot_node_is_recovered_by_out_of_service(several_nodes):
    victim = nodes()[-1]
    kubectl("label", "node", victim, "node.kubernetes.io/lifecycle=spot", "--overwrite")
    policies = spot_policies()
    k8s.apply(*policies)
    try:
        with_policy = power_off_and_recover("spot-with", victim, True, 120)
    finally:
        stop_workload_anywhere("spot-with")
        k8s.delete_policies(*(p["metadata"]["name"] for p in policies))
        restore(victim)
    try:
        without = power_off_and_recover("spot-without", victim, False, 600)
    finally:
        stop_workload_anywhere("spot-without")
        restore(victim)
        kubectl("label", "node", victim, "node.kubernetes.io/lifecycle-")
    MEASUREMENTS["spot node powered off: replacements Ready, with spot-out-of-service"] = f"{with_policy:.1f} s"
    MEASUREMENTS["spot node powered off: replacements Ready, without"] = f"{without:.1f} s"
    assert with_policy < 60, f"out-of-service took {with_policy:.1f} s"
    assert without > 2 * with_policy, (without, with_policy)


def stop_workload_anywhere(name: str) -> None:
    """Deletes the workload; pods left on a powered-off node are force-deleted."""
    kubectl("delete", "deployment,pdb", name, "-n", APP_NS, "--ignore-not-found", "--wait=false", timeout=60)
    for p in app_pods(name):
        kubectl("delete", "pod", p["metadata"]["name"], "-n", APP_NS, "--force", "--grace-period=0", check=False)
    wait_until(f"{name}'s pods gone", lambda: not app_pods(name), 90, 0.5)


# ---------------------------------------------------------------- 4: the leader's node dies


def test_4_the_leaders_node_dies(several_nodes):
    holder = wait_until("a leader", k8s.lease_holder, 60)
    pods = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in k8s.live_operator_pods()}
    assert holder in pods, (holder, pods)
    leader_node = pods[holder]
    others = {p: n for p, n in pods.items() if p != holder}
    assert others and all(n != leader_node for n in others.values()), f"both replicas on {leader_node}: {pods}"
    condition = "E2ELeaderFault"
    k8s.apply(k8s.matcher_policy("e2e-leader-node", KEY + "-leader", condition))
    live = [n for n in nodes() if n != leader_node]
    try:
        stopped = time.monotonic()
        cluster_script("node-stop", k8s.ENV["CLUSTER_DIR"], leader_node)
        new = wait_until(
            "another replica holds the Lease",
            lambda: (h := k8s.lease_holder()) and h != holder and h in others and h,
            45,
            0.2,
        )
        took = time.monotonic() - stopped
        MEASUREMENTS["leader's node powered off: another replica leads after"] = f"{took:.1f} s"
        lease = k8s.get("lease", k8s.FULLNAME, k8s.NAMESPACE)["spec"]
        assert took <= lease["leaseDurationSeconds"] + 5, f"takeover took {took:.1f} s ({new})"
        k8s.set_condition(condition, "True", live[0])
        wait_until(
            f"{live[0]} tainted by the new leader",
            lambda: any(t["key"] == KEY + "-leader" for t in k8s.taints(k8s.get("node", live[0]))),
            30,
            0.2,
        )
    finally:
        k8s.set_condition(condition, "False", live[0])
        k8s.delete_policies("e2e-leader-node")
        restore(leader_node)
        k8s.wait_rollout(240)
