//! A policy's status from its summary, and the status writer that keeps every
//! policy's status current without writing when nothing changed.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType},
};
use serde_json::json;
use taint_operator_crd::{FIELD_MANAGER, TaintPolicy, TaintPolicyStatus};

use crate::{
    controller::context::Context,
    controller::error::{Error, Result},
    telemetry::metrics::PolicyReport,
};
use engine::{
    cluster::NodeView,
    cluster_plan::{PolicySummary, Reason, plan_cluster_refs},
    node_plan::UnknownPolicies,
};

pub const MAX_NODE_NAMES: usize = 100;

/// The status `policy` should have. `lastTransitionTime` moves only when the
/// Ready status itself changes.
pub fn desired_status(
    policy: &TaintPolicy,
    summary: &PolicySummary,
    now: Timestamp,
) -> TaintPolicyStatus {
    let status = if summary.ready { "True" } else { "False" };
    let previous = policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    let last_transition_time = match previous {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(now.round(k8s_openapi::jiff::Unit::Second).unwrap_or(now)),
    };
    TaintPolicyStatus {
        observed_generation: policy.metadata.generation,
        taints: Some(
            policy
                .spec
                .taints
                .iter()
                .map(|t| t.display())
                .collect::<Vec<_>>()
                .join(","),
        ),
        selected_nodes: summary.selected_nodes as i32,
        tainted_nodes: summary.tainted_nodes as i32,
        pending_nodes: summary.pending_nodes as i32,
        draining_nodes: summary.draining_nodes as i32,
        tainted_node_names: summary
            .tainted_node_names
            .iter()
            .take(MAX_NODE_NAMES)
            .cloned()
            .collect(),
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: summary.reason.as_str().into(),
            message: summary.message.clone(),
            observed_generation: policy.metadata.generation,
            last_transition_time,
        }],
    }
}

/// Patches the status subresource when it differs. Returns whether it wrote.
pub async fn write_status(
    ctx: &Context,
    policy: &TaintPolicy,
    summary: &PolicySummary,
) -> Result<bool> {
    let desired = desired_status(policy, summary, (ctx.clock)());
    if policy.status.as_ref() == Some(&desired) {
        return Ok(false);
    }
    let name = policy.name_any();
    // A status is a write like a node's: a frozen leader that woke past its renew
    // deadline must not overwrite what its successor reported.
    if !ctx.fence.is_open() {
        return Err(Error::NotLeading {
            object: format!("taintpolicy {name} status"),
        });
    }
    let api: Api<TaintPolicy> = Api::all(ctx.client.clone());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    api.patch_status(&name, &params, &Patch::Merge(json!({ "status": desired })))
        .await
        .map_err(|e| Error::kube(format!("patch status of taintpolicy {name}"), e))?;
    ctx.metrics.status_writes.inc();
    let old_reason = policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.reason.as_str());
    if matches!(summary.reason, Reason::InvalidSpec | Reason::Conflict)
        && old_reason != Some(summary.reason.as_str())
    {
        warn_on_policy(ctx, policy, summary).await;
    }
    Ok(true)
}

async fn warn_on_policy(ctx: &Context, policy: &TaintPolicy, summary: &PolicySummary) {
    tracing::warn!(policy = %policy.name_any(), reason = summary.reason.as_str(), message = %summary.message, "policy cannot be applied as written");
    let event = Event {
        type_: EventType::Warning,
        reason: summary.reason.as_str().into(),
        note: Some(summary.message.chars().take(1000).collect()),
        action: "Evaluate".into(),
        secondary: None,
    };
    if let Err(e) = ctx.events.publish(&event, &policy.object_ref(&())).await {
        tracing::warn!(policy = %policy.name_any(), error = %e, "could not publish event");
    }
}

/// Recomputes every policy's summary from the caches and writes the statuses that changed.
pub async fn refresh_all(ctx: &Context) -> Result<()> {
    let set = ctx.caches.policy_set();
    let started = std::time::Instant::now();
    let plan = {
        // The cached views as they are: a status run copies no node.
        let cached = ctx.caches.nodes().state();
        let nodes: Vec<&NodeView> = cached.iter().map(|n| &n.view).collect();
        let pods = ctx.caches.pods();
        plan_cluster_refs(
            &set,
            &nodes,
            pods.index(),
            (ctx.clock)(),
            UnknownPolicies::Remove,
        )
    };
    ctx.metrics
        .status_computation
        .observe(started.elapsed().as_secs_f64());
    let mut first_error = None;
    let mut reports = Vec::with_capacity(plan.policies.len());
    let mut to_write = Vec::with_capacity(plan.policies.len());
    for summary in &plan.policies {
        let Some(policy) = ctx
            .caches
            .policies()
            .state()
            .into_iter()
            .find(|p| p.name_any() == summary.name)
        else {
            continue;
        };
        // A policy being deleted is going away: its series go with it.
        if policy.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // The gauges say what the status says, computed from the same summary.
        reports.push(PolicyReport {
            policy: summary.name.clone(),
            tainted_nodes: summary.tainted_nodes,
            pending_nodes: summary.pending_nodes,
            draining_nodes: summary.draining_nodes,
            ready: summary.ready,
        });
        to_write.push((policy, summary));
    }
    ctx.metrics.report_policies(&reports);
    for (policy, summary) in to_write {
        if let Err(e) = write_status(ctx, &policy, summary).await {
            tracing::warn!(policy = %summary.name, error = %e, "status write failed");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The shortest wait between a node change and the status computation it wakes.
const MIN_PAUSE: Duration = Duration::from_millis(300);
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// A computation covers every node: at thousands of nodes under constant change,
/// recomputing every 300 ms would keep a core busy. Waiting forty times as long as
/// the last one took bounds the status writer to about a fortieth of a core: at
/// 5,000 nodes a fleet-wide change refreshes the statuses about once a second, and
/// the CPU goes to the node writes (and the API server that takes them) instead.
fn pause_after(took: Duration) -> Duration {
    (took * 40).clamp(MIN_PAUSE, MAX_PAUSE)
}

/// Keeps statuses current: woken by reconciles, it waits a moment so a burst of
/// node changes becomes one computation, and retries failed writes.
pub async fn run_status_writer(ctx: Arc<Context>) {
    ctx.caches.wait_synced().await;
    let mut pause = MIN_PAUSE;
    loop {
        ctx.status_refresh.notified().await;
        tokio::time::sleep(pause).await;
        let started = std::time::Instant::now();
        let result = refresh_all(&ctx).await;
        pause = pause_after(started.elapsed());
        crate::memory::release_free_memory();
        if result.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            ctx.status_refresh.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_follows_the_cost_of_a_computation_within_bounds() {
        assert_eq!(pause_after(Duration::from_millis(2)), MIN_PAUSE);
        assert_eq!(
            pause_after(Duration::from_millis(30)),
            Duration::from_millis(1200)
        );
        assert_eq!(pause_after(Duration::from_millis(200)), MAX_PAUSE);
    }
}
