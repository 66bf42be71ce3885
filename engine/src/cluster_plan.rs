//! The whole cluster at once: every node's plan, `maxTaintedNodes` admission and
//! each policy's summary (the numbers and reason its status reports).

use std::{cell::RefCell, collections::HashSet};

use k8s_openapi::jiff::Timestamp;

use crate::{
    cluster::{NodeView, PodIndex},
    decision::{NodeFacts, Verdict},
    drain,
    drain_plan::{ClusterDrains, DrainWait},
    node_plan::{
        Evaluated, Gates, NodePlan, UnknownPolicies, carries, plan_change, unchanged_plan,
    },
    out_of_service,
    policy_set::PolicySet,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Reconciled,
    InvalidSpec,
    Suspended,
    Conflict,
    ZoneUnhealthy,
    LimitReached,
    AwaitingShutdown,
    Draining,
    DryRun,
    Progressing,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Reconciled => "Reconciled",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::Suspended => "Suspended",
            Reason::Conflict => "Conflict",
            Reason::ZoneUnhealthy => "ZoneUnhealthy",
            Reason::LimitReached => "LimitReached",
            Reason::AwaitingShutdown => "AwaitingShutdown",
            Reason::Draining => "Draining",
            Reason::DryRun => "DryRun",
            Reason::Progressing => "Progressing",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySummary {
    pub name: String,
    pub selected_nodes: usize,
    pub tainted_nodes: usize,
    /// Nodes that want the taints and do not get them yet: held back by
    /// `maxTaintedNodes`, or running while out-of-service waits for them to be down.
    pub pending_nodes: usize,
    /// Of `pending_nodes`, those out-of-service waits on.
    pub awaiting_shutdown_nodes: usize,
    /// Nodes between NoSchedule and NoExecute once the plan is applied.
    pub draining_nodes: usize,
    /// Sorted, complete (status keeps the first 100).
    pub tainted_node_names: Vec<String>,
    pub ready: bool,
    pub reason: Reason,
    pub message: String,
}

#[derive(Debug, Clone)]
pub struct ClusterPlan {
    /// One per input node, in input order: `None` when the node's plan keeps its taints
    /// and annotations as they are and adds, removes, notes and completes nothing. Most
    /// nodes' plans are that on a resync; copying each node into one is what a full
    /// evaluation would otherwise spend most of its time on.
    pub changes: Vec<Option<NodePlan>>,
    /// Oldest policy first: each policy's status as the nodes are now (a policy
    /// with changes still to make is `Progressing`), what the status writer reports.
    pub policies: Vec<PolicySummary>,
    /// The same once the plan is applied: what `plan` reports.
    pub policies_after: Vec<PolicySummary>,
    pub next_check: Option<Timestamp>,
    /// The drains that wait, and for what.
    pub drain_waits: Vec<DrainWait>,
}

impl ClusterPlan {
    /// The plan of node `n`, which is `node`: a copy of the node when its plan changes nothing.
    pub fn node_plan(&self, n: usize, node: &NodeView) -> NodePlan {
        self.changes[n]
            .clone()
            .unwrap_or_else(|| unchanged_plan(node))
    }

    /// Every node's plan, in the order of `nodes` (the nodes planned).
    pub fn node_plans(&self, nodes: &[NodeView]) -> Vec<NodePlan> {
        assert_eq!(self.changes.len(), nodes.len(), "the nodes planned");
        nodes
            .iter()
            .enumerate()
            .map(|(n, node)| self.node_plan(n, node))
            .collect()
    }
}

/// Per policy, the nodes (by index) that may newly carry its matcher-triggered taints,
/// from the verdict of policy `i` on node `n`. Nodes already carrying them keep them;
/// the rest are admitted by name until the cap.
fn admit(
    set: &PolicySet,
    nodes: &[&NodeView],
    verdict: impl Fn(usize, usize) -> Verdict,
) -> Vec<Option<HashSet<usize>>> {
    (0..set.policies.len())
        .map(|i| {
            // Only a cap needs the count; most policies have none.
            set.policies[i]
                .rules
                .as_ref()
                .ok()?
                .max_tainted_nodes
                .as_ref()?;
            let selected = (0..nodes.len()).filter(|&n| verdict(n, i).selected).count();
            let limit = set.policies[i].tainted_limit(selected)?;
            let capped: Vec<usize> = (0..nodes.len())
                .filter(|&n| verdict(n, i).capped())
                .collect();
            let (carrying, mut waiting): (Vec<usize>, Vec<usize>) =
                capped.into_iter().partition(|&n| carries(set, i, nodes[n]));
            waiting.sort_by(|&a, &b| nodes[a].name.cmp(&nodes[b].name));
            let room = limit.saturating_sub(carrying.len());
            Some(
                carrying
                    .into_iter()
                    .chain(waiting.into_iter().take(room))
                    .collect(),
            )
        })
        .collect()
}

pub fn plan_cluster(
    set: &PolicySet,
    nodes: &[NodeView],
    pods: &PodIndex,
    now: Timestamp,
    unknown: UnknownPolicies,
) -> ClusterPlan {
    let nodes: Vec<&NodeView> = nodes.iter().collect();
    plan_cluster_refs(set, &nodes, pods, now, unknown)
}

/// [`plan_cluster`] on views held elsewhere (the node cache's), without copying them.
/// A drain waiting for evictions keeps waiting: nothing here knows the pods in the way.
pub fn plan_cluster_refs(
    set: &PolicySet,
    nodes: &[&NodeView],
    pods: &PodIndex,
    now: Timestamp,
    unknown: UnknownPolicies,
) -> ClusterPlan {
    plan_cluster_evicted(set, nodes, pods, now, unknown, &|_, _| false)
}

/// [`plan_cluster_refs`], where `evicted(node, policy)` says whether every pod in
/// the way of the policy's drain of the node is gone (`plan --live` and `explain`
/// list them).
pub fn plan_cluster_evicted(
    set: &PolicySet,
    nodes: &[&NodeView],
    pods: &PodIndex,
    now: Timestamp,
    unknown: UnknownPolicies,
    evicted: &dyn Fn(&str, &str) -> bool,
) -> ClusterPlan {
    let plan = |node: &NodeView, eval: &dyn Evaluated, gates: Gates| {
        plan_change(set, node, eval, gates, unknown, now)
    };
    let mut drains = ClusterDrains::new(set, now);
    // Every policy's verdict on every node. The reason words are built only for what
    // a node's plan changes or notes: building them, and a `NodeEvaluation` per node,
    // for every node was much of what this cost.
    let width = set.policies.len();
    let mut verdicts = Vec::with_capacity(nodes.len() * width);
    let mut next_check: Option<Timestamp> = None;
    // Whether a policy has a cap does not depend on how many nodes it selects.
    let has_cap: Vec<bool> = set
        .policies
        .iter()
        .map(|p| p.tainted_limit(0).is_some())
        .collect();
    let asks_room = |i: usize, v: Verdict, node: &NodeView| {
        has_cap[i] && set.policies[i].is_active() && v.capped() && !carries(set, i, node)
    };
    let mut tallies: Vec<Tally> = (0..width).map(|_| Tally::default()).collect();
    let mut facts: Option<RefCell<NodeFacts>> = None;
    let mut row = Vec::with_capacity(width);
    // Each node is planned and counted right after its evaluation, while its data is
    // still in the cache: reading a node is most of what planning costs, and 5,000 of
    // them do not stay cached from one pass to the next. Only a node that asks a cap
    // for room waits for the admissions, which need every node's verdicts, and a
    // node at a drain step waits for its zone's health and pace.
    let mut plans: Vec<Option<NodePlan>> = Vec::with_capacity(nodes.len());
    let mut waiting = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        // One `NodeFacts` for all nodes, to reuse its buffers.
        let facts = match &mut facts {
            Some(facts) => {
                facts.get_mut().load(node);
                facts
            }
            None => facts.insert(RefCell::new(NodeFacts::new(set, pods, node))),
        };
        row.clear();
        row.extend((0..width).map(|i| facts.get_mut().verdict(i, now, &mut next_check)));
        for (i, tally) in tallies.iter_mut().enumerate() {
            tally.count(set, i, n, node, row[i], has_cap[i]);
        }
        let asks_drain = !drains.is_empty() && {
            drains.observe(node, &row);
            drains.asks(node, &row)
        };
        if asks_drain || (0..width).any(|i| asks_room(i, row[i], node)) {
            waiting.push(n);
            plans.push(None);
        } else {
            let eval = Verdicts {
                facts,
                now,
                verdicts: &row,
            };
            let gates = Gates {
                admitted: &|i| !has_cap[i],
                ..Gates::OPEN_CAPS
            };
            let planned = plan(node, &eval, gates);
            if let Some(planned) = &planned {
                count_changes(set, planned, &mut tallies);
            }
            count_drains(set, &drains, node, planned.as_ref(), &row, &mut tallies);
            plans.push(planned);
        }
        verdicts.extend_from_slice(&row);
    }
    let admitted = admit(set, nodes, |n, i| verdicts[n * width + i]);
    for n in waiting {
        let node = nodes[n];
        let row = &verdicts[n * width..(n + 1) * width];
        let admit = |i: usize| admitted[i].as_ref().is_none_or(|a| a.contains(&n));
        let gate = |i: usize| {
            drains
                .gate(i, node, row[i], evicted(&node.name, &set.policies[i].name))
                .gate
        };
        let eval = Verdicts {
            facts: &RefCell::new(NodeFacts::new(set, pods, node)),
            now,
            verdicts: row,
        };
        let gates = Gates {
            admitted: &admit,
            drain: &gate,
        };
        plans[n] = plan(node, &eval, gates);
        if let Some(planned) = &plans[n] {
            count_changes(set, planned, &mut tallies);
        }
        count_drains(set, &drains, node, plans[n].as_ref(), row, &mut tallies);
    }
    if let Some(at) = drains.next_check() {
        next_check = Some(next_check.map_or(at, |n| n.min(at)));
    }
    for &i in drains.evicting() {
        tallies[i].held_zones = drains.held_zones(i);
    }
    let mut policies = Vec::with_capacity(width);
    let mut policies_after = Vec::with_capacity(width);
    for (i, mut tally) in tallies.into_iter().enumerate() {
        tally.settle(nodes, &admitted[i]);
        let now = summary(set, i, &tally);
        // Once the plan is written, nothing of it is still to change.
        tally.unconverged = 0;
        policies_after.push(summary(set, i, &tally));
        policies.push(now);
    }
    ClusterPlan {
        changes: plans,
        policies,
        policies_after,
        next_check,
        drain_waits: drains.into_waits(),
    }
}

/// Counts the node against every draining policy whose drain it is in once `plan`
/// (none: nothing changes) is applied.
fn count_drains(
    set: &PolicySet,
    drains: &ClusterDrains,
    node: &NodeView,
    plan: Option<&NodePlan>,
    row: &[Verdict],
    tallies: &mut [Tally],
) {
    for &i in drains.evicting() {
        if !row[i].wants_taints() {
            continue;
        }
        let step = match plan {
            Some(p) => drain::step_of(set, i, &p.taints, &p.managed, &p.drains),
            None => drain::step(set, i, node),
        };
        tallies[i].draining += usize::from(step.is_draining());
    }
}

/// One node's verdicts; the reason words of a policy are evaluated again when asked.
struct Verdicts<'f, 'a> {
    /// Loaded with the node.
    facts: &'f RefCell<NodeFacts<'a>>,
    now: Timestamp,
    verdicts: &'f [Verdict],
}

impl Evaluated for Verdicts<'_, '_> {
    fn verdict(&self, i: usize) -> Verdict {
        self.verdicts[i]
    }

    fn reason(&self, i: usize) -> String {
        self.facts
            .borrow_mut()
            .evaluate(i, self.now, &mut None)
            .reason()
    }
}

/// A policy's status numbers, counted node by node.
#[derive(Debug, Default)]
struct Tally {
    selected: usize,
    tainted_names: Vec<String>,
    pending: usize,
    /// Nodes that want the policy's capped taints and do not carry them yet: tainted
    /// or pending, depending on the admissions.
    waiting: Vec<usize>,
    /// Plans that change one of the policy's taints.
    unconverged: usize,
    /// Nodes between NoSchedule and NoExecute once the plan is applied.
    draining: usize,
    /// Zones where the policy holds its switches: `(zone, matched, selected)`.
    held_zones: Vec<(String, usize, usize)>,
    /// Running nodes its out-of-service taint waits on, by name.
    awaiting_shutdown: Vec<String>,
}

impl Tally {
    /// Counts node `n` for policy `i`, whose verdict there is `v`.
    fn count(
        &mut self,
        set: &PolicySet,
        i: usize,
        n: usize,
        node: &NodeView,
        v: Verdict,
        has_cap: bool,
    ) {
        self.selected += usize::from(v.selected);
        if !v.wants_taints() {
            return;
        }
        if set.policies[i].is_active() && out_of_service::awaits_shutdown(set, i, node) {
            self.awaiting_shutdown.push(node.name.clone());
        } else if has_cap && v.capped() && !carries(set, i, node) {
            self.waiting.push(n);
        } else {
            self.tainted_names.push(node.name.clone());
        }
    }

    /// Sorts the waiting nodes out, once the admissions are known.
    fn settle(&mut self, nodes: &[&NodeView], admitted: &Option<HashSet<usize>>) {
        for n in std::mem::take(&mut self.waiting) {
            if admitted.as_ref().is_some_and(|a| !a.contains(&n)) {
                self.pending += 1;
            } else {
                self.tainted_names.push(nodes[n].name.clone());
            }
        }
    }
}

/// Counts `plan` against every policy whose taints it changes.
fn count_changes(set: &PolicySet, plan: &NodePlan, tallies: &mut [Tally]) {
    if plan.added.is_empty() && plan.removed.is_empty() {
        return;
    }
    for (p, tally) in set.policies.iter().zip(tallies) {
        if plan
            .added
            .iter()
            .chain(&plan.removed)
            .any(|c| c.policy == p.name)
        {
            tally.unconverged += 1;
        }
    }
}

/// The summary of policy `i` from its counts.
fn summary(set: &PolicySet, i: usize, tally: &Tally) -> PolicySummary {
    let p = &set.policies[i];
    let Tally {
        selected,
        tainted_names,
        pending,
        unconverged,
        draining,
        held_zones,
        awaiting_shutdown,
        ..
    } = tally;
    let (selected, unconverged, draining) = (*selected, *unconverged, *draining);
    let pending = *pending + awaiting_shutdown.len();
    let mut tainted_names = tainted_names.clone();
    tainted_names.sort();
    let tainted = tainted_names.len();
    let counts = format!("{tainted} of {selected} selected nodes tainted");
    let conflicts = set.conflicts(i);
    let (ready, reason, message) = if let Err(invalid) = &p.rules {
        (false, Reason::InvalidSpec, invalid.to_string())
    } else if p.suspended && !p.deleting {
        (
            false,
            Reason::Suspended,
            format!(
                "suspended: no node is changed; would keep {tainted} of {selected} selected nodes tainted"
            ),
        )
    } else if !conflicts.is_empty() {
        let what: Vec<String> = conflicts
            .iter()
            .map(|c| format!("taint {} is owned by older policy {}", c.taint_id, c.owner))
            .collect();
        (
            false,
            Reason::Conflict,
            format!("{}; {counts}", what.join("; ")),
        )
    } else if !held_zones.is_empty() {
        let zones: Vec<String> = held_zones
            .iter()
            .map(|(zone, matched, selected)| {
                let zone = if zone.is_empty() {
                    "(no zone label)"
                } else {
                    zone
                };
                format!("{zone}: {matched} of {selected} selected nodes match")
            })
            .collect();
        (
            false,
            Reason::ZoneUnhealthy,
            format!(
                "no switch to NoExecute in unhealthy zone(s) {}; {counts}",
                zones.join(", ")
            ),
        )
    } else if tally.pending > 0 {
        let limit = p.tainted_limit(selected).unwrap_or(0);
        (
            false,
            Reason::LimitReached,
            format!(
                "{} node(s) held back by maxTaintedNodes (limit {limit}); {counts}",
                tally.pending
            ),
        )
    } else if !awaiting_shutdown.is_empty() {
        let mut names = awaiting_shutdown.clone();
        names.sort();
        let more = names.len().saturating_sub(5);
        names.truncate(5);
        let names = match more {
            0 => names.join(", "),
            _ => format!("{} and {more} more", names.join(", ")),
        };
        (
            false,
            Reason::AwaitingShutdown,
            format!(
                "{} node(s) still report Ready=True: out-of-service goes on once they are down ({names}); {counts}",
                awaiting_shutdown.len()
            ),
        )
    } else if draining > 0 {
        (
            false,
            Reason::Draining,
            format!("{draining} node(s) draining, NoSchedule until NoExecute; {counts}"),
        )
    } else if p.dry_run {
        (
            true,
            Reason::DryRun,
            format!("dry run: would keep {tainted} of {selected} selected nodes tainted"),
        )
    } else if unconverged > 0 {
        (
            false,
            Reason::Progressing,
            format!("{unconverged} node(s) still to change; {counts}"),
        )
    } else {
        (true, Reason::Reconciled, counts)
    };
    PolicySummary {
        name: p.name.clone(),
        selected_nodes: selected,
        tainted_nodes: tainted,
        pending_nodes: pending,
        awaiting_shutdown_nodes: awaiting_shutdown.len(),
        draining_nodes: draining,
        tainted_node_names: tainted_names,
        ready,
        reason,
        message,
    }
}
