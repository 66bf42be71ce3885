//! A node reconcile's first step: everything its plan reads, gathered as one
//! value. The node (our own last write when the cache lags behind it), the policy
//! set and its generation, the moment the plan is made for, the critical pods and,
//! read only when a cap or a zone needs them, every other node (the zone views). Before each plan
//! attempt the ledgers are asked too (`node_reconciler::answers`): which caps admit
//! the node and how far each drain may go. Deciding then reads values only.

use std::{sync::Arc, sync::RwLockReadGuard};

use k8s_openapi::jiff::Timestamp;

use crate::{
    cache::{node_cache::CachedNode, pod_cache::PodCache, settled::PlanInputs},
    controller::{caches::Caches, context::Context},
};
use engine::{
    cluster::NodeView,
    decision::{NodeEvaluation, evaluate_node},
    policy_set::PolicySet,
};

pub struct Gathered<'a> {
    caches: &'a Caches,
    pub node: CachedNode,
    pub set: Arc<PolicySet>,
    /// What the plan reads besides the node, for the settled record; `None` when
    /// the set is not the cached one (a policy's cleanup), which records nothing.
    pub inputs: Option<PlanInputs>,
    pub now: Timestamp,
}

/// Gathers what planning `node` reads now, or `None` while a plan must wait: a
/// policy was just added and its critical pods are still being listed, or it
/// counts across nodes while the node list is still coming in.
pub fn gather<'a>(ctx: &'a Context, node: Arc<CachedNode>) -> Option<Gathered<'a>> {
    let node = ctx.writes.freshest(node);
    let (set, inputs) = ctx.caches.plan_view(node.name())?;
    let mut gathered = with_set(ctx, set, (*node).clone());
    gathered.inputs = Some(inputs);
    Some(gathered)
}

/// Gathers `node` as given, to be planned under `set`.
pub fn with_set(ctx: &Context, set: Arc<PolicySet>, node: CachedNode) -> Gathered<'_> {
    Gathered {
        caches: &ctx.caches,
        node,
        set,
        inputs: None,
        now: (ctx.clock)(),
    }
}

impl Gathered<'_> {
    pub fn pods(&self) -> RwLockReadGuard<'_, PodCache> {
        self.caches.pods()
    }

    /// What each policy wants on `node` (the gathered node, or a newer version of
    /// it read after a conflict), with the pods as cached now.
    pub fn evaluate(&self, node: &NodeView) -> NodeEvaluation {
        evaluate_node(&self.set, node, self.pods().index(), self.now)
    }

    /// Every cached node as the cache has it now; read only when a zone asks.
    pub fn fleet(&self) -> Vec<Arc<CachedNode>> {
        self.caches.nodes().state()
    }
}
