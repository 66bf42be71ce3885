//! Paired phases: the operator and the baseline react at the same time, each on
//! its half of the nodes, to one stream of condition flips.
//!
//! A runner's per-node latency moves by a factor of two or three from one round
//! to the next with what the shared API server happens to be doing (its garbage
//! collector, the watches it closes; docs/performance.md#round-to-round-noise), which swamps a
//! 1.10× goal over a handful of separate rounds. In a paired phase both runners
//! meet the same moment of the API server, so the ratio of their latencies in
//! that one phase keeps only what differs between them.

use std::time::{Duration, Instant};

use crate::{
    Result,
    apiserver_metrics::apiserver_counters,
    baseline::{BaselineRunner, WritingAs},
    bench::Bench,
    load::{Flips, flip_condition},
    model::{Flipped, World, expected_all, operator_side, paired_taints_by_group},
    observer::Cue,
    operator_proc::{OpMetrics, OperatorProc},
    phase::{
        FlipSplit, PAIRED_TAINT, PAIRED_UNTAINT, PhaseResult, latencies, per_node, round_name,
        sample_node_bytes, with_operator,
    },
    report::Report,
    settings::{SETTLE_MAX, SETTLE_QUIET, fault_status, flip_concurrency, flipped_nodes},
    write_times::{Anchor, operator_writes},
};

/// Runs `rounds` paired taint and untaint rounds with the operator `op` running
/// and `before` its metrics so far; returns its metrics after the last phase.
/// `world` has the operator's policies in place and no fault on.
pub(crate) async fn paired_rounds(
    b: &Bench<'_>,
    op: &mut OperatorProc,
    mut world: World,
    rounds: u64,
    mut before: OpMetrics,
    report: &mut Report,
) -> Result<OpMetrics> {
    let Bench {
        args,
        client,
        defs,
        observer,
        probes,
        ..
    } = *b;
    let n = args.nodes;
    let timeout = Duration::from_secs(args.phase_timeout_secs);
    // Under the operator's field manager, as between its rounds: the nodes of
    // both halves then carry the same managedFields entries.
    let baseline =
        BaselineRunner::start(b, paired_taints_by_group(defs), WritingAs::TheOperator).await?;
    world.paired = true;
    let phases = (1..=rounds).flat_map(|r| [(PAIRED_TAINT, true, r), (PAIRED_UNTAINT, false, r)]);
    for (kind, on, round) in phases {
        let name = round_name(kind, round);
        eprintln!("scale: {name} phase (operator and baseline side by side)");
        world.fault = on;
        world.baseline_fault = on;
        let cpu_before = op.sample().cpu_secs;
        let others_before = probes.snapshot();
        let apiserver_before = apiserver_counters(client).await?;
        let tally_before = baseline.tally();
        baseline.take_written();
        op.take_peak_kib();
        let events_before = observer.events();
        observer.begin_with_cue(
            expected_all(defs, n, world),
            Some(Cue {
                flipped: Flipped::Paired,
                on,
            }),
        );
        let log_from = op.log_len();
        let anchor = Anchor::now();
        let t0 = Instant::now();
        let (status, reason) = fault_status(on);
        let flips = flip_condition(
            client,
            flipped_nodes(args),
            flip_concurrency(args),
            Flipped::Paired,
            status,
            reason,
        )
        .await?;
        let change_secs = t0.elapsed().as_secs_f64();
        let right = observer.wait_all_right(timeout).await?;
        let cpu_to_right = with_operator(
            probes.since(&others_before),
            op.sample().cpu_secs - cpu_before,
        );
        let seen = observer.cue_seen();
        let base_written = baseline.take_written();
        let after = op.settle(SETTLE_QUIET, SETTLE_MAX).await?;
        let d = after.minus(&before);
        let s = op.sample();
        let op_written =
            operator_writes(&op.log_since(log_from)?, flipped_nodes(args), on, &anchor);
        let tally = baseline.tally().since(tally_before);
        let node_bytes = Some(sample_node_bytes(client, n).await?);
        let apiserver = apiserver_counters(client).await?.since(&apiserver_before);
        let observed = Observed {
            t0,
            flips: &flips,
            seen: &seen,
            right: &right,
        };
        let common = PhaseResult {
            name: name.clone(),
            kind: kind.into(),
            change_secs,
            observer_events: observer.events() - events_before,
            node_bytes,
            ..PhaseResult::default()
        };
        // The API server's counters and the processes' CPU are the phase's, shared
        // by both runners: kept once, on the operator's row.
        report.phases.push(PhaseResult {
            runner: "operator".into(),
            cpu_to_right,
            other_cpu: probes.since(&others_before),
            node_writes: d.node_writes,
            conflicts: d.node_write_conflicts,
            requests: d,
            cpu_secs: Some(s.cpu_secs - cpu_before),
            peak_rss_kib: Some(op.take_peak_kib()),
            rss_end_kib: Some(s.rss_kib),
            apiserver,
            ..observed.half(true, &op_written, common.clone())
        });
        report.phases.push(PhaseResult {
            runner: "baseline".into(),
            node_writes: tally.patches as f64,
            conflicts: tally.conflicts as f64,
            requests: tally.requests(),
            ..observed.half(false, &base_written, common)
        });
        before = after;
    }
    baseline.stop().await?;
    Ok(before)
}

/// What the observer and the flips recorded over a paired phase, for every node.
struct Observed<'a> {
    t0: Instant,
    flips: &'a Flips,
    seen: &'a [Option<Instant>],
    right: &'a [Instant],
}

impl Observed<'_> {
    /// `base` with the latencies of one runner's half (`operator_side` or not) and
    /// `written`, its runner's write answers.
    fn half(&self, operator: bool, written: &[Option<Instant>], base: PhaseResult) -> PhaseResult {
        // the flipped nodes: every node, or the first --flip-nodes
        let mine: Vec<usize> = (0..self.flips.sent.len())
            .filter(|&i| operator_side(i) == operator)
            .collect();
        let pick = |v: &[Option<Instant>]| -> Vec<Option<Instant>> {
            mine.iter().map(|&i| v.get(i).copied().flatten()).collect()
        };
        let flips = Flips {
            sent: pick(&self.flips.sent),
            answered: pick(&self.flips.answered),
        };
        let right: Vec<Instant> = mine.iter().map(|&i| self.right[i]).collect();
        let end = right.iter().max().copied().unwrap_or(self.t0);
        PhaseResult {
            transitions: mine.len(),
            secs: end.saturating_duration_since(self.t0).as_secs_f64(),
            latencies_ms: latencies(&flips.sent, &right),
            per_node: per_node(self.t0, &flips.sent, &right),
            flip: Some(FlipSplit::new(
                &flips,
                &pick(self.seen),
                &right,
                &pick(written),
            )),
            nodes: mine,
            ..base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GROUPS;

    #[test]
    fn each_runner_is_timed_on_its_own_half_only() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let n = 2 * GROUPS;
        // node i flipped at i ms, right at 100 + i ms on the operator's half and
        // 300 + i ms on the baseline's; each runner wrote only its own nodes
        let sent: Vec<Option<Instant>> = (0..n as u64).map(|i| Some(at(i))).collect();
        let flips = Flips {
            sent: sent.clone(),
            answered: sent.clone(),
        };
        let right: Vec<Instant> = (0..n)
            .map(|i| at(i as u64 + if operator_side(i) { 100 } else { 300 }))
            .collect();
        let written: Vec<Option<Instant>> =
            (0..n).map(|i| operator_side(i).then(|| right[i])).collect();
        let seen = sent.clone();
        let observed = Observed {
            t0,
            flips: &flips,
            seen: &seen,
            right: &right,
        };
        let ours = observed.half(true, &written, PhaseResult::default());
        assert_eq!(ours.transitions, GROUPS);
        assert_eq!(ours.nodes, (0..GROUPS).collect::<Vec<_>>());
        assert_eq!(ours.latencies_ms, vec![100.0; GROUPS]);
        assert_eq!(ours.flip.as_ref().unwrap().unwritten, 0);
        assert_eq!(ours.secs, (100 + GROUPS - 1) as f64 / 1000.0);
        let theirs = observed.half(false, &written, PhaseResult::default());
        assert_eq!(theirs.nodes, (GROUPS..n).collect::<Vec<_>>());
        assert_eq!(theirs.latencies_ms, vec![300.0; GROUPS]);
        // the operator's writes are not the baseline's
        assert_eq!(theirs.flip.as_ref().unwrap().unwritten, GROUPS);
        // per_node is in the half's node order, from the phase's start
        assert_eq!(theirs.per_node[0], (GROUPS as f64, 300.0));
    }
}
