//! Fixtures for the mocked-API-server tests: fluent builders for TaintPolicy, Node
//! and Pod, and a `Harness` that builds the operator's `Context` around stores we
//! fill ourselves and a client whose every request goes to an [`ApiServerVerifier`].

#![allow(dead_code)] // each test binary uses a different part of the fixtures

pub mod verifier;

use std::{collections::BTreeMap, future::Future, sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::{
        Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, Taint,
    },
    apimachinery::pkg::{
        apis::meta::v1::{Condition, Time},
        util::intstr::IntOrString,
    },
    jiff::Timestamp,
};
use kube::{
    Client,
    api::ObjectMeta,
    runtime::{
        reflector::{self, ObjectRef, store::Writer},
        watcher,
    },
};
use taint_operator::{
    context::{CleanupGrace, Context, ContextOptions},
    metrics::Metrics,
    node_cache::CachedNode,
    pod_watch::PodWatches,
    policy_set::PolicySet,
};
use taint_operator_crd::{
    ConditionMatcher, CriticalPod, FINALIZER, LabelSelector, MANAGED_TAINTS_ANNOTATION, Matcher,
    Mode, PolicyTaint, Readiness, ReadinessCondition, TaintEffect, TaintPolicy, TaintPolicySpec,
    TaintPolicyStatus,
};
use tokio::sync::{mpsc, watch};

pub use verifier::ApiServerVerifier;

/// The operator's clock in every test.
pub const NOW: &str = "2026-11-20T12:00:00Z";
/// When the node conditions in these tests last changed: an hour before `NOW`.
pub const EARLIER: &str = "2026-11-20T11:00:00Z";
/// How long one scenario may take, requests and replies included.
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(1);
/// How long node writes must be idle before node events go out (production: 2 s).
pub const EVENT_QUIET: Duration = Duration::from_millis(10);

/// A plain fn for `Context::clock`.
pub fn now() -> Timestamp {
    NOW.parse().expect("NOW is a valid timestamp")
}

pub fn ts(s: &str) -> Timestamp {
    s.parse().expect("a valid RFC 3339 timestamp")
}

// ---------------------------------------------------------------- TaintPolicy

pub struct PolicyBuilder(TaintPolicy);

/// A policy named `name`, created at 2026-01-01, generation 1, carrying the finalizer
/// (as every policy the operator has seen does), with no taints or matchers yet.
pub fn policy(name: &str) -> PolicyBuilder {
    let mut p = TaintPolicy::new(
        name,
        TaintPolicySpec {
            node_selector: None,
            taints: Vec::new(),
            matchers: Vec::new(),
            readiness: None,
            mode: Mode::Continuous,
            dry_run: false,
            max_tainted_nodes: None,
        },
    );
    p.metadata.uid = Some(format!("uid-{name}"));
    p.metadata.generation = Some(1);
    p.metadata.resource_version = Some("1".into());
    p.metadata.creation_timestamp = Some(Time(ts("2026-01-01T00:00:00Z")));
    p.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    PolicyBuilder(p)
}

impl PolicyBuilder {
    pub fn taint(mut self, key: &str, value: Option<&str>, effect: TaintEffect) -> Self {
        self.0.spec.taints.push(PolicyTaint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
        });
        self
    }

    /// One more matcher with a single condition (`type` matches `status`).
    pub fn matcher(mut self, type_: &str, status: &str) -> Self {
        self.0.spec.matchers.push(Matcher {
            conditions: vec![ConditionMatcher {
                type_: type_.into(),
                status: status.into(),
                reason: None,
                for_: None,
            }],
        });
        self
    }

    pub fn select(mut self, key: &str, value: &str) -> Self {
        self.0
            .spec
            .node_selector
            .get_or_insert_with(LabelSelector::default)
            .match_labels
            .insert(key.into(), value.into());
        self
    }

    pub fn critical_pod(mut self, name: &str, namespace: &str, app: &str) -> Self {
        self.0
            .spec
            .readiness
            .get_or_insert_with(Readiness::default)
            .critical_pods
            .push(CriticalPod {
                name: name.into(),
                namespace: namespace.into(),
                selector: LabelSelector {
                    match_labels: BTreeMap::from([("app".to_string(), app.to_string())]),
                    match_expressions: Vec::new(),
                },
            });
        self
    }

    pub fn readiness_condition(mut self, type_: &str, status: &str) -> Self {
        self.0
            .spec
            .readiness
            .get_or_insert_with(Readiness::default)
            .conditions
            .push(ReadinessCondition {
                type_: type_.into(),
                status: status.into(),
            });
        self
    }

    pub fn mode(mut self, mode: Mode) -> Self {
        self.0.spec.mode = mode;
        self
    }

    pub fn dry_run(mut self) -> Self {
        self.0.spec.dry_run = true;
        self
    }

    pub fn max_tainted(mut self, limit: IntOrString) -> Self {
        self.0.spec.max_tainted_nodes = Some(limit);
        self
    }

    pub fn generation(mut self, generation: i64) -> Self {
        self.0.metadata.generation = Some(generation);
        self
    }

    pub fn created(mut self, at: &str) -> Self {
        self.0.metadata.creation_timestamp = Some(Time(ts(at)));
        self
    }

    /// As first seen by the operator: no finalizer yet.
    pub fn unfinalized(mut self) -> Self {
        self.0.metadata.finalizers = None;
        self
    }

    /// Deleted: the API server set `deletionTimestamp`, the finalizer holds it.
    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(ts("2026-11-20T11:59:00Z")));
        self
    }

    pub fn status(mut self, status: TaintPolicyStatus) -> Self {
        self.0.status = Some(status);
        self
    }

    pub fn build(self) -> TaintPolicy {
        self.0
    }
}

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

// ----------------------------------------------------------------------- Node

pub struct NodeBuilder(Node);

/// A node as the API server returns it: with things the operator's cache trims away
/// (another annotation, an unrelated spec field, node info in status).
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder(Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("100".into()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/hostname".to_string(),
                name.to_string(),
            )])),
            annotations: Some(BTreeMap::from([(
                "node.alpha.kubernetes.io/ttl".to_string(),
                "0".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("fake://{name}")),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                message: Some("kubelet is posting ready status".into()),
                last_heartbeat_time: Some(Time(ts(EARLIER))),
                last_transition_time: Some(Time(ts(EARLIER))),
            }]),
            ..NodeStatus::default()
        }),
    })
}

impl NodeBuilder {
    pub fn resource_version(mut self, rv: &str) -> Self {
        self.0.metadata.resource_version = Some(rv.into());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// A condition of `type_` with `status`, last changed at `EARLIER`.
    pub fn condition(mut self, type_: &str, status: &str) -> Self {
        let status_ = self.0.status.get_or_insert_with(NodeStatus::default);
        status_
            .conditions
            .get_or_insert_with(Vec::new)
            .push(NodeCondition {
                type_: type_.into(),
                status: status.into(),
                reason: Some(format!("{type_}Is{status}")),
                message: Some("reported by a node problem detector".into()),
                last_heartbeat_time: Some(Time(ts(EARLIER))),
                last_transition_time: Some(Time(ts(EARLIER))),
            });
        self
    }

    pub fn taint(mut self, key: &str, value: Option<&str>, effect: &str) -> Self {
        self.0
            .spec
            .get_or_insert_with(NodeSpec::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(Taint {
                key: key.into(),
                value: value.map(Into::into),
                effect: effect.into(),
                time_added: (effect == "NoExecute").then(|| Time(ts(EARLIER))),
            });
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// The ownership annotation, from `(taint id, policy)` pairs.
    pub fn owned(self, entries: &[(&str, &str)]) -> Self {
        let map: BTreeMap<&str, &str> = entries.iter().copied().collect();
        let value = serde_json::to_string(&map).expect("a string map serializes");
        self.annotation(MANAGED_TAINTS_ANNOTATION, &value)
    }

    pub fn without_annotations(mut self) -> Self {
        self.0.metadata.annotations = None;
        self
    }

    pub fn build(self) -> Node {
        self.0
    }
}

// ------------------------------------------------------------------------ Pod

pub struct PodBuilder(Pod);

pub fn pod(namespace: &str, name: &str) -> PodBuilder {
    PodBuilder(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        }),
    })
}

impl PodBuilder {
    pub fn on(mut self, node: &str) -> Self {
        self.0.spec.get_or_insert_with(PodSpec::default).node_name = Some(node.into());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    pub fn ready(mut self, ready: bool) -> Self {
        let status = self.0.status.get_or_insert_with(PodStatus::default);
        status.conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..PodCondition::default()
        }]);
        self
    }

    pub fn build(self) -> Pod {
        self.0
    }
}

// -------------------------------------------------------------------- Harness

/// The operator's `Context` over a mocked API server, with the caches filled by hand.
pub struct Harness {
    pub ctx: Arc<Context>,
    nodes: Writer<CachedNode>,
    policies: Writer<TaintPolicy>,
    _synced: watch::Sender<bool>,
    /// Nodes the operator asked the node controller to evaluate again.
    pub changed_nodes: mpsc::UnboundedReceiver<ObjectRef<CachedNode>>,
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
            node_controller: Duration::ZERO,
        },
    )
}

pub fn harness_with_grace(
    policies: &[TaintPolicy],
    nodes: &[Node],
    grace: CleanupGrace,
) -> (Harness, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let client = Client::new(service, "default");
    let (node_store, node_writer) = reflector::store::<CachedNode>();
    let (policy_store, policy_writer) = reflector::store::<TaintPolicy>();
    let (changed_tx, changed_rx) = mpsc::unbounded_channel();
    let (synced_tx, synced_rx) = watch::channel(true);
    let mut ctx = Context::new(
        client.clone(),
        node_store,
        policy_store,
        PodWatches::new(client, changed_tx),
        Metrics::default(),
        synced_rx,
        ContextOptions {
            reporter_instance: Some("test-replica".into()),
            event_quiet: EVENT_QUIET,
            cleanup_grace: grace,
        },
    );
    ctx.clock = now;
    let mut h = Harness {
        ctx: Arc::new(ctx),
        nodes: node_writer,
        policies: policy_writer,
        _synced: synced_tx,
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
        self.nodes
            .apply_watcher_event(&watcher::Event::Apply(CachedNode::from_node(&node)));
    }

    pub fn put_policy(&mut self, policy: TaintPolicy) {
        self.policies
            .apply_watcher_event(&watcher::Event::Apply(policy));
    }

    /// Compiles the policy set from the policy cache, as the policy watcher does.
    pub fn compile_policies(&self) {
        let policies = self.ctx.policies.state();
        self.ctx.set_policy_set(PolicySet::from_resources(
            policies.iter().map(|p| p.as_ref()),
        ));
    }

    /// The cached node, as the node controller hands it to `reconcile_node`.
    pub fn node(&self, name: &str) -> Arc<CachedNode> {
        self.ctx
            .nodes
            .get(&ObjectRef::new(name))
            .unwrap_or_else(|| panic!("node {name} is not in the cache"))
    }

    pub fn policy(&self, name: &str) -> Arc<TaintPolicy> {
        self.ctx
            .policies
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
