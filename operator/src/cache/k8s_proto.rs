//! What every object in Kubernetes' protobuf encoding shares: the `k8s\0`
//! envelope, object metadata, times, and the `metav1.Status` of a refused
//! request. The pod watches (`pod_proto`) and the node writer's answers
//! (`node_proto`) decode their own objects on top of these.
//!
//! The messages carry only the fields the operator reads, with the field numbers
//! of Kubernetes' `generated.proto`; prost skips every other field without
//! allocating it. Go writes its zero values (empty strings, 0, the zero time)
//! where JSON leaves a field out; the helpers here turn them into the `None`
//! the JSON decoders make.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::{Status, response::StatusCause, response::StatusDetails};
use prost::Message;

/// What every protobuf-encoded object starts with.
pub const ENVELOPE_MAGIC: &[u8] = b"k8s\0";

/// The media type of a single protobuf object.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

#[derive(Clone, PartialEq, Message)]
pub struct UnknownPb {
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMetaPb>,
    #[prost(bytes = "vec", tag = "2")]
    pub raw: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeMetaPb {
    #[prost(string, tag = "1")]
    pub api_version: String,
    #[prost(string, tag = "2")]
    pub kind: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ObjectMetaPb {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    pub generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    pub creation_timestamp: Option<TimePb>,
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<TimePb>,
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TimePb {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct StatusPb {
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    #[prost(message, optional, tag = "5")]
    pub details: Option<StatusDetailsPb>,
    #[prost(int32, optional, tag = "6")]
    pub code: Option<i32>,
}

/// The causes say which field a 422 is about; a 422 without any is a failed
/// `test` of a JSON patch, which the node writer takes for a lost race.
#[derive(Clone, PartialEq, Message)]
pub struct StatusDetailsPb {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub group: String,
    #[prost(string, tag = "3")]
    pub kind: String,
    #[prost(message, repeated, tag = "4")]
    pub causes: Vec<StatusCausePb>,
    #[prost(int32, tag = "5")]
    pub retry_after_seconds: i32,
    #[prost(string, tag = "6")]
    pub uid: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct StatusCausePb {
    #[prost(string, tag = "1")]
    pub reason: String,
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(string, tag = "3")]
    pub field: String,
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("a protobuf object does not decode: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("a protobuf object lacks the k8s envelope")]
    NoEnvelope,
    #[error("a watch event of unknown type {0:?}")]
    UnknownType(String),
}

/// The `runtime.Unknown` behind the `k8s\0` prefix.
pub fn unwrap_envelope(raw: &[u8]) -> Result<UnknownPb, FrameError> {
    let body = raw
        .strip_prefix(ENVELOPE_MAGIC)
        .ok_or(FrameError::NoEnvelope)?;
    Ok(UnknownPb::decode(body)?)
}

/// `object`'s own encoding inside the envelope, as the API server sends it.
pub fn envelope(object: Vec<u8>) -> Vec<u8> {
    let unknown = UnknownPb {
        type_meta: None,
        raw: object,
    };
    [ENVELOPE_MAGIC, &unknown.encode_to_vec()].concat()
}

/// A `metav1.Status` sent as the body of a refused request, in protobuf.
pub fn decode_status(body: &[u8]) -> Result<Status, FrameError> {
    let inner = unwrap_envelope(body)?.raw;
    Ok(status(StatusPb::decode(inner.as_slice())?))
}

pub fn status(s: StatusPb) -> Status {
    let code = s.code.unwrap_or_default();
    let mut status = Status::failure(
        &s.message.unwrap_or_default(),
        &s.reason.unwrap_or_default(),
    )
    .with_code(u16::try_from(code).unwrap_or_default());
    status.details = s.details.map(|d| StatusDetails {
        name: d.name,
        group: d.group,
        kind: d.kind,
        uid: d.uid,
        causes: d
            .causes
            .into_iter()
            .map(|c| StatusCause {
                reason: c.reason,
                message: c.message,
                field: c.field,
            })
            .collect(),
        retry_after_seconds: u32::try_from(d.retry_after_seconds).unwrap_or_default(),
    });
    status
}

/// The Status of a refused request: protobuf, JSON, or the text as the message.
pub fn refusal(code: u16, body: &[u8]) -> Status {
    if let Ok(status) = decode_status(body) {
        return if status.code == 0 {
            status.with_code(code)
        } else {
            status
        };
    }
    if let Ok(status) = serde_json::from_slice::<Status>(body) {
        return status;
    }
    let text = String::from_utf8_lossy(body);
    Status::failure(text.trim(), "Refused").with_code(code)
}

/// A body the API server sent that does not read as what it claims to be.
pub fn read_error(message: String) -> kube::Error {
    kube::Error::ReadEvents(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        message,
    ))
}

/// True when a response's Content-Type says protobuf.
pub fn is_protobuf(content_type: Option<&http::HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(PROTOBUF))
}

/// Go's zero time, which protobuf carries where JSON says `null`.
pub const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

pub fn time(t: TimePb) -> Option<Time> {
    if t.seconds == GO_ZERO_TIME_SECONDS && t.nanos == 0 {
        return None;
    }
    k8s_openapi::jiff::Timestamp::new(t.seconds, t.nanos)
        .ok()
        .map(Time)
}

pub fn none_if_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_pb(code: i32, causes: Vec<StatusCausePb>) -> StatusPb {
        StatusPb {
            status: Some("Failure".into()),
            message: Some("refused".into()),
            reason: Some("Invalid".into()),
            details: Some(StatusDetailsPb {
                name: "n1".into(),
                kind: "Node".into(),
                causes,
                ..StatusDetailsPb::default()
            }),
            code: Some(code),
        }
    }

    #[test]
    fn a_refusal_reads_protobuf_json_or_text() {
        let proto = refusal(403, &envelope(status_pb(403, vec![]).encode_to_vec()));
        assert_eq!((proto.code, proto.message.as_str()), (403, "refused"));
        let json = refusal(
            422,
            br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"bad selector","reason":"Invalid","code":422}"#,
        );
        assert_eq!((json.code, json.reason.as_str()), (422, "Invalid"));
        let text = refusal(502, b"  Bad Gateway\n");
        assert_eq!((text.code, text.message.as_str()), (502, "Bad Gateway"));
    }

    #[test]
    fn a_protobuf_status_keeps_the_fields_its_causes_name() {
        let cause = StatusCausePb {
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: \"bad key!\"".into(),
            field: "spec.taints[2].key".into(),
        };
        let s = decode_status(&envelope(status_pb(422, vec![cause]).encode_to_vec())).unwrap();
        let details = s.details.expect("details");
        assert_eq!(
            (details.name.as_str(), details.kind.as_str()),
            ("n1", "Node")
        );
        assert_eq!(details.causes.len(), 1);
        assert_eq!(details.causes[0].field, "spec.taints[2].key");
        assert_eq!(details.causes[0].reason, "FieldValueInvalid");
    }

    #[test]
    fn only_protobuf_content_types_are_protobuf() {
        let header = |v: &'static str| http::HeaderValue::from_static(v);
        assert!(is_protobuf(Some(&header(PROTOBUF))));
        assert!(is_protobuf(Some(&header(
            "application/vnd.kubernetes.protobuf;stream=watch"
        ))));
        assert!(!is_protobuf(Some(&header("application/json"))));
        assert!(!is_protobuf(None));
    }

    #[test]
    fn go_zero_times_are_absent() {
        assert_eq!(
            time(TimePb {
                seconds: GO_ZERO_TIME_SECONDS,
                nanos: 0
            }),
            None
        );
        assert!(
            time(TimePb {
                seconds: 1_700_000_000,
                nanos: 0
            })
            .is_some()
        );
    }
}
