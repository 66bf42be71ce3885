//! Scenario 1: each policy of examples/, loaded from its file and limited to the
//! scenario's nodes, doing the job its comment promises.

use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::json;
use taint_operator_crd::{MANAGED_TAINTS_ANNOTATION, POD_READY_ANNOTATION};
use taint_operator_e2e::{
    Cond, Harness, Result, always_for, bail, ensure, ensure_eq, eventually, eventually_within,
    k8s::{bootstrapped, taint_strs, taints},
};

use crate::common::{
    Scn, check_bootstrapped, check_node, expect_clean, expect_node, expect_status,
    expect_status_names, owned,
};

const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute";
const OUT_OF_SERVICE_ID: &str = "node.kubernetes.io/out-of-service:NoExecute";

/// Polls the node every 5 ms until its taints are exactly `want`; returns the time it took.
async fn time_until_taints(
    h: &Harness,
    node: &str,
    want: &[&str],
    since: Instant,
) -> Result<Duration> {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    eventually_within(
        format!("taints {want:?} on {node}"),
        Duration::from_secs(20),
        Duration::from_millis(5),
        async || {
            let n = h.k.node(node).await?;
            let got = taint_strs(&n);
            ensure!(got == want, "taints {got:?}");
            Ok(since.elapsed())
        },
    )
    .await
}

/// The spot example, both policies as shipped: at the notice a running node is
/// drained (`spot-preemption-drain`) and out-of-service waits; once the node
/// lifecycle controller's `Ready=Unknown` says it is down, out-of-service goes on.
/// A cleared notice keeps both taints for `clearAfter` (2m), and a policy edited to
/// `0s` lets them go at once. Measures the down → out-of-service latency and counts
/// node writes per transition.
pub async fn spot_out_of_service(h: &Harness) -> Result {
    const DRAINED: &str = "nodetaint.io/spot-preempted=notice:NoExecute";
    let k = &h.k;
    let s = Scn("spot");
    let (drain, oos) = ("e2e-spot-preemption-drain", "e2e-spot-out-of-service");
    let (a, b, od) = (s.node("a"), s.node("b"), s.node("od"));
    let spot = ("node.kubernetes.io/lifecycle", "spot");
    k.create_node(&a, &[s.label(), spot]).await?;
    k.create_node(&b, &[s.label(), spot]).await?;
    k.create_node(
        &od,
        &[s.label(), ("node.kubernetes.io/lifecycle", "on-demand")],
    )
    .await?;
    let running = |spot: Cond| vec![Cond::now("Ready", "True", "KubeletReady"), spot];
    k.set_conditions(
        &a,
        &running(Cond::now("SpotInterruption", "False", "NoInterruption")),
    )
    .await?;
    // A rebalance recommendation is not a preemption: the reason regex leaves it out.
    k.set_conditions(
        &b,
        &running(Cond::now(
            "SpotInterruption",
            "True",
            "RebalanceRecommendation",
        )),
    )
    .await?;
    // On-demand nodes are not selected, whatever their conditions say.
    k.set_conditions(
        &od,
        &[Cond::now("SpotInterruption", "True", "PreemptionNotice")],
    )
    .await?;

    let docs = h.read_examples("spot-out-of-service.yaml")?;
    ensure_eq!(docs.len(), 2, "policies in the spot example");
    for (doc, name) in docs.into_iter().zip([drain, oos]) {
        let mut p = s.example_policy(doc, name);
        // As shipped: the default clearAfter, said out loud (create_policy makes a
        // policy that says none `0s`).
        if p["spec"].get("clearAfter").is_none() {
            p["spec"]["clearAfter"] = json!("2m");
        }
        k.create_policy(p).await?;
        k.wait_finalizer(name).await?;
    }
    let v = expect_status(k, oos, "True", "Reconciled", (2, 0, 0)).await?;
    ensure_eq!(v.taints.as_deref(), Some(OUT_OF_SERVICE), "status.taints");
    for n in [&a, &b, &od] {
        check_node(k, n, &[], &owned(&[])).await?;
    }

    // Preemption notice on a running node: drained, and no out-of-service.
    k.set_conditions(
        &a,
        &running(Cond::now("SpotInterruption", "True", "PreemptionNotice")),
    )
    .await?;
    time_until_taints(h, &a, &[DRAINED], Instant::now()).await?;
    let v = expect_status(k, oos, "False", "AwaitingShutdown", (2, 0, 1)).await?;
    ensure!(
        v.message().contains(&a),
        "the status names {a}: {}",
        v.message()
    );
    k.wait_event("Node", &a, "OutOfServiceWaiting", &[oos, "Ready=True"])
        .await?;
    always_for(
        "no out-of-service on a running node",
        Duration::from_secs(3),
        async || {
            let n = k.node(&a).await?;
            ensure!(
                !taint_strs(&n)
                    .iter()
                    .any(|t| t.starts_with("node.kubernetes.io/out-of-service")),
                "out-of-service on a Ready=True node: {:?}",
                taint_strs(&n)
            );
            Ok(())
        },
    )
    .await?;

    // The node goes down (the node lifecycle controller's Ready=Unknown): out-of-service.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes0 = h.metrics().await?.node_writes();
    let down_at = Timestamp::now();
    let t0 = Instant::now();
    let notice = Cond::now("SpotInterruption", "True", "PreemptionNotice");
    k.set_conditions(
        &a,
        &[
            Cond::now("Ready", "Unknown", "NodeStatusUnknown"),
            notice.clone(),
        ],
    )
    .await?;
    let latency_on = time_until_taints(h, &a, &[DRAINED, OUT_OF_SERVICE], t0).await?;
    println!("down→out-of-service latency: {} ms", latency_on.as_millis());
    let node = check_node(
        k,
        &a,
        &[DRAINED, OUT_OF_SERVICE],
        &owned(&[
            ("nodetaint.io/spot-preempted:NoExecute", drain),
            (OUT_OF_SERVICE_ID, oos),
        ]),
    )
    .await?;
    let added = taints(&node)
        .iter()
        .find(|t| t.key == "node.kubernetes.io/out-of-service")
        .and_then(|t| t.time_added.clone())
        .ok_or("out-of-service has no timeAdded")?
        .0;
    let skew = added.duration_since(down_at);
    ensure!(
        skew >= SignedDuration::from_secs(-1) && skew <= SignedDuration::from_secs(2),
        "timeAdded {added} is not the time the taint was added (node down at {down_at})"
    );
    expect_status_names(k, oos, "True", "Reconciled", (2, 1, 0), &[&a]).await?;
    k.wait_event("Node", &a, "TaintAdded", &[oos, "SpotInterruption=True"])
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes1 = h.metrics().await?.node_writes();
    ensure_eq!(
        writes1 - writes0,
        1,
        "node writes for one transition (out-of-service added)"
    );
    check_node(k, &b, &[], &owned(&[])).await?;
    check_node(k, &od, &[], &owned(&[])).await?;

    // The notice clears (a stopped instance started again): both taints stay for
    // clearAfter, so a detector that restarts does not lift them...
    k.set_conditions(
        &a,
        &running(Cond::now("SpotInterruption", "False", "NoInterruption")),
    )
    .await?;
    always_for(
        "taints kept within clearAfter",
        Duration::from_secs(3),
        async || {
            let n = k.node(&a).await?;
            let mut got = taint_strs(&n);
            got.sort();
            ensure_eq!(
                got,
                vec![OUT_OF_SERVICE.to_string(), DRAINED.to_string()],
                "taints"
            );
            Ok(())
        },
    )
    .await?;
    // ...and with clearAfter 0s they come off at once.
    let t1 = Instant::now();
    for name in [drain, oos] {
        k.patch_policy(name, json!({"spec": {"clearAfter": "0s"}}))
            .await?;
    }
    let latency_off = time_until_taints(h, &a, &[], t1).await?;
    println!(
        "clearAfter edit→taints removed: {} ms",
        latency_off.as_millis()
    );
    let node = check_node(k, &a, &[], &owned(&[])).await?;
    ensure!(
        !node
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|m| m.contains_key(MANAGED_TAINTS_ANNOTATION)),
        "an empty ownership annotation was left on {a}"
    );
    k.wait_event("Node", &a, "TaintRemoved", &[oos]).await?;
    expect_status_names(k, oos, "True", "Reconciled", (2, 0, 0), &[]).await?;

    for name in [drain, oos] {
        k.delete_policy(name).await?;
        k.wait_policy_gone(name).await?;
    }
    Ok(())
}

/// Condition-regex matchers with `for: 30s` and a reason regex, the 30% cap, and a
/// taint with the same key that an admin put on a node by hand.
pub async fn nic_kaput(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("nic");
    let policy = "e2e-nic-kaput";
    // The example drains before NoExecute (spec.eviction): NoSchedule first.
    const TAINT: &str = "example.com/network-unavailable:NoExecute";
    const STAND_IN: &str = "example.com/network-unavailable:NoSchedule";
    const ADMIN: &str = "example.com/network-unavailable=switch-firmware-upgrade:NoSchedule";
    let nodes: Vec<String> = (1..=10).map(|i| s.node(&i.to_string())).collect();
    let now = Timestamp::now();
    let ago = |secs: i64| Timestamp::from_second(now.as_second() - secs).expect("a time in range");
    let healthy = |t| {
        vec![
            Cond::since("NetworkInterfaceCard", "Ok", "NICHealthy", t),
            Cond::since("PrivateLink", "Up", "EndpointReachable", t),
        ]
    };
    for (i, n) in nodes.iter().enumerate() {
        if i == 5 {
            k.create_node_with_taints(n, &[s.label()], json!([{"key": "example.com/network-unavailable", "value": "switch-firmware-upgrade", "effect": "NoSchedule"}])).await?;
        } else {
            k.create_node(n, &[s.label()]).await?;
        }
    }
    // nic-1: Ruined for 40 s (>= 30 s): tainted.
    k.set_conditions(
        &nodes[0],
        &[
            Cond::since("NetworkInterfaceCard", "Ruined", "NICDriverError", ago(40)),
            Cond::since("PrivateLink", "Up", "EndpointReachable", ago(600)),
        ],
    )
    .await?;
    // nic-2: PrivateLink Down with a listed reason: tainted (no window).
    k.set_conditions(
        &nodes[1],
        &[
            Cond::since("NetworkInterfaceCard", "Ok", "NICHealthy", ago(600)),
            Cond::since("PrivateLink", "Down", "EndpointUnreachable", ago(1)),
        ],
    )
    .await?;
    // nic-4: Degraded for a while, a status the regex does not list. (A window still
    // running is nic-3's case; one ending mid-scenario would move the zone's share
    // and the cap while the drains run.)
    k.set_conditions(
        &nodes[3],
        &[Cond::since(
            "NetworkInterfaceCard",
            "Degraded",
            "NICSlow",
            ago(600),
        )],
    )
    .await?;
    // nic-5: PrivateLink Down, but the reason is not one the regex lists.
    k.set_conditions(
        &nodes[4],
        &[Cond::since("PrivateLink", "Down", "EndpointSlow", ago(60))],
    )
    .await?;
    // nic-6: healthy, and an admin's taint with the policy's key+effect (never adopted).
    k.set_conditions(&nodes[5], &healthy(ago(600))).await?;
    // nic-7: no conditions at all: a missing condition never matches.
    for n in &nodes[7..] {
        k.set_conditions(n, &healthy(ago(600))).await?;
    }
    // nic-3: Kaput, its 30 s window ends 3 s from now.
    let since3 = Timestamp::from_second(Timestamp::now().as_second() - 27).expect("in range");
    let window_end = since3.checked_add(SignedDuration::from_secs(30))?;
    k.set_conditions(
        &nodes[2],
        &[Cond::since(
            "NetworkInterfaceCard",
            "Kaput",
            "NICLinkDown",
            since3,
        )],
    )
    .await?;

    k.create_policy(s.example_policy(h.read_example("nic-kaput.yaml")?, policy))
        .await?;
    // Both go NoSchedule at once; the drains (no pods to evict here) start and
    // switch one node every 10 s (nodesPerMinute: 6, the nodes share one zone).
    for n in &nodes[..2] {
        eventually(format!("node {n} NoSchedule or NoExecute"), async || {
            let node = k.node(n).await?;
            let t = taint_strs(&node);
            ensure!(t == [STAND_IN] || t == [TAINT], "taints {t:?}");
            Ok(())
        })
        .await?;
    }
    // Before its window ends, nic-3 stays untainted.
    let before_end = SignedDuration::try_from(Duration::from_millis(250))?;
    while Timestamp::now() < window_end.checked_sub(before_end)? {
        check_node(k, &nodes[2], &[], &owned(&[])).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n3 = eventually("nic-3 NoSchedule", async || {
        let node = k.node(&nodes[2]).await?;
        let t = taint_strs(&node);
        ensure!(!t.is_empty(), "no taint yet");
        Ok(node)
    })
    .await?;
    let late = Timestamp::now().duration_since(window_end);
    println!(
        "nic-3 tainted {} ms after its 30 s window ended",
        late.as_millis()
    );
    ensure!(
        late <= SignedDuration::from_secs(1),
        "nic-3 was tainted {late:?} after its window ended"
    );
    drop(n3);
    for n in &nodes[..2] {
        eventually_within(
            format!("node {n} to switch to NoExecute"),
            Duration::from_secs(40),
            Duration::from_millis(100),
            async || check_node(k, n, &[TAINT], &owned(&[(TAINT, policy)])).await,
        )
        .await?;
    }
    eventually_within(
        "nic-3 to switch to NoExecute",
        Duration::from_secs(40),
        Duration::from_millis(100),
        async || check_node(k, &nodes[2], &[TAINT], &owned(&[(TAINT, policy)])).await,
    )
    .await?;
    let names: Vec<&str> = nodes[..3].iter().map(String::as_str).collect();
    let v = expect_status_names(k, policy, "True", "Reconciled", (10, 3, 0), &names).await?;
    ensure_eq!(
        v.message(),
        "3 of 10 selected nodes tainted",
        "Ready message"
    );
    for (i, n) in nodes.iter().enumerate().skip(3) {
        let want: &[&str] = if i == 5 { &[ADMIN] } else { &[] };
        check_node(k, n, want, &owned(&[])).await?;
    }

    // PrivateLink reachable again: nic-2's taint comes off; the admin's taint stays.
    k.set_conditions(&nodes[1], &healthy(Timestamp::now()))
        .await?;
    expect_node(k, &nodes[1], &[], &owned(&[])).await?;
    expect_status_names(
        k,
        policy,
        "True",
        "Reconciled",
        (10, 2, 0),
        &[&nodes[0], &nodes[2]],
    )
    .await?;

    // Deleting the policy removes its taints and leaves the admin's alone.
    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    for (i, n) in nodes.iter().enumerate() {
        let want: &[&str] = if i == 5 { &[ADMIN] } else { &[] };
        expect_node(k, n, want, &owned(&[])).await?;
    }
    Ok(())
}

/// BootstrapOnly: the startup taint is held until a node-init pod is Ready (or
/// annotated ready), then removed for good and the completion recorded.
pub async fn startup_init_daemonset(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("boot");
    let policy = "e2e-startup-init-daemonset";
    const TAINT: &str =
        "startup-taint.cluster-autoscaler.kubernetes.io/initializing=wait:NoSchedule";
    const ID: &str = "startup-taint.cluster-autoscaler.kubernetes.io/initializing:NoSchedule";
    let ns = "kube-system";
    let worker = ("node-role.kubernetes.io/worker", "");
    let (w1, w2, cp) = (s.node("w1"), s.node("w2"), s.node("cp"));
    k.create_node(&w1, &[s.label(), worker]).await?;
    k.create_node(&w2, &[s.label(), worker]).await?;
    k.create_node(
        &cp,
        &[s.label(), ("node-role.kubernetes.io/control-plane", "")],
    )
    .await?;
    let pod = |n: &str| format!("node-init-{n}");
    let app = [("app", "node-init")];

    let p = k
        .create_policy(s.example_policy(h.read_example("startup-init-daemonset.yaml")?, policy))
        .await?;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    expect_node(k, &w1, &[TAINT], &owned(&[(ID, policy)])).await?;
    expect_node(k, &w2, &[TAINT], &owned(&[(ID, policy)])).await?;
    expect_status_names(k, policy, "True", "Reconciled", (2, 2, 0), &[&w1, &w2]).await?;
    check_node(k, &cp, &[], &owned(&[])).await?;

    // A node-init pod that is not Ready yet keeps the taint.
    k.create_pod(ns, &pod(&w1), &w1, &app, &[]).await?;
    k.set_pod_ready(ns, &pod(&w1), false).await?;
    always_for(
        "w1 to stay tainted while node-init is not Ready",
        Duration::from_secs(1),
        async || {
            check_node(k, &w1, &[TAINT], &owned(&[(ID, policy)]))
                .await
                .map(|_| ())
        },
    )
    .await?;
    // Ready: the taint comes off and the completion is recorded with this policy's uid.
    k.set_pod_ready(ns, &pod(&w1), true).await?;
    let n = expect_node(k, &w1, &[], &owned(&[])).await?;
    check_bootstrapped(&n, policy, &uid)?;
    k.wait_event("Node", &w1, "TaintRemoved", &[policy]).await?;

    // From then on never again: not when node-init fails, not when it is gone.
    k.set_pod_ready(ns, &pod(&w1), false).await?;
    always_for(
        "w1 to stay untainted after bootstrap (pod NotReady)",
        Duration::from_secs(2),
        async || {
            let n = check_node(k, &w1, &[], &owned(&[])).await?;
            check_bootstrapped(&n, policy, &uid)
        },
    )
    .await?;
    k.delete_pod(ns, &pod(&w1)).await?;
    always_for(
        "w1 to stay untainted after bootstrap (pod gone)",
        Duration::from_secs(2),
        async || check_node(k, &w1, &[], &owned(&[])).await.map(|_| ()),
    )
    .await?;

    // The annotation nodetaint.io/ready: "true" counts as Ready.
    k.create_pod(ns, &pod(&w2), &w2, &app, &[(POD_READY_ANNOTATION, "true")])
        .await?;
    k.set_pod_ready(ns, &pod(&w2), false).await?;
    let n = expect_node(k, &w2, &[], &owned(&[])).await?;
    check_bootstrapped(&n, policy, &uid)?;

    // A node that joins later is held too (this suite runs without the admission
    // webhook, so the reconciler puts the taint on), then released by its pod.
    let w3 = s.node("w3");
    k.create_node(&w3, &[s.label(), worker]).await?;
    expect_node(k, &w3, &[TAINT], &owned(&[(ID, policy)])).await?;
    k.create_pod(ns, &pod(&w3), &w3, &app, &[]).await?;
    k.set_pod_ready(ns, &pod(&w3), true).await?;
    let n = expect_node(k, &w3, &[], &owned(&[])).await?;
    check_bootstrapped(&n, policy, &uid)?;
    expect_status_names(k, policy, "True", "Reconciled", (3, 0, 0), &[]).await?;

    // Deleting the policy removes its bootstrap records.
    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    for n in [&w1, &w2, &w3] {
        expect_clean(k, n).await?;
    }
    k.delete_pod(ns, &pod(&w2)).await?;
    k.delete_pod(ns, &pod(&w3)).await?;
    Ok(())
}

/// Continuous critical pod: the taint follows the istio-cni pod's readiness, and the
/// nodetaint.io/ready annotation overrides a wrong readiness probe.
pub async fn istio_cni_readiness(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("istio");
    let policy = "e2e-istio-cni-readiness";
    const TAINT: &str = "cni.istio.io/not-ready:NoSchedule";
    let ns = "istio-system";
    k.ensure_namespace(ns).await?;
    let linux = ("kubernetes.io/os", "linux");
    let (l1, l2, win) = (s.node("l1"), s.node("l2"), s.node("win"));
    k.create_node(&l1, &[s.label(), linux]).await?;
    k.create_node(&l2, &[s.label(), linux]).await?;
    k.create_node(&win, &[s.label(), ("kubernetes.io/os", "windows")])
        .await?;
    let pod = |n: &str| format!("istio-cni-node-{n}");
    let app = [("k8s-app", "istio-cni-node")];

    k.create_policy(s.example_policy(h.read_example("istio-cni-readiness.yaml")?, policy))
        .await?;
    expect_node(k, &l1, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    expect_node(k, &l2, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    check_node(k, &win, &[], &owned(&[])).await?;
    expect_status_names(k, policy, "True", "Reconciled", (2, 2, 0), &[&l1, &l2]).await?;
    k.wait_event("Node", &l1, "TaintAdded", &[policy, "istio-cni"])
        .await?;

    // l1: the agent becomes Ready, then fails, then recovers: the taint follows.
    k.create_pod(ns, &pod(&l1), &l1, &app, &[]).await?;
    k.set_pod_ready(ns, &pod(&l1), true).await?;
    expect_node(k, &l1, &[], &owned(&[])).await?;
    k.set_pod_ready(ns, &pod(&l1), false).await?;
    expect_node(k, &l1, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    k.wait_event("Node", &l1, "TaintAdded", &[policy, "not Ready"])
        .await?;
    k.set_pod_ready(ns, &pod(&l1), true).await?;
    let n = expect_node(k, &l1, &[], &owned(&[])).await?;
    ensure!(
        bootstrapped(&n)?.is_empty(),
        "a Continuous policy recorded a bootstrap"
    );

    // l2: the probe says NotReady but the pod is annotated ready: it counts as ready.
    k.create_pod(ns, &pod(&l2), &l2, &app, &[]).await?;
    k.set_pod_ready(ns, &pod(&l2), false).await?;
    always_for(
        "l2 to stay tainted while its pod is NotReady",
        Duration::from_millis(800),
        async || {
            check_node(k, &l2, &[TAINT], &owned(&[(TAINT, policy)]))
                .await
                .map(|_| ())
        },
    )
    .await?;
    k.annotate_pod(ns, &pod(&l2), POD_READY_ANNOTATION, Some("true"))
        .await?;
    expect_node(k, &l2, &[], &owned(&[])).await?;
    // ... and taking the annotation away makes it not ready again.
    k.annotate_pod(ns, &pod(&l2), POD_READY_ANNOTATION, None)
        .await?;
    expect_node(k, &l2, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    // A pod that is deleted no longer counts.
    k.delete_pod(ns, &pod(&l1)).await?;
    expect_node(k, &l1, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    expect_status_names(k, policy, "True", "Reconciled", (2, 2, 0), &[&l1, &l2]).await?;

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    expect_clean(k, &l1).await?;
    expect_clean(k, &l2).await?;
    k.delete_pod(ns, &pod(&l2)).await?;
    Ok(())
}

/// Continuous readiness condition, with a matchExpressions selector.
pub async fn cni_network_ready(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("cni");
    let policy = "e2e-cni-network-ready";
    const TAINT: &str = "readiness.k8s.io/network-unavailable:NoSchedule";
    let worker = ("node-role.kubernetes.io/worker", "");
    let (w1, w2, cp, other) = (s.node("w1"), s.node("w2"), s.node("cp"), s.node("other"));
    k.create_node(&w1, &[s.label(), worker]).await?;
    k.create_node(&w2, &[s.label(), worker]).await?;
    k.create_node(
        &cp,
        &[
            s.label(),
            worker,
            ("node-role.kubernetes.io/control-plane", ""),
        ],
    )
    .await?;
    k.create_node(&other, &[s.label()]).await?;
    k.set_conditions(
        &w2,
        &[Cond::now(
            "example.net/NetworkReady",
            "True",
            "NetworkAgentReady",
        )],
    )
    .await?;

    k.create_policy(s.example_policy(h.read_example("cni-network-ready.yaml")?, policy))
        .await?;
    // w1 has no NetworkReady condition yet: a missing condition is not ready.
    expect_node(k, &w1, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    expect_status_names(k, policy, "True", "Reconciled", (2, 1, 0), &[&w1]).await?;
    k.wait_event(
        "Node",
        &w1,
        "TaintAdded",
        &[policy, "example.net/NetworkReady is missing"],
    )
    .await?;
    for n in [&w2, &cp, &other] {
        check_node(k, n, &[], &owned(&[])).await?;
    }

    k.set_conditions(
        &w1,
        &[Cond::now(
            "example.net/NetworkReady",
            "True",
            "NetworkAgentReady",
        )],
    )
    .await?;
    expect_node(k, &w1, &[], &owned(&[])).await?;
    // Continuous: the taint comes back when the agent stops being ready.
    k.set_conditions(
        &w1,
        &[Cond::now(
            "example.net/NetworkReady",
            "False",
            "NetworkAgentDown",
        )],
    )
    .await?;
    expect_node(k, &w1, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    k.wait_event(
        "Node",
        &w1,
        "TaintAdded",
        &[policy, "example.net/NetworkReady is False"],
    )
    .await?;
    // The control-plane node is never selected, even when it has no condition.
    check_node(k, &cp, &[], &owned(&[])).await?;
    expect_status_names(k, policy, "True", "Reconciled", (2, 1, 0), &[&w1]).await?;

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    expect_clean(k, &w1).await?;
    if !taint_strs(&k.node(&w2).await?).is_empty() {
        bail!("w2 got a taint");
    }
    Ok(())
}
