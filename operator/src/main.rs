use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, Parser, Subcommand};
use engine::duration::parse_go_duration;
use taint_operator::{
    plan::{self, Output, PlanArgs},
    run::{RunConfig, run},
    serve::webhook::WebhookConfig,
    telemetry::logs::{self as telemetry, LogFormat},
};

/// Keeps node taints right, declaratively.
#[derive(Parser)]
#[command(name = "taint-operator", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller against the cluster in KUBECONFIG (or in-cluster config).
    Run(RunArgs),
    /// Print, per node, the taints the policies would add and remove. No cluster needed.
    Plan {
        /// TaintPolicy YAML (one or many documents, or a List). Repeatable.
        #[arg(short = 'f', long = "filename", required = true)]
        policies: Vec<PathBuf>,
        /// A `kubectl get nodes,pods -A -o yaml` dump. Repeatable.
        #[arg(long, required = true)]
        cluster: Vec<PathBuf>,
        /// Evaluate `for` windows at this RFC 3339 time instead of now.
        #[arg(long)]
        now: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Print the TaintPolicy CustomResourceDefinition.
    Crd,
}

#[derive(Args)]
struct RunArgs {
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Serve the Node CREATE admission webhook (TLS) on this address.
    #[arg(long, requires_all = ["webhook_cert_file", "webhook_key_file"])]
    webhook_addr: Option<SocketAddr>,
    /// PEM certificate for the webhook; reloaded when the file changes.
    #[arg(long)]
    webhook_cert_file: Option<PathBuf>,
    /// PEM private key for the webhook; reloaded when the file changes.
    #[arg(long)]
    webhook_key_file: Option<PathBuf>,
    /// Elect a leader on a Lease: only the leader writes.
    #[arg(long)]
    leader_elect: bool,
    #[arg(long, default_value = "taint-operator")]
    lease_name: String,
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// This replica's name in the Lease and in events (default: POD_NAME, then the hostname).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Node reconciles running at once (the rest wait their turn, first come first served).
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// Re-plan every node this often (a Go duration, ±10% jitter), to correct what a
    /// missed watch event left wrong; 0 turns it off. A converged cluster costs no write.
    #[arg(long, default_value = "5m", value_parser = parse_interval)]
    resync_interval: Duration,
    /// Requests per second the operator may send to the API server (0: no limit).
    /// A cap on bugs, above what 5,000 nodes need: about 150 patches a second in a
    /// fleet-wide change, 350 at cold start, and bursts of up to 1,000 events.
    #[arg(long, default_value_t = 1000)]
    api_qps: u32,
    #[arg(
        long,
        value_enum,
        default_value = "text",
        env = "TAINT_OPERATOR_LOG_FORMAT"
    )]
    log_format: LogFormat,
    /// A tracing filter: info, debug, or e.g. info,taint_operator=debug.
    #[arg(long, default_value = "info", env = "TAINT_OPERATOR_LOG")]
    log_level: String,
}

/// A Go duration (`5m`, `90s`), or `0`.
fn parse_interval(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    parse_go_duration(s).ok_or_else(|| format!("{s:?} is not a Go duration such as 5m or 90s"))
}

fn run_command(args: RunArgs) -> ExitCode {
    if let Err(e) = telemetry::init(args.log_format, &args.log_level) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let identity = args.identity.unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "taint-operator".into())
    });
    let webhook = match (
        args.webhook_addr,
        args.webhook_cert_file,
        args.webhook_key_file,
    ) {
        (Some(addr), Some(cert_file), Some(key_file)) => Some(WebhookConfig {
            addr,
            cert_file,
            key_file,
        }),
        _ => None,
    };
    let config = RunConfig {
        metrics_addr: args.metrics_addr,
        webhook,
        leader_elect: args.leader_elect,
        lease_name: args.lease_name,
        lease_namespace: args.lease_namespace,
        identity,
        concurrency: args.concurrency,
        resync_interval: args.resync_interval,
        api_qps: args.api_qps,
    };
    taint_operator::memory::use_one_arena();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run_command(args),
        Command::Plan {
            policies,
            cluster,
            now,
            output,
        } => {
            match plan::run(&PlanArgs {
                policy_files: policies,
                cluster_files: cluster,
                now,
                output,
            }) {
                Ok(out) => {
                    print!("{out}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Crd => {
            print!("{}", taint_operator_crd::crd_yaml());
            ExitCode::SUCCESS
        }
    }
}
