//! The mocked API server: the kube-rs controller-rs `ApiServerVerifier` pattern.
//!
//! The operator's client sends every request into a `tower_test` mock. A scenario
//! script awaits each request it expects, asserts its method, path, query, content
//! type and body, and replies. A request the script does not expect fails the test,
//! and so does an expected one that never comes.

use std::collections::BTreeMap;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Node;
use kube::client::Body;
use serde_json::{Value, json};
use taint_operator::{cache::k8s_proto, controller::node_writer::PATCH_ANSWER};
use tower_test::mock::{Handle, SendResponse};

pub struct ApiServerVerifier {
    handle: Handle<Request<Body>, Response<Body>>,
    /// The API server's copy of each node: node patches are applied to it, so a
    /// patch that would not apply on a real server fails the test.
    pub nodes: BTreeMap<String, Value>,
    /// Events that arrived while the scenario waited for another request. Node
    /// events are published by their own task, so they may come after requests
    /// sent later; each must still be expected, and checked, by `expect_event`.
    early_events: std::collections::VecDeque<Value>,
}

/// One request the operator sent, with its body parsed.
pub struct Call {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    pub body: Value,
    send: SendResponse<Response<Body>>,
}

impl Call {
    pub fn describe(&self) -> String {
        let query = self
            .query
            .as_deref()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        format!("{} {}{} {}", self.method, self.path, query, self.body)
    }

    /// The query parameters in order. kube writes `?&fieldManager=...` (an empty
    /// first pair, which the API server ignores), so empty pairs are dropped.
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        query_pairs(self.query.as_deref())
    }

    pub fn reply(self, status: u16, body: &Value) {
        let response = Response::builder()
            .status(StatusCode::from_u16(status).expect("a valid status code"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(body).expect("serializes")))
            .expect("a valid response");
        self.send.send_response(response);
    }

    /// Answers a watch: one JSON document a line, as the API server streams them.
    pub fn reply_lines(self, lines: &[Value]) {
        let mut body = Vec::new();
        for line in lines {
            serde_json::to_writer(&mut body, line).expect("serializes");
            body.push(b'\n');
        }
        let response = Response::builder()
            .status(StatusCode::OK)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .expect("a valid response");
        self.send.send_response(response);
    }

    /// Answers with `body` as it is, of `content_type`: a protobuf watch stream.
    #[allow(dead_code)] // each test binary compiles the support module whole
    pub fn reply_raw(self, status: u16, content_type: &str, body: Vec<u8>) {
        let response = Response::builder()
            .status(StatusCode::from_u16(status).expect("a valid status code"))
            .header(http::header::CONTENT_TYPE, content_type)
            .body(Body::from(body))
            .expect("a valid response");
        self.send.send_response(response);
    }

    /// Fails the request below HTTP, as a connection closed under it does: no
    /// answer comes back.
    #[allow(dead_code)] // each test binary compiles the support module whole
    pub fn fail_in_transport(self) {
        self.send
            .send_error("connection closed before message completed");
    }

    /// Answers with a `metav1.Status` failure, as the API server does.
    pub fn reply_status(self, status: &Value) {
        let code = status["code"].as_u64().expect("a Status has a code") as u16;
        self.reply(code, status);
    }

    /// Answers with a `metav1.Status` failure in protobuf, as the API server does
    /// when the request asked for protobuf.
    #[allow(dead_code)] // each test binary compiles the support module whole
    pub fn reply_status_protobuf(self, status: &Value) {
        let code = status["code"].as_u64().expect("a Status has a code") as u16;
        self.reply_raw(code, k8s_proto::PROTOBUF, protobuf::status(status));
    }

    /// Answers with `node` in protobuf, as the API server does when the request
    /// asked for protobuf.
    #[allow(dead_code)] // each test binary compiles the support module whole
    pub fn reply_node_protobuf(self, node: &Value) {
        self.reply_raw(200, k8s_proto::PROTOBUF, protobuf::node(node));
    }
}

/// JSON objects of the API in their protobuf encoding, with the fields the
/// operator reads.
mod protobuf {
    use prost::Message;
    use serde_json::Value;
    use taint_operator::cache::{
        k8s_proto::{ObjectMetaPb, StatusCausePb, StatusDetailsPb, StatusPb, TimePb, envelope},
        node_proto::{NodeConditionPb, NodePb, NodeSpecPb, NodeStatusPb, TaintPb},
    };

    fn text(v: &Value) -> String {
        v.as_str().unwrap_or_default().to_string()
    }

    fn time(v: &Value) -> Option<TimePb> {
        let t: k8s_openapi::jiff::Timestamp = v.as_str()?.parse().expect("an RFC 3339 time");
        Some(TimePb {
            seconds: t.as_second(),
            nanos: t.subsec_nanosecond(),
        })
    }

    fn map(v: &Value) -> std::collections::BTreeMap<String, String> {
        v.as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), text(v)))
            .collect()
    }

    pub fn status(s: &Value) -> Vec<u8> {
        let d = &s["details"];
        let details = d.is_object().then(|| StatusDetailsPb {
            name: text(&d["name"]),
            kind: text(&d["kind"]),
            causes: d["causes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| StatusCausePb {
                    reason: text(&c["reason"]),
                    message: text(&c["message"]),
                    field: text(&c["field"]),
                })
                .collect(),
            ..StatusDetailsPb::default()
        });
        let status = StatusPb {
            status: Some(text(&s["status"])),
            message: Some(text(&s["message"])),
            reason: Some(text(&s["reason"])),
            details,
            code: s["code"].as_i64().map(|c| c as i32),
        };
        envelope(status.encode_to_vec())
    }

    pub fn node(n: &Value) -> Vec<u8> {
        let m = &n["metadata"];
        let node = NodePb {
            metadata: Some(ObjectMetaPb {
                name: Some(text(&m["name"])),
                uid: Some(text(&m["uid"])),
                resource_version: Some(text(&m["resourceVersion"])),
                labels: map(&m["labels"]),
                annotations: map(&m["annotations"]),
                ..ObjectMetaPb::default()
            }),
            spec: Some(NodeSpecPb {
                taints: n["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| TaintPb {
                        key: text(&t["key"]),
                        // Go writes the empty string where JSON leaves the value out.
                        value: Some(text(&t["value"])),
                        effect: text(&t["effect"]),
                        time_added: time(&t["timeAdded"]),
                    })
                    .collect(),
            }),
            status: Some(NodeStatusPb {
                conditions: n["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| NodeConditionPb {
                        r#type: text(&c["type"]),
                        status: text(&c["status"]),
                        last_heartbeat_time: time(&c["lastHeartbeatTime"]),
                        last_transition_time: time(&c["lastTransitionTime"]),
                        reason: Some(text(&c["reason"])),
                    })
                    .collect(),
            }),
        };
        envelope(node.encode_to_vec())
    }
}

fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The body kube-apiserver answers a JSON patch with when an operation cannot be
/// applied, a failed `test` included: `NewGenericServerResponse(422, ...)` in
/// `apiserver/pkg/endpoints/handlers/patch.go`, whose message says nothing about `test`.
pub fn patch_not_applied() -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server rejected our request due to an error in our request",
        "reason": "Invalid",
        "details": {},
        "code": 422
    })
}

/// A 422 whose message names the failed `test` (as some API servers and proxies word it).
pub fn test_failed() -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "testing value /metadata/resourceVersion failed: test failed",
        "reason": "Invalid",
        "details": {},
        "code": 422
    })
}

/// The optimistic-lock conflict of an update that lost a race.
pub fn conflict(name: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("Operation cannot be fulfilled on nodes \"{name}\": the object has been modified; please apply your changes to the latest version and try again"),
        "reason": "Conflict",
        "details": {"name": name, "kind": "nodes"},
        "code": 409
    })
}

/// A real validation error: the patched node is invalid, re-reading will not help.
pub fn node_invalid(name: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("Node \"{name}\" is invalid: spec.taints[1].effect: Unsupported value: \"Sometimes\""),
        "reason": "Invalid",
        "details": {
            "name": name,
            "kind": "Node",
            "causes": [{
                "reason": "FieldValueNotSupported",
                "message": "Unsupported value: \"Sometimes\"",
                "field": "spec.taints[1].effect"
            }]
        },
        "code": 422
    })
}

pub const FIELD_MANAGER_QUERY: &str = "fieldManager=taint-operator";
pub const JSON_PATCH: &str = "application/json-patch+json";
pub const MERGE_PATCH: &str = "application/merge-patch+json";
pub const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

impl ApiServerVerifier {
    pub fn new(handle: Handle<Request<Body>, Response<Body>>, nodes: &[Node]) -> Self {
        ApiServerVerifier {
            handle,
            nodes: nodes
                .iter()
                .map(|n| {
                    (
                        n.metadata.name.clone().expect("nodes have names"),
                        serde_json::to_value(n).expect("a node serializes"),
                    )
                })
                .collect(),
            early_events: Default::default(),
        }
    }

    /// The next request, whatever it is. Panics when the client is gone without sending one.
    pub async fn next_call(&mut self, expected: &str) -> Call {
        match self.try_next_call().await {
            Some(call) => call,
            None => panic!("expected {expected}, but the operator sent no further request"),
        }
    }

    /// The next request, or `None` once the operator's client is gone.
    pub async fn try_next_call(&mut self) -> Option<Call> {
        let (request, send) = self.handle.next_request().await?;
        let (parts, body) = request.into_parts();
        let bytes = body
            .collect_bytes()
            .await
            .expect("the request body can be read");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!(
                    "{} {}: body is not JSON ({e}): {}",
                    parts.method,
                    parts.uri,
                    String::from_utf8_lossy(&bytes)
                )
            })
        };
        Some(Call {
            method: parts.method,
            path: parts.uri.path().to_string(),
            query: parts.uri.query().map(str::to_string),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .map(|v| v.to_str().expect("an ASCII content type").to_string()),
            accept: parts
                .headers
                .get(http::header::ACCEPT)
                .map(|v| v.to_str().expect("an ASCII accept header").to_string()),
            body,
            send,
        })
    }

    /// The next request, which must have this method, path and query (`None`: no query).
    pub async fn expect(&mut self, method: Method, path: &str, query: Option<&str>) -> Call {
        let wanted = format!(
            "{method} {path}{}",
            query.map(|q| format!("?{q}")).unwrap_or_default()
        );
        let mut call = self.next_call(&wanted).await;
        while path != EVENTS_PATH && call.method == Method::POST && call.path == EVENTS_PATH {
            assert_eq!(call.content_type.as_deref(), Some("application/json"));
            let event = call.body.clone();
            call.reply(201, &event);
            self.early_events.push_back(event);
            call = self.next_call(&wanted).await;
        }
        assert_eq!(
            (&call.method, call.path.as_str(), call.query_pairs()),
            (&method, path, query_pairs(query)),
            "expected {wanted}, got {}",
            call.describe()
        );
        call
    }

    /// A JSON patch of node `name` with exactly `body`, sent with our field manager.
    /// The patch is applied to the server's copy of the node, which is answered.
    pub async fn expect_node_patch(&mut self, name: &str, body: Value) -> Value {
        let call = self.expect_node_patch_request(name, &body).await;
        let node = self.apply_node_patch(name, &call.body).unwrap_or_else(|e| {
            panic!("the patch does not apply to the server's copy of node {name}: {e}")
        });
        call.reply(200, &node);
        node
    }

    /// A JSON patch of node `name` with exactly `body`, not answered yet.
    pub async fn expect_node_patch_request(&mut self, name: &str, body: &Value) -> Call {
        let call = self
            .expect(
                Method::PATCH,
                &format!("/api/v1/nodes/{name}"),
                Some(FIELD_MANAGER_QUERY),
            )
            .await;
        assert_eq!(call.content_type.as_deref(), Some(JSON_PATCH));
        assert_eq!(call.accept.as_deref(), Some(PATCH_ANSWER));
        assert_eq!(
            &call.body, body,
            "node patch body\n got: {:#}\nwant: {:#}",
            call.body, body
        );
        call
    }

    /// Applies a JSON patch to the server's copy of node `name` as the API server
    /// would: all or nothing, and a new resourceVersion when it applied.
    pub fn apply_node_patch(&mut self, name: &str, patch: &Value) -> Result<Value, String> {
        let node = self
            .nodes
            .get_mut(name)
            .unwrap_or_else(|| panic!("the API server has no node {name}"));
        let patch: json_patch::Patch =
            serde_json::from_value(patch.clone()).map_err(|e| e.to_string())?;
        let mut patched = node.clone();
        json_patch::patch(&mut patched, &patch).map_err(|e| e.to_string())?;
        let rv: u64 = patched["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("numeric resourceVersion");
        patched["metadata"]["resourceVersion"] = Value::String((rv + 1).to_string());
        *node = patched.clone();
        Ok(patched)
    }

    /// A GET of node `name`, answered with the server's copy.
    pub async fn expect_node_get(&mut self, name: &str) {
        let call = self
            .expect(Method::GET, &format!("/api/v1/nodes/{name}"), None)
            .await;
        assert_eq!(call.body, Value::Null, "a GET has no body");
        let node = self.nodes[name].clone();
        call.reply(200, &node);
    }

    /// An event created through the events.k8s.io API; answered, and returned for
    /// the caller's assertions.
    pub async fn expect_event(&mut self) -> Value {
        if let Some(event) = self.early_events.pop_front() {
            return event;
        }
        let call = self.expect(Method::POST, EVENTS_PATH, None).await;
        assert_eq!(call.content_type.as_deref(), Some("application/json"));
        let event = call.body.clone();
        call.reply(201, &event);
        event
    }

    /// Waits until the operator's client is gone, failing on any request it still sends.
    pub async fn no_more_requests(mut self) {
        assert!(
            self.early_events.is_empty(),
            "unexpected events: {:?}",
            self.early_events
        );
        if let Some((request, _)) = self.handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            panic!(
                "unexpected request: {} {} {}",
                parts.method,
                parts.uri,
                String::from_utf8_lossy(&bytes)
            );
        }
    }
}

/// Checks an events.k8s.io/v1 Event the recorder created, field by field; the
/// generated name and eventTime are checked for shape only (they come from the wall clock).
pub fn assert_event(
    event: &Value,
    type_: &str,
    reason: &str,
    action: &str,
    note: &str,
    regarding: Value,
) {
    let regarding_name = regarding["name"]
        .as_str()
        .expect("regarding has a name")
        .to_string();
    let mut rest = event.clone();
    let meta = rest["metadata"]
        .as_object_mut()
        .expect("an event has metadata");
    let name = meta
        .remove("name")
        .and_then(|v| v.as_str().map(str::to_string))
        .expect("an event has a name");
    assert!(
        name.starts_with(&format!("{regarding_name}.")),
        "event name {name} should start with {regarding_name}."
    );
    let time = rest
        .as_object_mut()
        .expect("an event is an object")
        .remove("eventTime")
        .expect("an event has an eventTime");
    assert!(time.is_string(), "eventTime {time} should be a timestamp");
    assert_eq!(
        rest,
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {},
            "type": type_,
            "reason": reason,
            "action": action,
            "note": note,
            "regarding": regarding,
            "reportingController": "taint-operator",
            "reportingInstance": "test-replica",
        }),
        "event body"
    );
}
