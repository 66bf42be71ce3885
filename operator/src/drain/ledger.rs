//! What the controller remembers between reconciles about drains: each zone's
//! pace (turns handed out, steps taken), the eviction retries of each node, and
//! the blocked evictions already reported.
//!
//! Reconciles run concurrently, so a turn is taken under the ledger's one lock.
//! A pace starts from what the nodes record (`drain::zone_history`), so a new
//! leader carries on where the old one stopped.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;

use crate::jitter::jitter;
use engine::{
    cluster::NodeView,
    decision::Verdict,
    drain::{self, DrainStep, GateFacts, Gated, PaceKind, Pacer},
    policy_set::PolicySet,
};

/// One pace: a policy (by uid: a policy deleted and created again starts afresh),
/// a zone, a step.
type PaceKey = (String, String, PaceKind);

/// The first wait before evicting again when pods are still in the way; it
/// doubles to [`EVICTION_RETRY_MAX`]. kubectl drain retries every 5 s.
pub const EVICTION_RETRY_FIRST: Duration = Duration::from_secs(5);
pub const EVICTION_RETRY_MAX: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct DrainLedger {
    pacers: HashMap<PaceKey, Pacer>,
    /// Turns taken during a node's reconcile that is still running: asked again
    /// (a replan after a conflict), they are still the node's.
    taken: HashSet<(String, PaceKey)>,
    /// The paces each running reconcile asked: the node's other reservations are
    /// released when it ends.
    asked: HashMap<String, HashSet<PaceKey>>,
    /// Eviction rounds in a row that left pods in the way, per node.
    rounds: HashMap<String, u32>,
    /// (node, pod, budget message) blocked evictions already reported.
    reported: HashSet<(String, String, String)>,
}

impl DrainLedger {
    /// Policy `i`'s drain gate on `node`, whose verdict is `v`. `evicted`: the pods
    /// in the way are gone; `zone_held` reads the zone's health (only when it
    /// matters); `nodes` are every node, for a new pace's history.
    #[allow(clippy::too_many_arguments)]
    pub fn gate<'n>(
        &mut self,
        set: &PolicySet,
        i: usize,
        node: &NodeView,
        v: Verdict,
        evicted: bool,
        zone_held: &dyn Fn() -> bool,
        nodes: &dyn Fn() -> Vec<&'n NodeView>,
        now: Timestamp,
    ) -> Gated {
        let Some(rules) = drain::rules_of(set, i) else {
            return Gated::default();
        };
        let step = drain::step(set, i, node);
        if step == DrainStep::Switched {
            return Gated::default();
        }
        let zone = drain::zone_of(&node.labels).to_string();
        let uid = set.policies[i].uid.clone();
        let interval = rules.interval().unwrap_or(Duration::ZERO);
        let mut taken_now = None;
        let mut pace = |kind: PaceKind| {
            let key = (uid.clone(), zone.clone(), kind);
            self.asked
                .entry(node.name.clone())
                .or_default()
                .insert(key.clone());
            if self.taken.contains(&(node.name.clone(), key.clone())) {
                return now;
            }
            let pacer = self.pacers.entry(key.clone()).or_insert_with(|| {
                let [start, switch] = drain::zone_history(set, i, &zone, nodes());
                let last = match kind {
                    PaceKind::Start => start,
                    PaceKind::Switch => switch,
                };
                Pacer::new(interval, last)
            });
            pacer.set_interval(interval);
            let slot = pacer.slot(&node.name, now);
            if slot <= now {
                taken_now = Some(key);
            }
            slot
        };
        let facts = GateFacts {
            paced: v.capped(),
            evicted,
            zone_held,
        };
        let gated = drain::gate(rules, step, facts, now, &mut pace);
        if let Some(key) = taken_now
            && (gated.gate.start || gated.gate.switch)
        {
            self.pacers
                .get_mut(&key)
                .expect("asked above")
                .used(&node.name, now);
            self.taken.insert((node.name.clone(), key));
        }
        gated
    }

    /// The node's reconcile ended: turns it holds in paces it did not ask for this
    /// time go back (it no longer waits there), and its taken turns are spent.
    pub fn settle(&mut self, node: &str) {
        let asked = self.asked.remove(node).unwrap_or_default();
        for (key, pacer) in &mut self.pacers {
            if !asked.contains(key) {
                pacer.release(node);
            }
        }
        self.taken.retain(|(n, _)| n != node);
    }

    /// Paces of policies no longer in `set` are forgotten.
    pub fn forget_gone(&mut self, set: &PolicySet) {
        let uids: HashSet<&str> = set.policies.iter().map(|p| p.uid.as_str()).collect();
        self.pacers
            .retain(|(uid, _, _), _| uids.contains(uid.as_str()));
    }

    /// An eviction round left pods in the way: how long until the next one.
    pub fn evict_again_in(&mut self, node: &str) -> Duration {
        let rounds = self.rounds.entry(node.to_string()).or_default();
        *rounds += 1;
        let base = EVICTION_RETRY_FIRST
            .saturating_mul(1 << (*rounds - 1).min(8))
            .min(EVICTION_RETRY_MAX);
        jitter(base, 0.2)
    }

    /// Nothing is in the way of the node's drains any more (or it drains nothing).
    pub fn evictions_done(&mut self, node: &str) {
        self.rounds.remove(node);
        self.reported.retain(|(n, _, _)| n != node);
    }

    /// True the first time this pod's eviction is blocked with this message on this
    /// node's drain: one Warning event each, not one per retry.
    pub fn first_block(&mut self, node: &str, pod: &str, message: &str) -> bool {
        self.reported
            .insert((node.to_string(), pod.to_string(), message.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taint_operator_testkit::*;

    fn set() -> PolicySet {
        PolicySet::from_resources(&[policy("p")
            .taint("k", "v", NoExecute)
            .matcher([cond("NIC", "Kaput")])
            .eviction(serde_json::json!({"nodesPerMinute": 6, "respectDisruptionBudgets": false}))
            .build()])
    }

    fn draining(name: &str) -> NodeView {
        NodeView::from_node(
            &node(name)
                .zone("a")
                .condition("NIC", "Kaput")
                .owned_taint("k", "v", NoSchedule, "p")
                .drain_started("p", "2026-11-20T11:00:00Z")
                .build(),
        )
    }

    fn verdict() -> Verdict {
        Verdict {
            selected: true,
            evaluated: true,
            matched: true,
            unready: false,
        }
    }

    #[test]
    fn one_switch_per_interval_and_a_replan_keeps_the_turn_it_took() {
        let set = set();
        let (a, b) = (draining("a1"), draining("a2"));
        let all = || vec![&a, &b];
        let mut ledger = DrainLedger::default();
        let t0 = now();
        let gate = |l: &mut DrainLedger, n: &NodeView, at| {
            l.gate(&set, 0, n, verdict(), true, &|| false, &all, at)
        };
        assert!(gate(&mut ledger, &a, t0).gate.switch);
        // The same reconcile plans again after a conflict: still its turn.
        assert!(gate(&mut ledger, &a, t0).gate.switch);
        ledger.settle("a1");
        let g = gate(&mut ledger, &b, t0);
        assert!(!g.gate.switch);
        assert_eq!(g.wait.and_then(|w| w.until()), Some(plus(t0, 10)));
        ledger.settle("a2");
        assert!(gate(&mut ledger, &b, plus(t0, 10)).gate.switch);
    }

    #[test]
    fn a_node_that_stops_waiting_gives_its_turn_back() {
        let set = set();
        let (a, b, c) = (draining("a1"), draining("a2"), draining("a3"));
        let all = || vec![&a, &b, &c];
        let mut ledger = DrainLedger::default();
        let t0 = now();
        let mut gate = |n: &NodeView| {
            let g = ledger.gate(&set, 0, n, verdict(), true, &|| false, &all, t0);
            ledger.settle(&n.name);
            g.wait.and_then(|w| w.until())
        };
        assert_eq!(gate(&a), None);
        assert_eq!(gate(&b), Some(plus(t0, 10)));
        assert_eq!(gate(&c), Some(plus(t0, 20)));
        // b healed: its reconcile asks nothing, and its turn is released.
        ledger.settle("a2");
        let mut ledger2 = ledger;
        let g = ledger2.gate(&set, 0, &c, verdict(), true, &|| false, &all, t0);
        assert_eq!(g.wait.and_then(|w| w.until()), Some(plus(t0, 20)));
    }

    #[test]
    fn a_new_pace_starts_from_what_the_nodes_record() {
        let set = set();
        // a1 switched 4 s ago, by another replica.
        let switched = NodeView::from_node(
            &node("a1")
                .zone("a")
                .condition("NIC", "Kaput")
                .taint_at("k", Some("v"), NoExecute, Some(plus(now(), -4)))
                .managed("k", NoExecute, "p")
                .build(),
        );
        let b = draining("a2");
        let all = || vec![&switched, &b];
        let mut ledger = DrainLedger::default();
        let g = ledger.gate(&set, 0, &b, verdict(), true, &|| false, &all, now());
        assert_eq!(g.wait.and_then(|w| w.until()), Some(plus(now(), 6)));
    }

    #[test]
    fn eviction_retries_grow_and_reset() {
        let mut ledger = DrainLedger::default();
        let first = ledger.evict_again_in("n");
        let second = ledger.evict_again_in("n");
        assert!(first >= Duration::from_secs(4) && first <= Duration::from_secs(6));
        assert!(second >= Duration::from_secs(8) && second <= Duration::from_secs(12));
        assert!(ledger.first_block("n", "ns/p", "budget b"));
        assert!(!ledger.first_block("n", "ns/p", "budget b"));
        ledger.evictions_done("n");
        assert!(ledger.evict_again_in("n") <= Duration::from_secs(6));
        assert!(ledger.first_block("n", "ns/p", "budget b"));
    }
}
