//! Heap bytes the node cache holds per node, at the scale test's size: 5,000 nodes
//! as `scale` makes them (ten labels, one of them the node's own name, seven
//! conditions, three foreign annotations, forty images), each carrying the three
//! taints the benchmark's policies keep on every node and the operator's
//! ownership annotation for them.
//!
//! Memory, not time: the count is deterministic, so it can fail on a bound. Every
//! allocation goes through the counting allocator (`common/counting_allocator.rs`);
//! the figure is what is still allocated once the nodes are decoded from their
//! JSON and stored in the operator's node store, minus what was before (the JSON
//! texts are built first and not counted).
//!
//! Run: `cargo test -p taint-operator --test node_cache_memory -- --nocapture`.

use serde_json::json;
use taint_operator::cache::{
    node_cache::{CachedNode, WatchedNode},
    node_store::NodeStore,
};
use taint_operator_crd::{BOOTSTRAPPED_ANNOTATION, MANAGED_TAINTS_ANNOTATION};

#[path = "common/counting_allocator.rs"]
mod counting_allocator;

const NODES: usize = 5_000;

/// Fails the test above this: what a node takes now (838, of which 16 the record
/// of its last plan's inputs), with a little room.
/// It took 920 while the node's whole label set and its name were interned
/// before the split (kept by the interners until their next sweep), 1,181 while
/// each node's label set held its hostname (so no two nodes shared one), 1,570 in kube's reflector store (an `ObjectMeta` in every node, and
/// that store's key, an `ObjectRef` with its own copies of the name, uid and
/// resourceVersion, not even counted here), 1,975 while each node had its own copy
/// of its taint list, and 3,026 while each node had its own map of owned taints
/// and its own copies of the operator's annotations, and kept condition times in
/// 24 bytes.
const MAX_BYTES_PER_NODE: f64 = 900.0;

/// Node `i` as the API server sends it.
fn node_json(i: usize) -> Vec<u8> {
    let name = format!("scale-{i:05}");
    let t = "2026-01-01T00:00:00Z";
    let condition = |type_: &str, status: &str, reason: &str| {
        json!({"type": type_, "status": status, "reason": reason,
               "message": format!("{type_} is {status}"),
               "lastHeartbeatTime": t, "lastTransitionTime": t})
    };
    let images: Vec<_> = (0..40)
        .map(|k| {
            let repo = format!("registry.example.com/team-{}/service-{k}", k % 7);
            json!({"names": [format!("{repo}@sha256:{:064x}", i * 40 + k), format!("{repo}:v1.{}", k % 13)],
                   "sizeBytes": 20_000_000 + k * 1000})
        })
        .collect();
    let managed = json!({
        "bench.io/always:PreferNoSchedule": "bench-always",
        "bench.io/bootstrap:NoExecute": "bench-bootstrap",
        "bench.io/not-ready:NoSchedule": "bench-ready",
    });
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "uid": format!("6f1c2d3e-4b5a-4c6d-8e7f-{i:012x}"),
            "resourceVersion": format!("{}", 1_000_000 + i * 7),
            "creationTimestamp": t,
            "labels": {
                "bench.io/scale": "true",
                "bench.io/group": format!("g{}", i % 4),
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m5.2xlarge",
                "topology.kubernetes.io/region": "bench-1",
                "topology.kubernetes.io/zone": format!("bench-1{}", ["a", "b", "c"][i % 3]),
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": format!("{{\"ebs.csi.aws.com\":\"i-{i:017x}\"}}"),
                MANAGED_TAINTS_ANNOTATION: managed.to_string(),
                BOOTSTRAPPED_ANNOTATION: "{}",
            },
        },
        "spec": {
            "providerID": format!("aws:///bench-1a/i-{i:017x}"),
            "taints": [
                {"key": "bench.io/not-ready", "effect": "NoSchedule"},
                {"key": "bench.io/bootstrap", "value": "initializing", "effect": "NoExecute", "timeAdded": t},
                {"key": "bench.io/always", "value": "yes", "effect": "PreferNoSchedule"},
            ],
        },
        "status": {
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                condition("Ready", "True", "KubeletReady"),
                condition("NetworkUnavailable", "False", "RouteCreated"),
                condition("BenchFault", "False", "BenchHealthy"),
                condition("BaselineFault", "False", "BaselineHealthy"),
            ],
            "addresses": [{"type": "InternalIP", "address": format!("10.20.{}.{}", i / 256, i % 256)}],
            "capacity": {"cpu": "8", "memory": "32817164Ki", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.36.2", "osImage": "Bench Linux"},
            "images": images,
        },
    }))
    .expect("a node serializes")
}

fn main() {
    let texts: Vec<Vec<u8>> = (0..NODES).map(node_json).collect();
    let before = counting_allocator::live();
    let cache = NodeStore::default();
    // As the node watch fills the cache: a list, node by node, then one node changed
    // by a watch event.
    for text in &texts {
        let node: WatchedNode = serde_json::from_slice(text).expect("a node decodes");
        cache.apply(node.node);
    }
    cache.shrink_to_fit();
    let changed: WatchedNode = serde_json::from_slice(&texts[7]).expect("a node decodes");
    cache.apply(changed.node);
    let bytes = counting_allocator::live() - before;
    let per_node = bytes as f64 / NODES as f64;
    println!(
        "node cache: {} nodes hold {bytes} heap bytes, {per_node:.0} per node ({} bytes in the node itself)",
        cache.len(),
        std::mem::size_of::<CachedNode>()
    );
    println!(
        "sizes: NodeView {}, NodeCondition {}, Taint {}, ObjectMeta {}",
        std::mem::size_of::<engine::cluster::NodeView>(),
        std::mem::size_of::<engine::cluster::NodeCondition>(),
        std::mem::size_of::<k8s_openapi::api::core::v1::Taint>(),
        std::mem::size_of::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(),
    );
    let sample = cache.get("scale-00007").expect("a cached node");
    assert_eq!(sample.taints().len(), 3);
    assert_eq!(
        sample.view.managed.owner("bench.io/bootstrap:NoExecute"),
        Some("bench-bootstrap")
    );
    assert!(
        per_node <= MAX_BYTES_PER_NODE,
        "{per_node:.0} bytes per node, more than {MAX_BYTES_PER_NODE}"
    );
}
