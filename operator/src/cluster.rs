//! The slices of Nodes and Pods the decision core reads, and the pod index.
//!
//! Built once per object (by the controller's cache or by `plan`), so evaluation
//! never re-parses annotations or timestamps.

use std::collections::HashMap;

use k8s_openapi::{
    api::core::v1::{Node, Pod, Taint},
    jiff::Timestamp,
};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, MANAGED_TAINTS_ANNOTATION, POD_READY_ANNOTATION,
};

use crate::{
    labels::{Labels, Sym, sym},
    ownership::{Bootstrapped, ManagedTaints},
};

/// Type, status and reason are interned: every node has the same few.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeCondition {
    pub type_: Sym,
    pub status: Sym,
    pub reason: Sym,
    pub last_transition: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeView {
    pub name: String,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    pub conditions: Vec<NodeCondition>,
    pub managed: ManagedTaints,
    pub bootstrapped: Bootstrapped,
}

impl NodeView {
    pub fn from_node(node: &Node) -> Self {
        let annotations = node.metadata.annotations.as_ref();
        let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
        NodeView {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: Labels::from_map(node.metadata.labels.as_ref()),
            taints: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default(),
            conditions: node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .map(|cs| {
                    cs.iter()
                        .map(|c| NodeCondition {
                            type_: sym(&c.type_),
                            status: sym(&c.status),
                            reason: sym(c.reason.as_deref().unwrap_or_default()),
                            last_transition: c.last_transition_time.as_ref().map(|t| t.0),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            managed: ManagedTaints::parse(annotation(MANAGED_TAINTS_ANNOTATION)),
            bootstrapped: Bootstrapped::parse(annotation(BOOTSTRAPPED_ANNOTATION)),
        }
    }

    pub fn condition(&self, type_: &str) -> Option<&NodeCondition> {
        self.conditions.iter().find(|c| &*c.type_ == type_)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    pub name: String,
    pub namespace: Sym,
    pub labels: Labels,
    pub ready: bool,
}

impl PodView {
    /// Ready means the `Ready` condition is True, or the pod says so itself early
    /// with `nodetaint.io/ready: "true"`.
    pub fn from_pod(pod: &Pod) -> Self {
        let condition_ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let annotated_ready = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POD_READY_ANNOTATION))
            .is_some_and(|v| v == "true");
        PodView {
            name: pod.metadata.name.clone().unwrap_or_default(),
            namespace: sym(pod.metadata.namespace.as_deref().unwrap_or_default()),
            labels: Labels::from_map(pod.metadata.labels.as_ref()),
            ready: condition_ready || annotated_ready,
        }
    }
}

/// Pods grouped by node, then by namespace, so a critical-pod check touches only
/// the few pods of one namespace on one node.
#[derive(Debug, Default, Clone)]
pub struct PodIndex {
    by_node: HashMap<String, Vec<(Sym, Vec<PodView>)>>,
}

impl PodIndex {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, node: &str, pod: PodView) {
        let namespaces = self.by_node.entry(node.to_string()).or_default();
        match namespaces.iter_mut().find(|(ns, _)| *ns == pod.namespace) {
            Some((_, pods)) => {
                pods.retain(|p| p.name != pod.name);
                pods.push(pod);
            }
            None => namespaces.push((pod.namespace.clone(), vec![pod])),
        }
    }

    pub fn remove(&mut self, node: &str, namespace: &str, name: &str) {
        if let Some(namespaces) = self.by_node.get_mut(node) {
            for (ns, pods) in namespaces.iter_mut() {
                if &**ns == namespace {
                    pods.retain(|p| p.name != name);
                }
            }
            namespaces.retain(|(_, pods)| !pods.is_empty());
            if namespaces.is_empty() {
                self.by_node.remove(node);
            }
        }
    }

    /// Indexes pods that are bound to a node (`spec.nodeName`) and not finished.
    pub fn from_pods<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Self {
        let mut index = PodIndex::new();
        for pod in pods {
            if let Some(node) = bound_node(pod) {
                index.insert(node, PodView::from_pod(pod));
            }
        }
        index
    }

    /// The pods of `namespace` on `node`.
    pub fn pods(&self, node: &str, namespace: &str) -> &[PodView] {
        self.node(node).pods(namespace)
    }

    /// The pods on `node`, for several look-ups by namespace.
    pub fn node(&self, node: &str) -> NodePods<'_> {
        NodePods(self.by_node.get(node).map_or(&[], Vec::as_slice))
    }
}

/// The pods of one node, by namespace.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodePods<'a>(&'a [(Sym, Vec<PodView>)]);

impl<'a> NodePods<'a> {
    /// The pods of `namespace`.
    pub fn pods(self, namespace: &str) -> &'a [PodView] {
        self.0
            .iter()
            .find(|(ns, _)| &**ns == namespace)
            .map_or(&[], |(_, pods)| pods.as_slice())
    }
}

/// The node a pod runs on, unless it has finished (a Succeeded or Failed pod never counts).
pub fn bound_node(pod: &Pod) -> Option<&str> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}
