//! A node reconcile's part in drains (`spec.eviction`): evicting the pods in the
//! way before the plan, and answering each drain's gate before planning. The node
//! reconciler calls these two; the decisions are the engine's (`engine::drain`),
//! the pace and retries the drain ledger's, and `node_report` tells what happened.

use std::{
    cell::OnceCell,
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use taint_operator_crd::PolicyTaint;

use crate::{
    cache::node_cache::CachedNode,
    controller::{context::Context, node_gather::Gathered},
    drain::{
        evictor::{self, Blocked, Round},
        ledger::DrainLedger,
        retries::Evictions,
    },
};
use engine::{
    cluster::{NodeView, PodIndex},
    decision::NodeEvaluation,
    drain::{self, DrainStep, Gated},
    eviction_rules::ZoneState,
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
    /// How the evictions stand, for the retries (`EvictionRetries::end`).
    pub evictions: Evictions,
    /// When the last round's backoff ends: nothing was tried this time.
    pub backing_off: Option<Duration>,
    /// The zones read so far, for the gates of the same reconcile.
    zones: Zones,
}

impl Clearing {
    pub fn evicted(&self, i: usize) -> bool {
        self.evicted.get(i).copied().unwrap_or(false)
    }

    /// Nothing was evicted or is waited for: no drain of the node is under way.
    pub fn is_idle(&self) -> bool {
        self.rounds.is_empty() && self.evictions == Evictions::Done
    }

    pub fn round(&self, i: usize) -> Option<&Round> {
        self.rounds.iter().find(|(j, _)| *j == i).map(|(_, r)| r)
    }

    /// Every eviction a budget blocked, by policy index.
    pub fn blocked(&self) -> impl Iterator<Item = (usize, &Blocked)> {
        self.rounds
            .iter()
            .flat_map(|(i, r)| r.blocked.iter().map(move |b| (*i, b)))
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
pub async fn clear_the_way(ctx: &Context, g: &Gathered) -> Clearing {
    let (set, node, now) = (&*g.set, &g.node, g.now);
    let name = node.name();
    let zones = Zones::default();
    let waiting = {
        let pods = g.pods.read().expect("pod cache lock");
        let mut waiting = waiting_for_evictions(set, &g.eval, &node.view, now);
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
        return clearing;
    }
    // Pods are still in the way from the last round: the node changed since, but the
    // next round keeps its backoff.
    let due_in = ctx.evictions.due_in(name, now);
    if let Some(wait) = due_in {
        clearing.evictions = Evictions::BackingOff;
        clearing.backing_off = Some(wait);
        return clearing;
    }
    let pods = match evictor::pods_on(&ctx.client, name).await {
        Ok(pods) => pods,
        Err(e) => {
            tracing::warn!(node = name, error = %e, "cannot list the node's pods to drain it; retrying");
            clearing.evictions = Evictions::PodsLeft;
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
            &ctx.fence,
            policy,
            &taints,
            &pods,
            &mut evicted_now,
        )
        .await;
        for pod in &round.evicted {
            tracing::info!(node = name, policy, pod = %pod, "evicted for the drain");
        }
        clearing.evicted[i] = round.done();
        clearing.rounds.push((i, round));
    }
    if !clearing.rounds.iter().all(|(_, r)| r.done()) {
        clearing.evictions = Evictions::PodsLeft;
    }
    clearing
}

/// The drain gates of policies `asked` on `node`, evaluated as `eval`, by policy
/// index: the ledger's pace, the zone's health (read from every cached node only
/// when a switch waits on nothing else), and what clearing the way found.
pub fn gates(
    ledger: &mut DrainLedger,
    g: &Gathered,
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
    let pods = g.pods.read().expect("pod cache lock");
    let fleet = OnceCell::new();
    let all = || fleet.get_or_init(|| g.fleet()).as_slice();
    let views = || all().iter().map(|n| &n.view).collect::<Vec<_>>();
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
