//! Leader election with two replicas: one leads and only it writes; SIGKILLed, the
//! other takes the Lease over once it has run out and carries on.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, api::DeleteParams};
use serde_json::json;
use taint_operator_e2e::{
    Cond, Harness, Operator, Result, always_for, bail, ensure, ensure_eq, eventually,
    eventually_within,
};

use crate::common::{Scn, expect_clean, expect_node, expect_status, owned};

/// The operator's lease duration (`run.rs`), and how often a waiting replica looks
/// (`leader.rs`: a fifth of it).
const LEASE_DURATION: Duration = Duration::from_secs(15);
const ACQUIRE_RETRY: Duration = Duration::from_secs(3);
const LEASE: &str = "e2e-two-replicas";

async fn holder(api: &Api<Lease>) -> Result<Option<String>> {
    Ok(api
        .get_opt(LEASE)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// The suite's operator stops for this scenario (it would lead and write on its own
/// Lease) and starts again at the end.
pub async fn two_replicas(h: &Harness) -> Result {
    let (mut a, mut b) = {
        let mut op = h.op.lock().await;
        if op.lease_namespace().is_none() {
            println!(
                "no lease namespace (E2E_OPERATOR_NAMESPACE unset): nothing to elect on; skipped"
            );
            return Ok(());
        }
        op.stop().await?;
        (
            op.sibling("e2e-replica-a", h.work_dir.join("operator-a.log"))
                .with_lease_name(LEASE),
            op.sibling("e2e-replica-b", h.work_dir.join("operator-b.log"))
                .with_lease_name(LEASE),
        )
    };
    let outcome = checks(h, &mut a, &mut b).await;
    let logs = |op: &Operator| {
        format!(
            "\n--- log of replica {} (last 30 lines of {}):\n{}",
            op.identity(),
            op.log_path().display(),
            op.log_tail(30)
        )
    };
    let outcome = outcome.map_err(|e| format!("{e}{}{}", logs(&a), logs(&b)).into());
    for r in [&mut a, &mut b] {
        if let Err(e) = r.stop().await {
            println!("stopping {}: {e}", r.identity());
        }
    }
    let restarted = h.op.lock().await.start().await;
    outcome.and(restarted)
}

async fn checks(h: &Harness, a: &mut Operator, b: &mut Operator) -> Result {
    let k = &h.k;
    let s = Scn("leader");
    let policy = "e2e-leader-net";
    const TAINT: &str = "e2e.nodetaint.io/leader:NoSchedule";
    let ns = a.lease_namespace().unwrap_or_default().to_string();
    let leases: Api<Lease> = Api::namespaced(k.client.clone(), &ns);
    match leases.delete(LEASE, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }

    let nodes: Vec<String> = (1..=3).map(|i| s.node(&i.to_string())).collect();
    s.create_nodes(k, &nodes, &Cond::now("NetReady", "False", "Test"))
        .await?;
    // Both become ready (every replica serves /readyz once its policy cache has listed).
    a.start().await?;
    b.start().await?;

    // Exactly one leads, and keeps leading.
    let leader_id = eventually(
        format!("a holder of Lease {ns}/{LEASE}"),
        async || match holder(&leases).await? {
            Some(h) => Ok(h),
            None => bail!("no holder yet"),
        },
    )
    .await?;
    let (leader, follower) = if leader_id == a.identity() {
        (a, b)
    } else if leader_id == b.identity() {
        (b, a)
    } else {
        bail!("Lease {LEASE} is held by {leader_id:?}, neither replica");
    };
    println!("{} leads; {} waits", leader.identity(), follower.identity());
    always_for(
        "the leadership to stay put",
        Duration::from_secs(2),
        async || {
            let h = holder(&leases).await?;
            ensure_eq!(h.as_deref(), Some(leader.identity()), "Lease holder");
            Ok(())
        },
    )
    .await?;
    ensure!(
        leader.log_tail(200).contains("became leader")
            && !follower.log_tail(200).contains("became leader"),
        "exactly the holder should log \"became leader\""
    );
    ensure!(
        follower
            .log_tail(200)
            .contains("another replica leads; waiting"),
        "the follower should log that another replica leads"
    );

    // A new policy is reconciled, by the leader alone.
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/leader", "effect": "NoSchedule"}],
            "readiness": {"conditions": [{"type": "NetReady", "status": "True"}]},
        }),
    ))
    .await?;
    for n in &nodes {
        expect_node(k, n, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    }
    expect_status(k, policy, "True", "Reconciled", (3, 3, 0)).await?;
    let (lm, fm) = (leader.metrics().await?, follower.metrics().await?);
    ensure!(
        lm.node_patches_ok() >= 3 && lm.node_writes() >= 3 && lm.status_writes() >= 1,
        "the leader should have written: {} node patches accepted, {} node writes, {} status writes",
        lm.node_patches_ok(),
        lm.node_writes(),
        lm.status_writes()
    );
    ensure_eq!(
        (fm.node_writes(), fm.status_writes(), fm.api_writes()),
        (0, 0, Vec::<String>::new()),
        "the follower's node writes, status writes and writing API requests"
    );
    // What the chart's TaintOperatorNoLeader alert sums; only the leader computes
    // statuses, so only it reports the policy's readiness.
    ensure_eq!(
        (
            lm.get("taint_operator_leader"),
            fm.get("taint_operator_leader")
        ),
        (1.0, 0.0),
        "taint_operator_leader of the leader and the follower"
    );
    ensure_eq!(
        (
            lm.get_with("taint_operator_policy_ready", &[("policy", policy)]),
            fm.get_with("taint_operator_policy_ready", &[("policy", policy)])
        ),
        (1.0, 0.0),
        "taint_operator_policy_ready of the leader and the follower"
    );
    println!(
        "leader: {} node writes, {} status writes; follower: none (API writes {:?})",
        lm.node_writes(),
        lm.status_writes(),
        fm.api_writes()
    );

    // SIGKILL the leader: no release. The follower takes over once the Lease ran out.
    leader.kill9().await?;
    let killed = Instant::now();
    let before = leases
        .get(LEASE)
        .await?
        .spec
        .ok_or("the Lease has no spec")?;
    let last_renewal = before
        .renew_time
        .as_ref()
        .ok_or("the Lease has no renewTime")?
        .0;
    let deadline = LEASE_DURATION + ACQUIRE_RETRY + Duration::from_secs(5);
    let after = eventually_within(
        format!("{} to take Lease {LEASE} over", follower.identity()),
        deadline,
        Duration::from_millis(100),
        async || {
            let spec = leases.get(LEASE).await?.spec.ok_or("no spec")?;
            ensure_eq!(
                spec.holder_identity.as_deref(),
                Some(follower.identity()),
                "Lease holder"
            );
            Ok(spec)
        },
    )
    .await?;
    let took = killed.elapsed();
    let acquired = after
        .acquire_time
        .as_ref()
        .ok_or("the Lease has no acquireTime")?
        .0;
    let waited = acquired.duration_since(last_renewal);
    println!(
        "{} took over {:.1} s after the SIGKILL, {:.1} s after the last renewal",
        follower.identity(),
        took.as_secs_f64(),
        waited.as_secs_f64()
    );
    ensure!(
        waited.as_secs_f64() >= LEASE_DURATION.as_secs_f64() - 0.5,
        "taken over {waited:?} after the last renewal, before the {LEASE_DURATION:?} lease ran out"
    );
    ensure_eq!(
        after.lease_transitions,
        Some(before.lease_transitions.unwrap_or(0) + 1),
        "leaseTransitions"
    );

    // The new leader converges new changes: a node gets ready, a new node joins.
    let writes0 = follower.metrics().await?.node_writes();
    k.set_conditions(&nodes[0], &[Cond::now("NetReady", "True", "Test")])
        .await?;
    let joined = s.node("4");
    k.create_node(&joined, &[s.label()]).await?;
    k.set_conditions(&joined, &[Cond::now("NetReady", "False", "Test")])
        .await?;
    expect_node(k, &nodes[0], &[], &owned(&[])).await?;
    expect_node(k, &joined, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    for n in &nodes[1..] {
        expect_node(k, n, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    }
    expect_status(k, policy, "True", "Reconciled", (4, 3, 0)).await?;
    let writes1 = follower.metrics().await?.node_writes();
    ensure!(
        writes1 >= writes0 + 2,
        "the new leader should have written both nodes: node writes {writes0} -> {writes1}"
    );
    ensure!(
        follower.log_tail(400).contains("became leader"),
        "the new leader should log \"became leader\""
    );

    // Cleanup through the new leader's finalizer; on SIGTERM it gives the Lease up.
    k.delete_policies_labelled(s.label().0, s.label().1).await?;
    for n in nodes.iter().chain([&joined]) {
        expect_clean(k, n).await?;
    }
    follower.stop().await?;
    eventually(
        "the Lease to be released on SIGTERM",
        async || match holder(&leases).await? {
            None => Ok(()),
            Some(h) => bail!("still held by {h}"),
        },
    )
    .await?;
    Ok(())
}
