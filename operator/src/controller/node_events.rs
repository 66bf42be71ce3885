//! Node events: queued by reconciles, published by one task after the node writes
//! they explain.
//!
//! Every node write is explained by an event, and an event costs the API server
//! about what a node write does (an etcd write). During a fleet-wide change the
//! events would double the requests the writes compete with, so they wait until
//! the writes are done: the publisher gathers them into a batch and sends it only
//! once no node write has been pending for `QUIET`, or when its oldest event has
//! waited `MAX_DEFERRAL`, so a cluster that never goes quiet still gets its events.
//! A batch's taint events are summarised per policy when many nodes share a change
//! (`event_summary`): a change to 15,000 nodes is a few events on the policies, not
//! 15,000. On shutdown the queue is sent at once (`WriteActivity::stop`,
//! `EventQueue::drain`): a replica stopped right after a write would otherwise take
//! that write's explanation with it.
//!
//! Events have a budget of API writes per second (`--event-qps`), whatever the
//! fleet does. A batch holds `QUEUE` events one by one; taint events beyond that
//! only count in their summary, and other events beyond it are dropped and counted
//! in `taint_operator_events_dropped_total`, with one log line a minute at most.

use std::{
    collections::BTreeMap,
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
use prometheus_client::metrics::counter::Counter;
use tokio::{
    sync::{Notify, mpsc},
    time::Instant,
};

use crate::controller::event_summary::{self, GroupKey, TaintEvent};

/// Events a batch holds one by one (and the queue in front of it). A full one drops
/// events (counted) rather than slow down node writes; what it holds is memory the
/// operator keeps at its peak.
const QUEUE: usize = 4096;
/// Node events published per second at most, by default.
pub const DEFAULT_EVENT_QPS: u32 = 20;
/// The shortest time between two dropped-event warnings.
const DROP_WARNING_EVERY: Duration = Duration::from_secs(60);
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

/// What a reconcile hands over: an event as it is, or a taint event that a burst
/// may fold into a summary (`event_summary`).
enum Item {
    Plain {
        event: Event,
        about: ObjectReference,
    },
    Taints(TaintEvent),
}

struct Queued {
    item: Item,
    since: Instant,
}

/// Where the policy events of a summary point: the TaintPolicy named.
pub type PolicyRef = Arc<dyn Fn(&str) -> ObjectReference + Send + Sync>;

/// Events dropped (counted), with one warning per `DROP_WARNING_EVERY` at most.
struct Drops {
    counter: Counter,
    /// Dropped since the last warning, and when that was.
    unwarned: Mutex<(u64, Option<Instant>)>,
}

impl Drops {
    fn add(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.counter.inc_by(n);
        let mut unwarned = self.unwarned.lock().expect("dropped events lock");
        unwarned.0 += n;
        let now = Instant::now();
        if unwarned.1.is_none_or(|at| now >= at + DROP_WARNING_EVERY) {
            tracing::warn!(
                dropped = unwarned.0,
                queue = QUEUE,
                "event queue full (the event budget is spent); node events dropped, see taint_operator_events_dropped_total"
            );
            *unwarned = (0, Some(now));
        }
    }
}

/// The reconciles' end of the queue.
pub struct EventQueue {
    queued: mpsc::Sender<Queued>,
    /// Events queued and not yet published (or folded into a summary).
    outstanding: Arc<AtomicUsize>,
    drops: Arc<Drops>,
}

impl EventQueue {
    /// Starts the publisher task; events go out once the writes have been idle for
    /// `quiet`, `qps` a second at most, bursts summarised per policy (`policy_ref`
    /// names the TaintPolicy a summary is about).
    pub fn start(
        client: Client,
        reporter: Reporter,
        writes: Arc<WriteActivity>,
        pace: EventPace,
        dropped: Counter,
        policy_ref: PolicyRef,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let outstanding = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(Drops {
            counter: dropped,
            unwarned: Mutex::new((0, None)),
        });
        tokio::spawn(publish_queued(
            Publisher {
                client,
                reporter,
                writes,
                pace,
                outstanding: outstanding.clone(),
                drops: drops.clone(),
                policy_ref,
            },
            rx,
        ));
        EventQueue {
            queued: tx,
            outstanding,
            drops,
        }
    }

    /// Queues an event without waiting for it: a reconcile's latency and the API
    /// requests it makes in line stay those of its node write.
    pub fn push(&self, event: Event, about: ObjectReference) {
        self.queue(Item::Plain { event, about });
    }

    /// Queues a node's taint event; in a burst it becomes part of a summary.
    pub fn push_taints(&self, event: TaintEvent) {
        self.queue(Item::Taints(event));
    }

    fn queue(&self, item: Item) {
        let queued = Queued {
            item,
            since: Instant::now(),
        };
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        if let Err(mpsc::error::TrySendError::Full(_)) = self.queued.try_send(queued) {
            self.outstanding.fetch_sub(1, Ordering::AcqRel);
            self.drops.add(1);
        }
    }

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

/// When node events go out: after the node writes have been idle for `quiet`,
/// `qps` a second at most (0: no limit).
#[derive(Debug, Clone, Copy)]
pub struct EventPace {
    pub quiet: Duration,
    pub qps: u32,
}

impl Default for EventPace {
    fn default() -> Self {
        EventPace {
            quiet: DEFAULT_QUIET,
            qps: DEFAULT_EVENT_QPS,
        }
    }
}

/// Where a held event is: `Batch::plain` or `Batch::taints`.
enum Held {
    Plain(usize),
    Taints(usize),
}

/// The events waiting for the writes to go quiet.
#[derive(Default)]
struct Batch {
    /// Items taken from the queue, folded ones included.
    taken: usize,
    /// Events held one by one, in the order they came.
    order: Vec<Held>,
    plain: Vec<(Event, ObjectReference)>,
    taints: Vec<TaintEvent>,
    /// Changes of taint events beyond what the batch holds one by one.
    folded: BTreeMap<GroupKey, usize>,
    /// Changes per group so far, held and folded.
    groups: BTreeMap<GroupKey, usize>,
}

impl Batch {
    /// Takes `item`; false when it had to be dropped.
    fn add(&mut self, item: Item) -> bool {
        self.taken += 1;
        let full = self.plain.len() + self.taints.len() >= QUEUE;
        match item {
            Item::Plain { .. } if full => return false,
            Item::Plain { event, about } => {
                self.order.push(Held::Plain(self.plain.len()));
                self.plain.push((event, about));
            }
            Item::Taints(event) => {
                let keys: Vec<GroupKey> = event
                    .changes
                    .iter()
                    .map(|c| GroupKey::of(&event, c))
                    .collect();
                // A full batch still holds the first nodes of a group, which may
                // stay small enough for per-node events; a group already too large
                // for them only needs its count.
                let summarised = keys.iter().all(|k| {
                    self.groups.get(k).copied().unwrap_or(0) >= event_summary::SUMMARY_ABOVE
                });
                for key in keys {
                    *self.groups.entry(key.clone()).or_default() += 1;
                    if full && summarised {
                        *self.folded.entry(key).or_default() += 1;
                    }
                }
                if !(full && summarised) {
                    self.order.push(Held::Taints(self.taints.len()));
                    self.taints.push(event);
                }
            }
        }
        true
    }

    /// What to publish, in the order it came, then the summaries.
    fn outgoing(self, p: &Publisher) -> Vec<(Event, ObjectReference)> {
        let summary =
            event_summary::summarise(self.taints, &self.folded, |name| (p.policy_ref)(name));
        p.drops.add(summary.lost as u64);
        let mut plain: Vec<_> = self.plain.into_iter().map(Some).collect();
        let mut per_node = summary.per_node;
        self.order
            .into_iter()
            .filter_map(|held| match held {
                Held::Plain(i) => plain[i].take(),
                Held::Taints(i) => per_node[i].take().map(|o| (o.event, o.about)),
            })
            .chain(summary.summaries.into_iter().map(|o| (o.event, o.about)))
            .collect()
    }
}

struct Publisher {
    client: Client,
    reporter: Reporter,
    writes: Arc<WriteActivity>,
    pace: EventPace,
    outstanding: Arc<AtomicUsize>,
    drops: Arc<Drops>,
    policy_ref: PolicyRef,
}

async fn publish_queued(p: Publisher, mut queued: mpsc::Receiver<Queued>) {
    use futures::StreamExt;
    // One tick per event: `Delay` never bunches missed ticks into a burst.
    let budget = (p.pace.qps > 0).then(|| {
        let mut ticks = tokio::time::interval(Duration::from_secs(1) / p.pace.qps);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::sync::Mutex::new(ticks)
    });
    let mut open = true;
    while open {
        let Some(first) = queued.recv().await else {
            return;
        };
        // Everything that comes while the writes go on joins the batch; it goes out
        // once they are quiet, or when its oldest event has waited `MAX_DEFERRAL`.
        let deadline = first.since + MAX_DEFERRAL;
        let mut batch = Batch::default();
        let take = |batch: &mut Batch, item| {
            if !batch.add(item) {
                p.drops.add(1);
            }
        };
        take(&mut batch, first.item);
        loop {
            tokio::select! {
                biased;
                next = queued.recv() => match next {
                    Some(q) => take(&mut batch, q.item),
                    None => {
                        open = false;
                        break;
                    }
                },
                _ = p.writes.wait_quiet(p.pace.quiet, deadline) => break,
            }
        }
        while let Ok(q) = queued.try_recv() {
            take(&mut batch, q.item);
        }
        let taken = batch.taken;
        let outgoing = batch.outgoing(&p);
        futures::stream::iter(outgoing)
            .for_each_concurrent(IN_FLIGHT, |(event, about)| {
                let (p, budget) = (&p, &budget);
                async move {
                    // Shutting down: what is left goes out at once, within the flush limit.
                    if let Some(budget) = budget
                        && !p.writes.stopping.load(Ordering::Acquire)
                    {
                        budget.lock().await.tick().await;
                    }
                    if let Err(e) = publish(&p.client, &p.reporter, &event, &about).await {
                        tracing::warn!(
                            object = about.name.as_deref().unwrap_or(""),
                            error = %e,
                            "could not publish event"
                        );
                    }
                }
            })
            .await;
        if p.outstanding.fetch_sub(taken, Ordering::AcqRel) == taken {
            // The burst after a fleet-wide change is out: its requests and
            // answers are freed, hand the pages back.
            crate::memory::release_free_memory();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET: Duration = DEFAULT_QUIET;

    /// A client whose API server takes every event, noting when each arrived.
    fn recording_client() -> (Client, Arc<Mutex<Vec<Instant>>>) {
        let (client, arrived, _) = recording_client_with_bodies();
        (client, arrived)
    }

    type Bodies = Arc<Mutex<Vec<serde_json::Value>>>;

    /// `recording_client`, keeping each event too.
    fn recording_client_with_bodies() -> (Client, Arc<Mutex<Vec<Instant>>>, Bodies) {
        let arrived = Arc::new(Mutex::new(Vec::new()));
        let bodies: Bodies = Arc::default();
        let (log, kept) = (arrived.clone(), bodies.clone());
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (log, kept) = (log.clone(), kept.clone());
            async move {
                log.lock().unwrap().push(Instant::now());
                let body = req.into_body().collect_bytes().await.unwrap();
                kept.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(201)
                        .body(kube::client::Body::from(body.to_vec()))
                        .unwrap(),
                )
            }
        });
        (Client::new(service, "default"), arrived, bodies)
    }

    /// The queue on `client`, its summaries about policies named as they are.
    fn start(
        client: Client,
        writes: Arc<WriteActivity>,
        pace: EventPace,
        dropped: Counter,
    ) -> EventQueue {
        EventQueue::start(client, reporter(), writes, pace, dropped, policy_ref())
    }

    fn policy_ref() -> PolicyRef {
        Arc::new(|name: &str| ObjectReference {
            api_version: Some("nodetaint.io/v1alpha1".into()),
            kind: Some("TaintPolicy".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        })
    }

    fn taint_event(i: usize, policy: &str) -> TaintEvent {
        let (_, node) = node_event(i);
        TaintEvent {
            node,
            reason: "TaintAdded".into(),
            action: "AddTaint".into(),
            changes: vec![event_summary::PolicyChange {
                policy: policy.into(),
                what: format!("added {policy}:NoSchedule"),
                why: "condition X=True matched".into(),
            }],
        }
    }

    fn node_event(i: usize) -> (Event, ObjectReference) {
        let event = Event {
            type_: kube::runtime::events::EventType::Normal,
            reason: "TaintAdded".into(),
            note: Some(format!("event {i}")),
            action: "AddTaint".into(),
            secondary: None,
        };
        let about = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(format!("n{i}")),
            uid: Some(format!("uid-{i}")),
            ..ObjectReference::default()
        };
        (event, about)
    }

    fn reporter() -> Reporter {
        Reporter {
            controller: "taint-operator".into(),
            instance: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn events_go_out_within_their_budget() {
        let (client, arrived) = recording_client();
        let writes = Arc::new(WriteActivity::default());
        let pace = EventPace {
            quiet: Duration::ZERO,
            qps: 10,
        };
        let queue = start(client, writes, pace, Counter::default());
        let start = Instant::now();
        for i in 0..30 {
            let (event, about) = node_event(i);
            queue.push(event, about);
        }
        assert!(queue.drain(Duration::from_secs(60)).await);
        let arrived = arrived.lock().unwrap().clone();
        assert_eq!(arrived.len(), 30);
        // 10 a second: the first at once, each next one 100 ms after the last.
        for pair in arrived.windows(2) {
            assert!(
                pair[1] - pair[0] >= Duration::from_millis(100),
                "{arrived:?}"
            );
        }
        let took = *arrived.last().unwrap() - start;
        assert!(
            took >= Duration::from_millis(2900) && took < Duration::from_millis(3100),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn what_a_batch_cannot_hold_is_dropped_and_counted() {
        let (client, arrived) = recording_client();
        let writes = Arc::new(WriteActivity::default());
        // A fleet-wide change that does not end: the events wait.
        writes.begin();
        let dropped = Counter::default();
        let queue = start(client, writes, EventPace::default(), dropped.clone());
        let extra = 100;
        for i in 0..QUEUE + extra {
            let (event, about) = node_event(i);
            queue.push(event, about);
            // Let the publisher take it into its batch.
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(arrived.lock().unwrap().is_empty());
        assert_eq!(dropped.get() as usize, extra);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_taint_events_is_one_event_on_the_policy() {
        let (client, arrived, bodies) = recording_client_with_bodies();
        let writes = Arc::new(WriteActivity::default());
        writes.begin();
        let dropped = Counter::default();
        let queue = start(
            client,
            writes.clone(),
            EventPace::default(),
            dropped.clone(),
        );
        // More than a batch holds one by one: the rest still counts.
        let nodes = QUEUE + 500;
        for i in 0..nodes {
            queue.push_taints(taint_event(i, "nic"));
            tokio::task::yield_now().await;
        }
        // Two nodes of another policy keep their own events.
        queue.push_taints(taint_event(nodes, "disk"));
        queue.push_taints(taint_event(nodes + 1, "disk"));
        let start = Instant::now();
        writes.end();
        assert!(queue.drain(Duration::from_secs(60)).await);
        assert_eq!(dropped.get(), 0);
        let arrived = arrived.lock().unwrap().clone();
        assert_eq!(arrived.len(), 3, "{:?}", bodies.lock().unwrap());
        assert!(arrived[0] - start >= QUIET);
        let bodies = bodies.lock().unwrap().clone();
        let regarding: Vec<_> = bodies
            .iter()
            .map(|b| {
                (
                    b["regarding"]["kind"].as_str().unwrap().to_string(),
                    b["regarding"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            regarding,
            [
                ("Node".to_string(), format!("n{nodes}")),
                ("Node".to_string(), format!("n{}", nodes + 1)),
                ("TaintPolicy".to_string(), "nic".to_string()),
            ]
        );
        assert_eq!(bodies[2]["reason"], "TaintAdded");
        let note = bodies[2]["note"].as_str().unwrap();
        assert!(
            note.starts_with(&format!(
                "policy nic added nic:NoSchedule on {nodes} nodes: n0 (condition X=True matched), n1 ("
            )),
            "{note}"
        );
        assert!(
            note.ends_with(&format!(" and {} more", nodes - 5)),
            "{note}"
        );
        assert_eq!(
            bodies[0]["note"],
            "policy disk added disk:NoSchedule: condition X=True matched"
        );
    }

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
