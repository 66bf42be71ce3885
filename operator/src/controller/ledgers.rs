//! What this replica remembers between reconciles about decisions that span
//! nodes: the places under `maxTaintedNodes` caps (`cap_ledger`), each zone's
//! drain pace and the nodes' eviction retries (`drain::ledger`), and the
//! out-of-service waits already announced (`shutdown_waits`). A reconcile asks
//! them before each plan attempt ([`Ledgers::ask`]) and tells them how it ended
//! ([`Ledgers::end`]).

use std::{
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;

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

/// How a node's evictions stand when its reconcile ends.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Evictions {
    /// Nothing waits for an eviction (any more): the retries start over.
    #[default]
    Done,
    /// The last round's backoff still runs: nothing was tried.
    BackingOff,
    /// Pods are still in the way after this reconcile's rounds.
    PodsLeft,
}

/// What a node's reconcile tells the ledgers when it ends.
pub struct ReconcileEnd<'a> {
    pub node: &'a str,
    pub now: Timestamp,
    pub evictions: Evictions,
    /// Evictions this reconcile found blocked: (pod, the API server's message).
    pub blocked: Vec<(&'a str, &'a str)>,
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
    /// When to evict again: pods are still in the way.
    pub evict_again_in: Option<Duration>,
    /// For each of `ReconcileEnd::blocked`: reported for the first time.
    pub first_blocks: Vec<bool>,
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

    /// A node's reconcile ended: its eviction retries, the blocked evictions
    /// reported, its drains' turns (spent, or given back: see `Paces::settle`),
    /// its out-of-service waits and the cap places it took or freed.
    pub fn end(&self, end: ReconcileEnd<'_>) -> Told {
        let node = end.node;
        let mut told = Told::default();
        {
            let mut drains = self.drains();
            match end.evictions {
                Evictions::Done => drains.evictions_done(node),
                Evictions::BackingOff => {}
                Evictions::PodsLeft => {
                    told.evict_again_in = Some(drains.evict_again_in(node, end.now))
                }
            }
            told.first_blocks = end
                .blocked
                .iter()
                .map(|(pod, message)| drains.first_block(node, pod, message))
                .collect();
            drains.settle(node);
        }
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

    fn end<'a>(evictions: Evictions, blocked: Vec<(&'a str, &'a str)>) -> ReconcileEnd<'a> {
        ReconcileEnd {
            node: "n1",
            now: Timestamp::UNIX_EPOCH,
            evictions,
            blocked,
            outcome: None,
        }
    }

    #[test]
    fn eviction_retries_back_off_until_the_evictions_are_done() {
        let ledgers = Ledgers::default();
        let first = ledgers.end(end(Evictions::PodsLeft, vec![("ns/p", "budget b")]));
        let wait = first.evict_again_in.expect("pods left: evict again");
        assert_eq!(first.first_blocks, [true]);
        assert_eq!(
            ledgers.drains().round_due_in("n1", Timestamp::UNIX_EPOCH),
            Some(wait)
        );
        let again = ledgers.end(end(Evictions::BackingOff, vec![]));
        assert_eq!(again.evict_again_in, None, "backing off tries nothing");
        let second = ledgers.end(end(Evictions::PodsLeft, vec![("ns/p", "budget b")]));
        assert_eq!(second.first_blocks, [false], "reported once");
        assert!(second.evict_again_in.is_some(), "pods still left");
        ledgers.end(end(Evictions::Done, vec![]));
        assert_eq!(
            ledgers.drains().round_due_in("n1", Timestamp::UNIX_EPOCH),
            None
        );
    }

    #[test]
    fn an_out_of_service_wait_is_told_once_and_only_after_a_plan() {
        let ledgers = Ledgers::default();
        let set = PolicySet::new([]);
        let view = NodeView::default();
        let waiting = vec!["spot".to_string()];
        let told = |outcome: bool| {
            ledgers.end(ReconcileEnd {
                outcome: outcome.then_some(Outcome {
                    set: &set,
                    before: &view,
                    after: &view,
                    awaiting_shutdown: &waiting,
                }),
                ..end(Evictions::Done, vec![])
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
