//! The safety net under the watches: every so often, every cached node is planned
//! again. A converged cluster costs nothing (a plan that changes nothing writes
//! nothing); a node that a lost or misordered event left wrong is corrected, and
//! counted in `taint_operator_resync_corrections_total`, which should stay 0.

use std::{sync::Arc, time::Duration};

use crate::{
    controller::{context::Context, node_queue::NodeQueue},
    jitter::jitter,
};

/// Queues every cached node each `interval` (±10%, so replicas and restarts do not
/// line up), once the caches have synced. Runs until the queue's owner stops it.
pub async fn resync_nodes(ctx: Arc<Context>, queue: Arc<NodeQueue>, interval: Duration) {
    if interval.is_zero() {
        return;
    }
    ctx.wait_synced().await;
    loop {
        tokio::time::sleep(jitter(interval, 0.1)).await;
        let nodes = ctx.nodes.state();
        ctx.metrics.resyncs.inc();
        tracing::debug!(nodes = nodes.len(), "periodic resync");
        for node in nodes {
            queue.touch_resync(node.name());
        }
    }
}
