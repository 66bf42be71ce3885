//! The whole cluster at once: every node's plan, `maxTaintedNodes` admission and
//! each policy's summary (the numbers and reason its status reports).

use std::collections::HashSet;

use k8s_openapi::jiff::Timestamp;

use crate::{
    cluster::{NodeView, PodIndex},
    decision::{NodeEvaluation, evaluate_node},
    node_plan::{NodePlan, UnknownPolicies, carries, plan_node},
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
    nodes: &[NodeView],
    evals: &[NodeEvaluation],
) -> Vec<Option<HashSet<usize>>> {
    (0..set.policies.len())
        .map(|i| {
            let selected = evals.iter().filter(|e| e.policies[i].selected).count();
            let limit = set.policies[i].tainted_limit(selected)?;
            let capped: Vec<usize> = (0..nodes.len())
                .filter(|&n| evals[n].policies[i].capped())
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
    let evals: Vec<NodeEvaluation> = nodes
        .iter()
        .map(|n| evaluate_node(set, n, pods, now))
        .collect();
    let admitted = admissions(set, nodes, &evals);
    let plans: Vec<NodePlan> = nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            let admit = |i: usize| admitted[i].as_ref().is_none_or(|a| a.contains(&n));
            plan_node(set, node, &evals[n], &admit, unknown, now)
        })
        .collect();
    let policies = (0..set.policies.len())
        .map(|i| summarize(set, i, nodes, &evals, &admitted[i], &plans))
        .collect();
    let next_check = evals.iter().filter_map(|e| e.next_check).min();
    ClusterPlan {
        nodes: plans,
        policies,
        next_check,
    }
}

/// The status numbers and reason of policy `i`.
pub fn summarize(
    set: &PolicySet,
    i: usize,
    nodes: &[NodeView],
    evals: &[NodeEvaluation],
    admitted: &Option<HashSet<usize>>,
    plans: &[NodePlan],
) -> PolicySummary {
    let p = &set.policies[i];
    let mut selected = 0;
    let mut tainted_names = Vec::new();
    let mut pending = 0;
    for (n, e) in evals.iter().enumerate() {
        let pe = &e.policies[i];
        selected += usize::from(pe.selected);
        if !pe.wants_taints() {
            continue;
        }
        let held = pe.capped()
            && !carries(set, i, &nodes[n])
            && admitted.as_ref().is_some_and(|a| !a.contains(&n));
        if held {
            pending += 1;
        } else {
            tainted_names.push(nodes[n].name.clone());
        }
    }
    tainted_names.sort();
    let tainted = tainted_names.len();
    let counts = format!("{tainted} of {selected} selected nodes tainted");
    let unconverged = plans
        .iter()
        .filter(|pl| {
            pl.added
                .iter()
                .chain(&pl.removed)
                .any(|c| c.policy == p.name)
        })
        .count();
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
