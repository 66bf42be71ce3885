//! What the controller remembers between reconciles about drains: each zone's
//! pace (the engine's `pace::Paces`, under the ledger's one lock, as reconciles run
//! concurrently), the eviction retries of each node, and the blocked evictions
//! already reported.

use std::{collections::HashMap, collections::HashSet, time::Duration};

use k8s_openapi::jiff::Timestamp;

use crate::jitter::jitter;
use engine::{
    cluster::NodeView, decision::Verdict, drain::Gated, pace::Paces, policy_set::PolicySet,
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
        zone_held: &dyn Fn() -> bool,
        nodes: &dyn Fn() -> Vec<&'n NodeView>,
        now: Timestamp,
    ) -> Gated {
        self.paces
            .gate(set, i, node, v, evicted, zone_held, nodes, now)
    }

    /// The node's reconcile ended (see `Paces::settle`).
    pub fn settle(&mut self, node: &str) {
        self.paces.settle(node);
    }

    /// Paces of policies no longer in `set` are forgotten.
    pub fn forget_gone(&mut self, set: &PolicySet) {
        self.paces.forget_gone(set);
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
