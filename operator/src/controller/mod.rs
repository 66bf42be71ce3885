//! The controller: the watches that feed it (`watches`), the node work queue and
//! its reconciler, the one-patch node writer, node events, the policy reconciler
//! (finalizer cleanup) and status writer, the `maxTaintedNodes` ledger, a node
//! reconcile's part in drains (`node_drains`), the one event for a node that
//! out-of-service waits on (`shutdown_waits`), and the periodic resync under it all. Every decision comes from the engine; this layer
//! reads the caches and writes.

pub mod annotation_warnings;
pub mod caches;
pub mod cap_ledger;
pub mod context;
pub mod error;
pub mod event_summary;
pub mod events;
pub mod health;
pub mod ledgers;
pub mod node_drains;
pub mod node_events;
pub mod node_gather;
pub mod node_queue;
pub mod node_reconciler;
pub mod node_report;
pub mod node_writer;
pub mod policy_reconciler;
pub mod policy_status;
pub mod resync;
pub mod shutdown_waits;
pub mod watches;
pub mod write_tracking;
