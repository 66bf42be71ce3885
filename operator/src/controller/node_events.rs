//! Node events: queued by reconciles, published by one task after the node writes
//! they explain.
//!
//! Every node write is explained by an event, and an event costs the API server
//! about what a node write does (an etcd write). During a fleet-wide change the
//! events would double the requests the writes compete with, so they wait until
//! the writes are done: the publisher sends only once no node write has been
//! pending for `QUIET`, or when an event has waited `MAX_DEFERRAL`, so a cluster
//! that never goes quiet still gets its events. On shutdown the queue is sent at
//! once (`WriteActivity::stop`, `EventQueue::drain`): a replica stopped right
//! after a write would otherwise take that write's explanation with it.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, Recorder, Reporter},
};
use tokio::{
    sync::{Notify, mpsc},
    time::Instant,
};

/// Events waiting to be published. A full queue drops events (with a warning)
/// rather than slow down node writes.
const QUEUE: usize = 16384;
/// Events published at once.
const IN_FLIGHT: usize = 8;
/// How long node writes must have been idle before events go out. Half a second
/// was too short: at 5,000 nodes the workers sometimes drain the queue for that long
/// in the middle of a fleet-wide change, and thousands of events went out then.
pub const DEFAULT_QUIET: Duration = Duration::from_secs(2);
/// The longest an event waits for the node writes to go quiet.
pub const MAX_DEFERRAL: Duration = Duration::from_secs(60);

/// Counts the nodes queued for or in a reconcile (kept by `node_queue`), so
/// events can wait for them.
pub struct WriteActivity {
    pending: AtomicUsize,
    /// When `pending` last fell to 0.
    idle_since: Mutex<Instant>,
    idle: Notify,
    /// Set on shutdown: no more waiting for quiet.
    stopping: AtomicBool,
}

impl Default for WriteActivity {
    fn default() -> Self {
        WriteActivity {
            pending: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            idle: Notify::new(),
            stopping: AtomicBool::new(false),
        }
    }
}

impl WriteActivity {
    /// A node is queued for a reconcile.
    pub fn begin(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
    }

    /// A node's reconcile ended and it is not queued again.
    pub fn end(&self) {
        // Under the lock, so a waiter never reads a quiet period that has not begun.
        let mut since = self.idle_since.lock().expect("idle lock");
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            *since = Instant::now();
            drop(since);
            self.idle.notify_waiters();
        }
    }

    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Shutdown: every `wait_quiet`, running or to come, returns at once.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.idle.notify_waiters();
    }

    /// Returns once no reconcile has been pending for `quiet`, or at `deadline`: at
    /// once when the writes have been quiet that long already, or after `stop`.
    pub async fn wait_quiet(&self, quiet: Duration, deadline: Instant) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the checks, so a reconcile ending (or `stop`) in
            // between still wakes us.
            idle.as_mut().enable();
            if Instant::now() >= deadline || self.stopping.load(Ordering::Acquire) {
                return;
            }
            let quiet_from = {
                let since = self.idle_since.lock().expect("idle lock");
                (self.pending() == 0).then_some(*since + quiet)
            };
            match quiet_from {
                Some(at) if Instant::now() >= at => return,
                // Then look again: a write may have come and gone meanwhile.
                Some(at) => {
                    tokio::select! {
                        _ = idle => {}
                        _ = tokio::time::sleep_until(at.min(deadline)) => {}
                    }
                }
                None => {
                    tokio::select! {
                        _ = idle => {}
                        _ = tokio::time::sleep_until(deadline) => return,
                    }
                }
            }
        }
    }
}

struct Queued {
    event: Event,
    about: ObjectReference,
    since: Instant,
}

/// The reconciles' end of the queue.
pub struct EventQueue {
    queued: mpsc::Sender<Queued>,
    /// Events queued and not yet published.
    outstanding: Arc<AtomicUsize>,
}

impl EventQueue {
    /// Starts the publisher task; events go out once the writes have been idle for `quiet`.
    pub fn start(
        client: Client,
        reporter: Reporter,
        writes: Arc<WriteActivity>,
        quiet: Duration,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let outstanding = Arc::new(AtomicUsize::new(0));
        tokio::spawn(publish_queued(
            client,
            reporter,
            writes,
            quiet,
            rx,
            outstanding.clone(),
        ));
        EventQueue {
            queued: tx,
            outstanding,
        }
    }

    /// Queues an event without waiting for it: a reconcile's latency and the API
    /// requests it makes in line stay those of its node write.
    pub fn push(&self, event: Event, about: ObjectReference) {
        let queued = Queued {
            event,
            about,
            since: Instant::now(),
        };
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        if let Err(mpsc::error::TrySendError::Full(q)) = self.queued.try_send(queued) {
            self.outstanding.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(
                object = q.about.name.as_deref().unwrap_or(""),
                reason = %q.event.reason,
                "event queue full; event dropped"
            );
        }
    }
}

impl EventQueue {
    /// Waits until every queued event is out, at most `limit`; after
    /// `WriteActivity::stop` they go without waiting for quiet. False if some were
    /// still queued at the limit.
    pub async fn drain(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.outstanding.load(Ordering::Acquire) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

/// Publishes an event about `about`, as its own Event object.
///
/// kube's `Recorder` folds every event with the same type, reason and action about
/// an object into one series and keeps the note of the first: a node's second
/// `TaintAdded` (another taint, policy or reason) would only bump the count of the
/// first event and show the first one's policy and why. A fresh recorder per event
/// keeps every note.
pub async fn publish(
    client: &Client,
    reporter: &Reporter,
    event: &Event,
    about: &ObjectReference,
) -> Result<(), kube::Error> {
    Recorder::new(client.clone(), reporter.clone())
        .publish(event, about)
        .await
}

async fn publish_queued(
    client: Client,
    reporter: Reporter,
    writes: Arc<WriteActivity>,
    quiet: Duration,
    queued: mpsc::Receiver<Queued>,
    outstanding: Arc<AtomicUsize>,
) {
    use futures::StreamExt;
    tokio_stream::wrappers::ReceiverStream::new(queued)
        .for_each_concurrent(IN_FLIGHT, |q| {
            let (client, reporter, writes, outstanding) =
                (&client, &reporter, &writes, &outstanding);
            async move {
                writes.wait_quiet(quiet, q.since + MAX_DEFERRAL).await;
                if let Err(e) = publish(client, reporter, &q.event, &q.about).await {
                    tracing::warn!(
                        object = q.about.name.as_deref().unwrap_or(""),
                        error = %e,
                        "could not publish event"
                    );
                }
                if outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
                    // The burst after a fleet-wide change is out: its requests and
                    // answers are freed, hand the pages back.
                    crate::memory::release_free_memory();
                }
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET: Duration = DEFAULT_QUIET;

    #[tokio::test(start_paused = true)]
    async fn idle_writes_let_events_go_after_the_quiet_period() {
        let writes = WriteActivity::default();
        let start = Instant::now();
        writes
            .wait_quiet(QUIET, start + Duration::from_secs(60))
            .await;
        assert_eq!(start.elapsed(), QUIET);
    }

    #[tokio::test(start_paused = true)]
    async fn events_wait_until_the_last_pending_write_ends() {
        let writes = Arc::new(WriteActivity::default());
        let start = Instant::now();
        let (a, b) = (writes.clone(), writes.clone());
        tokio::spawn(async move {
            a.begin();
            tokio::time::sleep(Duration::from_secs(3)).await;
            a.end();
        });
        tokio::spawn(async move {
            b.begin();
            tokio::time::sleep(Duration::from_secs(5)).await;
            b.end();
        });
        tokio::task::yield_now().await;
        assert_eq!(writes.pending(), 2);
        writes
            .wait_quiet(QUIET, start + Duration::from_secs(60))
            .await;
        assert_eq!(start.elapsed(), Duration::from_secs(5) + QUIET);
        assert_eq!(writes.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_starting_within_the_quiet_period_restarts_it() {
        let writes = Arc::new(WriteActivity::default());
        let start = Instant::now();
        let w = writes.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            // Starts and ends within the quiet period: the period starts again at its end.
            w.begin();
            w.end();
        });
        writes
            .wait_quiet(QUIET, start + Duration::from_secs(60))
            .await;
        assert_eq!(start.elapsed(), Duration::from_millis(200) + QUIET);
    }

    #[tokio::test(start_paused = true)]
    async fn once_the_writes_are_quiet_every_event_goes_at_once() {
        let writes = WriteActivity::default();
        let deadline = Instant::now() + Duration::from_secs(60);
        writes.wait_quiet(QUIET, deadline).await;
        let quiet = Instant::now();
        for _ in 0..100 {
            writes.wait_quiet(QUIET, deadline).await;
        }
        assert_eq!(quiet.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_lets_waiting_events_go_at_once() {
        let writes = Arc::new(WriteActivity::default());
        let start = Instant::now();
        let deadline = start + Duration::from_secs(60);
        // One waiter inside the quiet period, one behind a pending write.
        let quiet = {
            let w = writes.clone();
            tokio::spawn(async move { w.wait_quiet(QUIET, deadline).await })
        };
        writes.begin();
        let busy = {
            let w = writes.clone();
            tokio::spawn(async move { w.wait_quiet(QUIET, deadline).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        writes.stop();
        quiet.await.unwrap();
        busy.await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        // and any later wait returns at once
        writes.wait_quiet(QUIET, deadline).await;
        assert_eq!(start.elapsed(), Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_that_never_goes_quiet_still_gets_its_events() {
        let writes = Arc::new(WriteActivity::default());
        writes.begin();
        let start = Instant::now();
        writes
            .wait_quiet(QUIET, start + Duration::from_secs(60))
            .await;
        assert_eq!(start.elapsed(), Duration::from_secs(60));
    }
}
