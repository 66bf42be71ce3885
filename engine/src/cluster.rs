//! The slices of Nodes and Pods the decision core reads, and the pod index.
//!
//! Built once per object (by the controller's cache or by `plan`), so evaluation
//! never re-parses annotations or timestamps.

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
};

use k8s_openapi::{
    api::core::v1::{Node, Pod},
    jiff::Timestamp,
};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, DRAIN_STARTED_ANNOTATION, MANAGED_TAINTS_ANNOTATION,
    POD_READY_ANNOTATION,
};

use crate::{
    labels::{Labels, NodeLabels, Sym, sym},
    ownership::{Bootstrapped, DrainStarts, ManagedTaints},
    taints::NodeTaints,
    thin_str::ThinStr,
};

/// Type, status and reason are interned: every node has the same few.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeCondition {
    pub type_: Sym,
    pub status: Sym,
    pub reason: Sym,
    pub last_transition: Seconds,
    /// When its reporter last confirmed it; read by `staleAfter`.
    pub last_heartbeat: Seconds,
}

/// A condition's time, if it has one, in 8 bytes (jiff's `Option<Timestamp>` takes
/// 24, and a node carries two per condition). The API sends these times to the
/// second, so the second is all that is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(i64);

impl Seconds {
    const NONE: i64 = i64::MIN;

    pub fn new(time: Option<Timestamp>) -> Self {
        Seconds(time.map_or(Self::NONE, |t| t.as_second()))
    }

    pub fn get(self) -> Option<Timestamp> {
        (self.0 != Self::NONE)
            .then(|| Timestamp::from_second(self.0).expect("a second of a valid timestamp"))
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeView {
    pub name: String,
    pub labels: NodeLabels,
    pub taints: NodeTaints,
    pub conditions: Vec<NodeCondition>,
    pub managed: ManagedTaints,
    pub bootstrapped: Bootstrapped,
    pub drains: DrainStarts,
}

impl NodeView {
    pub fn from_node(node: &Node) -> Self {
        let annotations = node.metadata.annotations.as_ref();
        let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
        let name = node.metadata.name.clone().unwrap_or_default();
        NodeView {
            labels: NodeLabels::from_map(node.metadata.labels.as_ref(), &name),
            name,
            taints: NodeTaints::new(
                node.spec
                    .as_ref()
                    .and_then(|s| s.taints.clone())
                    .unwrap_or_default(),
            ),
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
                            last_transition: Seconds::new(
                                c.last_transition_time.as_ref().map(|t| t.0),
                            ),
                            last_heartbeat: Seconds::new(
                                c.last_heartbeat_time.as_ref().map(|t| t.0),
                            ),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            managed: ManagedTaints::parse(annotation(MANAGED_TAINTS_ANNOTATION)),
            bootstrapped: Bootstrapped::parse(annotation(BOOTSTRAPPED_ANNOTATION)),
            drains: DrainStarts::parse(annotation(DRAIN_STARTED_ANNOTATION)),
        }
    }

    pub fn condition(&self, type_: &str) -> Option<&NodeCondition> {
        self.conditions.iter().find(|c| &*c.type_ == type_)
    }

    /// The kubelet reports the node Ready: it runs.
    pub fn reports_ready(&self) -> bool {
        self.condition("Ready")
            .is_some_and(|c| &*c.status == "True")
    }
}

/// A critical pod as the index holds it, 32 bytes: one is kept per watched pod.
/// Its namespace is the group the index files it under, and its name is the one
/// copy the pod cache's key shares.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    pub name: ThinStr,
    pub labels: Labels,
    pub ready: bool,
}

impl PodView {
    /// Ready means the `Ready` condition is True, or the pod says so itself early
    /// with `nodetaint.io/ready: "true"`; never while it is terminating. A pod being
    /// deleted still reports Ready through its shutdown (a CNI agent's can take
    /// 30 s), and the node must not look ready to new pods meanwhile.
    pub fn from_pod(pod: &Pod) -> Self {
        Self::named(pod.metadata.name.as_deref().unwrap_or_default().into(), pod)
    }

    /// [`PodView::from_pod`] under `name`, a copy of the pod's name that another
    /// holder shares.
    pub fn named(name: ThinStr, pod: &Pod) -> Self {
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
            name,
            labels: Labels::from_map(pod.metadata.labels.as_ref()),
            ready: (condition_ready || annotated_ready)
                && pod.metadata.deletion_timestamp.is_none(),
        }
    }
}

/// Pods grouped by node, then by namespace, so a critical-pod check touches only
/// the few pods of one namespace on one node.
///
/// A node's namespaces and a namespace's pods are boxed slices, exactly as long as
/// they need to be: a node holds a few critical pods in a namespace or two, and at
/// 5,000 nodes the spare room vectors grow and their capacity words added up.
/// They change only when a pod comes or goes, one reallocation each.
#[derive(Debug, Default, Clone)]
pub struct PodIndex {
    /// Looked up once per node on every evaluation: foldhash rather than SipHash.
    /// The key is the one copy of the node's name: the pod cache's entries share it
    /// (see [`PodIndex::insert`]).
    by_node: HashMap<ThinStr, NodeEntry, foldhash::fast::RandomState>,
    /// The namespace of every indexed pod, once, with the number of nodes that have
    /// pods in it. All nodes' entries for a namespace share its string, so a
    /// critical-pod check finds the namespace on a node by comparing pointers rather
    /// than reading a (cold) copy of the name on every node.
    namespaces: HashMap<ThinStr, usize>,
}

/// A namespace that has indexed pods, from [`PodIndex::namespace`].
#[derive(Debug, Clone, Copy)]
pub struct Namespace<'a>(&'a ThinStr);

/// A node's pods, and the stamp of their last change.
#[derive(Debug, Clone, Default)]
struct NodeEntry {
    changed: u64,
    namespaces: Box<[NamespacePods]>,
}

/// Stamps of pod changes, from one counter for every index in the process: a stamp
/// is never given out twice, so an equal stamp means the very same pods.
static CHANGES: AtomicU64 = AtomicU64::new(1);

fn next_change() -> u64 {
    CHANGES.fetch_add(1, Ordering::Relaxed)
}

/// The pods of one namespace on one node.
#[derive(Debug, Clone)]
struct NamespacePods {
    namespace: ThinStr,
    pods: Box<[PodView]>,
}

impl PodIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Files `pod` under `namespace` on `node`, in place of a pod of the same name.
    /// Returns the index's copy of the node's name, so that whoever remembers where
    /// the pod is (the pod cache, for each of its pods) needs no copy of its own.
    pub fn insert(&mut self, node: &str, namespace: &str, pod: PodView) -> ThinStr {
        let node = match self.by_node.get_key_value(node) {
            Some((shared, _)) => shared.clone(),
            None => ThinStr::from(node),
        };
        let entry = self.by_node.entry(node.clone()).or_default();
        entry.changed = next_change();
        let namespaces = &mut entry.namespaces;
        let i = match namespaces.iter().position(|ns| *ns.namespace == *namespace) {
            Some(i) => i,
            None => {
                let namespace = match self.namespaces.get_key_value(namespace) {
                    Some((namespace, _)) => namespace.clone(),
                    None => ThinStr::from(namespace),
                };
                *self.namespaces.entry(namespace.clone()).or_default() += 1;
                push(
                    namespaces,
                    NamespacePods {
                        namespace,
                        pods: Box::default(),
                    },
                );
                namespaces.len() - 1
            }
        };
        let pods = &mut namespaces[i].pods;
        // The pod goes last either way, as if removed and added again.
        match pods.iter().position(|p| p.name == pod.name) {
            Some(at) => {
                pods[at..].rotate_left(1);
                *pods.last_mut().expect("the pod is there") = pod;
            }
            None => push(pods, pod),
        }
        node
    }

    pub fn remove(&mut self, node: &str, namespace: &str, name: &str) {
        let Some(entry) = self.by_node.get_mut(node) else {
            return;
        };
        entry.changed = next_change();
        let namespaces = &mut entry.namespaces;
        for ns in namespaces.iter_mut() {
            if *ns.namespace == *namespace {
                retain(&mut ns.pods, |p| *p.name != *name);
            }
        }
        let interned = &mut self.namespaces;
        retain(namespaces, |ns| {
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

    /// Indexes pods that are bound to a node (`spec.nodeName`) and not finished.
    pub fn from_pods<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Self {
        let mut index = PodIndex::new();
        for pod in pods {
            if let Some(node) = bound_node(pod) {
                let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
                index.insert(node, namespace, PodView::from_pod(pod));
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
        NodePods(
            self.by_node
                .get(node)
                .map_or(&[], |entry| &*entry.namespaces),
        )
    }

    /// A stamp of `node`'s pods: it differs whenever a pod was filed or removed
    /// there since it was read (0 for a node without pods). What a node's
    /// evaluation read of the index is the same while its stamp is.
    pub fn changed(&self, node: &str) -> u64 {
        self.by_node.get(node).map_or(0, |entry| entry.changed)
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
        self.namespace(namespace).map_or(&[], |ns| &*ns.pods)
    }

    /// The pods of `namespace`, found by pointer. Their label sets are interned: the
    /// pods of one DaemonSet share one, which stays in the CPU cache across nodes.
    pub fn checked(self, namespace: Namespace<'_>) -> impl Iterator<Item = &'a PodView> {
        self.0
            .iter()
            .find(|ns| ThinStr::ptr_eq(&ns.namespace, namespace.0))
            .into_iter()
            .flat_map(|ns| ns.pods.iter())
    }

    fn namespace(self, namespace: &str) -> Option<&'a NamespacePods> {
        self.0.iter().find(|ns| *ns.namespace == *namespace)
    }
}

/// `items` with `item` appended, in a slice one longer.
fn push<T>(items: &mut Box<[T]>, item: T) {
    let mut v = std::mem::take(items).into_vec();
    v.reserve_exact(1);
    v.push(item);
    *items = v.into_boxed_slice();
}

/// `items` without those `keep` refuses, in a slice as much shorter.
fn retain<T>(items: &mut Box<[T]>, keep: impl FnMut(&T) -> bool) {
    let mut v = std::mem::take(items).into_vec();
    v.retain(keep);
    *items = v.into_boxed_slice();
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

    #[test]
    fn condition_times_keep_their_second_and_their_absence() {
        let t: Timestamp = "2026-11-20T12:00:07Z".parse().unwrap();
        assert_eq!(Seconds::new(Some(t)).get(), Some(t));
        assert_eq!(Seconds::new(None).get(), None);
        let before_1970: Timestamp = "1969-12-31T23:59:59Z".parse().unwrap();
        assert_eq!(Seconds::new(Some(before_1970)).get(), Some(before_1970));
        assert_eq!(std::mem::size_of::<Seconds>(), 8);
    }

    fn pod(name: &str, labels: &[(&str, &str)], ready: bool) -> PodView {
        PodView {
            name: name.into(),
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
                (c.name.to_string(), c.ready, values)
            })
            .collect()
    }

    #[test]
    fn a_pod_view_is_four_words() {
        // One per watched pod: 15,000 at 5,000 nodes.
        assert_eq!(size_of::<PodView>(), 4 * size_of::<usize>());
    }

    #[test]
    fn checked_pods_read_like_the_pod_views() {
        let mut index = PodIndex::new();
        index.insert(
            "n1",
            "kube-system",
            pod("a", &[("app", "x"), ("k8s-app", "y")], true),
        );
        index.insert("n1", "kube-system", pod("b", &[], false));
        index.insert(
            "n1",
            "istio-system",
            pod("c", &[("", ""), ("app", "")], true),
        );
        index.insert("n2", "kube-system", pod("d", &[("app", "z")], false));
        // Indexed again with other labels: replaces the first.
        index.insert("n1", "kube-system", pod("a", &[("app", "w")], false));
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
        let names = |pods: &[PodView]| pods.iter().map(|p| p.name.to_string()).collect::<Vec<_>>();
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
        index.insert("n1", "a", pod("p1", &[], true));
        index.insert("n2", "a", pod("p2", &[], true));
        index.insert("n1", "b", pod("p3", &[], true));
        index.remove("n1", "a", "p1");
        assert!(index.namespace("a").is_some(), "n2 still has a pod in a");
        index.remove("n2", "a", "p2");
        assert!(index.namespace("a").is_none());
        assert!(index.namespace("b").is_some());
        index.insert("n2", "a", pod("p4", &[("k", "v")], false));
        assert_eq!(
            checked(&index, "n2", "a", &["k"]),
            [("p4".into(), false, vec![Some("v".into())])]
        );
        assert!(index.pods("n1", "a").is_empty());
    }

    #[test]
    fn a_nodes_stamp_changes_with_its_pods_and_only_with_them() {
        let mut index = PodIndex::new();
        assert_eq!(index.changed("n1"), 0, "no pods: stamp 0");
        index.insert("n1", "a", pod("p1", &[], false));
        let first = index.changed("n1");
        assert_ne!(first, 0);
        index.insert("n2", "a", pod("p2", &[], false));
        assert_eq!(index.changed("n1"), first, "another node's pod");
        index.insert("n1", "a", pod("p1", &[], true));
        let readied = index.changed("n1");
        assert_ne!(readied, first, "the pod became ready");
        index.remove("n1", "a", "p1");
        assert_eq!(index.changed("n1"), 0, "its last pod gone");
        index.insert("n1", "a", pod("p1", &[], true));
        assert!(
            ![0, first, readied].contains(&index.changed("n1")),
            "a stamp is never given twice, even for the same pods again"
        );
        let other = PodIndex::from_pods([]);
        assert_eq!(other.changed("n1"), 0);
    }
}
