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
    cache::settled::PlanInputs,
    controller::annotation_warnings::warn_malformed,
    controller::context::Context,
    controller::error::{Error, Result},
    controller::node_drains,
    controller::node_gather::{self, Gathered},
    controller::node_queue::{Next, Work},
    controller::node_report,
    controller::node_writer::{Written, write_node},
    telemetry::metrics::{ControllerLabel, ErrorLabels},
};
use engine::{
    cluster::NodeView,
    decision::NodeEvaluation,
    node_decision::{Answers, Decision, decide},
    node_plan::drain_gates_asked,
    policy_set::PolicySet,
    wake::{Waits, next_look},
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
    ctx.caches.wait_plannable().await;
    let Some(g) = node_gather::gather(&ctx, node) else {
        return Ok((Next::After(Duration::from_millis(200)), false));
    };
    let started = std::time::Instant::now();
    ctx.metrics.reconciles.get_or_create(&CONTROLLER).inc();
    warn_malformed(ctx.events.malformed_reported(), &g.node, |e, r| {
        ctx.events.emit(e, r)
    });
    let converged = converge_gathered(&ctx, &g).await?;
    if let (Some(version), Some(inputs)) = (&converged.settled, g.inputs) {
        record_settled(&ctx, g.node.name(), version, inputs);
    }
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

/// Records, on the node version the cache (or our write) has now, that planning it
/// found nothing to do: only when that is the `version` planned or written.
fn record_settled(ctx: &Context, name: &str, version: &str, inputs: PlanInputs) {
    let Some(cached) = ctx.caches.nodes().get(name) else {
        return;
    };
    let current = ctx.writes.freshest(cached);
    if current.resource_version() == Some(version) {
        current.settled.record(inputs);
    }
}

/// What converging one node did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converged {
    /// When the node must be evaluated again: a `for` window ends, or
    /// `maxTaintedNodes` holds it back and room may have freed up by then.
    pub next_check: Option<Timestamp>,
    /// A patch was written.
    pub wrote: bool,
    /// The resourceVersion of the node as planned (or as written) when nothing is
    /// left to do and nothing waits: planning it again on the same policies and
    /// pods would change nothing.
    pub settled: Option<Box<str>>,
}

/// Brings `node` in line with `set` (a policy's cleanup plans under a set of its
/// own); see `converge_gathered`.
pub async fn converge_node(
    ctx: &Context,
    set: Arc<PolicySet>,
    node: CachedNode,
) -> Result<Converged> {
    converge_gathered(ctx, &node_gather::with_set(ctx, set, node)).await
}

/// Brings the gathered node in line with its policies: at most one successful
/// write (and, for a drain waiting on them, the evictions before it).
async fn converge_gathered(ctx: &Context, g: &Gathered<'_>) -> Result<Converged> {
    let result = converge(ctx, g).await;
    // Turns in a drain's pace this reconcile took are spent; those it holds but no
    // longer waits for go back.
    ctx.ledgers.drains().settle(g.node.name());
    result
}

/// Gather is done; decide, write and report, and say when to look again.
async fn converge(ctx: &Context, g: &Gathered<'_>) -> Result<Converged> {
    // Drains waiting for evictions evict first, so a plan can switch to NoExecute
    // in this very reconcile once the pods are gone.
    let clearing = node_drains::clear_the_way(ctx, g).await;
    let plan = |n: &CachedNode| {
        let eval = g.evaluate(&n.view);
        let answers = answers(ctx, g, &clearing, &n.view, &eval);
        decide(&g.set, &n.view, &eval, &answers, g.now)
    };
    let (decision, written) = write(ctx, &g.node, plan).await?;
    let last = written.as_ref().map_or(&g.node, |w| &w.node);
    node_report::report(ctx, g, last, &decision.plan, &clearing, written.is_some());
    let wake = next_look(
        g.now,
        Waits {
            // A drain this write started has pods to evict: that is the next
            // reconcile's first job, whatever else wakes the node.
            drain_started: written.is_some() && !decision.plan.drain_started.is_empty(),
            eviction_retry: clearing.retry,
            evicting: !clearing.is_idle(),
            ..decision.waits
        },
    );
    let version = last.resource_version().map(Box::from);
    Ok(Converged {
        next_check: wake.at,
        wrote: written.is_some(),
        settled: version.filter(|_| wake.settled),
    })
}

/// What the ledgers answer for `node` evaluated as `eval`: the caps' admissions,
/// then the drain gates the plan will ask. Asking takes places: a cap reserves
/// one for an admitted node, a pace a turn (given back at `settle` if unused).
fn answers(
    ctx: &Context,
    g: &Gathered<'_>,
    clearing: &node_drains::Clearing,
    node: &NodeView,
    eval: &NodeEvaluation,
) -> Answers {
    let admitted = ctx
        .ledgers
        .caps()
        .admit(&g.set, eval, node, ctx.caches.nodes());
    let asked = drain_gates_asked(&g.set, node, eval, &|i| admitted[i]);
    let drains = node_drains::gates(&ctx.ledgers, g, clearing, node, eval, &asked);
    Answers { admitted, drains }
}

/// Writes what `decide` plans for `node` (again on a newer node after a conflict).
/// What the watch brings while the patch is on its way waits for its answer: most
/// of it is the patch's own echo (see `WriteTracking::write_done`).
async fn write(
    ctx: &Context,
    node: &CachedNode,
    decide: impl Fn(&CachedNode) -> Decision,
) -> Result<(Decision, Option<Written>)> {
    // Patch answers are whole Nodes (images and all): decode only what the cache keeps.
    let api: Api<WatchedNode> = Api::all(ctx.client.clone());
    ctx.writes.writing(node.name());
    let result = write_node(&api, &ctx.metrics, ctx.writes.fence(), node.clone(), decide).await;
    let written = result.as_ref().ok().and_then(|(_, w)| w.as_ref());
    let base_and_node = written.map(|w| (w.base_resource_version.as_str(), &w.node));
    if ctx.writes.write_done(node.name(), base_and_node) {
        ctx.caches
            .pod_watches()
            .reevaluate(vec![node.name().to_string()]);
    }
    result
}

/// How late a node is looked at again after the moment it waits for: a few
/// milliseconds late rather than early, so the window has surely ended.
pub const WAKE_LATE: Duration = Duration::from_millis(5);

fn until(at: Timestamp, now: Timestamp) -> Duration {
    let d = at.duration_since(now);
    Duration::try_from(d).unwrap_or_default() + WAKE_LATE
}
