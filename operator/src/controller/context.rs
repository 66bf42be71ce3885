//! What every reconcile shares: the client, the caches, the compiled policies,
//! the cap ledger, metrics and the event recorder.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use k8s_openapi::{api::core::v1::ObjectReference, jiff::Timestamp};
use kube::{
    Client, Resource,
    runtime::{
        events::{Event, Reporter},
        reflector::{ObjectRef, Store},
    },
};
use taint_operator_crd::{FIELD_MANAGER, TaintPolicy};
use tokio::sync::{Notify, watch};

use crate::{
    cache::node_cache::CachedNode,
    cache::node_store::NodeStore,
    cache::pod_cache::PodCache,
    cache::pod_watch::PodWatches,
    cache::settled::PlanInputs,
    controller::annotation_warnings::Reported,
    controller::cap_ledger::CapLedger,
    controller::event_summary::TaintEvent,
    controller::node_events::{self, EventPace, EventQueue, WriteActivity},
    controller::shutdown_waits::ShutdownWaits,
    drain::ledger::DrainLedger,
    telemetry::metrics::Metrics,
    write_fence::WriteFence,
};
use engine::policy_set::PolicySet;

/// How often a node worker waiting for the first lists looks again: the policy
/// set and the pod watches have no single signal to wait on.
const PLANNABLE_POLL: std::time::Duration = std::time::Duration::from_millis(10);

pub struct Context {
    pub client: Client,
    pub nodes: NodeStore,
    pub policies: Store<TaintPolicy>,
    /// The policies as the engine reads them, with their generation (from 1).
    policy_set: RwLock<(u64, Arc<PolicySet>)>,
    pub pods: Arc<RwLock<PodCache>>,
    pub pod_watches: PodWatches,
    pub caps: Mutex<CapLedger>,
    /// Each zone's drain pace and the nodes' eviction retries.
    pub drains: Mutex<DrainLedger>,
    /// Nodes whose out-of-service taint waits for them to be down, as announced.
    pub shutdown_waits: ShutdownWaits,
    pub metrics: Metrics,
    /// Who the events say they come from; see `publish`.
    pub reporter: Reporter,
    /// Wakes the status writer: something a policy's status reports may have changed.
    pub status_refresh: Notify,
    /// True once the policy cache has listed: enough for the webhook and /readyz.
    pub policies_synced: std::sync::atomic::AtomicBool,
    /// True once the node cache has listed.
    pub nodes_synced: std::sync::atomic::AtomicBool,
    /// True once the policy, node and pod caches have all synced.
    pub synced: watch::Receiver<bool>,
    pub clock: fn() -> Timestamp,
    pub cleanup_grace: CleanupGrace,
    /// Node name → (the resourceVersion our last write to it replaced, the node that
    /// write returned), until the node watch delivers anything newer. A reconcile
    /// that runs before then would plan on the replaced node and lose a conflict.
    pub recent_writes: Mutex<HashMap<String, (String, Arc<CachedNode>)>>,
    /// Node name → the newest resourceVersion the node watch brought while a patch
    /// of ours to that node was on its way (None: nothing yet). Locked before
    /// `recent_writes` wherever both are held.
    pub writes_in_flight: Mutex<HashMap<String, Option<String>>>,
    /// Malformed ownership annotations already warned about.
    pub malformed_reported: Reported,
    /// Nodes queued for or in a reconcile: node events wait for them (see `node_events`).
    pub node_writes: Arc<WriteActivity>,
    /// Whether the node and the policy watch keep failing (for /healthz).
    pub node_watch_health: WatchHealth,
    pub policy_watch_health: WatchHealth,
    /// Until when this replica may write (moved by the leader election).
    pub fence: WriteFence,
    /// Node events on their way out; see `emit`.
    events: EventQueue,
}

/// Since when the watches have failed without a break, if they have.
#[derive(Debug, Default)]
pub struct WatchHealth(Mutex<Option<std::time::Instant>>);

impl WatchHealth {
    /// A watch failed (an error from the API server or the connection).
    pub fn failed(&self) {
        self.0
            .lock()
            .expect("watch health lock")
            .get_or_insert_with(std::time::Instant::now);
    }

    /// A watch delivered something: the break is over.
    pub fn delivered(&self) {
        *self.0.lock().expect("watch health lock") = None;
    }

    pub fn failing_for(&self) -> Option<Duration> {
        self.0
            .lock()
            .expect("watch health lock")
            .map(|since| since.elapsed())
    }
}

/// How long a policy's cleanup waits for the policy watcher to see the deletion,
/// and then for the node controller to clean the nodes, before writing them itself.
#[derive(Debug, Clone, Copy)]
pub struct CleanupGrace {
    pub watcher: Duration,
    /// How long the count of nodes still mentioning the policy may stay put. The
    /// cleanup waits for as long as the node controller makes progress: on a
    /// large fleet it needs minutes, and writing the same nodes alongside it
    /// loses races (a fixed 60 s left 3,771 conflicts at 15,000 nodes:
    /// docs/performance.md#policy-cleanup-grace).
    pub node_controller_stall: Duration,
}

impl Default for CleanupGrace {
    fn default() -> Self {
        CleanupGrace {
            watcher: Duration::from_secs(2),
            node_controller_stall: Duration::from_secs(60),
        }
    }
}

/// What a `Context` is started with; production runs on `Default`, tests shorten
/// the waits.
#[derive(Debug, Clone, Default)]
pub struct ContextOptions {
    /// Names this replica in the events it publishes.
    pub reporter_instance: Option<String>,
    /// When node events go out: after the node writes are idle, within a budget.
    pub event_pace: EventPace,
    pub cleanup_grace: CleanupGrace,
    /// Until when writes may go out; open for good by default (no election).
    pub fence: WriteFence,
}

/// The TaintPolicy a summary event is about, from the policy cache; a policy
/// already gone is named without its uid.
fn policy_ref(policies: Store<TaintPolicy>) -> node_events::PolicyRef {
    Arc::new(move |name: &str| {
        policies
            .get(&ObjectRef::new(name))
            .map(|p| p.object_ref(&()))
            .unwrap_or_else(|| ObjectReference {
                api_version: Some(TaintPolicy::api_version(&()).into_owned()),
                kind: Some(TaintPolicy::kind(&()).into_owned()),
                name: Some(name.to_string()),
                ..ObjectReference::default()
            })
    })
}

impl Context {
    pub fn new(
        client: Client,
        nodes: NodeStore,
        policies: Store<TaintPolicy>,
        pod_watches: PodWatches,
        metrics: Metrics,
        synced: watch::Receiver<bool>,
        options: ContextOptions,
    ) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_string(),
            instance: options.reporter_instance,
        };
        let node_writes = Arc::new(WriteActivity::default());
        let events = EventQueue::start(
            client.clone(),
            reporter.clone(),
            node_writes.clone(),
            options.event_pace,
            metrics.events_dropped.clone(),
            policy_ref(policies.clone()),
        );
        Context {
            fence: options.fence,
            events,
            node_writes,
            cleanup_grace: options.cleanup_grace,
            recent_writes: Mutex::default(),
            writes_in_flight: Mutex::default(),
            node_watch_health: WatchHealth::default(),
            policy_watch_health: WatchHealth::default(),
            malformed_reported: Reported::default(),
            reporter,
            client,
            nodes,
            policies,
            policy_set: RwLock::new((1, Arc::new(PolicySet::new([])))),
            pods: pod_watches.cache(),
            pod_watches,
            caps: Mutex::new(CapLedger::default()),
            drains: Mutex::default(),
            shutdown_waits: ShutdownWaits::default(),
            metrics,
            status_refresh: Notify::new(),
            policies_synced: std::sync::atomic::AtomicBool::new(false),
            nodes_synced: std::sync::atomic::AtomicBool::new(false),
            synced,
            clock: Timestamp::now,
        }
    }

    pub fn policy_set(&self) -> Arc<PolicySet> {
        self.policy_set.read().expect("policy set lock").1.clone()
    }

    /// The policy set and its generation, read together.
    pub fn policy_set_generation(&self) -> (u64, Arc<PolicySet>) {
        self.policy_set.read().expect("policy set lock").clone()
    }

    pub fn set_policy_set(&self, set: PolicySet) {
        let mut current = self.policy_set.write().expect("policy set lock");
        *current = (current.0 + 1, Arc::new(set));
    }

    /// What a plan of `node` under the policy set of generation `policies` reads
    /// besides the node.
    pub fn plan_inputs(&self, policies: u64, node: &str) -> PlanInputs {
        let pods = self
            .pods
            .read()
            .expect("pod cache lock")
            .index()
            .changed(node);
        PlanInputs { policies, pods }
    }

    /// Publishes an event about `reference` now; see `node_events::publish`.
    pub async fn publish(
        &self,
        event: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        node_events::publish(&self.client, &self.reporter, event, reference).await
    }

    /// Queues a node event; it goes out once the node writes are done.
    pub fn emit(&self, event: Event, reference: ObjectReference) {
        self.events.push(event, reference);
    }

    /// Queues a node's taint event; a burst of them is summarised per policy.
    pub fn emit_taints(&self, event: TaintEvent) {
        self.events.push_taints(event);
    }

    /// Shutdown, once no more node is written: sends the queued node events now,
    /// waiting at most `limit` for them. False if some were left unsent.
    pub async fn flush_events(&self, limit: Duration) -> bool {
        self.node_writes.stop();
        self.events.drain(limit).await
    }

    /// `cached`, or the node our own last write returned when the cache has not
    /// caught up with that write yet.
    pub fn freshest(&self, cached: Arc<CachedNode>) -> Arc<CachedNode> {
        let name = cached.name();
        let mut writes = self.recent_writes.lock().expect("recent writes lock");
        match writes.get(name) {
            Some((replaced, written)) if cached.resource_version() == Some(replaced) => {
                written.clone()
            }
            Some(_) => {
                writes.remove(name);
                cached
            }
            None => cached,
        }
    }

    /// A patch of `node` is about to be sent: what the node watch brings for it
    /// until [`Context::write_done`] is parked there, not queued.
    pub fn writing(&self, node: &str) {
        self.writes_in_flight
            .lock()
            .expect("writes in flight lock")
            .insert(node.to_string(), None);
    }

    /// The write that [`Context::writing`] announced is over; `written` is the
    /// version it replaced and the node it returned, None when nothing was written
    /// (no change, or an error). A version the watch brought meanwhile is dropped
    /// when it is the write's own echo or the version the write was planned on;
    /// anything else queues the node again, as the watch would have.
    pub fn write_done(&self, node: &str, written: Option<(&str, &CachedNode)>) {
        let mut flight = self.writes_in_flight.lock().expect("writes in flight lock");
        let parked = flight.remove(node).flatten();
        let is = |rv: Option<&str>| parked.is_some() && rv == parked.as_deref();
        if written.is_some_and(|(_, w)| is(w.resource_version())) {
            // the echo came before the answer: nothing newer to wait for
            self.metrics.node_echoes_skipped.inc();
        } else if parked.is_none() || written.is_some_and(|(base, _)| is(Some(base))) {
            if let Some((base, w)) = written {
                self.remember_write(base, w);
            }
        } else {
            drop(flight);
            self.pod_watches.reevaluate(vec![node.to_string()]);
        }
    }

    /// What the node watch brought for `node`, judged before it is queued.
    pub fn watch_brought(&self, node: &CachedNode) -> Brought {
        let mut flight = self.writes_in_flight.lock().expect("writes in flight lock");
        if let Some(slot) = flight.get_mut(node.name()) {
            *slot = node.resource_version().map(str::to_string);
            return Brought::Parked;
        }
        if let Some(written) = self.own_echo_of(node) {
            // The very version our write returned: what was recorded of its plan holds.
            node.settled.copy_from(&written.settled);
            self.metrics.node_echoes_skipped.inc();
            self.node_seen(node.name());
            return Brought::OwnEcho;
        }
        Brought::Change
    }

    /// Remembers a write until the node watch shows something newer. Not when the
    /// cache already has moved past the node the write replaced.
    fn remember_write(&self, base_resource_version: &str, written: &CachedNode) {
        let name = written.name().to_string();
        let cached = self.nodes.get(&name);
        if cached.is_some_and(|c| c.resource_version() == Some(base_resource_version)) {
            self.recent_writes
                .lock()
                .expect("recent writes lock")
                .insert(
                    name,
                    (base_resource_version.to_string(), Arc::new(written.clone())),
                );
        }
    }

    /// Our own last write to `node`, when `node` is its echo: the version the patch
    /// answered with, coming back through the watch. The write's reconcile planned
    /// on exactly what it wrote, so planning again would find nothing to do (a plan
    /// applied twice equals it applied once); the queue is spared that reconcile.
    fn own_echo_of(&self, node: &CachedNode) -> Option<Arc<CachedNode>> {
        let writes = self.recent_writes.lock().expect("recent writes lock");
        writes
            .get(node.name())
            .filter(|(_, written)| {
                written.resource_version().is_some()
                    && written.resource_version() == node.resource_version()
            })
            .map(|(_, written)| written.clone())
    }

    /// The node watch delivered a version of `node`: newer than any write of ours it has.
    pub fn node_seen(&self, node: &str) {
        self.recent_writes
            .lock()
            .expect("recent writes lock")
            .remove(node);
    }

    /// Waits until every cache has synced, so no node is judged on half a picture.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.clone();
        // The sender lives as long as the operator; if it is gone we are shutting down.
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Waits until a node the node cache holds may be planned: every cache has
    /// synced, or the policies and the critical pods they need have while the node
    /// list is still coming in and no policy counts across nodes (see
    /// [`PolicySet::counts_across_nodes`]). A node's plan reads that node alone
    /// then, so a cold start writes each node as its list brings it instead of
    /// after the whole fleet is in.
    pub async fn wait_plannable(&self) {
        let mut rx = self.synced.clone();
        loop {
            if *rx.borrow_and_update()
                || (self
                    .policies_synced
                    .load(std::sync::atomic::Ordering::Acquire)
                    && self.may_plan_with(&self.policy_set()))
            {
                return;
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(PLANNABLE_POLL) => {}
            }
        }
    }

    /// Whether a node may be planned under `set` now: the pods it needs are listed,
    /// and so is every node when the set counts across nodes.
    pub fn may_plan_with(&self, set: &PolicySet) -> bool {
        let nodes_listed =
            *self.synced.borrow() || self.nodes_synced.load(std::sync::atomic::Ordering::Acquire);
        (nodes_listed || !set.counts_across_nodes()) && self.pod_watches.synced_for(set)
    }
}

/// What a node watch event is to the node queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Brought {
    /// A write to the node is on its way: held until it is answered.
    Parked,
    /// The echo of our own last write: planning again would change nothing.
    OwnEcho,
    /// Anything else: queue the node.
    Change,
}
