//! Writes a node plan as ONE JSON patch: the new taint list and our annotations
//! together, guarded by a `test` of `metadata.resourceVersion`.
//!
//! `spec.taints` is an atomic list, so a merge or apply patch would overwrite taints
//! that kubelet, the node lifecycle controller or an admin added since we read the
//! node. The `test` makes the API server refuse the patch if the node changed at all;
//! we then re-read, re-plan and try again, so no one's update is ever lost.
//!
//! The answer (the whole node) is asked for in protobuf: the API server encodes
//! it for this one patch, and for a kubelet's node protobuf costs it a fraction
//! of JSON (`node_proto`). A server that answers JSON is read as JSON.

use std::time::Duration;

use http::{HeaderValue, header};
use http_body_util::BodyExt;
use kube::{
    Client, Resource,
    api::{Api, Patch, PatchParams},
    client::Body,
};
use serde_json::{Value, json};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, DRAIN_STARTED_ANNOTATION, FIELD_MANAGER, MANAGED_TAINTS_ANNOTATION,
};

use crate::{
    cache::{
        k8s_proto::{is_protobuf, read_error, refusal},
        node_cache::{CachedNode, WatchedNode},
        node_proto::decode_node,
    },
    controller::error::{Error, Result},
    telemetry::metrics::Metrics,
    write_fence::WriteFence,
};
use engine::{node_decision::Decision, node_plan::NodePlan};

pub const MAX_ATTEMPTS: u32 = 6;

/// What a node patch asks its answer in: protobuf, else JSON.
pub const PATCH_ANSWER: &str = "application/vnd.kubernetes.protobuf, application/json";

/// The JSON patch taking `current` to `plan`, or `None` when nothing changes.
pub fn build_patch(current: &CachedNode, plan: &NodePlan) -> Option<Value> {
    let mut ops = Vec::new();
    if current.taints() != plan.taints.as_slice() {
        if plan.taints.is_empty() {
            ops.push(json!({"op": "remove", "path": "/spec/taints"}));
        } else {
            // `add` replaces the member when it exists, and creates it when it does not.
            ops.push(json!({"op": "add", "path": "/spec/taints", "value": plan.taints}));
        }
    }
    let annotations = &current.annotations;
    let wanted = [
        (MANAGED_TAINTS_ANNOTATION, plan.managed.to_annotation()),
        (BOOTSTRAPPED_ANNOTATION, plan.bootstrapped.to_annotation()),
        (DRAIN_STARTED_ANNOTATION, plan.drains.to_annotation()),
    ];
    let mut annotation_ops = Vec::new();
    let mut new_map = serde_json::Map::new();
    for (key, value) in wanted {
        let have = annotations.get(key);
        let path = format!(
            "/metadata/annotations/{}",
            key.replace('~', "~0").replace('/', "~1")
        );
        match (have, value) {
            (Some(h), Some(v)) if h == v => {}
            (_, Some(v)) => {
                annotation_ops.push(json!({"op": "add", "path": path, "value": v}));
                new_map.insert(key.to_string(), Value::String(v));
            }
            (Some(_), None) => annotation_ops.push(json!({"op": "remove", "path": path})),
            (None, None) => {}
        }
    }
    if !annotations.any && !new_map.is_empty() {
        // A node without any annotation has no map to add a member to.
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": new_map}));
    } else {
        ops.extend(annotation_ops);
    }
    if ops.is_empty() {
        return None;
    }
    let rv = current.resource_version().unwrap_or_default();
    ops.insert(
        0,
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
    );
    Some(Value::Array(ops))
}

/// What planning a node decided: the plan to write, with whatever else the
/// planner worked out alongside it (when to look again).
pub trait Decided {
    fn plan(&self) -> &NodePlan;
}

impl Decided for NodePlan {
    fn plan(&self) -> &NodePlan {
        self
    }
}

impl Decided for Decision {
    fn plan(&self) -> &NodePlan {
        &self.plan
    }
}

/// A write that happened: the node as the API server returned it.
pub struct Written {
    pub node: CachedNode,
    /// The resourceVersion the write was guarded by (the node it changed).
    pub base_resource_version: String,
}

/// True for the API server's answers to a patch whose `test` failed or that lost a race.
///
/// kube-apiserver answers a JSON patch it cannot apply, a failed `test` included,
/// with a 422 whose message is only "the server rejected our request due to an
/// error in our request" and which names no field (apiserver's `patch.go`). A node
/// that fails validation is a 422 too, but one whose causes name the fields: that
/// one re-reading cannot fix.
pub fn is_conflict(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => {
            status.code == 409
                || (status.code == 422
                    && status.details.as_ref().is_none_or(|d| d.causes.is_empty()))
        }
        _ => false,
    }
}

/// Plans against `node` with `replan` and writes the result, re-reading and
/// re-planning on conflicts. Returns the last decision, and the write (`None` when
/// that decision changes nothing).
pub async fn write_node<D: Decided>(
    api: &Api<WatchedNode>,
    metrics: &Metrics,
    fence: &WriteFence,
    mut node: CachedNode,
    replan: impl Fn(&CachedNode) -> D,
) -> Result<(D, Option<Written>)> {
    let name = node.name().to_string();
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    for attempt in 0..MAX_ATTEMPTS {
        let decided = replan(&node);
        let Some(patch) = build_patch(&node, decided.plan()) else {
            return Ok((decided, None));
        };
        let patch: json_patch::Patch =
            serde_json::from_value(patch).expect("build_patch writes valid JSON patches");
        // Checked last, just before the request goes out: see `write_fence`.
        if !fence.is_open() {
            return Err(Error::NotLeading {
                object: format!("node {name}"),
            });
        }
        metrics.node_writes.inc();
        let sent = std::time::Instant::now();
        let answer = patch_node(api.clone().into_client(), &name, &params, patch).await;
        metrics
            .node_write_duration
            .observe(sent.elapsed().as_secs_f64());
        match answer {
            Ok(written) => {
                let written = Written {
                    node: written.node,
                    base_resource_version: node.resource_version().unwrap_or_default().to_string(),
                };
                return Ok((decided, Some(written)));
            }
            Err(e) if is_conflict(&e) => {
                metrics.node_write_conflicts.inc();
                tracing::debug!(node = %name, attempt, "node changed meanwhile; re-reading");
                tokio::time::sleep(backoff(attempt)).await;
                node = api
                    .get(&name)
                    .await
                    .map_err(|e| Error::kube(format!("get node {name}"), e))?
                    .node;
            }
            Err(e) => return Err(Error::kube(format!("patch node {name}"), e)),
        }
    }
    Err(Error::ConflictRetriesExhausted {
        node: name,
        attempts: MAX_ATTEMPTS,
    })
}

/// Sends one JSON patch of node `name` and reads its answer, protobuf or JSON.
async fn patch_node(
    client: Client,
    name: &str,
    params: &PatchParams,
    patch: json_patch::Patch,
) -> std::result::Result<WatchedNode, kube::Error> {
    let mut request = kube::core::Request::new(WatchedNode::url_path(&(), None))
        .patch(name, params, &Patch::Json::<()>(patch))
        .map_err(kube::Error::BuildRequest)?
        .map(Body::from);
    request
        .headers_mut()
        .insert(header::ACCEPT, HeaderValue::from_static(PATCH_ANSWER));
    let response = client.send(request).await?;
    let code = response.status();
    let protobuf = is_protobuf(response.headers().get(header::CONTENT_TYPE));
    let body = response.into_body().collect().await?.to_bytes();
    if !code.is_success() {
        return Err(kube::Error::Api(Box::new(refusal(code.as_u16(), &body))));
    }
    if protobuf {
        decode_node(&body)
            .map_err(|e| read_error(format!("the answer to the patch of node {name}: {e}")))
    } else {
        serde_json::from_slice(&body).map_err(kube::Error::SerdeError)
    }
}

fn backoff(attempt: u32) -> Duration {
    // 10, 20, 40, 80, 160 ms: conflicts with kubelet clear within one status update.
    Duration::from_millis(10 << attempt.min(6))
}
