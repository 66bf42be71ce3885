//! Faults under a running operator: the API server or etcd restarts while node
//! conditions change. After a kube-apiserver restart its watch cache starts over,
//! so every watch that comes back lists again (410 Gone): the path where an update
//! used to be lost until the node changed again.
//!
//! The operator talks to the API server through a proxy the scenario cuts for the
//! restart, so conditions change while it cannot see them (through the scenario's
//! own client) and again right after it is back. Every node must be right within
//! 10 s of the proxy letting the operator through again, every round.

use std::time::{Duration, Instant};

use serde_json::json;
use taint_operator_e2e::{
    Cond, Harness, Proxy, Result, bail, eventually_within, proxy::kubeconfig_through,
};

use crate::common::{Scn, check_node, owned};

const NODES: usize = 6;
const CONVERGE: Duration = Duration::from_secs(10);

/// kube-apiserver restarted `rounds` times.
pub async fn apiserver_restarts(h: &Harness) -> Result {
    restarts(h, "apiserver", Scn("restart-api"), 10).await
}

/// etcd restarted twice.
pub async fn etcd_restarts(h: &Harness) -> Result {
    restarts(h, "etcd", Scn("restart-etcd"), 2).await
}

async fn restarts(h: &Harness, which: &str, s: Scn, rounds: usize) -> Result {
    let Some(apiserver) = h.own_apiserver() else {
        println!(
            "the suite runs against E2E_KUBECONFIG: no control plane of its own to restart; skipped"
        );
        return Ok(());
    };
    let proxy = Proxy::start(apiserver).await?;
    let mut op = {
        let mut suite_op = h.op.lock().await;
        suite_op.stop().await?;
        let kubeconfig = h.work_dir.join(format!("operator-{}.kubeconfig", s.0));
        kubeconfig_through(suite_op.kubeconfig(), proxy.port(), &kubeconfig)?;
        suite_op
            .sibling(
                &format!("e2e-{}", s.0),
                h.work_dir.join(format!("operator-{}.log", s.0)),
            )
            .with_kubeconfig(kubeconfig)
            .without_leader_election()
    };
    let outcome = match op.start().await {
        Ok(()) => rounds_of(h, which, s, rounds, &proxy).await,
        Err(e) => Err(e),
    };
    let outcome = outcome.map_err(|e| {
        format!(
            "{e}\n--- operator log (last 40 lines of {}):\n{}",
            op.log_path().display(),
            op.log_tail(40)
        )
        .into()
    });
    if let Err(e) = op.stop().await {
        println!("stopping {}: {e}", op.identity());
    }
    let _ = h.k.delete_policy(&format!("e2e-{}", s.0)).await;
    let restarted = h.op.lock().await.start().await;
    outcome.and(restarted)
}

async fn rounds_of(h: &Harness, which: &str, s: Scn, rounds: usize, proxy: &Proxy) -> Result {
    let k = &h.k;
    let policy = format!("e2e-{}", s.0);
    let taint = format!("e2e.nodetaint.io/{}:NoSchedule", s.0);
    let nodes: Vec<String> = (0..NODES).map(|i| s.node(&i.to_string())).collect();
    s.create_nodes(k, &nodes, &Cond::now("Broken", "False", "Test"))
        .await?;
    k.create_policy(s.policy(
        &policy,
        &[],
        json!({
            "taints": [{"key": format!("e2e.nodetaint.io/{}", s.0), "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
        }),
    ))
    .await?;
    let (while_cut, after) = nodes.split_at(NODES / 2);
    let mut times = Vec::new();
    for round in 1..=rounds {
        // Odd rounds break every node, even rounds heal them.
        let broken = round % 2 == 1;
        let status = if broken { "True" } else { "False" };
        proxy.cut();
        h.restart(which).await?;
        for n in while_cut {
            k.set_conditions(n, &[Cond::now("Broken", status, "Test")])
                .await?;
        }
        proxy.restore();
        let back = Instant::now();
        for n in after {
            k.set_conditions(n, &[Cond::now("Broken", status, "Test")])
                .await?;
        }
        let (taints, owners): (Vec<&str>, _) = if broken {
            (
                vec![taint.as_str()],
                owned(&[(taint.as_str(), policy.as_str())]),
            )
        } else {
            (vec![], owned(&[]))
        };
        eventually_within(
            format!("round {round}: every node {} within {CONVERGE:?} of the operator reaching the API server again", if broken { "tainted" } else { "untainted" }),
            CONVERGE,
            Duration::from_millis(100),
            async || {
                for n in &nodes {
                    check_node(k, n, &taints, &owners).await?;
                }
                Ok(())
            },
        )
        .await?;
        times.push(back.elapsed());
    }
    let worst = times.iter().max().copied().unwrap_or_default();
    println!(
        "{which} restarted {rounds} times: every node right {:.1?} s after the operator was back (each round: {})",
        worst.as_secs_f64(),
        times
            .iter()
            .map(|t| format!("{:.1}", t.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if times.len() != rounds {
        bail!("{} of {rounds} rounds converged", times.len());
    }
    Ok(())
}
