//! A node reconcile's last step: what it did, told. Each taint added or removed
//! is counted, logged and explained in one event per direction; a drain the write
//! started or finished gets its own, and so does each eviction a budget blocked
//! (once per pod and refusal); an out-of-service wait that begins is announced
//! once; and the nodes that wait for the reconcile (a freed place under a
//! `maxTaintedNodes` cap, or a change the watch brought meanwhile) are queued.
//! Every event goes to the queue in one call.

use kube::runtime::events::{Event, EventType};
use taint_operator_crd::PolicyTaint;

use crate::{
    cache::node_cache::CachedNode,
    controller::{
        context::Context,
        event_summary::{PolicyChange, TaintEvent},
        events::NodeEvent,
        ledgers::Told,
        node_drains::Clearing,
        shutdown_waits,
    },
    telemetry::metrics::PolicyLabel,
};
use engine::{
    drain,
    node_plan::{NodePlan, TaintChange},
    policy_set::PolicySet,
};

/// The target of the taint log lines, as before this module held them: log queries
/// and the scale benchmark's write times (`e2e/src/bin/scale/write_times.rs`) select
/// the lines by it.
const LOG_TARGET: &str = "taint_operator::controller::node_reconciler";

/// How one node's reconcile ended, for the telling.
pub struct Ending<'a> {
    pub set: &'a PolicySet,
    /// The write's answer, or the node as gathered when nothing was written.
    pub last: &'a CachedNode,
    /// The plan written (or found to need no write); `None` when the write failed.
    pub plan: Option<&'a NodePlan>,
    pub wrote: bool,
    pub clearing: &'a Clearing,
    pub told: &'a Told,
    /// For each of the clearing's blocked evictions: reported for the first time.
    pub first_blocks: &'a [bool],
    /// The watch brought the node meanwhile: queue it again.
    pub requeue: bool,
}

pub fn report(ctx: &Context, end: Ending<'_>) {
    let node = end.last;
    let mut events = Vec::new();
    for (first, (i, b)) in end.first_blocks.iter().zip(end.clearing.blocked()) {
        if *first {
            events.push(blocked(node, &end.set.policies[i].name, b));
        }
    }
    if !end.told.shutdown_waits_begun.is_empty() {
        let policies = &end.told.shutdown_waits_begun;
        tracing::info!(node = node.name(), policies = ?policies, "out-of-service waits until the node is down");
        events.push(NodeEvent::Plain(
            shutdown_waits::waiting_event(policies),
            node.object_ref(),
        ));
    }
    if let Some(plan) = end.plan.filter(|_| end.wrote) {
        events.extend(taints(ctx, node, plan));
        events.extend(drains(end.set, node, plan, end.clearing));
    }
    if !events.is_empty() {
        ctx.events.emit_all(events);
    }
    let mut wake = end.told.cap_waiters.clone();
    if end.requeue {
        wake.push(node.name().to_string());
    }
    if !wake.is_empty() {
        ctx.caches.pod_watches().reevaluate(wake);
    }
}

/// Counts, logs and explains a write: one event for what it added and one for what
/// it removed, each naming every policy, taint and reason (a write usually changes
/// one taint; a fleet-wide change must not cost an event per policy per node).
fn taints(ctx: &Context, node: &CachedNode, plan: &NodePlan) -> Vec<NodeEvent> {
    let name = node.name();
    let mut events = Vec::new();
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
            let taint = describe_change(change);
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
        events.push(NodeEvent::Taints(TaintEvent {
            node: node.object_ref(),
            reason: if added { "TaintAdded" } else { "TaintRemoved" }.into(),
            action: if added { "AddTaint" } else { "RemoveTaint" }.into(),
            changes: explained,
        }));
    }
    for policy in &plan.completed {
        tracing::info!(target: LOG_TARGET, node = name, policy = %policy, "bootstrap complete");
    }
    events
}

fn describe_change(c: &TaintChange) -> String {
    let taint = match &c.value {
        Some(v) => format!("{}={}:{}", c.key, v, c.effect.as_str()),
        None => format!("{}:{}", c.key, c.effect.as_str()),
    };
    match c.then {
        Some(then) => format!("{taint} (until the drain allows {})", then.as_str()),
        None => taint,
    }
}

/// One Warning event per pod and refusal (not one per retry): which pod, which
/// budget, what the API server said.
fn blocked(node: &CachedNode, policy: &str, b: &crate::drain::evictor::Blocked) -> NodeEvent {
    let budget = b.budget.as_deref().unwrap_or("(unnamed)");
    tracing::warn!(node = node.name(), policy, pod = %b.pod, budget, message = %b.message, "eviction blocked by a PodDisruptionBudget; retrying");
    let event = Event {
        type_: EventType::Warning,
        reason: "EvictionBlocked".into(),
        note: Some(cut(format!(
            "policy {policy}: eviction of pod {} blocked by PodDisruptionBudget {budget}: {}; the node stays NoSchedule and the eviction is retried",
            b.pod, b.message
        ))),
        action: "Evict".into(),
        secondary: None,
    };
    NodeEvent::Plain(event, node.object_ref())
}

/// Events for the drains a write started and finished.
fn drains(
    set: &PolicySet,
    node: &CachedNode,
    plan: &NodePlan,
    clearing: &Clearing,
) -> Vec<NodeEvent> {
    let name = node.name();
    let mut events = Vec::new();
    for policy in &plan.drain_started {
        let Some(i) = set.index_of(policy) else {
            continue;
        };
        let taints = describe(drain::drained_taints(set, i));
        let how = match drain::rules_of(set, i) {
            Some(r) if r.respect_budgets => {
                "the pods that do not tolerate it are evicted through the Eviction API first"
            }
            _ => "nothing is evicted first (respectDisruptionBudgets: false)",
        };
        tracing::info!(node = name, policy = %policy, "drain started");
        events.push(drain_event(
            node,
            "DrainStarted",
            format!(
                "policy {policy} started draining the node before {taints} goes on as NoExecute (NoSchedule until then); {how}"
            ),
        ));
    }
    for policy in &plan.drain_finished {
        let Some(i) = set.index_of(policy) else {
            continue;
        };
        let taints = describe(drain::drained_taints(set, i));
        let rules = drain::rules_of(set, i);
        let why = match (rules, clearing.round(i)) {
            (Some(r), _) if !r.respect_budgets => {
                "nothing evicted (respectDisruptionBudgets: false)".to_string()
            }
            (_, Some(r)) if r.done() => "every pod in the way was evicted".to_string(),
            (_, Some(r)) => format!(
                "drainTimeout passed with {} pod(s) still in the way ({})",
                r.remaining.len(),
                r.remaining.join(", ")
            ),
            // A drain that waits for evictions always runs a round, unless its
            // timeout has passed.
            (rules, None) => format!(
                "drainTimeout {} passed",
                rules
                    .and_then(|r| r.drain_timeout_source.as_deref())
                    .unwrap_or("")
            ),
        };
        tracing::info!(node = name, policy = %policy, why = %why, "drain finished; switched to NoExecute");
        events.push(drain_event(
            node,
            "DrainFinished",
            format!("policy {policy} switched {taints} to NoExecute: {why}"),
        ));
    }
    events
}

fn drain_event(node: &CachedNode, reason: &str, note: String) -> NodeEvent {
    let event = Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(cut(note)),
        action: "Drain".into(),
        secondary: None,
    };
    NodeEvent::Plain(event, node.object_ref())
}

fn describe<'t>(taints: impl Iterator<Item = &'t PolicyTaint>) -> String {
    taints
        .map(|t| match &t.value {
            Some(v) => format!("{}={}", t.key, v),
            None => t.key.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An event note holds 1 kB.
fn cut(note: String) -> String {
    if note.len() <= 1000 {
        return note;
    }
    let mut at = 997;
    while !note.is_char_boundary(at) {
        at -= 1;
    }
    format!("{}...", &note[..at])
}
