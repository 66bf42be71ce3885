//! The safety net under the watches: every so often, every cached node is planned
//! again. A converged cluster costs no write (a plan that changes nothing writes
//! nothing) and little CPU: a node whose node version, policies and pods are those
//! its last plan found nothing to do on is skipped (`cache::settled`). A node that
//! a lost or misordered event left wrong is corrected, and counted in
//! `taint_operator_resync_corrections_total`, which should stay 0.
//!
//! A pass is spread over half the interval and feeds the queue only while no
//! change is waiting for a worker: queued all at once, 15,000 resync entries stood
//! in front of every node that changed in the next minutes.

use std::{sync::Arc, time::Duration};

use crate::{
    controller::{context::Context, node_queue::NodeQueue},
    jitter::jitter,
};

/// How often a pass hands the queue its next batch of nodes.
const BATCH_EVERY: Duration = Duration::from_millis(100);

/// Queues every cached node each `interval` (±10%, so replicas and restarts do not
/// line up), once the caches have synced. Runs until the queue's owner stops it.
pub async fn resync_nodes(ctx: Arc<Context>, queue: Arc<NodeQueue>, interval: Duration) {
    if interval.is_zero() {
        return;
    }
    ctx.caches.wait_synced().await;
    loop {
        tokio::time::sleep(jitter(interval, 0.1)).await;
        // Names, not nodes: a pass holding the nodes would keep every version it
        // outlives in memory until it ends.
        let names: Vec<Box<str>> = ctx
            .caches
            .nodes()
            .state()
            .iter()
            .map(|n| n.name().into())
            .collect();
        ctx.metrics.resyncs.inc();
        tracing::debug!(nodes = names.len(), "periodic resync");
        spread_pass(&queue, names, interval / 2).await;
    }
}

/// Queues `names` for a resync in batches every `BATCH_EVERY`, so that the pass
/// takes about `over`. A batch waits while nodes queued by changes wait for a
/// worker: the resync takes the workers' idle time, never a changed node's turn.
pub async fn spread_pass(queue: &NodeQueue, names: Vec<Box<str>>, over: Duration) {
    let batches = (over.as_millis() / BATCH_EVERY.as_millis()).max(1) as usize;
    let batch = names.len().div_ceil(batches).max(1);
    let mut next = tokio::time::Instant::now();
    for chunk in names.chunks(batch) {
        tokio::time::sleep_until(next).await;
        while queue.waiting() > 0 {
            tokio::time::sleep(BATCH_EVERY).await;
        }
        for name in chunk {
            queue.touch_resync(name);
        }
        next += BATCH_EVERY;
    }
}
