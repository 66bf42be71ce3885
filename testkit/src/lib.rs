//! Fluent builders for the objects every test suite needs: TaintPolicies, Nodes and
//! Pods as the API server hands them out, and the fixed clock they are built around.
//!
//! The one home of object fixtures. It serves the engine's decision and property
//! tests (`engine/tests/`), the controller tests against a mocked API server
//! (`tests/tests/`) and the operator's own tests and benchmarks. Suite-specific
//! helpers stay with their suite: planning a small world in `engine/tests/support`,
//! the mocked API server and the controller harness in `tests/tests/support`.
//!
//! A node comes in two presets: [`node`] is bare (only what a test adds), which is
//! what the decision rules are easiest to read against; [`served_node`] is a node
//! as a kubelet registers it (a resourceVersion, a hostname label, an unrelated
//! annotation, node info, kubelet-style conditions), so the controller tests see
//! what the node cache has to trim.

pub mod import_graph;

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{
        Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, Taint,
        Toleration,
    },
    apimachinery::pkg::{
        apis::meta::v1::{ObjectMeta, OwnerReference, Time},
        util::intstr::IntOrString,
    },
    jiff::{SignedDuration, Timestamp},
};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, ConditionMatcher, CriticalPod, DRAIN_STARTED_ANNOTATION, Eviction,
    FINALIZER, LabelSelector, LabelSelectorRequirement, MANAGED_TAINTS_ANNOTATION, Matcher, Mode,
    POD_READY_ANNOTATION, PolicyTaint, Readiness, ReadinessCondition, SelectorOperator,
    TaintEffect, TaintPolicy, TaintPolicySpec, TaintPolicyStatus, ZONE_LABEL,
};

pub use taint_operator_crd::TaintEffect::{NoExecute, NoSchedule, PreferNoSchedule};

// ---------------------------------------------------------------------------
// Time

/// The fixed "now" of most tests.
pub const NOW: &str = "2026-11-20T12:00:00Z";
/// When a [`served_node`]'s conditions and NoExecute taints last changed: an hour before [`NOW`].
pub const EARLIER: &str = "2026-11-20T11:00:00Z";

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
        stale_after: None,
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

    /// `staleAfter`.
    pub fn stale_after(mut self, duration: &str) -> Self {
        self.0.stale_after = Some(duration.into());
        self
    }
}

impl From<Cond> for ConditionMatcher {
    fn from(c: Cond) -> Self {
        c.0
    }
}

/// `policy("p")`: a Continuous, valid-looking policy named `p` with uid `uid-p`,
/// created at 2026-01-01T00:00:00Z, generation 1, carrying the finalizer (as every
/// policy the operator has seen does); add taints and matchers or readiness.
pub fn policy(name: &str) -> PolicyBuilder {
    PolicyBuilder {
        policy: TaintPolicy {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                creation_timestamp: Some(Time(ts("2026-01-01T00:00:00Z"))),
                generation: Some(1),
                resource_version: Some("1".into()),
                finalizers: Some(vec![FINALIZER.into()]),
                ..ObjectMeta::default()
            },
            spec: TaintPolicySpec {
                node_selector: None,
                taints: Vec::new(),
                matchers: Vec::new(),
                clear_after: None,
                readiness: None,
                mode: Mode::Continuous,
                dry_run: false,
                max_tainted_nodes: None,
                eviction: None,
                suspend: false,
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
            stale_after: None,
        });
        self
    }

    /// A readiness condition with `staleAfter`.
    pub fn ready_when_fresh(mut self, type_: &str, status: &str, stale_after: &str) -> Self {
        self.readiness_mut().conditions.push(ReadinessCondition {
            type_: type_.into(),
            status: status.into(),
            stale_after: Some(stale_after.into()),
        });
        self
    }

    /// `spec.clearAfter`.
    pub fn clear_after(mut self, duration: &str) -> Self {
        self.policy.spec.clear_after = Some(duration.into());
        self
    }

    /// `spec.suspend: true`.
    pub fn suspended(mut self) -> Self {
        self.policy.spec.suspend = true;
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

    /// Adds `key=value` to the node selector's `matchLabels`.
    pub fn select(mut self, key: &str, value: &str) -> Self {
        self.policy
            .spec
            .node_selector
            .get_or_insert_with(LabelSelector::default)
            .match_labels
            .insert(key.into(), value.into());
        self
    }

    /// As first seen by the operator: no finalizer yet.
    pub fn unfinalized(mut self) -> Self {
        self.policy.metadata.finalizers = None;
        self
    }

    pub fn status(mut self, status: TaintPolicyStatus) -> Self {
        self.policy.status = Some(status);
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

    /// `spec.eviction`, from its JSON form (`{"nodesPerMinute": 6}`).
    pub fn eviction(mut self, eviction: serde_json::Value) -> Self {
        self.policy.spec.eviction =
            Some(serde_json::from_value::<Eviction>(eviction).expect("a valid spec.eviction"));
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
        served: false,
    }
}

/// `served_node("n1")`: a node as a kubelet registers it and the API server serves
/// it, with what the operator's cache trims away (another annotation, an unrelated
/// spec field) and a Ready condition. Its [`NodeBuilder::condition`]s read like a
/// node problem detector's and its NoExecute taints carry `timeAdded`, both at
/// [`EARLIER`].
pub fn served_node(name: &str) -> NodeBuilder {
    let mut b = NodeBuilder {
        node: Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                resource_version: Some("100".into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(format!("fake://{name}")),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus::default()),
        },
        served: true,
    }
    .label("kubernetes.io/hostname", name)
    .annotation("node.alpha.kubernetes.io/ttl", "0");
    b.push_condition(NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: Some("KubeletReady".into()),
        message: Some("kubelet is posting ready status".into()),
        last_heartbeat_time: Some(Time(ts(EARLIER))),
        last_transition_time: Some(Time(ts(EARLIER))),
    });
    b
}

#[derive(Debug, Clone)]
pub struct NodeBuilder {
    node: Node,
    /// Built by [`served_node`]: conditions and NoExecute taints get kubelet-style fields.
    served: bool,
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

    /// A condition that has had `status` since well before any `for` window: a day
    /// ago, or for a [`served_node`] since [`EARLIER`], with a reason and message as
    /// a node problem detector reports them.
    pub fn condition(mut self, type_: &str, status: &str) -> Self {
        if !self.served {
            return self.condition_full(type_, status, None, Some(ago(86_400)));
        }
        self.push_condition(NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(format!("{type_}Is{status}")),
            message: Some("reported by a node problem detector".into()),
            last_heartbeat_time: Some(Time(ts(EARLIER))),
            last_transition_time: Some(Time(ts(EARLIER))),
        });
        self
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
        self.push_condition(NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.map(str::to_string),
            last_transition_time: since.map(Time),
            ..NodeCondition::default()
        });
        self
    }

    /// A condition with its last transition and last heartbeat (either may be absent).
    pub fn condition_seen(
        mut self,
        type_: &str,
        status: &str,
        since: Option<Timestamp>,
        heartbeat: Option<Timestamp>,
    ) -> Self {
        self.push_condition(NodeCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: since.map(Time),
            last_heartbeat_time: heartbeat.map(Time),
            ..NodeCondition::default()
        });
        self
    }

    /// Replaces the condition of the same type, or adds it.
    fn push_condition(&mut self, condition: NodeCondition) {
        let conditions = self
            .node
            .status
            .get_or_insert_with(NodeStatus::default)
            .conditions
            .get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != condition.type_);
        conditions.push(condition);
    }

    pub fn resource_version(mut self, rv: &str) -> Self {
        self.node.metadata.resource_version = Some(rv.into());
        self
    }

    pub fn taint(self, key: &str, value: &str, effect: TaintEffect) -> Self {
        self.taint_opt(key, Some(value), effect)
    }

    pub fn bare_taint(self, key: &str, effect: TaintEffect) -> Self {
        self.taint_opt(key, None, effect)
    }

    /// A taint with or without a value; on a [`served_node`] a NoExecute taint was
    /// added at [`EARLIER`].
    pub fn taint_opt(self, key: &str, value: Option<&str>, effect: TaintEffect) -> Self {
        let time_added = (self.served && effect == TaintEffect::NoExecute).then(|| ts(EARLIER));
        self.taint_at(key, value, effect, time_added)
    }

    /// A taint with an explicit `timeAdded`.
    pub fn taint_at(
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

    /// The whole managed-taints annotation, from `(taint id, policy)` pairs.
    pub fn owned(self, entries: &[(&str, &str)]) -> Self {
        let map: BTreeMap<&str, &str> = entries.iter().copied().collect();
        let value = serde_json::to_string(&map).expect("a string map serializes");
        self.annotation(MANAGED_TAINTS_ANNOTATION, &value)
    }

    /// A bootstrapped entry `policy` → `<uid>@<at>`.
    pub fn bootstrapped(mut self, policy: &str, uid: &str, at: &str) -> Self {
        let mut map = self.json_annotation(BOOTSTRAPPED_ANNOTATION);
        map.insert(policy.into(), format!("{uid}@{at}"));
        self.set_json_annotation(BOOTSTRAPPED_ANNOTATION, &map);
        self
    }

    /// A drain-started entry `policy` → `at`.
    pub fn drain_started(mut self, policy: &str, at: &str) -> Self {
        let mut map = self.json_annotation(DRAIN_STARTED_ANNOTATION);
        map.insert(policy.into(), at.into());
        self.set_json_annotation(DRAIN_STARTED_ANNOTATION, &map);
        self
    }

    /// The `topology.kubernetes.io/zone` label.
    pub fn zone(self, zone: &str) -> Self {
        self.label(ZONE_LABEL, zone)
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

    pub fn without_annotations(mut self) -> Self {
        self.node.metadata.annotations = None;
        self
    }

    pub fn build(self) -> Node {
        self.node
    }
}

impl From<NodeBuilder> for Node {
    fn from(b: NodeBuilder) -> Self {
        b.build()
    }
}

// ---------------------------------------------------------------------------
// Pod

/// `pod("kube-system", "cni-abc")`: a Running pod with uid `uid-cni-abc`, not bound, not Ready.
pub fn pod(namespace: &str, name: &str) -> PodBuilder {
    PodBuilder {
        pod: Pod {
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

    /// Being deleted: `deletionTimestamp` is set (a minute ago).
    pub fn terminating(mut self) -> Self {
        self.pod.metadata.deletion_timestamp = Some(Time(ago(60)));
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.pod.status.get_or_insert_with(PodStatus::default).phase = Some(phase.into());
        self
    }

    /// Controlled by an object of `kind` (`DaemonSet`, `ReplicaSet`, ...) named `name`.
    pub fn owned_by(mut self, kind: &str, name: &str) -> Self {
        let api_version = match kind {
            "DaemonSet" | "ReplicaSet" | "StatefulSet" | "Deployment" => "apps/v1",
            "Job" => "batch/v1",
            _ => "v1",
        };
        self.pod
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                controller: Some(true),
                block_owner_deletion: Some(true),
            });
        self
    }

    /// A static pod's mirror, as the kubelet marks it.
    pub fn mirror(mut self) -> Self {
        self.pod
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert("kubernetes.io/config.mirror".into(), "hash".into());
        self
    }

    /// A toleration: `Exists` for `key` (every key when empty) and `effect` (every
    /// effect when None), for `seconds` if given.
    pub fn tolerate(
        mut self,
        key: &str,
        effect: Option<TaintEffect>,
        seconds: Option<i64>,
    ) -> Self {
        self.pod
            .spec
            .get_or_insert_with(PodSpec::default)
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(Toleration {
                key: (!key.is_empty()).then(|| key.to_string()),
                operator: Some("Exists".into()),
                value: None,
                effect: effect.map(|e| e.as_str().to_string()),
                toleration_seconds: seconds,
            });
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
