//! Drains for policies with `spec.eviction`: what the controller keeps between
//! reconciles (`ledger`: each zone's pace; `retries`: each node's eviction
//! retries) and the drain's I/O
//! (`evictor`: the pods on a node, their evictions). Every decision (the steps,
//! the gates, which pods are in the way) is the engine's `drain`.

pub mod evictor;
pub mod ledger;
pub mod retries;
