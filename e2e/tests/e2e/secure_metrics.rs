//! `--metrics-secure` against the real API server: a second replica (a standby on
//! the suite operator's Lease, so it never writes) serves its metrics port over
//! HTTPS, and real ServiceAccount tokens decide who reads /metrics: none or a
//! made-up one 401, an account without `get` on the non-resource URL 403, one
//! bound to a metrics-reader ClusterRole 200. The operator's user is granted the
//! two reviews as the chart's `<fullname>-metrics-auth` ClusterRole grants them.

use taint_operator_e2e::{Harness, Result, bail, ensure, ensure_eq, operator::http_get};

const NS: &str = "e2e-metrics";
const READER: &str = "scraper";
const NOSY: &str = "nosy";
const ROLES: [&str; 2] = ["e2e-metrics-auth", "e2e-metrics-reader"];

/// The RBAC of the scenario: the operator's user may create the reviews, the
/// scraper may get /metrics; the nosy account has nothing.
fn rbac(operator_user: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {READER}, namespace: {NS}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {NOSY}, namespace: {NS}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: e2e-metrics-auth}}
rules:
  - apiGroups: [authentication.k8s.io]
    resources: [tokenreviews]
    verbs: [create]
  - apiGroups: [authorization.k8s.io]
    resources: [subjectaccessreviews]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: e2e-metrics-auth}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-metrics-auth}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: {operator_user:?}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: e2e-metrics-reader}}
rules:
  - nonResourceURLs: [/metrics]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: e2e-metrics-reader}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-metrics-reader}}
subjects:
  - {{kind: ServiceAccount, name: {READER}, namespace: {NS}}}
"#
    )
}

pub async fn secure_metrics(h: &Harness) -> Result {
    let mut replica = {
        let op = h.op.lock().await;
        if op.lease_namespace().is_none() {
            println!(
                "no lease namespace (E2E_OPERATOR_NAMESPACE unset): a second replica would write too; skipped"
            );
            return Ok(());
        }
        op.sibling(
            "e2e-secure-metrics",
            h.work_dir.join("operator-secure-metrics.log"),
        )
        .with_secure_metrics()
    };
    // Whoever the operator's kubeconfig authenticates as (a client certificate's CN).
    let whoami = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(replica.kubeconfig())
        .args([
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .output()
        .await?;
    let operator_user = String::from_utf8_lossy(&whoami.stdout).trim().to_string();
    ensure!(
        whoami.status.success() && !operator_user.is_empty(),
        "kubectl auth whoami as the operator: {}",
        String::from_utf8_lossy(&whoami.stderr)
    );
    let applied = h
        .kubectl_input(&["apply", "-f", "-"], &rbac(&operator_user))
        .await?;
    ensure!(
        applied.ok,
        "kubectl apply of the scenario's RBAC: {}",
        applied.stderr
    );

    let outcome = async {
        replica.start().await?;
        let token = async |sa: &str| -> Result<String> {
            Ok(
                h.kubectl(&["-n", NS, "create", "token", sa, "--duration", "10m"])
                    .await?
                    .trim()
                    .to_string(),
            )
        };
        let (reader, nosy) = (token(READER).await?, token(NOSY).await?);

        let (status, body) = replica.get_as("/metrics", None).await?;
        ensure_eq!(status, 401, "/metrics without a token ({body:?})");
        let (status, body) = replica
            .get_as("/metrics", Some("e2e-not-a-valid-token"))
            .await?;
        ensure_eq!(status, 401, "/metrics with a made-up token ({body:?})");
        let (status, body) = replica.get_as("/metrics", Some(&nosy)).await?;
        ensure_eq!(
            status,
            403,
            "/metrics as {NS}/{NOSY}, not allowed get on /metrics ({body:?})"
        );
        ensure!(
            body.contains(&format!("system:serviceaccount:{NS}:{NOSY}")),
            "the 403 names the user: {body:?}"
        );
        let (status, body) = replica.get_as("/metrics", Some(&reader)).await?;
        ensure_eq!(status, 200, "/metrics as {NS}/{READER} ({body:?})");
        ensure!(
            body.contains("taint_operator_leader 0"),
            "a standby's scrape says it does not lead: {}",
            &body[..body.len().min(400)]
        );
        // The kubelet's probes carry no token.
        for probe in ["/healthz", "/readyz"] {
            let (status, body) = replica.get_as(probe, None).await?;
            ensure_eq!(status, 200, "{probe} without a token ({body:?})");
        }
        // Nothing answers in the clear on that port.
        if let Ok((status, _)) = http_get(
            replica.metrics_port(),
            "/metrics",
            std::time::Duration::from_secs(2),
        )
        .await
            && status == 200
        {
            bail!("plain HTTP /metrics answered 200 on the secure port");
        }
        println!(
            "secure metrics as {operator_user}: none 401, made-up 401, {NOSY} 403, {READER} 200"
        );
        Ok(())
    }
    .await;

    let outcome: Result = outcome.map_err(|e: taint_operator_e2e::Error| {
        format!(
            "{e}\n--- log of {} (last 30 lines):\n{}",
            replica.identity(),
            replica.log_tail(30)
        )
        .into()
    });
    replica.stop().await?;
    for role in ROLES {
        let _ = h
            .kubectl(&[
                "delete",
                "clusterrolebinding,clusterrole",
                role,
                "--ignore-not-found",
            ])
            .await;
    }
    let _ = h
        .kubectl(&[
            "delete",
            "namespace",
            NS,
            "--wait=false",
            "--ignore-not-found",
        ])
        .await;
    outcome
}
