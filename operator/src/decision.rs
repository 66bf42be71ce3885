//! Per node, per policy: is the node selected, which matchers match, what keeps
//! it from being ready, and when a `for` window ends. No I/O, no side effects.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use taint_operator_crd::Mode;

use crate::{
    cluster::{NodePods, NodeView, PodIndex, PodView},
    policy::{CompiledCondition, CompiledPolicy, Readiness},
    policy_set::PolicySet,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Invalid or not selected: the policy wants none of its taints here.
    NotApplicable,
    /// A BootstrapOnly policy completed on this node earlier (same uid).
    Completed,
    Evaluated {
        /// One line per matching matcher; non-empty means "taint".
        matched: Vec<String>,
        /// One line per failed readiness check; non-empty means "hold the taints".
        unready: Vec<String>,
        /// Readiness was declared (so "ready" means something).
        has_readiness: bool,
        has_matchers: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEval {
    pub selected: bool,
    pub outcome: Outcome,
}

impl PolicyEval {
    pub fn wants_taints(&self) -> bool {
        matches!(&self.outcome, Outcome::Evaluated { matched, unready, .. } if !matched.is_empty() || !unready.is_empty())
    }

    /// Wanted only because a matcher matched: the taints `maxTaintedNodes` caps.
    pub fn capped(&self) -> bool {
        matches!(&self.outcome, Outcome::Evaluated { matched, unready, .. } if !matched.is_empty() && unready.is_empty())
    }

    /// Ready by every check and no matcher matches: a BootstrapOnly policy is done here.
    pub fn ready_and_clear(&self) -> bool {
        matches!(&self.outcome, Outcome::Evaluated { matched, unready, .. } if matched.is_empty() && unready.is_empty())
    }

    /// Why the policy wants its taints, or why not, as short phrases.
    pub fn reasons(&self) -> Vec<String> {
        match &self.outcome {
            Outcome::NotApplicable if !self.selected => vec!["node is not selected".into()],
            Outcome::NotApplicable => vec!["policy does not apply".into()],
            Outcome::Completed => vec!["bootstrap completed earlier".into()],
            Outcome::Evaluated {
                matched, unready, ..
            } if !matched.is_empty() || !unready.is_empty() => {
                matched.iter().chain(unready).cloned().collect()
            }
            Outcome::Evaluated {
                has_readiness: true,
                has_matchers: true,
                ..
            } => {
                vec!["no matcher matches and readiness is satisfied".into()]
            }
            Outcome::Evaluated {
                has_readiness: true,
                ..
            } => vec!["readiness is satisfied".into()],
            Outcome::Evaluated { .. } => vec!["no matcher matches".into()],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvaluation {
    /// Indexed like `PolicySet::policies`.
    pub policies: Vec<PolicyEval>,
    /// The earliest end of a running `for` window: evaluate again then.
    pub next_check: Option<Timestamp>,
}

pub fn evaluate_node(
    set: &PolicySet,
    node: &NodeView,
    pods: &PodIndex,
    now: Timestamp,
) -> NodeEvaluation {
    let mut next_check: Option<Timestamp> = None;
    // One index lookup per node, not one per critical pod of every policy.
    let pods = pods.node(&node.name);
    let policies = set
        .policies
        .iter()
        .map(|p| evaluate_in(p, node, pods, now, &mut next_check))
        .collect();
    NodeEvaluation {
        policies,
        next_check,
    }
}

pub fn evaluate_policy(
    policy: &CompiledPolicy,
    node: &NodeView,
    pods: &PodIndex,
    now: Timestamp,
    next_check: &mut Option<Timestamp>,
) -> PolicyEval {
    evaluate_in(policy, node, pods.node(&node.name), now, next_check)
}

fn evaluate_in(
    policy: &CompiledPolicy,
    node: &NodeView,
    pods: NodePods<'_>,
    now: Timestamp,
    next_check: &mut Option<Timestamp>,
) -> PolicyEval {
    let Ok(rules) = &policy.rules else {
        return PolicyEval {
            selected: false,
            outcome: Outcome::NotApplicable,
        };
    };
    if !rules.node_selector.matches(&node.labels) {
        return PolicyEval {
            selected: false,
            outcome: Outcome::NotApplicable,
        };
    }
    if policy.mode == Mode::BootstrapOnly && node.bootstrapped.completed(&policy.name, &policy.uid)
    {
        return PolicyEval {
            selected: true,
            outcome: Outcome::Completed,
        };
    }
    let mut matched = Vec::new();
    for group in &rules.matchers {
        match match_group(group, node, now) {
            GroupMatch::Matched(reason) => matched.push(reason),
            GroupMatch::MatchesAt(t) => *next_check = Some(next_check.map_or(t, |n| n.min(t))),
            GroupMatch::No => {}
        }
    }
    let unready = rules
        .readiness
        .as_ref()
        .map(|r| unready_reasons(r, node, pods))
        .unwrap_or_default();
    PolicyEval {
        selected: true,
        outcome: Outcome::Evaluated {
            matched,
            unready,
            has_readiness: rules.readiness.is_some(),
            has_matchers: !rules.matchers.is_empty(),
        },
    }
}

enum GroupMatch {
    Matched(String),
    /// Every condition matches but a `for` window is still running until then.
    MatchesAt(Timestamp),
    No,
}

fn match_group(group: &[CompiledCondition], node: &NodeView, now: Timestamp) -> GroupMatch {
    let mut window_ends: Option<Timestamp> = None;
    for c in group {
        let Some(nc) = node.condition(&c.type_) else {
            return GroupMatch::No;
        };
        if !c.status.is_match(&nc.status)
            || !c.reason.as_ref().is_none_or(|r| r.is_match(&nc.reason))
        {
            return GroupMatch::No;
        }
        if let Some(window) = c.for_ {
            // Without a transition time there is no way to tell how long it has matched.
            let Some(since) = nc.last_transition else {
                return GroupMatch::No;
            };
            let ends = add(since, window);
            if ends > now {
                window_ends = Some(window_ends.map_or(ends, |w| w.max(ends)));
            }
        }
    }
    if let Some(t) = window_ends {
        return GroupMatch::MatchesAt(t);
    }
    // Every condition matched (so each is present): only now build the reason.
    let parts: Vec<String> = group
        .iter()
        .filter_map(|c| {
            let nc = node.condition(&c.type_)?;
            Some(match c.for_ {
                Some(window) => format!("{}={} for {}", c.type_, nc.status, human(window)),
                None => format!("{}={}", c.type_, nc.status),
            })
        })
        .collect();
    if parts.len() == 1 {
        GroupMatch::Matched(format!("condition {} matched", parts[0]))
    } else {
        GroupMatch::Matched(format!("conditions {} matched", parts.join(" and ")))
    }
}

fn unready_reasons(r: &Readiness, node: &NodeView, pods: NodePods<'_>) -> Vec<String> {
    let mut reasons = Vec::new();
    for c in &r.conditions {
        match node.condition(&c.type_) {
            None => reasons.push(format!("readiness condition {} is missing", c.type_)),
            Some(nc) if !c.status.is_match(&nc.status) => reasons.push(format!(
                "readiness condition {} is {} (want {})",
                c.type_, nc.status, c.status_source
            )),
            Some(_) => {}
        }
    }
    for cp in &r.critical_pods {
        // Ready if any selected pod is; otherwise name the first by name, so the
        // reason is the same whatever order the cache lists them in.
        let mut ready = false;
        let mut first: Option<&PodView> = None;
        for p in pods.pods(&cp.namespace) {
            if !cp.selector.matches(&p.labels) {
                continue;
            }
            if p.ready {
                ready = true;
                break;
            }
            if first.is_none_or(|f| p.name < f.name) {
                first = Some(p);
            }
        }
        if ready {
            continue;
        }
        match first {
            None => reasons.push(format!("critical pod {} has no pod on the node", cp.name)),
            Some(p) => reasons.push(format!(
                "critical pod {} is not Ready ({}/{})",
                cp.name, p.namespace, p.name
            )),
        }
    }
    reasons
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

fn human(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || secs == 0 {
        format!("{}ms", d.as_millis())
    } else if secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}
