//! Node reconcile: decide (evaluate the node against every policy, plan it, and
//! note what the plan waits for), write the one patch that converges it, explain
//! each change with an event, and come back exactly when the first wait ends
//! (`engine::wake`).

use std::{sync::Arc, time::Duration};

use k8s_openapi::jiff::Timestamp;
use kube::Api;

use crate::{
    cache::node_cache::{CachedNode, WatchedNode},
    cache::settled::PlanInputs,
    controller::annotation_warnings::warn_malformed,
    controller::context::Context,
    controller::error::{Error, Result},
    controller::event_summary::{PolicyChange, TaintEvent},
    controller::node_drains::{self, GateKeeper},
    controller::node_queue::{Next, Work},
    controller::node_writer::{Decided, write_node},
    controller::shutdown_waits,
    telemetry::metrics::{ControllerLabel, ErrorLabels, PolicyLabel},
};
use engine::{
    decision::evaluate_node,
    node_plan::{Gates, NodePlan, TaintChange, UnknownPolicies, plan_node},
    policy_set::PolicySet,
    wake::{Waits, next_look},
};

pub const CONTROLLER: ControllerLabel = ControllerLabel { controller: "node" };

pub use engine::wake::HELD_BACK_RECHECK;

/// The node queue's reconcile: the node as the cache has it when a worker takes it.
pub async fn reconcile_named(work: Work, ctx: Arc<Context>) -> Next {
    // Deleted since it was queued: nothing to do.
    let Some(node) = ctx.nodes.get(&work.node) else {
        ctx.shutdown_waits.forget(&work.node);
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
    let node = ctx.freshest(node);
    let (generation, _) = ctx.policy_set_generation();
    node.settled
        .matches(ctx.plan_inputs(generation, node.name()))
}

/// What to do next, and whether the node was written.
async fn reconcile(node: Arc<CachedNode>, ctx: Arc<Context>) -> Result<(Next, bool)> {
    ctx.wait_plannable().await;
    let node = ctx.freshest(node);
    let (generation, set) = ctx.policy_set_generation();
    if !ctx.may_plan_with(&set) {
        // A policy was just added: its critical pods are still being listed, or it
        // counts across nodes while the node list is still coming in.
        return Ok((Next::After(Duration::from_millis(200)), false));
    }
    let started = std::time::Instant::now();
    ctx.metrics.reconciles.get_or_create(&CONTROLLER).inc();
    warn_malformed(&ctx.malformed_reported, &node, |e, r| ctx.emit(e, r));
    // Read before planning: a pod that changes meanwhile leaves a stale record.
    let inputs = ctx.plan_inputs(generation, node.name());
    let converged = converge_node(&ctx, &set, (*node).clone()).await?;
    if let Some(version) = &converged.settled {
        record_settled(&ctx, node.name(), version, inputs);
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
    let Some(cached) = ctx.nodes.get(name) else {
        return;
    };
    let current = ctx.freshest(cached);
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

/// Brings one node in line with `set`: at most one successful write (and, for a
/// drain waiting on them, the evictions before it).
pub async fn converge_node(ctx: &Context, set: &PolicySet, node: CachedNode) -> Result<Converged> {
    let name = node.name().to_string();
    let result = converge(ctx, set, node).await;
    // Turns in a drain's pace this reconcile took are spent; those it holds but no
    // longer waits for go back.
    ctx.drains.lock().expect("drain ledger lock").settle(&name);
    result
}

/// One plan of the node, and what it found to wait for.
struct Decision {
    plan: NodePlan,
    waits: Waits,
}

impl Decided for Decision {
    fn plan(&self) -> &NodePlan {
        &self.plan
    }
}

async fn converge(ctx: &Context, set: &PolicySet, node: CachedNode) -> Result<Converged> {
    let now = (ctx.clock)();
    // Drains waiting for evictions evict first, so a plan can switch to NoExecute
    // in this very reconcile once the pods are gone.
    let clearing = node_drains::clear_the_way(ctx, set, &node, now).await;
    // Patch answers are whole Nodes (images and all): decode only what the cache keeps.
    let api: Api<WatchedNode> = Api::all(ctx.client.clone());
    let replan = |n: &CachedNode| decide(ctx, set, &clearing, n, now);
    // What the watch brings while the patch is on its way waits for its answer:
    // most of it is the patch's own echo (see `Context::write_done`).
    ctx.writing(node.name());
    let result = write_node(&api, &ctx.metrics, &ctx.fence, node.clone(), replan).await;
    ctx.write_done(
        node.name(),
        result
            .as_ref()
            .ok()
            .and_then(|(_, written)| written.as_ref())
            .map(|w| (w.base_resource_version.as_str(), &w.node)),
    );
    let (decision, written) = result?;
    let final_node = written.as_ref().map_or(&node, |w| &w.node);
    shutdown_waits::announce(
        &ctx.shutdown_waits,
        node.name(),
        final_node.object_ref(),
        &decision.plan.awaiting_shutdown,
        |e, r| ctx.emit(e, r),
    );
    let final_version = final_node.resource_version().map(str::to_string);
    // Only capped policies need the ledger (see `CapLedger::forget_uncapped`).
    let capped = set.policies.iter().any(|p| {
        p.rules
            .as_ref()
            .is_ok_and(|r| r.max_tainted_nodes.is_some())
    });
    if capped {
        let wake =
            ctx.caps
                .lock()
                .expect("cap ledger lock")
                .observe(set, &node.view, &final_node.view);
        // A place under a maxTaintedNodes cap freed up: the nodes waiting for one go now.
        ctx.pod_watches.reevaluate(wake);
    }
    let wrote = written.is_some();
    if let Some(w) = &written {
        report(ctx, &w.node, &decision.plan);
        node_drains::report(ctx, set, &w.node, &decision.plan, &clearing);
    }
    let wake = next_look(
        now,
        Waits {
            // A drain this write started has pods to evict: that is the next
            // reconcile's first job, whatever else wakes the node.
            drain_started: wrote && !decision.plan.drain_started.is_empty(),
            eviction_retry: clearing.retry,
            evicting: !clearing.is_idle(),
            ..decision.waits
        },
    );
    Ok(Converged {
        next_check: wake.at,
        wrote,
        settled: wake.settled.then(|| final_version.map(Box::from)).flatten(),
    })
}

/// Plans node `n` as it is now: its evaluation, the caps' and the drains' gates,
/// and what each of them waits for.
fn decide(
    ctx: &Context,
    set: &PolicySet,
    clearing: &node_drains::Clearing,
    n: &CachedNode,
    now: Timestamp,
) -> Decision {
    let view = &n.view;
    let pods = ctx.pods.read().expect("pod cache lock");
    let eval = evaluate_node(set, view, pods.index(), now);
    let admitted = ctx
        .caps
        .lock()
        .expect("cap ledger lock")
        .admit(set, &eval, view, &ctx.nodes);
    let keeper = GateKeeper::new(ctx, set, pods.index(), clearing, now);
    let plan = plan_node(
        set,
        view,
        &eval,
        Gates {
            admitted: &|i| admitted[i],
            drain: &|i| keeper.gate(i, view, &eval),
        },
        UnknownPolicies::Remove,
        now,
    );
    Decision {
        plan,
        waits: Waits {
            evaluation: eval.next_check,
            held_back: admitted.contains(&false),
            drain_at: keeper.wake.get(),
            zone_held: keeper.zone_held.get(),
            gate_waited: keeper.waited.get(),
            ..Waits::default()
        },
    }
}

/// Counts, logs and explains a write: one event for what it added and one for what
/// it removed, each naming every policy, taint and reason (a write usually changes
/// one taint; a fleet-wide change must not cost an event per policy per node).
fn report(ctx: &Context, node: &CachedNode, plan: &NodePlan) {
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
            tracing::info!(node = name, policy = %change.policy, taint = %taint, added, reason = %change.reason, "{}", explanation.note());
            explained.push(explanation);
        }
        if explained.is_empty() {
            continue;
        }
        ctx.emit_taints(TaintEvent {
            node: node.object_ref(),
            reason: if added { "TaintAdded" } else { "TaintRemoved" }.into(),
            action: if added { "AddTaint" } else { "RemoveTaint" }.into(),
            changes: explained,
        });
    }
    for policy in &plan.completed {
        tracing::info!(node = name, policy = %policy, "bootstrap complete");
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

/// How late a node is looked at again after the moment it waits for: a few
/// milliseconds late rather than early, so the window has surely ended.
pub const WAKE_LATE: Duration = Duration::from_millis(5);

fn until(at: Timestamp, now: Timestamp) -> Duration {
    let d = at.duration_since(now);
    Duration::try_from(d).unwrap_or_default() + WAKE_LATE
}
