//! The watches that feed the controller: nodes into the node cache and the node
//! queue, policies into the compiled policy set, and the gate that opens once
//! policies, nodes and the critical pods they need have all listed (node
//! reconciles may start before the node list is done: see
//! `Caches::wait_plannable`).

use std::{collections::HashSet, sync::Arc, time::Duration};

use futures::{Stream, StreamExt};
use kube::{
    Api, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::store::Writer,
        watcher::{self, Event},
    },
};
use taint_operator_crd::TaintPolicy;
use tokio::sync::{mpsc, watch};

use crate::{
    cache::{
        initial_list::{InitialLists, watch_with_initial_list},
        node_cache::WatchedNode,
        watch::{RestartCounter, WatchBackoff, node_list_pages, relist_at_once},
    },
    controller::{context::Context, node_queue::NodeQueue, write_tracking::Brought},
};
use engine::policy_set::PolicySet;

/// Queues the nodes the watches name, and every cached node when the policies change.
pub async fn feed_node_queue(
    ctx: Arc<Context>,
    queue: Arc<NodeQueue>,
    mut changed: mpsc::UnboundedReceiver<String>,
    mut all: mpsc::UnboundedReceiver<()>,
) {
    loop {
        tokio::select! {
            Some(node) = changed.recv() => queue.touch(&node),
            Some(()) = all.recv() => {
                for node in ctx.caches.nodes().state() {
                    queue.touch(node.name());
                }
            }
            else => return,
        }
    }
}

/// Fills the node cache, names every touched node to the node queue, and records
/// when the first full list is in.
pub async fn drive_nodes(
    ctx: Arc<Context>,
    api: Api<WatchedNode>,
    lists: Arc<InitialLists>,
    touched: mpsc::UnboundedSender<String>,
) {
    let events = relist_at_once(watch_with_initial_list(api, node_list_pages(), lists))
        .backoff(WatchBackoff::default());
    follow_nodes(ctx, events, touched).await
}

/// [`drive_nodes`] over any stream of node watch events.
///
/// Every node goes into the node cache as it comes, a list's as much as a watch
/// event's, and is queued only once the cache holds the version its event brought:
/// a reconcile plans on what the cache has. So a cold start's first nodes are
/// planned (see [`crate::controller::caches::Caches::wait_plannable`]) while the rest are still on the wire,
/// and after a relist (the API server restarted, or a watch expired with 410
/// Gone) no node is planned on the version it had before. When a list is done,
/// the cached nodes it did not bring are gone from the cluster and leave the cache.
/// Nothing else is replaced then: a node written since its list entry keeps the
/// version the write's echo brings.
pub async fn follow_nodes<S>(ctx: Arc<Context>, events: S, touched: mpsc::UnboundedSender<String>)
where
    S: Stream<Item = Result<Event<WatchedNode>, watcher::Error>> + Send,
{
    let mut stream = std::pin::pin!(events);
    // The cached nodes a list in progress has not brought (yet).
    let mut unlisted: HashSet<String> = HashSet::new();
    let mut listed = 0usize;
    let mut list_started = std::time::Instant::now();
    let mut restarts = RestartCounter::new("nodes");
    while let Some(event) = stream.next().await {
        restarts.observe(&ctx.metrics, &event);
        if event.is_ok() {
            ctx.health.node_watch.delivered();
        }
        let node = match event {
            Ok(Event::Apply(n)) => {
                // A node the cache has not seen, after the first list: a node joining.
                if ctx.caches.nodes_listed() && ctx.caches.nodes().get(n.node.name()).is_none() {
                    ctx.metrics.nodes_joined.inc();
                }
                n.node
            }
            Ok(Event::InitApply(n)) => {
                unlisted.remove(n.node.name());
                listed += 1;
                n.node
            }
            // A deleted node needs nothing from us; the cap ledger forgets it by itself.
            Ok(Event::Delete(n)) => {
                ctx.caches.nodes().delete(n.node.name());
                ctx.writes.node_seen(n.node.name());
                continue;
            }
            Ok(Event::Init) => {
                unlisted = ctx.caches.nodes().names();
                listed = 0;
                list_started = std::time::Instant::now();
                continue;
            }
            Ok(Event::InitDone) => {
                for gone in std::mem::take(&mut unlisted) {
                    ctx.caches.nodes().delete(&gone);
                    ctx.writes.node_seen(&gone);
                }
                ctx.caches.nodes().shrink_to_fit();
                ctx.caches.mark_nodes_listed();
                tracing::info!(
                    nodes = listed,
                    seconds = list_started.elapsed().as_secs_f64(),
                    "listed nodes"
                );
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "node watch failed; retrying");
                ctx.health.node_watch.failed();
                continue;
            }
        };
        let node = ctx.caches.nodes().apply(node);
        if ctx.writes.watch_brought(&node) != Brought::Change {
            continue;
        }
        let name = node.name().to_string();
        ctx.writes.node_seen(&name);
        if touched.send(name).is_err() {
            return;
        }
    }
}

/// Keeps the compiled policy set current. Only changes that matter to decisions
/// (a new, edited or deleted policy) re-evaluate nodes; our own status writes do not.
pub async fn watch_policies(
    ctx: Arc<Context>,
    writer: Writer<TaintPolicy>,
    all_nodes: mpsc::UnboundedSender<()>,
) {
    let api: Api<TaintPolicy> = Api::all(ctx.client.clone());
    let mut stream = relist_at_once(watcher::watcher(api, watcher::Config::default()))
        .backoff(WatchBackoff::default())
        .reflect(writer)
        .boxed();
    let mut last: Option<Vec<(String, Option<i64>, bool)>> = None;
    let mut restarts = RestartCounter::new("taintpolicies");
    while let Some(event) = stream.next().await {
        restarts.observe(&ctx.metrics, &event);
        if event.is_ok() {
            ctx.health.policy_watch.delivered();
        }
        match event {
            Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => {
                let policies = ctx.caches.policies().state();
                let mut signature: Vec<_> = policies
                    .iter()
                    .map(|p| {
                        (
                            p.uid().unwrap_or_default(),
                            p.metadata.generation,
                            p.metadata.deletion_timestamp.is_some(),
                        )
                    })
                    .collect();
                signature.sort();
                if last.as_ref() == Some(&signature) {
                    continue;
                }
                last = Some(signature);
                let set = PolicySet::from_resources(policies.iter().map(|p| p.as_ref()));
                ctx.ledgers.caps().forget_uncapped(&set);
                ctx.ledgers.drains().forget_gone(&set);
                ctx.caches.pod_watches().update(&set);
                ctx.caches.set_policy_set(set);
                // Only now: node workers may start as soon as this says the
                // policies are in, and must not plan on the empty set before.
                ctx.caches.mark_policies_listed();
                let _ = all_nodes.send(());
                ctx.status_refresh.notify_one();
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "policy watch failed; retrying");
                ctx.health.policy_watch.failed();
            }
        }
    }
}

/// Opens the gate once policies, nodes and every needed pod watch have listed.
/// (It reads flags set by our own watch tasks rather than awaiting the stores:
/// a store's readiness wakes only one waiter.)
pub async fn sync_gate(ctx: Arc<Context>, synced: watch::Sender<bool>) {
    while !(ctx.caches.policies_listed()
        && ctx.caches.nodes_listed()
        && ctx
            .caches
            .pod_watches()
            .synced_for(&ctx.caches.policy_set()))
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::info!(
        nodes = ctx.caches.nodes().state().len(),
        policies = ctx.caches.policies().state().len(),
        "caches synced"
    );
    crate::memory::release_free_memory();
    let _ = synced.send(true);
}
