//! Fluent fixtures for the decision core: TaintPolicies, Nodes and Pods as the API
//! server would hand them to the controller, plus helpers that plan a small cluster
//! and apply a plan back onto its Nodes so a test can plan again.
//!
//! Every test crate includes this module but uses a different part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{
        Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, Taint,
    },
    apimachinery::pkg::{
        apis::meta::v1::{ObjectMeta, Time},
        util::intstr::IntOrString,
    },
    jiff::{SignedDuration, Timestamp},
};
use taint_operator::{
    cluster::{NodeView, PodIndex},
    cluster_plan::{PolicySummary, plan_cluster},
    node_plan::{NodePlan, UnknownPolicies},
    policy_set::PolicySet,
};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, ConditionMatcher, CriticalPod, LabelSelector,
    LabelSelectorRequirement, MANAGED_TAINTS_ANNOTATION, Matcher, Mode, POD_READY_ANNOTATION,
    PolicyTaint, Readiness, ReadinessCondition, SelectorOperator, TaintEffect, TaintPolicy,
    TaintPolicySpec,
};

pub use taint_operator_crd::TaintEffect::{NoExecute, NoSchedule, PreferNoSchedule};

// ---------------------------------------------------------------------------
// Time

/// The fixed "now" of most tests.
pub const NOW: &str = "2026-11-20T12:00:00Z";

pub fn ts(s: &str) -> Timestamp {
    s.parse()
        .unwrap_or_else(|e| panic!("bad timestamp {s:?}: {e}"))
}

pub fn now() -> Timestamp {
    ts(NOW)
}

/// `now() - secs`.
pub fn ago(secs: i64) -> Timestamp {
    now()
        .checked_sub(SignedDuration::from_secs(secs))
        .expect("in range")
}

/// `t + secs`.
pub fn plus(t: Timestamp, secs: i64) -> Timestamp {
    t.checked_add(SignedDuration::from_secs(secs))
        .expect("in range")
}

// ---------------------------------------------------------------------------
// Selectors

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn match_labels(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: labels(pairs),
        match_expressions: Vec::new(),
    }
}

pub fn match_expression(key: &str, operator: SelectorOperator, values: &[&str]) -> LabelSelector {
    LabelSelector {
        match_labels: BTreeMap::new(),
        match_expressions: vec![LabelSelectorRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }],
    }
}

// ---------------------------------------------------------------------------
// TaintPolicy

/// One condition of a matcher: `cond("T", "True").reason("R.*").for_("30s")`.
#[derive(Debug, Clone)]
pub struct Cond(ConditionMatcher);

pub fn cond(type_: &str, status: &str) -> Cond {
    Cond(ConditionMatcher {
        type_: type_.into(),
        status: status.into(),
        reason: None,
        for_: None,
    })
}

impl Cond {
    pub fn reason(mut self, reason: &str) -> Self {
        self.0.reason = Some(reason.into());
        self
    }

    pub fn for_(mut self, duration: &str) -> Self {
        self.0.for_ = Some(duration.into());
        self
    }
}

impl From<Cond> for ConditionMatcher {
    fn from(c: Cond) -> Self {
        c.0
    }
}

/// `policy("p")`: a Continuous, valid-looking policy named `p` with uid `uid-p`,
/// created at 2026-01-01T00:00:00Z; add taints and matchers or readiness.
pub fn policy(name: &str) -> PolicyBuilder {
    PolicyBuilder {
        policy: TaintPolicy {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                creation_timestamp: Some(Time(ts("2026-01-01T00:00:00Z"))),
                generation: Some(1),
                finalizers: Some(vec![taint_operator_crd::FINALIZER.into()]),
                ..ObjectMeta::default()
            },
            spec: TaintPolicySpec {
                node_selector: None,
                taints: Vec::new(),
                matchers: Vec::new(),
                readiness: None,
                mode: Mode::Continuous,
                dry_run: false,
                max_tainted_nodes: None,
            },
            status: None,
        },
    }
}

#[derive(Debug, Clone)]
pub struct PolicyBuilder {
    policy: TaintPolicy,
}

impl PolicyBuilder {
    pub fn uid(mut self, uid: &str) -> Self {
        self.policy.metadata.uid = Some(uid.into());
        self
    }

    pub fn created(mut self, at: &str) -> Self {
        self.policy.metadata.creation_timestamp = Some(Time(ts(at)));
        self
    }

    pub fn generation(mut self, generation: i64) -> Self {
        self.policy.metadata.generation = Some(generation);
        self
    }

    /// Sets `deletionTimestamp`: the policy is being deleted (its finalizer still holds it).
    pub fn deleting(mut self) -> Self {
        self.policy.metadata.deletion_timestamp = Some(Time(ago(5)));
        self
    }

    pub fn taint(self, key: &str, value: &str, effect: TaintEffect) -> Self {
        self.taint_opt(key, Some(value), effect)
    }

    /// A taint without a value.
    pub fn bare_taint(self, key: &str, effect: TaintEffect) -> Self {
        self.taint_opt(key, None, effect)
    }

    pub fn taint_opt(mut self, key: &str, value: Option<&str>, effect: TaintEffect) -> Self {
        self.policy.spec.taints.push(PolicyTaint {
            key: key.into(),
            value: value.map(str::to_string),
            effect,
        });
        self
    }

    /// One matcher: matches when ALL of `conditions` match.
    pub fn matcher(mut self, conditions: impl IntoIterator<Item = Cond>) -> Self {
        self.policy.spec.matchers.push(Matcher {
            conditions: conditions.into_iter().map(Into::into).collect(),
        });
        self
    }

    fn readiness_mut(&mut self) -> &mut Readiness {
        self.policy
            .spec
            .readiness
            .get_or_insert_with(Readiness::default)
    }

    /// A readiness condition: present with a status matching `status`.
    pub fn ready_when(mut self, type_: &str, status: &str) -> Self {
        self.readiness_mut().conditions.push(ReadinessCondition {
            type_: type_.into(),
            status: status.into(),
        });
        self
    }

    /// A critical pod: at least one Ready pod in `namespace` matching `selector` on the node.
    pub fn critical_pod(mut self, name: &str, namespace: &str, selector: LabelSelector) -> Self {
        self.readiness_mut().critical_pods.push(CriticalPod {
            name: name.into(),
            namespace: namespace.into(),
            selector,
        });
        self
    }

    pub fn selector(mut self, selector: LabelSelector) -> Self {
        self.policy.spec.node_selector = Some(selector);
        self
    }

    pub fn mode(mut self, mode: Mode) -> Self {
        self.policy.spec.mode = mode;
        self
    }

    pub fn bootstrap_only(self) -> Self {
        self.mode(Mode::BootstrapOnly)
    }

    pub fn dry_run(mut self) -> Self {
        self.policy.spec.dry_run = true;
        self
    }

    pub fn max_tainted(mut self, cap: i32) -> Self {
        self.policy.spec.max_tainted_nodes = Some(IntOrString::Int(cap));
        self
    }

    /// `"30%"` or another string form of `maxTaintedNodes`.
    pub fn max_tainted_str(mut self, cap: &str) -> Self {
        self.policy.spec.max_tainted_nodes = Some(IntOrString::String(cap.into()));
        self
    }

    pub fn build(self) -> TaintPolicy {
        self.policy
    }
}

impl From<PolicyBuilder> for TaintPolicy {
    fn from(b: PolicyBuilder) -> Self {
        b.build()
    }
}

// ---------------------------------------------------------------------------
// Node

/// `node("n1")`: a node with no labels, conditions, taints or annotations.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder {
        node: Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus::default()),
        },
    }
}

#[derive(Debug, Clone)]
pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.node
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// A condition that has had `status` since well before any `for` window (a day ago).
    pub fn condition(self, type_: &str, status: &str) -> Self {
        self.condition_full(type_, status, None, Some(ago(86_400)))
    }

    /// A condition with a reason, transitioned a day ago.
    pub fn condition_reason(self, type_: &str, status: &str, reason: &str) -> Self {
        self.condition_full(type_, status, Some(reason), Some(ago(86_400)))
    }

    /// A condition with the given lastTransitionTime.
    pub fn condition_since(self, type_: &str, status: &str, since: Timestamp) -> Self {
        self.condition_full(type_, status, None, Some(since))
    }

    pub fn condition_full(
        mut self,
        type_: &str,
        status: &str,
        reason: Option<&str>,
        since: Option<Timestamp>,
    ) -> Self {
        let conditions = self
            .node
            .status
            .get_or_insert_with(NodeStatus::default)
            .conditions
            .get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != type_);
        conditions.push(NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.map(str::to_string),
            last_transition_time: since.map(Time),
            ..NodeCondition::default()
        });
        self
    }

    pub fn taint(self, key: &str, value: &str, effect: TaintEffect) -> Self {
        self.taint_opt(key, Some(value), effect, None)
    }

    pub fn bare_taint(self, key: &str, effect: TaintEffect) -> Self {
        self.taint_opt(key, None, effect, None)
    }

    pub fn taint_opt(
        mut self,
        key: &str,
        value: Option<&str>,
        effect: TaintEffect,
        time_added: Option<Timestamp>,
    ) -> Self {
        self.node
            .spec
            .get_or_insert_with(NodeSpec::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(Taint {
                key: key.into(),
                value: value.map(str::to_string),
                effect: effect.as_str().into(),
                time_added: time_added.map(Time),
            });
        self
    }

    /// A taint the operator put there for `policy`: the taint plus its managed-taints entry.
    pub fn owned_taint(self, key: &str, value: &str, effect: TaintEffect, policy: &str) -> Self {
        self.taint(key, value, effect).managed(key, effect, policy)
    }

    /// A managed-taints entry `<key>:<effect>` → `policy` (the taint itself is not added).
    pub fn managed(mut self, key: &str, effect: TaintEffect, policy: &str) -> Self {
        let mut map = self.json_annotation(MANAGED_TAINTS_ANNOTATION);
        map.insert(format!("{key}:{}", effect.as_str()), policy.into());
        self.set_json_annotation(MANAGED_TAINTS_ANNOTATION, &map);
        self
    }

    /// A bootstrapped entry `policy` → `<uid>@<at>`.
    pub fn bootstrapped(mut self, policy: &str, uid: &str, at: &str) -> Self {
        let mut map = self.json_annotation(BOOTSTRAPPED_ANNOTATION);
        map.insert(policy.into(), format!("{uid}@{at}"));
        self.set_json_annotation(BOOTSTRAPPED_ANNOTATION, &map);
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.node
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    fn json_annotation(&self, key: &str) -> BTreeMap<String, String> {
        self.node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(|v| serde_json::from_str(v).expect("fixture annotations are JSON maps"))
            .unwrap_or_default()
    }

    fn set_json_annotation(&mut self, key: &str, map: &BTreeMap<String, String>) {
        let value = serde_json::to_string(map).expect("a string map serializes");
        self.node
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value);
    }

    pub fn build(self) -> Node {
        self.node
    }

    pub fn view(self) -> NodeView {
        NodeView::from_node(&self.node)
    }
}

impl From<NodeBuilder> for Node {
    fn from(b: NodeBuilder) -> Self {
        b.build()
    }
}

// ---------------------------------------------------------------------------
// Pod

/// `pod("kube-system", "cni-abc")`: a Running pod, not bound, not Ready.
pub fn pod(namespace: &str, name: &str) -> PodBuilder {
    PodBuilder {
        pod: Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..PodStatus::default()
            }),
        },
    }
}

#[derive(Debug, Clone)]
pub struct PodBuilder {
    pod: Pod,
}

impl PodBuilder {
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// `spec.nodeName`.
    pub fn on(mut self, node: &str) -> Self {
        self.pod.spec.get_or_insert_with(PodSpec::default).node_name = Some(node.into());
        self
    }

    fn set_ready_condition(mut self, status: &str) -> Self {
        let conditions = self
            .pod
            .status
            .get_or_insert_with(PodStatus::default)
            .conditions
            .get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "Ready");
        conditions.push(PodCondition {
            type_: "Ready".into(),
            status: status.into(),
            ..PodCondition::default()
        });
        self
    }

    /// The `Ready` condition is `True`.
    pub fn ready(self) -> Self {
        self.set_ready_condition("True")
    }

    /// The `Ready` condition is `False`.
    pub fn not_ready(self) -> Self {
        self.set_ready_condition("False")
    }

    /// The `nodetaint.io/ready` annotation with `value` (`"true"` counts as Ready).
    pub fn ready_annotation(mut self, value: &str) -> Self {
        self.pod
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_READY_ANNOTATION.into(), value.into());
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.pod.status.get_or_insert_with(PodStatus::default).phase = Some(phase.into());
        self
    }

    pub fn build(self) -> Pod {
        self.pod
    }
}

impl From<PodBuilder> for Pod {
    fn from(b: PodBuilder) -> Self {
        b.build()
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
            last_transition_time: Some(Time(now())),
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
    set: &taint_operator::policy_set::PolicySet,
    views: &[NodeView],
    index: &PodIndex,
    at: Timestamp,
    unknown: UnknownPolicies,
) -> Planned {
    let plan = plan_cluster(set, views, index, at, unknown);
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
            .0
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
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
