//! Mocked-API-server helpers for `node_reconcile.rs`, `policy_reconcile.rs` and
//! `startup.rs`: a `Harness` that builds the operator's `Context` around stores we
//! fill ourselves and a client whose every request goes to an [`ApiServerVerifier`].
//! The object builders (`policy`, `served_node`, `pod`) come from the testkit crate,
//! re-exported here; the operator's clock is its `now()`.

#![allow(dead_code)] // each test binary uses a different part of the fixtures

pub mod verifier;

use std::{future::Future, sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::Node,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::{
    client::ClientBuilder,
    runtime::{
        reflector::{self, ObjectRef, store::Writer},
        watcher,
    },
};
use taint_operator::{
    cache::initial_list::InitialLists,
    cache::node_cache::CachedNode,
    cache::node_store::NodeStore,
    cache::pod_watch::PodWatches,
    controller::{
        context::{CleanupGrace, Context, ContextOptions},
        node_events::EventPace,
        node_queue::NodeQueue,
        node_reconciler::reconcile_named,
    },
    telemetry::{api_metrics::ApiMetricsLayer, metrics::Metrics},
};
use taint_operator_crd::TaintPolicy;
use taint_operator_engine::policy_set::PolicySet;
use tokio::sync::{mpsc, watch};

pub use taint_operator_testkit::*;
pub use verifier::ApiServerVerifier;

/// How long one scenario may take, requests and replies included: a guard against
/// a request that never comes, not a measurement, so a loaded machine never trips
/// it (a scenario takes milliseconds).
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long node writes must be idle before node events go out (production: 2 s).
pub const EVENT_QUIET: Duration = Duration::from_millis(10);

/// A Ready condition as the status writer writes it.
pub fn ready_condition(
    status: &str,
    reason: &str,
    message: &str,
    generation: i64,
    since: &str,
) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(generation),
        last_transition_time: Time(ts(since)),
    }
}

// -------------------------------------------------------------------- Harness

/// The operator's `Context` over a mocked API server, with the caches filled by hand.
pub struct Harness {
    pub ctx: Arc<Context>,
    nodes: NodeStore,
    policies: Writer<TaintPolicy>,
    /// What the sync gate says: true (every cache listed) unless a test starts
    /// the operator with its lists still coming in.
    pub synced: watch::Sender<bool>,
    /// Nodes the operator asked the node controller to evaluate again.
    pub changed_nodes: mpsc::UnboundedReceiver<String>,
}

/// A context whose caches hold `policies` and `nodes` (as the node
/// watcher keeps them), whose policy set is compiled from `policies`, whose caches
/// count as synced and whose clock says `NOW`; and the verifier that answers its
/// requests, knowing the API server's (untrimmed) copy of every node.
/// No node controller runs here: cleanup writes the nodes itself at once.
pub fn harness(policies: &[TaintPolicy], nodes: &[Node]) -> (Harness, ApiServerVerifier) {
    harness_with_grace(
        policies,
        nodes,
        CleanupGrace {
            watcher: Duration::ZERO,
            node_controller_stall: Duration::ZERO,
        },
    )
}

/// [`harness`] whose operator reads the time from `clock` instead of `now`.
pub fn harness_with_clock(
    policies: &[TaintPolicy],
    nodes: &[Node],
    clock: fn() -> k8s_openapi::jiff::Timestamp,
) -> (Harness, ApiServerVerifier) {
    build_harness(
        policies,
        nodes,
        CleanupGrace {
            watcher: Duration::ZERO,
            node_controller_stall: Duration::ZERO,
        },
        clock,
    )
}

pub fn harness_with_grace(
    policies: &[TaintPolicy],
    nodes: &[Node],
    grace: CleanupGrace,
) -> (Harness, ApiServerVerifier) {
    build_harness(policies, nodes, grace, now)
}

fn build_harness(
    policies: &[TaintPolicy],
    nodes: &[Node],
    grace: CleanupGrace,
    clock: fn() -> k8s_openapi::jiff::Timestamp,
) -> (Harness, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    // Requests are counted as in production (`taint_operator_api_requests_total`),
    // into the metrics the context records everything else in.
    let metrics = Metrics::default();
    let client = ClientBuilder::new(service, "default")
        .with_layer(&ApiMetricsLayer(metrics.clone()))
        .build();
    let node_store = NodeStore::default();
    let (policy_store, policy_writer) = reflector::store::<TaintPolicy>();
    let (changed_tx, changed_rx) = mpsc::unbounded_channel();
    let (synced_tx, synced_rx) = watch::channel(true);
    let mut ctx = Context::new(
        client.clone(),
        node_store.clone(),
        policy_store,
        // The scripted API servers answer paged lists.
        PodWatches::new(
            client,
            changed_tx,
            metrics.clone(),
            Arc::new(InitialLists::paged()),
        ),
        metrics,
        synced_rx,
        ContextOptions {
            reporter_instance: Some("test-replica".into()),
            event_pace: EventPace {
                quiet: EVENT_QUIET,
                qps: 0,
            },
            cleanup_grace: grace,
            ..ContextOptions::default()
        },
    );
    ctx.clock = clock;
    let mut h = Harness {
        ctx: Arc::new(ctx),
        nodes: node_store,
        policies: policy_writer,
        synced: synced_tx,
        changed_nodes: changed_rx,
    };
    for n in nodes {
        h.put_node(n.clone());
    }
    for p in policies {
        h.put_policy(p.clone());
    }
    h.compile_policies();
    let verifier = ApiServerVerifier::new(handle, nodes);
    (h, verifier)
}

impl Harness {
    /// Puts the node into the node cache, kept as the node watcher keeps it.
    pub fn put_node(&mut self, node: Node) {
        self.nodes.apply(CachedNode::from_node(&node));
    }

    /// The operator's node queue with one worker (so nodes are reconciled in the
    /// order they are queued), reconciling with `reconcile_named`. Close the queue
    /// and await the handle to stop it.
    pub fn start_node_queue(&self) -> (Arc<NodeQueue>, tokio::task::JoinHandle<()>) {
        let ctx = self.ctx.clone();
        let queue = NodeQueue::new(
            ctx.writes.activity().clone(),
            ctx.metrics.node_queue_wait.clone(),
        );
        let workers = tokio::spawn(
            queue
                .clone()
                .run(1, move |work| reconcile_named(work, ctx.clone())),
        );
        (queue, workers)
    }

    pub fn put_policy(&mut self, policy: TaintPolicy) {
        self.policies
            .apply_watcher_event(&watcher::Event::Apply(policy));
    }

    /// Takes the policy out of the policy cache, as the policy watcher does when it
    /// is gone from the API server.
    pub fn remove_policy(&mut self, name: &str) {
        let policy = (*self.policy(name)).clone();
        self.policies
            .apply_watcher_event(&watcher::Event::Delete(policy));
    }

    /// Compiles the policy set from the policy cache, as the policy watcher does.
    pub fn compile_policies(&self) {
        let policies = self.ctx.caches.policies().state();
        self.ctx.caches.set_policy_set(PolicySet::from_resources(
            policies.iter().map(|p| p.as_ref()),
        ));
    }

    /// The cached node, as the node controller hands it to `reconcile_node`.
    pub fn node(&self, name: &str) -> Arc<CachedNode> {
        self.ctx
            .caches
            .nodes()
            .get(name)
            .unwrap_or_else(|| panic!("node {name} is not in the cache"))
    }

    pub fn policy(&self, name: &str) -> Arc<TaintPolicy> {
        self.ctx
            .caches
            .policies()
            .get(&ObjectRef::new(name))
            .unwrap_or_else(|| panic!("policy {name} is not in the cache"))
    }

    pub fn metrics(&self) -> Metrics {
        self.ctx.metrics.clone()
    }
}

/// Runs one scenario: `server` plays the API server's side (each expected request
/// in order), `operator` drives the operator with the harness and must drop it when
/// done, which closes the client. Then the verifier insists nothing else was sent.
/// The whole exchange must finish within `SCENARIO_TIMEOUT`.
pub async fn scenario<S, SF, O, OF, T>(
    h: Harness,
    api: ApiServerVerifier,
    server: S,
    operator: O,
) -> T
where
    S: FnOnce(ApiServerVerifier) -> SF,
    SF: Future<Output = ApiServerVerifier> + Send + 'static,
    O: FnOnce(Harness) -> OF,
    OF: Future<Output = T>,
{
    let run = async {
        let server = tokio::spawn({
            let script = server(api);
            async move { script.await.no_more_requests().await }
        });
        let out = operator(h).await;
        if let Err(e) = server.await {
            match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(e) => panic!("API server task failed: {e}"),
            }
        }
        out
    };
    tokio::time::timeout(SCENARIO_TIMEOUT, run)
        .await
        .expect("the scenario did not finish in time: a request never came or never got its answer")
}

/// Runs `call` with a client whose every request goes to the scripted `server`
/// (which starts with no nodes), and waits for both; `SCENARIO_TIMEOUT` at most for `call`.
pub async fn with_scripted_server<S, SF, C, CF, T>(server: S, call: C) -> T
where
    S: FnOnce(ApiServerVerifier) -> SF,
    SF: Future<Output = ()> + Send + 'static,
    C: FnOnce(kube::Client) -> CF,
    CF: Future<Output = T>,
{
    let (service, handle) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let server = tokio::spawn(server(ApiServerVerifier::new(handle, &[])));
    let result = tokio::time::timeout(
        SCENARIO_TIMEOUT,
        call(kube::Client::new(service, "default")),
    )
    .await
    .expect("the call finished in time");
    server.await.expect("the scripted server did not panic");
    result
}
