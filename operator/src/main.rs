use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use taint_operator::plan_cmd::{self, Output, PlanArgs};

/// Keeps node taints right, declaratively.
#[derive(Parser)]
#[command(name = "taint-operator", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan {
            policies,
            cluster,
            now,
            output,
        } => {
            match plan_cmd::run(&PlanArgs {
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
