use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

/// jemalloc, configured in `taint_operator::memory`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::{Args, Parser, Subcommand};
use engine::duration::parse_go_duration;
use taint_operator::{
    crd_adopt, explain,
    plan::{self, LiveArgs, Output, PlanArgs, PlanError},
    run::{MetricsCert, RunConfig, run},
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
    /// Print, per node, the taints the policies would add and remove: on a cluster
    /// dump (no cluster needed), or with --live on the cluster in KUBECONFIG.
    Plan {
        /// TaintPolicy YAML (one or many documents, or a List). Repeatable. With
        /// --live, these replace the cluster's policies of the same name or join them.
        #[arg(short = 'f', long = "filename", required_unless_present = "live")]
        policies: Vec<PathBuf>,
        /// A `kubectl get nodes,pods -A -o yaml` dump. Repeatable.
        #[arg(long, required_unless_present = "live", conflicts_with = "live")]
        cluster: Vec<PathBuf>,
        /// Read nodes, pods and policies from the cluster in KUBECONFIG (read-only).
        #[arg(long)]
        live: bool,
        /// With --live: treat this cluster policy as deleted (its taints are planned
        /// for removal, as its finalizer would remove them). Repeatable.
        #[arg(long, value_name = "NAME", requires = "live")]
        without: Vec<String>,
        /// Evaluate `for` windows at this RFC 3339 time instead of now.
        #[arg(long)]
        now: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Why is this node tainted? Every policy's view of one node of the cluster in
    /// KUBECONFIG, check by check, and what the operator does next (read-only).
    Explain {
        node: String,
        /// Evaluate `for` windows at this RFC 3339 time instead of now.
        #[arg(long)]
        now: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Print the TaintPolicy CustomResourceDefinition.
    Crd,
    /// Hand the cluster's TaintPolicy CRD to a Helm release: write this version's
    /// schema and Helm's ownership label and annotations (the chart's pre-upgrade
    /// hook, for a CRD that chart 0.1.0 installed from crds/). Never takes a CRD
    /// that another release owns.
    AdoptCrd {
        /// The Helm release's name.
        #[arg(long)]
        release: String,
        /// The Helm release's namespace.
        #[arg(long)]
        release_namespace: String,
        /// Keep the CRD on `helm uninstall` (annotation helm.sh/resource-policy: keep).
        #[arg(long)]
        keep: bool,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Address for /metrics, /healthz and /readyz. Plain HTTP, so localhost by
    /// default: listen on the pod's address only where the network keeps the port
    /// private (a NetworkPolicy), or with --metrics-secure.
    #[arg(long, default_value = "127.0.0.1:8080")]
    metrics_addr: SocketAddr,
    /// Serve HTTPS on --metrics-addr, where /metrics answers only a bearer token
    /// whose user the API server allows `get` on the non-resource URL /metrics
    /// (a TokenReview, then a SubjectAccessReview; decisions cached for a minute,
    /// refusals for 10 s). /healthz and /readyz stay open for the kubelet.
    #[arg(long)]
    metrics_secure: bool,
    /// With --metrics-secure: the serving certificate, tls.crt and tls.key in this
    /// directory (reloaded when they change). Without it, a self-signed
    /// certificate is made at start.
    #[arg(long, requires = "metrics_secure")]
    metrics_cert_dir: Option<PathBuf>,
    /// Serve the admission webhooks (TLS) on this address: Node CREATE at
    /// /mutate-node, TaintPolicy CREATE and UPDATE at /validate-taintpolicy.
    #[arg(long, requires_all = ["webhook_cert_file", "webhook_key_file"])]
    webhook_addr: Option<SocketAddr>,
    /// The webhooks the API server calls (`node`, `taintpolicy`), as the chart
    /// registers them; exported as taint_operator_webhook_registered for alerts.
    #[arg(long, value_delimiter = ',', value_parser = ["node", "taintpolicy"])]
    registered_webhooks: Vec<String>,
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
    /// Check every node this often (a Go duration, ±10% jitter), to correct what a
    /// missed watch event left wrong; 0 turns it off. A node is planned again when its
    /// version, the policies or its pods changed since its last plan; a converged
    /// cluster costs no write.
    #[arg(long, default_value = "5m", value_parser = parse_interval)]
    resync_interval: Duration,
    /// Requests per second the operator may send to the API server (0: no limit).
    /// A cap on bugs, above what 5,000 nodes need: about 150 patches a second in a
    /// fleet-wide change, 350 at cold start.
    #[arg(long, default_value_t = 1000)]
    api_qps: u32,
    /// Node events (TaintAdded, TaintRemoved, drains) published per second at most
    /// (0: no limit). Each is an API write stored in etcd; in a fleet-wide change
    /// the ones the queue cannot hold are dropped and counted
    /// (taint_operator_events_dropped_total).
    #[arg(long, default_value_t = taint_operator::controller::node_events::DEFAULT_EVENT_QPS)]
    event_qps: u32,
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
    let metrics_cert = match (args.metrics_secure, args.metrics_cert_dir) {
        (false, _) => None,
        (true, Some(dir)) => Some(MetricsCert::Dir(dir)),
        (true, None) => Some(MetricsCert::SelfSigned),
    };
    let config = RunConfig {
        metrics_addr: args.metrics_addr,
        metrics_cert,
        webhook,
        registered_webhooks: args.registered_webhooks,
        leader_elect: args.leader_elect,
        lease_name: args.lease_name,
        lease_namespace: args.lease_namespace,
        identity,
        concurrency: args.concurrency,
        resync_interval: args.resync_interval,
        api_qps: args.api_qps,
        event_qps: args.event_qps,
    };
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

/// The name kubectl runs a plugin by: `kubectl taintpolicy ...` finds
/// `kubectl-taintpolicy` in PATH.
const PLUGIN_NAME: &str = "kubectl-taintpolicy";

/// The CLI, named as it was invoked: as a kubectl plugin, help and errors show
/// `kubectl taintpolicy` so the commands they suggest work as typed.
fn cli_from_args() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let invoked = std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let mut command = Cli::command();
    if invoked == PLUGIN_NAME {
        command = command.name(PLUGIN_NAME).bin_name("kubectl taintpolicy");
    }
    let matches = command.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// A small runtime for the commands that read the cluster once.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

fn print_or_fail<E: std::fmt::Display>(
    result: Result<String, E>,
    code: impl Fn(&E) -> u8,
) -> ExitCode {
    match result {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(code(&e))
        }
    }
}

fn main() -> ExitCode {
    let cli = cli_from_args();
    match cli.command {
        Command::Run(args) => run_command(args),
        Command::Plan {
            policies,
            cluster,
            live: true,
            without,
            now,
            output,
        } => {
            debug_assert!(cluster.is_empty());
            let args = LiveArgs {
                policy_files: policies,
                without,
                now,
                output,
            };
            print_or_fail(block_on(plan::run_live(&args)), PlanError::exit_code)
        }
        Command::Plan {
            policies,
            cluster,
            now,
            output,
            ..
        } => print_or_fail(
            plan::run(&PlanArgs {
                policy_files: policies,
                cluster_files: cluster,
                now,
                output,
            }),
            |_| 2,
        ),
        Command::Explain { node, now, output } => {
            let now = match plan::parse_now(&now) {
                Ok(now) => now,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            print_or_fail(block_on(explain::run(&node, output, now)), |_| 1)
        }
        Command::Crd => {
            print!("{}", taint_operator_crd::crd_yaml());
            ExitCode::SUCCESS
        }
        Command::AdoptCrd {
            release,
            release_namespace,
            keep,
        } => {
            let release = crd_adopt::Release {
                name: release,
                namespace: release_namespace,
                keep,
            };
            print_or_fail(block_on(crd_adopt::run(&release)), |_| 1)
        }
    }
}
