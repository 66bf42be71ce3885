//! What the controller knows of the cluster: the node, policy and critical-pod
//! caches the watches fill, the compiled policy set with its generation, and
//! whether the first lists are in. Every reconcile reads the cluster here.

use std::sync::{
    Arc, RwLock, RwLockReadGuard, RwLockWriteGuard,
    atomic::{AtomicBool, Ordering},
};

use kube::runtime::reflector::Store;
use taint_operator_crd::TaintPolicy;
use tokio::sync::watch;

use crate::cache::{
    node_store::NodeStore, pod_cache::PodCache, pod_watch::PodWatches, settled::PlanInputs,
};
use engine::policy_set::PolicySet;

/// How often a node worker waiting for the first lists looks again: the policy
/// set and the pod watches have no single signal to wait on.
const PLANNABLE_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// The caches as a node's plan reads them: the policy set with its generation, and
/// the pod and node caches, read when the plan is made.
pub struct PlanView {
    pub generation: u64,
    pub set: Arc<PolicySet>,
    pub pods: Arc<RwLock<PodCache>>,
    pub nodes: NodeStore,
}

pub struct Caches {
    nodes: NodeStore,
    policies: Store<TaintPolicy>,
    /// The policies as the engine reads them, with their generation (from 1).
    policy_set: RwLock<(u64, Arc<PolicySet>)>,
    pods: Arc<RwLock<PodCache>>,
    pod_watches: PodWatches,
    /// True once the policy cache has listed: enough for the webhook and /readyz.
    policies_listed: AtomicBool,
    /// True once the node cache has listed.
    nodes_listed: AtomicBool,
    /// True once the policy, node and pod caches have all synced.
    synced: watch::Receiver<bool>,
}

impl Caches {
    pub fn new(
        nodes: NodeStore,
        policies: Store<TaintPolicy>,
        pod_watches: PodWatches,
        synced: watch::Receiver<bool>,
    ) -> Self {
        Caches {
            nodes,
            policies,
            policy_set: RwLock::new((1, Arc::new(PolicySet::new([])))),
            pods: pod_watches.cache(),
            pod_watches,
            policies_listed: AtomicBool::new(false),
            nodes_listed: AtomicBool::new(false),
            synced,
        }
    }

    pub fn nodes(&self) -> &NodeStore {
        &self.nodes
    }

    pub fn policies(&self) -> &Store<TaintPolicy> {
        &self.policies
    }

    /// The critical pods as cached now; held briefly, the pod watches write it.
    pub fn pods(&self) -> RwLockReadGuard<'_, PodCache> {
        self.pods.read().expect("pod cache lock")
    }

    /// For tests that place pods in the cache by hand.
    pub fn pods_mut(&self) -> RwLockWriteGuard<'_, PodCache> {
        self.pods.write().expect("pod cache lock")
    }

    pub fn pod_watches(&self) -> &PodWatches {
        &self.pod_watches
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

    /// What planning a node reads from the caches besides the node, once it may be
    /// planned (see [`Caches::wait_plannable`]). `None` while a plan must wait: a
    /// policy was just added and its critical pods are still being listed, or it
    /// counts across nodes while the node list is still coming in.
    pub async fn plannable(&self) -> Option<PlanView> {
        self.wait_plannable().await;
        let view = self.view();
        self.may_plan_with(&view.set).then_some(view)
    }

    /// The caches as a plan reads them now, whether or not every list is in.
    pub fn view(&self) -> PlanView {
        let (generation, set) = self.policy_set_generation();
        PlanView {
            generation,
            set,
            pods: self.pods.clone(),
            nodes: self.nodes.clone(),
        }
    }

    /// What a plan of `node` under the policy set of generation `policies` reads
    /// besides the node.
    pub fn plan_inputs(&self, policies: u64, node: &str) -> PlanInputs {
        let pods = self.pods().index().changed(node);
        PlanInputs { policies, pods }
    }

    pub fn policies_listed(&self) -> bool {
        self.policies_listed.load(Ordering::Acquire)
    }

    pub fn mark_policies_listed(&self) {
        self.policies_listed.store(true, Ordering::Release);
    }

    pub fn nodes_listed(&self) -> bool {
        self.nodes_listed.load(Ordering::Acquire)
    }

    pub fn mark_nodes_listed(&self) {
        self.nodes_listed.store(true, Ordering::Release);
    }

    /// True once the policy, node and pod caches have all synced.
    pub fn synced(&self) -> bool {
        *self.synced.borrow()
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
                || (self.policies_listed() && self.may_plan_with(&self.policy_set()))
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
        let nodes_listed = self.synced() || self.nodes_listed();
        (nodes_listed || !set.counts_across_nodes()) && self.pod_watches.synced_for(set)
    }
}
