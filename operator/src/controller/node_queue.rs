//! The node controller's work queue: node names in, first come first served, a
//! fixed number of workers reconciling them.
//!
//! kube-runtime's `Controller` did this job until a 5,000-node scale run showed
//! two costs. With a concurrency limit, its scheduler hands back already-due
//! entries last in, first out, so some early nodes waited for a whole fleet-wide
//! change. Without one, every pending node gets a spawned task, a tracing span and
//! an entry in a map of futures that is polled whole on every wake-up: quadratic
//! polling during the change, and ~7 MB kept for good afterwards (the map and the
//! span slab keep their peak size). Here a pending node costs its name in a queue.
//!
//! A node is never reconciled twice at once: a change that arrives while it is
//! being reconciled queues it again for when that reconcile ends.

use std::{
    collections::{BTreeSet, HashMap, HashSet, VecDeque, hash_map::Entry},
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::FutureExt;
use prometheus_client::metrics::histogram::Histogram;
use tokio::{sync::Notify, time::Instant};

use crate::{controller::node_events::WriteActivity, jitter::jitter};

/// What a reconcile asks of the queue when it is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing until the node, its pods or the policies change.
    AwaitChange,
    /// Reconcile again after this long (a `for` window ends, a cap may free up).
    After(Duration),
    /// It failed: try again after a wait that doubles with each failure in a row
    /// ([`retry_delay`]), so an API server that sheds load is not hammered back.
    Retry,
}

/// The wait before a node's `failures`-th retry in a row: 2 s doubling to at most
/// 60 s, scaled by a random factor in [0.5, 1.5) so that nodes that failed together
/// do not all come back at the same moment.
pub fn retry_delay(failures: u32) -> Duration {
    let base = RETRY_FIRST
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(RETRY_MAX);
    jitter(base, 0.5)
}

pub const RETRY_FIRST: Duration = Duration::from_secs(2);
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// A node a worker takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    pub node: String,
    /// Queued by a periodic resync and nothing else since: if this reconcile writes,
    /// a watch missed an update.
    pub by_resync: bool,
}

/// Where a node is in the queue; a node with no entry is idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Due,
    /// `again`: it changed during the reconcile, which may have planned on the old state.
    Running {
        again: bool,
    },
    Later(Instant),
}

#[derive(Default)]
struct State {
    slots: HashMap<Box<str>, Slot>,
    /// With the moment each became due.
    due: VecDeque<(Box<str>, Instant)>,
    later: BTreeSet<(Instant, Box<str>)>,
    /// Due nodes that only a resync queued.
    by_resync: HashSet<Box<str>>,
    /// Failed reconciles in a row, per node that is being retried.
    failures: HashMap<Box<str>, u32>,
    closed: bool,
}

pub struct NodeQueue {
    state: Mutex<State>,
    /// A node became due, or the queue closed.
    work: Notify,
    /// The earliest `Later` moved up.
    timers: Notify,
    /// Due and running nodes: the node events wait for them.
    writes: Arc<WriteActivity>,
    /// Seconds from due to a worker taking the node: how far the workers are behind.
    waited: Histogram,
}

impl NodeQueue {
    pub fn new(writes: Arc<WriteActivity>, waited: Histogram) -> Arc<Self> {
        Arc::new(NodeQueue {
            state: Mutex::default(),
            work: Notify::new(),
            timers: Notify::new(),
            writes,
            waited,
        })
    }

    /// The node, its pods or the policies changed: reconcile it as soon as a worker
    /// is free, after the nodes queued before it.
    pub fn touch(&self, name: &str) {
        self.enqueue(name, false);
    }

    /// A periodic resync: re-plan an idle or waiting node, marked as the resync's
    /// alone. A node already due or running will be planned on current state anyway.
    pub fn touch_resync(&self, name: &str) {
        self.enqueue(name, true);
    }

    fn enqueue(&self, name: &str, by_resync: bool) {
        {
            let mut guard = self.lock();
            let state = &mut *guard;
            if !by_resync {
                state.by_resync.remove(name);
            }
            match state.slots.get_mut(name) {
                Some(Slot::Due) => return,
                Some(slot @ Slot::Running { .. }) => {
                    // A resync need not run it again: it is being planned on current state.
                    if !by_resync {
                        *slot = Slot::Running { again: true };
                    }
                    return;
                }
                Some(Slot::Later(at)) => {
                    let at = *at;
                    state.later.remove(&(at, Box::from(name)));
                }
                None => {}
            }
            state.slots.insert(Box::from(name), Slot::Due);
            if by_resync {
                state.by_resync.insert(Box::from(name));
            }
            state.due.push_back((Box::from(name), Instant::now()));
            self.writes.begin();
        }
        self.work.notify_one();
    }

    /// Nodes due and waiting for a worker.
    pub fn waiting(&self) -> usize {
        self.lock().due.len()
    }

    /// Stops handing out work; `run` returns once the running reconciles end.
    pub fn close(&self) {
        self.lock().closed = true;
        self.work.notify_waiters();
        self.timers.notify_waiters();
    }

    /// Reconciles queued nodes with `workers` at a time until `close`. `reconcile`
    /// gets the node's name and why it is due; a panic in it is logged and retried
    /// like an error.
    pub async fn run<F, Fut>(self: Arc<Self>, workers: usize, reconcile: F)
    where
        F: Fn(Work) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Next> + Send + 'static,
    {
        let timers = tokio::spawn(self.clone().run_timers());
        let handles: Vec<_> = (0..workers.max(1))
            .map(|_| tokio::spawn(self.clone().work(reconcile.clone())))
            .collect();
        for h in handles {
            let _ = h.await;
        }
        timers.abort();
    }

    async fn work<F, Fut>(self: Arc<Self>, reconcile: F)
    where
        F: Fn(Work) -> Fut,
        Fut: Future<Output = Next>,
    {
        while let Some((name, by_resync)) = self.next().await {
            let work = Work {
                node: name.to_string(),
                by_resync,
            };
            let next = std::panic::AssertUnwindSafe(reconcile(work))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    tracing::error!(node = &*name, "node reconcile panicked; retrying");
                    Next::Retry
                });
            self.finish(name, next);
        }
    }

    /// The next due node, now marked running, and whether only a resync queued it;
    /// None once closed.
    async fn next(&self) -> Option<(Box<str>, bool)> {
        loop {
            let work = self.work.notified();
            tokio::pin!(work);
            // Registered before the check, so a touch in between still wakes us.
            work.as_mut().enable();
            {
                let mut state = self.lock();
                if state.closed {
                    return None;
                }
                if let Some((name, since)) = state.due.pop_front() {
                    self.waited.observe(since.elapsed().as_secs_f64());
                    let by_resync = state.by_resync.remove(&name);
                    state
                        .slots
                        .insert(name.clone(), Slot::Running { again: false });
                    let more = !state.due.is_empty();
                    drop(state);
                    if more {
                        // notify_one wakes one worker per touch; pass it on if it
                        // raced with another worker that took a different node.
                        self.work.notify_one();
                    }
                    return Some((name, by_resync));
                }
            }
            work.await;
        }
    }

    fn finish(&self, name: Box<str>, next: Next) {
        let mut state = self.lock();
        let state = &mut *state;
        let again = matches!(state.slots.get(&name), Some(Slot::Running { again: true }));
        if again {
            state.slots.insert(name.clone(), Slot::Due);
            state.due.push_back((name, Instant::now()));
            self.work.notify_one();
            return;
        }
        let wait = match next {
            Next::Retry => {
                let failures = state.failures.entry(name.clone()).or_insert(0);
                *failures += 1;
                Some(retry_delay(*failures))
            }
            Next::After(d) => {
                state.failures.remove(&name);
                Some(d)
            }
            Next::AwaitChange => {
                state.failures.remove(&name);
                None
            }
        };
        match wait {
            None => {
                state.slots.remove(&name);
            }
            Some(d) => {
                let at = Instant::now() + d;
                let earliest = state.later.first().is_none_or(|(t, _)| at < *t);
                state.later.insert((at, name.clone()));
                state.slots.insert(name, Slot::Later(at));
                if earliest {
                    self.timers.notify_one();
                }
            }
        }
        if state.slots.is_empty() && state.slots.capacity() > KEEP_CAPACITY {
            // Burst over: give back the tables' peak capacity (but not after every
            // single reconcile of a quiet cluster, which would free and regrow them).
            state.slots.shrink_to_fit();
            state.due.shrink_to_fit();
            state.by_resync.shrink_to_fit();
            state.failures.shrink_to_fit();
        }
        self.writes.end();
    }

    /// Moves `Later` nodes to the queue when their time comes.
    async fn run_timers(self: Arc<Self>) {
        loop {
            let moved = self.timers.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            let wake_at = {
                let mut state = self.lock();
                let state = &mut *state;
                if state.closed {
                    return;
                }
                let now = Instant::now();
                while let Some((at, _)) = state.later.first()
                    && *at <= now
                {
                    let (_, name) = state.later.pop_first().expect("checked above");
                    if let Entry::Occupied(mut slot) = state.slots.entry(name.clone())
                        && matches!(slot.get(), Slot::Later(_))
                    {
                        slot.insert(Slot::Due);
                        state.due.push_back((name, Instant::now()));
                        self.writes.begin();
                        self.work.notify_one();
                    }
                }
                state.later.first().map(|(at, _)| *at)
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        _ = moved => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => moved.await,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("node queue lock")
    }
}

/// Table capacity kept when the queue drains.
const KEEP_CAPACITY: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Records every reconcile's start, and how many run at once.
    #[derive(Default)]
    struct Log {
        started: Mutex<Vec<(String, Duration)>>,
        running: AtomicUsize,
        most_at_once: AtomicUsize,
    }

    fn queue() -> Arc<NodeQueue> {
        NodeQueue::new(Arc::new(WriteActivity::default()), Histogram::new([1.0]))
    }

    /// Runs `q` with `workers`; each reconcile takes `takes` and returns what `next` says.
    fn start(
        q: &Arc<NodeQueue>,
        workers: usize,
        takes: Duration,
        next: impl Fn(&str) -> Next + Send + Sync + 'static,
    ) -> (Arc<Log>, tokio::task::JoinHandle<()>) {
        let log = Arc::new(Log::default());
        let t0 = Instant::now();
        let l = log.clone();
        let next = Arc::new(next);
        let run = tokio::spawn(q.clone().run(workers, move |work: Work| {
            let name = work.node;
            let log = l.clone();
            let next = next.clone();
            async move {
                log.started
                    .lock()
                    .unwrap()
                    .push((name.clone(), t0.elapsed()));
                let now = log.running.fetch_add(1, Ordering::SeqCst) + 1;
                log.most_at_once.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(takes).await;
                log.running.fetch_sub(1, Ordering::SeqCst);
                next(&name)
            }
        }));
        (log, run)
    }

    fn starts(log: &Log) -> Vec<(String, Duration)> {
        log.started.lock().unwrap().clone()
    }

    fn names(log: &Log) -> Vec<String> {
        starts(log).into_iter().map(|(n, _)| n).collect()
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn nodes_are_reconciled_in_arrival_order_each_once() {
        let q = queue();
        for n in ["a", "b", "c", "b", "d", "a", "e"] {
            q.touch(n);
        }
        let (log, _run) = start(&q, 1, Duration::from_millis(10), |_| Next::AwaitChange);
        settle().await;
        assert_eq!(names(&log), ["a", "b", "c", "d", "e"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_for_a_free_worker_is_measured() {
        let waited = Histogram::new([1.0]);
        let q = NodeQueue::new(Arc::new(WriteActivity::default()), waited.clone());
        for n in ["a", "b", "c"] {
            q.touch(n);
        }
        // One worker, 1 s per reconcile: a starts at once, b after 1 s, c after 2 s.
        let (_log, _run) = start(&q, 1, Duration::from_secs(1), |_| Next::AwaitChange);
        settle().await;
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("waited", "", waited);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |name: &str| -> f64 {
            let line = text.lines().find(|l| l.starts_with(name)).unwrap();
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert_eq!(value("waited_count"), 3.0, "{text}");
        assert!((value("waited_sum") - 3.0).abs() < 0.01, "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_workers_reconciles_run_at_once() {
        let q = queue();
        for i in 0..50 {
            q.touch(&format!("n{i}"));
        }
        let (log, _run) = start(&q, 4, Duration::from_millis(10), |_| Next::AwaitChange);
        settle().await;
        assert_eq!(log.started.lock().unwrap().len(), 50);
        assert_eq!(log.most_at_once.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_during_a_reconcile_runs_it_again_afterwards_not_alongside() {
        let q = queue();
        q.touch("a");
        let (log, _run) = start(&q, 4, Duration::from_secs(1), |_| Next::AwaitChange);
        tokio::time::sleep(Duration::from_millis(500)).await;
        q.touch("a");
        q.touch("a");
        settle().await;
        let started = starts(&log);
        assert_eq!(
            started,
            [
                ("a".to_string(), Duration::ZERO),
                ("a".to_string(), Duration::from_secs(1))
            ]
        );
        assert_eq!(log.most_at_once.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_requeue_runs_the_node_again_when_its_time_comes() {
        let q = queue();
        q.touch("a");
        q.touch("b");
        let (log, _run) = start(&q, 1, Duration::ZERO, |n| match n {
            "a" => Next::After(Duration::from_secs(30)),
            _ => Next::After(Duration::from_secs(10)),
        });
        tokio::time::sleep(Duration::from_secs(45)).await;
        let started = starts(&log);
        let at = |s: u64| Duration::from_secs(s);
        assert_eq!(
            started,
            [
                ("a".into(), at(0)),
                ("b".into(), at(0)),
                ("b".into(), at(10)),
                ("b".into(), at(20)),
                ("a".into(), at(30)),
                ("b".into(), at(30)),
                ("b".into(), at(40)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_before_the_requeue_runs_the_node_now_and_only_then() {
        let q = queue();
        q.touch("a");
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let (log, _run) = start(&q, 1, Duration::ZERO, move |_| {
            if c.fetch_add(1, Ordering::SeqCst) == 0 {
                Next::After(Duration::from_secs(30))
            } else {
                Next::AwaitChange
            }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        q.touch("a");
        settle().await;
        let started = starts(&log);
        assert_eq!(
            started,
            [
                ("a".into(), Duration::ZERO),
                ("a".into(), Duration::from_secs(5))
            ]
        );
    }

    #[test]
    fn retries_wait_longer_each_time_up_to_a_minute_with_jitter() {
        for (failures, nominal) in [(1, 2), (2, 4), (3, 8), (5, 32), (6, 60), (40, 60)] {
            let nominal = Duration::from_secs(nominal);
            let waits: Vec<Duration> = (0..50).map(|_| retry_delay(failures)).collect();
            assert!(
                waits
                    .iter()
                    .all(|w| *w >= nominal.mul_f64(0.5) && *w < nominal.mul_f64(1.5)),
                "{failures}: {waits:?}"
            );
            assert!(waits.iter().any(|w| *w != waits[0]), "jittered");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_node_backs_off_and_a_success_resets_it() {
        let q = queue();
        q.touch("flaky");
        // Fails three times, then succeeds; then fails once more.
        let outcomes = Arc::new(Mutex::new(
            [
                Next::Retry,
                Next::Retry,
                Next::Retry,
                Next::AwaitChange,
                Next::Retry,
                Next::AwaitChange,
            ]
            .to_vec(),
        ));
        let (log, _run) = start(&q, 1, Duration::ZERO, move |_| {
            outcomes.lock().unwrap().remove(0)
        });
        tokio::time::sleep(Duration::from_secs(120)).await;
        q.touch("flaky");
        settle().await;
        let at: Vec<f64> = starts(&log).iter().map(|(_, t)| t.as_secs_f64()).collect();
        assert_eq!(at.len(), 6, "{at:?}");
        let gaps: Vec<f64> = at.windows(2).map(|w| w[1] - w[0]).collect();
        // 2, 4 and 8 s nominal, each within ±50%.
        for (gap, nominal) in gaps.iter().zip([2.0, 4.0, 8.0]) {
            assert!(*gap >= nominal * 0.5 && *gap < nominal * 1.5, "{gaps:?}");
        }
        // After the success, the next failure waits the first step again.
        assert!(gaps[4] >= 1.0 && gaps[4] < 3.0, "{gaps:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_resync_mark_lasts_only_until_a_real_change() {
        let q = queue();
        q.touch_resync("resync-only");
        q.touch_resync("then-changed");
        q.touch("then-changed");
        q.touch("changed-first");
        q.touch_resync("changed-first");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let _run = tokio::spawn(q.clone().run(1, move |work: Work| {
            s.lock().unwrap().push((work.node, work.by_resync));
            async { Next::AwaitChange }
        }));
        settle().await;
        assert_eq!(
            *seen.lock().unwrap(),
            [
                ("resync-only".to_string(), true),
                ("then-changed".to_string(), false),
                ("changed-first".to_string(), false),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_reconcile_is_retried_and_the_worker_survives() {
        let q = queue();
        q.touch("boom");
        q.touch("fine");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let _run = tokio::spawn(q.clone().run(1, move |work: Work| {
            let name = work.node;
            let seen = s.clone();
            async move {
                let first = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(name.clone());
                    seen.iter().filter(|n| **n == name).count() == 1
                };
                if name == "boom" && first {
                    panic!("bug");
                }
                Next::AwaitChange
            }
        }));
        settle().await;
        assert_eq!(*seen.lock().unwrap(), ["boom", "fine", "boom"]);
    }

    #[tokio::test(start_paused = true)]
    async fn pending_counts_due_and_running_nodes_for_the_events() {
        let writes = Arc::new(WriteActivity::default());
        let q = NodeQueue::new(writes.clone(), Histogram::new([1.0]));
        q.touch("a");
        q.touch("b");
        assert_eq!(writes.pending(), 2);
        let (_log, _run) = start(&q, 1, Duration::from_secs(1), |_| Next::AwaitChange);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(writes.pending(), 1);
        settle().await;
        assert_eq!(writes.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_window_to_end_is_not_pending_work() {
        let writes = Arc::new(WriteActivity::default());
        let q = NodeQueue::new(writes.clone(), Histogram::new([1.0]));
        q.touch("a");
        let (log, _run) = start(&q, 1, Duration::ZERO, |_| {
            Next::After(Duration::from_secs(60))
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(writes.pending(), 0);
        tokio::time::sleep(Duration::from_secs(60)).await;
        // Its time came: queued and reconciled again, and waiting again.
        assert_eq!(writes.pending(), 0);
        assert_eq!(log.started.lock().unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn close_lets_running_reconciles_finish_and_stops() {
        let q = queue();
        for n in ["a", "b", "c"] {
            q.touch(n);
        }
        let (log, run) = start(&q, 1, Duration::from_secs(1), |_| Next::AwaitChange);
        tokio::time::sleep(Duration::from_millis(500)).await;
        q.close();
        run.await.unwrap();
        assert_eq!(names(&log), ["a"]);
        assert_eq!(log.running.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resync_pass_is_spread_over_its_time() {
        use crate::controller::resync::spread_pass;
        let q = queue();
        let (log, _run) = start(&q, 4, Duration::from_millis(1), |_| Next::AwaitChange);
        let names: Vec<Box<str>> = (0..1000).map(|i| format!("n{i}").into()).collect();
        spread_pass(&q, names, Duration::from_secs(10)).await;
        settle().await;
        let starts: Vec<Duration> = starts(&log).into_iter().map(|(_, t)| t).collect();
        assert_eq!(starts.len(), 1000);
        assert!(starts[0] < Duration::from_millis(100), "{:?}", starts[0]);
        let last = starts[999];
        assert!(
            last >= Duration::from_millis(9800) && last <= Duration::from_millis(10100),
            "{last:?}"
        );
        // Evenly: half the nodes by half the time.
        let half = starts[499];
        assert!(
            half >= Duration::from_millis(4800) && half <= Duration::from_millis(5100),
            "{half:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn changed_nodes_never_wait_behind_a_resync() {
        use crate::controller::resync::spread_pass;
        let q = queue();
        for i in 0..50 {
            q.touch(&format!("changed-{i}"));
        }
        let (log, _run) = start(&q, 1, Duration::from_millis(10), |_| Next::AwaitChange);
        let resync = {
            let q = q.clone();
            tokio::spawn(async move {
                let names = (0..50).map(|i| format!("resync-{i}").into()).collect();
                spread_pass(&q, names, Duration::ZERO).await;
            })
        };
        // More changes while the first ones are still waiting.
        tokio::time::sleep(Duration::from_millis(100)).await;
        for i in 50..100 {
            q.touch(&format!("changed-{i}"));
        }
        resync.await.unwrap();
        settle().await;
        let order = names(&log);
        assert_eq!(order.len(), 150);
        let first_resync = order.iter().position(|n| n.starts_with("resync")).unwrap();
        assert_eq!(first_resync, 100, "{order:?}");
    }
}
