//! The safety net under the watches: every so often, every cached node is planned
//! again. A converged cluster costs nothing (a plan that changes nothing writes
//! nothing); a node that a lost or misordered event left wrong is corrected, and
//! counted in `taint_operator_resync_corrections_total`, which should stay 0.

use std::{
    hash::{BuildHasher, RandomState},
    sync::Arc,
    time::Duration,
};

use crate::controller::{context::Context, node_queue::NodeQueue};

/// The default time between resyncs.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);

/// Queues every cached node each `interval` (±10%, so replicas and restarts do not
/// line up), once the caches have synced. Runs until the queue's owner stops it.
pub async fn resync_nodes(ctx: Arc<Context>, queue: Arc<NodeQueue>, interval: Duration) {
    if interval.is_zero() {
        return;
    }
    ctx.wait_synced().await;
    loop {
        tokio::time::sleep(jittered(interval)).await;
        let nodes = ctx.nodes.state();
        ctx.metrics.resyncs.inc();
        tracing::debug!(nodes = nodes.len(), "periodic resync");
        for node in nodes {
            queue.touch_resync(node.name());
        }
    }
}

/// `interval` scaled by a random factor in [0.9, 1.1).
fn jittered(interval: Duration) -> Duration {
    let random = RandomState::new().hash_one(std::time::Instant::now());
    interval.mul_f64(0.9 + 0.2 * (random as f64 / u64::MAX as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitter_stays_within_ten_percent() {
        let base = Duration::from_secs(300);
        let waits: Vec<Duration> = (0..200).map(|_| jittered(base)).collect();
        assert!(
            waits
                .iter()
                .all(|w| *w >= base.mul_f64(0.9) && *w < base.mul_f64(1.1))
        );
        // Not one fixed value: replicas would resync in lockstep.
        assert!(waits.iter().any(|w| *w != waits[0]));
    }
}
