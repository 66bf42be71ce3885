//! Scenarios 3, 6, 8, 9, 10: the operator killed and restarted, policies deleted with
//! the operator up and down, BootstrapOnly re-creation, `for` windows and the cap.

use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::json;
use taint_operator_e2e::{
    Cond, Harness, Result, always_for, ensure, ensure_eq, eventually,
    k8s::{now_s, taint_strs},
};

use crate::common::{
    Scn, check_bootstrapped, check_node, expect_clean, expect_node, expect_node_bootstrapped,
    expect_status, expect_status_names, owned,
};

/// The operator is SIGKILLed while it works, the world changes while it is down (a
/// policy edit moving its taint, conditions, a relabel), and it restarts: every node
/// converges and no taint is left behind.
pub async fn sigkill_restart(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("kill");
    let (pa, pr) = ("e2e-kill-broken", "e2e-kill-net");
    const COUNT: usize = 40;
    let nodes: Vec<String> = (0..COUNT).map(|i| s.node(&format!("{i:02}"))).collect();
    for n in &nodes {
        k.create_node(n, &[s.label(), ("pool", "x")]).await?;
        k.set_conditions(
            n,
            &[
                Cond::now("Broken", "True", "Test"),
                Cond::now("NetReady", "False", "Test"),
            ],
        )
        .await?;
    }
    let writes0 = h.metrics().await?.node_patches_ok();
    k.create_policy(s.policy(
        pa,
        &[("pool", "x")],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/kill-a", "value": "1", "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
        }),
    ))
    .await?;
    k.create_policy(s.policy(
        pr,
        &[("pool", "x")],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/kill-r", "effect": "NoSchedule"}],
            "readiness": {"conditions": [{"type": "NetReady", "status": "True"}]},
        }),
    ))
    .await?;
    // SIGKILL as soon as its first node write has landed, while it works through the rest.
    {
        let mut op = h.op.lock().await;
        taint_operator_e2e::eventually_within(
            "the operator to start writing",
            Duration::from_secs(20),
            Duration::from_millis(2),
            async || {
                let w = op.metrics().await?.node_patches_ok();
                ensure!(w > writes0, "no node write yet");
                Ok(())
            },
        )
        .await?;
        op.kill9().await?;
    }
    let mut done = 0;
    for n in &nodes {
        if !taint_strs(&k.node(n).await?).is_empty() {
            done += 1;
        }
    }
    println!("SIGKILLed the operator with {done} of {COUNT} nodes written");

    // While it is down: recoveries, a policy edit that moves the taint, a relabel.
    for (i, n) in nodes.iter().enumerate() {
        let broken = i >= COUNT / 2;
        let net = i % 2 == 0;
        k.set_conditions(
            n,
            &[
                Cond::now("Broken", if broken { "True" } else { "False" }, "Test"),
                Cond::now("NetReady", if net { "True" } else { "False" }, "Test"),
            ],
        )
        .await?;
    }
    k.patch_policy(
        pa,
        json!({"spec": {"taints": [
            {"key": "e2e.nodetaint.io/kill-b", "value": "2", "effect": "NoSchedule"},
        ]}}),
    )
    .await?;
    let last = COUNT - 1;
    k.label_node(&nodes[last], "pool", None).await?;

    h.op.lock().await.start().await?;
    for (i, n) in nodes.iter().enumerate() {
        let mut want = vec![];
        let mut want_owned = vec![];
        // The last node was relabeled out of both policies.
        if i != last {
            if i >= COUNT / 2 {
                want.push("e2e.nodetaint.io/kill-b=2:NoSchedule");
                want_owned.push(("e2e.nodetaint.io/kill-b:NoSchedule", pa));
            }
            if i % 2 == 1 {
                want.push("e2e.nodetaint.io/kill-r:NoSchedule");
                want_owned.push(("e2e.nodetaint.io/kill-r:NoSchedule", pr));
            }
        }
        expect_node(k, n, &want, &owned(&want_owned)).await?;
    }
    let selected = COUNT as i32 - 1;
    expect_status(
        k,
        pa,
        "True",
        "Reconciled",
        (selected, COUNT as i32 / 2 - 1, 0),
    )
    .await?;
    expect_status(
        k,
        pr,
        "True",
        "Reconciled",
        (selected, COUNT as i32 / 2 - 1, 0),
    )
    .await?;

    k.delete_policies_labelled(s.label().0, s.label().1).await?;
    for n in &nodes {
        expect_clean(k, n).await?;
    }
    Ok(())
}

/// Two policies, one Continuous and one BootstrapOnly, for the delete scenarios.
async fn two_policies(h: &Harness, s: Scn, ns: &str) -> Result<(String, String)> {
    let k = &h.k;
    let (pc, pb) = (format!("e2e-{}-cont", s.0), format!("e2e-{}-boot", s.0));
    k.ensure_namespace(ns).await?;
    k.create_policy(s.policy(
        &pc,
        &[],
        json!({
            "taints": [{"key": format!("e2e.nodetaint.io/{}", s.0), "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
        }),
    ))
    .await?;
    k.create_policy(s.policy(&pb, &[], json!({
        "taints": [{"key": format!("e2e.nodetaint.io/{}-boot", s.0), "effect": "NoSchedule"}],
        "readiness": {"criticalPods": [{"name": "init", "namespace": ns, "selector": {"matchLabels": {"app": "init"}}}]},
        "mode": "BootstrapOnly",
    }))).await?;
    k.wait_finalizer(&pc).await?;
    k.wait_finalizer(&pb).await?;
    Ok((pc, pb))
}

/// Deleting policies with the operator running: the finalizer removes their taints and
/// their ownership and bootstrap entries from every node, leaving others' taints, and
/// only then is the policy gone.
pub async fn delete_running(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("delrun");
    let ns = "e2e-delrun";
    let (d1, d2, d3) = (s.node("1"), s.node("2"), s.node("3"));
    const MAINT: &str = "admin.example.com/maintenance:NoSchedule";
    const SAME_KEY_ADMIN: &str = "e2e.nodetaint.io/delrun=admin:NoSchedule";
    const CONT: &str = "e2e.nodetaint.io/delrun:NoSchedule";
    const BOOT: &str = "e2e.nodetaint.io/delrun-boot:NoSchedule";
    k.create_node_with_taints(
        &d1,
        &[s.label()],
        json!([{"key": "admin.example.com/maintenance", "effect": "NoSchedule"}]),
    )
    .await?;
    k.create_node(&d2, &[s.label()]).await?;
    k.create_node_with_taints(
        &d3,
        &[s.label()],
        json!([{"key": "e2e.nodetaint.io/delrun", "value": "admin", "effect": "NoSchedule"}]),
    )
    .await?;
    k.set_conditions(&d1, &[Cond::now("Broken", "True", "Test")])
        .await?;
    k.set_conditions(&d2, &[Cond::now("Broken", "True", "Test")])
        .await?;
    k.set_conditions(&d3, &[Cond::now("Broken", "True", "Test")])
        .await?;
    k.ensure_namespace(ns).await?;
    k.create_pod(ns, "init-1", &d1, &[("app", "init")], &[])
        .await?;
    k.set_pod_ready(ns, "init-1", true).await?;
    let (pc, pb) = two_policies(h, s, ns).await?;
    let uid_b = k.policy_view(&pb).await?.uid;

    expect_node_bootstrapped(k, &d1, &[MAINT, CONT], &owned(&[(CONT, &pc)]), &pb, &uid_b).await?;
    expect_node(k, &d2, &[CONT, BOOT], &owned(&[(CONT, &pc), (BOOT, &pb)])).await?;
    // d3's same-key taint is an admin's: neither adopted nor replaced.
    expect_node(k, &d3, &[SAME_KEY_ADMIN, BOOT], &owned(&[(BOOT, &pb)])).await?;

    k.delete_policy(&pc).await?;
    k.delete_policy(&pb).await?;
    k.wait_policy_gone(&pc).await?;
    k.wait_policy_gone(&pb).await?;
    // Once the policies are gone, the nodes are already clean: the finalizer ran first.
    let n = check_node(k, &d1, &[MAINT], &owned(&[])).await?;
    ensure!(
        taint_operator_e2e::k8s::bootstrapped(&n)?.is_empty(),
        "bootstrap record left on {d1}"
    );
    check_node(k, &d2, &[], &owned(&[])).await?;
    check_node(k, &d3, &[SAME_KEY_ADMIN], &owned(&[])).await?;
    k.wait_event("Node", &d2, "TaintRemoved", &[&pc, "deleted"])
        .await?;
    Ok(())
}

/// Deleting policies while the operator is down: they stay Terminating with the
/// finalizer and the nodes keep their taints; started again, the operator cleans up
/// and the policies go.
pub async fn delete_while_down(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("deldown");
    let ns = "e2e-deldown";
    let (x1, x2) = (s.node("1"), s.node("2"));
    const CONT: &str = "e2e.nodetaint.io/deldown:NoSchedule";
    const BOOT: &str = "e2e.nodetaint.io/deldown-boot:NoSchedule";
    s.create_nodes(k, [&x1, &x2], &Cond::now("Broken", "True", "Test"))
        .await?;
    k.ensure_namespace(ns).await?;
    k.create_pod(ns, "init-1", &x1, &[("app", "init")], &[])
        .await?;
    k.set_pod_ready(ns, "init-1", true).await?;
    let (pc, pb) = two_policies(h, s, ns).await?;
    let uid_b = k.policy_view(&pb).await?.uid;
    expect_node_bootstrapped(k, &x1, &[CONT], &owned(&[(CONT, &pc)]), &pb, &uid_b).await?;
    expect_node(k, &x2, &[CONT, BOOT], &owned(&[(CONT, &pc), (BOOT, &pb)])).await?;

    h.op.lock().await.stop().await?;
    k.delete_policy(&pc).await?;
    k.delete_policy(&pb).await?;
    always_for(
        "the policies to stay Terminating while the operator is down",
        Duration::from_secs(2),
        async || {
            for p in [&pc, &pb] {
                let v = k.policy_view(p).await?;
                ensure!(v.deleting, "{p} has no deletionTimestamp");
                ensure!(
                    v.finalizers.iter().any(|f| f == "nodetaint.io/cleanup"),
                    "{p} lost its finalizer: {:?}",
                    v.finalizers
                );
            }
            let n = check_node(k, &x1, &[CONT], &owned(&[(CONT, &pc)])).await?;
            check_bootstrapped(&n, &pb, &uid_b)?;
            check_node(k, &x2, &[CONT, BOOT], &owned(&[(CONT, &pc), (BOOT, &pb)])).await?;
            Ok(())
        },
    )
    .await?;

    h.op.lock().await.start().await?;
    k.wait_policy_gone(&pc).await?;
    k.wait_policy_gone(&pb).await?;
    expect_clean(k, &x1).await?;
    expect_clean(k, &x2).await?;
    Ok(())
}

/// A BootstrapOnly policy deleted and created again (new uid) re-evaluates every node:
/// the old completion no longer counts.
pub async fn bootstrap_recreate(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("recreate");
    let ns = "e2e-recreate";
    let policy = "e2e-recreate";
    const TAINT: &str = "e2e.nodetaint.io/recreate=wait:NoSchedule";
    const ID: &str = "e2e.nodetaint.io/recreate:NoSchedule";
    let r1 = s.node("1");
    k.create_node(&r1, &[s.label()]).await?;
    k.ensure_namespace(ns).await?;
    let spec = json!({
        "taints": [{"key": "e2e.nodetaint.io/recreate", "value": "wait", "effect": "NoSchedule"}],
        "readiness": {"criticalPods": [{"name": "init", "namespace": ns, "selector": {"matchLabels": {"app": "init"}}}]},
        "mode": "BootstrapOnly",
    });
    let uid1 = k
        .create_policy(s.policy(policy, &[], spec.clone()))
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    expect_node(k, &r1, &[TAINT], &owned(&[(ID, policy)])).await?;
    k.create_pod(ns, "init-1", &r1, &[("app", "init")], &[])
        .await?;
    k.set_pod_ready(ns, "init-1", true).await?;
    let n = expect_node(k, &r1, &[], &owned(&[])).await?;
    check_bootstrapped(&n, policy, &uid1)?;
    // Completed: a failing init pod does not bring the taint back.
    k.set_pod_ready(ns, "init-1", false).await?;
    always_for(
        "r1 to stay untainted after its bootstrap",
        Duration::from_secs(1),
        async || check_node(k, &r1, &[], &owned(&[])).await.map(|_| ()),
    )
    .await?;

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    expect_clean(k, &r1).await?;
    let uid2 = k
        .create_policy(s.policy(policy, &[], spec))
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    ensure!(uid1 != uid2, "the re-created policy has the same uid");
    // Re-evaluated: the init pod is not Ready, so the node is held again.
    expect_node(k, &r1, &[TAINT], &owned(&[(ID, policy)])).await?;
    k.set_pod_ready(ns, "init-1", true).await?;
    let n = expect_node(k, &r1, &[], &owned(&[])).await?;
    check_bootstrapped(&n, policy, &uid2)?;
    expect_status(k, policy, "True", "Reconciled", (1, 0, 0)).await?;

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    expect_clean(k, &r1).await?;
    Ok(())
}

/// `for: 3s`: the taint appears only once the condition has matched for 3 s (counted
/// from lastTransitionTime), within a second after; a shorter flap never taints.
pub async fn for_window(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("for");
    let policy = "e2e-for";
    const TAINT: &str = "e2e.nodetaint.io/for:NoSchedule";
    let (f1, f2, f3) = (s.node("1"), s.node("2"), s.node("3"));
    s.create_nodes(k, [&f1, &f2, &f3], &Cond::now("Broken", "False", "Test"))
        .await?;
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/for", "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True", "for": "3s"}]}],
        }),
    ))
    .await?;
    expect_status(k, policy, "True", "Reconciled", (3, 0, 0)).await?;

    let since = now_s();
    let window_end = since.checked_add(SignedDuration::from_secs(3))?;
    // f3 has matched for long already: tainted at once.
    k.set_conditions(
        &f3,
        &[Cond::since(
            "Broken",
            "True",
            "Test",
            since.checked_sub(SignedDuration::from_secs(10))?,
        )],
    )
    .await?;
    k.set_conditions(&f1, &[Cond::since("Broken", "True", "Test", since)])
        .await?;
    k.set_conditions(&f2, &[Cond::since("Broken", "True", "Test", since)])
        .await?;
    expect_node(k, &f3, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    let mut f2_cleared = false;
    let margin = SignedDuration::from_millis(100);
    while Timestamp::now() < window_end.checked_sub(margin)? {
        check_node(k, &f1, &[], &owned(&[])).await?;
        check_node(k, &f2, &[], &owned(&[])).await?;
        // f2 flaps back after 1.5 s, before its window ends.
        if !f2_cleared
            && Timestamp::now() >= since.checked_add(SignedDuration::from_millis(1500))?
        {
            k.set_conditions(&f2, &[Cond::now("Broken", "False", "Test")])
                .await?;
            f2_cleared = true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ensure!(f2_cleared, "f2 was never cleared");
    let started = Instant::now();
    taint_operator_e2e::eventually_within(
        "f1 to be tainted when its window ends",
        Duration::from_secs(3),
        Duration::from_millis(10),
        async || {
            check_node(k, &f1, &[TAINT], &owned(&[(TAINT, policy)]))
                .await
                .map(|_| ())
        },
    )
    .await?;
    let seen = Timestamp::now();
    let after_end = seen.duration_since(window_end);
    println!(
        "for 3s: f1 tainted {} ms after its window ended (waited {} ms at the end)",
        after_end.as_millis(),
        started.elapsed().as_millis()
    );
    ensure!(
        after_end <= SignedDuration::from_secs(1),
        "f1 was tainted {after_end:?} after its window ended (want within 1 s)"
    );
    k.wait_event("Node", &f1, "TaintAdded", &[policy, "Broken=True for 3s"])
        .await?;
    // The flap never taints f2, even after a full window from its first transition.
    always_for(
        "f2 to stay untainted",
        Duration::from_millis(1500),
        async || check_node(k, &f2, &[], &owned(&[])).await.map(|_| ()),
    )
    .await?;
    expect_status_names(k, policy, "True", "Reconciled", (3, 2, 0), &[&f1, &f3]).await?;

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    for n in [&f1, &f2, &f3] {
        expect_clean(k, n).await?;
    }
    Ok(())
}

/// maxTaintedNodes: 1 with 3 matching nodes: one tainted, two pending (LimitReached);
/// when the tainted one recovers, the next one gets the taint.
pub async fn max_tainted_nodes(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("cap");
    let policy = "e2e-cap";
    const TAINT: &str = "e2e.nodetaint.io/cap:NoSchedule";
    let nodes = [s.node("1"), s.node("2"), s.node("3")];
    s.create_nodes(k, &nodes, &Cond::now("Broken", "True", "Test"))
        .await?;
    let tainted = async || -> Result<Vec<String>> {
        let mut out = vec![];
        for n in &nodes {
            if taint_strs(&k.node(n).await?).contains(&TAINT.to_string()) {
                out.push(n.clone());
            }
        }
        Ok(out)
    };
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/cap", "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
            "maxTaintedNodes": 1,
        }),
    ))
    .await?;
    let mut most = 0;
    let first = eventually("one node tainted", async || {
        let t = tainted().await?;
        most = most.max(t.len());
        ensure!(t.len() == 1, "tainted: {t:?}");
        Ok(t[0].clone())
    })
    .await?;
    always_for(
        "no more than one node tainted",
        Duration::from_secs(1),
        async || {
            let t = tainted().await?;
            ensure!(t == [first.clone()], "tainted: {t:?}");
            Ok(())
        },
    )
    .await?;
    ensure!(most <= 1, "{most} nodes were tainted at once");
    let v = expect_status_names(k, policy, "False", "LimitReached", (3, 1, 2), &[&first]).await?;
    ensure!(
        v.message().contains("maxTaintedNodes"),
        "LimitReached message: {:?}",
        v.message()
    );
    check_node(k, &first, &[TAINT], &owned(&[(TAINT, policy)])).await?;

    // The tainted node recovers: its place goes to one of the others.
    let recovered = Instant::now();
    k.set_conditions(&first, &[Cond::now("Broken", "False", "Test")])
        .await?;
    let mut most = 0;
    let second = eventually("the next node to get the taint", async || {
        let t = tainted().await?;
        most = most.max(t.len());
        ensure!(t.len() == 1 && t[0] != first, "tainted: {t:?}");
        Ok(t[0].clone())
    })
    .await?;
    let waited = recovered.elapsed();
    println!(
        "maxTaintedNodes: the next node was tainted {} ms after the tainted one recovered",
        waited.as_millis()
    );
    // Room freed up is used at once, like any other change the operator reacts to.
    ensure!(
        waited <= Duration::from_secs(2),
        "the next node was tainted only {waited:?} after a place freed up"
    );
    ensure!(most <= 1, "{most} nodes were tainted at once");
    check_node(k, &first, &[], &owned(&[])).await?;
    check_node(k, &second, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    expect_status_names(k, policy, "False", "LimitReached", (3, 1, 1), &[&second]).await?;

    // Everyone recovers.
    for n in &nodes {
        k.set_conditions(n, &[Cond::now("Broken", "False", "Test")])
            .await?;
    }
    for n in &nodes {
        expect_node(k, n, &[], &owned(&[])).await?;
    }
    let v = expect_status(k, policy, "True", "Reconciled", (3, 0, 0)).await?;
    ensure_eq!(
        v.message(),
        "0 of 3 selected nodes tainted",
        "Ready message"
    );

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    Ok(())
}
