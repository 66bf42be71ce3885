//! kube-apiserver upgraded under a running operator: stopped, and started again
//! one minor version newer on the same etcd (`E2E_UPGRADE_APISERVER_BIN`), as a
//! control-plane upgrade does. Nodes stay tainted across it, none gets a taint
//! twice, the operator's writes are not refused by the newer server, and the
//! nodes whose conditions change once it answers are right within 30 s.
//!
//! A poller of the scenario's own lists the nodes every 200 ms throughout and
//! judges each list it gets: the nodes whose conditions do not change must keep
//! exactly the taints they had.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use kube::api::ListParams;
use serde_json::json;
use taint_operator_e2e::{Cond, Harness, Result, bail, eventually_within, k8s::taint_strs};

use crate::common::{Scn, check_node, owned};

const NODES: usize = 8;
const CONVERGE: Duration = Duration::from_secs(30);

/// The suite's operator stops for the scenario: a sibling without leader election
/// runs it, as in the restart scenarios. A leader whose API server is away longer
/// than its renew deadline exits by design, and its Deployment starts it again;
/// kube-apiserver 1.36.2 took 12 s to serve again here, past the 10 s deadline.
pub async fn apiserver_upgrade(h: &Harness) -> Result {
    if std::env::var_os("E2E_UPGRADE_APISERVER_BIN").is_none() || h.own_apiserver().is_none() {
        return upgrade_with(h, None).await;
    }
    let mut op = {
        let mut suite_op = h.op.lock().await;
        suite_op.stop().await?;
        suite_op
            .sibling("e2e-upgrade", h.work_dir.join("operator-upgrade.log"))
            .without_leader_election()
    };
    let outcome = match op.start().await {
        Ok(()) => upgrade_with(h, Some(&op)).await,
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
    let restarted = h.op.lock().await.start().await;
    outcome.and(restarted)
}

async fn upgrade_with(h: &Harness, op: Option<&taint_operator_e2e::Operator>) -> Result {
    let Some(newer) = std::env::var_os("E2E_UPGRADE_APISERVER_BIN") else {
        println!(
            "E2E_UPGRADE_APISERVER_BIN is not set (a kube-apiserver one minor version newer than KUBE_APISERVER_BIN): skipped"
        );
        return Ok(());
    };
    if h.own_apiserver().is_none() {
        println!(
            "the suite runs against E2E_KUBECONFIG: no API server of its own to upgrade; skipped"
        );
        return Ok(());
    }
    let s = Scn("upgrade");
    let k = &h.k;
    let policy = "e2e-upgrade";
    let drained = "e2e-upgrade-noexecute";
    let no_schedule = "e2e.nodetaint.io/upgrade:NoSchedule";
    let no_execute = "e2e.nodetaint.io/upgrade-down=true:NoExecute";
    let nodes: Vec<String> = (0..NODES).map(|i| s.node(&i.to_string())).collect();
    s.create_nodes(k, &nodes, &Cond::now("Broken", "False", "Test"))
        .await?;
    for (name, spec) in [
        (
            policy,
            json!({
                "taints": [{"key": "e2e.nodetaint.io/upgrade", "effect": "NoSchedule"}],
                "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
            }),
        ),
        (
            drained,
            json!({
                "taints": [{"key": "e2e.nodetaint.io/upgrade-down", "value": "true", "effect": "NoExecute"}],
                "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
            }),
        ),
    ] {
        k.create_policy(s.policy(name, &[], spec)).await?;
    }
    // Nodes 0-3 broken before the upgrade; 0-1 heal and 4-5 break after it; 2-3
    // stay broken and 6-7 healthy throughout.
    for n in &nodes[..4] {
        k.set_conditions(n, &[Cond::now("Broken", "True", "Test")])
            .await?;
    }
    let broken = [no_schedule, no_execute];
    let broken_owners = owned(&[
        ("e2e.nodetaint.io/upgrade:NoSchedule", policy),
        ("e2e.nodetaint.io/upgrade-down:NoExecute", drained),
    ]);
    eventually_within(
        "the broken nodes tainted before the upgrade",
        CONVERGE,
        Duration::from_millis(100),
        async || {
            for n in &nodes[..4] {
                check_node(k, n, &broken, &broken_owners).await?;
            }
            Ok(())
        },
    )
    .await?;
    let before = server_version(h).await?;
    let Some(op) = op else {
        bail!("no operator of the scenario's own");
    };
    let errors_before = op
        .metrics()
        .await?
        .get("taint_operator_reconcile_errors_total");
    // A node patch whose resourceVersion `test` fails is a 422 too (a conflict,
    // planned again): only the status writes' 422s count as refusals.
    let writes_refused = |m: &taint_operator_e2e::Metrics| {
        let requests = "taint_operator_api_requests_total";
        ["400", "406", "415"]
            .iter()
            .map(|code| m.get_with(requests, &[("code", code)]))
            .sum::<f64>()
            + m.get_with(
                requests,
                &[("code", "422"), ("resource", "taintpolicies/status")],
            )
    };
    let refused_before = writes_refused(&op.metrics().await?);

    let stop = Arc::new(AtomicBool::new(false));
    let poller = tokio::spawn(watch_steady(
        k.nodes(),
        nodes[2..4].to_vec(),
        nodes[6..].to_vec(),
        stop.clone(),
    ));
    h.restart_as("apiserver", Some(std::path::Path::new(&newer)))
        .await?;
    let answered = Instant::now();
    let after = server_version(h).await?;
    if after == before {
        bail!("kube-apiserver still reports {before} after the upgrade");
    }
    for n in &nodes[..2] {
        k.set_conditions(n, &[Cond::now("Broken", "False", "Test")])
            .await?;
    }
    for n in &nodes[4..6] {
        k.set_conditions(n, &[Cond::now("Broken", "True", "Test")])
            .await?;
    }
    let none = owned(&[]);
    eventually_within(
        format!("every node right within {CONVERGE:?} of {after} answering"),
        CONVERGE,
        Duration::from_millis(100),
        async || {
            for (i, n) in nodes.iter().enumerate() {
                if (2..6).contains(&i) {
                    check_node(k, n, &broken, &broken_owners).await?;
                } else {
                    check_node(k, n, &[], &none).await?;
                }
            }
            Ok(())
        },
    )
    .await?;
    let converged = answered.elapsed();
    stop.store(true, Ordering::Release);
    let (lists, violations) = poller.await.map_err(|e| format!("the poller: {e}"))?;
    if !violations.is_empty() {
        bail!(
            "{} of {lists} lists showed a steady node's taints changed: {}",
            violations.len(),
            violations.join("; ")
        );
    }
    let metrics = op.metrics().await?;
    let refused = writes_refused(&metrics) - refused_before;
    if refused > 0.0 {
        bail!("the newer API server refused {refused} of the operator's requests (400 or 422)");
    }
    let errors = metrics.get("taint_operator_reconcile_errors_total") - errors_before;
    for name in [policy, drained] {
        let _ = k.delete_policy(name).await;
    }
    println!(
        "kube-apiserver {before} → {after} on the same etcd: every node right {:.1} s after the new server answered; {lists} lists, no steady node changed; 0 requests refused (400, 406, 415, or 422 on a status); {errors} reconcile errors while the server was down",
        converged.as_secs_f64()
    );
    Ok(())
}

/// The API server's `gitVersion`.
async fn server_version(h: &Harness) -> Result<String> {
    let out = h.kubectl(&["version", "-o", "json"]).await?;
    let v: serde_json::Value = serde_json::from_str(&out)?;
    match v["serverVersion"]["gitVersion"].as_str() {
        Some(s) => Ok(s.to_string()),
        None => bail!("kubectl version gave no serverVersion: {out}"),
    }
}

/// Lists the nodes every 200 ms until `stop`, judging every list it gets: the
/// `broken` nodes carry exactly the two taints, the `healthy` ones none. Lists
/// that fail (the server is down) are skipped. Gives the lists judged and what
/// was wrong in them.
async fn watch_steady(
    api: kube::Api<k8s_openapi::api::core::v1::Node>,
    broken: Vec<String>,
    healthy: Vec<String>,
    stop: Arc<AtomicBool>,
) -> (usize, Vec<String>) {
    let want_broken = vec![
        "e2e.nodetaint.io/upgrade-down=true:NoExecute".to_string(),
        "e2e.nodetaint.io/upgrade:NoSchedule".to_string(),
    ];
    let params = ListParams::default().labels("e2e.nodetaint.io/scenario=upgrade");
    let (mut lists, mut violations) = (0, Vec::new());
    while !stop.load(Ordering::Acquire) {
        if let Ok(list) = api.list(&params).await {
            lists += 1;
            for node in &list.items {
                let name = node.metadata.name.clone().unwrap_or_default();
                let got = taint_strs(node);
                let want: &[String] = if broken.contains(&name) {
                    &want_broken
                } else if healthy.contains(&name) {
                    &[]
                } else {
                    continue;
                };
                if got != want {
                    violations.push(format!("{name} had {got:?}"));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (lists, violations)
}
