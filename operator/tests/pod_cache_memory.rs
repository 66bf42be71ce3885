//! Heap bytes the critical-pod cache holds per pod, at the scale test's size:
//! 15,000 DaemonSet pods (3 label sets, one namespace) over 5,000 nodes, each
//! reported by the one watch that selects its DaemonSet.
//!
//! Memory, not time: the count is deterministic, so it can fail on a bound. Every
//! allocation goes through the counting allocator (`common/counting_allocator.rs`);
//! the figure is what is still allocated after the pods were cached minus what was
//! before (the `Pod` objects themselves are built first and not counted).
//!
//! Run: `cargo test -p taint-operator --test pod_cache_memory -- --nocapture`.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;
use taint_operator::cache::pod_cache::PodCache;

#[path = "common/counting_allocator.rs"]
mod counting_allocator;

const NODES: usize = 5_000;
const NAMESPACE: &str = "kube-system";

/// The DaemonSets whose pods run on every node, and their labels (as in the
/// `evaluate` bench).
const DAEMONSETS: [(&str, &[(&str, &str)]); 3] = [
    (
        "node-init",
        &[
            ("app", "node-init"),
            ("controller-revision-hash", "6c9f8d7b5"),
        ],
    ),
    (
        "aws-node",
        &[
            ("k8s-app", "aws-node"),
            ("app.kubernetes.io/name", "aws-node"),
        ],
    ),
    ("kube-proxy", &[("k8s-app", "kube-proxy")]),
];

/// Fails the test above this: what the cache takes now (179), with a little room.
/// It took 462 while entries owned their keys and node names and the index its
/// own copy of each pod's name.
const MAX_BYTES_PER_POD: f64 = 190.0;

/// A DaemonSet pod on `node`, from the testkit's pod builder.
fn pod(name: String, node: &str, labels: &[(&str, &str)], ready: bool) -> Pod {
    let mut b = taint_operator_testkit::pod(NAMESPACE, &name).on(node);
    for (k, v) in labels {
        b = b.label(k, v);
    }
    if ready { b.ready() } else { b.not_ready() }.build()
}

/// The pods with the id of the watch that reports each, in the order a list
/// returns them (by name).
fn pods() -> Vec<(u64, Pod)> {
    // A 64-bit LCG for the name suffixes: the same pods on every run. Five of the
    // characters Kubernetes picks generated names from, drawn again on a clash.
    let mut state: u64 = 0x7a1d_2026_1120_1200;
    let mut taken = HashSet::new();
    let mut name = |daemonset: &str| loop {
        let mut name = format!("{daemonset}-");
        for _ in 0..5 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
            name.push(alphabet[(state >> 33) as usize % alphabet.len()] as char);
        }
        if taken.insert(name.clone()) {
            return name;
        }
    };
    let mut pods = Vec::with_capacity(NODES * DAEMONSETS.len());
    for i in 0..NODES {
        let node = format!(
            "ip-10-{}-{}-{}.eu-west-1.compute.internal",
            i / 2000,
            (i / 250) % 8,
            i % 250
        );
        for (watch, (daemonset, labels)) in DAEMONSETS.iter().enumerate() {
            let name = name(daemonset);
            pods.push((watch as u64 + 1, pod(name, &node, labels, i % 33 != 0)));
        }
    }
    pods.sort_by(|a, b| a.1.metadata.name.cmp(&b.1.metadata.name));
    pods
}

fn main() {
    let pods = pods();
    let before = counting_allocator::live();
    let mut cache = PodCache::default();
    for (watch, pod) in &pods {
        cache.upsert(*watch, pod);
    }
    let bytes = counting_allocator::live() - before;
    let per_pod = bytes as f64 / pods.len() as f64;
    println!(
        "pod cache: {} pods on {NODES} nodes hold {bytes} heap bytes, {per_pod:.0} per pod",
        cache.len()
    );
    assert_eq!(cache.len(), pods.len());
    assert!(
        per_pod <= MAX_BYTES_PER_POD,
        "{per_pod:.0} bytes per pod, more than {MAX_BYTES_PER_POD}"
    );
}
