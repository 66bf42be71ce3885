//! What every reconcile shares, in parts by what they hold: the caches of the
//! cluster (`caches`), the ledgers of decisions that span nodes (`ledgers`), each
//! node's eviction retries (`evictions`), the
//! reconciles and writes in flight (`write_tracking`), the watches' health
//! (`health`) and the events on their way out (`events`); besides them what
//! every write needs (the client and the write fence), the metrics, the clock
//! and the status writer's wake-up.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{api::core::v1::ObjectReference, jiff::Timestamp};
use kube::{
    Client, Resource,
    runtime::{
        events::Reporter,
        reflector::{ObjectRef, Store},
    },
};
use taint_operator_crd::{FIELD_MANAGER, TaintPolicy};
use tokio::sync::{Notify, watch};

use crate::{
    cache::node_store::NodeStore,
    cache::pod_watch::PodWatches,
    controller::caches::Caches,
    controller::events::Events,
    controller::health::Health,
    controller::ledgers::Ledgers,
    controller::node_events::{self, EventPace},
    controller::write_tracking::WriteTracking,
    drain::retries::EvictionRetries,
    telemetry::metrics::Metrics,
    write_fence::WriteFence,
};

pub struct Context {
    pub client: Client,
    /// Until when this replica may write (moved by the leader election): every
    /// node patch, eviction and status write asks it.
    pub fence: WriteFence,
    pub caches: Caches,
    pub ledgers: Ledgers,
    pub evictions: EvictionRetries,
    pub writes: WriteTracking,
    pub health: Health,
    pub events: Events,
    pub metrics: Metrics,
    /// Wakes the status writer: something a policy's status reports may have changed.
    pub status_refresh: Notify,
    pub clock: fn() -> Timestamp,
    pub cleanup_grace: CleanupGrace,
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
        let writes = WriteTracking::new(nodes.clone(), metrics.node_echoes_skipped.clone());
        let events = Events::start(
            client.clone(),
            reporter,
            writes.activity().clone(),
            options.event_pace,
            metrics.events_dropped.clone(),
            policy_ref(policies.clone()),
        );
        Context {
            caches: Caches::new(nodes, policies, pod_watches, synced),
            ledgers: Ledgers::default(),
            evictions: EvictionRetries::default(),
            writes,
            health: Health::default(),
            events,
            client,
            fence: options.fence,
            metrics,
            status_refresh: Notify::new(),
            clock: Timestamp::now,
            cleanup_grace: options.cleanup_grace,
        }
    }

    /// Shutdown, once no more node is written: sends the queued node events now,
    /// waiting at most `limit` for them. False if some were left unsent.
    pub async fn flush_events(&self, limit: Duration) -> bool {
        self.writes.activity().stop();
        self.events.drain(limit).await
    }
}
