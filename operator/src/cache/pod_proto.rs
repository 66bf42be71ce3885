//! Pod watch events in Kubernetes' protobuf encoding, decoded into the same
//! [`SlimPod`] the JSON decoder makes.
//!
//! Encoding a pod as protobuf costs the API server about a quarter of what JSON
//! does: a label-selected stream of 15,000 critical pods (of 150,000) took it 0.85
//! CPU s instead of 2.9-3.0 (docs/performance.md#protobuf-pod-watches). The messages below carry
//! only the fields the critical-pod check reads, with the field numbers of
//! Kubernetes' `generated.proto`; prost skips every other field without
//! allocating it.
//!
//! A watch frame is a `metav1.WatchEvent`; its object is a `runtime.Unknown`
//! envelope behind the four bytes `k8s\0`, and the envelope holds the Pod (or,
//! for an `ERROR` event, a `metav1.Status`).

use k8s_openapi::{
    api::core::v1::{Pod, PodCondition, PodSpec, PodStatus},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use prost::Message;
use taint_operator_crd::POD_READY_ANNOTATION;

use crate::cache::{
    k8s_proto::{FrameError, ObjectMetaPb, StatusPb, none_if_empty, status, time, unwrap_envelope},
    slim::SlimPod,
};

/// The annotation of the bookmark that ends a streamed initial list.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

#[derive(Clone, PartialEq, Message)]
pub struct WatchEventPb {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(message, optional, tag = "2")]
    pub object: Option<RawExtensionPb>,
}

#[derive(Clone, PartialEq, Message)]
pub struct RawExtensionPb {
    #[prost(bytes = "vec", tag = "1")]
    pub raw: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodPb {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMetaPb>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<PodSpecPb>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<PodStatusPb>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSpecPb {
    #[prost(string, optional, tag = "10")]
    pub node_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodStatusPb {
    #[prost(string, optional, tag = "1")]
    pub phase: Option<String>,
    #[prost(message, repeated, tag = "2")]
    pub conditions: Vec<PodConditionPb>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodConditionPb {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub status: String,
}

/// One decoded watch frame.
#[derive(Debug)]
pub enum PodFrame {
    Added(SlimPod),
    Modified(SlimPod),
    Deleted(SlimPod),
    /// Only a resourceVersion; `end_of_list` on the bookmark that ends a streamed list.
    Bookmark {
        resource_version: String,
        end_of_list: bool,
    },
    Error(kube::core::Status),
}

pub fn decode_frame(frame: &[u8]) -> Result<PodFrame, FrameError> {
    let event = WatchEventPb::decode(frame)?;
    let raw = event.object.map(|o| o.raw).unwrap_or_default();
    let inner = unwrap_envelope(&raw)?.raw;
    Ok(match event.r#type.as_str() {
        "ADDED" => PodFrame::Added(slim_pod(PodPb::decode(inner.as_slice())?)),
        "MODIFIED" => PodFrame::Modified(slim_pod(PodPb::decode(inner.as_slice())?)),
        "DELETED" => PodFrame::Deleted(slim_pod(PodPb::decode(inner.as_slice())?)),
        "BOOKMARK" => {
            let meta = PodPb::decode(inner.as_slice())?
                .metadata
                .unwrap_or_default();
            PodFrame::Bookmark {
                end_of_list: meta
                    .annotations
                    .get(INITIAL_EVENTS_END)
                    .is_some_and(|v| v == "true"),
                resource_version: meta.resource_version.unwrap_or_default(),
            }
        }
        "ERROR" => PodFrame::Error(status(StatusPb::decode(inner.as_slice())?)),
        other => return Err(FrameError::UnknownType(other.to_string())),
    })
}

/// The pod as the JSON decoder makes it (`slim::SlimPod`): the same fields, the
/// annotations trimmed to the one the critical-pod check reads. Protobuf writes
/// empty strings, zeros and empty maps where JSON leaves the field out; they
/// become `None` as they would from JSON.
fn slim_pod(pod: PodPb) -> SlimPod {
    let meta = pod.metadata.unwrap_or_default();
    let annotations = (!meta.annotations.is_empty()).then(|| {
        let mut kept = meta.annotations;
        kept.retain(|k, _| k == POD_READY_ANNOTATION);
        kept
    });
    let status = pod.status.map(|s| PodStatus {
        phase: none_if_empty(s.phase),
        conditions: (!s.conditions.is_empty()).then(|| {
            s.conditions
                .into_iter()
                .map(|c| PodCondition {
                    type_: c.r#type,
                    status: c.status,
                    ..PodCondition::default()
                })
                .collect()
        }),
        ..PodStatus::default()
    });
    SlimPod(Pod {
        metadata: ObjectMeta {
            name: none_if_empty(meta.name),
            namespace: none_if_empty(meta.namespace),
            uid: none_if_empty(meta.uid),
            resource_version: none_if_empty(meta.resource_version),
            generation: meta.generation.filter(|g| *g != 0),
            creation_timestamp: meta.creation_timestamp.and_then(time),
            deletion_timestamp: meta.deletion_timestamp.and_then(time),
            labels: (!meta.labels.is_empty()).then_some(meta.labels),
            annotations,
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: none_if_empty(pod.spec.and_then(|s| s.node_name)),
            ..PodSpec::default()
        }),
        status,
    })
}

/// A watch event as the API server encodes it, around `object` (a Pod's or a
/// Status's own encoding), without the length prefix.
#[cfg(test)]
pub(crate) fn encode_event(type_: &str, object: Vec<u8>) -> Vec<u8> {
    WatchEventPb {
        r#type: type_.into(),
        object: Some(RawExtensionPb {
            raw: crate::cache::k8s_proto::envelope(object),
        }),
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cache::k8s_proto::{GO_ZERO_TIME_SECONDS, TimePb};
    use serde_json::json;

    // A pod as the API server encodes it: every field of Kubernetes' messages
    // that the slim ones leave out is here under its own number, and Go writes
    // its zero values (empty strings, 0) where JSON leaves a field out.
    #[derive(Clone, PartialEq, Message)]
    struct OwnerReferencePb {
        #[prost(string, tag = "1")]
        kind: String,
        #[prost(string, tag = "3")]
        name: String,
    }

    #[derive(Clone, PartialEq, Message)]
    struct FullMetaPb {
        #[prost(string, tag = "1")]
        name: String,
        #[prost(string, tag = "2")]
        generate_name: String,
        #[prost(string, tag = "3")]
        namespace: String,
        #[prost(string, tag = "5")]
        uid: String,
        #[prost(string, tag = "6")]
        resource_version: String,
        #[prost(int64, tag = "7")]
        generation: i64,
        #[prost(message, optional, tag = "8")]
        creation_timestamp: Option<TimePb>,
        #[prost(message, optional, tag = "9")]
        deletion_timestamp: Option<TimePb>,
        #[prost(btree_map = "string, string", tag = "11")]
        labels: BTreeMap<String, String>,
        #[prost(btree_map = "string, string", tag = "12")]
        annotations: BTreeMap<String, String>,
        #[prost(message, repeated, tag = "13")]
        owner_references: Vec<OwnerReferencePb>,
        #[prost(string, repeated, tag = "14")]
        finalizers: Vec<String>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct ContainerPb {
        #[prost(string, tag = "1")]
        name: String,
        #[prost(string, tag = "2")]
        image: String,
    }

    #[derive(Clone, PartialEq, Message)]
    struct FullSpecPb {
        #[prost(message, repeated, tag = "2")]
        containers: Vec<ContainerPb>,
        #[prost(string, tag = "3")]
        restart_policy: String,
        #[prost(string, tag = "10")]
        node_name: String,
        #[prost(bool, tag = "11")]
        host_network: bool,
    }

    #[derive(Clone, PartialEq, Message)]
    struct FullConditionPb {
        #[prost(string, tag = "1")]
        r#type: String,
        #[prost(string, tag = "2")]
        status: String,
        #[prost(message, optional, tag = "4")]
        last_transition_time: Option<TimePb>,
        #[prost(string, tag = "5")]
        reason: String,
    }

    #[derive(Clone, PartialEq, Message)]
    struct FullStatusPb {
        #[prost(string, tag = "1")]
        phase: String,
        #[prost(message, repeated, tag = "2")]
        conditions: Vec<FullConditionPb>,
        #[prost(string, tag = "5")]
        host_ip: String,
    }

    #[derive(Clone, PartialEq, Message)]
    struct FullPodPb {
        #[prost(message, optional, tag = "1")]
        metadata: Option<FullMetaPb>,
        #[prost(message, optional, tag = "2")]
        spec: Option<FullSpecPb>,
        #[prost(message, optional, tag = "3")]
        status: Option<FullStatusPb>,
    }

    fn frame_of(type_: &str, pod: &FullPodPb) -> Vec<u8> {
        encode_event(type_, pod.encode_to_vec())
    }

    fn at(seconds: i64) -> Option<TimePb> {
        Some(TimePb { seconds, nanos: 0 })
    }

    /// The same pod in both encodings: `deleting` sets a deletion timestamp,
    /// `ready_annotation` adds the early-ready annotation beside another one.
    fn both(deleting: bool, ready_annotation: bool) -> (FullPodPb, serde_json::Value) {
        let mut annotations = BTreeMap::from([(
            "kubectl.kubernetes.io/restartedAt".to_string(),
            "x".to_string(),
        )]);
        if ready_annotation {
            annotations.insert(POD_READY_ANNOTATION.into(), "true".into());
        }
        let proto = FullPodPb {
            metadata: Some(FullMetaPb {
                name: "cni-abc".into(),
                generate_name: "cni-".into(),
                namespace: "kube-system".into(),
                uid: "u-1".into(),
                resource_version: "42".into(),
                generation: 0,
                creation_timestamp: at(1_700_000_000),
                deletion_timestamp: if deleting { at(1_700_000_100) } else { None },
                labels: BTreeMap::from([("app".into(), "cni".into())]),
                annotations: annotations.clone(),
                owner_references: vec![OwnerReferencePb {
                    kind: "DaemonSet".into(),
                    name: "cni".into(),
                }],
                finalizers: vec!["example.com/keep".into()],
            }),
            spec: Some(FullSpecPb {
                containers: vec![ContainerPb {
                    name: "cni".into(),
                    image: "registry.example/cni:1".into(),
                }],
                restart_policy: "Always".into(),
                node_name: "node-1".into(),
                host_network: true,
            }),
            status: Some(FullStatusPb {
                phase: "Running".into(),
                conditions: vec![
                    FullConditionPb {
                        r#type: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: at(1_700_000_050),
                        reason: String::new(),
                    },
                    FullConditionPb {
                        r#type: "ContainersReady".into(),
                        status: "True".into(),
                        last_transition_time: None,
                        reason: String::new(),
                    },
                ],
                host_ip: "10.0.0.1".into(),
            }),
        };
        let mut metadata = json!({
            "name": "cni-abc", "generateName": "cni-", "namespace": "kube-system",
            "uid": "u-1", "resourceVersion": "42",
            "creationTimestamp": "2023-11-14T22:13:20Z",
            "labels": {"app": "cni"}, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "cni", "uid": "d-1"}],
            "finalizers": ["example.com/keep"],
        });
        if deleting {
            metadata["deletionTimestamp"] = json!("2023-11-14T22:15:00Z");
        }
        let json = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [{"name": "cni", "image": "registry.example/cni:1"}],
                     "restartPolicy": "Always", "nodeName": "node-1", "hostNetwork": true},
            "status": {"phase": "Running", "hostIP": "10.0.0.1", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2023-11-14T22:14:10Z"},
                {"type": "ContainersReady", "status": "True"}]},
        });
        (proto, json)
    }

    #[test]
    fn a_protobuf_pod_decodes_to_the_pod_the_json_decoder_makes() {
        for (deleting, ready_annotation) in [(false, false), (true, false), (false, true)] {
            let (proto, json) = both(deleting, ready_annotation);
            let PodFrame::Modified(from_proto) =
                decode_frame(&frame_of("MODIFIED", &proto)).unwrap()
            else {
                panic!("a MODIFIED frame");
            };
            let from_json: SlimPod = serde_json::from_value(json).unwrap();
            assert_eq!(
                from_proto.0, from_json.0,
                "deleting={deleting} ready={ready_annotation}"
            );
        }
    }

    #[test]
    fn a_pod_with_nothing_set_decodes_as_json_leaves_it() {
        let empty = FullPodPb {
            metadata: Some(FullMetaPb {
                name: "p".into(),
                creation_timestamp: at(GO_ZERO_TIME_SECONDS),
                ..FullMetaPb::default()
            }),
            spec: Some(FullSpecPb::default()),
            status: Some(FullStatusPb::default()),
        };
        let PodFrame::Added(from_proto) = decode_frame(&frame_of("ADDED", &empty)).unwrap() else {
            panic!("an ADDED frame");
        };
        let from_json: SlimPod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {}, "status": {}}))
                .unwrap();
        assert_eq!(from_proto.0, from_json.0);
    }

    #[test]
    fn bookmarks_say_their_version_and_whether_they_end_the_list() {
        for end in [false, true] {
            let mut meta = FullMetaPb {
                resource_version: "77".into(),
                ..FullMetaPb::default()
            };
            if end {
                meta.annotations
                    .insert(INITIAL_EVENTS_END.into(), "true".into());
            }
            let pod = FullPodPb {
                metadata: Some(meta),
                ..FullPodPb::default()
            };
            match decode_frame(&frame_of("BOOKMARK", &pod)).unwrap() {
                PodFrame::Bookmark {
                    resource_version,
                    end_of_list,
                } => assert_eq!((resource_version.as_str(), end_of_list), ("77", end)),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn an_error_event_carries_the_status() {
        let status = StatusPb {
            status: Some("Failure".into()),
            message: Some("too old resource version: 5 (9)".into()),
            reason: Some("Expired".into()),
            details: None,
            code: Some(410),
        };
        let frame = encode_event("ERROR", status.encode_to_vec());
        let PodFrame::Error(s) = decode_frame(&frame).unwrap() else {
            panic!("an ERROR frame");
        };
        assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
        assert_eq!(s.message, "too old resource version: 5 (9)");
    }

    #[test]
    fn frames_that_are_not_what_they_claim_are_errors() {
        let no_envelope = WatchEventPb {
            r#type: "ADDED".into(),
            object: Some(RawExtensionPb {
                raw: b"{\"kind\":\"Pod\"}".to_vec(),
            }),
        }
        .encode_to_vec();
        assert!(matches!(
            decode_frame(&no_envelope),
            Err(FrameError::NoEnvelope)
        ));
        let unknown_type = frame_of("SHRUGGED", &FullPodPb::default());
        assert!(
            matches!(decode_frame(&unknown_type), Err(FrameError::UnknownType(t)) if t == "SHRUGGED")
        );
        assert!(matches!(
            decode_frame(&[0xff, 0xff, 0xff]),
            Err(FrameError::Decode(_))
        ));
    }
}
