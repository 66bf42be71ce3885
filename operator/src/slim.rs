//! What the node and pod watches decode.
//!
//! A kubelet's Node carries managedFields, a few dozen images, capacity and node
//! info; a Pod carries its whole spec. Decoding those into `Node`/`Pod` and trimming
//! afterwards allocates all of it for every object of every list page, and that
//! high-water mark stays in the process. These wrappers read only the fields the
//! operator uses and skip the rest while parsing, so a full list of 5,000 nodes
//! never exists in memory. The result is a plain `Node`/`Pod` holding just those
//! fields, shaped exactly as `trim_node` leaves a node.

use std::{borrow::Cow, collections::BTreeMap};

use k8s_openapi::{
    api::core::v1::{
        Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, Taint,
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
};
use kube::{
    Resource,
    core::{ClusterResourceScope, NamespaceResourceScope},
};
use serde::{Deserialize, Deserializer};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, MANAGED_TAINTS_ANNOTATION, POD_READY_ANNOTATION,
};

/// A Node decoded with only what the caches keep.
#[derive(Clone, Debug)]
pub struct SlimNode(pub Node);

/// A Pod decoded with only what the critical-pod check reads.
#[derive(Clone, Debug)]
pub struct SlimPod(pub Pod);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

impl Meta {
    /// Keeps the annotations named in `keep`. The map itself stays even when
    /// emptied: whether it exists decides how the node writer adds an annotation.
    fn into_object_meta(self, keep: &[&str]) -> ObjectMeta {
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            resource_version: self.resource_version,
            generation: self.generation,
            creation_timestamp: self.creation_timestamp,
            deletion_timestamp: self.deletion_timestamp,
            labels: self.labels,
            annotations: self.annotations.map(|mut a| {
                a.retain(|k, _| keep.contains(&k.as_str()));
                a
            }),
            ..ObjectMeta::default()
        }
    }
}

#[derive(Deserialize)]
struct NodeWire {
    metadata: Meta,
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
struct NodeConditionWire {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: Option<String>,
    last_transition_time: Option<Time>,
}

impl<'de> Deserialize<'de> for SlimNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = NodeWire::deserialize(d)?;
        let conditions = wire.status.and_then(|s| s.conditions).map(|cs| {
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
        Ok(SlimNode(Node {
            metadata: wire
                .metadata
                .into_object_meta(&[MANAGED_TAINTS_ANNOTATION, BOOTSTRAPPED_ANNOTATION]),
            spec: Some(NodeSpec {
                taints: wire.spec.and_then(|s| s.taints),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions,
                ..NodeStatus::default()
            }),
        }))
    }
}

#[derive(Deserialize)]
struct PodWire {
    metadata: Meta,
    spec: Option<PodSpecWire>,
    status: Option<PodStatusWire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecWire {
    node_name: Option<String>,
}

#[derive(Deserialize)]
struct PodStatusWire {
    phase: Option<String>,
    conditions: Option<Vec<PodConditionWire>>,
}

#[derive(Deserialize)]
struct PodConditionWire {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = PodWire::deserialize(d)?;
        let status = wire.status.map(|s| PodStatus {
            phase: s.phase,
            conditions: s.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        ..PodCondition::default()
                    })
                    .collect()
            }),
            ..PodStatus::default()
        });
        Ok(SlimPod(Pod {
            metadata: wire.metadata.into_object_meta(&[POD_READY_ANNOTATION]),
            spec: Some(PodSpec {
                node_name: wire.spec.and_then(|s| s.node_name),
                ..PodSpec::default()
            }),
            status,
        }))
    }
}

/// Same API location as `$full`: only the decoding differs.
macro_rules! same_resource_as {
    ($slim:ty, $full:ty, $scope:ty) => {
        impl Resource for $slim {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(dt: &()) -> Cow<'_, str> {
                <$full>::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                <$full>::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                <$full>::version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                <$full>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.0.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }
    };
}

same_resource_as!(SlimNode, Node, ClusterResourceScope);
same_resource_as!(SlimPod, Pod, NamespaceResourceScope);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::trim::trim_node;

    fn kubelet_node() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n1", "uid": "u1", "resourceVersion": "42",
                "creationTimestamp": "2026-11-20T10:00:00Z",
                "labels": {"zone": "a"},
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    MANAGED_TAINTS_ANNOTATION: "{\"p\":{\"uid\":\"x\",\"taints\":[\"k:NoSchedule\"]}}"
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
                    "lastTransitionTime": "2026-11-20T10:00:00Z"}],
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
    fn a_slim_node_is_the_trimmed_node() {
        let slim: SlimNode = serde_json::from_value(kubelet_node()).unwrap();
        let mut full: Node = serde_json::from_value(kubelet_node()).unwrap();
        trim_node(&mut full);
        assert_eq!(slim.0, full);
    }

    #[test]
    fn a_node_without_annotations_gets_no_annotation_map() {
        let mut node = kubelet_node();
        node["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        let slim: SlimNode = serde_json::from_value(node).unwrap();
        assert_eq!(slim.0.metadata.annotations, None);
    }

    #[test]
    fn a_slim_pod_keeps_what_readiness_reads() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "cni-x", "namespace": "kube-system", "resourceVersion": "7",
                "labels": {"app": "cni"},
                "annotations": {POD_READY_ANNOTATION: "true", "other": "dropped"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "False", "reason": "r"}]}
        });
        let slim: SlimPod = serde_json::from_value(pod.clone()).unwrap();
        let full: Pod = serde_json::from_value(pod).unwrap();
        assert_eq!(
            crate::cluster::PodView::from_pod(&slim.0),
            crate::cluster::PodView::from_pod(&full)
        );
        assert_eq!(crate::cluster::bound_node(&slim.0), Some("n1"));
        assert_eq!(
            slim.0
                .metadata
                .annotations
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            [POD_READY_ANNOTATION]
        );
        assert!(slim.0.spec.unwrap().containers.is_empty());
    }

    #[test]
    fn slim_types_live_where_the_full_ones_do() {
        assert_eq!(SlimNode::url_path(&(), None), "/api/v1/nodes");
        assert_eq!(
            SlimPod::url_path(&(), Some("ns")),
            "/api/v1/namespaces/ns/pods"
        );
    }
}
