//! A node reconcile's part in drains (`spec.eviction`): evicting the pods in the
//! way before the plan, answering each drain's gate before planning, and saying
//! what happened afterwards. The node reconciler calls these three; the decisions are
//! the engine's (`engine::drain`), the pace and retries the drain ledger's.

use std::{
    cell::OnceCell,
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType};
use taint_operator_crd::PolicyTaint;

use crate::{
    cache::node_cache::CachedNode,
    controller::{context::Context, ledgers::Ledgers, node_gather::Gathered},
    drain::evictor::{self, Round},
};
use engine::{
    cluster::{NodeView, PodIndex},
    decision::NodeEvaluation,
    drain::{self, DrainStep, Gated},
    eviction_rules::ZoneState,
    node_plan::NodePlan,
    policy_set::PolicySet,
};

pub use engine::wake::ZONE_HELD_RECHECK;

/// What clearing the way found, per policy of the set.
#[derive(Debug, Default)]
pub struct Clearing {
    /// Every pod in the way of policy `i`'s drain is gone (or it evicts nothing).
    evicted: Vec<bool>,
    /// The rounds run, by policy index.
    rounds: Vec<(usize, Round)>,
    /// When to evict again: pods are still in the way.
    pub retry: Option<Duration>,
    /// The zones read so far, for the gates of the same reconcile.
    zones: Zones,
}

impl Clearing {
    pub fn evicted(&self, i: usize) -> bool {
        self.evicted.get(i).copied().unwrap_or(false)
    }

    /// Nothing was evicted or is waited for: no drain of the node is under way.
    pub fn is_idle(&self) -> bool {
        self.rounds.is_empty() && self.retry.is_none()
    }

    fn round(&self, i: usize) -> Option<&Round> {
        self.rounds.iter().find(|(j, _)| *j == i).map(|(_, r)| r)
    }
}

/// The drains of `set` on `node` that wait for evictions now: the policy wants
/// its taints, the drain started, budgets are respected, and its timeout (if any)
/// has not passed.
fn waiting_for_evictions(
    set: &PolicySet,
    eval: &NodeEvaluation,
    node: &NodeView,
    now: Timestamp,
) -> Vec<usize> {
    (0..set.policies.len())
        .filter(|&i| {
            let Some(rules) = drain::rules_of(set, i) else {
                return false;
            };
            let DrainStep::Draining { since } = drain::step(set, i, node) else {
                return false;
            };
            let timed_out = rules
                .drain_timeout
                .is_some_and(|d| drain::add(since, d) <= now);
            set.policies[i].is_active()
                && rules.respect_budgets
                && !timed_out
                && eval.policies[i].wants_taints()
        })
        .collect()
}

/// How zones stand for the policies of a set, each read at most once a reconcile:
/// clearing the way and opening the gates ask the same question at the same moment,
/// and each answer reads every cached node of the zone.
#[derive(Debug, Default)]
struct Zones(Mutex<HashMap<(usize, String), ZoneState>>);

impl Zones {
    /// How `node`'s zone stands for policy `i`; `nodes` gives every cached node.
    fn state<'n>(
        &self,
        set: &PolicySet,
        i: usize,
        node: &NodeView,
        nodes: impl FnOnce() -> &'n [Arc<CachedNode>],
        pods: &PodIndex,
        now: Timestamp,
    ) -> ZoneState {
        let Some(rules) = drain::rules_of(set, i).filter(|r| r.zone_pause.is_some()) else {
            return ZoneState::Open;
        };
        let zone = drain::zone_of(&node.labels);
        let mut known = self.0.lock().expect("zone states lock");
        *known.entry((i, zone.to_string())).or_insert_with(|| {
            let nodes = nodes().iter().map(|n| &n.view);
            rules.zone_state(&drain::zone_health(set, i, zone, nodes, pods, now), now)
        })
    }
}

/// Evicts the pods in the way of every drain of the gathered node that waits for
/// them. A failure to list the node's pods leaves the drains waiting (and
/// retried), as a blocked eviction does: the rest of the node's plan goes ahead.
pub async fn clear_the_way(ctx: &Context, g: &Gathered<'_>) -> Clearing {
    let (set, node, now) = (&*g.set, &g.node, g.now);
    let name = node.name();
    let zones = Zones::default();
    let waiting = {
        let eval = g.evaluate(&node.view);
        let pods = g.pods();
        let mut waiting = waiting_for_evictions(set, &eval, &node.view, now);
        // A zone that is settling or held evicts nothing: its nodes only keep the
        // NoSchedule stand-in until it is judged healthy.
        let fleet = OnceCell::new();
        waiting.retain(|&i| {
            let all = || fleet.get_or_init(|| g.fleet()).as_slice();
            zones.state(set, i, &node.view, all, pods.index(), now) == ZoneState::Open
        });
        waiting
    };
    let mut clearing = Clearing {
        evicted: vec![false; set.policies.len()],
        zones,
        ..Clearing::default()
    };
    if waiting.is_empty() {
        ctx.ledgers.drains().evictions_done(name);
        return clearing;
    }
    // Pods are still in the way from the last round: the node changed since, but the
    // next round keeps its backoff.
    let due_in = ctx.ledgers.drains().round_due_in(name, now);
    if let Some(wait) = due_in {
        clearing.retry = Some(wait);
        return clearing;
    }
    let pods = match evictor::pods_on(&ctx.client, name).await {
        Ok(pods) => pods,
        Err(e) => {
            tracing::warn!(node = name, error = %e, "cannot list the node's pods to drain it; retrying");
            clearing.retry = Some(ctx.ledgers.drains().evict_again_in(name, now));
            return clearing;
        }
    };
    let mut evicted_now = HashSet::new();
    for i in waiting {
        let policy = set.policies[i].name.as_str();
        let taints: Vec<&PolicyTaint> = drain::drained_taints(set, i).collect();
        let round = evictor::evict(
            &ctx.client,
            &ctx.metrics,
            ctx.writes.fence(),
            policy,
            &taints,
            &pods,
            &mut evicted_now,
        )
        .await;
        for pod in &round.evicted {
            tracing::info!(node = name, policy, pod = %pod, "evicted for the drain");
        }
        report_blocked(ctx, node, policy, &round);
        clearing.evicted[i] = round.done();
        clearing.rounds.push((i, round));
    }
    let mut ledger = ctx.ledgers.drains();
    if clearing.rounds.iter().all(|(_, r)| r.done()) {
        ledger.evictions_done(name);
    } else {
        clearing.retry = Some(ledger.evict_again_in(name, now));
    }
    clearing
}

/// One Warning event per pod and refusal (not one per retry): which pod, which
/// budget, what the API server said.
fn report_blocked(ctx: &Context, node: &CachedNode, policy: &str, round: &Round) {
    for b in &round.blocked {
        let first = ctx
            .ledgers
            .drains()
            .first_block(node.name(), &b.pod, &b.message);
        if !first {
            continue;
        }
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
        ctx.events.emit(event, node.object_ref());
    }
}

/// The drain gates of policies `asked` on `node`, evaluated as `eval`, by policy
/// index: the ledger's pace, the zone's health (read from every cached node only
/// when a switch waits on nothing else), and what clearing the way found.
pub fn gates(
    ledgers: &Ledgers,
    g: &Gathered<'_>,
    clearing: &Clearing,
    node: &NodeView,
    eval: &NodeEvaluation,
    asked: &[usize],
) -> Vec<Option<Gated>> {
    let set = &*g.set;
    let mut gates = vec![None; set.policies.len()];
    if asked.is_empty() {
        return gates;
    }
    let pods = g.pods();
    let fleet = OnceCell::new();
    let all = || fleet.get_or_init(|| g.fleet()).as_slice();
    let views = || all().iter().map(|n| &n.view).collect::<Vec<_>>();
    let mut ledger = ledgers.drains();
    for &i in asked {
        let zone_state = || clearing.zones.state(set, i, node, all, pods.index(), g.now);
        gates[i] = Some(ledger.gate(
            set,
            i,
            node,
            eval.policies[i].verdict(),
            clearing.evicted(i),
            &zone_state,
            &views,
            g.now,
        ));
    }
    gates
}

/// Events for the drains a write started and finished.
pub fn report(
    ctx: &Context,
    set: &PolicySet,
    node: &CachedNode,
    plan: &NodePlan,
    clearing: &Clearing,
) {
    let name = node.name();
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
        emit(
            ctx,
            node,
            "DrainStarted",
            format!(
                "policy {policy} started draining the node before {taints} goes on as NoExecute (NoSchedule until then); {how}"
            ),
        );
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
        emit(
            ctx,
            node,
            "DrainFinished",
            format!("policy {policy} switched {taints} to NoExecute: {why}"),
        );
    }
}

fn emit(ctx: &Context, node: &CachedNode, reason: &str, note: String) {
    let event = Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(cut(note)),
        action: "Drain".into(),
        secondary: None,
    };
    ctx.events.emit(event, node.object_ref());
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
