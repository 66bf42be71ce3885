//! Why one node carries the taints it does: every policy's view of it, check by
//! check, and the action the operator takes now.
//!
//! Nothing here decides anything of its own. The verdicts and reasons come from
//! [`evaluate_node`], the action and the cap from the node's plan in
//! [`plan_cluster`], and each check from the same matchers (`Pattern`, `Selector`,
//! [`ConditionState`], the critical-pod look-ups) the decision reads, so `explain`
//! cannot tell a different story from the one `run` acts on.

use std::collections::BTreeMap;

use k8s_openapi::{apimachinery::pkg::util::intstr::IntOrString, jiff::Timestamp};
use serde::Serialize;

use crate::{
    cluster::{NodeView, PodIndex},
    cluster_plan::plan_cluster_evicted,
    decision::{ConditionState, NodeFacts, Reading, evaluate_node},
    drain::{self, DrainStep, Wait},
    node_plan::{NodePlan, UnknownPolicies},
    ownership::taint_id,
    policy::Rules,
    policy_set::PolicySet,
};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub node: String,
    /// The time `for` windows are measured at (RFC 3339).
    pub at: String,
    /// Every taint on the node, with the policy the ownership annotation names.
    pub taints: Vec<NodeTaint>,
    /// Every policy, oldest first.
    pub policies: Vec<PolicyExplanation>,
    /// What the operator's next write does to the node, policy by policy.
    pub changes: Vec<PlannedChange>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTaint {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
    /// `None`: a foreign taint, which the operator never touches.
    pub owner: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    Add,
    Remove,
    None,
    /// Wanted, but `maxTaintedNodes` holds it back.
    Held,
    /// Between NoSchedule and NoExecute: the drain waits (see `drain`).
    Draining,
    /// `spec.suspend`: the policy changes nothing now.
    Suspended,
    /// Out-of-service waits for the node to be down (see `out_of_service`).
    AwaitingShutdown,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Add => "add",
            Action::Remove => "remove",
            Action::None => "none",
            Action::Held => "held",
            Action::Draining => "draining",
            Action::Suspended => "suspended",
            Action::AwaitingShutdown => "awaitingShutdown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyExplanation {
    pub name: String,
    pub mode: String,
    pub dry_run: bool,
    pub suspended: bool,
    pub deleting: bool,
    /// Why the spec cannot be applied (`field: message`), if it cannot.
    pub invalid: Option<String>,
    pub selected: bool,
    /// The node selector's terms this node fails (empty when selected).
    pub not_selected_because: Vec<String>,
    pub wants_taint: bool,
    pub action: Action,
    pub reasons: Vec<String>,
    /// The older policy that owns one of this policy's taints, if any.
    pub conflict_with: Option<String>,
    /// `<key>:<effect> owned by <policy>`, for every conflicting taint.
    pub conflicts: Vec<String>,
    /// The declared taints, `key[=value]:Effect`.
    pub taints: Vec<String>,
    /// The taints the node's ownership annotation records for this policy.
    pub owns: Vec<String>,
    pub matchers: Vec<MatcherExplanation>,
    pub readiness: Option<ReadinessExplanation>,
    /// When a BootstrapOnly policy completed here (RFC 3339), if it did.
    pub bootstrap_completed_at: Option<String>,
    pub cap: Option<CapExplanation>,
    /// `spec.eviction`: where the node is in the policy's drain.
    pub drain: Option<DrainExplanation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainExplanation {
    /// `idle`, `waiting` (the stand-in is on, the drain not started), `draining`
    /// or `switched` (NoExecute is on).
    pub step: &'static str,
    /// The node's zone, for the pace and the zone hold (`""`: no zone label).
    pub zone: String,
    /// When the drain started (RFC 3339).
    pub started_at: Option<String>,
    /// When `drainTimeout` switches it anyway (RFC 3339).
    pub timeout_at: Option<String>,
    /// What the next step waits for, in words.
    pub waiting_for: Option<String>,
    /// The pods still in the way (`namespace/name`), when they were listed.
    pub pods_in_the_way: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MatcherExplanation {
    /// Every condition matches and no `for` window is still running.
    pub matches: bool,
    pub conditions: Vec<ConditionExplanation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionExplanation {
    #[serde(rename = "type")]
    pub type_: String,
    /// The status pattern the matcher wants.
    pub want_status: String,
    pub want_reason: Option<String>,
    /// The node's condition of this type; `None` when it has none.
    pub status: Option<String>,
    pub reason: Option<String>,
    /// `missing`, `differs`, `noTransitionTime`, `waiting` or `matches`.
    pub state: &'static str,
    pub matches: bool,
    /// The `for` window, as written in the policy.
    #[serde(rename = "for")]
    pub for_: Option<String>,
    /// How long the condition has matched, while its window runs.
    pub matched_for: Option<String>,
    /// When the window ends: the taint is due then, if the rest of the matcher holds.
    pub taint_at: Option<String>,
    /// With `staleAfter`: when the condition went stale (it then reads `Unknown`).
    pub stale_since: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessExplanation {
    pub ready: bool,
    pub conditions: Vec<ReadinessConditionExplanation>,
    pub critical_pods: Vec<CriticalPodExplanation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessConditionExplanation {
    #[serde(rename = "type")]
    pub type_: String,
    pub want_status: String,
    pub status: Option<String>,
    pub ready: bool,
    /// With `staleAfter`: when the condition went stale (it then reads `Unknown`).
    pub stale_since: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CriticalPodExplanation {
    pub name: String,
    pub namespace: String,
    /// In label-selector syntax.
    pub selector: String,
    /// A selected pod on the node is Ready.
    pub ready: bool,
    /// The selected pods on the node, by name.
    pub pods: Vec<PodExplanation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    pub name: String,
    pub ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapExplanation {
    /// `maxTaintedNodes` as written.
    pub max_tainted_nodes: String,
    /// The number it comes to for the nodes the policy selects.
    pub limit: usize,
    pub selected_nodes: usize,
    pub tainted_nodes: usize,
    /// This node is one the cap holds back.
    pub held: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedChange {
    pub action: Action,
    /// `key[=value]:Effect`.
    pub taint: String,
    pub policy: String,
    pub reason: String,
}

/// Explains node `n` of `nodes`. The whole cluster is planned, as the controller
/// does, because a `maxTaintedNodes` cap and a drain's pace depend on the other
/// nodes. `in_the_way`: per policy, the pods still in the way of its drain of the
/// node, where the caller listed them (a drain whose pods are not listed waits).
pub fn explain_node(
    set: &PolicySet,
    nodes: &[NodeView],
    n: usize,
    pods: &PodIndex,
    now: Timestamp,
    unknown: UnknownPolicies,
    in_the_way: &BTreeMap<String, Vec<String>>,
) -> Explanation {
    let node = &nodes[n];
    let refs: Vec<&NodeView> = nodes.iter().collect();
    let evicted = |name: &str, policy: &str| {
        name == node.name && in_the_way.get(policy).is_some_and(Vec::is_empty)
    };
    let cluster = plan_cluster_evicted(set, &refs, pods, now, unknown, &evicted);
    let plan = cluster.node_plan(n, node);
    let eval = evaluate_node(set, node, pods, now);
    let mut facts = NodeFacts::new(set, pods, node);
    let policies = set
        .policies
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let pe = &eval.policies[i];
            let rules = p.rules.as_ref().ok();
            let summary = &cluster.policies[i];
            let conflicts = set.conflicts(i);
            PolicyExplanation {
                name: p.name.clone(),
                mode: format!("{:?}", p.mode),
                dry_run: p.dry_run,
                suspended: p.suspended,
                deleting: p.deleting,
                invalid: p.rules.as_ref().err().map(ToString::to_string),
                selected: pe.selected,
                not_selected_because: match rules {
                    Some(r) if !pe.selected => r
                        .node_selector
                        .failing_terms(|key| crate::labels::LabelMap::get(&node.labels, key)),
                    _ => Vec::new(),
                },
                wants_taint: pe.wants_taints(),
                action: match action(&plan, &p.name) {
                    Action::None if p.suspended && !p.deleting && pe.selected => Action::Suspended,
                    Action::None
                        if pe.wants_taints()
                            && drain::step_of(
                                set,
                                i,
                                &plan.taints,
                                &plan.managed,
                                &plan.drains,
                            )
                            .is_draining() =>
                    {
                        Action::Draining
                    }
                    other => other,
                },
                reasons: pe.reasons(),
                conflict_with: conflicts.first().map(|c| c.owner.clone()),
                conflicts: conflicts
                    .iter()
                    .map(|c| format!("{} owned by {}", c.taint_id, c.owner))
                    .collect(),
                taints: p
                    .taints
                    .iter()
                    .map(|t| taint_text(&t.key, t.value.as_deref(), t.effect.as_str()))
                    .collect(),
                owns: node
                    .managed
                    .iter()
                    .filter(|(_, owner)| *owner == p.name)
                    .map(|(id, _)| id.to_string())
                    .collect(),
                matchers: rules
                    .map(|r| explain_matchers(r, node, now))
                    .unwrap_or_default(),
                readiness: rules.and_then(|r| explain_readiness(set, i, r, node, &mut facts, now)),
                bootstrap_completed_at: node.bootstrapped.get(&p.name).map(|c| c.at.to_string()),
                cap: rules
                    .and_then(|r| r.max_tainted_nodes.as_ref())
                    .map(|max| CapExplanation {
                        max_tainted_nodes: match max {
                            IntOrString::Int(n) => n.to_string(),
                            IntOrString::String(s) => s.clone(),
                        },
                        limit: p.tainted_limit(summary.selected_nodes).unwrap_or(0),
                        selected_nodes: summary.selected_nodes,
                        tainted_nodes: summary.tainted_nodes,
                        held: plan.held.contains(&p.name),
                    }),
                drain: explain_drain(set, i, node, &plan, &cluster.drain_waits, in_the_way),
            }
        })
        .collect();
    let changes = plan
        .added
        .iter()
        .map(|c| (Action::Add, c))
        .chain(plan.removed.iter().map(|c| (Action::Remove, c)))
        .map(|(action, c)| PlannedChange {
            action,
            taint: taint_text(&c.key, c.value.as_deref(), c.effect.as_str()),
            policy: c.policy.clone(),
            reason: c.reason.clone(),
        })
        .collect();
    Explanation {
        node: node.name.clone(),
        at: now.to_string(),
        taints: node
            .taints
            .iter()
            .map(|t| NodeTaint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
                owner: node
                    .managed
                    .owner(&taint_id(&t.key, &t.effect))
                    .map(str::to_string),
            })
            .collect(),
        policies,
        changes,
    }
}

/// Where the node is in policy `i`'s drain once `plan` is applied, and what it
/// waits for.
fn explain_drain(
    set: &PolicySet,
    i: usize,
    node: &NodeView,
    plan: &NodePlan,
    waits: &[crate::drain_plan::DrainWait],
    in_the_way: &BTreeMap<String, Vec<String>>,
) -> Option<DrainExplanation> {
    let rules = drain::rules_of(set, i)?;
    drain::drained_taints(set, i).next()?;
    let p = &set.policies[i];
    let step = drain::step_of(set, i, &plan.taints, &plan.managed, &plan.drains);
    let zone = drain::zone_of(&node.labels).to_string();
    let started = plan.drains.started(&p.name);
    let wait = waits
        .iter()
        .find(|w| w.node == node.name && w.policy == p.name)
        .map(|w| w.wait);
    let pods = in_the_way.get(&p.name).cloned();
    let zone_name = if zone.is_empty() {
        "(no zone label)".to_string()
    } else {
        zone.clone()
    };
    let waiting_for = match (step, wait) {
        (DrainStep::Switched | DrainStep::Idle, _) => None,
        (_, Some(Wait::StartSlot(at))) => Some(format!(
            "its turn to start draining in zone {zone_name}, at {at}"
        )),
        (_, Some(Wait::SwitchSlot(at))) => Some(format!(
            "its turn to switch to NoExecute in zone {zone_name}, at {at}"
        )),
        (_, Some(Wait::ZoneHeld)) => Some(format!(
            "zone {zone_name} to heal: too many of its nodes match (pauseWhenZoneUnhealthy)"
        )),
        (_, Some(Wait::ZoneSettling(at))) => Some(format!(
            "zone {zone_name} to settle: its matching share moved less than zoneSettle ago; judged at {at}"
        )),
        (_, Some(Wait::Evictions { .. })) => Some(match &pods {
            Some(pods) => format!("{} pod(s) in the way to be evicted", pods.len()),
            None => "the pods in the way to be evicted".to_string(),
        }),
        (_, None) => Some("the operator's next reconcile".to_string()),
    };
    Some(DrainExplanation {
        step: match step {
            DrainStep::Idle => "idle",
            DrainStep::Waiting => "waiting",
            DrainStep::Draining { .. } => "draining",
            DrainStep::Switched => "switched",
        },
        zone,
        started_at: started.map(|t| t.to_string()),
        timeout_at: match (step, started, rules.drain_timeout) {
            (DrainStep::Draining { .. }, Some(t), Some(d)) => Some(drain::add(t, d).to_string()),
            _ => None,
        },
        waiting_for,
        pods_in_the_way: pods,
    })
}

/// What the node's plan does with the policy's taints.
fn action(plan: &NodePlan, policy: &str) -> Action {
    if plan.added.iter().any(|c| c.policy == policy) {
        Action::Add
    } else if plan.removed.iter().any(|c| c.policy == policy) {
        Action::Remove
    } else if plan.held.iter().any(|p| p == policy) {
        Action::Held
    } else if plan.awaiting_shutdown.iter().any(|p| p == policy) {
        Action::AwaitingShutdown
    } else {
        Action::None
    }
}

pub fn taint_text(key: &str, value: Option<&str>, effect: &str) -> String {
    match value {
        Some(v) if !v.is_empty() => format!("{key}={v}:{effect}"),
        _ => format!("{key}:{effect}"),
    }
}

fn explain_matchers(rules: &Rules, node: &NodeView, now: Timestamp) -> Vec<MatcherExplanation> {
    rules
        .matchers
        .iter()
        .map(|group| {
            let conditions: Vec<ConditionExplanation> = group
                .iter()
                .map(|c| {
                    let nc = node.condition(&c.type_);
                    let state = ConditionState::of(c, nc, now);
                    let read = nc.map(|nc| Reading::of(nc, c.stale_after, now));
                    let (matched_for, taint_at) = match state {
                        ConditionState::Waiting { since, ends } => {
                            (Some(elapsed(since, now)), Some(ends.to_string()))
                        }
                        _ => (None, None),
                    };
                    ConditionExplanation {
                        type_: c.type_.clone(),
                        want_status: c.status_source.clone(),
                        want_reason: c.reason_source.clone(),
                        status: nc.map(|nc| nc.status.to_string()),
                        reason: nc.map(|nc| nc.reason.to_string()).filter(|r| !r.is_empty()),
                        state: match state {
                            ConditionState::Missing => "missing",
                            ConditionState::Differs => "differs",
                            ConditionState::NoTransitionTime => "noTransitionTime",
                            ConditionState::Waiting { .. } => "waiting",
                            ConditionState::Matches => "matches",
                        },
                        matches: state == ConditionState::Matches,
                        for_: c.for_source.clone(),
                        matched_for,
                        taint_at,
                        stale_since: read.and_then(|r| r.stale_since).map(|t| t.to_string()),
                    }
                })
                .collect();
            MatcherExplanation {
                matches: conditions.iter().all(|c| c.matches),
                conditions,
            }
        })
        .collect()
}

fn explain_readiness(
    set: &PolicySet,
    i: usize,
    rules: &Rules,
    node: &NodeView,
    facts: &mut NodeFacts,
    now: Timestamp,
) -> Option<ReadinessExplanation> {
    let r = rules.readiness.as_ref()?;
    let conditions: Vec<ReadinessConditionExplanation> = r
        .conditions
        .iter()
        .map(|c| {
            let read = node
                .condition(&c.type_)
                .map(|nc| Reading::of(nc, c.stale_after, now));
            ReadinessConditionExplanation {
                type_: c.type_.clone(),
                want_status: c.status_source.clone(),
                status: read.map(|r| r.status.to_string()),
                ready: read.is_some_and(|r| c.status.is_match(r.status)),
                stale_since: read.and_then(|r| r.stale_since).map(|t| t.to_string()),
            }
        })
        .collect();
    let critical_pods: Vec<CriticalPodExplanation> = r
        .critical_pods
        .iter()
        .zip(set.pod_checks_of(i))
        .map(|(cp, &check)| {
            let mut pods: Vec<PodExplanation> = facts
                .critical_pods(check)
                .map(|p| PodExplanation {
                    name: p.name.to_string(),
                    ready: p.ready,
                })
                .collect();
            pods.sort_by(|a, b| a.name.cmp(&b.name));
            CriticalPodExplanation {
                name: cp.name.clone(),
                namespace: cp.namespace.clone(),
                selector: cp.label_selector.clone(),
                ready: facts.critical_pod_ready(check),
                pods,
            }
        })
        .collect();
    Some(ReadinessExplanation {
        ready: conditions.iter().all(|c| c.ready) && critical_pods.iter().all(|c| c.ready),
        conditions,
        critical_pods,
    })
}

/// `12s`, `3m4s`, `1h2m3s`: whole seconds are plenty for a window someone reads.
fn elapsed(since: Timestamp, now: Timestamp) -> String {
    let secs = now.duration_since(since).as_secs().max(0);
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}
