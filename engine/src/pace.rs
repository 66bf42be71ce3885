//! The per-zone pace of drains: turns handed out one interval apart.
//!
//! A [`Pacer`] is one pace (one policy, one zone, one kind of step). [`Paces`] is
//! every pace a controller keeps between reconciles: it opens a node's drain
//! gate ([`crate::drain::gate`]) with the node's turn, keeps a turn the node took
//! while its reconcile runs (a replan after a write conflict must not lose it),
//! and takes back the turns of nodes that stop waiting. A new pace starts from
//! what the nodes record ([`crate::drain::zone_history`]), so a new leader
//! carries on where the old one stopped.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;

use crate::{
    cluster::NodeView,
    decision::Verdict,
    drain::{self, DrainStep, GateFacts, Gated, PaceKind, add},
    eviction_rules::ZoneState,
    policy_set::PolicySet,
};

/// One paced step of one policy in one zone: turns one interval apart, first come
/// first served, no burst.
///
/// A node asking for its turn gets the first moment at least one interval after
/// every turn reserved or taken so far, and keeps it while it waits, so each
/// waiting node is woken once, at its turn. A node that took its step moves the
/// pace on from when it actually did; a node that stops waiting gives its turn
/// back (the turns after it stay where they are: a gap, never a burst).
#[derive(Debug, Clone)]
pub struct Pacer {
    interval: Duration,
    /// The latest step taken (on any replica: seeded from the nodes).
    last: Option<Timestamp>,
    reserved: HashMap<String, Timestamp>,
}

impl Pacer {
    /// `last`: the latest step of this kind the nodes record ([`history`]).
    pub fn new(interval: Duration, last: Option<Timestamp>) -> Self {
        Pacer {
            interval,
            last,
            reserved: HashMap::new(),
        }
    }

    /// A spec edit changed the pace; turns reserved so far stay.
    pub fn set_interval(&mut self, interval: Duration) {
        self.interval = interval;
    }

    /// When `node` may take its step: its reserved turn (reserved now if it has
    /// none), never sooner than one interval after the last step taken.
    pub fn slot(&mut self, node: &str, now: Timestamp) -> Timestamp {
        let after_last = self.last.map(|l| add(l, self.interval));
        if let Some(&turn) = self.reserved.get(node) {
            return after_last.map_or(turn, |a| a.max(turn));
        }
        let after_reserved = self.reserved.values().max().map(|&r| add(r, self.interval));
        let turn = [Some(now), after_last, after_reserved]
            .into_iter()
            .flatten()
            .max()
            .expect("now is there");
        self.reserved.insert(node.to_string(), turn);
        turn
    }

    /// `node` took its step at `at`, its turn having come.
    pub fn used(&mut self, node: &str, at: Timestamp) {
        self.reserved.remove(node);
        self.last = Some(self.last.map_or(at, |l| l.max(at)));
    }

    /// `node` no longer waits (it healed, left, or its policy changed).
    pub fn release(&mut self, node: &str) {
        self.reserved.remove(node);
    }

    pub fn waiting(&self) -> usize {
        self.reserved.len()
    }
}

/// One pace: a policy (by uid: a policy deleted and created again starts afresh),
/// a zone, a step.
type PaceKey = (String, String, PaceKind);

/// Every pace, between reconciles.
#[derive(Debug, Default)]
pub struct Paces {
    pacers: HashMap<PaceKey, Pacer>,
    /// Turns taken during a node's reconcile that is still running.
    taken: HashSet<(String, PaceKey)>,
    /// The paces each running reconcile asked: the node's other turns go back
    /// when it ends.
    asked: HashMap<String, HashSet<PaceKey>>,
}

impl Paces {
    /// Policy `i`'s drain gate on `node`, whose verdict is `v`. `evicted`: the pods
    /// in the way are gone; `zone` reads how the node's zone stands (only when it
    /// matters); `nodes` are every node, for a new pace's history.
    #[allow(clippy::too_many_arguments)]
    pub fn gate<'n>(
        &mut self,
        set: &PolicySet,
        i: usize,
        node: &NodeView,
        v: Verdict,
        evicted: bool,
        zone_state: &dyn Fn() -> ZoneState,
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
            zone: zone_state,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_pacer_hands_out_turns_one_interval_apart_in_order_of_asking() {
        let now = t("2026-11-20T12:00:00Z");
        let mut p = Pacer::new(Duration::from_secs(10), None);
        assert_eq!(p.slot("a", now), now);
        assert_eq!(p.slot("b", now), t("2026-11-20T12:00:10Z"));
        assert_eq!(p.slot("c", now), t("2026-11-20T12:00:20Z"));
        // Asking again keeps the turn.
        assert_eq!(
            p.slot("b", t("2026-11-20T12:00:05Z")),
            t("2026-11-20T12:00:10Z")
        );
        // a took its step late: b's turn moves to one interval after it.
        p.used("a", t("2026-11-20T12:00:03Z"));
        assert_eq!(p.slot("b", now), t("2026-11-20T12:00:13Z"));
        // b healed: its turn is a gap, c keeps its own.
        p.release("b");
        assert_eq!(p.slot("c", now), t("2026-11-20T12:00:20Z"));
        assert_eq!(p.waiting(), 1);
    }

    #[test]
    fn a_pacer_seeded_with_a_recent_step_waits_an_interval_from_it() {
        let mut p = Pacer::new(Duration::from_secs(10), Some(t("2026-11-20T11:59:55Z")));
        assert_eq!(
            p.slot("a", t("2026-11-20T12:00:00Z")),
            t("2026-11-20T12:00:05Z")
        );
        let mut p = Pacer::new(Duration::from_secs(10), Some(t("2026-11-20T11:00:00Z")));
        assert_eq!(
            p.slot("a", t("2026-11-20T12:00:00Z")),
            t("2026-11-20T12:00:00Z")
        );
    }

    mod paces {
        use super::super::*;
        use taint_operator_testkit::*;

        fn set() -> PolicySet {
            PolicySet::from_resources(&[policy("p")
                .taint("k", "v", NoExecute)
                .matcher([cond("NIC", "Kaput")])
                .eviction(
                    serde_json::json!({"nodesPerMinute": 6, "respectDisruptionBudgets": false}),
                )
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
                clearing: false,
            }
        }

        #[test]
        fn one_switch_per_interval_and_a_replan_keeps_the_turn_it_took() {
            let set = set();
            let (a, b) = (draining("a1"), draining("a2"));
            let all = || vec![&a, &b];
            let mut paces = Paces::default();
            let t0 = now();
            let gate = |l: &mut Paces, n: &NodeView, at| {
                l.gate(&set, 0, n, verdict(), true, &|| ZoneState::Open, &all, at)
            };
            assert!(gate(&mut paces, &a, t0).gate.switch);
            // The same reconcile plans again after a conflict: still its turn.
            assert!(gate(&mut paces, &a, t0).gate.switch);
            paces.settle("a1");
            let g = gate(&mut paces, &b, t0);
            assert!(!g.gate.switch);
            assert_eq!(g.wait.and_then(|w| w.until()), Some(plus(t0, 10)));
            paces.settle("a2");
            assert!(gate(&mut paces, &b, plus(t0, 10)).gate.switch);
        }

        #[test]
        fn a_node_that_stops_waiting_gives_its_turn_back() {
            let set = set();
            let (a, b, c) = (draining("a1"), draining("a2"), draining("a3"));
            let all = || vec![&a, &b, &c];
            let mut paces = Paces::default();
            let t0 = now();
            let mut gate = |n: &NodeView| {
                let g = paces.gate(&set, 0, n, verdict(), true, &|| ZoneState::Open, &all, t0);
                paces.settle(&n.name);
                g.wait.and_then(|w| w.until())
            };
            assert_eq!(gate(&a), None);
            assert_eq!(gate(&b), Some(plus(t0, 10)));
            assert_eq!(gate(&c), Some(plus(t0, 20)));
            // b healed: its reconcile asks nothing, and its turn is released.
            paces.settle("a2");
            let mut paces2 = paces;
            let g = paces2.gate(&set, 0, &c, verdict(), true, &|| ZoneState::Open, &all, t0);
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
            let mut paces = Paces::default();
            let g = paces.gate(
                &set,
                0,
                &b,
                verdict(),
                true,
                &|| ZoneState::Open,
                &all,
                now(),
            );
            assert_eq!(g.wait.and_then(|w| w.until()), Some(plus(now(), 6)));
        }
    }
}
