//! End-to-end: the taint-operator binary against a real (bare) control plane.
//!
//! One test, `e2e_suite`, starts the control plane and the operator once and runs
//! every scenario in order, each under its own name; a failure names the scenario,
//! shows the operator's log lines of that scenario, and the suite goes on with the
//! next one. `E2E_ONLY=name,name` runs only the scenarios whose names contain one of
//! the given strings. See e2e/README.md.

mod chaos;
mod cli;
mod common;
mod day2;
mod eviction;
mod examples;
mod leader;
mod lifecycle;
mod observability;
mod ownership;
mod policy_admission;
mod restarts;
mod secure_metrics;
mod startup;
mod throttling;
mod upgrade;
mod validation;
mod webhook;

use std::{
    future::Future,
    io::Write,
    panic::AssertUnwindSafe,
    time::{Duration, Instant},
};

use futures::FutureExt;
use taint_operator_e2e::{Harness, Result, Setup};

/// No scenario may take longer than this.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(180);

struct Suite<'a> {
    h: &'a Harness,
    only: Vec<String>,
    results: Vec<(&'static str, Option<String>, Duration)>,
}

impl<'a> Suite<'a> {
    fn new(h: &'a Harness) -> Self {
        let only = std::env::var("E2E_ONLY")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        Suite {
            h,
            only,
            results: Vec::new(),
        }
    }

    async fn run(&mut self, name: &'static str, scenario: impl Future<Output = Result>) {
        self.run_within(name, SCENARIO_TIMEOUT, scenario).await;
    }

    async fn run_within(
        &mut self,
        name: &'static str,
        limit: Duration,
        scenario: impl Future<Output = Result>,
    ) {
        if !self.only.is_empty() && !self.only.iter().any(|o| name.contains(o.as_str())) {
            return;
        }
        println!("\n=== scenario {name}");
        let log_offset = self.h.op.lock().await.log_len();
        let started = Instant::now();
        let outcome = tokio::time::timeout(limit, AssertUnwindSafe(scenario).catch_unwind()).await;
        let failure = match outcome {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(e))) => Some(e.to_string()),
            Ok(Err(panic)) => Some(format!(
                "panicked: {}",
                panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)")
            )),
            Err(_) => Some(format!("did not finish within {limit:?}")),
        };
        let elapsed = started.elapsed();
        // An operator that died on its own fails the scenario it died in.
        let failure = match failure {
            None if !self.h.op.lock().await.is_running() => {
                Some("the operator exited during the scenario".to_string())
            }
            other => other,
        };
        match &failure {
            None => println!("--- ok: {name} ({:.1} s)", elapsed.as_secs_f64()),
            Some(why) => {
                let mut op = self.h.op.lock().await;
                println!(
                    "--- FAILED: {name} ({:.1} s): {why}\n--- operator log during {name} (last 80 lines of {}):\n{}",
                    elapsed.as_secs_f64(),
                    op.log_path().display(),
                    op.log_since(log_offset, 80)
                );
                // A scenario that failed while the operator was down must not take
                // the rest of the suite with it.
                if !op.is_running()
                    && let Err(e) = op.start().await
                {
                    println!("--- could not restart the operator: {e}");
                }
            }
        }
        self.results.push((name, failure, elapsed));
    }

    fn report(&self) -> Vec<&'static str> {
        println!("\n=== e2e summary");
        for (name, failure, elapsed) in &self.results {
            let verdict = if failure.is_some() { "FAILED" } else { "ok" };
            println!("{verdict:>6}  {name} ({:.1} s)", elapsed.as_secs_f64());
        }
        self.results
            .iter()
            .filter(|r| r.1.is_some())
            .map(|r| r.0)
            .collect()
    }
}

/// The suite's threads get 8 MiB of stack, not the test harness's 2 MiB: a debug
/// build's deserialization of the CRD's nested schema, beside the suite's own
/// future, overflowed 2 MiB.
const SUITE_STACK: usize = 8 << 20;

#[test]
fn e2e_suite() {
    let suite = std::thread::Builder::new()
        .name("e2e_suite".into())
        .stack_size(SUITE_STACK)
        .spawn(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .thread_stack_size(SUITE_STACK)
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(suite())
        })
        .expect("the suite's thread");
    if let Err(panic) = suite.join() {
        std::panic::resume_unwind(panic);
    }
}

async fn suite() {
    let mut h = match Harness::setup().await {
        Ok(Setup::Skip(line)) => {
            // Straight to stderr, past the test harness's output capture.
            let _ = writeln!(std::io::stderr(), "{line}");
            return;
        }
        Ok(Setup::Run(h)) => h,
        Err(e) => panic!("e2e setup failed: {e}"),
    };

    let failed = {
        let h = &*h;
        let mut s = Suite::new(h);
        // 1. the shipped examples; spot-out-of-service is the basic scenario (latency, writes per transition)
        s.run(
            "example spot-out-of-service (basic)",
            examples::spot_out_of_service(h),
        )
        .await;
        s.run("example nic-kaput", examples::nic_kaput(h)).await;
        s.run(
            "example startup-init-daemonset",
            examples::startup_init_daemonset(h),
        )
        .await;
        s.run(
            "example istio-cni-readiness",
            examples::istio_cni_readiness(h),
        )
        .await;
        s.run("example cni-network-ready", examples::cni_network_ready(h))
            .await;
        // 2-10. ownership, lifecycle and timing
        s.run("concurrent writer", ownership::concurrent_writer(h))
            .await;
        s.run(
            "operator SIGKILL and restart",
            lifecycle::sigkill_restart(h),
        )
        .await;
        s.run("policy edit moves taints", ownership::policy_edit(h))
            .await;
        s.run("node relabeled out of a policy", ownership::relabel(h))
            .await;
        s.run("policy delete while running", lifecycle::delete_running(h))
            .await;
        s.run(
            "policy delete while operator down",
            lifecycle::delete_while_down(h),
        )
        .await;
        s.run("conflicting policies", ownership::conflicts(h)).await;
        s.run(
            "BootstrapOnly delete and recreate",
            lifecycle::bootstrap_recreate(h),
        )
        .await;
        s.run("for window", lifecycle::for_window(h)).await;
        s.run("maxTaintedNodes", lifecycle::max_tainted_nodes(h))
            .await;
        // day-2 controls: suspend, conditions whose reporter stopped
        s.run("suspend freezes a policy", day2::suspend(h)).await;
        s.run("stale heartbeat", day2::stale_heartbeat(h)).await;
        // drains (spec.eviction): the per-zone pace, a zone held, drainTimeout across a failover
        s.run("eviction pacing", eviction::pacing(h)).await;
        s.run("eviction zone hold", eviction::zone_hold(h)).await;
        s.run("eviction zone settle", eviction::zone_settle(h))
            .await;
        s.run(
            "eviction failover mid-drain",
            eviction::failover_mid_drain(h),
        )
        .await;
        // 11-12. invalid input
        s.run("invalid regex", validation::invalid_regex(h)).await;
        s.run("API server refuses bad policies", validation::refused(h))
            .await;
        // 13-15. what people and machines see
        s.run("kubectl get tp", observability::kubectl_get(h)).await;
        s.run("node events", observability::node_events(h)).await;
        s.run(
            "a burst is one event on the policy",
            observability::burst_events(h),
        )
        .await;
        s.run("quiet period", observability::quiet_period(h)).await;
        // 16-18. the webhook, two replicas, and start-up that cannot start
        s.run("admission webhook", webhook::admission(h)).await;
        s.run(
            "policy admission webhook",
            policy_admission::policy_webhook(h),
        )
        .await;
        s.run("leader election with two replicas", leader::two_replicas(h))
            .await;
        s.run("leader Lease black-holed", leader::lease_black_holed(h))
            .await;
        s.run("start-up errors", startup::startup_errors(h)).await;
        s.run(
            "secure metrics (TokenReview, SubjectAccessReview)",
            secure_metrics::secure_metrics(h),
        )
        .await;
        // 19-20. faults: the API server and etcd restart under the operator
        s.run(
            "kube-apiserver restarts, ten rounds",
            restarts::apiserver_restarts(h),
        )
        .await;
        s.run("etcd restarts", restarts::etcd_restarts(h)).await;
        // 20b. kube-apiserver upgraded one minor version under the operator (with
        // E2E_UPGRADE_APISERVER_BIN); the rest of the suite runs on the newer one
        s.run("kube-apiserver upgrade", upgrade::apiserver_upgrade(h))
            .await;
        s.run(
            "node writes throttled (429)",
            throttling::node_writes_throttled(h),
        )
        .await;
        // 23-24. the command line: explain a node, plan a change against the live cluster
        s.run("explain a node", cli::explain(h)).await;
        s.run("plan --live", cli::plan_live(h)).await;
        // 25. all the faults at random together, judged from outside (the soak's two-minute mode)
        s.run_within(
            "chaos soak, two minutes",
            Duration::from_secs(420),
            chaos::two_minutes(h),
        )
        .await;
        s.report()
    };

    if !failed.is_empty() {
        h.keep_on_teardown();
    }
    h.teardown().await;
    assert!(
        failed.is_empty(),
        "e2e scenarios failed: {}",
        failed.join(", ")
    );
}
