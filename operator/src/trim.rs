//! What the caches keep of a Node: only what the decision core and the node writer
//! read. Images, addresses, capacity, managedFields and other annotations are dropped
//! so memory stays flat at thousands of nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use taint_operator_crd::{BOOTSTRAPPED_ANNOTATION, MANAGED_TAINTS_ANNOTATION};

pub fn trim_node(node: &mut Node) {
    let meta = &mut node.metadata;
    meta.managed_fields = None;
    meta.owner_references = None;
    // Keep the map itself even when emptied: whether it exists decides how the
    // node writer adds an annotation.
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k == MANAGED_TAINTS_ANNOTATION || k == BOOTSTRAPPED_ANNOTATION);
    }
    let taints = node.spec.as_mut().and_then(|s| s.taints.take());
    node.spec = Some(NodeSpec {
        taints,
        ..NodeSpec::default()
    });
    let conditions = node
        .status
        .as_mut()
        .and_then(|s| s.conditions.take())
        .map(|cs| {
            cs.into_iter()
                .map(|c| NodeCondition {
                    type_: c.type_,
                    status: c.status,
                    reason: c.reason,
                    last_transition_time: c.last_transition_time,
                    message: None,
                    last_heartbeat_time: None,
                })
                .collect()
        });
    node.status = Some(NodeStatus {
        conditions,
        ..NodeStatus::default()
    });
}

/// Our annotations on a (trimmed) node, for comparing against a plan.
pub fn our_annotations(node: &Node) -> BTreeMap<&str, &str> {
    node.metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| *k == MANAGED_TAINTS_ANNOTATION || *k == BOOTSTRAPPED_ANNOTATION)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}
