//! TaintPolicy reconcile, inside the `nodetaint.io/cleanup` finalizer.
//!
//! Apply: make sure the status gets written (the status writer does the work).
//! Cleanup: remove the policy's owned taints and its ownership and bootstrap
//! entries from every node that has them, then let the policy go. A delete issued
//! while the operator was down is found here when it starts again.

use std::{sync::Arc, time::Duration};

use futures::{StreamExt, stream};
use kube::{
    Api, ResourceExt,
    runtime::{
        controller::Action,
        finalizer::{Event, finalizer},
    },
};
use taint_operator_crd::{FINALIZER, TaintPolicy};

use crate::{
    cache::node_cache::CachedNode,
    controller::context::Context,
    controller::error::{Error, Result},
    controller::node_reconciler::converge_node,
    telemetry::metrics::{ControllerLabel, ErrorLabels},
};
use engine::{policy::CompiledPolicy, policy_set::PolicySet};

pub const CONTROLLER: ControllerLabel = ControllerLabel {
    controller: "policy",
};
/// Nodes cleaned at once when a policy is deleted.
const CLEANUP_CONCURRENCY: usize = 16;

pub async fn reconcile_policy(policy: Arc<TaintPolicy>, ctx: Arc<Context>) -> Result<Action> {
    ctx.caches.wait_synced().await;
    ctx.metrics.reconciles.get_or_create(&CONTROLLER).inc();
    let started = std::time::Instant::now();
    let name = policy.name_any();
    let api: Api<TaintPolicy> = Api::all(ctx.client.clone());
    let result = finalizer(&api, FINALIZER, policy, |event| async {
        match event {
            Event::Apply(_) => {
                ctx.status_refresh.notify_one();
                Ok(Action::await_change())
            }
            Event::Cleanup(p) => cleanup(&ctx, &p).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => Error::Finalizer {
            policy: name,
            message: other.to_string(),
        },
    });
    ctx.metrics
        .reconcile_duration
        .get_or_create(&CONTROLLER)
        .observe(started.elapsed().as_secs_f64());
    result
}

pub fn error_policy(policy: Arc<TaintPolicy>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(policy = %policy.name_any(), error = %error, "policy reconcile failed");
    ctx.metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels {
            controller: CONTROLLER.controller,
            category: error.category(),
        })
        .inc();
    Action::requeue(Duration::from_secs(2))
}

/// True when the node records a taint, a completion or a drain of `policy`.
pub fn mentions(node: &CachedNode, policy: &str) -> bool {
    node.view.managed.iter().any(|(_, p)| p == policy)
        || node.view.bootstrapped.contains(policy)
        || node.view.drains.started(policy).is_some()
}

async fn cleanup(ctx: &Context, policy: &TaintPolicy) -> Result<Action> {
    let name = policy.name_any();
    tracing::info!(policy = %name, nodes = count_mentioning(ctx, &name), "policy deleted: cleaning its taints from nodes");
    // Once the policy watcher has seen the deletion, the node controller
    // re-evaluates every node and removes this policy's taints in the same single
    // write as any other change. Writing the same nodes here as well made the two
    // race: at 5,000 nodes, 4 of 5 cleanup writes lost to a conflict.
    let seen = wait_until(ctx.cleanup_grace.watcher, || deletion_seen(ctx, &name)).await;
    if seen {
        wait_while_falling(ctx.cleanup_grace.node_controller_stall, || {
            count_mentioning(ctx, &name)
        })
        .await;
    }
    // Whatever is left (the watcher lags, or the node controller could not write):
    // judge with this policy marked as being deleted, and write it here.
    let current = ctx.caches.policy_set();
    let others = current.policies.iter().filter(|p| p.name != name).cloned();
    let set = Arc::new(PolicySet::new(
        others.chain([CompiledPolicy::compile(policy)]),
    ));
    let nodes = nodes_mentioning(ctx, &name);
    if !nodes.is_empty() {
        tracing::info!(policy = %name, nodes = nodes.len(), "cleaning the remaining nodes");
    }
    let failures = stream::iter(nodes)
        .map(|n| {
            let set = set.clone();
            async move { converge_node(ctx, set, n).await }
        })
        .buffer_unordered(CLEANUP_CONCURRENCY)
        .filter(|r| futures::future::ready(r.is_err()))
        .count()
        .await;
    if failures > 0 {
        return Err(Error::CleanupPending {
            policy: name,
            remaining: failures,
        });
    }
    tracing::info!(policy = %name, "cleanup finished; removing finalizer");
    Ok(Action::await_change())
}

fn count_mentioning(ctx: &Context, policy: &str) -> usize {
    ctx.caches
        .nodes()
        .state()
        .iter()
        .filter(|n| mentions(n, policy))
        .count()
}

fn nodes_mentioning(ctx: &Context, policy: &str) -> Vec<CachedNode> {
    ctx.caches
        .nodes()
        .state()
        .iter()
        .filter(|n| mentions(n, policy))
        .map(|n| (**n).clone())
        .collect()
}

/// The compiled policy set knows the policy is being deleted (or has no such policy).
fn deletion_seen(ctx: &Context, policy: &str) -> bool {
    ctx.caches
        .policy_set()
        .policies
        .iter()
        .find(|p| p.name == policy)
        .is_none_or(|p| p.deleting)
}

/// Polls `remaining` until it is 0 (true), or until it has not fallen for
/// `stall` (false).
async fn wait_while_falling(stall: Duration, mut remaining: impl FnMut() -> usize) -> bool {
    let mut lowest = remaining();
    let mut fell_at = tokio::time::Instant::now();
    loop {
        if lowest == 0 {
            return true;
        }
        if tokio::time::Instant::now().duration_since(fell_at) >= stall {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = remaining();
        if now < lowest {
            lowest = now;
            fell_at = tokio::time::Instant::now();
        }
    }
}

/// Polls `done` until it holds or `limit` has passed; says whether it held.
async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn cleanup_waits_for_the_node_controller_as_long_as_it_makes_progress() {
        // 10 nodes, one cleaned every 10 s: 100 s in all, far past the 15 s stall
        let start = tokio::time::Instant::now();
        let left =
            |from: usize| move || from.saturating_sub((start.elapsed().as_secs() / 10) as usize);
        assert!(wait_while_falling(Duration::from_secs(15), left(10)).await);
        assert_eq!(start.elapsed().as_secs(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn cleanup_takes_over_when_the_count_stops_falling() {
        let start = tokio::time::Instant::now();
        // falls to 3 after 2 s, then stays: given up 15 s after that fall
        let stuck = || {
            if start.elapsed() < Duration::from_secs(2) {
                5
            } else {
                3
            }
        };
        assert!(!wait_while_falling(Duration::from_secs(15), stuck).await);
        assert_eq!(start.elapsed().as_secs(), 17);
        // a count that goes up (a node re-tainted meanwhile) is no progress either
        let start = tokio::time::Instant::now();
        let rising = || 4 + (start.elapsed().as_secs() / 5) as usize;
        assert!(!wait_while_falling(Duration::from_secs(15), rising).await);
        assert_eq!(start.elapsed().as_secs(), 15);
    }
}
