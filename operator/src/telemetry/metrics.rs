//! Prometheus metrics, served at `/metrics`.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

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

/// An eviction's outcome: `evicted` (accepted), `blocked` (a PodDisruptionBudget
/// said no: 429), `gone` (the pod was already gone), `failed` (anything else).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    pub policy: String,
    pub outcome: &'static str,
}

/// One admission review: which webhook (`node`, `taintpolicy`), the operation, and
/// how it ended (`allowed`, `refused`, `unavailable`: caches not synced, `error`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: &'static str,
    pub operation: String,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabel {
    pub webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub resource: String,
    pub code: String,
}

/// A watch that failed or started over: which watch (`nodes`, `pods`,
/// `taintpolicies`) and why (`relist`: the watcher listed everything again, as it
/// does when its resourceVersion expired; `list_failed`, `watch_failed`,
/// `watch_error`: the API server's error; `connection`: the stream broke).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchRestartLabels {
    pub watch: &'static str,
    pub cause: &'static str,
}

#[derive(Clone)]
pub struct Metrics {
    /// Node watch events that were the echo of our own write, not reconciled again.
    pub node_echoes_skipped: Counter,
    /// Node events not published: the event queue was full.
    pub events_dropped: Counter,
    pub watch_restarts: Family<WatchRestartLabels, Counter>,
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
    /// Time spent recomputing every policy's status from the caches, one sample per run.
    pub status_computation: Histogram,
    pub taints_added: Family<PolicyLabel, Counter>,
    pub taints_removed: Family<PolicyLabel, Counter>,
    pub tainted_nodes: Family<PolicyLabel, Gauge>,
    pub api_requests: Family<RequestLabels, Counter>,
    /// Full resyncs started (every node queued for a re-plan).
    pub resyncs: Counter,
    /// Nodes a resync found wrong and wrote: updates the watches missed.
    pub resync_corrections: Counter,
    /// 1 while this replica leads (holds the Lease, or runs without leader
    /// election), else 0: alerts need a series that says "nobody leads".
    pub leader: Gauge,
    /// 1 while a policy's Ready condition is True, else 0.
    pub policy_ready: Family<PolicyLabel, Gauge>,
    /// Nodes each policy would taint but `maxTaintedNodes` holds back (`LimitReached`).
    pub pending_nodes: Family<PolicyLabel, Gauge>,
    /// Nodes between NoSchedule and NoExecute in each policy's drains.
    pub draining_nodes: Family<PolicyLabel, Gauge>,
    /// Evictions requested for drains, by policy and outcome.
    pub evictions: Family<EvictionLabels, Counter>,
    /// Admission reviews answered, by webhook, operation and outcome.
    pub webhook_requests: Family<WebhookLabels, Counter>,
    /// Seconds from a review's arrival to its answer, by webhook.
    pub webhook_duration: Family<WebhookLabel, Histogram>,
    /// Nodes the node watch saw appear after its first list: new nodes joining.
    pub nodes_joined: Counter,
    /// 1 for each webhook the API server is configured to call (`--registered-webhooks`).
    pub webhook_registered: Family<WebhookLabel, Gauge>,
    /// The policies the per-policy gauges have series for, so that the series of a
    /// deleted policy can be dropped instead of reporting it forever.
    reported_policies: Arc<Mutex<BTreeSet<String>>>,
}

/// What the per-policy gauges say about one policy, from its status computation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyReport {
    pub policy: String,
    pub tainted_nodes: usize,
    pub pending_nodes: usize,
    pub draining_nodes: usize,
    pub ready: bool,
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
        let status_computation = latency_buckets();
        let taints_added = Family::<PolicyLabel, Counter>::default();
        let taints_removed = Family::<PolicyLabel, Counter>::default();
        let tainted_nodes = Family::<PolicyLabel, Gauge>::default();
        let api_requests = Family::<RequestLabels, Counter>::default();
        let leader = Gauge::default();
        let policy_ready = Family::<PolicyLabel, Gauge>::default();
        let pending_nodes = Family::<PolicyLabel, Gauge>::default();
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
            "status_computation_seconds",
            "Time to recompute every policy's status from the caches, per run",
            status_computation.clone(),
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
            "Periodic resync passes started (every node checked, and planned again unless nothing its last plan read has changed)",
            resyncs.clone(),
        );
        registry.register(
            "resync_corrections",
            "Nodes a periodic resync found wrong and wrote; a missed update, so non-zero is a bug signal",
            resync_corrections.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica leads and writes, else 0",
            leader.clone(),
        );
        registry.register(
            "policy_ready",
            "1 while the policy's Ready condition is True, else 0",
            policy_ready.clone(),
        );
        registry.register(
            "pending_nodes",
            "Nodes each policy would taint but maxTaintedNodes holds back (LimitReached)",
            pending_nodes.clone(),
        );
        let draining_nodes = Family::<PolicyLabel, Gauge>::default();
        registry.register(
            "draining_nodes",
            "Nodes between NoSchedule and NoExecute in each policy's drains (spec.eviction)",
            draining_nodes.clone(),
        );
        let evictions = Family::<EvictionLabels, Counter>::default();
        registry.register(
            "evictions",
            "Evictions requested for drains, by policy and outcome (evicted, blocked by a PodDisruptionBudget, gone, failed)",
            evictions.clone(),
        );
        let webhook_requests = Family::<WebhookLabels, Counter>::default();
        registry.register(
            "webhook_requests",
            "Admission reviews answered, by webhook (node, taintpolicy), operation and outcome (allowed, refused, unavailable, error)",
            webhook_requests.clone(),
        );
        let webhook_duration = Family::<WebhookLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5])
        });
        registry.register(
            "webhook_duration_seconds",
            "Seconds from an admission review's arrival to its answer, by webhook",
            webhook_duration.clone(),
        );
        let nodes_joined = Counter::default();
        registry.register(
            "nodes_joined",
            "Nodes the node watch saw appear after its first list (new nodes joining the cluster)",
            nodes_joined.clone(),
        );
        let webhook_registered = Family::<WebhookLabel, Gauge>::default();
        registry.register(
            "webhook_registered",
            "1 for each admission webhook the API server is configured to call (node, taintpolicy)",
            webhook_registered.clone(),
        );
        let node_echoes_skipped = Counter::default();
        registry.register(
            "node_echoes_skipped",
            "Node watch events that carried our own last write back, not reconciled again",
            node_echoes_skipped.clone(),
        );
        let events_dropped = Counter::default();
        registry.register(
            "events_dropped",
            "Node events not published because the event queue was full (the event budget is spent)",
            events_dropped.clone(),
        );
        let watch_restarts = Family::<WatchRestartLabels, Counter>::default();
        registry.register(
            "watch_restarts",
            "Watches that failed or listed again, by watch and cause",
            watch_restarts.clone(),
        );
        Metrics {
            registry: Arc::new(registry),
            node_echoes_skipped,
            events_dropped,
            watch_restarts,
            webhook_registered,
            draining_nodes,
            evictions,
            webhook_requests,
            webhook_duration,
            nodes_joined,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            node_writes,
            node_write_conflicts,
            node_write_duration,
            node_queue_wait,
            status_computation,
            status_writes,
            taints_added,
            taints_removed,
            tainted_nodes,
            api_requests,
            resyncs,
            resync_corrections,
            leader,
            policy_ready,
            pending_nodes,
            reported_policies: Arc::default(),
        }
    }
}

impl Metrics {
    /// Sets `taint_operator_webhook_registered` for the webhooks the API server is
    /// configured to call (`node`, `taintpolicy`; others are ignored).
    pub fn mark_registered(&self, webhooks: &[String]) {
        for webhook in webhooks {
            let webhook = match webhook.as_str() {
                "node" => "node",
                "taintpolicy" => "taintpolicy",
                _ => continue,
            };
            self.webhook_registered
                .get_or_create(&WebhookLabel { webhook })
                .set(1);
        }
    }

    /// Creates the reconcile error series of `controller` at zero, one per category,
    /// so that dashboards and the error-ratio alert read 0, not nothing, until an
    /// error happens.
    pub fn start_error_counts(&self, controller: &'static str, categories: &[&'static str]) {
        for &category in categories {
            let _ = self.reconcile_errors.get_or_create(&ErrorLabels {
                controller,
                category,
            });
        }
    }

    /// Sets the per-policy gauges from one status computation over every policy, and
    /// drops the series of policies it no longer covers (deleted ones), so a deleted
    /// policy neither stays "not ready" in alerts nor keeps its nodes counted.
    pub fn report_policies(&self, reports: &[PolicyReport]) {
        let mut reported = self
            .reported_policies
            .lock()
            .expect("reported policies lock");
        let current: BTreeSet<String> = reports.iter().map(|r| r.policy.clone()).collect();
        for gone in reported.difference(&current) {
            let label = PolicyLabel {
                policy: gone.clone(),
            };
            self.tainted_nodes.remove(&label);
            self.pending_nodes.remove(&label);
            self.draining_nodes.remove(&label);
            self.policy_ready.remove(&label);
        }
        for r in reports {
            let label = PolicyLabel {
                policy: r.policy.clone(),
            };
            self.tainted_nodes
                .get_or_create(&label)
                .set(r.tainted_nodes as i64);
            self.pending_nodes
                .get_or_create(&label)
                .set(r.pending_nodes as i64);
            self.draining_nodes
                .get_or_create(&label)
                .set(r.draining_nodes as i64);
            self.policy_ready
                .get_or_create(&label)
                .set(i64::from(r.ready));
        }
        *reported = current;
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(policy: &str, tainted: usize, pending: usize, ready: bool) -> PolicyReport {
        PolicyReport {
            policy: policy.into(),
            tainted_nodes: tainted,
            pending_nodes: pending,
            draining_nodes: 0,
            ready,
        }
    }

    /// The sample lines of the scrape that start with `name{`.
    fn samples(m: &Metrics, name: &str) -> Vec<String> {
        m.encode()
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_leader_gauge_starts_at_zero_and_says_when_this_replica_leads() {
        let m = Metrics::default();
        assert!(m.encode().contains("\ntaint_operator_leader 0\n"));
        m.leader.set(1);
        assert!(m.encode().contains("\ntaint_operator_leader 1\n"));
    }

    #[test]
    fn policy_gauges_follow_the_reports() {
        let m = Metrics::default();
        m.report_policies(&[report("a", 3, 0, true), report("b", 1, 2, false)]);
        let ready = samples(&m, "taint_operator_policy_ready");
        assert!(ready.contains(&r#"taint_operator_policy_ready{policy="a"} 1"#.into()));
        assert!(ready.contains(&r#"taint_operator_policy_ready{policy="b"} 0"#.into()));
        let pending = samples(&m, "taint_operator_pending_nodes");
        assert!(pending.contains(&r#"taint_operator_pending_nodes{policy="a"} 0"#.into()));
        assert!(pending.contains(&r#"taint_operator_pending_nodes{policy="b"} 2"#.into()));
        assert!(
            samples(&m, "taint_operator_tainted_nodes")
                .contains(&r#"taint_operator_tainted_nodes{policy="a"} 3"#.into())
        );
        // b's held-back nodes get their taints: it becomes ready.
        m.report_policies(&[report("a", 3, 0, true), report("b", 1, 0, true)]);
        assert!(
            samples(&m, "taint_operator_policy_ready")
                .contains(&r#"taint_operator_policy_ready{policy="b"} 1"#.into())
        );
        assert!(
            samples(&m, "taint_operator_pending_nodes")
                .contains(&r#"taint_operator_pending_nodes{policy="b"} 0"#.into())
        );
    }

    #[test]
    fn a_policy_left_out_of_a_report_loses_its_series() {
        let m = Metrics::default();
        m.report_policies(&[report("kept", 1, 0, true), report("gone", 2, 1, false)]);
        m.report_policies(&[report("kept", 1, 0, true)]);
        for name in [
            "taint_operator_policy_ready",
            "taint_operator_pending_nodes",
            "taint_operator_tainted_nodes",
        ] {
            let lines = samples(&m, name);
            assert_eq!(lines.len(), 1, "{name}: {lines:?}");
            assert!(lines[0].contains(r#"policy="kept""#), "{name}: {lines:?}");
        }
        // And it comes back when a policy of that name is created again.
        m.report_policies(&[report("gone", 0, 0, false)]);
        assert_eq!(
            samples(&m, "taint_operator_policy_ready"),
            vec![r#"taint_operator_policy_ready{policy="gone"} 0"#.to_string()]
        );
    }

    #[test]
    fn error_counts_start_at_zero_for_each_category() {
        let m = Metrics::default();
        m.start_error_counts("node", &["ApiError", "NotLeading"]);
        let mut lines = samples(&m, "taint_operator_reconcile_errors_total");
        lines.sort();
        assert_eq!(
            lines,
            [
                r#"taint_operator_reconcile_errors_total{controller="node",category="ApiError"} 0"#,
                r#"taint_operator_reconcile_errors_total{controller="node",category="NotLeading"} 0"#,
            ]
        );
    }
}
