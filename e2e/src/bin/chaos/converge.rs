//! Convergence, judged offline: a dump of the cluster at one moment (nodes, pods,
//! policies, as `kubectl get -o yaml` gives them) goes through `taint-operator
//! plan`; the cluster has converged when the plan has nothing to add or remove.

use std::{path::Path, time::Duration};

use k8s_openapi::{
    api::core::v1::{Node, Pod},
    jiff::Timestamp,
};
use kube::{Api, Client, api::ListParams};
use serde_json::{Value, json};
use taint_operator_crd::TaintPolicy;
use taint_operator_e2e::{Result, bail};
use tokio::process::Command;

use crate::world::{APPS_NS, RUN_LABEL, SYSTEM_NS};

/// How long after a heal the cluster may take to match the plan.
pub const CONVERGE_WITHIN: Duration = Duration::from_secs(30);

fn list<T: serde::Serialize>(items: Vec<T>) -> Result<Value> {
    Ok(json!({"apiVersion": "v1", "kind": "List", "items": serde_json::to_value(items)?}))
}

/// The plan's changes, one line each (`node: add k=v:Effect (policy)`), on a dump
/// taken now.
pub async fn plan_diff(client: &Client, operator_bin: &Path, dir: &Path) -> Result<Vec<String>> {
    let now = Timestamp::now();
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = nodes
        .list(&ListParams::default().labels(&format!("{RUN_LABEL}=1")))
        .await?
        .items;
    let mut pods = Vec::new();
    for ns in [SYSTEM_NS, APPS_NS] {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        pods.extend(api.list(&ListParams::default()).await?.items);
    }
    let policies: Api<TaintPolicy> = Api::all(client.clone());
    let policies = policies.list(&ListParams::default()).await?.items;
    let mut cluster = list(nodes)?;
    let pods = list(pods)?;
    cluster["items"]
        .as_array_mut()
        .expect("a list")
        .extend(pods["items"].as_array().cloned().unwrap_or_default());
    let cluster_file = dir.join("dump-cluster.json");
    let policies_file = dir.join("dump-policies.json");
    std::fs::write(&cluster_file, serde_json::to_vec(&cluster)?)?;
    std::fs::write(&policies_file, serde_json::to_vec(&list(policies)?)?)?;
    let out = Command::new(operator_bin)
        .arg("plan")
        .arg("-f")
        .arg(&policies_file)
        .arg("--cluster")
        .arg(&cluster_file)
        .args(["--now", &now.to_string(), "-o", "json"])
        .output()
        .await?;
    if !out.status.success() {
        bail!(
            "taint-operator plan failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let plan: Value = serde_json::from_slice(&out.stdout)?;
    Ok(diff_lines(&plan))
}

pub fn diff_lines(plan: &Value) -> Vec<String> {
    let taint = |t: &Value| {
        let value = t["value"]
            .as_str()
            .map(|v| format!("={v}"))
            .unwrap_or_default();
        let then = t["then"]
            .as_str()
            .map(|e| format!(" then {e}"))
            .unwrap_or_default();
        format!(
            "{}{value}:{}{then} ({})",
            t["key"].as_str().unwrap_or_default(),
            t["effect"].as_str().unwrap_or_default(),
            t["policy"].as_str().unwrap_or_default()
        )
    };
    let mut lines = Vec::new();
    for n in plan["nodes"].as_array().into_iter().flatten() {
        let name = n["name"].as_str().unwrap_or_default();
        for t in n["add"].as_array().into_iter().flatten() {
            lines.push(format!("{name}: add {}", taint(t)));
        }
        for t in n["remove"].as_array().into_iter().flatten() {
            lines.push(format!("{name}: remove {}", taint(t)));
        }
    }
    lines
}

/// Waits until the plan is empty: (seconds taken, what still differed when the
/// time ran out — empty when it converged).
pub async fn wait(client: &Client, operator_bin: &Path, dir: &Path) -> (f64, Vec<String>) {
    let started = tokio::time::Instant::now();
    let mut last = vec!["no dump could be planned".to_string()];
    while started.elapsed() < CONVERGE_WITHIN {
        match plan_diff(client, operator_bin, dir).await {
            Ok(diff) if diff.is_empty() => return (started.elapsed().as_secs_f64(), Vec::new()),
            Ok(diff) => last = diff,
            Err(e) => last = vec![format!("no plan: {e}")],
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    (started.elapsed().as_secs_f64(), last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_json_becomes_one_line_per_change() {
        let plan = json!({"nodes": [{"name": "n1",
            "add": [{"key": "k", "value": "v", "effect": "NoSchedule", "then": "NoExecute", "policy": "p"}],
            "remove": [{"key": "k2", "effect": "NoSchedule", "policy": "p2"}]}], "policies": []});
        assert_eq!(
            diff_lines(&plan),
            [
                "n1: add k=v:NoSchedule then NoExecute (p)",
                "n1: remove k2:NoSchedule (p2)"
            ]
        );
        assert!(diff_lines(&json!({"nodes": [], "policies": []})).is_empty());
    }
}
