//! Day-2 controls on a real API server: `spec.suspend` freezes a policy (a
//! condition flip changes nothing, resuming converges at once, a delete while
//! suspended still cleans up), and `staleAfter` taints a node whose condition's
//! heartbeat stops being renewed, within staleAfter + 1 s.

use std::time::{Duration, Instant};

use serde_json::json;
use taint_operator_e2e::{
    Cond, Harness, Result, always_for, ensure, eventually_within,
    k8s::{now_s, taint_strs},
};

use crate::common::{Scn, check_node, expect_node, expect_status, owned};

pub async fn suspend(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("suspend");
    let policy = "e2e-suspend";
    const TAINT: &str = "e2e.nodetaint.io/suspend:NoSchedule";
    let (a, b) = (s.node("a"), s.node("b"));
    s.create_nodes(k, [&a], &Cond::now("Broken", "True", "Test"))
        .await?;
    s.create_nodes(k, [&b], &Cond::now("Broken", "False", "Test"))
        .await?;
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/suspend", "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
        }),
    ))
    .await?;
    expect_node(k, &a, &[TAINT], &owned(&[(TAINT, policy)])).await?;

    // Suspended: the status says so, and a flip of both nodes changes nothing.
    k.patch_policy(policy, json!({"spec": {"suspend": true}}))
        .await?;
    let v = expect_status(k, policy, "False", "Suspended", (2, 1, 0)).await?;
    ensure!(
        v.message().contains("would keep 1 of 2"),
        "Suspended message: {:?}",
        v.message()
    );
    k.set_conditions(&a, &[Cond::now("Broken", "False", "Test")])
        .await?;
    k.set_conditions(&b, &[Cond::now("Broken", "True", "Test")])
        .await?;
    always_for(
        "both nodes to stay as they were",
        Duration::from_secs(3),
        async || {
            check_node(k, &a, &[TAINT], &owned(&[(TAINT, policy)])).await?;
            check_node(k, &b, &[], &owned(&[])).await?;
            Ok(())
        },
    )
    .await?;
    expect_status(k, policy, "False", "Suspended", (2, 1, 0)).await?;

    // Resumed: the nodes follow at once.
    let resumed = Instant::now();
    k.patch_policy(policy, json!({"spec": {"suspend": false}}))
        .await?;
    eventually_within(
        "both nodes to converge once resumed",
        Duration::from_secs(5),
        Duration::from_millis(50),
        async || {
            check_node(k, &a, &[], &owned(&[])).await?;
            check_node(k, &b, &[TAINT], &owned(&[(TAINT, policy)])).await?;
            Ok(())
        },
    )
    .await?;
    println!(
        "resumed policy converged in {} ms",
        resumed.elapsed().as_millis()
    );
    expect_status(k, policy, "True", "Reconciled", (2, 1, 0)).await?;

    // Suspended again, then deleted: the finalizer still removes its taint.
    k.patch_policy(policy, json!({"spec": {"suspend": true}}))
        .await?;
    expect_status(k, policy, "False", "Suspended", (2, 1, 0)).await?;
    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    check_node(k, &b, &[], &owned(&[])).await?;
    Ok(())
}

pub async fn stale_heartbeat(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("stale");
    let policy = "e2e-stale";
    const TAINT: &str = "e2e.nodetaint.io/stale:NoSchedule";
    const STALE_AFTER: i64 = 5;
    let n = s.node("1");
    let since = now_s();
    let ready = || Cond::since("AgentReady", "True", "Running", since);
    s.create_nodes(k, [&n], &ready()).await?;
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/stale", "effect": "NoSchedule"}],
            "readiness": {"conditions": [{"type": "AgentReady", "status": "True", "staleAfter": format!("{STALE_AFTER}s")}]},
        }),
    ))
    .await?;
    expect_status(k, policy, "True", "Reconciled", (1, 0, 0)).await?;
    // The agent renews its heartbeat every second: the node stays untainted.
    let renewing = Instant::now();
    while renewing.elapsed() < Duration::from_secs(8) {
        k.set_conditions(&n, &[ready().seen_at(now_s())]).await?;
        check_node(k, &n, &[], &owned(&[])).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // It stops: the last heartbeat is the one written now.
    let last = now_s();
    k.set_conditions(&n, &[ready().seen_at(last)]).await?;
    eventually_within(
        "the node to be tainted once its heartbeat is stale",
        Duration::from_secs(STALE_AFTER as u64 + 10),
        Duration::from_millis(50),
        async || check_node(k, &n, &[TAINT], &owned(&[(TAINT, policy)])).await,
    )
    .await?;
    let taken = k_openapi_seconds_since(last);
    println!("tainted {taken:.1} s after the last heartbeat (staleAfter {STALE_AFTER}s)");
    ensure!(
        taken <= STALE_AFTER as f64 + 1.0,
        "tainted {taken:.1} s after the last heartbeat; want within staleAfter + 1 s"
    );
    k.wait_event(
        "Node",
        &n,
        "TaintAdded",
        &["readiness condition AgentReady is Unknown (stale since"],
    )
    .await?;
    // A fresh heartbeat makes it ready again.
    k.set_conditions(&n, &[ready().seen_at(now_s())]).await?;
    expect_node(k, &n, &[], &owned(&[])).await?;
    ensure!(taint_strs(&k.node(&n).await?).is_empty(), "still tainted");
    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    Ok(())
}

/// Seconds from `at` (whole seconds, as the API keeps times) to now.
fn k_openapi_seconds_since(at: k8s_openapi::jiff::Timestamp) -> f64 {
    k8s_openapi::jiff::Timestamp::now()
        .duration_since(at)
        .as_secs_f64()
}
