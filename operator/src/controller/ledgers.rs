//! What this replica remembers between reconciles about decisions that span
//! nodes: the places under `maxTaintedNodes` caps (`cap_ledger`), each zone's
//! drain pace (`drain::ledger`), and the
//! out-of-service waits already announced (`shutdown_waits`). A reconcile asks
//! them before each plan attempt ([`Ledgers::ask`]) and tells them how it ended
//! ([`Ledgers::end`]).

use std::sync::{Mutex, MutexGuard};

use crate::{
    controller::{cap_ledger::CapLedger, shutdown_waits::ShutdownWaits},
    drain::ledger::DrainLedger,
};
use engine::{cluster::NodeView, policy_set::PolicySet};

#[derive(Default)]
pub struct Ledgers {
    caps: Mutex<CapLedger>,
    drains: Mutex<DrainLedger>,
    shutdown_waits: ShutdownWaits,
}

/// The ledgers one plan attempt asks, locked for it (the caps first).
pub struct Asking<'a> {
    pub caps: MutexGuard<'a, CapLedger>,
    pub drains: MutexGuard<'a, DrainLedger>,
}

/// What a node's reconcile tells the ledgers when it ends.
pub struct ReconcileEnd<'a> {
    pub node: &'a str,
    /// What the write left; `None` when it failed.
    pub outcome: Option<Outcome<'a>>,
}

/// A node reconcile that planned and wrote (or found nothing to write).
pub struct Outcome<'a> {
    pub set: &'a PolicySet,
    /// The node as planned first, and as it ended.
    pub before: &'a NodeView,
    pub after: &'a NodeView,
    /// The policies whose out-of-service waits for the node to go down.
    pub awaiting_shutdown: &'a [String],
}

/// What the ledgers answer a reconcile that ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Told {
    /// The policies whose out-of-service wait on the node begins now.
    pub shutdown_waits_begun: Vec<String>,
    /// Nodes that waited for a place under a cap that this reconcile freed.
    pub cap_waiters: Vec<String>,
}

impl Ledgers {
    pub fn caps(&self) -> MutexGuard<'_, CapLedger> {
        self.caps.lock().expect("cap ledger lock")
    }

    pub fn drains(&self) -> MutexGuard<'_, DrainLedger> {
        self.drains.lock().expect("drain ledger lock")
    }

    /// The caps and the drains, for one plan attempt.
    pub fn ask(&self) -> Asking<'_> {
        let caps = self.caps();
        Asking {
            caps,
            drains: self.drains(),
        }
    }

    /// A node's reconcile ended: its drains' turns (spent, or given back: see
    /// `Paces::settle`), its out-of-service waits and the cap places it took or freed.
    pub fn end(&self, end: ReconcileEnd<'_>) -> Told {
        let node = end.node;
        let mut told = Told::default();
        self.drains().settle(node);
        if let Some(o) = end.outcome {
            told.shutdown_waits_begun =
                self.shutdown_waits.newly_waiting(node, o.awaiting_shutdown);
            // Only capped policies need the ledger (see `CapLedger::forget_uncapped`).
            let capped = o.set.policies.iter().any(|p| {
                p.rules
                    .as_ref()
                    .is_ok_and(|r| r.max_tainted_nodes.is_some())
            });
            if capped {
                told.cap_waiters = self.caps().observe(o.set, o.before, o.after);
            }
        }
        told
    }

    /// A node left the cluster.
    pub fn forget_node(&self, node: &str) {
        self.shutdown_waits.forget(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_out_of_service_wait_is_told_once_and_only_after_a_plan() {
        let ledgers = Ledgers::default();
        let set = PolicySet::new([]);
        let view = NodeView::default();
        let waiting = vec!["spot".to_string()];
        let told = |outcome: bool| {
            ledgers.end(ReconcileEnd {
                node: "n1",
                outcome: outcome.then_some(Outcome {
                    set: &set,
                    before: &view,
                    after: &view,
                    awaiting_shutdown: &waiting,
                }),
            })
        };
        assert!(
            told(false).shutdown_waits_begun.is_empty(),
            "a failed write"
        );
        assert_eq!(told(true).shutdown_waits_begun, ["spot"]);
        assert!(told(true).shutdown_waits_begun.is_empty());
    }
}
