"""taint-operator on a real one-node cluster: installed with Helm, run by a kubelet.

The tests run in file order on one release (conftest.py): defaults first, then
the webhook turned on, an upgrade, and the uninstall last. Each test creates
its own policies (taint keys under e2e.nodetaint.io/) and namespaces and
deletes them at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import helm_python as helm
import pytest
import yaml

import k8s
import prometheus as prom
from conftest import HELM_TIMEOUT, MEASUREMENTS
from k8s import BOOTSTRAPPED, MANAGED, TEST_TAINT_PREFIX, kubectl, wait_until

WEBHOOK_VALUES = {"webhook": {"enabled": True, "failurePolicy": "Fail"}}
CRD_NAME = "taintpolicies.nodetaint.io"


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def delete_namespace(name: str) -> None:
    kubectl("delete", "namespace", name, "--ignore-not-found", "--timeout=90s", timeout=120, check=False)


def busybox_container(name: str, script: str, **extra) -> dict:
    return {
        "name": name,
        "image": k8s.ENV["BUSYBOX_IMAGE"],
        "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", script],
        **extra,
    }


# Stays up until TERM; with STOP_DELAY it takes that long to stop (a slow agent).
LOOP = "trap 'sleep ${STOP_DELAY:-0}; exit 0' TERM; while true; do sleep 1; done"


# --------------------------------------------------------------------------- 1


def test_1_operator_pods_run_ready_with_one_leader(release):
    deadline = release["started"] + 60

    def both_ready():
        ps = k8s.live_operator_pods()
        return ps if len(ps) == 2 and all(k8s.pod_ready(p) for p in ps) else None

    pods = wait_until("both operator replicas Running and Ready", both_ready, max(1, deadline - time.monotonic()))
    MEASUREMENTS["helm install to both replicas Ready"] = f"{time.monotonic() - release['started']:.1f} s"
    names = {p["metadata"]["name"] for p in pods}
    assert all(p["status"]["phase"] == "Running" for p in pods)

    holder = wait_until("a Lease holder", k8s.lease_holder, 30)
    assert holder in names, f"Lease held by {holder}, not one of {names}"
    # exactly one replica says it leads
    leaders = [n for n in names if "became leader" in kubectl("logs", "-n", k8s.NAMESPACE, n).stdout]
    assert leaders == [holder], f"replicas that logged 'became leader': {leaders}; Lease holder {holder}"

    # the kubelet's probes pass: Ready (readiness), no restart and no failed liveness
    # probe (a readiness probe may fail while the caches sync at start-up)
    for p in pods:
        st = p["status"]["containerStatuses"][0]
        assert st["ready"] and st["restartCount"] == 0, st
    events = k8s.items("events", "-n", k8s.NAMESPACE, "--field-selector", "reason=Unhealthy")
    failed = [e["message"] for e in events if e["involvedObject"]["name"] in names]
    assert not [m for m in failed if "Liveness" in m], failed
    MEASUREMENTS["readiness probe failures at start-up"] = str(len(failed))

    # non-root with a read-only root filesystem, as the runtime really started it
    for p in pods:
        pid = k8s.container_pid(p)
        status = open(f"/proc/{pid}/status").read()
        uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
        assert set(uids) == {"65532"}, f"{p['metadata']['name']}: Uid {uids}"
        root = next(
            line.split() for line in open(f"/proc/{pid}/mountinfo").read().splitlines() if line.split()[4] == "/"
        )
        assert "ro" in root[5].split(","), f"{p['metadata']['name']}: root mounted {root[5]}"

    time.sleep(5)
    MEASUREMENTS["operator memory, idle after install"] = k8s.operator_memory()


def test_1a_the_operator_runs_the_image_pushed_to_the_registry(release):
    """Installed from oci://: the Deployment names the pushed image by digest, and the
    node's containerd pulled exactly that digest from the registry (it was never
    imported: the node holds it under the registry's name only)."""
    published = release["published"]
    want = f"{published['imageRepository']}@{published['imageDigest']}"
    deployment = k8s.get("deployment", k8s.FULLNAME, k8s.NAMESPACE)
    images = [c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    assert images == [want], images
    for p in k8s.live_operator_pods():
        status = p["status"]["containerStatuses"][0]
        assert status["imageID"].endswith("@" + published["imageDigest"]), status
    on_node = k8s.ctr("images", "ls", "-q").split()
    ours = [ref for ref in on_node if ref.rsplit("/", 1)[-1].startswith(("taint-operator:", "taint-operator@"))]
    assert ours and all(ref.startswith(published["imageRepository"]) for ref in ours), ours
    pulls = k8s.items("events", "-n", k8s.NAMESPACE, "--field-selector", "reason=Pulled")
    assert any(want in e["message"] or published["imageDigest"] in e["message"] for e in pulls), [e["message"] for e in pulls]


# --------------------------------------------------------------------------- 1b-1d: the policy webhook

POLICY_WEBHOOK = f"{k8s.FULLNAME}-policies"
POLICY_WEBHOOK_NAME = "taintpolicies.nodetaint.io"
ADMIT_KEY = TEST_TAINT_PREFIX + "admission"
ADMIT_NOEXEC_KEY = TEST_TAINT_PREFIX + "admission-noexec"
# kubectl dry runs of a good policy; then bursts of dry runs sent at once until both replicas answered.
DRY_RUNS, BURST, MAX_BURSTS = 6, 8, 10


def metrics_of(pod: dict) -> str:
    url = f"http://{pod['status']['podIP']}:8080/metrics"
    done = subprocess.run(["curl", "-sf", "--max-time", "5", url], capture_output=True, text=True)
    assert done.returncode == 0, f"{url}: curl exited {done.returncode}: {done.stderr}"
    return done.stdout


def samples(body: str, metric: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of `metric` in a /metrics body."""
    out = []
    for line in body.splitlines():
        if not line.startswith(metric + "{") and not line.startswith(metric + " "):
            continue
        head, _, value = line.rpartition(" ")
        labels = {}
        if "{" in head:
            for pair in head[head.index("{") + 1 : head.rindex("}")].split(","):
                if pair:
                    k, _, v = pair.partition("=")
                    labels[k] = v.strip('"')
        out.append((labels, float(value)))
    return out


def policy_reviews(pod: dict, **want: str) -> int:
    """taint_operator_webhook_requests_total of the taintpolicy webhook in this replica,
    summed over the samples whose labels match `want`."""
    return int(
        sum(
            v
            for labels, v in samples(metrics_of(pod), "taint_operator_webhook_requests_total")
            if labels.get("webhook") == "taintpolicy" and all(labels.get(k) == x for k, x in want.items())
        )
    )


def warnings_of(done: subprocess.CompletedProcess) -> list[str]:
    return [line[len("Warning: ") :] for line in done.stderr.splitlines() if line.startswith("Warning: ")]


@pytest.fixture(scope="class")
def policy_webhook(release):
    """The default install's ValidatingWebhookConfiguration, once its Service answers."""
    vwc = k8s.get("validatingwebhookconfiguration", POLICY_WEBHOOK)
    assert vwc, f"no ValidatingWebhookConfiguration {POLICY_WEBHOOK} after the default install"
    wait_until("the webhook Service answers", lambda: service_answers("webhook", "/validate-taintpolicy"), 30)
    pods = k8s.live_operator_pods()
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    return {"vwc": vwc, "pods": sorted(pods, key=lambda p: p["metadata"]["name"])}


class TestPolicyWebhook:
    """The validating webhook for TaintPolicy that the default install registers,
    called by the API server through the Service (both replicas behind it)."""

    def test_1b_a_policy_whose_regex_does_not_compile_is_refused_and_not_stored(self, release, policy_webhook):
        hooks = policy_webhook["vwc"]["webhooks"]
        assert [h["name"] for h in hooks] == [POLICY_WEBHOOK_NAME], hooks
        hook = hooks[0]
        assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 5, hook
        assert hook["sideEffects"] == "None", hook
        assert hook["rules"] == [
            {
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": ["nodetaint.io"],
                "apiVersions": ["v1alpha1"],
                "resources": ["taintpolicies"],
                "scope": "Cluster",
            }
        ], hook["rules"]
        svc = hook["clientConfig"]["service"]
        assert svc == {"name": k8s.FULLNAME, "namespace": k8s.NAMESPACE, "path": "/validate-taintpolicy", "port": 443}, svc
        secret = k8s.get("secret", f"{k8s.FULLNAME}-webhook-tls", k8s.NAMESPACE)
        assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"], "caBundle is not the chart's CA"
        # the node webhook stays off by default
        assert not k8s.get("mutatingwebhookconfiguration", k8s.FULLNAME)
        for p in policy_webhook["pods"]:
            args = p["spec"]["containers"][0]["args"]
            assert "--registered-webhooks=taintpolicy" in args, args

        pods = policy_webhook["pods"]
        refused_before = sum(policy_reviews(p, outcome="refused") for p in pods)
        matcher = k8s.matcher_policy("e2e-admit-kaput", ADMIT_KEY, "E2EAdmission")
        matcher["spec"]["matchers"][0]["conditions"][0]["status"] = "Kaput("
        readiness = k8s.policy(
            "e2e-admit-kaput-ready",
            "readiness.k8s.io/e2e-admission",
            readiness={"conditions": [{"type": "E2EAdmissionReady", "status": "Kaput("}]},
        )
        cases = [(matcher, "spec.matchers[0].conditions[0].status"), (readiness, "spec.readiness.conditions[0].status")]
        try:
            for pol, field in cases:
                name = pol["metadata"]["name"]
                done = kubectl("apply", "-f", "-", stdin=json.dumps(pol), check=False)
                said = done.stdout + done.stderr
                assert done.returncode != 0, f"{name} was accepted:\n{said}"
                want = (
                    f'Error from server: error when creating "STDIN": admission webhook "{POLICY_WEBHOOK_NAME}"'
                    f' denied the request: {field}: invalid regex "Kaput(": '
                )
                assert want in done.stderr, f"expected {want!r} in:\n{said}"
                assert not k8s.get("taintpolicy", name), f"{name} was stored although refused"
                MEASUREMENTS[f"policy webhook: refused apply ({field})"] = done.stderr.strip()
            refused = sum(policy_reviews(p, outcome="refused") for p in pods) - refused_before
            assert refused == 2, f"refused reviews counted by the replicas: {refused}, want 2"
        finally:
            k8s.delete_policies(*(pol["metadata"]["name"] for pol, _ in cases))

    def test_1c_a_server_dry_run_shows_the_impact_from_both_replicas(self, release, policy_webhook):
        """kubectl's dry runs, one after another, all reach one replica: the API server
        keeps its HTTP/1.1 connection to the webhook Service open and reuses it, so
        the Service picks a replica per connection, not per request. Dry runs sent at
        the same moment make it open more connections, which the Service spreads:
        so both replicas answer, and every answer must carry the impact warning (the
        standby's caches have synced too)."""
        name = "e2e-admit-impact"
        node = k8s.node_name()
        pods = policy_webhook["pods"]
        names = [p["metadata"]["name"] for p in pods]
        pol = k8s.matcher_policy(name, ADMIT_KEY, "E2EAdmission")
        pol["spec"]["nodeSelector"] = {"matchLabels": {"kubernetes.io/hostname": node}}
        want = f"impact: would taint 1 of 1 selected nodes now ({node})"

        def reviews() -> dict[str, int]:
            return {p["metadata"]["name"]: policy_reviews(p, operation="CREATE") for p in pods}

        try:
            k8s.set_condition("E2EAdmission", "True")
            for p in pods:
                registered = samples(metrics_of(p), "taint_operator_webhook_registered")
                assert ({"webhook": "taintpolicy"}, 1.0) in registered, f"{p['metadata']['name']}: {registered}"
                assert ({"webhook": "node"}, 1.0) not in registered, f"{p['metadata']['name']}: {registered}"
            leader = k8s.lease_holder()

            # a) kubectl, one dry run after another: each answered (by the one replica
            # on the API server's kept connection) with the impact warning
            by_kubectl = dict.fromkeys(names, 0)
            took = []
            for i in range(DRY_RUNS):
                before = reviews()
                t0 = time.monotonic()
                done = kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(pol), check=False)
                took.append(time.monotonic() - t0)
                after = reviews()
                by = [n for n in names if after[n] != before[n]]
                assert len(by) == 1 and after[by[0]] == before[by[0]] + 1, f"dry run {i}: reviews before {before}, after {after}"
                by_kubectl[by[0]] += 1
                assert done.returncode == 0, f"dry run {i} ({by[0]} answered): {done.stdout}{done.stderr}"
                assert f"taintpolicy.nodetaint.io/{name} created (server dry run)" in done.stdout, done.stdout
                assert warnings_of(done) == [want], f"dry run {i}, answered by {by[0]}: {done.stderr!r}"

            # b) dry runs sent at the same moment (what kubectl sends: a POST with
            # dryRun=All), a burst at a time, until both replicas have answered
            path = "/apis/nodetaint.io/v1alpha1/taintpolicies?dryRun=All&fieldManager=e2e"
            by_burst = dict.fromkeys(names, 0)
            bursts = 0
            while not all(by_kubectl[n] + by_burst[n] for n in names):
                assert bursts < MAX_BURSTS, (
                    f"one replica answered every dry run: kubectl {by_kubectl}, {bursts} bursts of {BURST} {by_burst}"
                )
                before = reviews()
                conns = [k8s.api_connection() for _ in range(BURST)]
                gate = threading.Barrier(BURST)
                answers: list = [None] * BURST

                def send(j: int) -> None:
                    gate.wait()
                    try:
                        answers[j] = k8s.api_send(conns[j], "POST", path, pol)
                    except Exception as e:  # noqa: BLE001 - reported below
                        answers[j] = e

                threads = [threading.Thread(target=send, args=(j,)) for j in range(BURST)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
                for c in conns:
                    c.close()
                bursts += 1
                for j, a in enumerate(answers):
                    assert isinstance(a, tuple) and a[0] == 201, f"burst {bursts}, dry run {j}: {a!r}"
                    assert [k8s.warning_text(w) for w in a[1]] == [want], f"burst {bursts}, dry run {j}: warnings {a[1]}"
                after = reviews()
                assert sum(after.values()) - sum(before.values()) == BURST, f"burst {bursts}: reviews {before} -> {after}"
                for n in names:
                    by_burst[n] += after[n] - before[n]
            assert not k8s.get("taintpolicy", name), "a dry run stored the policy"
            assert not k8s.has_taint(ADMIT_KEY), "a dry run tainted the node"

            role = {n: "leader" if n == leader else "standby" for n in names}
            MEASUREMENTS["policy webhook: kubectl dry runs (one after another) answered by"] = ", ".join(
                f"{role[n]} {by_kubectl[n]}" for n in names
            )
            MEASUREMENTS["policy webhook: concurrent dry runs answered by"] = (
                ", ".join(f"{role[n]} {by_burst[n]}" for n in names) + f" ({bursts} bursts of {BURST})"
            )
            times = sorted(took)
            MEASUREMENTS["policy webhook: kubectl apply --dry-run=server round trip"] = (
                f"min {times[0]:.2f} s, median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s ({len(times)} runs)"
            )
            own = []
            for p in pods:
                body = metrics_of(p)
                total = sum(v for lab, v in samples(body, "taint_operator_webhook_duration_seconds_sum") if lab.get("webhook") == "taintpolicy")
                count = sum(v for lab, v in samples(body, "taint_operator_webhook_duration_seconds_count") if lab.get("webhook") == "taintpolicy")
                n = p["metadata"]["name"]
                assert count >= by_kubectl[n] + by_burst[n], (n, count)
                own.append(f"{role[n]} {1000 * total / count:.2f} ms mean of {count:.0f}")
            MEASUREMENTS["policy webhook: review answered in (the replica's own histogram)"] = "; ".join(own)
        finally:
            k8s.set_condition("E2EAdmission", "False")
            k8s.delete_policies(name)

    def test_1d_a_noexecute_policy_without_eviction_is_stored_with_a_warning(self, release, policy_webhook):
        name = "e2e-admit-noexec"
        node = k8s.node_name()
        pol = k8s.matcher_policy(name, ADMIT_NOEXEC_KEY, "E2EAdmissionNoExec", effect="NoExecute")
        pol["spec"]["nodeSelector"] = {"matchLabels": {"kubernetes.io/hostname": node}}
        noexec = (
            f"spec.taints[0] ({ADMIT_NOEXEC_KEY}:NoExecute) has no spec.eviction: every pod that does not"
            " tolerate it is deleted at once, whatever its PodDisruptionBudget says; add spec.eviction to drain first"
        )
        impact = "impact: would taint 0 of 1 selected nodes now"
        try:
            k8s.set_condition("E2EAdmissionNoExec", "False")  # never True: the taint would evict pods
            done = kubectl("apply", "-f", "-", stdin=json.dumps(pol))
            assert f"taintpolicy.nodetaint.io/{name} created" in done.stdout, done.stdout
            assert warnings_of(done) == [impact, noexec], done.stderr
            stored = k8s.get("taintpolicy", name)
            assert stored and stored["spec"]["taints"] == [{"key": ADMIT_NOEXEC_KEY, "effect": "NoExecute"}], stored

            # an UPDATE goes through the webhook too: with spec.eviction the warning goes ...
            pol["spec"]["eviction"] = {}
            done = kubectl("apply", "-f", "-", stdin=json.dumps(pol))
            assert f"taintpolicy.nodetaint.io/{name} configured" in done.stdout, done.stdout
            assert warnings_of(done) == [impact], done.stderr
            # ... and an update that breaks a regex is refused, the stored policy kept
            bad = json.loads(json.dumps(pol))
            bad["spec"]["matchers"][0]["conditions"][0]["status"] = "Kaput("
            done = kubectl("apply", "-f", "-", stdin=json.dumps(bad), check=False)
            assert done.returncode != 0 and (
                f'admission webhook "{POLICY_WEBHOOK_NAME}" denied the request:'
                ' spec.matchers[0].conditions[0].status: invalid regex "Kaput("'
            ) in done.stderr, done.stdout + done.stderr
            stored = k8s.get("taintpolicy", name)
            assert stored["spec"]["matchers"][0]["conditions"][0]["status"] == "True", stored["spec"]
            assert stored["spec"].get("eviction") == {}, stored["spec"]
            # the operator took it: observed, Ready, nothing tainted (the condition is not True)
            wait_until(
                "policy observed",
                lambda: (k8s.get("taintpolicy", name) or {}).get("status", {}).get("observedGeneration") == 2,
                15,
            )
            assert not k8s.has_taint(ADMIT_NOEXEC_KEY), k8s.taints()
        finally:
            k8s.delete_policies(name)
        assert not k8s.get("taintpolicy", name)
        assert not k8s.has_taint(ADMIT_NOEXEC_KEY)


# --------------------------------------------------------------------------- 1e, 1f: where the pods may run


def test_1e_operator_pods_pass_pod_security_restricted(release):
    """The namespace enforces Pod Security "restricted" (conftest labels it before
    `helm install`), so the replicas exist at all only because their pods pass it.
    The same level refuses a privileged pod there: the label is enforced, not
    decoration."""
    ns = k8s.get("namespace", k8s.NAMESPACE)
    assert ns["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") == "restricted", ns["metadata"]
    pods = k8s.live_operator_pods()
    assert len(pods) == 2 and all(k8s.pod_ready(p) for p in pods), [p["metadata"]["name"] for p in pods]

    template = k8s.get("deployment", k8s.FULLNAME, k8s.NAMESPACE)["spec"]["template"]
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "e2e-psa-probe", "namespace": k8s.NAMESPACE, "labels": {"e2e": "psa"}},
        "spec": template["spec"],
    }
    done = kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe), check=False)
    assert done.returncode == 0, f"the chart's pod was refused:\n{done.stderr}"
    assert "PodSecurity" not in done.stderr, done.stderr  # warn=restricted would say so

    privileged = json.loads(json.dumps(probe))
    privileged["metadata"]["name"] = "e2e-psa-privileged"
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    done = kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(privileged), check=False)
    assert done.returncode != 0 and 'violates PodSecurity "restricted' in done.stderr, done.stderr


def dispatched_at(flow_schema: str) -> dict[str, float]:
    """The API server's count of requests APF dispatched through `flow_schema`, per
    priority level, from its /metrics."""
    text = kubectl("get", "--raw", "/metrics").stdout
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_flowcontrol_dispatched_requests_total{"):
            continue
        labels, value = line.rsplit(" ", 1)
        if f'flow_schema="{flow_schema}"' not in labels:
            continue
        level = labels.split('priority_level="', 1)[1].split('"', 1)[0]
        counts[level] = counts.get(level, 0.0) + float(value)
    return counts


def test_1g_the_operator_is_served_at_the_chart_priority_level(release):
    """The chart's FlowSchemas (apiPriority) match the operator's ServiceAccount: the
    API server says neither is dangling; the operator's requests are dispatched at
    workload-high rather than falling into global-default, whose seats it would share
    with every other client, and its Lease renewals at leader-election, where they
    never wait behind its own node patches."""
    values = yaml.safe_load(open(os.path.join(k8s.CHART, "values.yaml")))
    level = values["apiPriority"]["priorityLevel"]
    lease_level = values["apiPriority"]["leaderElectionPriorityLevel"]
    assert (level, lease_level) == ("workload-high", "leader-election"), values["apiPriority"]
    lease_schema = f"{k8s.FULLNAME}-leader-election"

    for name in (k8s.FULLNAME, lease_schema):
        fs = wait_until(f"the FlowSchema {name} with a status", lambda: (k8s.get("flowschema", name) or {}).get("status"), 30)
        dangling = [c for c in fs.get("conditions", []) if c["type"] == "Dangling"]
        assert dangling and dangling[0]["status"] == "False", fs

    # The operator's lists and watches went through the first schema when it started.
    assert dispatched_at(k8s.FULLNAME).get(level, 0.0) > 0, dispatched_at(k8s.FULLNAME)
    # Lease renewals (every 2 s) make the second schema's count grow while the test waits.
    before = dispatched_at(lease_schema).get(lease_level, 0.0)
    after = wait_until(
        f"requests dispatched through {lease_schema} at {lease_level}",
        lambda: (lambda n: n if n > before else None)(dispatched_at(lease_schema).get(lease_level, 0.0)),
        30,
        interval=1,
    )
    for name, wanted in ((k8s.FULLNAME, level), (lease_schema, lease_level)):
        others = {lv: n for lv, n in dispatched_at(name).items() if lv != wanted}
        assert not others, f"requests through {name} at other levels: {others}"
    MEASUREMENTS[f"operator requests dispatched at {level}"] = f"{dispatched_at(k8s.FULLNAME).get(level, 0.0):.0f}"
    MEASUREMENTS[f"lease requests dispatched at {lease_level}"] = f"{after:.0f}"


UNHEALTHY_NODE = "e2e-unhealthy-node"
UNHEALTHY_NS = "e2e-unhealthy"


def test_1f_a_replica_on_a_not_ready_node_is_evicted_after_the_chart_tolerations(release):
    """The chart tolerates every NoExecute taint, but node.kubernetes.io/not-ready
    and unreachable for 60 s only (unhealthyNodeTolerationSeconds, listed first:
    the taint eviction controller applies the first toleration matching a taint).
    A Node object with no kubelet behind it reports Ready=False once; the node
    lifecycle controller taints it not-ready:NoExecute (unreachable once its
    heartbeat is older than the grace period). Two pods are bound to it: one with
    the Deployment's own tolerations, one with the 0.1.0 chart's `operator: Exists`.
    The taint eviction controller deletes the first about 60 s after it is seen on
    the tainted node, and leaves the second."""
    stamp = k8s.now_rfc3339()
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": UNHEALTHY_NODE, "labels": {"e2e.nodetaint.io/fake": "yes"}}}
    tolerations = k8s.get("deployment", k8s.FULLNAME, k8s.NAMESPACE)["spec"]["template"]["spec"]["tolerations"]

    def bound_pod(name: str, tolerations: list) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": UNHEALTHY_NS},
            "spec": {
                "nodeName": UNHEALTHY_NODE,
                "tolerations": tolerations,
                "terminationGracePeriodSeconds": 0,
                "containers": [busybox_container("c", LOOP)],
            },
        }

    def no_execute_taint() -> dict | None:
        obj = k8s.get("node", UNHEALTHY_NODE) or {}
        return next(
            (t for t in k8s.taints(obj) if t["effect"] == "NoExecute" and t["key"].startswith("node.kubernetes.io/")),
            None,
        )

    try:
        kubectl("create", "-f", "-", stdin=json.dumps(node))
        kubectl(
            "patch", "node", UNHEALTHY_NODE, "--subresource=status", "--type=strategic", "-p",
            json.dumps({"status": {"conditions": [{
                "type": "Ready", "status": "False", "reason": "E2E", "message": "no kubelet here",
                "lastHeartbeatTime": stamp, "lastTransitionTime": stamp,
            }]}}),
        )
        taint = wait_until("the node lifecycle controller's NoExecute taint", no_execute_taint, 60, 0.5)
        k8s.apply(namespace(UNHEALTHY_NS))
        # pods are admitted once kube-controller-manager has made the namespace's default ServiceAccount
        wait_until("the default ServiceAccount", lambda: k8s.get("serviceaccount", "default", UNHEALTHY_NS), 30)
        k8s.apply(bound_pod("chart", tolerations), bound_pod("forever", [{"operator": "Exists"}]))
        bound = time.monotonic()

        def deleted(name: str) -> bool:
            return bool((k8s.get("pod", name, UNHEALTHY_NS) or {"metadata": {"deletionTimestamp": "gone"}})["metadata"].get("deletionTimestamp"))

        wait_until("the pod with the chart's tolerations evicted", lambda: deleted("chart"), 100, 0.5)
        after = time.monotonic() - bound
        MEASUREMENTS["not-ready node: pod with the chart's tolerations evicted after"] = f"{after:.1f} s ({taint['key']})"
        assert 50 <= after <= 90, f"evicted {after:.1f} s after it was bound to the tainted node; tolerationSeconds is 60"
        time.sleep(10)
        assert not deleted("forever"), "the pod tolerating every taint forever was evicted too"
    finally:
        kubectl("delete", "pod", "--all", "-n", UNHEALTHY_NS, "--force", "--grace-period=0", "--ignore-not-found", check=False)
        kubectl("delete", "node", UNHEALTHY_NODE, "--ignore-not-found", "--wait=false", check=False)
        delete_namespace(UNHEALTHY_NS)


# --------------------------------------------------------------------------- 2

AGENT_NS = "e2e-agent"
AGENT_KEY = TEST_TAINT_PREFIX + "agent-not-ready"


def agent_daemonset(stamp: str = "1") -> dict:
    script = "sleep 10; touch /tmp/ready; " + LOOP
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": AGENT_NS},
        "spec": {
            "selector": {"matchLabels": {"app": "e2e-agent"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": "e2e-agent"}},
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "tolerations": [{"key": AGENT_KEY, "operator": "Exists"}],
                    # the image is FROM scratch: no /tmp of its own
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                    "containers": [
                        busybox_container(
                            "agent",
                            script,
                            env=[{"name": "STOP_DELAY", "value": "12"}, {"name": "STAMP", "value": stamp}],
                            volumeMounts=[{"name": "tmp", "mountPath": "/tmp"}],
                            readinessProbe={
                                "exec": {"command": ["/bin/sh", "-c", "test -f /tmp/ready"]},
                                "periodSeconds": 1,
                            },
                        )
                    ],
                },
            },
        },
    }


def workload() -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "workload", "namespace": AGENT_NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "e2e-workload"}},
            "template": {
                "metadata": {"labels": {"app": "e2e-workload"}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [busybox_container("work", LOOP)]},
            },
        },
    }


def agents() -> list[dict]:
    return k8s.pods(AGENT_NS, "app=e2e-agent")


def follow_agent(what: str, timeout: float, expect_taint_while_not_ready: bool = True) -> tuple[float, float]:
    """Polls node then agents until an agent is Ready and (if expected) the taint is gone.

    Asserts the taint is there whenever no agent is Ready (the node is read
    first, so an agent seen not Ready afterwards was not Ready then either).
    Returns (seconds from the first Ready agent seen to the taint seen gone, total)."""
    start = time.monotonic()
    t_ready = t_gone = None
    while time.monotonic() - start < timeout:
        tainted = k8s.has_taint(AGENT_KEY)
        ready = any(k8s.pod_ready(p) for p in agents())
        now = time.monotonic()
        if not ready and not tainted and expect_taint_while_not_ready:
            raise AssertionError(f"{what}: no agent Ready but the node lacks {AGENT_KEY}")
        if ready and t_ready is None:
            t_ready = now
        if ready and not tainted:
            t_gone = now
            return t_gone - t_ready, now - start
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout}s (agent Ready seen: {t_ready is not None})")


def test_2_readiness_of_a_daemonset_gates_the_node(release):
    name = "e2e-agent-ready"
    pol = k8s.policy(
        name,
        AGENT_KEY,
        readiness={
            "criticalPods": [{"name": "agent", "namespace": AGENT_NS, "selector": {"matchLabels": {"app": "e2e-agent"}}}]
        },
        mode="Continuous",
    )
    try:
        k8s.apply(namespace(AGENT_NS))
        wait_until("default ServiceAccount in " + AGENT_NS, lambda: k8s.get("serviceaccount", "default", AGENT_NS), 30)
        k8s.apply(pol)
        wait_until(f"{AGENT_KEY} on the node (no agent yet)", lambda: k8s.has_taint(AGENT_KEY), 10, 0.1)

        # A workload without the toleration stays Pending, and the scheduler says
        # why. Its 1.36 message says "untolerated taint(s)" without naming them,
        # so the node must carry no other taint for the message to be about ours.
        k8s.apply(workload())

        def pending_for_taint():
            for p in k8s.pods(AGENT_NS, "app=e2e-workload"):
                for c in p.get("status", {}).get("conditions") or []:
                    if c["type"] == "PodScheduled" and c["status"] == "False":
                        return c.get("message")
            return None

        message = wait_until("workload Pending", pending_for_taint, 30)
        assert "untolerated taint" in message, message
        assert {t["key"] for t in k8s.taints()} == {AGENT_KEY}, k8s.taints()
        assert all(p["status"]["phase"] == "Pending" for p in k8s.pods(AGENT_NS, "app=e2e-workload"))

        k8s.apply(agent_daemonset())
        lag, took = follow_agent("first agent", 60)
        assert lag <= 2.0, f"taint removed {lag:.2f}s after the agent turned Ready"
        assert took >= 9, f"agent Ready after {took:.1f}s; its probe needs ~10s, so this was not the new agent"
        # the same lag as the cluster saw it: the pod's Ready transition (1 s
        # resolution) to the operator's write (its log line)
        ready_at = max(
            k8s.parse_time(c["lastTransitionTime"])
            for p in agents()
            for c in p["status"]["conditions"]
            if c["type"] == "Ready"
        )
        removals = wait_until(
            "the removal in the operator's log",
            lambda: [t for t, _, w in release["logs"].writes(k8s.node_name()) if w.get("policy") == name and not w["added"]],
            5,
        )
        MEASUREMENTS["agent Ready to readiness taint removed"] = (
            f"{lag:.2f} s polled (every 0.1 s); {removals[0] - ready_at:.2f} s from the pod's Ready"
            " lastTransitionTime (whole seconds) to the operator's write"
        )

        def workload_running():
            return [p for p in k8s.pods(AGENT_NS, "app=e2e-workload") if p.get("status", {}).get("phase") == "Running"]

        wait_until("workload Running once the taint is gone", workload_running, 30)

        # kill the agent: in Continuous the taint returns until the new agent is Ready
        old = agents()[0]["metadata"]["name"]
        kubectl("delete", "pod", "-n", AGENT_NS, old, "--grace-period=1", "--wait=false")
        wait_until(f"{AGENT_KEY} back after the agent was deleted", lambda: k8s.has_taint(AGENT_KEY), 3, 0.1)
        lag, _ = follow_agent("agent after a kill", 60)
        assert lag <= 2.0, lag

        # a rolling update with a slow-stopping agent: the terminating one is not Ready
        k8s.apply(agent_daemonset(stamp="2"))

        def old_terminating():
            return [p for p in agents() if p["metadata"].get("deletionTimestamp")]

        wait_until("old agent terminating in the rolling update", old_terminating, 15, 0.1)
        wait_until(f"{AGENT_KEY} back while the old agent terminates", lambda: k8s.has_taint(AGENT_KEY), 2, 0.1)
        assert old_terminating(), "the old agent stopped before the check; raise STOP_DELAY"
        lag, took = follow_agent("agent after a rolling update", 90)
        assert lag <= 2.0, lag
        assert took >= 15, f"the rollout finished in {took:.1f}s; the old agent should have taken ~12s to stop"

        # BootstrapOnly: once ready, killing the agent never taints the node again
        kubectl("patch", "taintpolicy", name, "--type=merge", "-p", '{"spec":{"mode":"BootstrapOnly"}}')
        wait_until(
            "bootstrap completion recorded",
            lambda: name in json.loads(k8s.annotations().get(BOOTSTRAPPED, "{}")),
            15,
        )
        old = agents()[0]["metadata"]["name"]
        kubectl("delete", "pod", "-n", AGENT_NS, old, "--grace-period=1", "--wait=false")
        start = time.monotonic()
        seen_new_ready = None
        while time.monotonic() - start < 40:
            assert not k8s.has_taint(AGENT_KEY), "BootstrapOnly tainted the node again after the agent was killed"
            fresh = [p for p in agents() if p["metadata"]["name"] != old and k8s.pod_ready(p)]
            if fresh and seen_new_ready is None:
                seen_new_ready = time.monotonic()
            if seen_new_ready and time.monotonic() - seen_new_ready > 3:
                break
            time.sleep(0.2)
        assert seen_new_ready, "the replacement agent never turned Ready"
    finally:
        k8s.delete_policies(name)
        delete_namespace(AGENT_NS)
    assert not k8s.has_taint(AGENT_KEY)
    assert name not in json.loads(k8s.annotations().get(BOOTSTRAPPED, "{}"))


# --------------------------------------------------------------------------- 3

EVICT_NS = "e2e-evict"
BROKEN_KEY = TEST_TAINT_PREFIX + "broken"
LIFECYCLE = {"node.kubernetes.io/unschedulable", "node.kubernetes.io/network-unavailable"}


def test_3_noexecute_evicts_ordinary_pods_not_the_operator(release):
    name = "e2e-noexecute"
    node = k8s.node_name()
    try:
        k8s.apply(namespace(EVICT_NS))
        wait_until("default ServiceAccount", lambda: k8s.get("serviceaccount", "default", EVICT_NS), 30)
        victim = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "victim", "namespace": EVICT_NS},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [busybox_container("victim", LOOP)]},
        }
        k8s.apply(victim)
        wait_until("victim Running", lambda: k8s.pod_ready(k8s.get("pod", "victim", EVICT_NS) or {"metadata": {}}), 30)
        before = {p["metadata"]["uid"]: p["status"]["containerStatuses"][0]["restartCount"] for p in k8s.operator_pods()}

        k8s.apply(k8s.matcher_policy(name, BROKEN_KEY, "E2EBroken", effect="NoExecute"))
        k8s.set_condition("E2EBroken", "True")
        wait_until(f"{BROKEN_KEY}:NoExecute on the node", lambda: k8s.has_taint(BROKEN_KEY), 5, 0.1)
        taint = next(t for t in k8s.taints() if t["key"] == BROKEN_KEY)
        assert taint["effect"] == "NoExecute" and taint.get("timeAdded"), taint
        wait_until("victim evicted by the taint", lambda: not k8s.get("pod", "victim", EVICT_NS), 60, 0.5)
        evictions = k8s.items("events", "-n", EVICT_NS, "--field-selector", "involvedObject.name=victim")
        assert any(e["reason"] == "TaintManagerEviction" for e in evictions), [e["reason"] for e in evictions]

        # the node lifecycle controller writes its own taints on the node meanwhile
        kubectl("cordon", node)
        k8s.set_condition("NetworkUnavailable", "True")
        wait_until("lifecycle taints and ours together", lambda: LIFECYCLE | {BROKEN_KEY} <= {t["key"] for t in k8s.taints()}, 30)
        for status in ("False", "True", "False", "True"):
            k8s.set_condition("E2EBroken", status)
            want = status == "True"
            wait_until(f"{BROKEN_KEY} present={want}", lambda: k8s.has_taint(BROKEN_KEY) == want, 5, 0.1)
            keys = {t["key"] for t in k8s.taints()}
            assert LIFECYCLE <= keys, f"a lifecycle taint was lost: {keys}"
        # both writers at once: the controller lifts its taints while the operator lifts ours
        kubectl("uncordon", node)
        k8s.set_condition("NetworkUnavailable", "False")
        k8s.set_condition("E2EBroken", "False")
        wait_until(
            "every taint lifted by its own writer",
            lambda: not ({t["key"] for t in k8s.taints()} & (LIFECYCLE | {BROKEN_KEY})),
            30,
        )
        kubectl("cordon", node)
        k8s.set_condition("E2EBroken", "True")
        wait_until(
            "both added concurrently",
            lambda: {"node.kubernetes.io/unschedulable", BROKEN_KEY} <= {t["key"] for t in k8s.taints()},
            30,
        )
        kubectl("uncordon", node)

        # the operator's pods tolerated the NoExecute taint: same pods, no restart, Ready
        after = {p["metadata"]["uid"]: p for p in k8s.operator_pods()}
        assert set(after) == set(before), "operator pods were replaced while the NoExecute taint was on"
        for uid, p in after.items():
            assert k8s.pod_ready(p) and p["status"]["containerStatuses"][0]["restartCount"] == before[uid], p["status"]
        # and keep working: clearing the condition lifts the taint
        k8s.set_condition("E2EBroken", "False")
        wait_until(f"{BROKEN_KEY} lifted", lambda: not k8s.has_taint(BROKEN_KEY), 5, 0.1)
    finally:
        kubectl("uncordon", node, check=False)
        k8s.set_condition("NetworkUnavailable", "False")
        k8s.set_condition("E2EBroken", "False")
        k8s.delete_policies(name)
        delete_namespace(EVICT_NS)


# --------------------------------------------------------------------------- 3b, 3c: drains

DRAIN_NS = "e2e-drain"
DRAIN_KEY = TEST_TAINT_PREFIX + "drain"
DRAIN_TIMEOUT_KEY = TEST_TAINT_PREFIX + "drain-timeout"
WEB = "app=e2e-drain-web"
NODE_AGENT = "app=e2e-drain-agent"
PDB = "web-pdb"


def drain_workloads_manifests() -> list[dict]:
    """A DaemonSet tolerating everything and a one-replica Deployment tolerating nothing."""

    def spec(labels: dict, **extra) -> dict:
        return {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [busybox_container("main", LOOP)], **extra},
            },
        }

    agent = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "node-agent", "namespace": DRAIN_NS},
        "spec": spec({"app": "e2e-drain-agent"}, tolerations=[{"operator": "Exists"}]),
    }
    web = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": DRAIN_NS},
        "spec": {"replicas": 1, **spec({"app": "e2e-drain-web"})},
    }
    return [agent, web]


def drain_pdb(min_available: int) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": PDB, "namespace": DRAIN_NS},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "e2e-drain-web"}}},
    }


def drain_policy(name: str, key: str, condition: str, eviction: dict) -> dict:
    pol = k8s.matcher_policy(name, key, condition, effect="NoExecute")
    pol["spec"]["eviction"] = eviction
    return pol


def running(selector: str) -> list[dict]:
    """Pods of DRAIN_NS Running and Ready, not terminating."""
    return [p for p in k8s.pods(DRAIN_NS, selector) if p["status"].get("phase") == "Running" and k8s.pod_ready(p)]


def one_running(selector: str, timeout: float = 60) -> dict:
    return wait_until(f"one pod {selector} Running and Ready", lambda: (lambda ps: ps[0] if len(ps) == 1 else None)(running(selector)), timeout, 0.5)


def pdb_blocks() -> dict | None:
    """The budget as the disruption controller sees it: one healthy pod, no disruption allowed."""
    pdb = k8s.get("poddisruptionbudget", PDB, DRAIN_NS) or {}
    st = pdb.get("status") or {}
    seen = st.get("observedGeneration") == pdb.get("metadata", {}).get("generation")
    return pdb if seen and st.get("currentHealthy") == 1 and st.get("disruptionsAllowed") == 0 else None


def effects(key: str) -> list[str]:
    return sorted(t["effect"] for t in k8s.taints() if t["key"] == key)


def drain_started(policy: str) -> float | None:
    at = json.loads(k8s.annotations().get(k8s.DRAIN_STARTED, "{}")).get(policy)
    return k8s.parse_time(at) if at else None


def node_events(reason: str, policy: str, since: float) -> list[dict]:
    """events.k8s.io events on the node with this reason whose note names the
    policy, last seen at `since` or later (a cluster kept up between rounds keeps
    older ones)."""
    out = []
    for e in k8s.items("events.v1.events.k8s.io", "-n", "default"):
        regarding = e.get("regarding") or {}
        note = e.get("note") or ""
        stamps = (e.get("eventTime"), (e.get("series") or {}).get("lastObservedTime"), e.get("deprecatedLastTimestamp"))
        seen = max((k8s.parse_time(t) for t in stamps if t), default=0.0)
        if (
            e.get("reason") == reason
            and regarding.get("kind") == "Node"
            and regarding.get("name") == k8s.node_name()
            and (note.startswith(f"policy {policy}:") or note.startswith(f"policy {policy} "))
            and seen >= since - 1
        ):
            out.append(e)
    return out


def drain_status(name: str) -> tuple:
    st = (k8s.get("taintpolicy", name) or {}).get("status") or {}
    ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
    return st.get("drainingNodes", 0), ready.get("status"), ready.get("reason")


def evictions_logged(logs: k8s.LogFollower, policy: str) -> list[str]:
    """The pods the operator says it evicted for the policy's drain (its log lines)."""
    return [
        line.get("pod")
        for lines in list(logs.lines.values())
        for line in list(lines)
        if line.get("message") == "evicted for the drain" and line.get("policy") == policy
    ]


def eviction_counts(policy: str) -> dict[str, int]:
    """taint_operator_evictions_total of the policy by outcome, from the leader's /metrics."""
    pod = k8s.get("pod", k8s.lease_holder(), k8s.NAMESPACE)
    url = f"http://{pod['status']['podIP']}:8080/metrics"
    body = subprocess.run(["curl", "-sf", "--max-time", "5", url], capture_output=True, text=True).stdout
    counts: dict[str, int] = {}
    for line in body.splitlines():
        if line.startswith("taint_operator_evictions_total{") and f'policy="{policy}"' in line:
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = int(float(line.rsplit(" ", 1)[1]))
    return counts


def gone_or_terminating(pod: dict) -> bool:
    now = k8s.get("pod", pod["metadata"]["name"], DRAIN_NS)
    return not now or now["metadata"]["uid"] != pod["metadata"]["uid"] or bool(now["metadata"].get("deletionTimestamp"))


def same_pod_untouched(before: dict) -> dict:
    """The same pod (uid), Running, Ready, not terminating, no restart."""
    now = k8s.get("pod", before["metadata"]["name"], DRAIN_NS)
    assert now and now["metadata"]["uid"] == before["metadata"]["uid"], f"pod {before['metadata']['name']} was replaced"
    assert not now["metadata"].get("deletionTimestamp"), f"pod {before['metadata']['name']} is terminating"
    assert now["status"].get("phase") == "Running" and k8s.pod_ready(now), now["status"]
    restarts = now["status"]["containerStatuses"][0]["restartCount"]
    assert restarts == before["status"]["containerStatuses"][0]["restartCount"], f"restarted: {restarts}"
    return now


def assert_policy_left_nothing(name: str, key: str) -> None:
    obj = k8s.node()
    assert not [t for t in k8s.taints(obj) if t["key"] == key], k8s.taints(obj)
    notes = k8s.annotations(obj)
    managed = json.loads(notes.get(MANAGED, "{}"))
    assert name not in managed.values(), f"{MANAGED} still names {name}: {managed}"
    assert name not in json.loads(notes.get(k8s.DRAIN_STARTED, "{}")), notes.get(k8s.DRAIN_STARTED)


@pytest.fixture(scope="class")
def drain_workloads(release):
    """The DaemonSet and the Deployment of TestDrains, for the class's tests; all
    gone after its last test."""
    try:
        k8s.apply(namespace(DRAIN_NS))
        wait_until("default ServiceAccount in " + DRAIN_NS, lambda: k8s.get("serviceaccount", "default", DRAIN_NS), 30)
        k8s.apply(*drain_workloads_manifests())
        yield
    finally:
        for c in ("E2EDrain", "E2EDrainTimeout"):
            k8s.set_condition(c, "False")
        k8s.delete_policies("e2e-drain-budget", "e2e-drain-timeout")
        delete_namespace(DRAIN_NS)


class TestDrains:
    """spec.eviction on the one node: a PodDisruptionBudget that allows no disruption
    holds the NoExecute taint back as NoSchedule; relaxing it (or drainTimeout)
    lets it switch."""

    def test_3b_a_budget_holds_the_drain_until_relaxed(self, release, drain_workloads):
        name = "e2e-drain-budget"
        logs = release["logs"]
        since = time.time()
        try:
            k8s.apply(drain_pdb(1))
            web = one_running(WEB)
            agent = one_running(NODE_AGENT)
            wait_until(f"PodDisruptionBudget {PDB} allows no disruption", pdb_blocks, 30, 0.5)
            web_key = f"{DRAIN_NS}/{web['metadata']['name']}"

            # a) the node breaks: NoSchedule stand-in, the eviction blocked, reported, retried
            k8s.apply(drain_policy(name, DRAIN_KEY, "E2EDrain", {}))
            k8s.set_condition("E2EDrain", "True")
            broke = time.monotonic()
            wait_until(f"{DRAIN_KEY}:NoSchedule (the stand-in)", lambda: effects(DRAIN_KEY) == ["NoSchedule"], 5, 0.1)
            started = drain_started(name)
            assert started, f"no drain start of {name} in {k8s.DRAIN_STARTED}: {k8s.annotations()}"
            while time.monotonic() - broke < 12:
                assert effects(DRAIN_KEY) == ["NoSchedule"], f"{DRAIN_KEY} while the budget blocks: {effects(DRAIN_KEY)}"
                time.sleep(0.2)
            blocked = wait_until("an EvictionBlocked event", lambda: node_events("EvictionBlocked", name, since), 15, 0.5)
            assert len(blocked) == 1, [e["note"] for e in blocked]
            assert blocked[0]["type"] == "Warning", blocked[0]
            note = blocked[0]["note"]
            assert f"pod {web_key} " in note and f"PodDisruptionBudget {PDB}:" in note, note
            wait_until("a DrainStarted event", lambda: node_events("DrainStarted", name, since), 10, 0.5)
            same_pod_untouched(web)
            same_pod_untouched(agent)
            status = wait_until(
                "status drainingNodes 1, Ready False, reason Draining",
                lambda: (lambda s: s if s == (1, "False", "Draining") else None)(drain_status(name)),
                15,
                0.5,
            )
            assert effects(DRAIN_KEY) == ["NoSchedule"], effects(DRAIN_KEY)
            counts = eviction_counts(name)
            held = time.monotonic() - broke
            # retried, with waits from 5 s growing: not once, not in a loop
            assert 2 <= counts.get("blocked", 0) <= 4, f"blocked evictions in {held:.0f} s: {counts}"
            assert not counts.get("evicted"), counts
            MEASUREMENTS["drain: blocked eviction attempts while the budget held"] = f"{counts.get('blocked')} in {held:.0f} s"

            # b) the budget relaxed: the pod goes, the taint turns NoExecute
            relaxed_at = time.time()
            relaxed = time.monotonic()
            kubectl("patch", "pdb", PDB, "-n", DRAIN_NS, "--type=merge", "-p", '{"spec":{"minAvailable":0}}')
            wait_until(f"{DRAIN_KEY}:NoExecute", lambda: effects(DRAIN_KEY) == ["NoExecute"], 90, 0.1)
            took = time.monotonic() - relaxed
            taint = next(t for t in k8s.taints() if t["key"] == DRAIN_KEY)
            assert taint.get("timeAdded"), taint
            assert k8s.parse_time(taint["timeAdded"]) >= int(relaxed_at) - 1, (taint, relaxed_at)
            assert gone_or_terminating(web), f"{web_key} still running after the switch"
            assert wait_until(f"{web_key} evicted in the operator's log", lambda: evictions_logged(logs, name), 5) == [web_key]
            finished = wait_until("a DrainFinished event", lambda: node_events("DrainFinished", name, since), 15, 0.5)
            assert "every pod in the way was evicted" in finished[0]["note"], finished[0]["note"]
            assert eviction_counts(name).get("evicted") == 1, eviction_counts(name)
            same_pod_untouched(agent)
            wait_until("status drainingNodes 0", lambda: drain_status(name)[0] == 0, 15, 0.5)
            MEASUREMENTS["drain: budget relaxed to NoExecute"] = (
                f"{took:.1f} s (the next eviction retry; {counts.get('blocked')} refused before)"
            )
            MEASUREMENTS["drain: status Draining after the break"] = f"{status}"

            # healed: the taint and the drain's record go
            k8s.set_condition("E2EDrain", "False")
            wait_until(f"{DRAIN_KEY} lifted", lambda: not effects(DRAIN_KEY), 5, 0.1)
            wait_until("drain start removed", lambda: drain_started(name) is None, 5, 0.1)
            same_pod_untouched(agent)
        finally:
            k8s.set_condition("E2EDrain", "False")
            k8s.delete_policies(name)
        assert_policy_left_nothing(name, DRAIN_KEY)

    def test_3c_drain_timeout_switches_anyway(self, release, drain_workloads):
        name = "e2e-drain-timeout"
        logs = release["logs"]
        since = time.time()
        try:
            # a fresh budget that allows no disruption, the web pod running again
            kubectl("delete", "pdb", PDB, "-n", DRAIN_NS, "--ignore-not-found")
            k8s.apply(drain_pdb(1))
            web = one_running(WEB, 90)
            agent = one_running(NODE_AGENT)
            wait_until(f"PodDisruptionBudget {PDB} allows no disruption", pdb_blocks, 30, 0.5)
            web_key = f"{DRAIN_NS}/{web['metadata']['name']}"

            k8s.apply(drain_policy(name, DRAIN_TIMEOUT_KEY, "E2EDrainTimeout", {"drainTimeout": "20s"}))
            k8s.set_condition("E2EDrainTimeout", "True")
            wait_until(f"{DRAIN_TIMEOUT_KEY}:NoSchedule (the stand-in)", lambda: effects(DRAIN_TIMEOUT_KEY) == ["NoSchedule"], 5, 0.1)
            started = wait_until("the drain start recorded", lambda: drain_started(name), 5, 0.1)
            blocked = wait_until("an EvictionBlocked event", lambda: node_events("EvictionBlocked", name, since), 15, 0.5)
            assert f"pod {web_key} " in blocked[0]["note"] and f"PodDisruptionBudget {PDB}:" in blocked[0]["note"], blocked[0]["note"]

            # NoSchedule, the pod untouched, until drainTimeout has passed since the start
            while effects(DRAIN_TIMEOUT_KEY) != ["NoExecute"]:
                now = time.time()
                assert effects(DRAIN_TIMEOUT_KEY) in (["NoSchedule"], ["NoExecute"]), effects(DRAIN_TIMEOUT_KEY)
                assert now < started + 30, f"still {effects(DRAIN_TIMEOUT_KEY)} {now - started:.1f} s after the drain started"
                if now < started + 19:
                    same_pod_untouched(web)
                time.sleep(0.1)
            switched = time.time() - started
            assert switched >= 20, f"switched {switched:.1f} s after the drain started, before drainTimeout 20s"
            assert switched <= 25, f"switched {switched:.1f} s after the drain started"
            taint = next(t for t in k8s.taints() if t["key"] == DRAIN_TIMEOUT_KEY)
            added = k8s.parse_time(taint["timeAdded"]) - started
            assert 20 <= added <= 25, f"timeAdded {taint['timeAdded']} is {added:.0f} s after the start"
            MEASUREMENTS["drain: start to drainTimeout (20s) switch"] = (
                f"{switched:.1f} s (polled every 0.1 s from the recorded start, whole seconds); timeAdded {added:.0f} s"
            )
            finished = wait_until("a DrainFinished event", lambda: node_events("DrainFinished", name, since), 15, 0.5)
            assert "drainTimeout 20s passed" in finished[0]["note"], finished[0]["note"]
            assert not evictions_logged(logs, name), evictions_logged(logs, name)
            counts = eviction_counts(name)
            assert 2 <= counts.get("blocked", 0) <= 4 and not counts.get("evicted"), counts
            MEASUREMENTS["drain: blocked eviction attempts until drainTimeout"] = str(counts.get("blocked"))

            # the taint manager, not the operator, deletes the pod now
            wait_until(f"{web_key} deleted by the taint manager", lambda: gone_or_terminating(web), 30, 0.5)
            evictions = k8s.items("events", "-n", DRAIN_NS, "--field-selector", f"involvedObject.name={web['metadata']['name']}")
            assert any(e["reason"] == "TaintManagerEviction" for e in evictions), [e["reason"] for e in evictions]
            same_pod_untouched(agent)

            k8s.set_condition("E2EDrainTimeout", "False")
            wait_until(f"{DRAIN_TIMEOUT_KEY} lifted", lambda: not effects(DRAIN_TIMEOUT_KEY), 5, 0.1)
            wait_until("drain start removed", lambda: drain_started(name) is None, 5, 0.1)
        finally:
            k8s.set_condition("E2EDrainTimeout", "False")
            k8s.delete_policies(name)
        assert_policy_left_nothing(name, DRAIN_TIMEOUT_KEY)
        assert_policy_left_nothing("e2e-drain-budget", DRAIN_KEY)


# --------------------------------------------------------------------------- 4

JOIN_KEY = TEST_TAINT_PREFIX + "joining"


def service_answers(port_name: str, path: str | None = None) -> bool:
    svc = k8s.get("service", k8s.FULLNAME, k8s.NAMESPACE)
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == port_name)
    scheme = "https" if port_name == "webhook" else "http"
    path = path or ("/mutate-node" if port_name == "webhook" else "/metrics")
    done = subprocess.run(
        ["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2",
         f"{scheme}://{svc['spec']['clusterIP']}:{port}{path}"],
        capture_output=True, text=True,
    )
    return done.stdout not in ("", "000")


def test_4_webhook_taints_nodes_in_their_create(release, chart, helm_cfg):
    rel = helm_cfg.upgrade(chart, k8s.RELEASE, WEBHOOK_VALUES, namespace=k8s.NAMESPACE, timeout=HELM_TIMEOUT)
    assert rel["status"] == "deployed"
    mwc = k8s.get("mutatingwebhookconfiguration", k8s.FULLNAME)
    assert mwc["webhooks"][0]["failurePolicy"] == "Fail"
    k8s.wait_rollout()
    wait_until("the webhook Service answers", lambda: service_answers("webhook"), 30)

    name = "e2e-webhook"
    label = "e2e.nodetaint.io/webhook"
    pol = k8s.policy(
        name,
        JOIN_KEY,
        nodeSelector={"matchLabels": {label: "yes"}},
        readiness={"criticalPods": [{"name": "none", "namespace": "e2e-webhook", "selector": {"matchLabels": {"app": "none"}}}]},
    )
    created = []

    def create_node(node: str, labels: dict) -> dict:
        manifest = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}}
        out = kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(manifest)).stdout
        created.append(node)
        return json.loads(out)

    try:
        k8s.apply(pol)
        wait_until(
            "policy observed",
            lambda: (k8s.get("taintpolicy", name) or {}).get("status", {}).get("observedGeneration") == 1,
            15,
        )
        time.sleep(1)  # both replicas' caches: the standby may be the one the Service picks
        for i in range(4):  # one after another: the API server's kept connection brings all to one replica (see 1c)
            joined = create_node(f"e2e-webhook-yes-{i}", {label: "yes"})
            assert JOIN_KEY in {t["key"] for t in k8s.taints(joined)}, f"CREATE answer: {k8s.taints(joined)}"
            owners = json.loads(k8s.annotations(joined).get(MANAGED, "{}"))
            assert owners.get(f"{JOIN_KEY}:NoSchedule") == name, owners
        other = create_node("e2e-webhook-no", {label: "no"})
        assert JOIN_KEY not in {t["key"] for t in k8s.taints(other)}, k8s.taints(other)
        assert MANAGED not in k8s.annotations(other), k8s.annotations(other)
    finally:
        if created:
            kubectl("delete", "node", *created, "--ignore-not-found", "--wait=false", check=False)
        k8s.delete_policies(name)


# --------------------------------------------------------------------------- 5

FAILOVER_KEY = TEST_TAINT_PREFIX + "failover"


def test_5_leader_failover(release):
    name = "e2e-failover"
    try:
        k8s.apply(k8s.matcher_policy(name, FAILOVER_KEY, "E2EFailover"))
        k8s.set_condition("E2EFailover", "True")
        wait_until(f"{FAILOVER_KEY} on the node", lambda: k8s.has_taint(FAILOVER_KEY), 10, 0.1)
        holder = k8s.lease_holder()
        assert holder, "no Lease holder"

        started = time.monotonic()
        kubectl("delete", "pod", "-n", k8s.NAMESPACE, holder, "--wait=false")

        def new_holder():
            h = k8s.lease_holder()
            live = {p["metadata"]["name"] for p in k8s.live_operator_pods()}
            return h if h and h != holder and h in live else None

        successor = wait_until("another replica holds the Lease", new_holder, 20, 0.2)
        took = time.monotonic() - started
        MEASUREMENTS["leader pod deleted to new Lease holder"] = f"{took:.1f} s"

        k8s.set_condition("E2EFailover", "False")
        wait_until(f"{FAILOVER_KEY} lifted by the new leader", lambda: not k8s.has_taint(FAILOVER_KEY), 10, 0.1)
        logs = release["logs"]

        def removal_logged():
            return [w[1] for w in logs.writes(k8s.node_name()) if w[2].get("policy") == name and not w[2]["added"]]

        # log lines reach us through `kubectl logs -f` a moment after the write
        writers = wait_until(f"the removal of {FAILOVER_KEY} in a log", removal_logged, 5)
        assert writers == [successor], f"{FAILOVER_KEY} removed by {writers}, the new leader is {successor}"
        logs.assert_one_writer_at_a_time()
    finally:
        k8s.set_condition("E2EFailover", "False")
        k8s.delete_policies(name)


def test_5b_a_stopping_leader_still_publishes_the_events_of_its_last_writes(release):
    """Every node write is explained by an event. The operator publishes node events
    once writes have been quiet for 2 s; a leader stopped within that window must
    still send them (it has terminationGracePeriodSeconds to do so)."""
    name = "e2e-last-words"
    key = TEST_TAINT_PREFIX + "last-words"
    logs = release["logs"]
    try:
        k8s.apply(k8s.matcher_policy(name, key, "E2ELastWords"))
        k8s.set_condition("E2ELastWords", "True")
        wait_until(f"{key} on the node", lambda: k8s.has_taint(key), 10, 0.1)
        holder = k8s.lease_holder()
        kubectl("delete", "pod", "-n", k8s.NAMESPACE, holder, "--wait=false")
        wait_until("the old leader gone", lambda: not k8s.get("pod", holder, k8s.NAMESPACE), 40, 0.5)
        writer = [w[1] for w in logs.writes(k8s.node_name()) if w[2].get("policy") == name]
        assert writer == [holder], writer

        def explained():
            for e in k8s.items("events.v1.events.k8s.io", "-n", "default"):
                if e.get("reason") == "TaintAdded" and f"policy {name} " in e.get("note", ""):
                    return e
            return None

        wait_until(f"a TaintAdded event for {key} from {holder}", explained, 10, 0.5)
    finally:
        k8s.set_condition("E2ELastWords", "False")
        k8s.delete_policies(name)
        k8s.wait_rollout()


# --------------------------------------------------------------------------- 6

UPGRADE_KEY = TEST_TAINT_PREFIX + "upgrade"
FLIP_KEY = TEST_TAINT_PREFIX + "flip"


def test_6_upgrade_rolls_pods_with_one_leader_and_no_taint_lost(release, chart, helm_cfg):
    names = ("e2e-upgrade", "e2e-flip")
    stop = threading.Event()
    seen: dict[str, list] = {"missing": [], "holders": [], "errors": []}

    def sample():
        # writes keep coming during the rollout: a condition flips every 2 s
        flip, last_flip = False, 0.0
        while not stop.is_set():
            try:
                if time.monotonic() - last_flip > 2:
                    flip = not flip
                    k8s.set_condition("E2EFlip", "True" if flip else "False")
                    last_flip = time.monotonic()
                if not k8s.has_taint(UPGRADE_KEY):
                    seen["missing"].append(time.monotonic())
                seen["holders"].append(k8s.lease_holder())
            except Exception as e:  # noqa: BLE001 - keep sampling; reported below
                seen["errors"].append(repr(e))
            time.sleep(0.2)

    try:
        k8s.apply(k8s.matcher_policy(names[0], UPGRADE_KEY, "E2EUpgrade"), k8s.matcher_policy(names[1], FLIP_KEY, "E2EFlip"))
        k8s.set_condition("E2EUpgrade", "True")
        wait_until(f"{UPGRADE_KEY} on the node", lambda: k8s.has_taint(UPGRADE_KEY), 10, 0.1)
        before = {p["metadata"]["uid"] for p in k8s.operator_pods()}
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        values = {**WEBHOOK_VALUES, "logLevel": "debug"}
        rel = helm_cfg.upgrade(chart, k8s.RELEASE, values, namespace=k8s.NAMESPACE, timeout=HELM_TIMEOUT)
        assert rel["status"] == "deployed"
        pods = k8s.wait_rollout(180)
        assert not ({p["metadata"]["uid"] for p in pods} & before), "the pods were not replaced"
        time.sleep(4)  # a couple more flips under the new leader
        stop.set()
        sampler.join(10)

        assert not seen["errors"][:3], seen["errors"][:3]
        assert not seen["missing"], f"{UPGRADE_KEY} missing in {len(seen['missing'])} samples during the rollout"
        holders = [h for h in seen["holders"] if h]
        changes = [b for a, b in zip(holders, holders[1:]) if a != b]
        MEASUREMENTS["Lease holders during the upgrade"] = " -> ".join([holders[0], *changes]) if holders else "none"
        # the flip policy kept following its condition under the new pods
        want = k8s.node()["status"]["conditions"]
        flip_now = next(c["status"] for c in want if c["type"] == "E2EFlip") == "True"
        wait_until(f"{FLIP_KEY} follows E2EFlip", lambda: k8s.has_taint(FLIP_KEY) == flip_now, 5, 0.1)
        release["logs"].assert_one_writer_at_a_time()
        for p in pods:
            assert "--log-level=debug" in p["spec"]["containers"][0]["args"]
        # metrics through the Service
        svc = k8s.get("service", k8s.FULLNAME, k8s.NAMESPACE)
        url = f"http://{svc['spec']['clusterIP']}:8080/metrics"
        body = subprocess.run(["curl", "-sf", "--max-time", "5", url], capture_output=True, text=True).stdout
        assert "taint_operator_node_writes_total" in body, body[:500]
    finally:
        stop.set()
        k8s.set_condition("E2EUpgrade", "False")
        k8s.set_condition("E2EFlip", "False")
        k8s.delete_policies(*names)


def test_6b_network_policy_is_accepted_and_the_webhooks_still_answer(release, chart, helm_cfg):
    """`networkPolicy.enabled=true` on the running release: the API server stores the
    NetworkPolicy as rendered, and both webhooks are still reached through the
    Service: a policy whose regex does not compile is refused by the TaintPolicy
    webhook (failurePolicy Ignore, so a webhook not reached would let it through),
    and a Node is created through the Node webhook (failurePolicy Fail, so a webhook
    not reached would refuse it).

    This cluster's bridge CNI does not enforce NetworkPolicy: the test shows that the
    policy is valid and leaves the webhook port open, not that it blocks anything."""
    values = {**WEBHOOK_VALUES, "logLevel": "debug", "networkPolicy": {"enabled": True}}
    rel = helm_cfg.upgrade(chart, k8s.RELEASE, values, namespace=k8s.NAMESPACE, timeout=HELM_TIMEOUT)
    assert rel["status"] == "deployed"
    rendered = next(
        d for d in yaml.safe_load_all(rel["manifest"]) if d and d["kind"] == "NetworkPolicy"
    )
    live = k8s.get("networkpolicy", k8s.FULLNAME, k8s.NAMESPACE)
    assert live, "no NetworkPolicy after the upgrade"
    for field in ("podSelector", "policyTypes", "ingress", "egress"):
        assert live["spec"][field] == rendered["spec"][field], (field, live["spec"][field])
    container = k8s.get("deployment", k8s.FULLNAME, k8s.NAMESPACE)["spec"]["template"]["spec"]["containers"][0]
    webhook_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "webhook")
    # open to anyone: no `from`
    assert {"ports": [{"port": webhook_port, "protocol": "TCP"}]} in live["spec"]["ingress"], live["spec"]["ingress"]
    k8s.wait_rollout()  # nothing to roll: the pod template did not change

    name = "e2e-netpol-kaput"
    bad = k8s.matcher_policy(name, TEST_TAINT_PREFIX + "netpol", "E2ENetpol")
    bad["spec"]["matchers"][0]["conditions"][0]["status"] = "Kaput("
    node = f"e2e-netpol-{int(time.time())}"
    try:
        done = kubectl("apply", "-f", "-", stdin=json.dumps(bad), check=False)
        assert done.returncode != 0 and f'admission webhook "{POLICY_WEBHOOK_NAME}" denied the request' in done.stderr, (
            done.stdout + done.stderr
        )
        assert not k8s.get("taintpolicy", name)
        kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    finally:
        k8s.delete_policies(name)
        kubectl("delete", "node", node, "--ignore-not-found", "--wait=false", check=False)


# --------------------------------------------------------------------------- 6c-6f: a real Prometheus

MONITOR_NAMESPACE = "monitoring"
SCRAPER = "prometheus"
DASHBOARD = k8s.REPO / "charts" / "taint-operator" / "files" / "grafana-dashboard.json"
# What Grafana puts in for the dashboard's variables: this release's namespace, and
# a rate window of several scrapes.
DASHBOARD_VARIABLES = {"$namespace": k8s.NAMESPACE, "$__rate_interval": "1m"}
PROM_GOOD, PROM_CONFLICT = "e2e-prom", "e2e-prom-conflict"
PROM_KEY = TEST_TAINT_PREFIX + "prom"


def monitoring_objects(chart: helm.Chart, values: dict) -> tuple[dict, dict]:
    """The ServiceMonitor and PrometheusRule the chart renders for the release's values."""
    values = {**values, "serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
    rendered = chart.render(values, name=k8s.RELEASE, namespace=k8s.NAMESPACE)
    docs = [d for path, text in rendered.items() if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d]
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    return monitor, rule


def dashboard_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    out = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in DASHBOARD_VARIABLES.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, f"{panel['title']}: a dashboard variable the test does not fill: {expr}"
            out.append((panel["title"], expr))
    return out


@pytest.fixture(scope="class")
def prometheus(release, chart, helm_cfg, tmp_path_factory):
    reason = prom.missing()
    if reason:
        pytest.skip(reason)
    server = prom.Prometheus(tmp_path_factory.mktemp("prometheus"))
    values = helm_cfg.get_values(k8s.RELEASE) or {}
    server.configure(*monitoring_objects(chart, values))
    server.start()
    yield server
    server.stop()


def scraped_replicas(server: prom.Prometheus) -> dict[str, float] | None:
    """pod -> taint_operator_leader, once every live replica is scraped and up."""
    live = {p["metadata"]["name"] for p in k8s.live_operator_pods()}
    up = {s["metric"]["pod"]: s["value"][1] for s in server.query('up{job="taint-operator"}')}
    leader = {s["metric"]["pod"]: float(s["value"][1]) for s in server.query("taint_operator_leader")}
    if set(leader) != live or any(up.get(p) != "1" for p in live):
        return None
    return leader


class TestPrometheus:
    """Debian's Prometheus scrapes the replicas through the chart's Service as the
    chart's ServiceMonitor says, plain and then with metrics.secure, evaluates the
    chart's PrometheusRule (each `for` cut to 10 s), and answers every query of the
    chart's Grafana dashboard."""

    def test_6c_both_replicas_are_scraped_through_the_service(self, release, prometheus):
        leader = wait_until("both replicas scraped, up", lambda: scraped_replicas(prometheus), 60, 1)
        assert sorted(leader.values()) == [0.0, 1.0], leader
        holder = k8s.lease_holder()
        assert leader[holder] == 1.0, (holder, leader)
        targets = [t for t in prometheus.targets() if t["labels"].get("job") == "taint-operator"]
        assert len(targets) == 2 and all(t["scrapeUrl"].startswith("http://") for t in targets), targets
        service = {t["labels"]["service"] for t in targets}
        assert service == {k8s.FULLNAME}, service
        assert {t["labels"]["namespace"] for t in targets} == {k8s.NAMESPACE}

    def test_6d_secure_metrics_are_scraped_with_a_service_account_token(self, release, chart, helm_cfg, prometheus):
        k8s.apply(namespace(MONITOR_NAMESPACE))
        k8s.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SCRAPER, "namespace": MONITOR_NAMESPACE}})
        values = {
            **(helm_cfg.get_values(k8s.RELEASE) or {}),
            "metrics": {"secure": True, "readers": [{"kind": "ServiceAccount", "name": SCRAPER, "namespace": MONITOR_NAMESPACE}]},
        }
        rel = helm_cfg.upgrade(chart, k8s.RELEASE, values, namespace=k8s.NAMESPACE, timeout=HELM_TIMEOUT)
        assert rel["status"] == "deployed"
        k8s.wait_rollout(180)
        token = kubectl("create", "token", SCRAPER, "-n", MONITOR_NAMESPACE, "--duration=2h").stdout.strip()
        prometheus.configure(*monitoring_objects(chart, values), token=token)

        def secure_and_up():
            targets = [t for t in prometheus.targets() if t["labels"].get("job") == "taint-operator"]
            live = {p["metadata"]["name"] for p in k8s.live_operator_pods()}
            ok = {t["labels"]["pod"] for t in targets if t["scrapeUrl"].startswith("https://") and t["health"] == "up"}
            return targets if ok == live and len(targets) == len(live) else None

        wait_until("both replicas scraped over https with the token", secure_and_up, 60, 1)
        leader = wait_until("both replicas' leader gauge", lambda: scraped_replicas(prometheus), 30, 1)
        assert sorted(leader.values()) == [0.0, 1.0], leader

    def test_6e_every_dashboard_query_returns_data_and_a_conflicting_policy_alerts(self, release, prometheus):
        k8s.set_condition("E2EProm", "False")
        # the second policy claims the first's taint: Ready=False, reason Conflict
        k8s.apply(k8s.matcher_policy(PROM_GOOD, PROM_KEY, "E2EProm"))
        wait_until(f"{PROM_GOOD} Ready", lambda: k8s.policy_ready(PROM_GOOD), 30)
        k8s.apply(k8s.matcher_policy(PROM_CONFLICT, PROM_KEY, "E2EProm"))
        try:
            for status in ("True", "False", "True", "False"):
                k8s.set_condition("E2EProm", status)
                wait_until(f"{PROM_KEY} follows E2EProm={status}", lambda: k8s.has_taint(PROM_KEY) == (status == "True"), 20, 0.2)
            queries = dashboard_queries()
            empty: list[tuple[str, str]] = []

            def all_answer():
                empty[:] = [(title, expr) for title, expr in queries if not prometheus.query(expr)]
                return not empty

            try:
                wait_until("every dashboard query returns a series", all_answer, 90, 2)
            except AssertionError:
                raise AssertionError(f"dashboard queries without data: {empty}") from None
            MEASUREMENTS["Grafana dashboard queries answered"] = f"{len(queries)} of {len(queries)}"

            alerts = wait_until("TaintPolicyNotReady firing", lambda: prometheus.firing("TaintPolicyNotReady"), 60, 1)
            assert {a["labels"]["policy"] for a in alerts} == {PROM_CONFLICT}, alerts
        finally:
            k8s.delete_policies(PROM_CONFLICT, PROM_GOOD)
            k8s.set_condition("E2EProm", "False")

    def test_6f_no_leader_alert_fires_when_both_replicas_are_gone(self, release, prometheus):
        assert not prometheus.firing("TaintOperatorNoLeader")
        kubectl("scale", "deployment", k8s.FULLNAME, "-n", k8s.NAMESPACE, "--replicas=0")
        try:
            wait_until("operator pods gone", lambda: not k8s.operator_pods(), 90, 0.5)
            started = time.monotonic()
            wait_until("TaintOperatorNoLeader firing", lambda: prometheus.firing("TaintOperatorNoLeader"), 90, 1)
            MEASUREMENTS["both replicas gone to TaintOperatorNoLeader firing (for: 10 s)"] = f"{time.monotonic() - started:.1f} s"
            # absent() turns true once the last series goes stale, a moment after the
            # leader's gauge went to 0 as it stepped down
            wait_until("TaintOperatorMetricsAbsent firing", lambda: prometheus.firing("TaintOperatorMetricsAbsent"), 60, 1)
        finally:
            kubectl("scale", "deployment", k8s.FULLNAME, "-n", k8s.NAMESPACE, "--replicas=2")
            k8s.wait_rollout(180)


# --------------------------------------------------------------------------- 7

CLEANUP_KEY = TEST_TAINT_PREFIX + "cleanup"
BOOT_KEY = TEST_TAINT_PREFIX + "boot"


def test_7_delete_policies_then_uninstall_leaves_nodes_clean(release, helm_cfg):
    MEASUREMENTS["operator memory, after the tests"] = k8s.operator_memory()
    k8s.set_condition("E2ECleanup", "True")
    k8s.set_condition("E2EBootReady", "False")
    k8s.apply(
        k8s.matcher_policy("e2e-cleanup", CLEANUP_KEY, "E2ECleanup"),
        k8s.policy(
            "e2e-boot",
            BOOT_KEY,
            readiness={"conditions": [{"type": "E2EBootReady", "status": "True"}]},
            mode="BootstrapOnly",
        ),
        k8s.matcher_policy("e2e-cleanup-noexec", CLEANUP_KEY + "-x", "E2ECleanup", effect="NoExecute"),
    )
    wait_until("taints of the three policies", lambda: {CLEANUP_KEY, BOOT_KEY, CLEANUP_KEY + "-x"} <= {t["key"] for t in k8s.taints()}, 10)
    k8s.set_condition("E2EBootReady", "True")
    wait_until("bootstrap recorded", lambda: "e2e-boot" in json.loads(k8s.annotations().get(BOOTSTRAPPED, "{}")), 10)
    assert MANAGED in k8s.annotations()

    kubectl("delete", "tp", "--all", "--timeout=60s", timeout=90)
    helm_cfg.uninstall(k8s.RELEASE, timeout=HELM_TIMEOUT)
    wait_until("operator pods gone", lambda: not k8s.operator_pods(), 60, 0.5)
    # the CRD was the release's, and crds.keep (helm.sh/resource-policy: keep) leaves it
    crd = k8s.get("crd", CRD_NAME)
    assert crd and not crd["metadata"].get("deletionTimestamp"), "helm uninstall deleted the CRD"
    assert crd["metadata"]["annotations"].get("helm.sh/resource-policy") == "keep"

    for n in k8s.items("nodes"):
        left = [t for t in k8s.taints(n) if t["key"].startswith(TEST_TAINT_PREFIX)]
        assert not left, f"{n['metadata']['name']}: operator taints left: {left}"
        notes = {k: v for k, v in k8s.annotations(n).items() if k.startswith("nodetaint.io/")}
        assert not notes, f"{n['metadata']['name']}: operator annotations left: {notes}"
    for c in ("E2ECleanup", "E2EBootReady"):
        k8s.set_condition(c, "False")


# --------------------------------------------------------------------------- 8: upgrade from chart 0.1.0

# Chart 0.1.0 as it stood before #22 tightened the CRD's selector schema: its CRD
# sits in crds/ (Helm creates it once, unowned, and never upgrades it) and differs
# from this chart's, so the upgrade has a CRD change to make. Its templates are
# those of 0.1.0's last commit, and it runs this run's image.
PREVIOUS_CHART_REF = os.environ.get("E2E_PREVIOUS_CHART_REF", "84b9d039bb402e820ab39f6fe4fbe6d043862bad")
PREV_KEY = TEST_TAINT_PREFIX + "previous"
PREV_POLICIES = ("e2e-prev-matcher", "e2e-prev-ready")
# A node-selector label value the new CRD's schema refuses ("!" is no label character).
BAD_SELECTOR = {"matchLabels": {"e2e.nodetaint.io/zone": "eu-west!"}}


def deployed_chart() -> str:
    """The chart (name-version) the release's Deployment was rendered from."""
    return k8s.get("deployment", k8s.FULLNAME, k8s.NAMESPACE)["metadata"]["labels"]["helm.sh/chart"]


def crd_versions(crd: dict) -> list:
    return crd["spec"]["versions"]


def new_crd_file() -> dict:
    return yaml.safe_load((k8s.CHART / "files" / "taintpolicies.nodetaint.io.yaml").read_text())


def bad_selector_dry_run() -> subprocess.CompletedProcess:
    pol = k8s.matcher_policy("e2e-prev-bad-selector", PREV_KEY + "-bad", "E2EPrevBad")
    pol["spec"]["nodeSelector"] = BAD_SELECTOR
    # checked against chart 0.1.0's CRD too, which has no clearAfter
    del pol["spec"]["clearAfter"]
    return kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(pol), check=False)


@pytest.fixture(scope="class")
def previous_chart(tmp_path_factory):
    archive = subprocess.run(
        ["git", "-C", str(k8s.REPO), "archive", PREVIOUS_CHART_REF, "charts/taint-operator"], capture_output=True
    )
    if archive.returncode != 0:
        pytest.skip(f"chart 0.1.0 ({PREVIOUS_CHART_REF}) is not in this clone: {archive.stderr.decode().strip()}")
    out = tmp_path_factory.mktemp("previous-chart")
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    path = out / "charts" / "taint-operator"
    assert yaml.safe_load((path / "Chart.yaml").read_text())["version"] == "0.1.0"
    assert (path / "crds" / "taintpolicies.nodetaint.io.yaml").is_file()
    with helm.Chart.load(path) as loaded:
        yield {"chart": loaded, "crd": yaml.safe_load((path / "crds" / "taintpolicies.nodetaint.io.yaml").read_text())}


@pytest.fixture(scope="class")
def previous_release(release, helm_cfg, previous_chart):
    """After test 7's uninstall: the CRD it kept is deleted (no policy is left), so the
    cluster is one that only ever ran chart 0.1.0; that chart is installed as the same
    release in the same (Pod Security restricted) namespace, and two policies are
    applied: a matcher whose condition holds (its taint is on the node) and a
    readiness policy that is satisfied."""
    assert not k8s.items("taintpolicies"), "policies left before the previous chart goes in"
    kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--timeout=60s", timeout=90)
    # the image this run pushed, by its tag (this chart's appVersion): no registry holds 0.1.0's
    published = release["published"]
    image = {"repository": published["imageRepository"], "tag": published["version"]}
    rel = helm_cfg.install(
        previous_chart["chart"], k8s.RELEASE, {"image": image}, namespace=k8s.NAMESPACE, timeout=HELM_TIMEOUT
    )
    assert rel["status"] == "deployed"
    assert deployed_chart() == "taint-operator-0.1.0"
    k8s.wait_rollout(180)
    kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    k8s.set_condition("E2EPrev", "True")
    k8s.set_condition("E2EPrevReady", "True")
    previous = [
        k8s.matcher_policy(PREV_POLICIES[0], PREV_KEY, "E2EPrev"),
        k8s.policy(PREV_POLICIES[1], PREV_KEY + "-ready", readiness={"conditions": [{"type": "E2EPrevReady", "status": "True"}]}),
    ]
    for p in previous:
        # written as a user of chart 0.1.0 wrote them: its CRD has no clearAfter
        del p["spec"]["clearAfter"]
    k8s.apply(*previous)
    wait_until(f"{PREV_KEY} on the node", lambda: k8s.has_taint(PREV_KEY), 30, 0.2)
    uids = {n: k8s.get("taintpolicy", n)["metadata"]["uid"] for n in PREV_POLICIES}
    yield {"release": rel, "uids": uids}
    k8s.set_condition("E2EPrev", "False")
    k8s.set_condition("E2EPrevReady", "False")
    k8s.delete_policies(*PREV_POLICIES)
    helm_cfg.uninstall(k8s.RELEASE, ignore_not_found=True, timeout=HELM_TIMEOUT)


class TestUpgradeFromChart010:
    """`helm upgrade` from chart 0.1.0 (CRD in crds/) to this chart (CRD a template):
    the chart's hook adopts the CRD, which is updated in place, and every policy
    stays, enforced throughout; the next upgrade takes the CRD into the release."""

    def test_8_the_previous_chart_runs_with_its_own_crd(self, release, previous_chart, previous_release):
        crd = k8s.get("crd", CRD_NAME)
        assert crd_versions(crd)[0]["schema"] == crd_versions(previous_chart["crd"])[0]["schema"]
        assert crd_versions(crd)[0]["schema"] != crd_versions(new_crd_file())[0]["schema"], (
            "the previous chart's CRD equals this one's: pick an older E2E_PREVIOUS_CHART_REF"
        )
        # crds/ leaves it unowned
        assert "meta.helm.sh/release-name" not in (crd["metadata"].get("annotations") or {})
        # the old schema lets the bad selector value through to the webhook, or stores it
        done = bad_selector_dry_run()
        assert done.returncode == 0 or "admission webhook" in done.stderr, done.stderr
        assert all(k8s.pod_ready(p) for p in k8s.live_operator_pods())

    def test_8b_the_upgrade_adopts_the_crd_and_keeps_every_policy(self, release, chart, helm_cfg, previous_release):
        """One plain `helm upgrade`, nothing run by hand: the chart finds the CRD
        unowned, leaves it out of this revision, and its pre-upgrade hook
        (`taint-operator adopt-crd`) writes the new schema and the release's
        ownership onto the same object before the new pods start."""
        crd_before = k8s.get("crd", CRD_NAME)
        old_pods = {p["metadata"]["uid"] for p in k8s.operator_pods()}
        missing: list[float] = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    if not k8s.has_taint(PREV_KEY):
                        missing.append(time.monotonic())
                except AssertionError:
                    pass
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        try:
            rel = helm_cfg.upgrade(chart, k8s.RELEASE, None, namespace=k8s.NAMESPACE, timeout=HELM_TIMEOUT)
            MEASUREMENTS["upgrade from 0.1.0 (CRD adopted by the hook)"] = f"{time.monotonic() - started:.1f} s"
            assert rel["status"] == "deployed"
            assert deployed_chart() == f"taint-operator-{chart.metadata['version']}"
            pods = k8s.wait_rollout(180)
            assert not ({p["metadata"]["uid"] for p in pods} & old_pods), "the pods were not replaced"
        finally:
            stop.set()
            sampler.join(5)

        crd = k8s.get("crd", CRD_NAME)
        # updated in place (same object, so no policy was deleted with it), to this chart's
        assert crd["metadata"]["uid"] == crd_before["metadata"]["uid"]
        assert crd_versions(crd) == crd_versions(new_crd_file())
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        annotations = crd["metadata"]["annotations"]
        assert annotations["meta.helm.sh/release-name"] == k8s.RELEASE
        assert annotations["meta.helm.sh/release-namespace"] == k8s.NAMESPACE
        assert annotations["helm.sh/resource-policy"] == "keep"
        # left out of this revision (Helm would have refused it) ...
        kinds = {d["kind"] for d in yaml.safe_load_all(rel["manifest"]) if d}
        assert "CustomResourceDefinition" not in kinds, kinds
        # ... and the hook's Job and RBAC are gone once it succeeded
        hook = f"{k8s.FULLNAME}-adopt-crd"
        for kind, namespace in (("job", k8s.NAMESPACE), ("serviceaccount", k8s.NAMESPACE), ("clusterrole", None), ("clusterrolebinding", None)):
            assert k8s.get(kind, hook, namespace) is None, f"{kind} {hook} left behind"
        # the API server now checks what the new schema says, before any webhook
        done = bad_selector_dry_run()
        assert done.returncode != 0 and "spec.nodeSelector.matchLabels" in done.stderr, done.stderr
        assert "admission webhook" not in done.stderr, done.stderr

        # every policy stayed, the same objects, enforced throughout and reconciled by the new pods
        for name, uid in previous_release["uids"].items():
            pol = k8s.get("taintpolicy", name)
            assert pol and pol["metadata"]["uid"] == uid, f"{name} is gone or was recreated"
        assert not missing, f"{PREV_KEY} missing in {len(missing)} samples during the upgrade"
        # A policy written for 0.1.0 keeps its taints clearAfter (2m) after its
        # condition clears; the new CRD takes the field that says otherwise.
        kubectl("patch", "taintpolicy", PREV_POLICIES[0], "--type=merge", "-p", json.dumps({"spec": {"clearAfter": "0s"}}))
        k8s.set_condition("E2EPrev", "False")
        wait_until(f"{PREV_KEY} lifted by the new pods", lambda: not k8s.has_taint(PREV_KEY), 20, 0.2)
        # the new pods pass Pod Security "restricted" too (the namespace enforces it)
        assert all(k8s.pod_ready(p) for p in pods)

    def test_8c_the_next_upgrade_takes_the_crd_into_the_release(self, release, chart, helm_cfg, previous_release):
        uid = k8s.get("crd", CRD_NAME)["metadata"]["uid"]
        rel = helm_cfg.upgrade(chart, k8s.RELEASE, None, namespace=k8s.NAMESPACE, timeout=HELM_TIMEOUT)
        assert rel["status"] == "deployed"
        kinds = {d["kind"] for d in yaml.safe_load_all(rel["manifest"]) if d}
        assert "CustomResourceDefinition" in kinds, kinds
        assert "Job" not in kinds
        crd = k8s.get("crd", CRD_NAME)
        assert crd["metadata"]["uid"] == uid
        assert crd["metadata"]["labels"]["helm.sh/chart"] == f"taint-operator-{chart.metadata['version']}"
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        for name, uid in previous_release["uids"].items():
            assert k8s.get("taintpolicy", name)["metadata"]["uid"] == uid

    def test_8d_uninstall_keeps_the_crd(self, release, helm_cfg, previous_release):
        k8s.delete_policies(*PREV_POLICIES)
        helm_cfg.uninstall(k8s.RELEASE, timeout=HELM_TIMEOUT)
        wait_until("operator pods gone", lambda: not k8s.operator_pods(), 60, 0.5)
        crd = k8s.get("crd", CRD_NAME)
        assert crd and not crd["metadata"].get("deletionTimestamp"), "helm uninstall deleted the CRD"
