//! A node reconcile's last step: what its write changed, told. Each taint added
//! or removed is counted, logged and explained in one event per direction; a
//! drain the write started or finished gets its own (`node_drains::report`); an
//! out-of-service wait that begins is announced once (`shutdown_waits`); and a
//! place under a `maxTaintedNodes` cap that freed up wakes the nodes waiting for
//! one.

use crate::{
    cache::node_cache::CachedNode,
    controller::{
        context::Context,
        event_summary::{PolicyChange, TaintEvent},
        node_drains::{self, Clearing},
        node_gather::Gathered,
        shutdown_waits,
    },
    telemetry::metrics::PolicyLabel,
};
use engine::node_plan::{NodePlan, TaintChange};

/// The target of the taint log lines, as before this module held them: log queries
/// and the scale benchmark's write times (`e2e/src/bin/scale/write_times.rs`) select
/// the lines by it.
const LOG_TARGET: &str = "taint_operator::controller::node_reconciler";

/// Reports the plan `plan` of the gathered node, which ended as `last` (the write's
/// answer, or the node as gathered when nothing was written).
pub fn report(
    ctx: &Context,
    g: &Gathered<'_>,
    last: &CachedNode,
    plan: &NodePlan,
    clearing: &Clearing,
    wrote: bool,
) {
    shutdown_waits::announce(
        ctx.ledgers.shutdown_waits(),
        last.name(),
        last.object_ref(),
        &plan.awaiting_shutdown,
        |e, r| ctx.events.emit(e, r),
    );
    free_cap_places(ctx, g, last);
    if wrote {
        report_taints(ctx, last, plan);
        node_drains::report(ctx, &g.set, last, plan, clearing);
    }
}

/// A place under a `maxTaintedNodes` cap that freed up: the nodes waiting for one
/// go now. Only capped policies need the ledger (see `CapLedger::forget_uncapped`).
fn free_cap_places(ctx: &Context, g: &Gathered<'_>, last: &CachedNode) {
    let capped = g.set.policies.iter().any(|p| {
        p.rules
            .as_ref()
            .is_ok_and(|r| r.max_tainted_nodes.is_some())
    });
    if capped {
        let wake = ctx.ledgers.caps().observe(&g.set, &g.node.view, &last.view);
        ctx.caches.pod_watches().reevaluate(wake);
    }
}

/// Counts, logs and explains a write: one event for what it added and one for what
/// it removed, each naming every policy, taint and reason (a write usually changes
/// one taint; a fleet-wide change must not cost an event per policy per node).
fn report_taints(ctx: &Context, node: &CachedNode, plan: &NodePlan) {
    let name = node.name();
    for (changes, added) in [(&plan.added, true), (&plan.removed, false)] {
        let mut explained = Vec::with_capacity(changes.len());
        for change in changes {
            let label = PolicyLabel {
                policy: change.policy.clone(),
            };
            if added {
                ctx.metrics.taints_added.get_or_create(&label).inc();
            } else {
                ctx.metrics.taints_removed.get_or_create(&label).inc();
            }
            let taint = describe(change);
            let explanation = PolicyChange {
                policy: change.policy.clone(),
                what: format!("{} {taint}", if added { "added" } else { "removed" }),
                why: change.reason.clone(),
            };
            tracing::info!(target: LOG_TARGET, node = name, policy = %change.policy, taint = %taint, added, reason = %change.reason, "{}", explanation.note());
            explained.push(explanation);
        }
        if explained.is_empty() {
            continue;
        }
        ctx.events.emit_taints(TaintEvent {
            node: node.object_ref(),
            reason: if added { "TaintAdded" } else { "TaintRemoved" }.into(),
            action: if added { "AddTaint" } else { "RemoveTaint" }.into(),
            changes: explained,
        });
    }
    for policy in &plan.completed {
        tracing::info!(target: LOG_TARGET, node = name, policy = %policy, "bootstrap complete");
    }
}

fn describe(c: &TaintChange) -> String {
    let taint = match &c.value {
        Some(v) => format!("{}={}:{}", c.key, v, c.effect.as_str()),
        None => format!("{}:{}", c.key, c.effect.as_str()),
    };
    match c.then {
        Some(then) => format!("{taint} (until the drain allows {})", then.as_str()),
        None => taint,
    }
}
