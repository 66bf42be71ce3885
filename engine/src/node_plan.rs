//! What a node's taints and ownership annotations must become.
//!
//! The rules that keep the operator safe live here: only owned taints are ever
//! removed or changed, a foreign taint with the same key+effect is left alone,
//! a conflict loser never touches the taint, invalid and dry-run policies freeze
//! what they own, taints whose policy is gone are cleaned up, and out-of-service
//! waits for a node that is down.

use std::borrow::Cow;

use k8s_openapi::{api::core::v1::Taint, apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use taint_operator_crd::{Mode, PolicyTaint, TaintEffect};

use crate::{
    cluster::NodeView,
    decision::{NodeEvaluation, Verdict},
    drain::{self, DrainGate, DrainStep},
    out_of_service,
    ownership::{Bootstrapped, DrainStarts, ManagedTaints, split_taint_id, taint_id},
    policy_set::PolicySet,
};

/// What to do with owned taints and bootstrap records of policies that are not in
/// the policy set at all. The controller knows every policy, so such a record is an
/// orphan; `plan` sees only the files it was given, so it leaves them alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownPolicies {
    Remove,
    Keep,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaintChange {
    pub key: String,
    pub value: Option<String>,
    pub effect: TaintEffect,
    pub policy: String,
    pub reason: String,
    /// A drain's stand-in: the effect the taint takes once the drain allows it.
    pub then: Option<TaintEffect>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodePlan {
    pub node: String,
    /// The node's whole new taint list (others' taints untouched, in their order).
    pub taints: Vec<Taint>,
    pub managed: ManagedTaints,
    pub bootstrapped: Bootstrapped,
    pub drains: DrainStarts,
    pub added: Vec<TaintChange>,
    pub removed: Vec<TaintChange>,
    /// `policy: why`, for what the plan leaves alone on purpose (foreign taint, cap).
    pub notes: Vec<String>,
    /// BootstrapOnly policies whose completion this plan records.
    pub completed: Vec<String>,
    /// Policies whose wanted taints `maxTaintedNodes` holds back here (also noted).
    pub held: Vec<String>,
    /// Policies whose drain of the node this plan starts, and whose drain it ends
    /// with the switch to NoExecute.
    pub drain_started: Vec<String>,
    pub drain_finished: Vec<String>,
    /// Policies whose out-of-service taint waits for the node to be down (also noted).
    pub awaiting_shutdown: Vec<String>,
}

impl NodePlan {
    /// True when applying the plan changes the node: taints or annotations.
    pub fn changes(&self, node: &NodeView) -> bool {
        self.taints[..] != node.taints[..]
            || self.managed != node.managed
            || self.bootstrapped != node.bootstrapped
            || self.drains != node.drains
    }

    /// `policy: reason` lines for every change and note, without repeats.
    pub fn reasons(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let lines = self
            .added
            .iter()
            .chain(&self.removed)
            .map(|c| format!("{}: {}", c.policy, c.reason))
            .chain(self.notes.iter().cloned());
        for line in lines {
            if !out.contains(&line) {
                out.push(line);
            }
        }
        out
    }
}

/// What planning asks of a node's evaluation: each policy's [`Verdict`], and why in
/// words for the few policies whose taints change or are held back.
pub trait Evaluated {
    fn verdict(&self, i: usize) -> Verdict;
    /// Why policy `i` wants its taints or not ([`crate::decision::PolicyEval::reason`]).
    fn reason(&self, i: usize) -> String;
}

impl Evaluated for NodeEvaluation {
    fn verdict(&self, i: usize) -> Verdict {
        self.policies[i].verdict()
    }

    fn reason(&self, i: usize) -> String {
        self.policies[i].reason()
    }
}

/// Why policy `i` wants its taints here or not. Built only for a change or a note:
/// most nodes need none, and this string is most of what a steady node would cost.
fn policy_reason(set: &PolicySet, eval: &dyn Evaluated, i: usize) -> String {
    let mut reason = eval.reason(i);
    if set.policies[i].mode == Mode::BootstrapOnly && eval.verdict(i).ready_and_clear() {
        reason.push_str("; bootstrap complete");
    }
    reason
}

pub use crate::policy_set::carries;

/// What a node's plan may do beyond what its evaluation says: the caps and the
/// drains, which depend on other nodes (and, for drains, on the node's pods).
#[derive(Clone, Copy)]
pub struct Gates<'g> {
    /// Whether policy `i` may newly taint this node under its `maxTaintedNodes` cap;
    /// asked only for matcher-only wants on a node that does not carry the
    /// policy's taints yet.
    pub admitted: &'g dyn Fn(usize) -> bool,
    /// How far policy `i`'s drain may go on this node now; asked only for policies
    /// with `spec.eviction` that want their taints here.
    pub drain: &'g dyn Fn(usize) -> DrainGate,
}

impl Gates<'_> {
    /// Every cap admits; no drain starts or switches.
    pub const OPEN_CAPS: Gates<'static> = Gates {
        admitted: &|_| true,
        drain: &|_| DrainGate {
            start: false,
            switch: false,
        },
    };
}

/// Plans one node.
pub fn plan_node(
    set: &PolicySet,
    node: &NodeView,
    eval: &NodeEvaluation,
    gates: Gates,
    unknown: UnknownPolicies,
    now: Timestamp,
) -> NodePlan {
    draft(set, node, eval, gates, unknown, now).into_plan()
}

/// [`plan_node`] from any [`Evaluated`] (a full evaluation passes verdicts and builds
/// reason words only for the policies a change or a note names), or `None` when the plan leaves the node exactly as it is: the
/// same taints and annotations, and nothing added, removed, noted or completed.
/// Such a plan is most nodes' on a resync, and costs no allocation this way.
pub fn plan_change(
    set: &PolicySet,
    node: &NodeView,
    eval: &dyn Evaluated,
    gates: Gates,
    unknown: UnknownPolicies,
    now: Timestamp,
) -> Option<NodePlan> {
    let draft = draft(set, node, eval, gates, unknown, now);
    (!draft.unchanged()).then(|| draft.into_plan())
}

/// The plan of a node that keeps everything as it is.
pub fn unchanged_plan(node: &NodeView) -> NodePlan {
    NodePlan {
        node: node.name.clone(),
        taints: node.taints.to_vec(),
        managed: node.managed.clone(),
        bootstrapped: node.bootstrapped.clone(),
        drains: node.drains.clone(),
        added: Vec::new(),
        removed: Vec::new(),
        notes: Vec::new(),
        completed: Vec::new(),
        held: Vec::new(),
        drain_started: Vec::new(),
        drain_finished: Vec::new(),
        awaiting_shutdown: Vec::new(),
    }
}

/// A plan being made. The node's taints and annotations are copied only when
/// something changes them, so planning a node that stays as it is allocates nothing.
struct Draft<'a> {
    node: &'a NodeView,
    taints: Cow<'a, [Taint]>,
    managed: Cow<'a, ManagedTaints>,
    bootstrapped: Cow<'a, Bootstrapped>,
    drains: Cow<'a, DrainStarts>,
    added: Vec<TaintChange>,
    removed: Vec<TaintChange>,
    notes: Vec<String>,
    completed: Vec<String>,
    held: Vec<String>,
    drain_started: Vec<String>,
    drain_finished: Vec<String>,
    awaiting_shutdown: Vec<String>,
}

impl Draft<'_> {
    fn unchanged(&self) -> bool {
        matches!(self.taints, Cow::Borrowed(_))
            && matches!(self.managed, Cow::Borrowed(_))
            && matches!(self.bootstrapped, Cow::Borrowed(_))
            && matches!(self.drains, Cow::Borrowed(_))
            && self.added.is_empty()
            && self.removed.is_empty()
            && self.notes.is_empty()
            && self.completed.is_empty()
    }

    fn into_plan(self) -> NodePlan {
        NodePlan {
            node: self.node.name.clone(),
            taints: self.taints.into_owned(),
            managed: self.managed.into_owned(),
            bootstrapped: self.bootstrapped.into_owned(),
            drains: self.drains.into_owned(),
            added: self.added,
            removed: self.removed,
            notes: self.notes,
            completed: self.completed,
            held: self.held,
            drain_started: self.drain_started,
            drain_finished: self.drain_finished,
            awaiting_shutdown: self.awaiting_shutdown,
        }
    }
}

/// True when `taints` has the taint `id` names.
fn has_taint(taints: &[Taint], id: &str) -> bool {
    split_taint_id(id).is_some_and(|(key, effect)| {
        taints
            .iter()
            .any(|n| n.key == key && n.effect == effect.as_str())
    })
}

/// Which policies want their taints on `node` once the caps have answered, and
/// which of them `maxTaintedNodes` held back (in policy order). Invalid and
/// dry-run policies want nothing: they freeze what they own.
fn wanted(
    set: &PolicySet,
    node: &NodeView,
    eval: &dyn Evaluated,
    admitted: &dyn Fn(usize) -> bool,
) -> (Vec<bool>, Vec<usize>) {
    let mut wants = vec![false; set.policies.len()];
    let mut held = Vec::new();
    for (i, p) in set.policies.iter().enumerate() {
        if !p.is_active() {
            continue;
        }
        let v = eval.verdict(i);
        wants[i] = v.wants_taints();
        if wants[i] && v.capped() && !carries(set, i, node) && !admitted(i) {
            wants[i] = false;
            held.push(i);
        }
    }
    (wants, held)
}

/// Whether planning policy `i` on `node` asks its drain gate: the policy drains,
/// wants its taints, has not switched yet, and the node is not clearing (it keeps
/// what it has, and no drain starts or switches). Nor for out-of-service on a
/// running node: its stand-in waits too, and pods evicted with nothing to keep
/// them off would come straight back.
fn asks_drain_gate(
    set: &PolicySet,
    node: &NodeView,
    eval: &dyn Evaluated,
    i: usize,
    wants: bool,
) -> bool {
    wants
        && set.policies[i].is_active()
        && drain::drained_taints(set, i).next().is_some()
        && drain::step(set, i, node) != DrainStep::Switched
        && !eval.verdict(i).clearing
        && !drain::drained_taints(set, i).any(|t| out_of_service::holds_back(&t.key, node))
}

/// The policies whose drain gate [`plan_node`] asks on `node`, given the caps'
/// admissions: the gates a controller answers before it plans, so planning
/// itself reads only data.
pub fn drain_gates_asked(
    set: &PolicySet,
    node: &NodeView,
    eval: &dyn Evaluated,
    admitted: &dyn Fn(usize) -> bool,
) -> Vec<usize> {
    let (wants, _) = wanted(set, node, eval, admitted);
    (0..set.policies.len())
        .filter(|&i| asks_drain_gate(set, node, eval, i, wants[i]))
        .collect()
}

fn draft<'a>(
    set: &PolicySet,
    node: &'a NodeView,
    eval: &dyn Evaluated,
    gates: Gates,
    unknown: UnknownPolicies,
    now: Timestamp,
) -> Draft<'a> {
    let mut plan = Draft {
        node,
        taints: Cow::Borrowed(&node.taints[..]),
        managed: Cow::Borrowed(&node.managed),
        bootstrapped: Cow::Borrowed(&node.bootstrapped),
        drains: Cow::Borrowed(&node.drains),
        added: Vec::new(),
        removed: Vec::new(),
        notes: Vec::new(),
        completed: Vec::new(),
        held: Vec::new(),
        drain_started: Vec::new(),
        drain_finished: Vec::new(),
        awaiting_shutdown: Vec::new(),
    };
    // An entry whose taint is gone (someone removed it by hand) owns nothing; keeping
    // it would make the operator adopt, and later remove, a taint someone else adds
    // with the same key+effect.
    if plan
        .managed
        .iter()
        .any(|(id, _)| !has_taint(&plan.taints, id))
    {
        let taints = &plan.taints;
        plan.managed.to_mut().retain(|id, _| has_taint(taints, id));
    }

    // Which active policies want their taints here, in policy order (the order of the notes).
    let (wants, held) = wanted(set, node, eval, gates.admitted);
    for i in held {
        let name = &set.policies[i].name;
        plan.notes.push(format!(
            "{name}: held back by maxTaintedNodes ({})",
            eval.reason(i)
        ));
        plan.held.push(name.clone());
    }

    // Policies with `spec.eviction` put their NoExecute taints on in steps.
    let mut stand_ins = Vec::new();
    for (i, &wanted) in wants.iter().enumerate() {
        if set.policies[i].is_active() {
            plan_drain(&mut plan, set, eval, i, wanted, gates, now, &mut stand_ins);
        }
    }

    // Each taint an active policy owns, in id order: present if wanted, else removed if owned.
    for o in set.owned() {
        let id = o.id.as_str();
        let reason = || policy_reason(set, eval, o.policy);
        let taint = &set.policies[o.policy].taints[o.taint];
        if wants[o.policy] {
            // A drained taint was put on (or not yet) by its drain above.
            if taint.effect == TaintEffect::NoExecute && drain::rules_of(set, o.policy).is_some() {
                continue;
            }
            // Kept while clearing, never newly added.
            if eval.verdict(o.policy).clearing && !has_taint(&plan.taints, id) {
                continue;
            }
            apply_present(&mut plan, set, id, taint, o.policy, reason, now, None);
        } else if plan.managed.owner(id).is_some() {
            remove_owned(&mut plan, id, &set.policies[o.policy].name, reason);
            plan.managed.to_mut().remove(id);
        }
    }

    // Owned taints no live policy declares: their policy is being deleted, dropped the
    // taint from its spec, or is gone.
    let orphans: Vec<(String, String)> = plan
        .managed
        .iter()
        // An id some live policy owns was handled above (or is frozen by its inactive
        // owner), and so was a drain's stand-in.
        .filter(|(id, _)| set.owner_of(id).is_none() && !stand_ins.iter().any(|s| s == id))
        .map(|(id, owner)| (id.to_string(), owner.to_string()))
        .collect();
    for (id, owner) in orphans {
        let reason = match set.index_of(&owner) {
            Some(j) if set.policies[j].deleting => "policy is being deleted",
            // Invalid and dry-run policies freeze what they own, even taints an edit
            // dropped from their spec: such a policy never changes a node.
            Some(j) if !set.policies[j].is_active() => continue,
            Some(_) => "taint is no longer declared by the policy",
            None if unknown == UnknownPolicies::Remove => "policy no longer exists",
            None => continue,
        };
        remove_owned(&mut plan, &id, &owner, || reason.to_string());
        plan.managed.to_mut().remove(&id);
    }

    for (i, p) in set.policies.iter().enumerate() {
        if p.is_active()
            && p.mode == Mode::BootstrapOnly
            && eval.verdict(i).ready_and_clear()
            && !plan.bootstrapped.completed(&p.name, &p.uid)
        {
            plan.bootstrapped.to_mut().record(&p.name, &p.uid, now);
            plan.completed.push(p.name.clone());
        }
    }
    let keep = |name: &str| match set.index_of(name) {
        Some(j) => !set.policies[j].deleting,
        None => unknown == UnknownPolicies::Keep,
    };
    if !plan.bootstrapped.0.iter().all(|(name, _)| keep(name)) {
        plan.bootstrapped.to_mut().0.retain(|name, _| keep(name));
    }
    // A drain's start is kept while its policy keeps the taints on the node.
    let keep_drain = |name: &str| match set.index_of(name) {
        Some(j) if set.policies[j].deleting => false,
        Some(j) if !set.policies[j].is_active() => true,
        Some(j) => wants[j] && drain::drained_taints(set, j).next().is_some(),
        None => unknown == UnknownPolicies::Keep,
    };
    let dropped: Vec<String> = plan
        .drains
        .iter()
        .filter(|(name, _)| !keep_drain(name))
        .map(|(name, _)| name.to_string())
        .collect();
    for name in dropped {
        plan.drains.to_mut().remove(&name);
    }
    plan
}

/// Policy `i`'s drain on the node, when it has `spec.eviction`: the stand-ins
/// while the drain runs, the switch to NoExecute when the gate opens, and nothing
/// of either when the node no longer wants the taints. Records in `stand_ins`
/// the stand-in ids it decided on, so the orphan pass leaves them alone.
#[allow(clippy::too_many_arguments)]
fn plan_drain(
    plan: &mut Draft,
    set: &PolicySet,
    eval: &dyn Evaluated,
    i: usize,
    wants: bool,
    gates: Gates,
    now: Timestamp,
    stand_ins: &mut Vec<String>,
) {
    let drained: Vec<_> = drain::drained_taints(set, i).collect();
    if drained.is_empty() {
        return;
    }
    let name = set.policies[i].name.as_str();
    let step = drain::step(set, i, plan.node);
    let clearing = eval.verdict(i).clearing;
    let gate = if asks_drain_gate(set, plan.node, eval, i, wants) {
        (gates.drain)(i)
    } else {
        DrainGate::default()
    };
    let switch = wants
        && (step == DrainStep::Switched
            || (matches!(step, DrainStep::Draining { .. }) && gate.switch));
    for t in &drained {
        let stand_in_id = drain::stand_in_id(&t.key);
        stand_ins.push(stand_in_id.clone());
        if switch {
            let id = taint_id(&t.key, TaintEffect::NoExecute.as_str());
            let reason = || policy_reason(set, eval, i);
            apply_present(plan, set, &id, t, i, reason, now, None);
        }
        // A stand-in another policy (or this one) declares is that declaration's business.
        if set.owner_of(&stand_in_id).is_some() {
            continue;
        }
        let keep_only = clearing && !has_taint(&plan.taints, &stand_in_id);
        if wants && !switch && !keep_only {
            let reason = || policy_reason(set, eval, i);
            let stand_in = drain::stand_in(t);
            let then = Some(TaintEffect::NoExecute);
            apply_present(plan, set, &stand_in_id, &stand_in, i, reason, now, then);
        } else if plan.managed.owner(&stand_in_id) == Some(name) {
            let why = if switch {
                "switched to NoExecute".to_string()
            } else {
                format!("drain stopped: {}", policy_reason(set, eval, i))
            };
            remove_owned(plan, &stand_in_id, name, || why);
            plan.managed.to_mut().remove(&stand_in_id);
        }
    }
    if switch && step != DrainStep::Switched {
        plan.drain_finished.push(name.to_string());
    }
    if wants && !switch && gate.start && matches!(step, DrainStep::Idle | DrainStep::Waiting) {
        plan.drains.to_mut().record(name, now);
        plan.drain_started.push(name.to_string());
    }
}

#[allow(clippy::too_many_arguments)]
fn apply_present(
    plan: &mut Draft,
    set: &PolicySet,
    id: &str,
    t: &PolicyTaint,
    policy: usize,
    reason: impl FnOnce() -> String,
    now: Timestamp,
    then: Option<TaintEffect>,
) {
    let name = &set.policies[policy].name;
    let existing = plan
        .taints
        .iter()
        .position(|n| n.key == t.key && n.effect == t.effect.as_str());
    match (existing, plan.managed.owner(id).is_some()) {
        (Some(_), false) => {
            let same = existing.is_some_and(|i| plan.taints[i].value == t.value);
            if !same {
                plan.notes.push(format!(
                    "{name}: {id} is already set by someone else with another value; left alone"
                ));
            }
        }
        (Some(i), true) => {
            if plan.taints[i].value != t.value {
                plan.taints.to_mut()[i] = new_taint(t, now);
                plan.added.push(change(
                    t,
                    name,
                    format!("{} (value changed)", reason()),
                    then,
                ));
            }
            if plan.managed.owner(id) != Some(name.as_str()) {
                plan.managed.to_mut().insert(id, name);
            }
        }
        (None, _) if out_of_service::holds_back(&t.key, plan.node) => {
            if !plan.awaiting_shutdown.contains(name) {
                plan.notes
                    .push(format!("{name}: {}; {}", reason(), out_of_service::WAITING));
                plan.awaiting_shutdown.push(name.clone());
            }
        }
        (None, _) => {
            plan.taints.to_mut().push(new_taint(t, now));
            plan.added.push(change(t, name, reason(), then));
            plan.managed.to_mut().insert(id, name);
        }
    }
}

fn remove_owned(plan: &mut Draft, id: &str, policy: &str, reason: impl FnOnce() -> String) {
    let Some((key, effect)) = split_taint_id(id) else {
        return;
    };
    if let Some(i) = plan
        .taints
        .iter()
        .position(|n| n.key == key && n.effect == effect.as_str())
    {
        let old = plan.taints.to_mut().remove(i);
        plan.removed.push(TaintChange {
            key: key.to_string(),
            value: old.value,
            effect,
            policy: policy.to_string(),
            reason: reason(),
            then: None,
        });
    }
}

fn new_taint(t: &PolicyTaint, now: Timestamp) -> Taint {
    Taint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: t.effect.as_str().to_string(),
        // The API server only keeps timeAdded for NoExecute, where tolerationSeconds count from it.
        time_added: (t.effect == TaintEffect::NoExecute)
            .then(|| Time(now.round(k8s_openapi::jiff::Unit::Second).unwrap_or(now))),
    }
}

fn change(t: &PolicyTaint, policy: &str, reason: String, then: Option<TaintEffect>) -> TaintChange {
    TaintChange {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: t.effect,
        policy: policy.to_string(),
        reason,
        then,
    }
}
