//! The operator's periodic resync passes over a converged fleet, each timed from
//! the moment its counter of passes started moves: the CPU a pass costs, the nodes
//! it planned again and what it wrote (nothing, on a converged fleet).

use std::time::{Duration, Instant};

use kube::Client;

use crate::{
    Args, Result,
    apiserver_metrics::apiserver_counters,
    observer::Observer,
    operator_proc::{OpMetrics, OperatorProc},
    phase::PhaseResult,
    procfs::CpuProbes,
};

/// How often the operator's pass counter is read while waiting for a pass.
const POLL: Duration = Duration::from_millis(500);

/// After a pass's half interval, the time its last batches may still take.
const PASS_SLACK: Duration = Duration::from_secs(10);

/// Times `args.resync_passes` passes, one after the other.
pub(crate) async fn resync_passes(
    args: &Args,
    client: &Client,
    op: &OperatorProc,
    observer: &Observer,
    probes: &CpuProbes,
) -> Result<Vec<PhaseResult>> {
    let interval = Duration::from_secs(args.resync_secs);
    let mut passes = Vec::new();
    for pass in 1..=args.resync_passes {
        eprintln!(
            "scale: resync pass {pass}: waiting for it to start (interval {} s)",
            args.resync_secs
        );
        let (before, cpu_before) = wait_for_pass(op, interval).await?;
        let started = Instant::now();
        let events_before = observer.events();
        let others_before = probes.snapshot();
        let apiserver_before = apiserver_counters(client).await?;
        tokio::time::sleep(pass_window(interval)).await;
        let after = op.metrics().await?;
        let s = op.sample();
        let d = after.minus(&before);
        passes.push(PhaseResult {
            name: format!("resync pass {pass}"),
            kind: "resync pass".into(),
            runner: "operator".into(),
            secs: started.elapsed().as_secs_f64(),
            node_writes: d.node_writes,
            conflicts: d.node_write_conflicts,
            requests: d,
            cpu_secs: Some(s.cpu_secs - cpu_before),
            rss_end_kib: Some(s.rss_kib),
            observer_events: observer.events() - events_before,
            other_cpu: probes.since(&others_before),
            apiserver: apiserver_counters(client).await?.since(&apiserver_before),
            ..PhaseResult::default()
        });
    }
    Ok(passes)
}

/// How long a pass is watched: the operator spreads it over half its interval,
/// then its last batches finish.
fn pass_window(interval: Duration) -> Duration {
    interval.mul_f64(0.5) + PASS_SLACK
}

/// The longest wait for the operator's next pass: one may have just started, and
/// the operator sleeps its interval (+10 % at most) only once that pass is done.
fn next_pass_within(interval: Duration) -> Duration {
    pass_window(interval) + interval.mul_f64(1.1)
}

/// Waits until the operator starts its next pass. Returns its metrics and CPU
/// seconds as last read before the pass started.
async fn wait_for_pass(op: &OperatorProc, interval: Duration) -> Result<(OpMetrics, f64)> {
    let deadline = Instant::now() + next_pass_within(interval);
    let mut last = (op.metrics().await?, op.sample().cpu_secs);
    let passes = last.0.resyncs;
    loop {
        tokio::time::sleep(POLL).await;
        let now = op.metrics().await?;
        if now.resyncs > passes {
            return Ok(last);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no resync pass started within {:.0} s (--resync-secs {})",
                next_pass_within(interval).as_secs_f64(),
                interval.as_secs()
            )
            .into());
        }
        last = (now, op.sample().cpu_secs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_watched_for_half_its_interval_and_its_last_batches() {
        assert_eq!(
            pass_window(Duration::from_secs(300)),
            Duration::from_secs(160)
        );
        assert_eq!(
            pass_window(Duration::from_secs(20)),
            Duration::from_secs(20)
        );
    }

    #[test]
    fn the_next_pass_is_awaited_past_one_just_started_and_a_long_interval() {
        // a pass started as the wait began: 60 s spread, 10 s of last batches, then
        // up to 132 s of sleep
        assert_eq!(
            next_pass_within(Duration::from_secs(120)),
            Duration::from_secs(202)
        );
    }
}
