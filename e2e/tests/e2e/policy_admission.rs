//! The TaintPolicy validating webhook, registered with a `url` client config against
//! a replica serving it on loopback: `kubectl apply` of a policy whose regex does
//! not compile fails naming the field and stores nothing; `kubectl apply
//! --dry-run=server` of a good one prints its impact (and other warnings) and
//! stores nothing.

use std::path::PathBuf;

use k8s_openapi::{ByteString, api::admissionregistration::v1::ValidatingWebhookConfiguration};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::{Value, json};
use taint_operator_e2e::{Cond, Harness, Result, bail, ensure, eventually, free_port};

use crate::{
    common::{SCENARIO_LABEL, Scn},
    webhook::make_certs,
};

const WEBHOOK_NAME: &str = "e2e-taint-operator-policies";

/// Deletes the webhook configuration when dropped, whatever happened (with
/// `failurePolicy: Fail` and its server gone it would refuse this scenario's policies).
struct ConfigGuard {
    admin_kubeconfig: PathBuf,
}

impl Drop for ConfigGuard {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args([
                "delete",
                "validatingwebhookconfiguration",
                WEBHOOK_NAME,
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
    }
}

pub async fn policy_webhook(h: &Harness) -> Result {
    let dir = h.work_dir.join("policy-webhook");
    std::fs::create_dir_all(&dir)?;
    let ca = make_certs(&dir).await?;
    let port = free_port()?;
    let mut replica =
        h.op.lock()
            .await
            .sibling(
                "e2e-policy-webhook",
                h.work_dir.join("operator-policy-webhook.log"),
            )
            .with_args([
                "--webhook-addr".to_string(),
                format!("127.0.0.1:{port}"),
                "--webhook-cert-file".to_string(),
                dir.join("tls.crt").display().to_string(),
                "--webhook-key-file".to_string(),
                dir.join("tls.key").display().to_string(),
            ]);
    let guard = ConfigGuard {
        admin_kubeconfig: h.admin_kubeconfig.clone(),
    };
    let outcome = match replica.start().await {
        Ok(()) => checks(h, port, &ca).await,
        Err(e) => Err(e),
    };
    let api: Api<ValidatingWebhookConfiguration> = Api::all(h.k.client.clone());
    let cleanup = async {
        match api.delete(WEBHOOK_NAME, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        let s = Scn("admit");
        h.k.delete_policies_labelled(s.label().0, s.label().1)
            .await?;
        replica.stop().await
    }
    .await;
    drop(guard);
    match (outcome, cleanup) {
        (Ok(()), cleanup) => cleanup,
        (Err(e), _) => Err(format!(
            "{e}\n--- log of replica e2e-policy-webhook (last 40 lines of {}):\n{}",
            replica.log_path().display(),
            replica.log_tail(40)
        )
        .into()),
    }
}

/// A policy of this scenario as `kubectl apply` reads it.
fn manifest(s: Scn, name: &str, spec: Value) -> String {
    let mut p = s.policy(name, &[], spec);
    p["apiVersion"] = json!("nodetaint.io/v1alpha1");
    p["kind"] = json!("TaintPolicy");
    p.to_string()
}

async fn stored(h: &Harness, name: &str) -> Result<bool> {
    Ok(h.k.policies().get_opt(name).await?.is_some())
}

async fn checks(h: &Harness, port: u16, ca: &str) -> Result {
    let k = &h.k;
    let s = Scn("admit");
    let nodes = [s.node("1"), s.node("2"), s.node("3")];
    for (i, n) in nodes.iter().enumerate() {
        k.create_node(n, &[s.label()]).await?;
        let status = if i < 2 { "Kaput" } else { "Fine" };
        k.set_conditions(n, &[Cond::now("NIC", status, "Test")])
            .await?;
    }
    // Registered for TaintPolicy CREATE and UPDATE, for this scenario's policies only.
    let mut config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": WEBHOOK_NAME},
        "webhooks": [{
            "name": "taintpolicies.nodetaint.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "rules": [{
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": ["nodetaint.io"],
                "apiVersions": ["v1alpha1"],
                "resources": ["taintpolicies"],
                "scope": "Cluster",
            }],
            "objectSelector": {"matchLabels": {SCENARIO_LABEL: s.0}},
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate-taintpolicy")},
        }],
    }))?;
    if let Some(w) = config.webhooks.as_mut().and_then(|w| w.first_mut()) {
        w.client_config.ca_bundle = Some(ByteString(ca.as_bytes().to_vec()));
    }
    let api: Api<ValidatingWebhookConfiguration> = Api::all(k.client.clone());
    api.create(&PostParams::default(), &config).await?;

    // Every regex the schema cannot check, refused with its field; nothing stored.
    let cases = [
        (
            "e2e-admit-status",
            json!({"matchers": [{"conditions": [{"type": "NIC", "status": "Kaput("}]}]}),
            "spec.matchers[0].conditions[0].status: invalid regex \"Kaput(\"",
        ),
        (
            "e2e-admit-reason",
            json!({"matchers": [{"conditions": [{"type": "A", "status": "True"}, {"type": "NIC", "status": "Kaput", "reason": "[z-a]"}]}]}),
            "spec.matchers[0].conditions[1].reason: invalid regex \"[z-a]\"",
        ),
        (
            "e2e-admit-readiness",
            json!({"readiness": {"conditions": [{"type": "NetReady", "status": "(True"}]}}),
            "spec.readiness.conditions[0].status: invalid regex \"(True\"",
        ),
    ];
    for (name, rules, field) in cases {
        let mut spec =
            json!({"taints": [{"key": "e2e.nodetaint.io/admit", "effect": "NoSchedule"}]});
        for (k, v) in rules.as_object().expect("an object") {
            spec[k] = v.clone();
        }
        // The first may come before the API server has the configuration in effect.
        let run = eventually(
            format!("kubectl apply of {name} to be refused"),
            async || {
                let run = h
                    .kubectl_input(&["apply", "-f", "-"], &manifest(s, name, spec.clone()))
                    .await?;
                if run.ok {
                    h.k.policies()
                        .delete(name, &DeleteParams::default())
                        .await
                        .ok();
                    bail!("accepted: {}", run.stdout);
                }
                Ok(run)
            },
        )
        .await?;
        println!("{name}: {}", run.stderr.trim());
        ensure!(
            run.stderr
                .contains("admission webhook \"taintpolicies.nodetaint.io\" denied the request")
                && run.stderr.contains(field),
            "kubectl apply of {name}: want a refusal naming {field:?}, got: {}",
            run.stderr
        );
        ensure!(!stored(h, name).await?, "{name} was stored");
    }

    // A good policy applied with --dry-run=server: its impact, and nothing stored.
    let name = "e2e-admit-good";
    let good = manifest(
        s,
        name,
        json!({
            "taints": [{"key": "e2e.nodetaint.io/admit", "effect": "NoExecute"}],
            "matchers": [{"conditions": [{"type": "NIC", "status": "Kaput"}]}],
            "maxTaintedNodes": 1,
        }),
    );
    let run = h
        .kubectl_input(&["apply", "--dry-run=server", "-f", "-"], &good)
        .await?;
    println!("dry run of {name}:\n{}{}", run.stdout, run.stderr);
    ensure!(run.ok, "dry run of {name} failed: {}", run.stderr);
    let impact = format!(
        "Warning: impact: would taint 1 of 3 selected nodes now ({}); maxTaintedNodes holds back 1 more",
        nodes[0]
    );
    ensure!(
        run.stderr.contains(&impact),
        "dry run of {name}: want {impact:?} in: {}",
        run.stderr
    );
    ensure!(
        run.stderr.contains(
            "Warning: spec.taints[0] (e2e.nodetaint.io/admit:NoExecute) has no spec.eviction"
        ),
        "dry run of {name}: want the NoExecute warning in: {}",
        run.stderr
    );
    ensure!(!stored(h, name).await?, "{name} was stored by a dry run");

    // Stored for real, then a second policy with the same taint: the conflict is a
    // warning, not a refusal.
    let run = h.kubectl_input(&["apply", "-f", "-"], &good).await?;
    ensure!(run.ok, "apply of {name} failed: {}", run.stderr);
    let newer = manifest(
        s,
        "e2e-admit-newer",
        json!({
            "taints": [{"key": "e2e.nodetaint.io/admit", "effect": "NoExecute"}],
            "matchers": [{"conditions": [{"type": "NIC", "status": "Fine"}]}],
            "eviction": {},
        }),
    );
    // The replica's policy cache may take a moment to see the stored one.
    let run = eventually("the conflict warning", async || {
        let run = h
            .kubectl_input(&["apply", "--dry-run=server", "-f", "-"], &newer)
            .await?;
        ensure!(run.ok, "dry run failed: {}", run.stderr);
        ensure!(
            run.stderr.contains(&format!(
                "Warning: conflict: taint e2e.nodetaint.io/admit:NoExecute is owned by older policy {name}"
            )),
            "no conflict warning in: {}",
            run.stderr
        );
        Ok(run)
    })
    .await?;
    println!("dry run of e2e-admit-newer:\n{}", run.stderr);
    Ok(())
}
