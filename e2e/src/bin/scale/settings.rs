//! How a run paces itself: when a phase counts as settled, what the fault
//! condition says, and how many requests each runner keeps in flight (read from
//! the arguments). Every phase runner reads these, so they sit below all of them.

use std::time::Duration;

use crate::Args;

/// How long the operator's metrics must stay still after a phase before it
/// counts as settled: longer than its event quiet period (2 s), so a phase's
/// events count in that phase and do not go out during the next one.
pub(crate) const SETTLE_QUIET: Duration = Duration::from_secs(4);
/// The longest a settle may take.
pub(crate) const SETTLE_MAX: Duration = Duration::from_secs(60);

/// The `BenchFault` condition's status and reason for a fault (`on`) or its end;
/// the fault policies match reasons `Bench.*`.
pub(crate) fn fault_status(on: bool) -> (&'static str, &'static str) {
    if on {
        ("True", "BenchFaultDetected")
    } else {
        ("False", "BenchHealthy")
    }
}

/// Condition flips and readiness patches in flight in a phase, for both runners.
pub fn flip_concurrency(args: &Args) -> usize {
    args.flip_concurrency.unwrap_or(args.concurrency)
}

/// How many nodes, from the first, the flips and readiness patches go to.
pub fn flipped_nodes(args: &Args) -> usize {
    args.flip_nodes.map_or(args.nodes, |k| k.min(args.nodes))
}

/// The operator's worker count: as given, else the baseline's concurrency, so the
/// baseline always has at least as many requests in flight as the operator has workers.
pub fn operator_workers(args: &Args) -> u16 {
    args.operator_concurrency
        .unwrap_or_else(|| u16::try_from(args.concurrency).unwrap_or(u16::MAX))
}
