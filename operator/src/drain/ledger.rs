//! What the controller remembers between reconciles about drains: each zone's
//! pace (the engine's `pace::Paces`, under the ledger's one lock, as reconciles run
//! concurrently), the eviction retries of each node, and the blocked evictions
//! already reported.

use std::{collections::HashMap, collections::HashSet, time::Duration};

use k8s_openapi::jiff::Timestamp;

use crate::jitter::jitter;
use engine::{
    cluster::NodeView, decision::Verdict, drain::Gated, eviction_rules::ZoneState, pace::Paces,
    policy_set::PolicySet,
};

/// The first wait before evicting again when pods are still in the way; it
/// doubles to [`EVICTION_RETRY_MAX`]. kubectl drain retries every 5 s.
pub const EVICTION_RETRY_FIRST: Duration = Duration::from_secs(5);
pub const EVICTION_RETRY_MAX: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct DrainLedger {
    paces: Paces,
    /// Eviction rounds in a row that left pods in the way, per node.
    rounds: HashMap<String, u32>,
    /// When each node's next eviction round is due: a reconcile that comes sooner
    /// (the node changed, its own write came back) does not evict again.
    next_round: HashMap<String, Timestamp>,
    /// (node, pod, budget message) blocked evictions already reported.
    reported: HashSet<(String, String, String)>,
}

impl DrainLedger {
    /// Policy `i`'s drain gate on `node` (see `Paces::gate`).
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
        self.paces
            .gate(set, i, node, v, evicted, zone_state, nodes, now)
    }

    /// The node's reconcile ended (see `Paces::settle`).
    pub fn settle(&mut self, node: &str) {
        self.paces.settle(node);
    }

    /// Paces of policies no longer in `set` are forgotten.
    pub fn forget_gone(&mut self, set: &PolicySet) {
        self.paces.forget_gone(set);
    }

    /// An eviction round at `now` left pods in the way: how long until the next one.
    pub fn evict_again_in(&mut self, node: &str, now: Timestamp) -> Duration {
        let rounds = self.rounds.entry(node.to_string()).or_default();
        *rounds += 1;
        let base = EVICTION_RETRY_FIRST
            .saturating_mul(1 << (*rounds - 1).min(8))
            .min(EVICTION_RETRY_MAX);
        let wait = jitter(base, 0.2);
        self.next_round
            .insert(node.to_string(), engine::drain::add(now, wait));
        wait
    }

    /// How long until the node's next eviction round is due; `None`: it is due now.
    pub fn round_due_in(&self, node: &str, now: Timestamp) -> Option<Duration> {
        let due = *self.next_round.get(node)?;
        (due > now).then(|| Duration::try_from(due.duration_since(now)).unwrap_or_default())
    }

    /// Nothing is in the way of the node's drains any more (or it drains nothing).
    pub fn evictions_done(&mut self, node: &str) {
        self.rounds.remove(node);
        self.next_round.remove(node);
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

    #[test]
    fn eviction_retries_grow_and_reset() {
        let now = taint_operator_testkit::now();
        let mut ledger = DrainLedger::default();
        assert_eq!(ledger.round_due_in("n", now), None);
        let first = ledger.evict_again_in("n", now);
        assert!(first >= Duration::from_secs(4) && first <= Duration::from_secs(6));
        // A reconcile before the round is due does not evict.
        let left = ledger.round_due_in("n", engine::drain::add(now, Duration::from_secs(1)));
        assert!(
            left.is_some_and(|d| d + Duration::from_secs(1) <= first + Duration::from_millis(1))
        );
        assert_eq!(
            ledger.round_due_in("n", engine::drain::add(now, first)),
            None
        );
        let second = ledger.evict_again_in("n", now);
        assert!(second >= Duration::from_secs(8) && second <= Duration::from_secs(12));
        assert!(ledger.first_block("n", "ns/p", "budget b"));
        assert!(!ledger.first_block("n", "ns/p", "budget b"));
        ledger.evictions_done("n");
        assert_eq!(ledger.round_due_in("n", now), None);
        assert!(ledger.evict_again_in("n", now) <= Duration::from_secs(6));
        assert!(ledger.first_block("n", "ns/p", "budget b"));
    }
}
