//! `chaos`: a seeded soak of the operator under random, overlapping faults, judged
//! by a checker that trusts only its own watches and the API server's audit log.
//!
//!     cargo run --release -p taint-operator-e2e --bin chaos -- --seed 7 --duration 30m --nodes 500
//!
//! A bare control plane (e2e/control-plane.sh, with an audit log) runs three
//! replicas of the operator with leader election, each as a user of its own
//! behind a proxy of its own; about ten policies cover matchers with `for`
//! windows, readiness with critical pods, `maxTaintedNodes`, `spec.eviction` with
//! PodDisruptionBudgets, and `suspend` and `dryRun` toggles. The run is a series
//! of cycles drawn from the seed (`schedule`): a chaos window of actors and
//! overlapping faults, a heal and a convergence check, a quiet window of actors
//! alone and another convergence check. The report ends with one JSON line; the
//! exit code is 0 only when no invariant was violated (e2e/README.md).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use clap::Parser;
use futures::future::join_all;
use serde_json::json;
use taint_operator_e2e::{Result, operator::locate_binary};
use tokio::{sync::mpsc, time::Instant};

mod actors;
mod audit;
mod checker;
mod converge;
mod faults;
mod record;
mod rng;
mod schedule;
mod setup;
mod watches;
mod world;

use crate::{
    actors::Actors,
    checker::{Checker, INVARIANTS},
    faults::Faults,
    record::{Event, now_micros},
    schedule::{Action, Digest, Schedule},
};

#[derive(Parser)]
#[command(about = "A seeded chaos soak of taint-operator on a bare control plane")]
struct Args {
    /// The schedule's seed: the same seed replays the same actions and faults.
    #[arg(long)]
    seed: u64,
    /// How long to run cycles (a Go duration: 30m, 2m, 90s); the cycle under way finishes.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    duration: Duration,
    /// Nodes in the fleet at the start.
    #[arg(long, default_value_t = 500)]
    nodes: usize,
    /// Operator replicas electing a leader.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Have an actor remove a foreign taint as the operator's field manager: the
    /// checker must report it (and the exit code is then 1).
    #[arg(long)]
    inject_violation: bool,
    /// The operator binary (default: E2E_OPERATOR_BIN, else `cargo build -p taint-operator`).
    #[arg(long)]
    operator_bin: Option<PathBuf>,
    /// Where logs, the audit log and the report go (default: a new directory in /tmp).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the directory even when the run passes.
    #[arg(long)]
    keep: bool,
}

fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    watches::go_seconds(s)
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s as u64))
        .ok_or_else(|| format!("{s:?}: not a duration like 30m, 2m or 90s"))
}

#[derive(Default)]
struct ActionStats(BTreeMap<&'static str, (u64, u64)>);

async fn run_actions(
    actors: &Arc<Actors>,
    actions: &[(Duration, Action)],
    start: Instant,
    stats: &Arc<Mutex<ActionStats>>,
) {
    let mut running = Vec::new();
    for (at, action) in actions {
        tokio::time::sleep_until(start + *at).await;
        let (actors, stats, action) = (actors.clone(), stats.clone(), action.clone());
        running.push(tokio::spawn(async move {
            let outcome = tokio::time::timeout(Duration::from_secs(15), actors.act(&action)).await;
            let ok = matches!(outcome, Ok(Ok(())));
            if let Ok(Err(e)) = &outcome
                && action == Action::InjectViolation
            {
                println!("chaos: the injected violation failed: {e}");
            }
            let mut s = stats.lock().expect("stats lock");
            let entry = s.0.entry(action.kind()).or_default();
            if ok {
                entry.0 += 1;
            } else {
                entry.1 += 1;
            }
        }));
    }
    join_all(running).await;
}

struct Run {
    cluster: Arc<setup::Cluster>,
    checker: Arc<Mutex<Checker>>,
    tx: mpsc::UnboundedSender<Event>,
}

impl Run {
    /// Waits (20 s at most) until the checker's node view equals a fresh list.
    async fn wait_for_checker(&self) {
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
            kube::Api::all(self.cluster.client.clone());
        let params = kube::api::ListParams::default().labels(&format!("{}=1", world::RUN_LABEL));
        for _ in 0..100 {
            if let Ok(list) = nodes.list(&params).await {
                let fresh: BTreeMap<String, record::NodeState> = list
                    .items
                    .iter()
                    .map(|n| (kube::ResourceExt::name_any(n), watches::node_state(n)))
                    .collect();
                if self
                    .checker
                    .lock()
                    .expect("checker lock")
                    .sees_nodes(&fresh)
                {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!("chaos: the checker's node watch did not catch up within 20 s");
    }

    async fn converge(&self, after: String) {
        let (seconds, diff) = converge::wait(
            &self.cluster.client,
            &self.cluster.operator_bin,
            &self.cluster.dir,
        )
        .await;
        println!(
            "chaos: {after}: {} in {seconds:.1} s",
            if diff.is_empty() {
                "converged"
            } else {
                "NOT converged"
            }
        );
        let _ = self.tx.send(Event::Converged {
            at: now_micros(),
            after,
            seconds,
            diff,
        });
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let code = match run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("chaos: {e}");
            2
        }
    };
    // At once: the watches and the audit reader would otherwise keep retrying
    // against the stopped control plane while the runtime shuts down.
    std::process::exit(code);
}

async fn run(args: Args) -> Result<i32> {
    let repo_root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ is inside the workspace")
        .to_path_buf();
    let operator_bin = match args.operator_bin.clone() {
        Some(b) => b,
        None => locate_binary(&repo_root).await?,
    };
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "taint-operator-chaos-{}-{}",
            args.seed,
            std::process::id()
        ))
    });
    let options = setup::Options {
        dir: dir.clone(),
        replicas: args.replicas,
        operator_bin,
    };
    let Some(cluster) = setup::start(&repo_root, &options).await? else {
        return Ok(3);
    };
    let cluster = Arc::new(cluster);
    println!(
        "chaos: seed {}, {} nodes, {} replicas; logs in {}",
        args.seed,
        args.nodes,
        args.replicas,
        dir.display()
    );
    setup::populate(&cluster, args.nodes).await?;

    let (tx, mut rx) = mpsc::unbounded_channel();
    watches::start(
        &cluster.client,
        &[world::SYSTEM_NS, world::APPS_NS],
        tx.clone(),
    );
    tokio::spawn(audit::follow(
        cluster.audit_log.clone(),
        setup::LEASE_NAME.into(),
        tx.clone(),
    ));
    let checker = Arc::new(Mutex::new(Checker::new()));
    tokio::spawn({
        let checker = checker.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            let mut reported = 0;
            loop {
                tokio::select! {
                    e = rx.recv() => match e {
                        Some(e) => checker.lock().expect("checker lock").observe(e),
                        None => break,
                    },
                    _ = tick.tick() => {
                        let mut c = checker.lock().expect("checker lock");
                        c.settle(now_micros());
                        for v in &c.violations()[reported..] {
                            println!("chaos: VIOLATION {}: {}", v.invariant, v.what);
                        }
                        reported = c.violations().len();
                    }
                }
            }
        }
    });

    let stop = Arc::new(AtomicBool::new(false));
    let actors = Arc::new(Actors::new(
        cluster.client.clone(),
        tx.clone(),
        args.nodes,
        args.seed,
    ));
    tokio::spawn(actors.clone().run_cluster_duties(stop.clone()));
    let faults = Arc::new(Faults::new(cluster.clone(), tx.clone()));
    let supervisor = tokio::spawn(faults.clone().supervise(stop.clone()));
    let run = Run {
        cluster: cluster.clone(),
        checker: checker.clone(),
        tx: tx.clone(),
    };
    faults.wait_for_leader().await?;
    run.converge("start".into()).await;

    let stats = Arc::new(Mutex::new(ActionStats::default()));
    let mut schedule = Schedule::new(args.seed, args.nodes, args.replicas, args.inject_violation);
    let mut digest = Digest::default();
    let started = Instant::now();
    let mut cycles = 0;
    while started.elapsed() < args.duration {
        let cycle = schedule.next_cycle();
        digest.add(&cycle);
        cycles += 1;
        let kinds: Vec<&str> = cycle.faults.iter().map(|f| f.kind.name()).collect();
        println!(
            "chaos: cycle {}: {} s of chaos ({} actions; {}), then {} s quiet",
            cycle.index,
            cycle.chaos.as_secs(),
            cycle.chaos_actions.len(),
            kinds.join(", "),
            cycle.quiet.as_secs()
        );
        let w0 = Instant::now();
        let fault_runs = join_all(cycle.faults.iter().map(|f| faults.run(f, w0)));
        let (outcomes, ()) = tokio::join!(
            fault_runs,
            run_actions(&actors, &cycle.chaos_actions, w0, &stats)
        );
        for (plan, outcome) in cycle.faults.iter().zip(outcomes) {
            match outcome {
                Ok(true) => {}
                Ok(false) => println!(
                    "chaos: {} skipped: the same kind was still under way",
                    plan.kind.name()
                ),
                Err(e) => println!("chaos: {} failed: {e}", plan.kind.name()),
            }
        }
        while !faults.all_healed().await {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        run.converge(format!("cycle {} heal", cycle.index)).await;
        let _ = tx.send(Event::Quiet {
            at: now_micros(),
            open: true,
        });
        run_actions(&actors, &cycle.quiet_actions, Instant::now(), &stats).await;
        run.converge(format!("cycle {} quiet", cycle.index)).await;
        // The window closes once the checker's node watch has shown every change
        // the window's writes made: a watch running behind would count writes
        // against changes it has not delivered yet.
        run.wait_for_checker().await;
        let _ = tx.send(Event::Quiet {
            at: now_micros(),
            open: false,
        });
    }
    stop.store(true, Ordering::Relaxed);
    let _ = supervisor.await;
    // The audit log's last entries and the last switches' grace.
    tokio::time::sleep(
        Duration::from_micros((checker::AUDIT_DELAY + checker::SWITCH_GRACE) as u64)
            + Duration::from_secs(1),
    )
    .await;
    for r in &cluster.replicas {
        let _ = r.op.lock().await.kill9().await;
    }
    let injected = actors.injected.lock().await.clone();
    let report = {
        let mut c = run.checker.lock().expect("checker lock");
        c.finish();
        report(
            &args,
            &c,
            cycles,
            started.elapsed(),
            &digest,
            &stats.lock().expect("stats lock"),
            injected,
        )
    };
    std::fs::write(dir.join("report.txt"), &report.text)?;
    print!("{}", report.text);
    if report.violations > 0 || args.keep {
        cluster.keep();
    }
    cluster.stop();
    println!("{}", report.json);
    Ok(if report.violations == 0 { 0 } else { 1 })
}

struct Report {
    text: String,
    json: String,
    violations: usize,
}

fn report(
    args: &Args,
    c: &Checker,
    cycles: usize,
    ran: Duration,
    digest: &Digest,
    stats: &ActionStats,
    injected: Option<String>,
) -> Report {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = writeln!(t, "\n== chaos report ==");
    let _ = writeln!(
        t,
        "seed {}, {} nodes, {} replicas; {cycles} cycles in {:.0} s; schedule digest {digest}",
        args.seed,
        args.nodes,
        args.replicas,
        ran.as_secs_f64()
    );
    let _ = writeln!(t, "faults injected:");
    for kind in schedule::FAULT_KINDS {
        let _ = writeln!(
            t,
            "  {:<15} {}",
            kind.name(),
            c.faults().get(kind.name()).copied().unwrap_or(0)
        );
    }
    let _ = writeln!(t, "actions (done / refused or failed):");
    for (kind, (ok, failed)) in &stats.0 {
        let _ = writeln!(t, "  {kind:<16} {ok} / {failed}");
    }
    let _ = writeln!(t, "checks per invariant:");
    for inv in INVARIANTS {
        let _ = writeln!(
            t,
            "  {inv:<22} {}",
            c.checks().get(inv).copied().unwrap_or(0)
        );
    }
    let times: Vec<f64> = c.converge_times().iter().map(|(_, s)| *s).collect();
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    if let (Some(max), false) = (sorted.last(), sorted.is_empty()) {
        let _ = writeln!(
            t,
            "time to converge after a heal or a quiet window ({} checks): median {:.1} s, max {max:.1} s",
            sorted.len(),
            sorted[sorted.len() / 2]
        );
        let per: Vec<String> = c
            .converge_times()
            .iter()
            .map(|(a, s)| format!("{a} {s:.1}s"))
            .collect();
        let _ = writeln!(t, "  {}", per.join(", "));
    }
    let cov = &c.coverage;
    for (policy, (peak, cap)) in &cov.cap_peaks {
        let _ = writeln!(
            t,
            "capped policy {policy}: its taints on at most {peak} nodes at once, cap {cap}"
        );
    }
    let _ = writeln!(
        t,
        "evictions by the replicas judged: {}; switches to NoExecute judged: {} after a drain, {} after drainTimeout",
        cov.evictions, cov.switches_drained, cov.switches_timed_out
    );
    if cov.quiet_windows_relisted > 0 {
        let _ = writeln!(
            t,
            "quiet windows not judged because the checker's node watch listed again in them: {}",
            cov.quiet_windows_relisted
        );
    }
    let q = c.quiet_totals;
    let _ = writeln!(
        t,
        "quiet windows: {} operator node writes for {} changes of what the operator keeps on nodes",
        q.writes, q.transitions
    );
    if let Some(what) = &injected {
        let caught = c.violations().iter().any(|v| {
            v.invariant == checker::FOREIGN
                && what.contains(
                    v.what
                        .split(':')
                        .next()
                        .unwrap_or("?")
                        .trim_start_matches("node "),
                )
        });
        let _ = writeln!(
            t,
            "injected violation: {what}: {}",
            if caught { "caught" } else { "NOT caught" }
        );
    }
    let _ = writeln!(t, "violations: {}", c.violations().len());
    for v in c.violations() {
        let _ = writeln!(
            t,
            "- [{}] at {}: {}",
            v.invariant,
            checker::time_of_day(v.at),
            v.what
        );
        for line in &v.context {
            let _ = writeln!(t, "    {line}");
        }
    }
    let faults: BTreeMap<&str, u64> = schedule::FAULT_KINDS
        .iter()
        .map(|k| (k.name(), c.faults().get(k.name()).copied().unwrap_or(0)))
        .collect();
    let checks: BTreeMap<&str, u64> = INVARIANTS
        .iter()
        .map(|i| (*i, c.checks().get(i).copied().unwrap_or(0)))
        .collect();
    let json = json!({"seed": args.seed, "faults": faults, "checks": checks, "violations": c.violations().len()});
    Report {
        text: t,
        json: json.to_string(),
        violations: c.violations().len(),
    }
}
