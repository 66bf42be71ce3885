//! What the soak's cluster is made of: node names and labels, the conditions the
//! actors flip, the policies, the pods and the foreign taints. Plain data, shared
//! by the schedule (which draws from it), the actors (which write it) and the
//! checker (which knows which taints are whose).

use serde_json::{Value, json};

/// Every object the soak creates carries this label (nodes) or lives in its namespaces.
pub const RUN_LABEL: &str = "chaos.nodetaint.io/run";
pub const POOL_LABEL: &str = "chaos.nodetaint.io/pool";
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const POOLS: [&str; 3] = ["general", "gpu", "spot"];
pub const ZONES: [&str; 3] = ["a", "b", "c"];
pub const SYSTEM_NS: &str = "chaos-system";
pub const APPS_NS: &str = "chaos-apps";
pub const CNI_APP: &str = "chaos-cni";
/// Replicas of each workload, and how many its budget keeps available.
pub const APP_REPLICAS: usize = 5;
pub const APP_MIN_AVAILABLE: usize = 4;
/// The field manager of the foreign taints' writer: an admin's tool, not the operator.
pub const FOREIGN_MANAGER: &str = "chaos-admin-tool";
/// The field manager of the actors' other writes.
pub const ACTOR_MANAGER: &str = "chaos-actor";

pub fn node_name(index: usize) -> String {
    format!("chaos-{index:05}")
}

/// A node's pool and zone from its index, for the initial fleet.
pub fn initial_labels(index: usize) -> (&'static str, &'static str) {
    (POOLS[index % POOLS.len()], ZONES[(index / 3) % ZONES.len()])
}

/// The node conditions the actors flip, with the statuses each may take. The
/// first status is the healthy one every node starts with.
pub const CONDITIONS: [(&str, &[&str]); 6] = [
    ("NetworkInterfaceCard", &["OK", "Kaput", "Ruined"]),
    ("Disk", &["OK", "Failing"]),
    ("Preempted", &["False", "True"]),
    ("NetReady", &["True", "False"]),
    ("Memory", &["OK", "Low"]),
    ("Cpu", &["OK", "Hot"]),
];

/// A taint someone other than the operator puts on nodes. Some share a key with a
/// policy's taint under another effect: the operator must leave those alone too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ForeignTaint {
    pub key: &'static str,
    pub value: Option<&'static str>,
    pub effect: &'static str,
}

pub const FOREIGN_TAINTS: [ForeignTaint; 4] = [
    ForeignTaint {
        key: "foreign.example.com/maintenance",
        value: Some("planned"),
        effect: "NoSchedule",
    },
    ForeignTaint {
        key: "chaos.nodetaint.io/nic",
        value: None,
        effect: "PreferNoSchedule",
    },
    ForeignTaint {
        key: "readiness.k8s.io/chaos-cni",
        value: Some("admin"),
        effect: "NoExecute",
    },
    ForeignTaint {
        key: "chaos.nodetaint.io/disk",
        value: Some("foreign"),
        effect: "NoExecute",
    },
];

/// Policies that live the whole run (their suspend and dryRun flags toggle).
pub const SUSPEND_TOGGLED: &str = "chaos-cpu-suspend";
pub const DRY_RUN_TOGGLED: &str = "chaos-mem-dry";
pub const EVICTING: &str = "chaos-spot-evict";
pub const EVICT_KEY: &str = "chaos.nodetaint.io/out-of-service";
pub const DRAIN_TIMEOUT_S: i64 = 30;
/// Policies created, edited and deleted during the run.
pub const CHURN_PREFIX: &str = "chaos-churn-";
pub const CHURN_SLOTS: usize = 3;

fn run_selector() -> Value {
    json!({"matchLabels": {RUN_LABEL: "1"}})
}

fn pools_selector(pools: &[&str]) -> Value {
    json!({"matchLabels": {RUN_LABEL: "1"},
           "matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": pools}]})
}

/// The cap of the capped policy: a few percent of the fleet.
pub fn disk_cap(nodes: usize) -> usize {
    (nodes / 30).max(3)
}

/// The long-lived policies, as TaintPolicy objects.
pub fn fixed_policies(nodes: usize) -> Vec<Value> {
    let policy = |name: &str, spec: Value| {
        json!({"apiVersion": "nodetaint.io/v1alpha1", "kind": "TaintPolicy",
               "metadata": {"name": name, "labels": {RUN_LABEL: "1"}}, "spec": spec})
    };
    vec![
        policy(
            "chaos-nic-kaput",
            json!({
                "nodeSelector": pools_selector(&["general", "gpu"]),
                "taints": [{"key": "chaos.nodetaint.io/nic", "effect": "NoSchedule"}],
                "matchers": [{"conditions": [{"type": "NetworkInterfaceCard", "status": "Kaput|Ruined"}]}],
            }),
        ),
        policy(
            "chaos-nic-long",
            json!({
                "nodeSelector": run_selector(),
                "taints": [{"key": "chaos.nodetaint.io/nic-long", "value": "slow", "effect": "NoSchedule"}],
                "matchers": [{"conditions": [{"type": "NetworkInterfaceCard", "status": "Kaput", "for": "8s"}]}],
            }),
        ),
        policy(
            "chaos-disk-capped",
            json!({
                "nodeSelector": run_selector(),
                "taints": [{"key": "chaos.nodetaint.io/disk", "effect": "NoSchedule"}],
                "matchers": [{"conditions": [{"type": "Disk", "status": "Failing"}]}],
                "maxTaintedNodes": disk_cap(nodes),
            }),
        ),
        policy(
            EVICTING,
            json!({
                "nodeSelector": pools_selector(&["spot"]),
                "taints": [{"key": EVICT_KEY, "value": "nodeshutdown", "effect": "NoExecute"}],
                "matchers": [{"conditions": [{"type": "Preempted", "status": "True"}]}],
                "eviction": {"respectDisruptionBudgets": true, "drainTimeout": format!("{DRAIN_TIMEOUT_S}s"),
                             "nodesPerMinute": 120},
            }),
        ),
        policy(
            "chaos-cni-ready",
            json!({
                "nodeSelector": run_selector(),
                "taints": [{"key": "readiness.k8s.io/chaos-cni", "effect": "NoSchedule"}],
                "readiness": {"criticalPods": [{"name": "cni", "namespace": SYSTEM_NS,
                                                "selector": {"matchLabels": {"app": CNI_APP}}}]},
            }),
        ),
        policy(
            "chaos-net-bootstrap",
            json!({
                "nodeSelector": pools_selector(&["gpu"]),
                "mode": "BootstrapOnly",
                "taints": [{"key": "startup-taint.cluster-autoscaler.kubernetes.io/chaos-net", "effect": "NoSchedule"}],
                "readiness": {"conditions": [{"type": "NetReady", "status": "True"}]},
            }),
        ),
        policy(
            DRY_RUN_TOGGLED,
            json!({
                "nodeSelector": run_selector(),
                "taints": [{"key": "chaos.nodetaint.io/mem", "effect": "NoSchedule"}],
                "matchers": [{"conditions": [{"type": "Memory", "status": "Low"}]}],
            }),
        ),
        policy(
            SUSPEND_TOGGLED,
            json!({
                "nodeSelector": run_selector(),
                "taints": [{"key": "chaos.nodetaint.io/cpu", "effect": "PreferNoSchedule"}],
                "matchers": [{"conditions": [{"type": "Cpu", "status": "Hot"}]}],
            }),
        ),
    ]
}

/// A churned policy at one of its versions: the version moves its taint's value
/// and its `for` window, so an edit moves nodes from the old taint to the new one.
pub fn churn_policy(name: &str, version: u32) -> Value {
    let slot = name.trim_start_matches(CHURN_PREFIX);
    json!({"apiVersion": "nodetaint.io/v1alpha1", "kind": "TaintPolicy",
    "metadata": {"name": name, "labels": {RUN_LABEL: "1"}},
    "spec": {
        "nodeSelector": run_selector(),
        "taints": [{"key": format!("chaos.nodetaint.io/churn-{slot}"), "value": format!("v{version}"),
                    "effect": "NoSchedule"}],
        "matchers": [
            {"conditions": [{"type": "Disk", "status": "Failing", "for": format!("{}s", version % 4)}]},
            {"conditions": [{"type": "NetworkInterfaceCard", "status": "Ruined"}]},
        ],
    }})
}
