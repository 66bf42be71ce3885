//! What admission says about a TaintPolicy: whether it is refused, and the
//! warnings it gets. The validating webhook and `plan` both ask here, so `plan`
//! refuses exactly what the webhook refuses and prints the same warnings.
//!
//! A policy is refused only for what would make it `InvalidSpec`: what the API
//! server cannot check (a regex that does not compile, above all). Whatever
//! depends on the cluster (how many nodes it would taint, which older policy owns
//! one of its taints) is a warning, never a refusal.

use taint_operator_crd::{TaintEffect, TaintPolicy};

use crate::{
    cluster_plan::PolicySummary, invalid_spec::InvalidSpec, policy::CompiledPolicy,
    policy_set::PolicySet,
};

/// Taint-key prefixes autoscalers read as "this node is still starting": a
/// readiness taint under one of them does not make them add nodes.
pub const STARTUP_PREFIXES: [&str; 2] = [
    "startup-taint.cluster-autoscaler.kubernetes.io/",
    "readiness.k8s.io/",
];

pub use crate::out_of_service::OUT_OF_SERVICE_TAINT;

/// How many tainted node names the impact warning lists, at most.
pub const IMPACT_NAMES: usize = 5;
/// The API server may cut a warning longer than 256 characters.
const WARNING_BUDGET: usize = 240;

/// Why `policy` is refused: the field and what is wrong with it, as `InvalidSpec`
/// would report it.
pub fn refusal(policy: &TaintPolicy) -> Option<InvalidSpec> {
    CompiledPolicy::compile(policy).rules.err()
}

/// The warnings for policy `i` of `set` (the set as it would be with the policy
/// stored). `summary`: the policy's line of a plan of the cluster with that set,
/// when the caller has the cluster (the impact warning needs it).
pub fn warnings(set: &PolicySet, i: usize, summary: Option<&PolicySummary>) -> Vec<String> {
    let p = &set.policies[i];
    let mut out = Vec::new();
    if let Some(s) = summary {
        out.push(impact(s, p.dry_run));
    }
    for c in set.conflicts(i) {
        out.push(format!(
            "conflict: taint {} is owned by older policy {}; this policy will not touch it (reason Conflict)",
            c.taint_id, c.owner
        ));
    }
    let Ok(rules) = &p.rules else {
        return out;
    };
    if rules.eviction.is_none() {
        for (n, t) in p.taints.iter().enumerate() {
            // The node is gone: nothing runs there to drain, and the taint exists
            // so that its pods are deleted at once.
            if t.effect == TaintEffect::NoExecute && t.key != OUT_OF_SERVICE_TAINT {
                out.push(format!(
                    "spec.taints[{n}] ({}:NoExecute) has no spec.eviction: every pod that does not tolerate it is deleted at once, whatever its PodDisruptionBudget says; add spec.eviction to drain first",
                    t.key
                ));
            }
        }
    }
    for (n, t) in p.taints.iter().enumerate() {
        if t.key == OUT_OF_SERVICE_TAINT {
            out.push(format!(
                "spec.taints[{n}] ({}): force-detaches volumes, so it goes on only once the node's kubelet stops reporting Ready, never on a running node; drain first with another taint (examples/spot-out-of-service.yaml)",
                t.key
            ));
        }
    }
    if rules.readiness.is_some() {
        for (n, t) in p.taints.iter().enumerate() {
            if !STARTUP_PREFIXES
                .iter()
                .any(|prefix| t.key.starts_with(prefix))
            {
                out.push(format!(
                    "spec.taints[{n}] ({}): a readiness taint without a startup prefix; autoscalers may add nodes while it holds new ones. Use {} or {} (docs/autoscalers.md)",
                    t.key, STARTUP_PREFIXES[0], STARTUP_PREFIXES[1]
                ));
            }
        }
    }
    out
}

/// The set `policies` make with `candidate` stored (it replaces the policy of its
/// name, as an update does), and the candidate's index in it.
pub fn set_with<'p>(
    policies: impl IntoIterator<Item = &'p TaintPolicy>,
    candidate: &TaintPolicy,
) -> (PolicySet, usize) {
    let name = candidate.metadata.name.as_deref().unwrap_or_default();
    let others = policies
        .into_iter()
        .filter(|p| p.metadata.name.as_deref() != Some(name));
    let set = PolicySet::new(
        others
            .map(CompiledPolicy::compile)
            .chain([CompiledPolicy::compile(candidate)]),
    );
    let i = set.index_of(name).expect("the candidate is in the set");
    (set, i)
}

/// `impact: would taint 3 of 120 selected nodes now (a, b, c); maxTaintedNodes holds back 2 more`.
fn impact(s: &PolicySummary, dry_run: bool) -> String {
    let mut line = format!(
        "impact: {} {} of {} selected nodes now",
        if dry_run {
            "dry run, would keep tainted"
        } else {
            "would taint"
        },
        s.tainted_nodes,
        s.selected_nodes
    );
    let capped = s.pending_nodes - s.awaiting_shutdown_nodes;
    let held = match (capped, s.awaiting_shutdown_nodes) {
        (0, 0) => None,
        (n, 0) => Some(format!("; maxTaintedNodes holds back {n} more")),
        (0, w) => Some(format!("; {w} more once they are down (out-of-service)")),
        (n, w) => Some(format!(
            "; maxTaintedNodes holds back {n} more; {w} more once they are down (out-of-service)"
        )),
    };
    // As many names as fit (node names run to 253 characters).
    let room =
        WARNING_BUDGET.saturating_sub(line.len() + held.as_ref().map_or(0, String::len) + 16);
    let mut shown: Vec<&str> = Vec::new();
    let mut used = 0;
    for name in s.tainted_node_names.iter().take(IMPACT_NAMES) {
        if used + name.len() + 2 > room {
            break;
        }
        used += name.len() + 2;
        shown.push(name);
    }
    let more = s.tainted_node_names.len() - shown.len();
    match (shown.is_empty(), more) {
        (true, 0) => {}
        (true, _) => line.push_str(&format!(" ({more} nodes)")),
        (false, 0) => line.push_str(&format!(" ({})", shown.join(", "))),
        (false, _) => line.push_str(&format!(" ({} and {more} more)", shown.join(", "))),
    }
    if let Some(held) = held {
        line.push_str(&held);
    }
    line
}
