//! Engine test helpers: plan a small world of policies, nodes and pods with the
//! decision core, apply a plan back onto its Nodes so a test can plan again, and
//! read plans. Serves `decision_rules.rs` and `properties.rs`; the object builders
//! themselves live in the testkit crate, re-exported here.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Pod, Taint},
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, DRAIN_STARTED_ANNOTATION, MANAGED_TAINTS_ANNOTATION, TaintPolicy,
};
use taint_operator_engine::{
    cluster::{NodeView, PodIndex},
    cluster_plan::{PolicySummary, plan_cluster_evicted},
    node_plan::{NodePlan, UnknownPolicies},
    policy_set::PolicySet,
};
pub use taint_operator_testkit::*;

/// The decision core's view of a built node.
pub trait NodeBuilderExt {
    fn view(self) -> NodeView;
}

impl NodeBuilderExt for NodeBuilder {
    fn view(self) -> NodeView {
        NodeView::from_node(&self.build())
    }
}

// ---------------------------------------------------------------------------
// Applying plans

/// The Node after a plan is written: its new taints and ownership/bootstrap annotations
/// (an annotation with nothing left in it is removed), everything else untouched.
pub fn apply_plan(node: &Node, plan: &NodePlan) -> Node {
    assert_eq!(
        node.metadata.name.as_deref(),
        Some(plan.node.as_str()),
        "plan applied to the wrong node"
    );
    let mut node = node.clone();
    let spec = node.spec.get_or_insert_with(NodeSpec::default);
    spec.taints = (!plan.taints.is_empty()).then(|| plan.taints.clone());
    let annotations = node.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (key, value) in [
        (MANAGED_TAINTS_ANNOTATION, plan.managed.to_annotation()),
        (BOOTSTRAPPED_ANNOTATION, plan.bootstrapped.to_annotation()),
        (DRAIN_STARTED_ANNOTATION, plan.drains.to_annotation()),
    ] {
        match value {
            Some(v) => {
                annotations.insert(key.into(), v);
            }
            None => {
                annotations.remove(key);
            }
        }
    }
    if annotations.is_empty() {
        node.metadata.annotations = None;
    }
    node
}

/// A cluster snapshot: the objects the controller's caches would hold.
#[derive(Debug, Clone, Default)]
pub struct World {
    pub policies: Vec<TaintPolicy>,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
}

impl World {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn policy(mut self, p: impl Into<TaintPolicy>) -> Self {
        self.policies.push(p.into());
        self
    }

    pub fn node(mut self, n: impl Into<Node>) -> Self {
        self.nodes.push(n.into());
        self
    }

    pub fn pod(mut self, p: impl Into<Pod>) -> Self {
        self.pods.push(p.into());
        self
    }

    pub fn views(&self) -> Vec<NodeView> {
        self.nodes.iter().map(NodeView::from_node).collect()
    }

    pub fn set(&self) -> PolicySet {
        PolicySet::from_resources(&self.policies)
    }

    /// Plans at [`NOW`], removing what unknown policies own (as the controller does).
    pub fn plan(&self) -> Planned {
        self.plan_with(now(), UnknownPolicies::Remove)
    }

    pub fn plan_at(&self, at: Timestamp) -> Planned {
        self.plan_with(at, UnknownPolicies::Remove)
    }

    pub fn plan_with(&self, at: Timestamp, unknown: UnknownPolicies) -> Planned {
        plan_all(
            &self.set(),
            &self.views(),
            &PodIndex::from_pods(&self.pods),
            at,
            unknown,
        )
    }

    /// Plans at `at`; `evicted` says whether the pods in the way of every drain are gone.
    pub fn plan_evicted(&self, at: Timestamp, evicted: bool) -> Planned {
        plan_all_evicted(
            &self.set(),
            &self.views(),
            &PodIndex::from_pods(&self.pods),
            at,
            UnknownPolicies::Remove,
            &|_, _| evicted,
        )
    }

    /// Writes every node's plan back onto the nodes.
    pub fn apply(&mut self, plan: &Planned) {
        assert_eq!(plan.nodes.len(), self.nodes.len());
        for (node, p) in self.nodes.iter_mut().zip(&plan.nodes) {
            *node = apply_plan(node, p);
        }
    }

    /// Plans at [`NOW`] and applies the plan; returns the plan.
    pub fn step(&mut self) -> Planned {
        let plan = self.plan();
        self.apply(&plan);
        plan
    }

    pub fn node_named(&self, name: &str) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    /// Sets a condition of a node (transitioned now), keeping everything else.
    pub fn set_condition(&mut self, node: &str, type_: &str, status: &str) {
        self.set_condition_at(node, type_, status, now());
    }

    /// Sets a condition of a node, transitioned at `at`, keeping everything else.
    pub fn set_condition_at(&mut self, node: &str, type_: &str, status: &str, at: Timestamp) {
        let conditions = self
            .node_mut(node)
            .status
            .get_or_insert_with(NodeStatus::default)
            .conditions
            .get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != type_);
        conditions.push(NodeCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: Some(Time(at)),
            ..NodeCondition::default()
        });
    }

    pub fn node_mut(&mut self, name: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no node {name}"))
    }
}

// ---------------------------------------------------------------------------
// Reading plans

/// A cluster plan with every node's plan spelled out, as the tests read it.
#[derive(Debug, Clone)]
pub struct Planned {
    /// One per node, in input order; a copy of the node where `plan_cluster` says
    /// nothing changes.
    pub nodes: Vec<NodePlan>,
    pub policies: Vec<PolicySummary>,
    pub next_check: Option<Timestamp>,
}

/// [`plan_cluster`], every node's plan spelled out. Checks on the way that the plan
/// leaves out exactly the nodes whose plans change nothing, add, remove, note or
/// complete nothing.
pub fn plan_all(
    set: &taint_operator_engine::policy_set::PolicySet,
    views: &[NodeView],
    index: &PodIndex,
    at: Timestamp,
    unknown: UnknownPolicies,
) -> Planned {
    plan_all_evicted(set, views, index, at, unknown, &|_, _| false)
}

/// [`plan_all`], with `evicted(node, policy)` for the drains.
pub fn plan_all_evicted(
    set: &taint_operator_engine::policy_set::PolicySet,
    views: &[NodeView],
    index: &PodIndex,
    at: Timestamp,
    unknown: UnknownPolicies,
    evicted: &dyn Fn(&str, &str) -> bool,
) -> Planned {
    let refs: Vec<&NodeView> = views.iter().collect();
    let plan = plan_cluster_evicted(set, &refs, index, at, unknown, evicted);
    let nodes = plan.node_plans(views);
    for ((view, np), change) in views.iter().zip(&nodes).zip(&plan.changes) {
        let quiet = !np.changes(view)
            && np.added.is_empty()
            && np.removed.is_empty()
            && np.notes.is_empty()
            && np.completed.is_empty();
        assert_eq!(
            change.is_none(),
            quiet,
            "left out exactly when quiet: {np:?}"
        );
    }
    Planned {
        nodes,
        policies: plan.policies,
        next_check: plan.next_check,
    }
}

pub trait ClusterPlanExt {
    fn node(&self, name: &str) -> &NodePlan;
    fn summary(&self, policy: &str) -> &PolicySummary;
}

impl ClusterPlanExt for Planned {
    fn node(&self, name: &str) -> &NodePlan {
        self.nodes
            .iter()
            .find(|n| n.node == name)
            .unwrap_or_else(|| panic!("no plan for node {name}"))
    }

    fn summary(&self, policy: &str) -> &PolicySummary {
        self.policies
            .iter()
            .find(|p| p.name == policy)
            .unwrap_or_else(|| panic!("no summary for policy {policy}"))
    }
}

/// `key=value:Effect` (or `key:Effect`) of a taint.
pub fn show(t: &Taint) -> String {
    match &t.value {
        Some(v) => format!("{}={}:{}", t.key, v, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

pub trait NodePlanExt {
    /// The resulting taints as `key=value:Effect`, in order.
    fn taint_list(&self) -> Vec<String>;
    /// `key=value:Effect` of every added taint.
    fn added_list(&self) -> Vec<String>;
    /// `key:Effect` of every removed taint.
    fn removed_list(&self) -> Vec<String>;
    /// The managed-taints map as `(id, policy)` pairs.
    fn managed_list(&self) -> Vec<(String, String)>;
    /// True when the plan adds or removes nothing.
    fn is_noop(&self) -> bool;
}

impl NodePlanExt for NodePlan {
    fn taint_list(&self) -> Vec<String> {
        self.taints.iter().map(show).collect()
    }

    fn added_list(&self) -> Vec<String> {
        self.added
            .iter()
            .map(|c| match &c.value {
                Some(v) => format!("{}={}:{}", c.key, v, c.effect.as_str()),
                None => format!("{}:{}", c.key, c.effect.as_str()),
            })
            .collect()
    }

    fn removed_list(&self) -> Vec<String> {
        self.removed
            .iter()
            .map(|c| format!("{}:{}", c.key, c.effect.as_str()))
            .collect()
    }

    fn managed_list(&self) -> Vec<(String, String)> {
        self.managed
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn is_noop(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

/// `[(id, policy)]` for comparing with [`NodePlanExt::managed_list`].
pub fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The annotations of a node, for asserting on what a write would put there.
pub fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}
