//! Until when this replica may write to the cluster.
//!
//! A leader that stops renewing loses the Lease `duration` after its last renewal
//! went out, and stops itself after `renew_deadline`. Between those moments another
//! replica cannot have taken over, so writes are safe until the renew deadline. But
//! a process that was frozen (SIGSTOP, a stalled VM, a long GC pause elsewhere)
//! wakes with every timer due at once: the task that would notice the lost Lease
//! may run after a reconcile that sends a patch. The fence closes by the clock
//! alone, so every write checks it just before it goes out, whatever ran first.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

// Tokio's clock: the system's monotonic clock, which keeps running while the
// process is stopped; and tests can pause it.
use tokio::time::Instant;

const ALWAYS: u64 = u64::MAX;

/// Shared by the leader election, which moves it, and every writer, which reads it.
#[derive(Debug, Clone)]
pub struct WriteFence(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    base: Instant,
    /// Milliseconds after `base` until which writes may go out; `ALWAYS` when no
    /// election runs, 0 when closed.
    until: AtomicU64,
}

impl Default for WriteFence {
    /// Open for good: a replica without leader election is the only writer.
    fn default() -> Self {
        WriteFence::with(ALWAYS)
    }
}

impl WriteFence {
    fn with(until: u64) -> Self {
        WriteFence(Arc::new(Inner {
            base: Instant::now(),
            until: AtomicU64::new(until),
        }))
    }

    /// Closed until the Lease is acquired.
    pub fn closed() -> Self {
        WriteFence::with(0)
    }

    /// Writes may go out until `until` (a renewal's send time plus the renew deadline).
    pub fn open_until(&self, until: Instant) {
        let ms = until.saturating_duration_since(self.0.base).as_millis() as u64;
        self.0.until.store(ms.min(ALWAYS - 1), Ordering::Release);
    }

    pub fn close(&self) {
        self.0.until.store(0, Ordering::Release);
    }

    /// Whether a write may go out now.
    pub fn is_open(&self) -> bool {
        let until = self.0.until.load(Ordering::Acquire);
        until == ALWAYS || (self.0.base.elapsed().as_millis() as u64) < until
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_fence_closes_by_the_clock_alone() {
        let fence = WriteFence::closed();
        assert!(!fence.is_open());
        fence.open_until(Instant::now() + Duration::from_secs(10));
        assert!(fence.is_open());
        // Frozen for 11 s: nothing ran, and the fence is shut anyway.
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(!fence.is_open());
        fence.open_until(Instant::now() + Duration::from_secs(10));
        fence.close();
        assert!(!fence.is_open());
    }

    #[tokio::test(start_paused = true)]
    async fn without_an_election_it_stays_open() {
        let fence = WriteFence::default();
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(fence.is_open());
    }
}
