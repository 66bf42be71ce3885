//! A Node in Kubernetes' protobuf encoding, decoded into the same
//! [`WatchedNode`] the JSON decoder makes: how the node writer reads the answer
//! to its patch.
//!
//! The API server encodes that answer for each patch on its own (the watch
//! cache's shared encodings do not serve it). For a kubelet's node of about
//! 10 KiB, most of it the image list and node info, protobuf costs it a fraction
//! of what JSON does, and the operator skips the images without reading them.

use k8s_openapi::api::core::v1::Taint;
use prost::Message;

use crate::cache::{
    k8s_proto::{FrameError, ObjectMetaPb, TimePb, none_if_empty, time, unwrap_envelope},
    node_cache::{MetaWire, NodeConditionWire, WatchedNode},
};

#[derive(Clone, PartialEq, Message)]
pub struct NodePb {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMetaPb>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<NodeSpecPb>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<NodeStatusPb>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NodeSpecPb {
    #[prost(message, repeated, tag = "5")]
    pub taints: Vec<TaintPb>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TaintPb {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
    #[prost(string, tag = "3")]
    pub effect: String,
    #[prost(message, optional, tag = "4")]
    pub time_added: Option<TimePb>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NodeStatusPb {
    #[prost(message, repeated, tag = "4")]
    pub conditions: Vec<NodeConditionPb>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NodeConditionPb {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub status: String,
    #[prost(message, optional, tag = "3")]
    pub last_heartbeat_time: Option<TimePb>,
    #[prost(message, optional, tag = "4")]
    pub last_transition_time: Option<TimePb>,
    #[prost(string, optional, tag = "5")]
    pub reason: Option<String>,
}

/// A Node sent as a whole body (a get's or a patch's answer), envelope and all.
pub fn decode_node(body: &[u8]) -> Result<WatchedNode, FrameError> {
    let inner = unwrap_envelope(body)?.raw;
    Ok(watched_node(NodePb::decode(inner.as_slice())?))
}

/// What the JSON decoder would make of the same node: Go's empty strings, empty
/// maps and zero times become absent, as JSON leaves them out.
fn watched_node(node: NodePb) -> WatchedNode {
    let meta = node.metadata.unwrap_or_default();
    let taints = node
        .spec
        .map(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| Taint {
            key: t.key,
            value: none_if_empty(t.value),
            effect: t.effect,
            time_added: t.time_added.and_then(time),
        })
        .collect();
    let conditions = node
        .status
        .map(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| NodeConditionWire {
            type_: c.r#type,
            status: c.status,
            reason: none_if_empty(c.reason),
            last_transition_time: c.last_transition_time.and_then(time),
            last_heartbeat_time: c.last_heartbeat_time.and_then(time),
        })
        .collect();
    WatchedNode::from_wire(
        MetaWire {
            name: none_if_empty(meta.name),
            uid: none_if_empty(meta.uid),
            resource_version: none_if_empty(meta.resource_version),
            labels: (!meta.labels.is_empty()).then_some(meta.labels),
            annotations: (!meta.annotations.is_empty()).then_some(meta.annotations),
        },
        taints,
        conditions,
    )
}

/// A node as the API server encodes it, with fields the slim messages leave out
/// under their own numbers.
#[cfg(test)]
mod wire {
    use std::collections::BTreeMap;

    use prost::Message;

    use crate::cache::k8s_proto::{GO_ZERO_TIME_SECONDS, TimePb, envelope};

    #[derive(Clone, PartialEq, Message)]
    pub struct FullMetaPb {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "5")]
        pub uid: String,
        #[prost(string, tag = "6")]
        pub resource_version: String,
        #[prost(message, optional, tag = "8")]
        pub creation_timestamp: Option<TimePb>,
        #[prost(btree_map = "string, string", tag = "11")]
        pub labels: BTreeMap<String, String>,
        #[prost(btree_map = "string, string", tag = "12")]
        pub annotations: BTreeMap<String, String>,
        #[prost(bytes = "vec", repeated, tag = "17")]
        pub managed_fields: Vec<Vec<u8>>,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct FullTaintPb {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(string, tag = "2")]
        pub value: String,
        #[prost(string, tag = "3")]
        pub effect: String,
        #[prost(message, optional, tag = "4")]
        pub time_added: Option<TimePb>,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct FullSpecPb {
        #[prost(string, tag = "1")]
        pub pod_cidr: String,
        #[prost(bool, tag = "4")]
        pub unschedulable: bool,
        #[prost(message, repeated, tag = "5")]
        pub taints: Vec<FullTaintPb>,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct FullConditionPb {
        #[prost(string, tag = "1")]
        pub r#type: String,
        #[prost(string, tag = "2")]
        pub status: String,
        #[prost(message, optional, tag = "3")]
        pub last_heartbeat_time: Option<TimePb>,
        #[prost(message, optional, tag = "4")]
        pub last_transition_time: Option<TimePb>,
        #[prost(string, tag = "5")]
        pub reason: String,
        #[prost(string, tag = "6")]
        pub message: String,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct ImagePb {
        #[prost(string, repeated, tag = "1")]
        pub names: Vec<String>,
        #[prost(int64, tag = "2")]
        pub size_bytes: i64,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct FullStatusPb {
        #[prost(message, repeated, tag = "4")]
        pub conditions: Vec<FullConditionPb>,
        #[prost(message, repeated, tag = "8")]
        pub images: Vec<ImagePb>,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct FullNodePb {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<FullMetaPb>,
        #[prost(message, optional, tag = "2")]
        pub spec: Option<FullSpecPb>,
        #[prost(message, optional, tag = "3")]
        pub status: Option<FullStatusPb>,
    }

    pub fn at(seconds: i64) -> Option<TimePb> {
        Some(TimePb { seconds, nanos: 0 })
    }

    pub fn zero_time() -> Option<TimePb> {
        at(GO_ZERO_TIME_SECONDS)
    }

    /// The body of an answer carrying `node`.
    pub fn body(node: &FullNodePb) -> Vec<u8> {
        envelope(node.encode_to_vec())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;
    use taint_operator_crd::MANAGED_TAINTS_ANNOTATION;

    use super::{wire::*, *};

    /// The same kubelet node in both encodings.
    fn both() -> (FullNodePb, serde_json::Value) {
        let proto = FullNodePb {
            metadata: Some(FullMetaPb {
                name: "n1".into(),
                uid: "u1".into(),
                resource_version: "42".into(),
                creation_timestamp: at(1_700_000_000),
                labels: BTreeMap::from([("zone".into(), "a".into())]),
                annotations: BTreeMap::from([
                    ("node.alpha.kubernetes.io/ttl".into(), "0".into()),
                    (
                        MANAGED_TAINTS_ANNOTATION.into(),
                        "{\"k:NoSchedule\":\"p\"}".into(),
                    ),
                ]),
                managed_fields: vec![b"kubelet".to_vec()],
            }),
            spec: Some(FullSpecPb {
                pod_cidr: "10.0.0.0/24".into(),
                unschedulable: false,
                taints: vec![
                    FullTaintPb {
                        key: "k".into(),
                        value: "v".into(),
                        effect: "NoSchedule".into(),
                        time_added: None,
                    },
                    FullTaintPb {
                        key: "gone".into(),
                        value: String::new(),
                        effect: "NoExecute".into(),
                        time_added: at(1_700_000_100),
                    },
                ],
            }),
            status: Some(FullStatusPb {
                conditions: vec![
                    FullConditionPb {
                        r#type: "Ready".into(),
                        status: "True".into(),
                        last_heartbeat_time: at(1_700_000_200),
                        last_transition_time: at(1_700_000_000),
                        reason: "KubeletReady".into(),
                        message: "kubelet is posting ready status".into(),
                    },
                    FullConditionPb {
                        r#type: "Custom".into(),
                        status: "Unknown".into(),
                        last_heartbeat_time: zero_time(),
                        last_transition_time: zero_time(),
                        reason: String::new(),
                        message: String::new(),
                    },
                ],
                images: vec![ImagePb {
                    names: vec!["registry/a:1".into()],
                    size_bytes: 1,
                }],
            }),
        };
        let json = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n1", "uid": "u1", "resourceVersion": "42",
                "creationTimestamp": "2023-11-14T22:13:20Z",
                "labels": {"zone": "a"},
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    MANAGED_TAINTS_ANNOTATION: "{\"k:NoSchedule\":\"p\"}"
                }
            },
            "spec": {"podCIDR": "10.0.0.0/24", "taints": [
                {"key": "k", "value": "v", "effect": "NoSchedule"},
                {"key": "gone", "effect": "NoExecute", "timeAdded": "2023-11-14T22:15:00Z"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "kubelet is posting ready status",
                     "lastHeartbeatTime": "2023-11-14T22:16:40Z",
                     "lastTransitionTime": "2023-11-14T22:13:20Z"},
                    {"type": "Custom", "status": "Unknown",
                     "lastHeartbeatTime": null, "lastTransitionTime": null}],
                "images": [{"names": ["registry/a:1"], "sizeBytes": 1}]
            }
        });
        (proto, json)
    }

    #[test]
    fn a_protobuf_node_decodes_to_the_node_the_json_decoder_makes() {
        let (proto, json) = both();
        let from_proto = decode_node(&body(&proto)).unwrap();
        let from_json: WatchedNode = serde_json::from_value(json).unwrap();
        assert_eq!(from_proto, from_json);
        assert_eq!(from_proto.node.resource_version(), Some("42"));
        assert_eq!(from_proto.node.taints().len(), 2);
        assert_eq!(from_proto.node.taints()[1].value, None);
        assert!(from_proto.node.taints()[1].time_added.is_some());
        assert_eq!(
            from_proto.node.view.managed.owner("k:NoSchedule"),
            Some("p")
        );
    }

    #[test]
    fn a_node_with_nothing_set_decodes_as_json_leaves_it() {
        for (annotations, json_meta) in [
            (BTreeMap::new(), json!({"name": "n"})),
            (
                BTreeMap::from([("x".to_string(), "y".to_string())]),
                json!({"name": "n", "annotations": {"x": "y"}}),
            ),
        ] {
            let empty = FullNodePb {
                metadata: Some(FullMetaPb {
                    name: "n".into(),
                    annotations,
                    ..FullMetaPb::default()
                }),
                spec: Some(FullSpecPb::default()),
                status: Some(FullStatusPb::default()),
            };
            let from_json: WatchedNode =
                serde_json::from_value(json!({"metadata": json_meta, "spec": {}, "status": {}}))
                    .unwrap();
            assert_eq!(decode_node(&body(&empty)).unwrap(), from_json);
        }
    }

    #[test]
    fn a_body_that_is_not_a_protobuf_node_is_an_error() {
        assert!(matches!(
            decode_node(b"{\"kind\":\"Node\"}"),
            Err(FrameError::NoEnvelope)
        ));
        let mut cut = body(&both().0);
        cut.truncate(cut.len() - 3);
        assert!(matches!(decode_node(&cut), Err(FrameError::Decode(_))));
    }
}
