//! What the node cache keeps of a Node: the decision core's view of it, ready to
//! evaluate, and what the node writer needs to patch it.
//!
//! A [`WatchedNode`] is decoded straight from the API's JSON (watch events, list
//! pages) or protobuf (patch answers, see `node_proto`), skipping everything else
//! while parsing; the cache keeps the [`CachedNode`] inside it. Its labels and condition strings are interned (see
//! `labels`), so 5,000 nodes share one copy of each key and value. A reconcile and
//! the status writer read the view as it is: nothing is re-parsed or rebuilt per
//! evaluation.

use std::{borrow::Cow, collections::BTreeMap};

use k8s_openapi::{
    api::core::v1::{Node, ObjectReference, Taint},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
};
use kube::{Resource, core::ClusterResourceScope};
use serde::{Deserialize, Deserializer};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, DRAIN_STARTED_ANNOTATION, MANAGED_TAINTS_ANNOTATION,
};

use crate::cache::settled::Settled;
use engine::{
    cluster::{NodeCondition, NodeView, Seconds},
    labels::{NodeLabels, Sym, sym},
    ownership::{Bootstrapped, DrainStarts, ManagedTaints},
    taints::NodeTaints,
};

/// A node as the node cache keeps it.
///
/// No `ObjectMeta`: kube's `Resource` trait would make every cached node carry one
/// (360 bytes, mostly empty), so the cache is our own (`node_store`) and only the
/// node as it comes off the wire ([`WatchedNode`]) is a `Resource`.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedNode {
    /// What the write's `test` and the events' object references read.
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    pub view: NodeView,
    pub annotations: OurAnnotations,
    /// What the last plan of this version found nothing to do on.
    pub settled: Settled,
}

/// A node as the API hands it over: what the cache keeps, and the little metadata
/// kube's watcher reads (the resourceVersion it resumes from). It lives only until
/// the node is stored.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchedNode {
    meta: ObjectMeta,
    pub node: CachedNode,
}

/// The operator's three annotations as the node has them, verbatim: the writer
/// compares them with what it would write. `any` says whether the node has an
/// annotation map at all, which decides how the writer adds one. Interned: nodes
/// in the same state carry the same text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OurAnnotations {
    pub any: bool,
    pub managed: Option<Sym>,
    pub bootstrapped: Option<Sym>,
    pub drain_started: Option<Sym>,
}

impl OurAnnotations {
    pub fn get(&self, key: &str) -> Option<&str> {
        match key {
            MANAGED_TAINTS_ANNOTATION => self.managed.as_deref(),
            BOOTSTRAPPED_ANNOTATION => self.bootstrapped.as_deref(),
            DRAIN_STARTED_ANNOTATION => self.drain_started.as_deref(),
            _ => None,
        }
    }

    fn from_map(map: Option<BTreeMap<String, String>>) -> Self {
        let Some(mut map) = map else {
            return OurAnnotations::default();
        };
        let mut take = |k: &str| map.remove(k).map(|v| sym(&v));
        OurAnnotations {
            managed: take(MANAGED_TAINTS_ANNOTATION),
            bootstrapped: take(BOOTSTRAPPED_ANNOTATION),
            drain_started: take(DRAIN_STARTED_ANNOTATION),
            any: true,
        }
    }
}

impl CachedNode {
    pub fn name(&self) -> &str {
        &self.view.name
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// The node, for the events about it.
    pub fn object_ref(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(Node::api_version(&()).into_owned()),
            kind: Some(Node::kind(&()).into_owned()),
            name: Some(self.name().to_string()),
            uid: self.uid.as_deref().map(str::to_string),
            ..ObjectReference::default()
        }
    }

    pub fn taints(&self) -> &[Taint] {
        &self.view.taints
    }

    /// The cache's copy of a full Node (tests, and nodes from other sources).
    pub fn from_node(node: &Node) -> Self {
        let annotations = |key: &str| {
            node.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .map(|v| sym(v))
        };
        CachedNode {
            uid: node.metadata.uid.as_deref().map(Box::from),
            resource_version: node.metadata.resource_version.as_deref().map(Box::from),
            view: NodeView::from_node(node),
            settled: Settled::default(),
            annotations: OurAnnotations {
                any: node.metadata.annotations.is_some(),
                managed: annotations(MANAGED_TAINTS_ANNOTATION),
                bootstrapped: annotations(BOOTSTRAPPED_ANNOTATION),
                drain_started: annotations(DRAIN_STARTED_ANNOTATION),
            },
        }
    }
}

/// The metadata either decoder (this JSON one, `node_proto`'s protobuf one)
/// reads off the wire.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MetaWire {
    pub name: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct NodeWire {
    metadata: MetaWire,
    spec: Option<NodeSpecWire>,
    status: Option<NodeStatusWire>,
}

#[derive(Deserialize)]
struct NodeSpecWire {
    taints: Option<Vec<Taint>>,
}

#[derive(Deserialize)]
struct NodeStatusWire {
    conditions: Option<Vec<NodeConditionWire>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeConditionWire {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: Option<String>,
    pub last_transition_time: Option<Time>,
    pub last_heartbeat_time: Option<Time>,
}

impl WatchedNode {
    /// What the watch would bring for a full Node (tests, and nodes from other sources).
    pub fn from_node(node: &Node) -> Self {
        WatchedNode::of(CachedNode::from_node(node))
    }

    /// The wire form of a node the cache holds.
    pub fn of(node: CachedNode) -> Self {
        WatchedNode {
            meta: ObjectMeta {
                name: Some(node.name().to_string()),
                resource_version: node.resource_version().map(str::to_string),
                ..ObjectMeta::default()
            },
            node,
        }
    }
}

impl<'de> Deserialize<'de> for WatchedNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let NodeWire {
            metadata,
            spec,
            status,
        } = NodeWire::deserialize(d)?;
        Ok(WatchedNode::from_wire(
            metadata,
            spec.and_then(|s| s.taints).unwrap_or_default(),
            status.and_then(|s| s.conditions).unwrap_or_default(),
        ))
    }
}

impl WatchedNode {
    /// The node as the cache keeps it, from what a decoder read.
    pub(crate) fn from_wire(
        m: MetaWire,
        taints: Vec<Taint>,
        wire_conditions: Vec<NodeConditionWire>,
    ) -> Self {
        let annotations = OurAnnotations::from_map(m.annotations);
        // Exact capacities: the decoder grows its vectors by doubling, and collecting
        // the conditions would otherwise reuse the larger wire vector in place.
        let taints = NodeTaints::new(taints);
        let mut conditions = Vec::with_capacity(wire_conditions.len());
        conditions.extend(wire_conditions.into_iter().map(|c| NodeCondition {
            type_: sym(&c.type_),
            status: sym(&c.status),
            reason: sym(c.reason.as_deref().unwrap_or_default()),
            last_transition: Seconds::new(c.last_transition_time.map(|t| t.0)),
            last_heartbeat: Seconds::new(c.last_heartbeat_time.map(|t| t.0)),
        }));
        let view = NodeView {
            labels: NodeLabels::from_map(m.labels.as_ref(), m.name.as_deref().unwrap_or_default()),
            name: m.name.clone().unwrap_or_default(),
            taints,
            conditions,
            managed: ManagedTaints::parse(annotations.managed.as_deref()),
            bootstrapped: Bootstrapped::parse(annotations.bootstrapped.as_deref()),
            drains: DrainStarts::parse(annotations.drain_started.as_deref()),
        };
        // Exact-size strings: the cache holds them for as long as the node lives.
        let node = CachedNode {
            uid: m.uid.map(String::into_boxed_str),
            resource_version: m.resource_version.as_deref().map(Box::from),
            view,
            annotations,
            settled: Settled::default(),
        };
        WatchedNode {
            meta: ObjectMeta {
                name: m.name,
                resource_version: m.resource_version,
                ..ObjectMeta::default()
            },
            node,
        }
    }
}

/// Lives where Nodes do: only the decoding differs.
impl Resource for WatchedNode {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Node::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Node::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Node::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Node::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kubelet_node() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n1", "uid": "u1", "resourceVersion": "42",
                "creationTimestamp": "2026-11-20T10:00:00Z",
                "labels": {"zone": "a", "kubernetes.io/hostname": "n1"},
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    MANAGED_TAINTS_ANNOTATION: "{\"k:NoSchedule\":\"p\"}",
                    BOOTSTRAPPED_ANNOTATION: "{\"b\":\"uid-b@2026-11-20T10:00:00Z\"}",
                    DRAIN_STARTED_ANNOTATION: "{\"d\":\"2026-11-20T10:30:00Z\"}"
                },
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:images": {}}}}]
            },
            "spec": {"podCIDR": "10.0.0.0/24",
                "taints": [{"key": "k", "effect": "NoSchedule", "value": "v"}]},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-11-20T11:00:00Z",
                    "lastTransitionTime": "2026-11-20T10:00:00Z"},
                    {"type": "Custom", "status": "Unknown"}],
                "images": [{"names": ["registry/a:1"], "sizeBytes": 1}],
                "capacity": {"cpu": "2"},
                "nodeInfo": {"kubeletVersion": "v1.36.0", "architecture": "amd64",
                    "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                    "kubeProxyVersion": "", "machineID": "", "operatingSystem": "linux",
                    "osImage": "", "systemUUID": ""}
            }
        })
    }

    #[test]
    fn decoding_keeps_what_the_full_node_says() {
        let watched: WatchedNode = serde_json::from_value(kubelet_node()).unwrap();
        let full: Node = serde_json::from_value(kubelet_node()).unwrap();
        assert_eq!(watched, WatchedNode::from_node(&full));
        assert_eq!(watched.meta().resource_version.as_deref(), Some("42"));
        let cached = watched.node;
        assert_eq!(cached, CachedNode::from_node(&full));
        assert_eq!(cached.view, NodeView::from_node(&full));
        assert_eq!(cached.name(), "n1");
        assert_eq!(cached.resource_version(), Some("42"));
        assert_eq!(cached.uid(), Some("u1"));
        assert_eq!(cached.taints().len(), 1);
        assert_eq!(cached.view.managed.owner("k:NoSchedule"), Some("p"));
        assert!(cached.view.bootstrapped.completed("b", "uid-b"));
        assert_eq!(
            cached.view.drains.started("d"),
            Some("2026-11-20T10:30:00Z".parse().unwrap())
        );
        assert!(cached.annotations.any);
        assert_eq!(
            cached.annotations.get(MANAGED_TAINTS_ANNOTATION),
            Some("{\"k:NoSchedule\":\"p\"}")
        );
        assert_eq!(cached.annotations.get("node.alpha.kubernetes.io/ttl"), None);
        assert_eq!(&*cached.view.conditions[1].reason, "");
    }

    #[test]
    fn a_node_without_annotations_has_no_annotation_map() {
        let mut node = kubelet_node();
        node["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        let cached = serde_json::from_value::<WatchedNode>(node).unwrap().node;
        assert_eq!(cached.annotations, OurAnnotations::default());
        let mut other = kubelet_node();
        other["metadata"]["annotations"] = json!({"x": "y"});
        let cached = serde_json::from_value::<WatchedNode>(other).unwrap().node;
        assert!(cached.annotations.any);
        assert_eq!(cached.annotations.managed, None);
    }

    #[test]
    fn cached_nodes_live_where_nodes_do() {
        let watched: WatchedNode = serde_json::from_value(kubelet_node()).unwrap();
        assert_eq!(WatchedNode::url_path(&(), None), "/api/v1/nodes");
        let full: Node = serde_json::from_value(kubelet_node()).unwrap();
        assert_eq!(watched.node.object_ref(), full.object_ref(&()));
    }
}
