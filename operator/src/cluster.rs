//! The slices of Nodes and Pods the decision core reads, and the pod index.
//!
//! Built once per object (by the controller's cache or by `plan`), so evaluation
//! never re-parses annotations or timestamps.

use std::{collections::HashMap, sync::Arc};

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
    /// Looked up once per node on every evaluation: foldhash rather than SipHash.
    by_node: HashMap<String, Vec<NamespacePods>, foldhash::fast::RandomState>,
    /// The namespace of every indexed pod, once, with the number of nodes that have
    /// pods in it. All nodes' entries for a namespace share its string, so a
    /// critical-pod check finds the namespace on a node by comparing pointers rather
    /// than reading a (cold) copy of the name on every node.
    namespaces: HashMap<Arc<str>, usize>,
}

/// A namespace that has indexed pods, from [`PodIndex::namespace`].
#[derive(Debug, Clone, Copy)]
pub struct Namespace<'a>(&'a Arc<str>);

/// The pods of one namespace on one node.
#[derive(Debug, Clone)]
struct NamespacePods {
    namespace: Arc<str>,
    pods: Vec<PodView>,
}

impl NamespacePods {
    fn remove(&mut self, name: &str) {
        self.pods.retain(|p| p.name != name);
    }
}

impl PodIndex {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, node: &str, pod: PodView) {
        let namespaces = self.by_node.entry(node.to_string()).or_default();
        let i = match namespaces
            .iter()
            .position(|ns| *ns.namespace == *pod.namespace)
        {
            Some(i) => i,
            None => {
                let namespace = match self.namespaces.get_key_value(&*pod.namespace) {
                    Some((namespace, _)) => namespace.clone(),
                    None => pod.namespace.clone(),
                };
                *self.namespaces.entry(namespace.clone()).or_default() += 1;
                namespaces.push(NamespacePods {
                    namespace,
                    pods: Vec::new(),
                });
                namespaces.len() - 1
            }
        };
        let ns = &mut namespaces[i];
        ns.remove(&pod.name);
        ns.pods.push(pod);
    }

    pub fn remove(&mut self, node: &str, namespace: &str, name: &str) {
        if let Some(namespaces) = self.by_node.get_mut(node) {
            for ns in namespaces.iter_mut() {
                if *ns.namespace == *namespace {
                    ns.remove(name);
                }
            }
            let interned = &mut self.namespaces;
            namespaces.retain(|ns| {
                if !ns.pods.is_empty() {
                    return true;
                }
                if let Some(nodes) = interned.get_mut(&ns.namespace) {
                    *nodes -= 1;
                    if *nodes == 0 {
                        interned.remove(&ns.namespace);
                    }
                }
                false
            });
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

    /// `namespace`, when some indexed pod is in it, for [`NodePods::checked`].
    pub fn namespace(&self, namespace: &str) -> Option<Namespace<'_>> {
        self.namespaces
            .get_key_value(namespace)
            .map(|(ns, _)| Namespace(ns))
    }
}

/// The pods of one node, by namespace.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodePods<'a>(&'a [NamespacePods]);

impl<'a> NodePods<'a> {
    /// The pods of `namespace`.
    pub fn pods(self, namespace: &str) -> &'a [PodView] {
        self.namespace(namespace)
            .map_or(&[], |ns| ns.pods.as_slice())
    }

    /// The pods of `namespace`, found by pointer. Their label sets are interned: the
    /// pods of one DaemonSet share one, which stays in the CPU cache across nodes.
    pub fn checked(self, namespace: Namespace<'_>) -> impl Iterator<Item = &'a PodView> {
        self.0
            .iter()
            .find(|ns| Arc::ptr_eq(&ns.namespace, namespace.0))
            .into_iter()
            .flat_map(|ns| ns.pods.iter())
    }

    fn namespace(self, namespace: &str) -> Option<&'a NamespacePods> {
        self.0.iter().find(|ns| *ns.namespace == *namespace)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(namespace: &str, name: &str, labels: &[(&str, &str)], ready: bool) -> PodView {
        PodView {
            name: name.into(),
            namespace: sym(namespace),
            labels: Labels::new(labels.iter().copied()),
            ready,
        }
    }

    /// What `checked` yields for `namespace` on `node`: name, ready, and each listed key's value.
    fn checked(
        index: &PodIndex,
        node: &str,
        namespace: &str,
        keys: &[&str],
    ) -> Vec<(String, bool, Vec<Option<String>>)> {
        let Some(ns) = index.namespace(namespace) else {
            return Vec::new();
        };
        index
            .node(node)
            .checked(ns)
            .map(|c| {
                let values = keys
                    .iter()
                    .map(|k| c.labels.get(k).map(String::from))
                    .collect();
                (c.name.clone(), c.ready, values)
            })
            .collect()
    }

    #[test]
    fn checked_pods_read_like_the_pod_views() {
        let mut index = PodIndex::new();
        index.insert(
            "n1",
            pod("kube-system", "a", &[("app", "x"), ("k8s-app", "y")], true),
        );
        index.insert("n1", pod("kube-system", "b", &[], false));
        index.insert(
            "n1",
            pod("istio-system", "c", &[("", ""), ("app", "")], true),
        );
        index.insert("n2", pod("kube-system", "d", &[("app", "z")], false));
        // Indexed again with other labels: replaces the first.
        index.insert("n1", pod("kube-system", "a", &[("app", "w")], false));
        let keys = ["app", "k8s-app", ""];
        let none = || vec![None, None, None];
        assert_eq!(
            checked(&index, "n1", "kube-system", &keys),
            [
                ("b".into(), false, none()),
                ("a".into(), false, vec![Some("w".into()), None, None]),
            ]
        );
        assert_eq!(
            checked(&index, "n1", "istio-system", &keys),
            [(
                "c".into(),
                true,
                vec![Some("".into()), None, Some("".into())]
            )]
        );
        let names = |pods: &[PodView]| pods.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(index.pods("n1", "kube-system")), ["b", "a"]);

        index.remove("n1", "kube-system", "b");
        assert_eq!(
            checked(&index, "n1", "kube-system", &keys),
            [("a".into(), false, vec![Some("w".into()), None, None])]
        );
        assert_eq!(
            checked(&index, "n2", "kube-system", &keys),
            [("d".into(), false, vec![Some("z".into()), None, None])]
        );
        assert!(checked(&index, "n3", "kube-system", &keys).is_empty());
    }

    #[test]
    fn a_namespace_without_pods_is_forgotten() {
        let mut index = PodIndex::new();
        index.insert("n1", pod("a", "p1", &[], true));
        index.insert("n2", pod("a", "p2", &[], true));
        index.insert("n1", pod("b", "p3", &[], true));
        index.remove("n1", "a", "p1");
        assert!(index.namespace("a").is_some(), "n2 still has a pod in a");
        index.remove("n2", "a", "p2");
        assert!(index.namespace("a").is_none());
        assert!(index.namespace("b").is_some());
        index.insert("n2", pod("a", "p4", &[("k", "v")], false));
        assert_eq!(
            checked(&index, "n2", "a", &["k"]),
            [("p4".into(), false, vec![Some("v".into())])]
        );
        assert!(index.pods("n1", "a").is_empty());
    }
}
