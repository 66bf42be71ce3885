//! Evaluation cost against the targets:
//!
//! - full evaluation of 5,000 nodes × 20 policies with 150,000 pods indexed: ≤ 20 ms
//!   on one core (`plan_cluster: ...`, from prebuilt `NodeView`s and `PodIndex`; as
//!   generated, about a quarter of the nodes have taints to add or remove, and
//!   `plan_cluster converged: ...` is the same cluster once the plan is applied);
//! - one node against 20 policies: ≤ 10 µs (`node ...`: `evaluate_node` + `plan_node`).
//!
//! For reference it also measures what building the inputs costs (`inputs/...`):
//! `NodeView`s from the 5,000 Node objects and the `PodIndex` from the 150,000 Pods.
//!
//! Every benchmark runs under two clocks: `cpu/...` is the thread's CPU time (the
//! "one core" of the target, and what to read on a shared or busy machine) and
//! `wall/...` is criterion's usual wall clock.
//!
//! The cluster is synthetic but shaped like a real one (labels, conditions, owned
//! and foreign taints, bootstrap records, DaemonSet and workload pods) and built
//! deterministically from a fixed seed, so every run measures the same input. Its
//! shape and the plan's per-policy counts are printed on stderr before the runs.
//!
//! Run: `cargo bench -p taint-operator-engine --bench evaluate` (add `-- cpu/` for one clock).

use std::{collections::BTreeMap, hint::black_box, sync::OnceLock};

use criterion::{
    Criterion, criterion_group, criterion_main,
    measurement::{Measurement, ValueFormatter, WallTime},
};
use k8s_openapi::{
    api::core::v1::{
        Container, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec,
        PodStatus, Taint,
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::{SignedDuration, Timestamp},
};
use serde_json::{Value, json};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, MANAGED_TAINTS_ANNOTATION, POD_READY_ANNOTATION, TaintPolicy,
    validate_policy,
};
use taint_operator_engine::{
    cluster::{NodeView, PodIndex},
    cluster_plan::{ClusterPlan, plan_cluster},
    decision::evaluate_node,
    labels::LabelMap,
    node_plan::{Gates, UnknownPolicies, plan_node},
    policy_set::PolicySet,
};

const NODES: usize = 5_000;
const PODS_PER_NODE: usize = 30;
const NOW: &str = "2026-11-20T12:00:00Z";

/// A 64-bit LCG (Knuth's MMIX constants); plenty for shaping test data.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn ago(seconds: i64) -> Option<Time> {
    Some(Time(now() - SignedDuration::from_secs(seconds)))
}

fn uid(policy: &str) -> String {
    format!("uid-{policy}")
}

// ---------------------------------------------------------------- policies

fn policy(name: &str, minutes: u32, spec: Value) -> TaintPolicy {
    let object = json!({
        "apiVersion": "nodetaint.io/v1alpha1",
        "kind": "TaintPolicy",
        "metadata": {
            "name": name,
            "uid": uid(name),
            "generation": 1,
            "creationTimestamp": format!("2026-10-01T09:{minutes:02}:00Z"),
        },
        "spec": spec,
    });
    // Every policy here is one the API server would accept.
    if let Err(e) = validate_policy(&object) {
        panic!("{name}: {e:?}");
    }
    serde_json::from_value(object).unwrap()
}

fn taint(key: &str, effect: &str) -> Value {
    json!({"key": key, "effect": effect})
}

fn critical(name: &str, namespace: &str, labels: Value) -> Value {
    json!({"name": name, "namespace": namespace, "selector": {"matchLabels": labels}})
}

fn policies() -> Vec<TaintPolicy> {
    let worker = json!({"matchExpressions": [
        {"key": "node-role.kubernetes.io/worker", "operator": "Exists"},
        {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
    ]});
    let node_init = || critical("node-init", "kube-system", json!({"app": "node-init"}));
    let istio = || {
        critical(
            "istio-cni",
            "istio-system",
            json!({"k8s-app": "istio-cni-node"}),
        )
    };
    let aws_node = || critical("aws-node", "kube-system", json!({"k8s-app": "aws-node"}));
    vec![
        policy(
            "spot-out-of-service",
            0,
            json!({
                "nodeSelector": {"matchLabels": {"node.kubernetes.io/lifecycle": "spot"}},
                "taints": [{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}],
                "matchers": [{"conditions": [{"type": "SpotInterruption", "status": "True", "reason": "PreemptionNotice|TerminationNotice"}]}],
            }),
        ),
        policy(
            "nic-kaput",
            1,
            json!({
                "taints": [taint("example.com/network-unavailable", "NoSchedule")],
                "matchers": [
                    {"conditions": [{"type": "NetworkInterfaceCard", "status": "Kaput|Ruined", "for": "30s"}]},
                    {"conditions": [{"type": "PrivateLink", "status": "Down", "reason": "EndpointUnreachable|EndpointTimeout"}]},
                ],
                "maxTaintedNodes": "30%",
            }),
        ),
        policy(
            "startup-init-daemonset",
            2,
            json!({
                "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
                "taints": [{"key": "startup.k8s.io/initializing", "value": "wait", "effect": "NoSchedule"}],
                "readiness": {"criticalPods": [node_init()]},
                "mode": "BootstrapOnly",
            }),
        ),
        policy(
            "istio-cni-readiness",
            3,
            json!({
                "nodeSelector": {"matchLabels": {"kubernetes.io/os": "linux"}},
                "taints": [taint("cni.istio.io/not-ready", "NoSchedule")],
                "readiness": {"criticalPods": [istio()]},
            }),
        ),
        policy(
            "cni-network-ready",
            4,
            json!({
                "nodeSelector": worker,
                "taints": [taint("readiness.k8s.io/network-unavailable", "NoSchedule")],
                "readiness": {"conditions": [{"type": "example.net/NetworkReady", "status": "True"}]},
            }),
        ),
        policy(
            "memory-pressure",
            5,
            json!({
                "taints": [taint("example.com/memory-pressure", "PreferNoSchedule")],
                "matchers": [{"conditions": [{"type": "MemoryPressure", "status": "True", "for": "1m"}]}],
            }),
        ),
        policy(
            "disk-pressure",
            6,
            json!({
                "nodeSelector": worker,
                "taints": [taint("example.com/disk-pressure", "NoSchedule")],
                "matchers": [{"conditions": [{"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure|ImageFsFull", "for": "5m"}]}],
            }),
        ),
        policy(
            "pid-pressure",
            7,
            json!({
                "taints": [taint("example.com/pid-pressure", "NoSchedule")],
                "matchers": [{"conditions": [{"type": "PIDPressure", "status": "True"}]}],
            }),
        ),
        policy(
            "kernel-deadlock",
            8,
            json!({
                "nodeSelector": {"matchLabels": {"kubernetes.io/os": "linux"}},
                "taints": [
                    taint("example.com/kernel-deadlock", "NoExecute"),
                    taint("example.com/kernel-deadlock", "NoSchedule"),
                ],
                "matchers": [{"conditions": [{"type": "KernelDeadlock", "status": "True", "reason": "KernelHasDeadlock|DockerHung|ContainerdHung"}]}],
            }),
        ),
        policy(
            "gpu-driver-ready",
            9,
            json!({
                "nodeSelector": {"matchExpressions": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g5.xlarge", "g5.2xlarge", "p4d.24xlarge"]},
                ]},
                "taints": [taint("nvidia.com/gpu-not-ready", "NoSchedule")],
                "readiness": {
                    "conditions": [{"type": "example.com/GPUDriverReady", "status": "True"}],
                    "criticalPods": [critical("nvidia-device-plugin", "kube-system", json!({"app": "nvidia-device-plugin"}))],
                },
            }),
        ),
        policy(
            "zone-a-not-ready-dry-run",
            10,
            json!({
                "nodeSelector": {"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-west-1a"]},
                ]},
                "taints": [taint("example.com/zone-a-degraded", "NoSchedule")],
                "matchers": [{"conditions": [{"type": "Ready", "status": "False|Unknown", "for": "2m"}]}],
                "dryRun": true,
            }),
        ),
        policy(
            "not-ready-long",
            11,
            json!({
                "nodeSelector": worker,
                "taints": [taint("example.com/not-ready-long", "NoExecute")],
                "matchers": [{"conditions": [{"type": "Ready", "status": "False|Unknown", "for": "10m"}]}],
            }),
        ),
        policy(
            "route-missing",
            12,
            json!({
                "taints": [taint("example.com/no-route", "NoSchedule")],
                "matchers": [{"conditions": [{"type": "NetworkUnavailable", "status": "True", "reason": "NoRouteCreated|RouteControllerFailed"}]}],
            }),
        ),
        policy(
            "arm64-cni-ready",
            13,
            json!({
                "nodeSelector": {
                    "matchLabels": {"kubernetes.io/arch": "arm64"},
                    "matchExpressions": [{"key": "example.com/pool", "operator": "NotIn", "values": ["gpu"]}],
                },
                "taints": [taint("example.com/arm64-cni-not-ready", "NoSchedule")],
                "readiness": {"criticalPods": [aws_node(), istio()]},
            }),
        ),
        policy(
            "spot-rebalance",
            14,
            json!({
                "nodeSelector": {"matchLabels": {"node.kubernetes.io/lifecycle": "spot"}},
                "taints": [taint("example.com/spot-rebalance", "PreferNoSchedule")],
                "matchers": [{"conditions": [{"type": "SpotInterruption", "status": "True", "reason": "RebalanceRecommendation"}]}],
            }),
        ),
        policy(
            "compute-pool-bootstrap",
            15,
            json!({
                "nodeSelector": {"matchLabels": {"example.com/pool": "compute", "node-role.kubernetes.io/worker": ""}},
                "taints": [{"key": "example.com/compute-bootstrap", "value": "pending", "effect": "NoSchedule"}],
                "readiness": {
                    "conditions": [{"type": "example.net/NetworkReady", "status": "True"}],
                    "criticalPods": [node_init(), aws_node()],
                },
                "mode": "BootstrapOnly",
            }),
        ),
        policy(
            "nic-and-privatelink",
            16,
            json!({
                "nodeSelector": worker,
                "taints": [taint("example.com/network-degraded", "NoExecute")],
                "matchers": [{"conditions": [
                    {"type": "NetworkInterfaceCard", "status": "Kaput|Ruined|Degraded", "for": "1m"},
                    {"type": "PrivateLink", "status": "Down|Degraded", "reason": "Endpoint.*"},
                ]}],
            }),
        ),
        policy(
            "payments-isolation",
            17,
            json!({
                "nodeSelector": {"matchLabels": {"example.com/team": "payments"}},
                "taints": [taint("example.com/payments-quarantine", "NoSchedule")],
                "matchers": [
                    {"conditions": [{"type": "example.net/NetworkReady", "status": "False|Unknown", "for": "45s"}]},
                    {"conditions": [{"type": "NetworkInterfaceCard", "status": "Ruined"}]},
                ],
            }),
        ),
        policy(
            "memory-pool-cni",
            18,
            json!({
                "nodeSelector": {"matchExpressions": [
                    {"key": "example.com/pool", "operator": "In", "values": ["memory", "general"]},
                    {"key": "node.kubernetes.io/lifecycle", "operator": "In", "values": ["on-demand"]},
                ]},
                "taints": [taint("example.com/cni-not-ready", "NoSchedule")],
                "readiness": {
                    "conditions": [{"type": "example.net/NetworkReady", "status": "True"}],
                    "criticalPods": [aws_node()],
                },
            }),
        ),
        policy(
            "frequent-unknown",
            19,
            json!({
                "nodeSelector": {"matchExpressions": [{"key": "example.com/pool", "operator": "Exists"}]},
                "taints": [taint("example.com/flapping", "PreferNoSchedule")],
                "matchers": [
                    {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown|Kubelet.*"}]},
                    {"conditions": [{"type": "NetworkInterfaceCard", "status": "Degraded", "for": "10m"}]},
                ],
            }),
        ),
    ]
}

// ---------------------------------------------------------------- nodes

struct NodeShape {
    name: String,
    worker: bool,
    gpu: bool,
}

fn condition(type_: &str, status: &str, reason: &str, since: i64) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(format!("{type_} is {status}")),
        last_heartbeat_time: ago(5),
        last_transition_time: ago(since),
    }
}

fn node(i: usize, rng: &mut Lcg) -> (Node, NodeShape) {
    let name = format!(
        "ip-10-{}-{}-{}.eu-west-1.compute.internal",
        i / 2000,
        (i / 250) % 8,
        i % 250
    );
    let control_plane = i < 3;
    let worker = !control_plane;
    let spot = worker && rng.chance(30);
    let zone = ["eu-west-1a", "eu-west-1b", "eu-west-1c"][i % 3];
    let pool = if control_plane {
        "system"
    } else {
        rng.pick(&["general", "general", "compute", "memory", "gpu"])
    };
    let instance = match pool {
        "compute" => rng.pick(&["c6i.2xlarge", "c7g.2xlarge", "c6i.4xlarge"]),
        "memory" => rng.pick(&["r6i.xlarge", "r7g.2xlarge"]),
        "gpu" => rng.pick(&["g5.xlarge", "g5.2xlarge", "p4d.24xlarge"]),
        _ => rng.pick(&["m6i.large", "m6i.xlarge", "m7g.xlarge", "m6i.2xlarge"]),
    };
    let arch = if instance.contains("7g") {
        "arm64"
    } else {
        "amd64"
    };
    let gpu = pool == "gpu";
    let lifecycle = if spot { "spot" } else { "on-demand" };

    let mut labels = BTreeMap::new();
    let mut label = |k: &str, v: &str| {
        labels.insert(k.to_string(), v.to_string());
    };
    label("kubernetes.io/hostname", &name);
    label("kubernetes.io/os", "linux");
    label("kubernetes.io/arch", arch);
    label("beta.kubernetes.io/os", "linux");
    label("beta.kubernetes.io/arch", arch);
    label("topology.kubernetes.io/region", "eu-west-1");
    label("topology.kubernetes.io/zone", zone);
    label("failure-domain.beta.kubernetes.io/zone", zone);
    label("node.kubernetes.io/instance-type", instance);
    label("node.kubernetes.io/lifecycle", lifecycle);
    label("karpenter.sh/capacity-type", lifecycle);
    label("example.com/pool", pool);
    label(
        "example.com/team",
        rng.pick(&["shop", "search", "payments", "ml", "platform"]),
    );
    label("eks.amazonaws.com/nodegroup", &format!("{pool}-{zone}"));
    if control_plane {
        label("node-role.kubernetes.io/control-plane", "");
    } else {
        label("node-role.kubernetes.io/worker", "");
    }

    // Conditions: mostly healthy, with a few percent in each interesting state.
    let mut conditions = vec![];
    let ready = if rng.chance(2) {
        if rng.chance(50) {
            condition(
                "Ready",
                "False",
                "KubeletNotReady",
                30 + rng.below(1200) as i64,
            )
        } else {
            condition(
                "Ready",
                "Unknown",
                "NodeStatusUnknown",
                30 + rng.below(1200) as i64,
            )
        }
    } else {
        condition(
            "Ready",
            "True",
            "KubeletReady",
            3600 + rng.below(86_400) as i64,
        )
    };
    conditions.push(ready);
    let pressure = |rng: &mut Lcg, t: &str, yes: &str, no: &str| {
        if rng.chance(1) {
            condition(t, "True", yes, 10 + rng.below(900) as i64)
        } else {
            condition(t, "False", no, 86_400)
        }
    };
    conditions.push(pressure(
        rng,
        "MemoryPressure",
        "KubeletHasInsufficientMemory",
        "KubeletHasSufficientMemory",
    ));
    conditions.push(pressure(
        rng,
        "DiskPressure",
        "KubeletHasDiskPressure",
        "KubeletHasNoDiskPressure",
    ));
    conditions.push(pressure(
        rng,
        "PIDPressure",
        "KubeletHasInsufficientPID",
        "KubeletHasSufficientPID",
    ));
    conditions.push(pressure(
        rng,
        "NetworkUnavailable",
        "NoRouteCreated",
        "RouteCreated",
    ));
    conditions.push(pressure(
        rng,
        "KernelDeadlock",
        "KernelHasDeadlock",
        "KernelHasNoDeadlock",
    ));
    let nic = match rng.below(100) {
        0 | 1 => "Kaput",
        2 => "Ruined",
        3 => "Degraded",
        _ => "Ok",
    };
    conditions.push(condition(
        "NetworkInterfaceCard",
        nic,
        "NICCheck",
        rng.below(1200) as i64,
    ));
    if rng.chance(2) {
        conditions.push(condition(
            "PrivateLink",
            "Down",
            rng.pick(&["EndpointUnreachable", "EndpointTimeout", "EndpointDegraded"]),
            rng.below(600) as i64,
        ));
    } else {
        conditions.push(condition("PrivateLink", "Up", "EndpointReachable", 86_400));
    }
    if rng.chance(4) {
        conditions.push(condition(
            "example.net/NetworkReady",
            "False",
            "AgentStarting",
            rng.below(300) as i64,
        ));
    } else if !rng.chance(2) {
        // The rest report True, except for a few whose agent has not reported at all.
        conditions.push(condition(
            "example.net/NetworkReady",
            "True",
            "AgentReady",
            3600,
        ));
    }
    if gpu && !rng.chance(5) {
        conditions.push(condition(
            "example.com/GPUDriverReady",
            "True",
            "DriverLoaded",
            3600,
        ));
    }
    if spot {
        let c = match rng.below(100) {
            0 | 1 => condition("SpotInterruption", "True", "PreemptionNotice", 20),
            2 => condition("SpotInterruption", "True", "RebalanceRecommendation", 60),
            _ => condition("SpotInterruption", "False", "NoInterruption", 7200),
        };
        conditions.push(c);
    }

    // Taints: the control-plane taint, an admin's taint here and there, and owned
    // taints from earlier reconciles (most still wanted, some to be removed).
    let mut taints = vec![];
    let mut managed = BTreeMap::new();
    if control_plane {
        taints.push(Taint {
            key: "node-role.kubernetes.io/control-plane".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
    }
    if rng.chance(1) {
        taints.push(Taint {
            key: "example.com/network-unavailable".into(),
            value: Some("switch-firmware-upgrade".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
    }
    let mut own =
        |taints: &mut Vec<Taint>, key: &str, value: Option<&str>, effect: &str, policy: &str| {
            taints.push(Taint {
                key: key.into(),
                value: value.map(Into::into),
                effect: effect.into(),
                time_added: (effect == "NoExecute")
                    .then(|| Time(now() - SignedDuration::from_secs(600))),
            });
            managed.insert(format!("{key}:{effect}"), policy.to_string());
        };
    if nic != "Ok" || rng.chance(1) {
        own(
            &mut taints,
            "example.com/network-unavailable",
            None,
            "NoSchedule",
            "nic-kaput",
        );
    }
    if worker && rng.chance(5) {
        own(
            &mut taints,
            "readiness.k8s.io/network-unavailable",
            None,
            "NoSchedule",
            "cni-network-ready",
        );
    }
    if rng.chance(3) {
        own(
            &mut taints,
            "cni.istio.io/not-ready",
            None,
            "NoSchedule",
            "istio-cni-readiness",
        );
    }
    if spot && rng.chance(2) {
        own(
            &mut taints,
            "node.kubernetes.io/out-of-service",
            Some("nodeshutdown"),
            "NoExecute",
            "spot-out-of-service",
        );
    }
    if rng.chance(1) {
        // A policy that no longer exists: plan leaves it alone (UnknownPolicies::Keep).
        own(
            &mut taints,
            "example.com/legacy",
            None,
            "NoSchedule",
            "legacy-policy",
        );
    }

    // Bootstrap records: most workers finished both BootstrapOnly policies long ago.
    let mut bootstrapped = BTreeMap::new();
    let fresh = worker && rng.chance(3);
    if worker && !fresh {
        for p in ["startup-init-daemonset", "compute-pool-bootstrap"] {
            if p == "startup-init-daemonset" || pool == "compute" {
                bootstrapped.insert(p.to_string(), format!("{}@2026-11-19T06:15:09Z", uid(p)));
            }
        }
    } else if fresh {
        own(
            &mut taints,
            "startup.k8s.io/initializing",
            Some("wait"),
            "NoSchedule",
            "startup-init-daemonset",
        );
    }

    let mut annotations = BTreeMap::from([
        ("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string()),
        (
            "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
            "true".to_string(),
        ),
    ]);
    if !managed.is_empty() {
        annotations.insert(
            MANAGED_TAINTS_ANNOTATION.into(),
            serde_json::to_string(&managed).unwrap(),
        );
    }
    if !bootstrapped.is_empty() {
        annotations.insert(
            BOOTSTRAPPED_ANNOTATION.into(),
            serde_json::to_string(&bootstrapped).unwrap(),
        );
    }

    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            uid: Some(format!("node-uid-{i}")),
            labels: Some(labels),
            annotations: Some(annotations),
            creation_timestamp: ago(86_400 * 3),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("aws:///{zone}/i-{:017x}", i)),
            taints: Some(taints),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(conditions),
            ..Default::default()
        }),
    };
    (node, NodeShape { name, worker, gpu })
}

// ---------------------------------------------------------------- pods

const WORKLOAD_NAMESPACES: [&str; 7] = [
    "shop",
    "payments",
    "search",
    "ml",
    "ingress",
    "monitoring",
    "logging",
];

fn pod(
    name: String,
    namespace: &str,
    node: &str,
    labels: &[(&str, &str)],
    ready: bool,
    annotated_ready: bool,
    phase: &str,
) -> Pod {
    let mut annotations = BTreeMap::from([(
        "kubectl.kubernetes.io/default-container".to_string(),
        "main".to_string(),
    )]);
    if annotated_ready {
        annotations.insert(POD_READY_ANNOTATION.into(), "true".into());
    }
    let status = |t: &str, ok: bool| PodCondition {
        type_: t.into(),
        status: if ok { "True" } else { "False" }.into(),
        last_transition_time: ago(3600),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "main".into(),
                image: Some(format!("registry.example.com/{namespace}/app:1.0")),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![
                status("PodReadyToStartContainers", true),
                status("Initialized", true),
                status("Ready", ready),
                status("ContainersReady", ready),
                status("PodScheduled", true),
            ]),
            ..Default::default()
        }),
    }
}

/// 30 pods per node: 3 that critical-pod selectors look for (node-init, istio-cni,
/// aws-node; on GPU nodes nvidia-device-plugin replaces a workload pod), 2 other
/// DaemonSet pods, and workloads spread over the other namespaces.
fn pods_of(shape: &NodeShape, n: usize, rng: &mut Lcg) -> Vec<Pod> {
    let node = shape.name.as_str();
    let mut out = Vec::with_capacity(PODS_PER_NODE);
    let suffix = |rng: &mut Lcg| format!("{:05x}", rng.next() & 0xfffff);
    // Critical DaemonSet pods are Ready on ~97% of nodes; a few are annotated ready.
    let critical =
        |rng: &mut Lcg, out: &mut Vec<Pod>, name: &str, ns: &str, labels: &[(&str, &str)]| {
            let ready = !rng.chance(3);
            let annotated = !ready && rng.chance(30);
            out.push(pod(
                format!("{name}-{}", suffix(rng)),
                ns,
                node,
                labels,
                ready,
                annotated,
                if ready { "Running" } else { "Pending" },
            ));
        };
    if shape.worker {
        critical(
            rng,
            &mut out,
            "node-init",
            "kube-system",
            &[
                ("app", "node-init"),
                ("controller-revision-hash", "6c9f8d7b5"),
            ],
        );
    } else {
        critical(
            rng,
            &mut out,
            "etcd",
            "kube-system",
            &[("component", "etcd"), ("tier", "control-plane")],
        );
    }
    critical(
        rng,
        &mut out,
        "istio-cni-node",
        "istio-system",
        &[
            ("k8s-app", "istio-cni-node"),
            ("sidecar.istio.io/inject", "false"),
        ],
    );
    critical(
        rng,
        &mut out,
        "aws-node",
        "kube-system",
        &[
            ("k8s-app", "aws-node"),
            ("app.kubernetes.io/name", "aws-node"),
        ],
    );
    if shape.gpu {
        critical(
            rng,
            &mut out,
            "nvidia-device-plugin",
            "kube-system",
            &[("app", "nvidia-device-plugin")],
        );
    }
    out.push(pod(
        format!("kube-proxy-{}", suffix(rng)),
        "kube-system",
        node,
        &[("k8s-app", "kube-proxy")],
        true,
        false,
        "Running",
    ));
    out.push(pod(
        format!("node-exporter-{}", suffix(rng)),
        "monitoring",
        node,
        &[("app.kubernetes.io/name", "node-exporter")],
        true,
        false,
        "Running",
    ));
    out.push(pod(
        format!("fluent-bit-{}", suffix(rng)),
        "logging",
        node,
        &[("app.kubernetes.io/name", "fluent-bit")],
        true,
        false,
        "Running",
    ));
    // Workloads, with a "default" namespace share and a few finished jobs.
    let apps = [
        "frontend",
        "checkout",
        "cart",
        "catalog",
        "search-api",
        "indexer",
        "trainer",
        "gateway",
        "api",
        "worker",
    ];
    while out.len() < PODS_PER_NODE {
        let ns = if rng.chance(10) {
            "default"
        } else {
            WORKLOAD_NAMESPACES[rng.below(WORKLOAD_NAMESPACES.len())]
        };
        let app = apps[(n + out.len()) % apps.len()];
        let phase = if rng.chance(2) {
            "Succeeded"
        } else {
            "Running"
        };
        let ready = phase == "Running" && !rng.chance(3);
        out.push(pod(
            format!("{app}-{:08x}-{}", rng.next() & 0xffff_ffff, suffix(rng)),
            ns,
            node,
            &[
                ("app", app),
                ("pod-template-hash", "84c6b7d9f5"),
                ("app.kubernetes.io/part-of", ns),
            ],
            ready,
            false,
            phase,
        ));
    }
    out
}

struct Fixture {
    set: PolicySet,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    /// As generated: about a quarter of the nodes have taints to add or remove.
    views: Vec<NodeView>,
    /// The same nodes after applying the plan: the steady state a resync sees.
    converged: Vec<NodeView>,
    index: PodIndex,
}

fn fixture() -> Fixture {
    let mut rng = Lcg(0x7a1d_2026_1120_1200);
    let set = PolicySet::from_resources(&policies());
    assert_eq!(set.policies.len(), 20);
    assert!(
        set.policies.iter().all(|p| p.rules.is_ok()),
        "every policy compiles"
    );
    let mut nodes = Vec::with_capacity(NODES);
    let mut pods = Vec::with_capacity(NODES * PODS_PER_NODE);
    for i in 0..NODES {
        let (node, shape) = node(i, &mut rng);
        pods.extend(pods_of(&shape, i, &mut rng));
        nodes.push(node);
    }
    let views: Vec<NodeView> = nodes.iter().map(NodeView::from_node).collect();
    let index = PodIndex::from_pods(&pods);
    let plan = plan_cluster(&set, &views, &index, now(), UnknownPolicies::Keep);
    let converged = views
        .iter()
        .zip(plan.node_plans(&views))
        .map(|(v, p)| NodeView {
            taints: p.taints.into(),
            managed: p.managed,
            bootstrapped: p.bootstrapped,
            ..v.clone()
        })
        .collect();
    Fixture {
        set,
        nodes,
        pods,
        views,
        converged,
        index,
    }
}

fn describe(f: &Fixture) {
    let plan = plan_cluster(&f.set, &f.views, &f.index, now(), UnknownPolicies::Keep);
    let changing = |plan: &ClusterPlan| {
        plan.changes
            .iter()
            .flatten()
            .filter(|n| !n.added.is_empty() || !n.removed.is_empty())
            .count()
    };
    let changed = changing(&plan);
    let steady = plan_cluster(&f.set, &f.converged, &f.index, now(), UnknownPolicies::Keep);
    assert_eq!(
        changing(&steady),
        0,
        "the converged cluster has nothing to change"
    );
    let labels: usize = f.views.iter().map(|v| v.labels.len()).sum();
    let conditions: usize = f.views.iter().map(|v| v.conditions.len()).sum();
    eprintln!(
        "fixture: {} nodes ({:.1} labels, {:.1} conditions each), {} pods, {} policies; plan changes {} nodes",
        f.nodes.len(),
        labels as f64 / f.nodes.len() as f64,
        conditions as f64 / f.nodes.len() as f64,
        f.pods.len(),
        f.set.policies.len(),
        changed,
    );
    for p in &plan.policies {
        eprintln!(
            "  {:26} selected {:5} tainted {:4} pending {:3} {}",
            p.name,
            p.selected_nodes,
            p.tainted_nodes,
            p.pending_nodes,
            p.reason.as_str()
        );
    }
}

/// Thread CPU time (`CLOCK_THREAD_CPUTIME_ID`): what "on one core" means, and what a
/// shared machine cannot inflate by running something else between the samples.
/// On other systems it falls back to the wall clock.
struct ThreadCpuTime;

#[cfg(target_os = "linux")]
fn thread_cpu_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut t = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec (64-bit time_t and long on Linux).
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }

    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns() - start
    }

    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }

    fn zero(&self) -> u64 {
        0
    }

    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        // Nanoseconds, like the wall clock: reuse its formatting.
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}

fn shared() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let f = fixture();
        describe(&f);
        f
    })
}

/// Every benchmark, under one clock: `cpu` (thread CPU time) or `wall`.
fn benches<M: Measurement + 'static>(c: &mut Criterion<M>, clock: &str) {
    let f = shared();
    let now = now();

    for (label, views) in [("", &f.views), (" converged", &f.converged)] {
        c.bench_function(
            &format!("{clock}/plan_cluster{label}: 5000 nodes x 20 policies, 150000 pods indexed"),
            |b| {
                b.iter(|| {
                    plan_cluster(
                        black_box(&f.set),
                        black_box(views),
                        black_box(&f.index),
                        now,
                        UnknownPolicies::Keep,
                    )
                })
            },
        );
    }

    // One node against the 20 policies: a steady worker (nothing to change) and a
    // worker that has taints to add and remove.
    let planned = |v: &NodeView| {
        let e = evaluate_node(&f.set, v, &f.index, now);
        plan_node(&f.set, v, &e, Gates::OPEN_CAPS, UnknownPolicies::Keep, now)
    };
    let steady = f
        .views
        .iter()
        .position(|v| {
            let p = planned(v);
            LabelMap::get(&v.labels, "example.com/pool") == Some("compute")
                && p.added.is_empty()
                && p.removed.is_empty()
        })
        .expect("a steady compute worker");
    let changing = f
        .views
        .iter()
        .position(|v| {
            let p = planned(v);
            !p.added.is_empty() && !p.removed.is_empty()
        })
        .expect("a worker with taints to add and remove");
    for (label, n) in [("steady", steady), ("changing", changing)] {
        let view = &f.views[n];
        c.bench_function(
            &format!("{clock}/node {label}: evaluate_node + plan_node, 20 policies"),
            |b| {
                b.iter(|| {
                    let e =
                        evaluate_node(black_box(&f.set), black_box(view), black_box(&f.index), now);
                    plan_node(
                        &f.set,
                        view,
                        &e,
                        Gates::OPEN_CAPS,
                        UnknownPolicies::Keep,
                        now,
                    )
                })
            },
        );
    }

    let mut inputs = c.benchmark_group(format!("{clock}/inputs"));
    inputs.sample_size(10);
    inputs.bench_function("NodeView::from_node x 5000", |b| {
        b.iter_with_large_drop(|| {
            black_box(&f.nodes)
                .iter()
                .map(NodeView::from_node)
                .collect::<Vec<_>>()
        })
    });
    inputs.bench_function("PodIndex::from_pods x 150000", |b| {
        b.iter_with_large_drop(|| PodIndex::from_pods(black_box(&f.pods)))
    });
    inputs.finish();
}

fn cpu_benches(c: &mut Criterion<ThreadCpuTime>) {
    benches(c, "cpu");
}

fn wall_benches(c: &mut Criterion) {
    benches(c, "wall");
}

criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu_benches
}
criterion_group!(wall, wall_benches);
criterion_main!(cpu, wall);
