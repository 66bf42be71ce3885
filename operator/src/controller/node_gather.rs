//! A node reconcile's first step: everything its plan reads, gathered as one
//! value. The node (our own last write when the cache lags behind it), the policy
//! set and its generation, the moment the plan is made for, what each policy wants
//! of the node with the critical pods as cached now, and the pod and node caches
//! for what a drain or a zone reads later. Before each plan attempt the ledgers
//! are asked too (`node_reconciler::answers`): which caps admit the node and how
//! far each drain may go. Deciding then reads values only.

use std::{
    borrow::Cow,
    sync::{Arc, RwLock},
};

use k8s_openapi::jiff::Timestamp;

use crate::{
    cache::{
        node_cache::CachedNode, node_store::NodeStore, pod_cache::PodCache, settled::PlanInputs,
    },
    controller::{caches::PlanView, context::Context},
};
use engine::{
    decision::{NodeEvaluation, evaluate_node},
    policy_set::PolicySet,
};

pub struct Gathered {
    pub node: CachedNode,
    pub set: Arc<PolicySet>,
    /// What the plan reads besides the node, for the settled record; `None` when
    /// the set is not the cached one (a policy's cleanup), which records nothing.
    pub inputs: Option<PlanInputs>,
    pub now: Timestamp,
    /// What each policy wants on `node`, with the pods as cached at the gather.
    pub eval: NodeEvaluation,
    /// The critical pods, for a zone's health; held briefly, the pod watches write it.
    pub pods: Arc<RwLock<PodCache>>,
    /// Every cached node, read only when a cap or a zone needs them.
    pub nodes: NodeStore,
}

/// Gathers what planning `node` reads now, or `None` while a plan must wait: a
/// policy was just added and its critical pods are still being listed, or it
/// counts across nodes while the node list is still coming in. The reconcile has
/// begun once it returns a value (see `WriteTracking::begin`).
pub async fn gather(ctx: &Context, node: Arc<CachedNode>) -> Option<Gathered> {
    let view = ctx.caches.plannable().await?;
    let node = ctx.writes.begin(node);
    let generation = view.generation;
    Some(gathered(ctx, view, (*node).clone(), Some(generation)))
}

/// Gathers `node`, to be planned under `set` (a policy's cleanup); the reconcile
/// has begun.
pub fn with_set(ctx: &Context, set: Arc<PolicySet>, node: CachedNode) -> Gathered {
    let node = ctx.writes.begin(Arc::new(node));
    let view = PlanView {
        set,
        ..ctx.caches.view()
    };
    gathered(ctx, view, (*node).clone(), None)
}

/// The evaluation and the settled record's inputs read from the pods at once, so
/// a record never names pods the plan did not see.
fn gathered(ctx: &Context, view: PlanView, node: CachedNode, generation: Option<u64>) -> Gathered {
    let now = (ctx.clock)();
    let (eval, inputs) = {
        let pods = view.pods.read().expect("pod cache lock");
        let eval = evaluate_node(&view.set, &node.view, pods.index(), now);
        let inputs = generation.map(|policies| PlanInputs {
            policies,
            pods: pods.index().changed(node.name()),
        });
        (eval, inputs)
    };
    Gathered {
        node,
        set: view.set,
        inputs,
        now,
        eval,
        pods: view.pods,
        nodes: view.nodes,
    }
}

impl Gathered {
    /// What each policy wants on `node`: the gathered evaluation for the gathered
    /// version, else (a newer version read after a conflict) evaluated now.
    pub fn evaluation_of(&self, node: &CachedNode) -> Cow<'_, NodeEvaluation> {
        if node.resource_version() == self.node.resource_version() {
            return Cow::Borrowed(&self.eval);
        }
        let pods = self.pods.read().expect("pod cache lock");
        Cow::Owned(evaluate_node(&self.set, &node.view, pods.index(), self.now))
    }

    /// Every cached node as the cache has it now; read only when a zone asks.
    pub fn fleet(&self) -> Vec<Arc<CachedNode>> {
        self.nodes.state()
    }
}
