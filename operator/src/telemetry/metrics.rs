//! Prometheus metrics, served at `/metrics`.

use std::sync::Arc;

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub category: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabel {
    pub policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub resource: String,
    pub code: String,
}

#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub reconciles: Family<ControllerLabel, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabel, Histogram>,
    pub node_writes: Counter,
    pub node_write_conflicts: Counter,
    /// One node patch, request to answer.
    pub node_write_duration: Histogram,
    /// A node's wait in the node queue for a free worker.
    pub node_queue_wait: Histogram,
    pub status_writes: Counter,
    pub taints_added: Family<PolicyLabel, Counter>,
    pub taints_removed: Family<PolicyLabel, Counter>,
    pub tainted_nodes: Family<PolicyLabel, Gauge>,
    pub api_requests: Family<RequestLabels, Counter>,
    /// Full resyncs started (every node queued for a re-plan).
    pub resyncs: Counter,
    /// Nodes a resync found wrong and wrote: updates the watches missed.
    pub resync_corrections: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("taint_operator");
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ])
        });
        let node_writes = Counter::default();
        let resyncs = Counter::default();
        let resync_corrections = Counter::default();
        let node_write_conflicts = Counter::default();
        let latency_buckets = || {
            Histogram::new([
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ])
        };
        let node_write_duration = latency_buckets();
        let node_queue_wait = latency_buckets();
        let status_writes = Counter::default();
        let taints_added = Family::<PolicyLabel, Counter>::default();
        let taints_removed = Family::<PolicyLabel, Counter>::default();
        let tainted_nodes = Family::<PolicyLabel, Gauge>::default();
        let api_requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles run, by controller",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by controller and error category",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile",
            reconcile_duration.clone(),
        );
        registry.register(
            "node_writes",
            "Node patches sent (taints and ownership annotations together)",
            node_writes.clone(),
        );
        registry.register(
            "node_write_conflicts",
            "Node patches refused because the node changed meanwhile",
            node_write_conflicts.clone(),
        );
        registry.register(
            "node_write_duration_seconds",
            "Time from sending a node patch to its answer",
            node_write_duration.clone(),
        );
        registry.register(
            "node_queue_wait_seconds",
            "Time a changed node waits in the node queue for a free worker",
            node_queue_wait.clone(),
        );
        registry.register(
            "status_writes",
            "TaintPolicy status patches sent",
            status_writes.clone(),
        );
        registry.register(
            "taints_added",
            "Taints added to nodes, by policy",
            taints_added.clone(),
        );
        registry.register(
            "taints_removed",
            "Taints removed from nodes, by policy",
            taints_removed.clone(),
        );
        registry.register(
            "tainted_nodes",
            "Selected nodes each policy keeps tainted",
            tainted_nodes.clone(),
        );
        registry.register(
            "api_requests",
            "Requests sent to the API server, by verb, resource and status code",
            api_requests.clone(),
        );
        registry.register(
            "resyncs",
            "Periodic full resyncs started (every node re-planned)",
            resyncs.clone(),
        );
        registry.register(
            "resync_corrections",
            "Nodes a periodic resync found wrong and wrote; a missed update, so non-zero is a bug signal",
            resync_corrections.clone(),
        );
        Metrics {
            registry: Arc::new(registry),
            reconciles,
            reconcile_errors,
            reconcile_duration,
            node_writes,
            node_write_conflicts,
            node_write_duration,
            node_queue_wait,
            status_writes,
            taints_added,
            taints_removed,
            tainted_nodes,
            api_requests,
            resyncs,
            resync_corrections,
        }
    }
}

impl Metrics {
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
