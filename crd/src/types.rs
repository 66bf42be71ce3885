// The derive takes repeated printcolumn(...) arguments, which this lint misreads as duplicates.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::{apis::meta::v1::Condition, util::intstr::IntOrString};
use kube_derive::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::LabelSelector;

pub const GROUP: &str = "nodetaint.io";
pub const FINALIZER: &str = "nodetaint.io/cleanup";
/// Node annotation: `{"<key>:<effect>": "<policy name>"}` for every taint the operator added.
pub const MANAGED_TAINTS_ANNOTATION: &str = "nodetaint.io/managed-taints";
/// Node annotation: `{"<policy name>": "<policy uid>@<RFC 3339 time>"}` for BootstrapOnly completion.
pub const BOOTSTRAPPED_ANNOTATION: &str = "nodetaint.io/bootstrapped";
/// Node annotation: `{"<policy name>": "<RFC 3339 time>"}`, when each policy with
/// `spec.eviction` started draining the node. Kept while the node carries that
/// policy's taints, so `drainTimeout` and the per-zone pace survive a failover.
pub const DRAIN_STARTED_ANNOTATION: &str = "nodetaint.io/drain-started";
/// The label that names a node's zone for `spec.eviction`'s pacing and zone hold.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Pod annotation that counts as Ready for critical-pod checks.
pub const POD_READY_ANNOTATION: &str = "nodetaint.io/ready";
pub const FIELD_MANAGER: &str = "taint-operator";

/// Taint a node while its conditions say it is broken, or until it is ready.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    // Core and derive crates, not the `kube` facade: see Cargo.toml.
    crates(kube_core = "::kube_core", kube = "::kube_derive"),
    group = "nodetaint.io",
    version = "v1alpha1",
    kind = "TaintPolicy",
    plural = "taintpolicies",
    shortname = "tp",
    status = "TaintPolicyStatus",
    doc = "TaintPolicy declares taints that the operator keeps on the nodes it selects while matchers match or until readiness is satisfied.",
    selectable = ".spec.mode",
    selectable = ".spec.dryRun",
    selectable = ".spec.suspend",
    printcolumn(
        name = "Taints",
        type_ = "string",
        json_path = ".status.taints",
        description = "key=value:Effect of every taint the policy declares"
    ),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(
        name = "Selected",
        type_ = "integer",
        json_path = ".status.selectedNodes"
    ),
    printcolumn(
        name = "Tainted",
        type_ = "integer",
        json_path = ".status.taintedNodes"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "DryRun",
        type_ = "boolean",
        json_path = ".spec.dryRun",
        priority = 1
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    crates(kube_core = "::kube_core"),
    validation = Rule::new("size(self.matchers) > 0 || has(self.readiness)")
        .message("at least one of spec.matchers or spec.readiness must be given"),
    validation = Rule::new("self.mode != 'BootstrapOnly' || has(self.readiness)")
        .message("spec.readiness is required when spec.mode is BootstrapOnly"),
    validation = Rule::new("!has(self.eviction) || self.taints.exists(t, t.effect == 'NoExecute')")
        .message("spec.eviction applies to NoExecute taints only: declare one, or remove spec.eviction")
)]
pub struct TaintPolicySpec {
    /// Nodes this policy applies to; absent or empty selects every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,

    /// The taints this policy owns, unique by key+effect.
    #[schemars(length(min = 1, max = 8))]
    #[x_kube(validation = Rule::new("self.all(t, self.filter(u, u.key == t.key && u.effect == t.effect).size() == 1)")
        .message("spec.taints must be unique by key+effect"))]
    pub taints: Vec<PolicyTaint>,

    /// Taint while ANY matcher matches.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub matchers: Vec<Matcher>,

    /// How long no matcher must have matched before the taints a matcher put on
    /// come off, counted from when the conditions stopped matching (their
    /// lastTransitionTime), as Prometheus' `keep_firing_for`: a Go duration. A
    /// detector that restarts posts its default status for a moment, then the
    /// problem again; the default, 2m, outlasts that. `0s`: off at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
    )]
    #[x_kube(validation = Rule::new("!self.matches('[0-9]{12,}') && duration(self.replace('µs', 'us')) <= duration('2562047h')")
        .message("must be at most 2562047h, the longest Go duration"))]
    pub clear_after: Option<String>,

    /// Hold the taints UNTIL every check here passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,

    /// Continuous (default) or BootstrapOnly.
    #[serde(default)]
    pub mode: Mode,

    /// Evaluate and report in status, never touch nodes.
    #[serde(default)]
    pub dry_run: bool,

    /// Freeze the policy: no taint of it is added or removed on any node (nor by the
    /// webhook at Node CREATE); status keeps counting what it would do. Setting it
    /// back to false converges the nodes at once. Deleting still cleans up.
    #[serde(default)]
    pub suspend: bool,

    /// Cap on selected nodes tainted because a matcher matched: an integer, or a
    /// percentage of selected nodes (rounded down) such as "30%".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("string(self).matches('^([0-9]+|(100|[1-9]?[0-9])%)$')")
        .message("spec.maxTaintedNodes must be a non-negative integer or a percentage from 0% to 100%"))]
    pub max_tainted_nodes: Option<IntOrString>,

    /// How this policy's NoExecute taints go on: NoSchedule first, pods evicted
    /// through the Eviction API (PodDisruptionBudgets respected), the switch to
    /// NoExecute paced per zone and held in a zone where too many nodes match.
    /// Absent: NoExecute taints go on at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction: Option<Eviction>,
}

/// `spec.eviction`: the steps a NoExecute taint takes on a node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(
    crates(kube_core = "::kube_core"),
    validation = Rule::new("!has(self.zoneSettle) || has(self.pauseWhenZoneUnhealthy)")
        .message("spec.eviction.zoneSettle applies only with spec.eviction.pauseWhenZoneUnhealthy")
)]
#[serde(rename_all = "camelCase")]
pub struct Eviction {
    /// Evict the pods that would not tolerate the taint through the Eviction API
    /// before the switch, so PodDisruptionBudgets are honoured (default true).
    /// DaemonSet, mirror and finished pods are left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub respect_disruption_budgets: Option<bool>,

    /// After this long draining, the switch to NoExecute happens even with pods
    /// still in the way, as a Go duration (`10m`). Absent: it waits as long as it
    /// takes, the node NoSchedule meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
    )]
    #[x_kube(validation = Rule::new("!self.matches('[0-9]{12,}') && duration(self.replace('µs', 'us')) <= duration('2562047h')")
        .message("must be at most 2562047h, the longest Go duration"))]
    pub drain_timeout: Option<String>,

    /// Per zone (label `topology.kubernetes.io/zone`), at most this many nodes a
    /// minute switch to NoExecute (and start draining), evenly spread. Absent: no pace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 6000))]
    pub nodes_per_minute: Option<i32>,

    /// When more than this share of a zone's selected nodes match the matchers (an
    /// integer count, or a percentage such as "55%"), no node of that zone switches
    /// to NoExecute until the share falls back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("string(self).matches('^([0-9]+|(100|[1-9]?[0-9])%)$')")
        .message("spec.eviction.pauseWhenZoneUnhealthy must be a non-negative integer or a percentage from 0% to 100%"))]
    pub pause_when_zone_unhealthy: Option<IntOrString>,

    /// With `pauseWhenZoneUnhealthy`: a zone is judged once its matching share has
    /// not changed for this long (a Go duration, default `5s`); until then no node of
    /// the zone starts draining or switches to NoExecute. `0s` judges at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
    )]
    #[x_kube(validation = Rule::new("!self.matches('[0-9]{12,}') && duration(self.replace('µs', 'us')) <= duration('1h')")
        .message("must be at most 1h"))]
    pub zone_settle: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct PolicyTaint {
    /// A qualified name: an optional DNS subdomain prefix and `/`, then a name of at most 63 characters.
    #[schemars(
        length(min = 1, max = 317),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
        )
    )]
    #[x_kube(validation = Rule::new("!self.contains('/') || size(self.split('/')[0]) <= 253")
        .message("the prefix of a taint key must be at most 253 characters"))]
    pub key: String,
    /// At most 63 characters: alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
    )]
    pub value: Option<String>,
    pub effect: TaintEffect,
}

#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    schemars::JsonSchema,
)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "NoSchedule" => Some(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
            "NoExecute" => Some(TaintEffect::NoExecute),
            _ => None,
        }
    }
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum Mode {
    #[default]
    Continuous,
    BootstrapOnly,
}

/// Matches when ALL its conditions match.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct Matcher {
    #[schemars(length(min = 1, max = 8))]
    pub conditions: Vec<ConditionMatcher>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct ConditionMatcher {
    /// The node condition type, e.g. `NetworkInterfaceCard`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// Regex matched against the WHOLE status string.
    #[schemars(length(min = 1, max = 1024))]
    pub status: String,
    /// Optional regex matched against the WHOLE reason string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub reason: Option<String>,
    /// How long the condition must have matched, counted from its lastTransitionTime,
    /// as a Go duration such as `30s`, `5m` or `1h30m`, at most `2562047h`.
    #[serde(rename = "for", default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
    )]
    // Go's durations end at 2562047h47m16.854775807s; a longer one would overflow
    // wherever a Go client reads the policy. Twelve digits in a row overflow in any
    // unit, and CEL's && is false when one side is, so those get this message too.
    #[x_kube(validation = Rule::new("!self.matches('[0-9]{12,}') && duration(self.replace('µs', 'us')) <= duration('2562047h')")
        .message("must be at most 2562047h, the longest Go duration"))]
    pub for_: Option<String>,
    /// When the condition's lastHeartbeatTime (or, without one, its
    /// lastTransitionTime) is at least this old, it counts as status Unknown (its
    /// reporter stopped): a Go duration such as `2m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
    )]
    #[x_kube(validation = Rule::new("!self.matches('[0-9]{12,}') && duration(self.replace('µs', 'us')) <= duration('2562047h')")
        .message("must be at most 2562047h, the longest Go duration"))]
    pub stale_after: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(crates(kube_core = "::kube_core"), validation = Rule::new("size(self.conditions) > 0 || size(self.criticalPods) > 0")
    .message("spec.readiness needs at least one condition or critical pod"))]
pub struct Readiness {
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub conditions: Vec<ReadinessCondition>,
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub critical_pods: Vec<CriticalPod>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct ReadinessCondition {
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// Regex matched against the WHOLE status string.
    #[schemars(length(min = 1, max = 1024))]
    pub status: String,
    /// When the condition's lastHeartbeatTime (or, without one, its
    /// lastTransitionTime) is at least this old, it counts as status Unknown, so a
    /// "True" that its reporter stopped renewing no longer makes the node ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
    )]
    #[x_kube(validation = Rule::new("!self.matches('[0-9]{12,}') && duration(self.replace('µs', 'us')) <= duration('2562047h')")
        .message("must be at most 2562047h, the longest Go duration"))]
    pub stale_after: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct CriticalPod {
    /// A label for status and events.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub namespace: String,
    pub selector: LabelSelector,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaintPolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The declared taints as `key=value:Effect`, comma separated (for `kubectl get`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<String>,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub selected_nodes: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub tainted_nodes: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub pending_nodes: i32,
    /// Nodes between NoSchedule and NoExecute (see `spec.eviction`).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub draining_nodes: i32,
    /// Sorted, at most 100.
    #[serde(default)]
    pub tainted_node_names: Vec<String>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

impl PolicyTaint {
    /// `key=value:Effect`, or `key:Effect` without a value.
    pub fn display(&self) -> String {
        match &self.value {
            Some(v) => format!("{}={}:{}", self.key, v, self.effect.as_str()),
            None => format!("{}:{}", self.key, self.effect.as_str()),
        }
    }
}
