//! One node's decision as data: its plan, and what the plan waits for. The
//! controller gathers the answers of its ledgers first (which caps admit the node,
//! how far each drain may go); deciding then reads only values, so the same
//! inputs always decide the same.

use k8s_openapi::jiff::Timestamp;

use crate::{
    cluster::NodeView,
    decision::NodeEvaluation,
    drain::{Gated, Wait},
    node_plan::{Gates, NodePlan, UnknownPolicies, plan_node},
    policy_set::PolicySet,
    wake::Waits,
};

/// What the ledgers answered for one node, by policy index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answers {
    /// Whether policy `i` may newly taint the node under its `maxTaintedNodes` cap.
    pub admitted: Vec<bool>,
    /// Policy `i`'s drain gate, for the policies whose gate planning asks
    /// ([`crate::node_plan::drain_gates_asked`]); `None` for the others.
    pub drains: Vec<Option<Gated>>,
}

/// A node's plan and what it waits for; the write sends the plan, and
/// [`crate::wake::next_look`] turns the waits into when to look again.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub plan: NodePlan,
    pub waits: Waits,
}

/// Plans `node` as evaluated in `eval`, with the ledgers' `answers`.
pub fn decide(
    set: &PolicySet,
    node: &NodeView,
    eval: &NodeEvaluation,
    answers: &Answers,
    now: Timestamp,
) -> Decision {
    let admitted = |i: usize| answers.admitted.get(i).copied().unwrap_or(true);
    let drain = |i: usize| {
        answers
            .drains
            .get(i)
            .copied()
            .flatten()
            .map(|g| g.gate)
            .unwrap_or_default()
    };
    let plan = plan_node(
        set,
        node,
        eval,
        Gates {
            admitted: &admitted,
            drain: &drain,
        },
        UnknownPolicies::Remove,
        now,
    );
    let mut waits = Waits {
        evaluation: eval.next_check,
        held_back: answers.admitted.contains(&false),
        ..Waits::default()
    };
    for gated in answers.drains.iter().flatten() {
        add_drain_wait(&mut waits, gated);
    }
    Decision { plan, waits }
}

/// What a closed drain gate waits for, added to `waits`.
fn add_drain_wait(waits: &mut Waits, gated: &Gated) {
    let Some(wait) = gated.wait else {
        return;
    };
    waits.gate_waited = true;
    match wait {
        Wait::ZoneHeld => waits.zone_held = true,
        w => {
            if let Some(at) = w.until() {
                waits.drain_at = Some(waits.drain_at.map_or(at, |t| t.min(at)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::DrainGate;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn gated(wait: Option<Wait>) -> Option<Gated> {
        Some(Gated {
            gate: DrainGate::default(),
            wait,
        })
    }

    #[test]
    fn the_earliest_drain_wait_wins_and_any_wait_unsettles() {
        let mut waits = Waits::default();
        for g in [
            gated(Some(Wait::StartSlot(t(30)))),
            gated(None),
            gated(Some(Wait::SwitchSlot(t(10)))),
        ]
        .iter()
        .flatten()
        {
            add_drain_wait(&mut waits, g);
        }
        assert_eq!(waits.drain_at, Some(t(10)));
        assert!(waits.gate_waited);
        assert!(!waits.zone_held);
    }

    #[test]
    fn a_held_zone_is_its_own_wait() {
        let mut waits = Waits::default();
        add_drain_wait(&mut waits, &gated(Some(Wait::ZoneHeld)).unwrap());
        assert!(waits.zone_held && waits.gate_waited);
        assert_eq!(waits.drain_at, None);
    }

    #[test]
    fn an_open_gate_waits_for_nothing() {
        let mut waits = Waits::default();
        add_drain_wait(&mut waits, &gated(None).unwrap());
        assert_eq!(waits, Waits::default());
    }
}
