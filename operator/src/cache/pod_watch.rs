//! One label-selected pod watch per distinct (namespace, selector) that some
//! policy's critical pods use, started and stopped as policies change. The
//! operator never watches every pod in the cluster.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use futures::{StreamExt, TryStreamExt, stream::BoxStream};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    runtime::{
        WatchStreamExt,
        watcher::{self, Event},
    },
};
use tokio::{sync::mpsc::UnboundedSender, task::AbortHandle};

use crate::{
    cache::pod_cache::PodCache,
    cache::slim::SlimPod,
    cache::{
        initial_list::{InitialLists, fall_back_on_refusal, watch_with_initial_list},
        proto_watch,
        watch::{RestartCounter, WatchBackoff, pod_list_pages, relist_at_once, slim_event},
    },
    telemetry::metrics::Metrics,
};
use engine::policy_set::PolicySet;

/// `(namespace, label selector)`.
pub type WatchKey = (String, String);

struct Running {
    id: u64,
    abort: AbortHandle,
    synced: Arc<AtomicBool>,
}

pub struct PodWatches {
    client: Client,
    cache: Arc<RwLock<PodCache>>,
    running: Mutex<HashMap<WatchKey, Running>>,
    next_id: AtomicU64,
    /// Nodes to re-evaluate because one of their critical pods changed.
    changed_nodes: UnboundedSender<String>,
    metrics: Metrics,
    lists: Arc<InitialLists>,
}

/// The watches a policy set needs: critical pods of every valid policy, dry runs included.
pub fn wanted_watches(set: &PolicySet) -> BTreeSet<WatchKey> {
    set.policies
        .iter()
        .filter_map(|p| p.rules.as_ref().ok())
        .filter_map(|r| r.readiness.as_ref())
        .flat_map(|r| {
            r.critical_pods
                .iter()
                .map(|c| (c.namespace.clone(), c.label_selector.clone()))
        })
        .collect()
}

impl PodWatches {
    pub fn new(
        client: Client,
        changed_nodes: UnboundedSender<String>,
        metrics: Metrics,
        lists: Arc<InitialLists>,
    ) -> Self {
        PodWatches {
            client,
            metrics,
            lists,
            cache: Arc::default(),
            running: Mutex::default(),
            next_id: AtomicU64::new(1),
            changed_nodes,
        }
    }

    pub fn cache(&self) -> Arc<RwLock<PodCache>> {
        self.cache.clone()
    }

    /// Starts the watches `set` needs and stops the ones it no longer does.
    pub fn update(&self, set: &PolicySet) {
        let wanted = wanted_watches(set);
        let mut running = self.running.lock().expect("pod watches lock");
        let stale: Vec<WatchKey> = running
            .keys()
            .filter(|k| !wanted.contains(*k))
            .cloned()
            .collect();
        for key in stale {
            let r = running.remove(&key).expect("key was listed");
            r.abort.abort();
            let nodes = self
                .cache
                .write()
                .expect("pod cache lock")
                .forget_source(r.id);
            self.notify(nodes);
            tracing::info!(namespace = %key.0, selector = %key.1, "stopped pod watch");
        }
        for key in wanted {
            if running.contains_key(&key) {
                continue;
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let synced = Arc::new(AtomicBool::new(false));
            let events = pod_events(self.client.clone(), &key, self.lists.clone());
            let task = tokio::spawn(watch_pods(
                events,
                key.1.clone(),
                id,
                self.cache.clone(),
                synced.clone(),
                self.changed_nodes.clone(),
                self.metrics.clone(),
            ));
            tracing::info!(namespace = %key.0, selector = %key.1, "started pod watch");
            running.insert(
                key,
                Running {
                    id,
                    abort: task.abort_handle(),
                    synced,
                },
            );
        }
    }

    /// True when every watch `set` needs has listed its pods at least once.
    pub fn synced_for(&self, set: &PolicySet) -> bool {
        let running = self.running.lock().expect("pod watches lock");
        wanted_watches(set).iter().all(|k| {
            running
                .get(k)
                .is_some_and(|r| r.synced.load(Ordering::Acquire))
        })
    }

    /// Asks the node controller to evaluate these nodes again, through the same queue
    /// that critical-pod changes use.
    pub fn reevaluate(&self, nodes: Vec<String>) {
        self.notify(nodes);
    }

    fn notify(&self, nodes: Vec<String>) {
        for n in nodes {
            let _ = self.changed_nodes.send(n);
        }
    }
}

impl Drop for PodWatches {
    fn drop(&mut self) {
        for r in self.running.get_mut().expect("pod watches lock").values() {
            r.abort.abort();
        }
    }
}

/// One selector's pods as watcher events: in protobuf while the API server streams
/// initial lists and answers in protobuf, else in JSON (streamed, or paged where
/// the server cannot stream).
pub fn pod_events(
    client: Client,
    (namespace, selector): &WatchKey,
    lists: Arc<InitialLists>,
) -> BoxStream<'static, Result<Event<SlimPod>, watcher::Error>> {
    let api = Api::<SlimPod>::namespaced(client.clone(), namespace);
    let paged = pod_list_pages().labels(selector);
    if !lists.streaming() {
        return watch_with_initial_list(api, paged, lists);
    }
    let (ns, sel) = (namespace.clone(), selector.clone());
    fall_back_on_refusal(
        proto_watch::watch_pods(client, namespace, selector),
        move |e| {
            tracing::info!(namespace = %ns, selector = %sel, error = %e,
            "the API server refused a protobuf pod watch; watching in JSON");
            watch_with_initial_list(api, paged, lists)
        },
    )
}

/// Follows one selector's pods (`events`, from `watch_with_initial_list`) into the
/// pod cache.
async fn watch_pods(
    events: BoxStream<'static, Result<Event<SlimPod>, watcher::Error>>,
    selector: String,
    id: u64,
    cache: Arc<RwLock<PodCache>>,
    synced: Arc<AtomicBool>,
    changed: UnboundedSender<String>,
    metrics: Metrics,
) {
    let mut stream = relist_at_once(events)
        .backoff(WatchBackoff::default())
        .map_ok(|e| slim_event(e, |p: SlimPod| p.0))
        .boxed();
    // What a relist is rebuilding: after it, the cache forgets what this watch
    // reported before and no longer does.
    let mut relist: Option<HashSet<(String, String)>> = None;
    let mut list_started = std::time::Instant::now();
    let key = |p: &Pod| {
        (
            p.metadata.namespace.clone().unwrap_or_default(),
            p.metadata.name.clone().unwrap_or_default(),
        )
    };
    let send = |nodes: Vec<String>| {
        for n in nodes {
            let _ = changed.send(n);
        }
    };
    let mut restarts = RestartCounter::new("pods");
    while let Some(event) = stream.next().await {
        restarts.observe(&metrics, &event);
        match event {
            Ok(Event::Init) => {
                relist = Some(HashSet::new());
                list_started = std::time::Instant::now();
            }
            Ok(Event::InitApply(pod)) => {
                relist.get_or_insert_with(HashSet::new).insert(key(&pod));
                send(cache.write().expect("pod cache lock").upsert(id, &pod));
            }
            Ok(Event::InitDone) => {
                let fresh = relist.take().unwrap_or_default();
                // No node is planned before every critical-pod list is in.
                tracing::info!(
                    selector = %selector,
                    pods = fresh.len(),
                    seconds = list_started.elapsed().as_secs_f64(),
                    "listed pods"
                );
                let nodes = cache
                    .write()
                    .expect("pod cache lock")
                    .forget_source_except(id, &fresh);
                send(nodes);
                synced.store(true, Ordering::Release);
            }
            Ok(Event::Apply(pod)) => {
                send(cache.write().expect("pod cache lock").upsert(id, &pod));
            }
            Ok(Event::Delete(pod)) => {
                let (ns, name) = key(&pod);
                let node = cache
                    .write()
                    .expect("pod cache lock")
                    .forget(id, &ns, &name);
                send(node.into_iter().collect());
            }
            // The stream backs off and relists by itself; a failed relist is worth a log line.
            Err(e) => {
                tracing::warn!(selector = %selector, error = %e, "pod watch failed; retrying")
            }
        }
    }
}
