//! The changes a phase sends to every node at once: a node condition flipped, or a
//! node's critical pods made Ready; each returns when every node's change went out.

use std::time::Instant;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::{
    Error, Result,
    model::{Critical, Flipped, node_name},
    setup::pod_name,
};

/// When each node's condition flip was sent and when the API server answered it.
pub(crate) struct Flips {
    pub(crate) sent: Vec<Option<Instant>>,
    pub(crate) answered: Vec<Option<Instant>>,
}

/// Flips the `flipped` condition on every node to `status` (strategic merge on the
/// status subresource), in node order; returns when each node's request was sent
/// and answered.
pub(crate) async fn flip_condition(
    client: &Client,
    n: usize,
    concurrency: usize,
    flipped: Flipped,
    status: &str,
    reason: &str,
) -> Result<Flips> {
    let api: Api<Node> = Api::all(client.clone());
    let now = Timestamp::now().to_string();
    let mut flips = Flips {
        sent: vec![None; n],
        answered: vec![None; n],
    };
    let results: Vec<(usize, Instant, Instant)> = stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let cond = flipped.condition(i);
            let patch = json!({"status": {"conditions": [{
                "type": cond, "status": status, "reason": reason,
                "message": "set by the scale benchmark",
                "lastTransitionTime": now, "lastHeartbeatTime": now}]}});
            async move {
                let t = Instant::now();
                api.patch_status(
                    &node_name(i),
                    &PatchParams::default(),
                    &Patch::Strategic(patch),
                )
                .await
                .map_err(|e| format!("flip {cond} on {}: {e}", node_name(i)))?;
                Ok::<_, Error>((i, t, Instant::now()))
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    for (i, sent, answered) in results {
        flips.sent[i] = Some(sent);
        flips.answered[i] = Some(answered);
    }
    Ok(flips)
}

/// Marks every critical pod Ready; a node's change time is when its first pod
/// patch was sent (its pods are patched together).
pub(crate) async fn ready_critical_pods(
    client: &Client,
    ns: &str,
    n: usize,
    critical: &Critical,
    concurrency: usize,
) -> Result<Vec<Option<Instant>>> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let now = Timestamp::now().to_string();
    let per_node = critical.per_node.max(1);
    let mut changes = vec![None; n];
    let results: Vec<(usize, Instant)> = stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let now = now.clone();
            async move {
                let t = Instant::now();
                futures::future::try_join_all((0..critical.per_node).map(|j| {
                    let api = api.clone();
                    let patch = json!({"status": {
                        "conditions": [
                            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                            {"type": "Ready", "status": "True", "lastTransitionTime": now}],
                        "containerStatuses": [{"name": "main", "ready": true}]}});
                    async move {
                        api.patch_status(
                            &pod_name(i, j),
                            &PatchParams::default(),
                            &Patch::Strategic(patch),
                        )
                        .await
                        .map_err(|e| format!("mark pod {} Ready: {e}", pod_name(i, j)))
                    }
                }))
                .await?;
                Ok::<_, Error>((i, t))
            }
        })
        .buffer_unordered((concurrency / per_node).max(1))
        .try_collect()
        .await?;
    for (i, t) in results {
        changes[i] = Some(t);
    }
    Ok(changes)
}
