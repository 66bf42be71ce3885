//! Node reconcile, in three steps that read top to bottom:
//!
//! 1. **gather** (`node_gather`): the node, its policies, pods and the fleet as
//!    one value; the ledgers' answers (caps, drain gates) before each plan;
//! 2. **decide** (`engine::node_decision`, pure): the plan and what it waits for;
//! 3. **write and report**: the drains' evictions first (`node_drains`), the one
//!    optimistic-locked patch with its re-plan on conflict (`node_writer`), the
//!    events and metrics (`node_report`), the settled record, and when to look
//!    again (`engine::wake`).

use std::{sync::Arc, time::Duration};

use k8s_openapi::jiff::Timestamp;
use kube::Api;

use crate::{
    cache::node_cache::{CachedNode, WatchedNode},
    controller::annotation_warnings::warn_malformed,
    controller::context::Context,
    controller::error::{Error, Result},
    controller::ledgers::{Outcome, ReconcileEnd},
    controller::node_drains,
    controller::node_gather::{self, Gathered},
    controller::node_queue::{Next, Work},
    controller::node_report,
    controller::node_report::Ending,
    controller::node_writer::write_node,
    telemetry::metrics::{ControllerLabel, ErrorLabels},
};
use engine::{
    cluster::NodeView,
    decision::NodeEvaluation,
    node_decision::{Answers, Decision, decide},
    node_plan::drain_gates_asked,
    policy_set::PolicySet,
    wake::{Waits, Wake, next_look},
};

pub const CONTROLLER: ControllerLabel = ControllerLabel { controller: "node" };

pub use engine::wake::HELD_BACK_RECHECK;

/// The node queue's reconcile: the node as the cache has it when a worker takes it.
pub async fn reconcile_named(work: Work, ctx: Arc<Context>) -> Next {
    // Deleted since it was queued: nothing to do.
    let Some(node) = ctx.caches.nodes().get(&work.node) else {
        ctx.ledgers.forget_node(&work.node);
        return Next::AwaitChange;
    };
    if work.by_resync && unchanged_since_settled(&ctx, node.clone()) {
        return Next::AwaitChange;
    }
    match reconcile(node, ctx.clone()).await {
        Ok((next, wrote)) => {
            // A resync that wrote nothing found the node as its last reconcile left
            // it, and that reconcile woke the status writer already. Waking it again
            // for each of a pass's thousands of nodes recomputed every policy's
            // status about once a second for the whole pass.
            if wrote || !work.by_resync {
                ctx.status_refresh.notify_one();
            }
            if wrote && work.by_resync {
                // Only the resync queued this node, and it was wrong: some watch
                // event never led to a reconcile.
                ctx.metrics.resync_corrections.inc();
                tracing::warn!(
                    node = work.node,
                    "periodic resync corrected a node no event had queued"
                );
            }
            next
        }
        Err(e) => error_policy(&work.node, &e, &ctx),
    }
}

pub async fn reconcile_node(node: Arc<CachedNode>, ctx: Arc<Context>) -> Result<Next> {
    let (next, _) = reconcile(node, ctx.clone()).await?;
    ctx.status_refresh.notify_one();
    Ok(next)
}

/// Whether the node, its policies and its pods are what its last plan found nothing
/// to do on: a resync of a converged fleet then costs a few lookups a node, not a plan.
fn unchanged_since_settled(ctx: &Context, node: Arc<CachedNode>) -> bool {
    let node = ctx.writes.freshest(node);
    let (generation, _) = ctx.caches.policy_set_generation();
    node.settled
        .matches(ctx.caches.plan_inputs(generation, node.name()))
}

/// What to do next, and whether the node was written.
async fn reconcile(node: Arc<CachedNode>, ctx: Arc<Context>) -> Result<(Next, bool)> {
    let Some(g) = node_gather::gather(&ctx, node).await else {
        return Ok((Next::After(Duration::from_millis(200)), false));
    };
    let started = std::time::Instant::now();
    ctx.metrics.reconciles.get_or_create(&CONTROLLER).inc();
    warn_malformed(ctx.events.malformed_reported(), &g.node, |e, r| {
        ctx.events.emit(e, r)
    });
    let converged = converge(&ctx, &g).await?;
    ctx.metrics
        .reconcile_duration
        .get_or_create(&CONTROLLER)
        .observe(started.elapsed().as_secs_f64());
    let next = match converged.next_check {
        Some(at) => Next::After(until(at, (ctx.clock)())),
        None => Next::AwaitChange,
    };
    Ok((next, converged.wrote))
}

pub fn error_policy(node: &str, error: &Error, ctx: &Context) -> Next {
    tracing::warn!(node, error = %error, "node reconcile failed");
    ctx.metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels {
            controller: CONTROLLER.controller,
            category: error.category(),
        })
        .inc();
    Next::Retry
}

/// What converging one node did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converged {
    /// When the node must be evaluated again: a `for` window ends, or
    /// `maxTaintedNodes` holds it back and room may have freed up by then.
    pub next_check: Option<Timestamp>,
    /// A patch was written.
    pub wrote: bool,
}

/// Brings `node` in line with `set` (a policy's cleanup plans under a set of its
/// own); see `converge`.
pub async fn converge_node(
    ctx: &Context,
    set: Arc<PolicySet>,
    node: CachedNode,
) -> Result<Converged> {
    converge(ctx, &node_gather::with_set(ctx, set, node)).await
}

/// Gather is done; decide and write (at most one successful write, and for a
/// drain waiting on them the evictions before it), then end the reconcile in the
/// ledgers and the write tracking, report, and say when to look again.
async fn converge(ctx: &Context, g: &Gathered) -> Result<Converged> {
    // Drains waiting for evictions evict first, so a plan can switch to NoExecute
    // in this very reconcile once the pods are gone.
    let clearing = node_drains::clear_the_way(ctx, g).await;
    let plan = |n: &CachedNode| {
        let eval = g.evaluation_of(n);
        let answers = answers(ctx, g, &clearing, &n.view, &eval);
        decide(&g.set, &n.view, &eval, &answers, g.now)
    };
    // Patch answers are whole Nodes (images and all): decode only what the cache keeps.
    let api: Api<WatchedNode> = Api::all(ctx.client.clone());
    let result = write_node(&api, &ctx.metrics, &ctx.fence, g.node.clone(), plan).await;
    let done = result.as_ref().ok();
    let written = done.and_then(|(_, w)| w.as_ref());
    let last = written.map_or(&g.node, |w| &w.node);
    let blocked = clearing
        .blocked()
        .map(|(_, b)| (b.pod.as_str(), b.message.as_str()));
    let rounds = ctx
        .evictions
        .end(g.node.name(), g.now, clearing.evictions, blocked);
    let told = ctx.ledgers.end(ReconcileEnd {
        node: g.node.name(),
        outcome: done.map(|(decision, _)| Outcome {
            set: &g.set,
            before: &g.node.view,
            after: &last.view,
            awaiting_shutdown: &decision.plan.awaiting_shutdown,
        }),
    });
    let retry = clearing.backing_off.or(rounds.evict_again_in);
    let wake = done.map(|(d, _)| wake(g, &clearing, d, written.is_some(), retry));
    // Planning the last version again on the same policies and pods would change nothing.
    let settled = match (&wake, g.inputs, last.resource_version()) {
        (Some(w), Some(inputs), Some(version)) if w.settled => Some((version, inputs)),
        _ => None,
    };
    let base_and_node = written.map(|w| (w.base_resource_version.as_str(), &w.node));
    let requeue = ctx.writes.end(g.node.name(), base_and_node, settled);
    node_report::report(
        ctx,
        Ending {
            set: &g.set,
            last,
            plan: done.map(|(decision, _)| &decision.plan),
            wrote: written.is_some(),
            clearing: &clearing,
            told: &told,
            first_blocks: &rounds.first_blocks,
            requeue,
        },
    );
    let wrote = written.is_some();
    result?;
    Ok(Converged {
        next_check: wake.and_then(|w| w.at),
        wrote,
    })
}

/// When to look at the node again after `decision`, written or not, and whether
/// it settled.
fn wake(
    g: &Gathered,
    clearing: &node_drains::Clearing,
    decision: &Decision,
    wrote: bool,
    eviction_retry: Option<Duration>,
) -> Wake {
    next_look(
        g.now,
        Waits {
            // A drain this write started has pods to evict: that is the next
            // reconcile's first job, whatever else wakes the node.
            drain_started: wrote && !decision.plan.drain_started.is_empty(),
            eviction_retry,
            evicting: !clearing.is_idle(),
            ..decision.waits
        },
    )
}

/// What the ledgers answer for `node` evaluated as `eval`: the caps' admissions,
/// then the drain gates the plan will ask. Asking takes places: a cap reserves
/// one for an admitted node, a pace a turn (given back at `settle` if unused).
fn answers(
    ctx: &Context,
    g: &Gathered,
    clearing: &node_drains::Clearing,
    node: &NodeView,
    eval: &NodeEvaluation,
) -> Answers {
    let mut ledgers = ctx.ledgers.ask();
    let admitted = ledgers.caps.admit(&g.set, eval, node, &g.nodes);
    let asked = drain_gates_asked(&g.set, node, eval, &|i| admitted[i]);
    let drains = node_drains::gates(&mut ledgers.drains, g, clearing, node, eval, &asked);
    Answers { admitted, drains }
}

/// How late a node is looked at again after the moment it waits for: a few
/// milliseconds late rather than early, so the window has surely ended.
pub const WAKE_LATE: Duration = Duration::from_millis(5);

fn until(at: Timestamp, now: Timestamp) -> Duration {
    let d = at.duration_since(now);
    Duration::try_from(d).unwrap_or_default() + WAKE_LATE
}
