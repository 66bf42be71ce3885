//! The API server sheds the operator's node writes for a while (429 Too Many
//! Requests) while every node of the scenario breaks. The operator must back off
//! (each node's retries wait longer each time), lose no node, and catch up once
//! node writes are taken again.
//!
//! The 429s come from a validating admission webhook (`e2e/throttle-webhook.py`)
//! that refuses the operator user's node updates while a file exists; kube-apiserver
//! hands the webhook's status code to the client, as it does its own 429s.

use std::{
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use k8s_openapi::ByteString;
use serde_json::json;
use taint_operator_e2e::{Cond, Harness, Metrics, Result, ensure, eventually_within, free_port};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

use crate::{
    common::{Scn, check_node, expect_node, owned},
    webhook::make_certs,
};

const NODES: usize = 20;
const THROTTLED_FOR: Duration = Duration::from_secs(20);
const WEBHOOK: &str = "e2e-throttle-node-writes";
/// The user the operator runs as on the bare control plane (e2e/control-plane.sh).
const OPERATOR_USER: &str = "taint-operator";

/// Deletes the webhook configuration when dropped, whatever happened (with
/// `failurePolicy: Fail` and its server gone it would refuse the scenario's nodes).
struct Cleanup {
    admin_kubeconfig: PathBuf,
    server: Option<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args([
                "delete",
                "validatingwebhookconfiguration",
                WEBHOOK,
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
        if let Some(mut server) = self.server.take() {
            let _ = server.start_kill();
        }
    }
}

fn refused(m: &Metrics) -> f64 {
    m.get_with(
        "taint_operator_api_requests_total",
        &[("verb", "patch"), ("resource", "nodes"), ("code", "429")],
    )
}

pub async fn node_writes_throttled(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("throttle");
    let policy = "e2e-throttle";
    let taint = "e2e.nodetaint.io/throttle:NoSchedule";
    let nodes: Vec<String> = (0..NODES).map(|i| s.node(&format!("{i:02}"))).collect();
    s.create_nodes(k, &nodes, &Cond::now("Broken", "False", "Test"))
        .await?;
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/throttle", "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
        }),
    ))
    .await?;
    for n in &nodes {
        expect_node(k, n, &[], &owned(&[])).await?;
    }

    // The webhook server, refusing from the start.
    let dir = h.work_dir.join("throttle");
    std::fs::create_dir_all(&dir)?;
    let ca = make_certs(&dir).await?;
    let throttle_file = dir.join("throttle-on");
    std::fs::write(&throttle_file, "")?;
    let port = free_port()?;
    let mut server = Command::new("python3")
        .arg(h.repo_root.join("e2e/throttle-webhook.py"))
        .args(["--port", &port.to_string(), "--user", OPERATOR_USER])
        .arg("--cert")
        .arg(dir.join("tls.crt"))
        .arg("--key")
        .arg(dir.join("tls.key"))
        .arg("--throttle-file")
        .arg(&throttle_file)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run python3 e2e/throttle-webhook.py: {e}"))?;
    let mut ready = String::new();
    BufReader::new(server.stdout.take().expect("piped"))
        .read_line(&mut ready)
        .await?;
    ensure!(
        ready.trim() == "ready",
        "the throttle webhook did not start: {ready:?}"
    );
    let _cleanup = Cleanup {
        admin_kubeconfig: h.admin_kubeconfig.clone(),
        server: Some(server),
    };
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK},
        "webhooks": [{
            "name": "throttle.e2e.nodetaint.io",
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/"),
                "caBundle": ByteString(ca.into_bytes()),
            },
            "rules": [{"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["nodes"]}],
            "objectSelector": {"matchLabels": {s.label().0: s.label().1}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    });
    let file = dir.join("webhook.json");
    std::fs::write(&file, serde_json::to_vec(&config)?)?;
    h.kubectl(&["apply", "-f", file.to_str().unwrap_or_default()])
        .await?;
    // The API server takes a stored webhook configuration into use a moment later.
    // Until a write as the operator's user is refused, a node could be tainted
    // past the webhook (a node can be tainted 9 ms after its flip).
    eventually_within(
        "the throttle webhook to refuse the operator's node writes",
        Duration::from_secs(15),
        Duration::from_millis(100),
        async || {
            let probe = h
                .kubectl_input(
                    &[
                        "--as",
                        OPERATOR_USER,
                        "annotate",
                        "node",
                        &nodes[0],
                        "e2e.nodetaint.io/throttle-probe=1",
                        "--overwrite",
                        "--dry-run=server",
                    ],
                    "",
                )
                .await?;
            ensure!(
                !probe.ok && probe.stderr.contains("e2e throttling"),
                "a dry-run node write as {OPERATOR_USER} was not refused by the webhook: {}",
                probe.stderr.trim()
            );
            Ok(())
        },
    )
    .await?;

    // Every node breaks while the operator's node writes are refused.
    let start = refused(&h.metrics().await?);
    for n in &nodes {
        k.set_conditions(n, &[Cond::now("Broken", "True", "Test")])
            .await?;
    }
    tokio::time::sleep(THROTTLED_FOR).await;
    let attempts = refused(&h.metrics().await?) - start;
    println!("{attempts:.0} node patches refused with 429 in {THROTTLED_FOR:?} for {NODES} nodes");
    // Retries wait 2, 4, 8, 16 s (each ±50%): in 20 s a node is tried at most 5
    // times. A fixed 2 s retry would be 10 times.
    ensure!(
        attempts >= NODES as f64,
        "only {attempts} refused node patches: not every node was tried"
    );
    ensure!(
        attempts <= 5.0 * NODES as f64,
        "{attempts} refused node patches in {THROTTLED_FOR:?}: the retries do not back off"
    );
    for n in &nodes {
        check_node(k, n, &[], &owned(&[])).await?;
    }

    // Node writes are taken again: every node catches up, at its next retry (at
    // most 32 s × 1.5 after its fifth refusal).
    std::fs::remove_file(&throttle_file)?;
    let back = Instant::now();
    eventually_within(
        format!("all {NODES} nodes tainted once node writes are taken again"),
        Duration::from_secs(60),
        Duration::from_millis(250),
        async || {
            for n in &nodes {
                check_node(k, n, &[taint], &owned(&[(taint, policy)])).await?;
            }
            Ok(())
        },
    )
    .await?;
    println!(
        "every node tainted {:.1} s after node writes were taken again",
        back.elapsed().as_secs_f64()
    );
    Ok(())
}
