//! What the controller remembers between reconciles about drains: each zone's
//! pace (the engine's `pace::Paces`, under the ledger's one lock, as reconciles run
//! concurrently). Each node's eviction retries are `retries`.

use k8s_openapi::jiff::Timestamp;

use engine::{
    cluster::NodeView, decision::Verdict, drain::Gated, eviction_rules::ZoneState, pace::Paces,
    policy_set::PolicySet,
};

#[derive(Default)]
pub struct DrainLedger {
    paces: Paces,
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
}
