//! `scale`: drives the taint-operator binary on a real, bare control plane
//! (kube-apiserver + etcd, `e2e/control-plane.sh`) and prints a report, as a
//! Markdown table and as JSON. See `docs/performance.md`.
//!
//! Setup: N nodes with a realistic status (conditions, addresses, capacity, node
//! info, a few dozen images), P pods bound to them (a tenth of them critical pods of
//! the readiness policies) and K TaintPolicies. Then, each timed from the first change
//! to the moment the admin watch shows every node right:
//!
//! 1. baseline cold start: a new client lists the nodes page by page and patches the
//!    taints the operator's cold start puts on (the policies' standing taints) onto
//!    each node as its page arrives; then baseline taint / untaint: a minimal
//!    watch-then-patch loop in this process (no engine, no caches) reacting to a
//!    condition of its own. Both run before the operator and again after it stopped.
//!    The loop writes the fault policies' taints on nodes that carry the standing
//!    taints, so both runners' phases make the same nodes;
//! 2. cold start: the operator starts against the full cluster; with `--cold-starts`
//!    it is stopped, its work cleared and a baseline cold start run before each
//!    further one;
//! 3. taint: a condition flipped on every node; 4. untaint: flipped back;
//! 5. readiness: the critical pods become Ready; 6. policy delete: the finalizer
//!    cleans a policy's taint from every node;
//! 7. a quiet period in which the operator must write nothing.
//!
//! With `--paired-rounds`, paired taint and untaint phases run between 4 and 5:
//! one stream of flips reaches both runners at once, each on its half of the
//! nodes (`paired`).
//!
//! The operator runs as its own process with `OPERATOR_KUBECONFIG`; its memory and
//! CPU come from `/proc/<pid>`, its API requests and node writes from its `/metrics`.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use clap::{Parser, ValueEnum};
use kube::{Client, Config};

use crate::{
    driver::drive,
    model::{Critical, node_name, policy_defs},
    operator_proc::operator_version,
    procfs::{loadavg, machine},
    report::Report,
    setup::node_json,
};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T = ()> = std::result::Result<T, Error>;

macro_rules! bail {
    ($($arg:tt)*) => { return Err(format!($($arg)*).into()) };
}

// After `bail!`: a `macro_rules!` macro is only in scope below its definition.
mod apiserver_metrics;
mod baseline;
mod bench;
mod driver;
mod handoff;
mod load;
mod model;
mod observer;
mod operator_proc;
mod own_runtime;
mod paired;
mod phase;
mod procfs;
mod relabel;
mod report;
mod resync;
mod settings;
mod setup;
mod write_times;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum PodStatusMode {
    /// Every pod gets a Running status (critical pods start not Ready).
    All,
    /// Only the critical pods get a status; the others stay Pending.
    Critical,
}

/// Whom the baseline's watch and patches connect as.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum BaselineUser {
    /// The operator's user (OPERATOR_KUBECONFIG): the same API Priority and
    /// Fairness level and the same authorization as the operator, as a bare loop
    /// deployed as a controller would have.
    Operator,
    /// The admin user (KUBECONFIG, group system:masters): exempt from API Priority
    /// and Fairness, which no controller is.
    Admin,
}

impl BaselineUser {
    fn describe(self) -> &'static str {
        match self {
            BaselineUser::Operator => {
                "the operator's user (same API priority level and authorization)"
            }
            BaselineUser::Admin => "the admin user (system:masters, exempt from API priority)",
        }
    }
}

/// Drives taint-operator on the cluster in KUBECONFIG and prints a scale report.
#[derive(Parser, Debug, Clone)]
#[command(name = "scale")]
struct Args {
    /// Nodes to create.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Pods per node; a tenth of them (at least one) are critical pods.
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// TaintPolicies (at least 5: matchers, readiness, BootstrapOnly, dry run, and the
    /// one deleted in the last phase; the rest are more matcher policies).
    #[arg(long, default_value_t = 10)]
    policies: usize,
    /// Images in each node's status.
    #[arg(long, default_value_t = 40)]
    images_per_node: usize,
    /// Requests in flight when creating objects and flipping conditions, and the
    /// baseline's concurrency (the default equals the operator's default worker count).
    #[arg(long, default_value_t = 48)]
    concurrency: usize,
    /// Condition flips (and readiness patches) in flight in a phase, the same for
    /// both runners (default: --concurrency). Below --concurrency, the writers get
    /// a larger share of the API server than the changes they follow: both keep up,
    /// rather than racing the flips for an even share.
    #[arg(long)]
    flip_concurrency: Option<usize>,
    /// Send the condition flips and the readiness patches of the taint, untaint,
    /// readiness and paired phases to the first N nodes only (default: every node);
    /// the others must stay as they are, and are watched for it. Cold starts and the
    /// policy delete still cover every node. At 100,000 nodes a sample of 10,000
    /// keeps a phase within a minute or two.
    #[arg(long)]
    flip_nodes: Option<usize>,
    /// The quiet period at the end, in which the operator must not write.
    #[arg(long, default_value_t = 60)]
    quiet_secs: u64,
    /// The operator's resync interval (its --resync-interval), in seconds; the
    /// default is the operator's own.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(10..))]
    resync_secs: u64,
    /// After the quiet period, time this many of the operator's periodic resync
    /// passes over the converged fleet: its CPU, the nodes it planned and its
    /// writes (none expected). Each waits for the next pass to start, up to
    /// --resync-secs.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=5))]
    resync_passes: u64,
    /// Give up on a phase after this long.
    #[arg(long, default_value_t = 1200)]
    phase_timeout_secs: u64,
    /// Also write the JSON report to this file.
    #[arg(long)]
    out_json: Option<PathBuf>,
    /// The operator binary (default: target/release/taint-operator of this workspace).
    #[arg(long)]
    operator_bin: Option<PathBuf>,
    /// The operator's --concurrency (its node workers; default: --concurrency). At
    /// most --concurrency: a baseline with fewer requests in flight than the
    /// operator has workers is held back by its own limit, and is no limit to compare with.
    #[arg(long)]
    operator_concurrency: Option<u16>,
    /// Where the operator's log goes (default: a file in the temp directory).
    #[arg(long)]
    operator_log: Option<PathBuf>,
    /// Skip the baseline phases (no ratios then).
    #[arg(long)]
    skip_baseline: bool,
    /// Times each runner goes through the taint and untaint phases; the baseline does
    /// them that often before the operator starts and again after it stopped. The
    /// ratios to the baseline compare medians: a loaded API server's background work
    /// (cache consistency checks, compaction, garbage collection) lands in one phase
    /// or another and moves a single phase's time by a fifth either way.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=9))]
    rounds: u64,
    /// Alternate the runners' rounds instead: baseline round 1, the operator's cold
    /// start and round 1, then for each further round the operator stopped, the
    /// baseline's round and the operator started again, and last the baseline's
    /// round R+1. Both runners then sample the same stretch of the API server's
    /// drift, rather than the baseline its start and end and the operator its middle.
    #[arg(long)]
    interleave: bool,
    /// The operator's cold starts, each after a baseline cold start of its own:
    /// baseline, operator, baseline, …, operator, baseline (the last after the
    /// operator's other phases). The cold start ratio then compares the median of
    /// N operator runs with the median of N+1 baseline runs; a single cold start
    /// at 15,000 nodes moved by 1.45× between two runs of the same baseline.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=9))]
    cold_starts: u64,
    /// Paired rounds after the operator's taint and untaint rounds: in each phase
    /// one stream of condition flips reaches both runners at once, the operator's
    /// condition on half the nodes and the baseline's on the other half, and each
    /// runner is timed on its half. Per-round latency ratios then compare the two
    /// at the same moment of the API server (see docs/performance.md#paired-rounds).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=15))]
    paired_rounds: u64,
    /// Calibration only: the baseline waits this long before each write of its
    /// taint and untaint phases (its own rounds and the paired ones), to check
    /// that a comparison sees a runner slower by about that much. Leave at 0
    /// for a measurement; the report says when it is set.
    #[arg(long, default_value_t = 0)]
    baseline_write_delay_ms: u64,
    /// Whom the baseline connects as. The condition flips, the observer and the
    /// setup always use the admin user.
    #[arg(long, value_enum, default_value = "operator")]
    baseline_as: BaselineUser,
    #[arg(long, value_enum, default_value = "all")]
    pod_status: PodStatusMode,
    /// Namespace of the pods.
    #[arg(long, default_value = "bench-scale")]
    namespace: String,
    /// Write each phase's per-node change time and latency as CSV files into this directory.
    #[arg(long)]
    dump_latencies: Option<PathBuf>,
    /// Exit 1 when a target is missed (the report is printed either way).
    #[arg(long)]
    strict: bool,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

async fn client_from(path: &Path) -> Result<Client> {
    Ok(Client::try_from(config_from(path).await?)?)
}

async fn config_from(path: &Path) -> Result<Config> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| format!("cannot read kubeconfig {}: {e}", path.display()))?;
    let mut config =
        Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    config.read_timeout = Some(Duration::from_secs(120));
    Ok(config)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("scale: {e}");
            ExitCode::from(2)
        }
    }
}

/// Ok(false): the run finished but a target was missed (with --strict) or a phase failed.
async fn run(args: Args) -> Result<bool> {
    if args.policies < 5 {
        bail!(
            "--policies must be at least 5 (matchers, readiness, BootstrapOnly, dry run, and the one deleted)"
        );
    }
    // Node names have five digits up to scale-99999 and six from scale-100000 on;
    // past a million the machine would long have run out of memory.
    if args.nodes == 0 || args.nodes > 1_000_000 {
        bail!("--nodes must be between 1 and 1000000");
    }
    if let Some(k) = args.flip_nodes {
        let least = if args.paired_rounds > 0 {
            2 * model::GROUPS
        } else {
            1
        };
        if k < least || k > args.nodes {
            bail!(
                "--flip-nodes must be between {least} and --nodes ({}){}",
                args.nodes,
                if args.paired_rounds > 0 {
                    ": each paired runner's half needs every group"
                } else {
                    ""
                }
            );
        }
    }
    if args.pods_per_node == 0 {
        bail!("--pods-per-node must be at least 1 (the readiness policies need critical pods)");
    }
    if args.concurrency == 0 || args.concurrency > usize::from(u16::MAX) {
        bail!("--concurrency must be between 1 and {}", u16::MAX);
    }
    if args.paired_rounds > 0 && args.skip_baseline {
        bail!("--paired-rounds needs the baseline: drop --skip-baseline");
    }
    if args.paired_rounds > 0 && args.nodes < 2 * model::GROUPS {
        bail!(
            "--paired-rounds needs at least {} nodes, so each runner's half has every group",
            2 * model::GROUPS
        );
    }
    if args.flip_concurrency.is_some_and(|f| f == 0) {
        bail!("--flip-concurrency must be at least 1");
    }
    if let Some(c) = args.operator_concurrency
        && usize::from(c) > args.concurrency
    {
        bail!(
            "--operator-concurrency {c} is above --concurrency {}: the baseline would have fewer requests in flight than the operator has workers",
            args.concurrency
        );
    }
    let Some(kubeconfig) = env_path("KUBECONFIG") else {
        bail!(
            "KUBECONFIG is not set: start a control plane (e2e/control-plane.sh start DIR) and `. DIR/env` first; see docs/performance.md#running-it"
        );
    };
    let Some(operator_kubeconfig) = env_path("OPERATOR_KUBECONFIG") else {
        bail!(
            "OPERATOR_KUBECONFIG is not set: the operator runs as the least-privileged user of `e2e/control-plane.sh start DIR` (`. DIR/env`)"
        );
    };
    let lease_ns = std::env::var("OPERATOR_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty());
    let repo_root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ is inside the workspace")
        .to_path_buf();
    let operator_bin = args
        .operator_bin
        .clone()
        .unwrap_or_else(|| repo_root.join("target/release/taint-operator"));
    if !operator_bin.is_file() {
        bail!(
            "the operator binary {} is missing: build it with `cargo build --release -p taint-operator` (or pass --operator-bin)",
            operator_bin.display()
        );
    }
    let operator_log = args.operator_log.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("taint-operator-scale-{}.log", std::process::id()))
    });

    let client = client_from(&kubeconfig).await?;
    let mut machine = machine();
    machine.apiserver_version = client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .map_err(|e| format!("cannot reach the cluster in {}: {e}", kubeconfig.display()))?;

    let critical = Critical::new(args.pods_per_node);
    let defs = policy_defs(args.policies, &args.namespace);
    let mut report = Report {
        args: args.clone(),
        machine,
        node_json_bytes: serde_json::to_vec(&node_json(0, args.images_per_node))?.len(),
        critical: critical.clone(),
        policies: defs.iter().map(|d| d.name.clone()).collect(),
        operator_bin: operator_bin.clone(),
        operator_log: operator_log.clone(),
        operator_version: operator_version(&repo_root, &operator_bin),
        leader_election: lease_ns.is_some(),
        setup: vec![],
        phases: vec![],
        operator_ready_secs: None,
        quiet: None,
        resync_passes: vec![],
        peak_rss_kib: None,
        settled_rss_kib: None,
        settled_rss_split_kib: None,
        total_cpu_secs: None,
        final_check: vec![],
        policy_status: vec![],
        error: None,
    };

    let result = drive(
        &args,
        &client,
        &kubeconfig,
        &operator_bin,
        &operator_kubeconfig,
        lease_ns.as_deref(),
        &operator_log,
        &defs,
        &critical,
        &mut report,
    )
    .await;
    let failed = result.is_err();
    if let Err(e) = result {
        report.error = Some(e.to_string());
    }
    report.machine.load_end = loadavg();
    let md = report.markdown();
    let js = serde_json::to_string_pretty(&report.json())?;
    println!("{md}");
    println!("### JSON\n\n```json\n{js}\n```");
    if let Some(path) = &args.out_json {
        std::fs::write(path, &js).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("scale: JSON report written to {}", path.display());
    }
    if let Some(dir) = &args.dump_latencies {
        std::fs::create_dir_all(dir)?;
        for p in &report.phases {
            let file = dir.join(format!("{}-{}.csv", p.runner, p.name.replace(' ', "-")));
            let mut csv = String::from("node,change_ms,latency_ms\n");
            for (k, (c, l)) in p.per_node.iter().enumerate() {
                let i = p.nodes.get(k).copied().unwrap_or(k);
                csv.push_str(&format!("{},{c:.1},{l:.1}\n", node_name(i)));
            }
            std::fs::write(&file, csv)?;
        }
        eprintln!("scale: per-node latencies written to {}", dir.display());
    }
    let missed = report.targets().iter().any(|t| !t.ok);
    Ok(!(failed || (args.strict && missed)))
}
