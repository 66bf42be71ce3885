//! What this replica remembers between reconciles about decisions that span
//! nodes: the places under `maxTaintedNodes` caps (`cap_ledger`), each zone's
//! drain pace and the nodes' eviction retries (`drain::ledger`), and the
//! out-of-service waits already announced (`shutdown_waits`). A reconcile asks
//! them before it plans, and settles them after it wrote.

use std::sync::{Mutex, MutexGuard};

use crate::{
    controller::{cap_ledger::CapLedger, shutdown_waits::ShutdownWaits},
    drain::ledger::DrainLedger,
};

#[derive(Default)]
pub struct Ledgers {
    caps: Mutex<CapLedger>,
    drains: Mutex<DrainLedger>,
    shutdown_waits: ShutdownWaits,
}

impl Ledgers {
    pub fn caps(&self) -> MutexGuard<'_, CapLedger> {
        self.caps.lock().expect("cap ledger lock")
    }

    pub fn drains(&self) -> MutexGuard<'_, DrainLedger> {
        self.drains.lock().expect("drain ledger lock")
    }

    pub fn shutdown_waits(&self) -> &ShutdownWaits {
        &self.shutdown_waits
    }

    /// A node left the cluster.
    pub fn forget_node(&self, node: &str) {
        self.shutdown_waits.forget(node);
    }
}
