//! `spec.eviction`: a policy's NoExecute taints go on a node in steps.
//!
//! A NoExecute taint makes Kubernetes delete every pod that does not tolerate it,
//! at once and without regard to PodDisruptionBudgets. With `spec.eviction`, the
//! taint first goes on as NoSchedule under the same key and value (the *stand-in*:
//! nothing new lands), the drain starts (recorded on the node, see
//! [`DrainStarts`]), the pods in the way are evicted through the Eviction API by
//! the controller, and only then one guarded write swaps the stand-in for the
//! NoExecute taint. The starts and the switches are paced per zone, and a zone
//! where too many nodes match holds its switches.
//!
//! Everything here is pure: where a node is ([`step_of`]), what may happen next
//! ([`gate`]) and which pods are in the way ([`pod_fate`]); the per-zone pace is
//! `pace`. The controller does the evictions and keeps its paces between
//! reconciles; `plan` and the status writer make fresh ones from the nodes.

use k8s_openapi::{
    api::core::v1::{Pod, Taint, Toleration},
    jiff::Timestamp,
};
use taint_operator_crd::{PolicyTaint, TaintEffect, ZONE_LABEL};

pub use crate::duration::add;
use crate::{
    cluster::{NodeView, PodIndex},
    decision::{NodeFacts, matchers_changed_at},
    eviction_rules::{EvictionRules, ZoneHealth, ZoneState},
    labels::NodeLabels,
    ownership::{DrainStarts, ManagedTaints, taint_id},
    policy_set::PolicySet,
};

/// The zone a node is paced and held in: its `topology.kubernetes.io/zone` label;
/// nodes without it form one zone, `""`.
pub fn zone_of(labels: &NodeLabels) -> &str {
    labels.get(ZONE_LABEL).unwrap_or("")
}

/// The eviction rules of policy `i`, when it is valid and has `spec.eviction`.
pub fn rules_of(set: &PolicySet, i: usize) -> Option<&EvictionRules> {
    set.policies[i].rules.as_ref().ok()?.eviction.as_ref()
}

/// The NoExecute taints policy `i` drains before: declared by it and owned by it
/// (an older policy declaring the same key+effect keeps the taint), when it has
/// `spec.eviction`.
pub fn drained_taints(set: &PolicySet, i: usize) -> impl Iterator<Item = &PolicyTaint> {
    let p = &set.policies[i];
    let evicts = rules_of(set, i).is_some();
    p.taints
        .iter()
        .zip(&p.ids)
        .filter(move |(t, id)| {
            evicts && t.effect == TaintEffect::NoExecute && set.owner_of(id) == Some(i)
        })
        .map(|(t, _)| t)
}

/// The id of the NoSchedule stand-in of a NoExecute taint with this key.
pub fn stand_in_id(key: &str) -> String {
    taint_id(key, TaintEffect::NoSchedule.as_str())
}

/// The stand-in of a drained taint: same key and value, NoSchedule.
pub fn stand_in(t: &PolicyTaint) -> PolicyTaint {
    PolicyTaint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: TaintEffect::NoSchedule,
    }
}

/// True when `id` is the stand-in of one of policy `i`'s drained taints.
pub fn is_stand_in_of(set: &PolicySet, i: usize, id: &str) -> bool {
    drained_taints(set, i).any(|t| stand_in_id(&t.key) == id)
}

/// Where a node is in policy `i`'s drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStep {
    /// No stand-in and no drain: nothing started (or nothing to drain).
    Idle,
    /// The stand-in is on; the drain waits for its start.
    Waiting,
    /// The drain started then; the NoExecute taints are not on yet.
    Draining { since: Timestamp },
    /// Every drained taint is on as NoExecute.
    Switched,
}

impl DrainStep {
    /// Between NoSchedule and NoExecute: what `drainingNodes` counts.
    pub fn is_draining(self) -> bool {
        matches!(self, DrainStep::Waiting | DrainStep::Draining { .. })
    }
}

/// Where a node with these taints and annotations is in policy `i`'s drain.
pub fn step_of(
    set: &PolicySet,
    i: usize,
    taints: &[Taint],
    managed: &ManagedTaints,
    drains: &DrainStarts,
) -> DrainStep {
    let name = set.policies[i].name.as_str();
    let has = |key: &str, effect: TaintEffect| {
        taints
            .iter()
            .any(|n| n.key == key && n.effect == effect.as_str())
    };
    let mut any = false;
    let mut all_on = true;
    let mut stand_in_on = false;
    for t in drained_taints(set, i) {
        any = true;
        all_on &= has(&t.key, TaintEffect::NoExecute);
        stand_in_on |= has(&t.key, TaintEffect::NoSchedule)
            && managed.owner(&stand_in_id(&t.key)) == Some(name);
    }
    if !any {
        return DrainStep::Idle;
    }
    if all_on {
        return DrainStep::Switched;
    }
    match drains.started(name) {
        Some(since) => DrainStep::Draining { since },
        None if stand_in_on => DrainStep::Waiting,
        None => DrainStep::Idle,
    }
}

/// [`step_of`] a node as it is.
pub fn step(set: &PolicySet, i: usize, node: &NodeView) -> DrainStep {
    step_of(set, i, &node.taints, &node.managed, &node.drains)
}

/// What a node's plan may do in policy `i`'s drain now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainGate {
    /// Record the drain's start (the stand-in goes on regardless).
    pub start: bool,
    /// Swap the stand-ins for the NoExecute taints.
    pub switch: bool,
}

/// The two paced steps: each has a pace of its own in every zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PaceKind {
    Start,
    Switch,
}

/// What a node waits for before its next drain step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Its turn to start draining in its zone.
    StartSlot(Timestamp),
    /// Pods still in the way; `drainTimeout` (if any) ends the wait then.
    Evictions { timeout: Option<Timestamp> },
    /// Too many of its zone's nodes match: no drain starts or switches there
    /// until they heal.
    ZoneHeld,
    /// Its zone's matching share moved less than `zoneSettle` ago: the zone is
    /// judged at this time.
    ZoneSettling(Timestamp),
    /// Its turn to switch to NoExecute in its zone.
    SwitchSlot(Timestamp),
}

impl Wait {
    /// When the wait may be over by itself (a slot, a timeout); `None`: only when
    /// something changes (pods leave, the zone heals).
    pub fn until(self) -> Option<Timestamp> {
        match self {
            Wait::StartSlot(t) | Wait::SwitchSlot(t) | Wait::ZoneSettling(t) => Some(t),
            Wait::Evictions { timeout } => timeout,
            Wait::ZoneHeld => None,
        }
    }
}

/// The gate of a node, and what it waits for when it is closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gated {
    pub gate: DrainGate,
    pub wait: Option<Wait>,
}

/// What a gate reads besides the step.
#[derive(Clone, Copy)]
pub struct GateFacts<'f> {
    /// The taints are wanted because a matcher matched and readiness is not at
    /// stake: only those steps are paced (readiness taints are not).
    pub paced: bool,
    /// Every pod in the way is gone, terminating, or its eviction was accepted.
    pub evicted: bool,
    /// How the node's zone stands ([`EvictionRules::zone_state`]); asked only with
    /// `pauseWhenZoneUnhealthy`, as it may read every node of the zone.
    pub zone: &'f dyn Fn() -> ZoneState,
}

/// What a node that wants policy `rules`'s taints, at `step`, may do now. `pace`
/// answers when the node's turn for a paced step comes (a [`Pacer`]'s slot); it
/// is asked only when nothing else holds the step back, so waiting nodes reserve
/// no turn they cannot take.
pub fn gate(
    rules: &EvictionRules,
    step: DrainStep,
    facts: GateFacts,
    now: Timestamp,
    pace: &mut dyn FnMut(PaceKind) -> Timestamp,
) -> Gated {
    let paced = facts.paced && rules.interval().is_some();
    // A zone that is settling or held starts nothing, evicts nothing and switches
    // nothing: the node keeps the NoSchedule stand-in meanwhile.
    let zone_wait = || match rules.zone_pause.as_ref().map(|_| (facts.zone)()) {
        Some(ZoneState::Held) => Some(Wait::ZoneHeld),
        Some(ZoneState::Settling { until }) => Some(Wait::ZoneSettling(until)),
        Some(ZoneState::Open) | None => None,
    };
    match step {
        DrainStep::Switched => Gated::default(),
        DrainStep::Idle | DrainStep::Waiting => {
            if let Some(wait) = zone_wait() {
                return closed(wait);
            }
            // Without evictions there is nothing to pace at the start: the switch is paced.
            if !(rules.respect_budgets && paced) {
                return open(DrainGate {
                    start: true,
                    switch: false,
                });
            }
            let slot = pace(PaceKind::Start);
            if slot <= now {
                open(DrainGate {
                    start: true,
                    switch: false,
                })
            } else {
                closed(Wait::StartSlot(slot))
            }
        }
        DrainStep::Draining { since } => {
            if let Some(wait) = zone_wait() {
                return closed(wait);
            }
            let timeout = rules.drain_timeout.map(|d| add(since, d));
            let timed_out = timeout.is_some_and(|t| t <= now);
            if rules.respect_budgets && !facts.evicted && !timed_out {
                return closed(Wait::Evictions { timeout });
            }
            if paced {
                let slot = pace(PaceKind::Switch);
                if slot > now {
                    return closed(Wait::SwitchSlot(slot));
                }
            }
            open(DrainGate {
                start: false,
                switch: true,
            })
        }
    }
}

fn open(gate: DrainGate) -> Gated {
    Gated { gate, wait: None }
}

fn closed(wait: Wait) -> Gated {
    Gated {
        gate: DrainGate::default(),
        wait: Some(wait),
    }
}

/// The latest drain start and switch policy `i` recorded on `node`: its
/// drain-start record, and the `timeAdded` of the NoExecute taints it owns there.
/// What a new pacer is seeded with, so the pace survives a failover.
pub fn history(set: &PolicySet, i: usize, node: &NodeView) -> [Option<Timestamp>; 2] {
    let name = set.policies[i].name.as_str();
    let start = node.drains.started(name);
    let switch = drained_taints(set, i)
        .filter_map(|t| {
            let id = taint_id(&t.key, TaintEffect::NoExecute.as_str());
            if node.managed.owner(&id) != Some(name) {
                return None;
            }
            node.taints
                .iter()
                .find(|n| n.key == t.key && n.effect == TaintEffect::NoExecute.as_str())?
                .time_added
                .as_ref()
                .map(|t| t.0)
        })
        .max();
    [start, switch]
}

/// Policy `i`'s health in `zone`, read from the zone's `nodes`: how many of its
/// selected nodes the matchers match, and when any of their answers last moved.
/// For a caller that holds no whole-cluster plan (the controller asks when a node
/// of the zone is about to take a drain step).
pub fn zone_health<'n>(
    set: &PolicySet,
    i: usize,
    zone: &str,
    nodes: impl IntoIterator<Item = &'n NodeView>,
    pods: &PodIndex,
    now: Timestamp,
) -> ZoneHealth {
    let mut facts: Option<NodeFacts> = None;
    let mut health = ZoneHealth::default();
    for node in nodes.into_iter().filter(|n| zone_of(&n.labels) == zone) {
        let facts = match &mut facts {
            Some(f) => {
                f.load(node);
                f
            }
            None => facts.insert(NodeFacts::new(set, pods, node)),
        };
        let v = facts.verdict(i, now, &mut None);
        if v.selected {
            let changed = matchers_changed_at(&set.policies[i], node, now);
            health.count(v.matched, changed);
        }
    }
    health
}

/// The latest [`history`] of policy `i` over the nodes of `zone`.
pub fn zone_history<'n>(
    set: &PolicySet,
    i: usize,
    zone: &str,
    nodes: impl IntoIterator<Item = &'n NodeView>,
) -> [Option<Timestamp>; 2] {
    let mut latest = [None, None];
    for node in nodes.into_iter().filter(|n| zone_of(&n.labels) == zone) {
        for (l, at) in latest.iter_mut().zip(history(set, i, node)) {
            *l = (*l).max(at);
        }
    }
    latest
}

/// What becomes of a pod on a node being drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodFate {
    /// It would not tolerate the NoExecute taint: evicted before the switch.
    Evict,
    /// Already terminating: counts as gone; its grace period is its own.
    Terminating,
    /// Succeeded or Failed: nothing runs.
    Finished,
    /// A static pod's mirror: the kubelet, not the API, owns it.
    Mirror,
    /// Its DaemonSet would put it straight back.
    DaemonSet,
    /// It tolerates every drained taint for good.
    Tolerates,
}

impl PodFate {
    pub fn as_str(self) -> &'static str {
        match self {
            PodFate::Evict => "evict",
            PodFate::Terminating => "terminating",
            PodFate::Finished => "finished",
            PodFate::Mirror => "mirror pod",
            PodFate::DaemonSet => "DaemonSet pod",
            PodFate::Tolerates => "tolerates the taint",
        }
    }
}

/// The annotation the kubelet puts on a static pod's mirror.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What a drain does with `pod` before `taints` (the drained NoExecute taints) go
/// on, as `kubectl drain` decides, plus: a pod that tolerates every one of them
/// for good stays. A toleration with `tolerationSeconds` does not count: the taint
/// manager would delete that pod when it runs out, ignoring its budget.
pub fn pod_fate<'t>(pod: &Pod, taints: impl IntoIterator<Item = &'t PolicyTaint>) -> PodFate {
    if pod.metadata.deletion_timestamp.is_some() {
        return PodFate::Terminating;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return PodFate::Finished;
    }
    if pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
    {
        return PodFate::Mirror;
    }
    let by_daemon_set = pod.metadata.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true) && o.kind == "DaemonSet" && o.api_version.starts_with("apps/")
    });
    if by_daemon_set {
        return PodFate::DaemonSet;
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let for_good = taints.into_iter().all(|t| {
        tolerations
            .iter()
            .any(|tol| tol.toleration_seconds.is_none() && tolerates(tol, t))
    });
    if for_good {
        PodFate::Tolerates
    } else {
        PodFate::Evict
    }
}

/// The pods of `pods` a drain before `taints` evicts ([`PodFate::Evict`]).
pub fn in_the_way<'p, 't>(
    pods: &'p [Pod],
    taints: &'t [&'t PolicyTaint],
) -> impl Iterator<Item = &'p Pod> + use<'p, 't> {
    pods.iter()
        .filter(move |p| pod_fate(p, taints.iter().copied()) == PodFate::Evict)
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The policies whose drain of `node` has started and not switched yet: the ones
/// whose pods in the way matter now.
pub fn draining(set: &PolicySet, node: &NodeView) -> Vec<usize> {
    (0..set.policies.len())
        .filter(|&i| matches!(step(set, i, node), DrainStep::Draining { .. }))
        .collect()
}

/// Kubernetes' rule: a toleration matches a taint when its effect is empty or the
/// same, and either `Exists` with an empty or equal key, or `Equal` (the default)
/// with an equal key and value.
pub fn tolerates(tol: &Toleration, t: &PolicyTaint) -> bool {
    let effect_ok = tol
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == t.effect.as_str());
    if !effect_ok {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or("");
    match tol.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == t.key,
        "Equal" | "" => {
            key == t.key && tol.value.as_deref().unwrap_or("") == t.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction_rules::tests::{rules, t};

    fn facts(paced: bool, evicted: bool, zone: ZoneState) -> GateFacts<'static> {
        GateFacts {
            paced,
            evicted,
            zone: Box::leak(Box::new(move || zone)),
        }
    }

    #[test]
    fn the_gate_walks_zone_start_evictions_and_pace_in_that_order() {
        let now = t("2026-11-20T12:00:00Z");
        let later = t("2026-11-20T12:00:10Z");
        let r = rules(serde_json::json!({
            "nodesPerMinute": 6, "drainTimeout": "5m", "pauseWhenZoneUnhealthy": "50%"
        }));
        let mut asked = Vec::new();
        let at = |slot: Timestamp| {
            move |k: PaceKind| {
                let _ = k;
                slot
            }
        };
        // Idle, paced, turn later: waits for it.
        let g = gate(
            &r,
            DrainStep::Idle,
            facts(true, false, ZoneState::Open),
            now,
            &mut at(later),
        );
        assert_eq!(g.wait, Some(Wait::StartSlot(later)));
        assert!(!g.gate.start);
        // Its turn now: the drain starts.
        let g = gate(
            &r,
            DrainStep::Waiting,
            facts(true, false, ZoneState::Open),
            now,
            &mut at(now),
        );
        assert!(g.gate.start && !g.gate.switch);
        // Not paced (a readiness taint): starts at once.
        let g = gate(
            &r,
            DrainStep::Idle,
            facts(false, false, ZoneState::Open),
            now,
            &mut at(later),
        );
        assert!(g.gate.start);
        // Draining with pods in the way: waits, the pace is not asked.
        let since = t("2026-11-20T11:58:00Z");
        let mut record = |k: PaceKind| {
            asked.push(k);
            now
        };
        let g = gate(
            &r,
            DrainStep::Draining { since },
            facts(true, false, ZoneState::Open),
            now,
            &mut record,
        );
        assert_eq!(
            g.wait,
            Some(Wait::Evictions {
                timeout: Some(t("2026-11-20T12:03:00Z"))
            })
        );
        assert!(asked.is_empty());
        // Zone held, whether the pods are gone or not: nothing moves, nothing is asked.
        for evicted in [true, false] {
            let g = gate(
                &r,
                DrainStep::Draining { since },
                facts(true, evicted, ZoneState::Held),
                now,
                &mut |_| panic!("no pace is asked while the zone is held"),
            );
            assert_eq!(g.wait, Some(Wait::ZoneHeld));
        }
        // Evicted, its turn later.
        let g = gate(
            &r,
            DrainStep::Draining { since },
            facts(true, true, ZoneState::Open),
            now,
            &mut at(later),
        );
        assert_eq!(g.wait, Some(Wait::SwitchSlot(later)));
        // Timed out with pods in the way: switches on its turn.
        let long_ago = t("2026-11-20T11:50:00Z");
        let g = gate(
            &r,
            DrainStep::Draining { since: long_ago },
            facts(true, false, ZoneState::Open),
            now,
            &mut at(now),
        );
        assert!(g.gate.switch);
        // Switched: nothing to do.
        assert_eq!(
            gate(
                &r,
                DrainStep::Switched,
                facts(true, true, ZoneState::Open),
                now,
                &mut at(now)
            ),
            Gated::default()
        );
    }

    #[test]
    fn without_budgets_the_drain_starts_at_once_and_only_the_switch_is_paced() {
        let now = t("2026-11-20T12:00:00Z");
        let later = t("2026-11-20T12:00:10Z");
        let r = rules(serde_json::json!({"respectDisruptionBudgets": false, "nodesPerMinute": 6}));
        let mut at = |_: PaceKind| later;
        assert!(
            gate(
                &r,
                DrainStep::Idle,
                facts(true, false, ZoneState::Open),
                now,
                &mut at
            )
            .gate
            .start
        );
        let g = gate(
            &r,
            DrainStep::Draining { since: now },
            facts(true, false, ZoneState::Open),
            now,
            &mut at,
        );
        assert_eq!(g.wait, Some(Wait::SwitchSlot(later)));
    }

    #[test]
    fn a_settling_or_held_zone_starts_nothing_and_evicts_nothing() {
        let now = t("2026-11-20T12:00:00Z");
        let settled = t("2026-11-20T12:00:04Z");
        let r = rules(serde_json::json!({"pauseWhenZoneUnhealthy": "50%"}));
        let mut never =
            |_: PaceKind| -> Timestamp { panic!("no pace is asked while the zone waits") };
        for step in [
            DrainStep::Idle,
            DrainStep::Waiting,
            DrainStep::Draining { since: now },
        ] {
            let settling = ZoneState::Settling { until: settled };
            let g = gate(&r, step, facts(true, false, settling), now, &mut never);
            assert_eq!(g, closed(Wait::ZoneSettling(settled)), "{step:?}");
            assert_eq!(g.wait.and_then(Wait::until), Some(settled));
            let g = gate(
                &r,
                step,
                facts(true, true, ZoneState::Held),
                now,
                &mut never,
            );
            assert_eq!(g, closed(Wait::ZoneHeld), "{step:?}");
        }
        // Judged open: the drain starts, and a drained node switches.
        let mut now_slot = |_: PaceKind| now;
        let open_zone = facts(true, true, ZoneState::Open);
        assert!(
            gate(&r, DrainStep::Idle, open_zone, now, &mut now_slot)
                .gate
                .start
        );
        let g = gate(
            &r,
            DrainStep::Draining { since: now },
            open_zone,
            now,
            &mut now_slot,
        );
        assert!(g.gate.switch);
    }

    #[test]
    fn without_a_zone_pause_the_zone_is_never_read() {
        let now = t("2026-11-20T12:00:00Z");
        let r = rules(serde_json::json!({}));
        let unread = GateFacts {
            paced: true,
            evicted: true,
            zone: &|| panic!("the zone is read only with pauseWhenZoneUnhealthy"),
        };
        let g = gate(
            &r,
            DrainStep::Draining { since: now },
            unread,
            now,
            &mut |_| now,
        );
        assert!(g.gate.switch);
    }

    fn toleration(
        key: Option<&str>,
        op: &str,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(str::to_string),
            operator: Some(op.to_string()),
            value: value.map(str::to_string),
            effect: effect.map(str::to_string),
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerations_match_as_kubernetes_matches_them() {
        let taint = PolicyTaint {
            key: "example.com/nic".into(),
            value: Some("kaput".into()),
            effect: TaintEffect::NoExecute,
        };
        assert!(tolerates(&toleration(None, "Exists", None, None), &taint));
        assert!(tolerates(
            &toleration(Some("example.com/nic"), "Exists", None, Some("NoExecute")),
            &taint
        ));
        assert!(!tolerates(
            &toleration(Some("example.com/nic"), "Exists", None, Some("NoSchedule")),
            &taint
        ));
        assert!(tolerates(
            &toleration(Some("example.com/nic"), "Equal", Some("kaput"), None),
            &taint
        ));
        assert!(!tolerates(
            &toleration(Some("example.com/nic"), "Equal", Some("fine"), None),
            &taint
        ));
        assert!(!tolerates(
            &toleration(Some("other"), "Exists", None, None),
            &taint
        ));
    }
}
