//! The Node CREATE admission webhook, registered with a `url` client config against a
//! replica serving it on loopback: nodes that register under a readiness policy are
//! stored with its taint already on.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::{ByteString, api::core::v1::Node};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::{Value, json};
use taint_operator_e2e::{
    Harness, Result, always_for, bail, ensure, ensure_eq, eventually, free_port,
    k8s::{map, taint_strs},
};
use tokio::process::Command;

use crate::common::{SCENARIO_LABEL, Scn, check_node, expect_node, node_is, owned};

const WEBHOOK_NAME: &str = "e2e-taint-operator-webhook";

/// Deletes the webhook configuration when dropped, whatever happened: with
/// `failurePolicy: Fail` and its server gone, it would refuse every node it selects.
/// (Synchronous, so it also runs when the scenario is cancelled or panics.)
struct WebhookConfigGuard {
    admin_kubeconfig: PathBuf,
}

impl Drop for WebhookConfigGuard {
    fn drop(&mut self) {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args([
                "delete",
                "mutatingwebhookconfiguration",
                WEBHOOK_NAME,
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "e2e: could not delete MutatingWebhookConfiguration {WEBHOOK_NAME}: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("e2e: cannot run kubectl to delete {WEBHOOK_NAME}: {e}"),
        }
    }
}

async fn run(cmd: &str, args: &[&str], dir: &Path) -> Result<String> {
    let out = Command::new(cmd)
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A throw-away CA and a serving certificate for IP 127.0.0.1 signed by it, in `dir`:
/// `ca.crt`, `tls.crt`, `tls.key`. Returns the CA certificate (PEM).
pub async fn make_certs(dir: &Path) -> Result<String> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=taint-operator-e2e-webhook-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    run("openssl", &ca, dir).await?;
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "tls.key",
        "-out",
        "tls.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    run("openssl", &csr, dir).await?;
    std::fs::write(
        dir.join("tls.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    run(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "tls.crt",
            "-days",
            "1",
            "-extfile",
            "tls.ext",
        ],
        dir,
    )
    .await?;
    Ok(std::fs::read_to_string(dir.join("ca.crt"))?)
}

/// POSTs `body` to the webhook over TLS, verifying its certificate against our CA:
/// (HTTP status, response body).
async fn post(port: u16, dir: &Path, content_type: &str, body: &str) -> Result<(u16, String)> {
    let out = run(
        "curl",
        &[
            "-sS",
            "--max-time",
            "5",
            "--cacert",
            "ca.crt",
            "-X",
            "POST",
            "-H",
            &format!("Content-Type: {content_type}"),
            "--data-binary",
            body,
            "-w",
            "\n%{http_code}",
            &format!("https://127.0.0.1:{port}/mutate-node"),
        ],
        dir,
    )
    .await?;
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    Ok((code.trim().parse()?, body.to_string()))
}

fn node_object(name: &str, labels: &[(&str, &str)], taints: Value) -> Result<Node> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": map(labels)},
        "spec": {"taints": taints},
    }))?)
}

/// The webhook scenario: a replica (leader election on, so it never writes while the
/// suite's operator leads) serves the webhook on a free loopback port.
pub async fn admission(h: &Harness) -> Result {
    let dir = h.work_dir.join("webhook");
    std::fs::create_dir_all(&dir)?;
    let ca = make_certs(&dir).await?;
    let port = free_port()?;
    let mut replica =
        h.op.lock()
            .await
            .sibling("e2e-webhook", h.work_dir.join("operator-webhook.log"))
            .with_args([
                "--webhook-addr".to_string(),
                format!("127.0.0.1:{port}"),
                "--webhook-cert-file".to_string(),
                dir.join("tls.crt").display().to_string(),
                "--webhook-key-file".to_string(),
                dir.join("tls.key").display().to_string(),
            ]);
    let guard = WebhookConfigGuard {
        admin_kubeconfig: h.admin_kubeconfig.clone(),
    };
    let outcome = match replica.start().await {
        Ok(()) => checks(h, port, &dir, &ca).await,
        Err(e) => Err(e),
    };
    // Clean up in every case: the webhook configuration first (nothing may call a
    // webhook that is going away), then the policies, then the replica.
    let api: Api<MutatingWebhookConfiguration> = Api::all(h.k.client.clone());
    let cleanup = async {
        match api.delete(WEBHOOK_NAME, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        let s = Scn("webhook");
        h.k.delete_policies_labelled(s.label().0, s.label().1)
            .await?;
        replica.stop().await
    }
    .await;
    drop(guard);
    match (outcome, cleanup) {
        (Ok(()), cleanup) => cleanup,
        (Err(e), _) => Err(format!(
            "{e}\n--- log of replica e2e-webhook (last 40 lines of {}):\n{}",
            replica.log_path().display(),
            replica.log_tail(40)
        )
        .into()),
    }
}

async fn checks(h: &Harness, port: u16, dir: &Path, ca: &str) -> Result {
    let k = &h.k;
    let s = Scn("webhook");
    let (policy, dry) = ("e2e-webhook-net", "e2e-webhook-dry");
    const NET: &str = "e2e.nodetaint.io/webhook-net=pending:NoSchedule";
    const NET_ID: &str = "e2e.nodetaint.io/webhook-net:NoSchedule";
    const OWN: &str = "admin.example.com/rack=r7:NoSchedule";
    let own = json!({"key": "admin.example.com/rack", "value": "r7", "effect": "NoSchedule"});

    // The webhook answers over TLS with a certificate valid for 127.0.0.1, and a
    // malformed review gets a clear answer rather than a dropped connection.
    let (code, body) = eventually("the webhook to answer over TLS", async || {
        post(port, dir, "application/json", "garbage").await
    })
    .await?;
    ensure_eq!(
        code,
        400,
        "HTTP status for a body that is not JSON ({body})"
    );
    ensure!(
        body.contains("Failed to parse the request body as JSON"),
        "answer to a body that is not JSON: {body:?}"
    );
    let (code, body) = post(port, dir, "application/json", r#"{"hello": "world"}"#).await?;
    ensure_eq!(
        code,
        200,
        "HTTP status for JSON that is not a review ({body})"
    );
    let review: Value = serde_json::from_str(&body)
        .map_err(|e| format!("answer to a malformed review is not JSON ({e}): {body}"))?;
    ensure_eq!(
        (
            review["apiVersion"].as_str(),
            review["kind"].as_str(),
            review["response"]["allowed"].as_bool(),
            review["response"]["status"]["reason"].as_str(),
        ),
        (
            Some("admission.k8s.io/v1"),
            Some("AdmissionReview"),
            Some(false),
            Some("InvalidRequest")
        ),
        "answer to a malformed review: {body}"
    );
    ensure!(
        review["response"]["status"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("malformed AdmissionReview: ")),
        "message of the answer to a malformed review: {body}"
    );

    // Registered with a url client config; it only sees this scenario's nodes.
    let mut config: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": WEBHOOK_NAME},
        "webhooks": [{
            "name": "nodes.nodetaint.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "Never",
            "rules": [{
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["nodes"],
                "scope": "Cluster",
            }],
            "objectSelector": {"matchLabels": {SCENARIO_LABEL: s.0}},
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-node")},
        }],
    }))?;
    if let Some(w) = config.webhooks.as_mut().and_then(|w| w.first_mut()) {
        w.client_config.ca_bundle = Some(ByteString(ca.as_bytes().to_vec()));
    }
    let api: Api<MutatingWebhookConfiguration> = Api::all(k.client.clone());
    api.create(&PostParams::default(), &config).await?;

    // A dry-run readiness policy first, then the real one: once the replica's cache
    // has the second, it has the first.
    k.create_policy(s.policy(
        dry,
        &[("pool", "ready")],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/webhook-dry", "effect": "NoSchedule"}],
            "readiness": {"conditions": [{"type": "NetReady", "status": "True"}]},
            "dryRun": true,
        }),
    ))
    .await?;
    k.create_policy(s.policy(
        policy,
        &[("pool", "ready")],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/webhook-net", "value": "pending", "effect": "NoSchedule"}],
            "readiness": {"conditions": [{"type": "NetReady", "status": "True"}]},
            "mode": "Continuous",
        }),
    ))
    .await?;
    // Until the API server calls the webhook and the replica has both policies, a
    // dry-run create of a matching node comes back without the taint.
    let probe = node_object(&s.node("probe"), &[s.label(), ("pool", "ready")], json!([]))?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually(
        "a dry-run node create to get the policy's taint",
        async || {
            let n = k.nodes().create(&dry_run, &probe).await?;
            node_is(&n, &[NET], &owned(&[(NET_ID, policy)]))
        },
    )
    .await?;

    // A matching node with a taint of its own: stored with the policy's taint added,
    // its own untouched, and the ownership entry; the create response says so.
    let w1 = s.node("match");
    let created = k
        .nodes()
        .create(
            &PostParams::default(),
            &node_object(&w1, &[s.label(), ("pool", "ready")], json!([own]))?,
        )
        .await?;
    node_is(&created, &[OWN, NET], &owned(&[(NET_ID, policy)]))
        .map_err(|e| format!("create response: {e}"))?;
    let order: Vec<&str> = created
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| ts.iter().map(|t| t.key.as_str()).collect())
        .unwrap_or_default();
    ensure_eq!(
        order,
        vec!["admin.example.com/rack", "e2e.nodetaint.io/webhook-net"],
        "taint order in the create response (the node's own first, as registered)"
    );
    let stored = check_node(k, &w1, &[OWN, NET], &owned(&[(NET_ID, policy)])).await?;
    // Nothing else had to write: the operator's reconciler finds the node as it wants it.
    let rv = created.metadata.resource_version.clone();
    ensure_eq!(
        stored.metadata.resource_version,
        rv,
        "resourceVersion read right after create"
    );
    always_for(
        format!("{w1} to stay as created (the reconciler agrees)"),
        Duration::from_secs(2),
        async || {
            let n = check_node(k, &w1, &[OWN, NET], &owned(&[(NET_ID, policy)])).await?;
            ensure_eq!(n.metadata.resource_version, rv, "resourceVersion of {w1}");
            Ok(())
        },
    )
    .await?;

    // A node the policy does not select goes through the webhook unchanged.
    let w2 = s.node("other");
    let created = k
        .nodes()
        .create(
            &PostParams::default(),
            &node_object(&w2, &[s.label(), ("pool", "other")], json!([own]))?,
        )
        .await?;
    node_is(&created, &[OWN], &owned(&[])).map_err(|e| format!("create response: {e}"))?;
    ensure!(
        created.metadata.annotations.is_none(),
        "{w2} got annotations: {:?}",
        created.metadata.annotations
    );
    check_node(k, &w2, &[OWN], &owned(&[])).await?;

    // A node registering with the policy's key and effect (another value) keeps its
    // taint, and gets no second one nor an ownership entry.
    let w3 = s.node("same");
    const SAME: &str = "e2e.nodetaint.io/webhook-net=kubelet:NoSchedule";
    let created = k
        .nodes()
        .create(
            &PostParams::default(),
            &node_object(
                &w3,
                &[s.label(), ("pool", "ready")],
                json!([{"key": "e2e.nodetaint.io/webhook-net", "value": "kubelet", "effect": "NoSchedule"}]),
            )?,
        )
        .await?;
    node_is(&created, &[SAME], &owned(&[])).map_err(|e| format!("create response: {e}"))?;
    always_for(
        format!("{w3} to keep exactly its own taint"),
        Duration::from_secs(1),
        async || check_node(k, &w3, &[SAME], &owned(&[])).await.map(|_| ()),
    )
    .await?;

    // The dry-run policy added nothing to any of them (checked above: exact taint
    // lists). The webhook's taint is the operator's: once the node is ready, it goes.
    k.set_conditions(
        &w1,
        &[taint_operator_e2e::Cond::now("NetReady", "True", "Test")],
    )
    .await?;
    let n = expect_node(k, &w1, &[OWN], &owned(&[])).await?;
    println!(
        "{w1}: webhook taint removed by the reconciler once NetReady=True; left {:?}",
        taint_strs(&n)
    );
    Ok(())
}
