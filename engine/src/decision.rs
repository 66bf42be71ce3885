//! Per node, per policy: is the node selected, which matchers match, what keeps
//! it from being ready, and when a `for` window ends. No I/O, no side effects.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use taint_operator_crd::Mode;

use crate::{
    cluster::{Namespace, NodeCondition, NodePods, NodeView, PodIndex, PodView},
    duration::add,
    policy::{CompiledCondition, CompiledPolicy, Readiness},
    policy_set::{PolicySet, carries},
    selector::LabelValue,
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
        /// No matcher matches, but one did less than `clearAfter` ago and the
        /// taints are on: they stay (`matched` says until when).
        clearing: bool,
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

    /// [`Self::reasons`] joined with `; `, without copying each phrase first.
    pub fn reason(&self) -> String {
        match &self.outcome {
            Outcome::Evaluated {
                matched, unready, ..
            } if !matched.is_empty() || !unready.is_empty() => {
                let mut line = String::new();
                for phrase in matched.iter().chain(unready) {
                    if !line.is_empty() {
                        line.push_str("; ");
                    }
                    line.push_str(phrase);
                }
                line
            }
            _ => self.reasons().join("; "),
        }
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

/// What one policy makes of one node without the words: all that planning and the
/// status numbers need. A full evaluation keeps one per node and policy, and builds
/// the [`PolicyEval`] (its reason lines) only where a plan changes or notes something.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdict {
    pub selected: bool,
    /// Selected, valid, and not a BootstrapOnly policy that completed here earlier
    /// (`Outcome::Evaluated`).
    pub evaluated: bool,
    /// A matcher matches.
    pub matched: bool,
    /// A readiness check fails.
    pub unready: bool,
    /// `matched` only because a matcher matched less than `clearAfter` ago: the
    /// taints on the node stay, and nothing more is added or started for them.
    pub clearing: bool,
}

impl Verdict {
    pub fn wants_taints(self) -> bool {
        self.evaluated && (self.matched || self.unready)
    }

    /// Wanted only because a matcher matched: the taints `maxTaintedNodes` caps.
    pub fn capped(self) -> bool {
        self.evaluated && self.matched && !self.unready
    }

    /// Ready by every check and no matcher matches: a BootstrapOnly policy is done here.
    pub fn ready_and_clear(self) -> bool {
        self.evaluated && !self.matched && !self.unready
    }
}

impl PolicyEval {
    pub fn verdict(&self) -> Verdict {
        match &self.outcome {
            Outcome::Evaluated {
                matched,
                unready,
                clearing,
                ..
            } => Verdict {
                selected: self.selected,
                evaluated: true,
                matched: !matched.is_empty(),
                unready: !unready.is_empty(),
                clearing: *clearing,
            },
            Outcome::NotApplicable | Outcome::Completed => Verdict {
                selected: self.selected,
                ..Verdict::default()
            },
        }
    }
}

pub fn evaluate_node(
    set: &PolicySet,
    node: &NodeView,
    pods: &PodIndex,
    now: Timestamp,
) -> NodeEvaluation {
    let mut next_check: Option<Timestamp> = None;
    let mut facts = NodeFacts::new(set, pods, node);
    let policies = (0..set.policies.len())
        .map(|i| facts.evaluate(i, now, &mut next_check))
        .collect();
    NodeEvaluation {
        policies,
        next_check,
    }
}

/// One policy on its own; [`evaluate_node`] is cheaper for several.
pub fn evaluate_policy(
    policy: &CompiledPolicy,
    node: &NodeView,
    pods: &PodIndex,
    now: Timestamp,
    next_check: &mut Option<Timestamp>,
) -> PolicyEval {
    let set = PolicySet::new([policy.clone()]);
    NodeFacts::new(&set, pods, node).evaluate(0, now, next_check)
}

/// What the policies of a set read of one node, looked up once for all of them: the
/// labels node selectors read, the node's pods, and (on first use) each distinct
/// critical-pod look-up. [`NodeFacts::load`] moves on to another node.
pub struct NodeFacts<'a> {
    set: &'a PolicySet,
    index: &'a PodIndex,
    node: &'a NodeView,
    pods: NodePods<'a>,
    labels: Vec<LabelValue>,
    /// The node's condition of each type a policy reads, by `PolicySet` condition slot.
    conditions: Vec<Option<&'a NodeCondition>>,
    /// By `PolicySet::pod_checks` index; `None` until a policy asks.
    pod_checks: Vec<Option<PodCheckResult<'a>>>,
    /// The namespace of each pod check in the index (`None` inside: no pod is in
    /// it); looked up on first use, the same for every node.
    pod_namespaces: Vec<Option<Option<Namespace<'a>>>>,
}

/// What a critical-pod look-up found on the node.
#[derive(Debug, Clone, Copy)]
enum PodCheckResult<'a> {
    Ready,
    NoPod,
    /// None of the selected pods is Ready; the first by name.
    NotReady(&'a PodView),
}

/// Reason lines, when asked for.
#[derive(Default)]
struct Words {
    matched: Vec<String>,
    unready: Vec<String>,
}

/// Failed readiness checks: their reasons when asked for, else only whether any failed.
struct Failed<'r> {
    reasons: Option<&'r mut Vec<String>>,
    any: bool,
}

impl Failed<'_> {
    /// Records a failed check; true when that settles it (no reasons are wanted).
    fn add(&mut self, reason: impl FnOnce() -> String) -> bool {
        self.any = true;
        match self.reasons.as_deref_mut() {
            Some(reasons) => {
                reasons.push(reason());
                false
            }
            None => true,
        }
    }
}

impl<'a> NodeFacts<'a> {
    pub fn new(set: &'a PolicySet, index: &'a PodIndex, node: &'a NodeView) -> Self {
        let mut facts = NodeFacts {
            set,
            index,
            node,
            pods: NodePods::default(),
            labels: Vec::new(),
            conditions: Vec::new(),
            pod_checks: Vec::new(),
            pod_namespaces: vec![None; set.pod_checks().len()],
        };
        facts.load(node);
        facts
    }

    /// Forgets the node and reads this one instead, reusing the buffers.
    pub fn load(&mut self, node: &'a NodeView) {
        self.node = node;
        // One index lookup per node, not one per critical pod of every policy.
        self.pods = self.index.node(&node.name);
        self.set.label_values_into(&node.labels, &mut self.labels);
        self.set.conditions_into(node, &mut self.conditions);
        self.pod_checks.clear();
        self.pod_checks.resize(self.set.pod_checks().len(), None);
    }

    /// Policy `i` on the node, with the reasons.
    pub fn evaluate(
        &mut self,
        i: usize,
        now: Timestamp,
        next_check: &mut Option<Timestamp>,
    ) -> PolicyEval {
        let mut words = Words::default();
        let v = self.judge(i, now, next_check, Some(&mut words));
        let outcome = if v.evaluated {
            let rules = self.set.policies[i].rules.as_ref().ok();
            Outcome::Evaluated {
                matched: words.matched,
                unready: words.unready,
                has_readiness: rules.is_some_and(|r| r.readiness.is_some()),
                has_matchers: rules.is_some_and(|r| !r.matchers.is_empty()),
                clearing: v.clearing,
            }
        } else if v.selected {
            Outcome::Completed
        } else {
            Outcome::NotApplicable
        };
        PolicyEval {
            selected: v.selected,
            outcome,
        }
    }

    /// Policy `i` on the node, without the reasons.
    pub fn verdict(
        &mut self,
        i: usize,
        now: Timestamp,
        next_check: &mut Option<Timestamp>,
    ) -> Verdict {
        self.judge(i, now, next_check, None)
    }

    /// The evaluation itself; builds reason lines only into `words`.
    fn judge(
        &mut self,
        i: usize,
        now: Timestamp,
        next_check: &mut Option<Timestamp>,
        mut words: Option<&mut Words>,
    ) -> Verdict {
        let node = self.node;
        let policy = &self.set.policies[i];
        let (true, Ok(rules)) = (self.set.selects(i, &self.labels), &policy.rules) else {
            return Verdict::default();
        };
        if policy.mode == Mode::BootstrapOnly
            && node.bootstrapped.completed(&policy.name, &policy.uid)
        {
            return Verdict {
                selected: true,
                ..Verdict::default()
            };
        }
        // The condition slots of the matchers' conditions, group after group, then of
        // the readiness conditions.
        let slots = self.set.condition_slots(i);
        let conditions = &self.conditions;
        // Taints already on stay while a matcher matches by status and reason: a
        // detector's restart gives its conditions a new lastTransitionTime, and a
        // `for` window starting over would lift them.
        let held = !rules.matchers.is_empty() && carries(self.set, i, node);
        let mut at = 0;
        let mut matched = false;
        for group in &rules.matchers {
            let group_slots = &slots[at..at + group.len()];
            at += group.len();
            let found = |k: usize| conditions[group_slots[k]];
            match match_group(group, found, now, words.is_some(), held) {
                GroupMatch::Matched(reason) => {
                    matched = true;
                    if let (Some(w), Some(reason)) = (words.as_deref_mut(), reason) {
                        w.matched.push(reason);
                    }
                }
                GroupMatch::MatchesAt(t) => *next_check = Some(next_check.map_or(t, |n| n.min(t))),
                GroupMatch::No => {}
            }
        }
        let mut clearing = false;
        if !matched && held && !rules.clear_after.is_zero() {
            let mut at = 0;
            let cleared = rules.matchers.iter().filter_map(|group| {
                let group_slots = &slots[at..at + group.len()];
                at += group.len();
                cleared_since(group, |k| conditions[group_slots[k]], now)
            });
            if let Some(since) = cleared.max() {
                let until = add(since, rules.clear_after);
                if until > now {
                    matched = true;
                    clearing = true;
                    *next_check = Some(next_check.map_or(until, |n| n.min(until)));
                    if let Some(w) = words.as_deref_mut() {
                        w.matched.push(format!(
                            "no matcher has matched since {since}: taints stay until {until} (clearAfter {})",
                            human(rules.clear_after)
                        ));
                    }
                }
            }
        }
        // A condition that will go stale may change the verdict then: look again.
        let stale_conditions = rules
            .matchers
            .iter()
            .flatten()
            .map(|c| c.stale_after)
            .chain(
                rules
                    .readiness
                    .iter()
                    .flat_map(|r| r.conditions.iter().map(|c| c.stale_after)),
            );
        for (stale_after, &slot) in stale_conditions
            .zip(slots)
            .take_while(|_| rules.reads_staleness)
        {
            if let (Some(_), Some(nc)) = (stale_after, conditions[slot])
                && let Some(t) = Reading::of(nc, stale_after, now).stale_at
            {
                *next_check = Some(next_check.map_or(t, |n| n.min(t)));
            }
        }
        let unready = match &rules.readiness {
            Some(r) => self.unready(i, r, &slots[at..], now, words.map(|w| &mut w.unready)),
            None => false,
        };
        Verdict {
            selected: true,
            evaluated: true,
            matched,
            unready,
            // Taints a failing readiness check wants go on whatever the matchers say.
            clearing: clearing && !unready,
        }
    }

    /// True when a readiness check of policy `i` fails; with `reasons`, says which (all of them).
    /// `slots`: the condition slot of each readiness condition.
    fn unready(
        &mut self,
        i: usize,
        r: &Readiness,
        slots: &[usize],
        now: Timestamp,
        reasons: Option<&mut Vec<String>>,
    ) -> bool {
        let mut failed = Failed {
            reasons,
            any: false,
        };
        for (c, &slot) in r.conditions.iter().zip(slots) {
            let stop = match self.conditions[slot].map(|nc| Reading::of(nc, c.stale_after, now)) {
                Some(read) if c.status.is_match(read.status) => false,
                Some(read) => failed.add(|| {
                    format!(
                        "readiness condition {} is {} (want {})",
                        c.type_,
                        read.describe(),
                        c.status_source
                    )
                }),
                None => failed.add(|| format!("readiness condition {} is missing", c.type_)),
            };
            if stop {
                return true;
            }
        }
        for (cp, &check) in r.critical_pods.iter().zip(self.set.pod_checks_of(i)) {
            let stop = match self.pod_check(check) {
                PodCheckResult::Ready => false,
                PodCheckResult::NoPod => {
                    failed.add(|| format!("critical pod {} has no pod on the node", cp.name))
                }
                // Found in the check's namespace: the index keeps no copy of it per pod.
                PodCheckResult::NotReady(p) => failed.add(|| {
                    format!(
                        "critical pod {} is not Ready ({}/{})",
                        cp.name, cp.namespace, p.name
                    )
                }),
            };
            if stop {
                return true;
            }
        }
        failed.any
    }

    /// The node's pods that critical-pod look-up `check` ([`PolicySet::pod_checks`]) selects.
    pub fn critical_pods(&mut self, check: usize) -> impl Iterator<Item = &'a PodView> + use<'a> {
        let set: &'a PolicySet = self.set;
        let c = &set.pod_checks()[check];
        let index = self.index;
        let namespace =
            *self.pod_namespaces[check].get_or_insert_with(|| index.namespace(&c.namespace));
        let pods = self.pods;
        namespace
            .into_iter()
            .flat_map(move |ns| pods.checked(ns))
            .filter(move |p| c.selector.matches_by(|key| p.labels.get(key)))
    }

    /// True when critical-pod look-up `check` finds a Ready pod on the node.
    pub fn critical_pod_ready(&mut self, check: usize) -> bool {
        matches!(self.pod_check(check), PodCheckResult::Ready)
    }

    fn pod_check(&mut self, check: usize) -> PodCheckResult<'a> {
        if let Some(found) = self.pod_checks[check] {
            return found;
        }
        // Ready if any selected pod is; otherwise name the first by name, so the
        // reason is the same whatever order the cache lists them in.
        let mut first: Option<&PodView> = None;
        let mut found = PodCheckResult::NoPod;
        for p in self.critical_pods(check) {
            if p.ready {
                found = PodCheckResult::Ready;
                break;
            }
            if first.is_none_or(|f| p.name < f.name) {
                first = Some(p);
                found = PodCheckResult::NotReady(p);
            }
        }
        self.pod_checks[check] = Some(found);
        found
    }
}

enum GroupMatch {
    /// With the reason, when asked for.
    Matched(Option<String>),
    /// Every condition matches but a `for` window is still running until then.
    MatchesAt(Timestamp),
    No,
}

/// How one matcher condition stands on a node: what matching a group reads, and
/// what `explain` shows condition by condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionState {
    /// The node has no condition of this type.
    Missing,
    /// The status or the reason does not match.
    Differs,
    /// It matches but has a `for` window and no lastTransitionTime: no way to tell
    /// how long it has matched, so it does not count.
    NoTransitionTime,
    /// It matches, but its `for` window, counted from `since`, runs until `ends`.
    Waiting {
        since: Timestamp,
        ends: Timestamp,
    },
    Matches,
}

/// A node condition as a policy condition reads it. With `staleAfter`, a condition
/// whose heartbeat (or, without one, its last transition) is that old reads as
/// `Unknown` (its reason kept), and has read so since it went stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading<'n> {
    pub status: &'n str,
    /// Since when it has read as `status` (for a `for` window).
    pub since: Option<Timestamp>,
    /// When it went stale, if it has.
    pub stale_since: Option<Timestamp>,
    /// When it will go stale, if it has not yet: the verdict may change then.
    pub stale_at: Option<Timestamp>,
}

impl<'n> Reading<'n> {
    pub fn of(nc: &'n NodeCondition, stale_after: Option<Duration>, now: Timestamp) -> Self {
        let stale = stale_after.and_then(|d| {
            nc.last_heartbeat
                .get()
                .or(nc.last_transition.get())
                .map(|seen| add(seen, d))
        });
        match stale {
            Some(at) if at <= now => Reading {
                status: "Unknown",
                since: Some(at),
                stale_since: Some(at),
                stale_at: None,
            },
            _ => Reading {
                status: &nc.status,
                since: nc.last_transition.get(),
                stale_since: None,
                stale_at: stale,
            },
        }
    }

    /// `Kaput`, or `Unknown (stale since 2026-11-20T12:00:00Z)`.
    pub fn describe(&self) -> String {
        match self.stale_since {
            Some(at) => format!("{} (stale since {at})", self.status),
            None => self.status.to_string(),
        }
    }
}

impl ConditionState {
    pub fn of(c: &CompiledCondition, nc: Option<&NodeCondition>, now: Timestamp) -> Self {
        let Some(nc) = nc else {
            return ConditionState::Missing;
        };
        let read = Reading::of(nc, c.stale_after, now);
        if !c.status.is_match(read.status)
            || !c.reason.as_ref().is_none_or(|r| r.is_match(&nc.reason))
        {
            return ConditionState::Differs;
        }
        let Some(window) = c.for_ else {
            return ConditionState::Matches;
        };
        let Some(since) = read.since else {
            return ConditionState::NoTransitionTime;
        };
        let ends = add(since, window);
        if ends > now {
            ConditionState::Waiting { since, ends }
        } else {
            ConditionState::Matches
        }
    }
}

/// The latest moment up to `now` at which `policy`'s matchers may have changed their
/// answer on `node`: the last transition of each condition they read (or when it
/// went stale), and the end of the `for` window of each that matches. A zone's
/// matching share moves only at such moments, so the latest over its nodes is when
/// the share last moved. A window still running has changed nothing yet: its end is
/// a move when it comes. `None`: no condition they read has a time.
pub fn matchers_changed_at(
    policy: &CompiledPolicy,
    node: &NodeView,
    now: Timestamp,
) -> Option<Timestamp> {
    let rules = policy.rules.as_ref().ok()?;
    rules
        .matchers
        .iter()
        .flatten()
        .filter_map(|c| {
            let nc = node.condition(&c.type_)?;
            let since = Reading::of(nc, c.stale_after, now).since;
            let window_end = match ConditionState::of(c, Some(nc), now) {
                ConditionState::Matches => c.for_.zip(since).map(|(w, t)| add(t, w)),
                _ => None,
            };
            since.max(window_end)
        })
        .max()
}

/// Since when the matcher `group` has not matched, as its conditions tell: the
/// earliest moment from which one of them has read as not matching (its last
/// transition, or when it went stale). `None` when a condition that does not match
/// gives no time (missing, or without a lastTransitionTime): it may never have
/// matched, so nothing is kept for it. `found[k]`: the condition `group[k]` reads.
fn cleared_since<'n>(
    group: &[CompiledCondition],
    found: impl Fn(usize) -> Option<&'n NodeCondition>,
    now: Timestamp,
) -> Option<Timestamp> {
    let mut since: Option<Timestamp> = None;
    for (k, c) in group.iter().enumerate() {
        let nc = found(k)?;
        if ConditionState::of(c, Some(nc), now) != ConditionState::Differs {
            continue;
        }
        let t = Reading::of(nc, c.stale_after, now).since?;
        since = Some(since.map_or(t, |s| s.min(t)));
    }
    since
}

/// `found[k]`: the node's condition of the type `group[k]` reads. `held`: the
/// policy's taints are on, so a `for` window that counts again from a new
/// lastTransitionTime does not hold the match back.
fn match_group<'n>(
    group: &[CompiledCondition],
    found: impl Fn(usize) -> Option<&'n NodeCondition>,
    now: Timestamp,
    say: bool,
    held: bool,
) -> GroupMatch {
    let mut window_ends: Option<Timestamp> = None;
    for (k, c) in group.iter().enumerate() {
        match ConditionState::of(c, found(k), now) {
            ConditionState::Missing | ConditionState::Differs => return GroupMatch::No,
            ConditionState::NoTransitionTime | ConditionState::Waiting { .. } if held => {}
            ConditionState::NoTransitionTime => return GroupMatch::No,
            ConditionState::Waiting { ends, .. } => {
                window_ends = Some(window_ends.map_or(ends, |w| w.max(ends)));
            }
            ConditionState::Matches => {}
        }
    }
    if let Some(t) = window_ends {
        return GroupMatch::MatchesAt(t);
    }
    if !say {
        return GroupMatch::Matched(None);
    }
    // Every condition matched (so each is present): only now build the reason.
    let parts: Vec<String> = group
        .iter()
        .enumerate()
        .filter_map(|(k, c)| {
            let status = Reading::of(found(k)?, c.stale_after, now).describe();
            Some(match c.for_ {
                Some(window) => format!("{}={status} for {}", c.type_, human(window)),
                None => format!("{}={status}", c.type_),
            })
        })
        .collect();
    GroupMatch::Matched(Some(if parts.len() == 1 {
        format!("condition {} matched", parts[0])
    } else {
        format!("conditions {} matched", parts.join(" and "))
    }))
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
