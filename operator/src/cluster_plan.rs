//! The whole cluster at once: every node's plan, `maxTaintedNodes` admission and
//! each policy's summary (the numbers and reason its status reports).

use std::collections::HashSet;

use k8s_openapi::jiff::Timestamp;

use crate::{
    cluster::{NodeView, PodIndex},
    decision::{NodeEvaluation, NodeFacts, Verdict},
    node_plan::{Evaluated, NodePlan, UnknownPolicies, carries, plan_evaluated},
    policy_set::PolicySet,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Reconciled,
    InvalidSpec,
    Conflict,
    LimitReached,
    DryRun,
    Progressing,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Reconciled => "Reconciled",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::Conflict => "Conflict",
            Reason::LimitReached => "LimitReached",
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
    pub pending_nodes: usize,
    /// Sorted, complete (status keeps the first 100).
    pub tainted_node_names: Vec<String>,
    pub ready: bool,
    pub reason: Reason,
    pub message: String,
}

#[derive(Debug, Clone)]
pub struct ClusterPlan {
    /// One per input node, in input order.
    pub nodes: Vec<NodePlan>,
    /// Oldest policy first.
    pub policies: Vec<PolicySummary>,
    pub next_check: Option<Timestamp>,
}

/// Per policy, the nodes (by index) that may newly carry its matcher-triggered taints.
/// Nodes already carrying them keep them; the rest are admitted by name until the cap.
pub fn admissions(
    set: &PolicySet,
    nodes: &[&NodeView],
    evals: &[NodeEvaluation],
) -> Vec<Option<HashSet<usize>>> {
    admit(set, nodes, |n, i| evals[n].policies[i].verdict())
}

/// [`admissions`] from the verdict of policy `i` on node `n`.
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
            let (carrying, mut waiting): (Vec<usize>, Vec<usize>) = capped
                .into_iter()
                .partition(|&n| carries(set, i, &nodes[n]));
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
pub fn plan_cluster_refs(
    set: &PolicySet,
    nodes: &[&NodeView],
    pods: &PodIndex,
    now: Timestamp,
    unknown: UnknownPolicies,
) -> ClusterPlan {
    // Every policy's verdict on every node. The reason words are built later, and only
    // for what a node's plan changes or notes: building them, and a `NodeEvaluation`
    // per node, for every node was much of what this cost.
    let width = set.policies.len();
    let mut verdicts = Vec::with_capacity(nodes.len() * width);
    let mut next_check: Option<Timestamp> = None;
    // Whether a policy has a cap does not depend on how many nodes it selects.
    let has_cap: Vec<bool> = set
        .policies
        .iter()
        .map(|p| p.is_active() && p.tainted_limit(0).is_some())
        .collect();
    let mut facts: Option<NodeFacts> = None;
    let mut row = Vec::with_capacity(width);
    // A node is planned right after its evaluation, while its data is still in the
    // cache (reading a node is most of what planning costs, and 5,000 of them do not
    // stay cached from one pass to the next). Only a node that asks a cap for room
    // waits for the admissions, which need every node's verdicts.
    let mut plans: Vec<Option<NodePlan>> = Vec::with_capacity(nodes.len());
    for node in nodes {
        // One `NodeFacts` for all nodes, to reuse its buffers.
        let facts = match &mut facts {
            Some(facts) => {
                facts.load(node);
                facts
            }
            None => facts.insert(NodeFacts::new(set, pods, node)),
        };
        row.clear();
        row.extend((0..width).map(|i| facts.verdict(i, now, &mut next_check)));
        let asks = (0..width).any(|i| has_cap[i] && row[i].capped() && !carries(set, i, node));
        let plan = (!asks).then(|| {
            let eval = Verdicts {
                set,
                node,
                pods,
                now,
                verdicts: &row,
            };
            plan_evaluated(set, node, &eval, &|i| !has_cap[i], unknown, now)
        });
        plans.push(plan);
        verdicts.extend_from_slice(&row);
    }
    let verdict = |n: usize, i: usize| verdicts[n * width + i];
    let admitted = admit(set, nodes, verdict);
    let plans: Vec<NodePlan> = plans
        .into_iter()
        .enumerate()
        .map(|(n, plan)| {
            plan.unwrap_or_else(|| {
                let admit = |i: usize| admitted[i].as_ref().is_none_or(|a| a.contains(&n));
                let eval = Verdicts {
                    set,
                    node: &nodes[n],
                    pods,
                    now,
                    verdicts: &verdicts[n * width..(n + 1) * width],
                };
                plan_evaluated(set, &nodes[n], &eval, &admit, unknown, now)
            })
        })
        .collect();
    let unconverged = unconverged(set, &plans);
    let policies = (0..width)
        .map(|i| {
            summary(
                set,
                i,
                nodes,
                |n| verdict(n, i),
                &admitted[i],
                unconverged[i],
            )
        })
        .collect();
    ClusterPlan {
        nodes: plans,
        policies,
        next_check,
    }
}

/// One node's verdicts; the reason words of a policy are evaluated again when asked.
struct Verdicts<'a> {
    set: &'a PolicySet,
    node: &'a NodeView,
    pods: &'a PodIndex,
    now: Timestamp,
    verdicts: &'a [Verdict],
}

impl Evaluated for Verdicts<'_> {
    fn verdict(&self, i: usize) -> Verdict {
        self.verdicts[i]
    }

    fn reasons(&self, i: usize) -> Vec<String> {
        NodeFacts::new(self.set, self.pods, self.node)
            .evaluate(i, self.now, &mut None)
            .reasons()
    }
}

/// Per policy, how many plans change one of its taints.
fn unconverged(set: &PolicySet, plans: &[NodePlan]) -> Vec<usize> {
    let mut counts = vec![0; set.policies.len()];
    for pl in plans {
        if pl.added.is_empty() && pl.removed.is_empty() {
            continue;
        }
        for (i, p) in set.policies.iter().enumerate() {
            if pl
                .added
                .iter()
                .chain(&pl.removed)
                .any(|c| c.policy == p.name)
            {
                counts[i] += 1;
            }
        }
    }
    counts
}

/// The status numbers and reason of policy `i`.
pub fn summarize(
    set: &PolicySet,
    i: usize,
    nodes: &[&NodeView],
    evals: &[NodeEvaluation],
    admitted: &Option<HashSet<usize>>,
    plans: &[NodePlan],
) -> PolicySummary {
    let unconverged = unconverged(set, plans)[i];
    summary(
        set,
        i,
        nodes,
        |n| evals[n].policies[i].verdict(),
        admitted,
        unconverged,
    )
}

/// [`summarize`] from the verdict of policy `i` on node `n` and the number of plans
/// that change its taints.
fn summary(
    set: &PolicySet,
    i: usize,
    nodes: &[&NodeView],
    verdict: impl Fn(usize) -> Verdict,
    admitted: &Option<HashSet<usize>>,
    unconverged: usize,
) -> PolicySummary {
    let p = &set.policies[i];
    let mut selected = 0;
    let mut tainted_names = Vec::new();
    let mut pending = 0;
    for (n, node) in nodes.iter().enumerate() {
        let pe = verdict(n);
        selected += usize::from(pe.selected);
        if !pe.wants_taints() {
            continue;
        }
        let held = pe.capped()
            && !carries(set, i, node)
            && admitted.as_ref().is_some_and(|a| !a.contains(&n));
        if held {
            pending += 1;
        } else {
            tainted_names.push(node.name.clone());
        }
    }
    tainted_names.sort();
    let tainted = tainted_names.len();
    let counts = format!("{tainted} of {selected} selected nodes tainted");
    let conflicts = set.conflicts(i);
    let (ready, reason, message) = if let Err(invalid) = &p.rules {
        (false, Reason::InvalidSpec, invalid.to_string())
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
    } else if pending > 0 {
        let limit = p.tainted_limit(selected).unwrap_or(0);
        (
            false,
            Reason::LimitReached,
            format!("{pending} node(s) held back by maxTaintedNodes (limit {limit}); {counts}"),
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
        tainted_node_names: tainted_names,
        ready,
        reason,
        message,
    }
}
