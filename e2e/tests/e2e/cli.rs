//! `taint-operator explain` and `plan --live` against the live control plane, with
//! the operator running: they must tell what the operator does, and change nothing.
//! Both run with the operator's own kubeconfig (the chart's ClusterRole), so they
//! need no more than it has; the plugin name is run through kubectl itself.

use std::{path::Path, process::Stdio, time::Duration};

use serde_json::{Value, json};
use taint_operator_e2e::{
    Cond, Harness, Result, bail, ensure, ensure_eq, eventually, k8s::taint_strs,
};
use tokio::process::Command;

use crate::common::{Scn, expect_node, owned};

/// What a command printed, and how it ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self, what: &str) -> Result<Value> {
        ensure!(
            self.code == Some(0),
            "{what}: exit {:?}, stderr {:?}",
            self.code,
            self.stderr
        );
        serde_json::from_str(&self.stdout)
            .map_err(|e| format!("{what}: not JSON ({e}): {:?}", self.stdout).into())
    }
}

async fn run(program: &Path, args: &[&str], kubeconfig: &Path, path: Option<&Path>) -> Result<Ran> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(dir) = path {
        let old = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{old}", dir.display()));
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .map_err(|_| format!("{} {args:?} did not exit within 60 s", program.display()))??;
    Ok(Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// `taint-operator ARGS` with the operator's binary and kubeconfig.
async fn cli(h: &Harness, args: &[&str]) -> Result<Ran> {
    let (bin, kubeconfig) = {
        let op = h.op.lock().await;
        (op.bin().to_path_buf(), op.kubeconfig().to_path_buf())
    };
    run(&bin, args, &kubeconfig, None).await
}

async fn explain_json(h: &Harness, node: &str) -> Result<Value> {
    cli(h, &["explain", node, "-o", "json"])
        .await?
        .json(&format!("explain {node}"))
}

fn policy<'v>(e: &'v Value, name: &str) -> Result<&'v Value> {
    e["policies"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .ok_or_else(|| format!("no policy {name} in {e:#}").into())
}

fn reasons(p: &Value) -> Vec<String> {
    p["reasons"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub async fn explain(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("explain");
    let (nic, newer, pods, window) = (
        "e2e-explain-nic",
        "e2e-explain-newer",
        "e2e-explain-pod",
        "e2e-explain-window",
    );
    const NIC_TAINT: &str = "e2e.nodetaint.io/explain-nic";
    const POD_TAINT: &str = "e2e.nodetaint.io/explain-pod";
    const NS: &str = "e2e-explain";
    let (m, p, w) = (s.node("matched"), s.node("pod"), s.node("window"));
    for (n, role) in [(&m, "nic"), (&p, "pod"), (&w, "window")] {
        k.create_node(n, &[s.label(), ("e2e.nodetaint.io/role", role)])
            .await?;
    }
    k.set_conditions(&m, &[Cond::now("Broken", "True", "CableCut")])
        .await?;
    k.set_conditions(&w, &[Cond::now("Slow", "True", "Disk")])
        .await?;
    k.add_foreign_taint(
        &m,
        json!({"key": "example.com/foreign", "value": "x", "effect": "NoSchedule"}),
    )
    .await?;
    k.ensure_namespace(NS).await?;
    k.create_pod(NS, "agent-1", &p, &[("app", "explain-agent")], &[])
        .await?;
    k.set_pod_ready(NS, "agent-1", false).await?;

    let nic_spec = json!({
        "taints": [{"key": NIC_TAINT, "effect": "NoSchedule"}],
        "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
    });
    k.create_policy(s.policy(nic, &[("e2e.nodetaint.io/role", "nic")], nic_spec.clone()))
        .await?;
    k.create_policy(s.policy(
        pods,
        &[("e2e.nodetaint.io/role", "pod")],
        json!({
            "taints": [{"key": POD_TAINT, "effect": "NoSchedule"}],
            "readiness": {"criticalPods": [{
                "name": "agent", "namespace": NS,
                "selector": {"matchLabels": {"app": "explain-agent"}},
            }]},
        }),
    ))
    .await?;
    k.create_policy(s.policy(
        window,
        &[("e2e.nodetaint.io/role", "window")],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/explain-window", "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": "Slow", "status": "True", "for": "10m"}]}],
        }),
    ))
    .await?;
    expect_node(
        k,
        &m,
        &[
            "example.com/foreign=x:NoSchedule",
            &format!("{NIC_TAINT}:NoSchedule"),
        ],
        &owned(&[(&format!("{NIC_TAINT}:NoSchedule"), nic)]),
    )
    .await?;
    expect_node(
        k,
        &p,
        &[&format!("{POD_TAINT}:NoSchedule")],
        &owned(&[(&format!("{POD_TAINT}:NoSchedule"), pods)]),
    )
    .await?;
    // creationTimestamp has whole seconds: the conflicting policy must be newer.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    k.create_policy(s.policy(newer, &[("e2e.nodetaint.io/role", "nic")], nic_spec))
        .await?;

    // A matched node, a foreign taint and a conflict.
    let e = eventually("explain sees the conflict", async || {
        let e = explain_json(h, &m).await?;
        ensure!(
            policy(&e, newer)?["conflictWith"] == nic,
            "conflictWith of {newer}: {}",
            policy(&e, newer)?["conflictWith"]
        );
        Ok(e)
    })
    .await?;
    ensure_eq!(e["node"], json!(m), "node");
    let taints = e["taints"].as_array().cloned().unwrap_or_default();
    let owner_of = |key: &str| {
        taints
            .iter()
            .find(|t| t["key"] == key)
            .map(|t| t["owner"].clone())
    };
    ensure_eq!(
        owner_of(NIC_TAINT),
        Some(json!(nic)),
        "owner of {NIC_TAINT}"
    );
    ensure_eq!(
        owner_of("example.com/foreign"),
        Some(Value::Null),
        "owner of the foreign taint"
    );
    let pn = policy(&e, nic)?;
    ensure!(
        pn["selected"] == true && pn["wantsTaint"] == true && pn["action"] == "none",
        "{nic} on {m}: {pn:#}"
    );
    ensure!(
        reasons(pn).contains(&"condition Broken=True matched".to_string()),
        "reasons of {nic}: {:?}",
        reasons(pn)
    );
    ensure_eq!(
        pn["matchers"][0]["conditions"][0]["reason"],
        json!("CableCut"),
        "reason"
    );
    let pw = policy(&e, newer)?;
    ensure!(
        pw["action"] == "none",
        "the conflict loser does nothing: {pw:#}"
    );
    let pp = policy(&e, pods)?;
    ensure!(
        pp["selected"] == false
            && pp["notSelectedBecause"].as_array().is_some_and(|t| t
                .iter()
                .any(|t| t.as_str().is_some_and(|t| t.contains("role=pod")))),
        "{pods} on {m} should say which selector term fails: {pp:#}"
    );

    // A node held by a critical pod, then released.
    let e = explain_json(h, &p).await?;
    let pp = policy(&e, pods)?;
    ensure!(
        pp["wantsTaint"] == true && pp["action"] == "none",
        "{pods} on {p}: {pp:#}"
    );
    ensure_eq!(
        pp["readiness"]["criticalPods"][0]["pods"],
        json!([{"name": "agent-1", "ready": false}]),
        "critical pods found on {p}"
    );
    ensure!(
        reasons(pp)
            .iter()
            .any(|r| r.contains("critical pod agent is not Ready")),
        "reasons: {:?}",
        reasons(pp)
    );
    k.set_pod_ready(NS, "agent-1", true).await?;
    expect_node(k, &p, &[], &owned(&[])).await?;
    let e = explain_json(h, &p).await?;
    let pp = policy(&e, pods)?;
    ensure!(
        pp["wantsTaint"] == false && pp["action"] == "none" && pp["readiness"]["ready"] == true,
        "{pods} on {p} once the agent is Ready: {pp:#}"
    );

    // A `for` window still running.
    let e = explain_json(h, &w).await?;
    let c = &policy(&e, window)?["matchers"][0]["conditions"][0];
    ensure!(
        c["state"] == "waiting"
            && c["for"] == "10m"
            && c["matchedFor"].is_string()
            && c["taintAt"].is_string(),
        "the window on {w}: {c:#}"
    );
    ensure_eq!(
        policy(&e, window)?["action"],
        json!("none"),
        "action during the window"
    );
    ensure!(
        taint_strs(&k.node(&w).await?).is_empty(),
        "{w} tainted during its window"
    );

    // People read the table.
    let table = cli(h, &["explain", &m]).await?;
    ensure!(
        table.code == Some(0)
            && table.stdout.contains(&format!("Policy {nic} (Continuous)"))
            && table.stdout.contains("example.com/foreign=x:NoSchedule")
            && table.stdout.contains("not the operator's"),
        "explain {m} table (exit {:?}): {}{}",
        table.code,
        table.stdout,
        table.stderr
    );

    // A node that does not exist.
    let missing = s.node("missing");
    let r = cli(h, &["explain", &missing]).await?;
    ensure!(
        r.code == Some(1)
            && r.stdout.is_empty()
            && r.stderr == format!("error: node {missing} not found\n"),
        "explain of a missing node: exit {:?}, stdout {:?}, stderr {:?}",
        r.code,
        r.stdout,
        r.stderr
    );

    // As a kubectl plugin.
    let plugins = h.work_dir.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    let link = plugins.join("kubectl-taintpolicy");
    let _ = std::fs::remove_file(&link);
    let (bin, kubeconfig) = {
        let op = h.op.lock().await;
        (op.bin().to_path_buf(), op.kubeconfig().to_path_buf())
    };
    std::os::unix::fs::symlink(&bin, &link)?;
    let r = run(
        Path::new("kubectl"),
        &["taintpolicy", "explain", &m, "-o", "json"],
        &kubeconfig,
        Some(&plugins),
    )
    .await?;
    let e = r.json("kubectl taintpolicy explain")?;
    ensure_eq!(
        policy(&e, nic)?["wantsTaint"],
        json!(true),
        "through kubectl"
    );
    let help = run(
        Path::new("kubectl"),
        &["taintpolicy", "--help"],
        &kubeconfig,
        Some(&plugins),
    )
    .await?;
    ensure!(
        help.stdout.contains("Usage: kubectl taintpolicy"),
        "the plugin's help should name it as kubectl runs it: {}",
        help.stdout
    );

    for name in [newer, nic, pods, window] {
        k.delete_policy(name).await?;
        k.wait_policy_gone(name).await?;
    }
    for n in [&m, &p] {
        let node = k.node(n).await?;
        if taint_strs(&node)
            .iter()
            .any(|t| t.starts_with("e2e.nodetaint.io/"))
        {
            bail!("operator taints left on {n}: {:?}", taint_strs(&node));
        }
    }
    Ok(())
}

/// The `nodes` entry of a plan report for `node`, if the plan changes it.
fn planned<'v>(report: &'v Value, node: &str) -> Option<&'v Value> {
    report["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["name"] == node)
}

fn changed(report: &Value, node: &str, change: &str) -> Vec<String> {
    planned(report, node)
        .and_then(|n| n[change].as_array())
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    format!(
                        "{}:{}:{}",
                        c["key"].as_str().unwrap_or(""),
                        c["effect"].as_str().unwrap_or(""),
                        c["policy"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub async fn plan_live(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("planlive");
    let name = "e2e-planlive";
    const KEY: &str = "e2e.nodetaint.io/planlive";
    let (n1, n2, n3) = (s.node("1"), s.node("2"), s.node("3"));
    s.create_nodes(k, [&n1, &n2], &Cond::now("Broken", "True", "Test"))
        .await?;
    s.create_nodes(k, [&n3], &Cond::now("Broken", "False", "Test"))
        .await?;
    let policy_file = |status: &str| -> Result<std::path::PathBuf> {
        let mut p = s.policy(
            name,
            &[],
            json!({
                "taints": [{"key": KEY, "effect": "NoSchedule"}],
                "matchers": [{"conditions": [{"type": "Broken", "status": status}]}],
                // As create_policy gives the live one: a replaced matcher plans its
                // removals at once.
                "clearAfter": "0s",
            }),
        );
        p["apiVersion"] = json!("nodetaint.io/v1alpha1");
        p["kind"] = json!("TaintPolicy");
        let path = h.work_dir.join(format!("planlive-{status}.yaml"));
        std::fs::write(&path, serde_json::to_string_pretty(&p)?)?;
        Ok(path)
    };
    let ours = format!("{KEY}:NoSchedule:{name}");

    // add: a policy that is not in the cluster yet.
    let file = policy_file("True")?;
    let file = file.to_str().ok_or("a UTF-8 path")?;
    let report = cli(h, &["plan", "--live", "-f", file, "-o", "json"])
        .await?
        .json("plan --live -f (add)")?;
    ensure_eq!(
        changed(&report, &n1, "add"),
        vec![ours.clone()],
        "add on {n1}"
    );
    ensure_eq!(
        changed(&report, &n2, "add"),
        vec![ours.clone()],
        "add on {n2}"
    );
    ensure!(
        planned(&report, &n3).is_none(),
        "{n3} should not change: {report:#}"
    );
    let summary = report["policies"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .ok_or("no summary of the file's policy")?;
    ensure!(
        summary["selectedNodes"] == 3 && summary["taintedNodes"] == 2,
        "summary: {summary:#}"
    );
    // Read-only: nothing was created or written.
    ensure!(
        k.policies().get_opt(name).await?.is_none(),
        "plan --live created the policy"
    );
    ensure!(
        taint_strs(&k.node(&n1).await?).is_empty(),
        "plan --live tainted {n1}"
    );
    let table = cli(h, &["plan", "--live", "-f", file]).await?;
    ensure!(
        table.code == Some(0)
            && table.stdout.lines().any(|l| {
                let cells: Vec<&str> = l.split_whitespace().collect();
                cells == [n1.as_str(), "add", &format!("{KEY}:NoSchedule"), name]
            }),
        "plan --live table: {}{}",
        table.stdout,
        table.stderr
    );

    // replace: the cluster has the policy; the file changes its matcher.
    k.create_policy(serde_json::from_str(&std::fs::read_to_string(file)?)?)
        .await?;
    let id = format!("{KEY}:NoSchedule");
    for n in [&n1, &n2] {
        expect_node(k, n, &[&id], &owned(&[(&id, name)])).await?;
    }
    let replaced = policy_file("False")?;
    let report = cli(
        h,
        &[
            "plan",
            "--live",
            "-f",
            replaced.to_str().ok_or("a UTF-8 path")?,
            "-o",
            "json",
        ],
    )
    .await?
    .json("plan --live -f (replace)")?;
    ensure_eq!(
        changed(&report, &n1, "remove"),
        vec![ours.clone()],
        "remove on {n1}"
    );
    ensure_eq!(
        changed(&report, &n2, "remove"),
        vec![ours.clone()],
        "remove on {n2}"
    );
    ensure_eq!(
        changed(&report, &n3, "add"),
        vec![ours.clone()],
        "add on {n3}"
    );
    // Unchanged file: the cluster is converged, nothing to do on our nodes.
    let report = cli(h, &["plan", "--live", "-f", file, "-o", "json"])
        .await?
        .json("plan --live -f (same)")?;
    for n in [&n1, &n2, &n3] {
        ensure!(
            planned(&report, n).is_none(),
            "{n} should not change: {report:#}"
        );
    }

    // without: the policy treated as deleted, its taints removed as its finalizer would.
    let report = cli(h, &["plan", "--live", "--without", name, "-o", "json"])
        .await?
        .json("plan --live --without")?;
    for n in [&n1, &n2] {
        ensure_eq!(
            changed(&report, n, "remove"),
            vec![ours.clone()],
            "remove on {n}"
        );
        let why = planned(&report, n)
            .map(|p| p["reasons"].to_string())
            .unwrap_or_default();
        ensure!(
            why.contains("policy is being deleted"),
            "reasons on {n}: {why}"
        );
    }
    for n in [&n1, &n2] {
        expect_node(k, n, &[&id], &owned(&[(&id, name)])).await?;
    }
    let r = cli(h, &["plan", "--live", "--without", "e2e-planlive-nope"]).await?;
    ensure!(
        r.code == Some(2)
            && r.stderr
                .contains("--without e2e-planlive-nope: there is no TaintPolicy"),
        "--without an unknown policy: exit {:?}, stderr {:?}",
        r.code,
        r.stderr
    );

    k.delete_policy(name).await?;
    k.wait_policy_gone(name).await?;
    for n in [&n1, &n2] {
        expect_node(k, n, &[], &owned(&[])).await?;
    }
    Ok(())
}
