//! The chaos soak's two-minute mode (`e2e/src/bin/chaos`): a control plane of its
//! own, three replicas, 60 nodes, a few cycles of overlapping faults, and the
//! harness's injected violation. The run must report exactly that one violation,
//! caught by the foreign-taint invariant, and nothing else.

use std::process::Stdio;

use serde_json::Value;
use taint_operator_e2e::{Harness, Result, bail, ensure, ensure_eq};
use tokio::process::Command;

pub async fn two_minutes(h: &Harness) -> Result {
    if std::env::var_os("KUBE_APISERVER_BIN").is_none() || std::env::var_os("ETCD_BIN").is_none() {
        println!(
            "no KUBE_APISERVER_BIN/ETCD_BIN: the soak starts a control plane of its own; skipped"
        );
        return Ok(());
    }
    let seed = std::env::var("E2E_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        });
    let bin = h.op.lock().await.bin().to_path_buf();
    let dir = h.work_dir.join(format!("chaos-{seed}"));
    println!(
        "chaos soak, seed {seed} (E2E_CHAOS_SEED={seed} replays it), log {}",
        dir.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args([
            "--seed",
            &seed.to_string(),
            "--duration",
            "2m",
            "--nodes",
            "60",
            "--inject-violation",
        ])
        .arg("--operator-bin")
        .arg(&bin)
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = stdout
        .split_once("== chaos report ==")
        .map_or(stdout.as_ref(), |(_, r)| r);
    println!("{report}");
    let Some(summary) = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
    else {
        bail!(
            "no JSON summary on the last line (exit {}); stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ensure_eq!(
        out.status.code(),
        Some(1),
        "exit code with the injected violation"
    );
    ensure_eq!(summary["seed"].as_u64(), Some(seed), "seed in the summary");
    ensure_eq!(
        summary["violations"].as_u64(),
        Some(1),
        "violations: the injected one alone"
    );
    ensure!(
        report.contains("injected violation: removed") && report.contains(": caught"),
        "the report does not say the injected violation was caught"
    );
    ensure!(
        report.contains("- [foreign-taints]"),
        "the one violation is not the foreign taint's"
    );
    let faults: u64 = summary["faults"]
        .as_object()
        .map_or(0, |f| f.values().filter_map(Value::as_u64).sum());
    ensure!(faults >= 2, "only {faults} faults injected in two minutes");
    for invariant in [
        "foreign-taints",
        "max-tainted-nodes",
        "single-writer",
        "converge",
        "writes-per-transition",
    ] {
        ensure!(
            summary["checks"][invariant].as_u64().unwrap_or(0) > 0,
            "invariant {invariant} was never checked: {}",
            summary["checks"]
        );
    }
    Ok(())
}
