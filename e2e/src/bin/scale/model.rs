//! The benchmark's cluster on paper: node names and groups, the policies, and which
//! taints each node must carry at each step, which is what the observer times against.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Taint;
use serde_json::{Value, json};

/// Label on everything the benchmark creates.
pub(crate) const SCALE_LABEL: &str = "bench.io/scale";
/// Taints the benchmark's policies own start with this.
pub(crate) const BENCH_PREFIX: &str = "bench.io/";
/// The baseline's condition: no policy matches it.
pub(crate) const BASELINE_CONDITION: &str = "BaselineFault";
/// The condition the matcher policies react to.
pub(crate) const FAULT_CONDITION: &str = "BenchFault";
pub(crate) const GROUPS: usize = 4;
const CRITICAL_APPS: [&str; 3] = ["bench-cni", "bench-csi", "bench-dns"];
/// Label on the critical pods.
pub(crate) const CRITICAL_LABEL: &str = "bench.io/critical";

pub(crate) fn node_name(i: usize) -> String {
    format!("scale-{i:05}")
}

pub(crate) fn node_index(name: &str) -> Option<usize> {
    name.strip_prefix("scale-")?.parse().ok()
}

pub(crate) fn group_of(i: usize) -> usize {
    i % GROUPS
}

/// In a paired phase, whether node `i` is the operator's (else the baseline's).
/// The halves alternate by blocks of `GROUPS` nodes, so each holds every group
/// alike (the same taints to write) and the flips, sent in node order, reach both
/// halves in turn.
pub(crate) fn operator_side(i: usize) -> bool {
    (i / GROUPS).is_multiple_of(2)
}

/// The condition a phase flips, on which nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flipped {
    /// The matcher policies' condition, on every node: the operator's phases.
    Fault,
    /// The baseline's own condition, on every node: its phases.
    Baseline,
    /// Both at once, each on its runner's half (`operator_side`): a paired phase.
    Paired,
}

impl Flipped {
    /// The condition flipped on node `i`.
    pub(crate) fn condition(self, i: usize) -> &'static str {
        match self {
            Flipped::Fault => FAULT_CONDITION,
            Flipped::Baseline => BASELINE_CONDITION,
            Flipped::Paired if operator_side(i) => FAULT_CONDITION,
            Flipped::Paired => BASELINE_CONDITION,
        }
    }
}

pub(crate) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub(crate) fn hex(seed: u64, len: usize) -> String {
    let mut out = String::with_capacity(len);
    let mut s = seed;
    while out.len() < len {
        s = splitmix(s);
        out.push_str(&format!("{s:016x}"));
    }
    out.truncate(len);
    out
}

#[derive(Clone, Debug)]
enum Kind {
    /// Taints while BenchFault=True on nodes of these groups.
    Fault(Vec<usize>),
    /// Continuous readiness: critical pods and a condition.
    Ready,
    /// BootstrapOnly readiness on another critical pod.
    Bootstrap,
    /// Matcher on BenchFault, dry run: never touches nodes.
    DryRun,
    /// Matcher on Ready=True: taints every node; deleted in the last phase.
    Always,
}

#[derive(Clone, Debug)]
pub(crate) struct PolicyDef {
    pub(crate) name: String,
    kind: Kind,
    /// `key:Effect`
    taint: String,
    pub(crate) body: Value,
}

/// Critical pods per node, and which apps they run.
#[derive(Clone, Debug)]
pub(crate) struct Critical {
    pub(crate) per_node: usize,
}

impl Critical {
    pub(crate) fn new(pods_per_node: usize) -> Self {
        Critical {
            per_node: if pods_per_node == 0 {
                0
            } else {
                pods_per_node.div_ceil(10)
            },
        }
    }
    /// The app label of critical pod `j` of a node.
    pub(crate) fn app(&self, j: usize) -> &'static str {
        CRITICAL_APPS[j % CRITICAL_APPS.len()]
    }
}

/// The readiness policies' critical pods: both match every critical pod (one through
/// a label, one through the app names), so a node's first Ready critical pod satisfies
/// both and the readiness phase is one transition per node.
fn critical_pods_by_label(ns: &str) -> Value {
    json!([{"name": "node-agents", "namespace": ns,
            "selector": {"matchLabels": {CRITICAL_LABEL: "true"}}}])
}

fn critical_pods_by_app(ns: &str) -> Value {
    json!([{"name": "node-agents", "namespace": ns,
            "selector": {"matchExpressions": [
                {"key": "app", "operator": "In", "values": CRITICAL_APPS}]}}])
}

pub(crate) fn policy_defs(k: usize, ns: &str) -> Vec<PolicyDef> {
    let fault = |j: usize| {
        let groups = vec![j % GROUPS, (j + 1) % GROUPS];
        let effect = if j.is_multiple_of(2) {
            "NoSchedule"
        } else {
            "NoExecute"
        };
        let key = format!("bench.io/fault-{j}");
        let name = format!("bench-fault-{j}");
        let values: Vec<String> = groups.iter().map(|g| format!("g{g}")).collect();
        PolicyDef {
            taint: format!("{key}:{effect}"),
            body: json!({
                "nodeSelector": {"matchExpressions": [
                    {"key": "bench.io/group", "operator": "In", "values": values}]},
                "taints": [{"key": key, "value": "fault", "effect": effect}],
                "matchers": [
                    {"conditions": [{"type": FAULT_CONDITION, "status": "True", "reason": "Bench.*"}]},
                    {"conditions": [{"type": "BenchDisk", "status": "Kaput|Ruined"},
                                    {"type": "Ready", "status": "True"}]}
                ],
                // The untaint phase times the operator against a loop that untaints
                // the moment a condition clears: no clearAfter.
                "clearAfter": "0s",
                "mode": "Continuous"
            }),
            name,
            kind: Kind::Fault(groups),
        }
    };
    let mut defs = vec![
        fault(0),
        PolicyDef {
            name: "bench-ready".into(),
            kind: Kind::Ready,
            taint: "bench.io/not-ready:NoSchedule".into(),
            body: json!({
                "nodeSelector": {"matchLabels": {"kubernetes.io/os": "linux"}},
                "taints": [{"key": "bench.io/not-ready", "effect": "NoSchedule"}],
                "readiness": {
                    "conditions": [{"type": "BenchNetworkReady", "status": "True"}],
                    "criticalPods": critical_pods_by_label(ns)
                },
                "mode": "Continuous"
            }),
        },
        PolicyDef {
            name: "bench-bootstrap".into(),
            kind: Kind::Bootstrap,
            taint: "bench.io/bootstrap:NoExecute".into(),
            body: json!({
                "taints": [{"key": "bench.io/bootstrap", "value": "initializing", "effect": "NoExecute"}],
                "readiness": {"criticalPods": critical_pods_by_app(ns)},
                "mode": "BootstrapOnly"
            }),
        },
        PolicyDef {
            name: "bench-dry-run".into(),
            kind: Kind::DryRun,
            taint: "bench.io/dry-run:NoSchedule".into(),
            body: json!({
                "taints": [{"key": "bench.io/dry-run", "effect": "NoSchedule"}],
                "matchers": [{"conditions": [{"type": FAULT_CONDITION, "status": "True"}]}],
                "dryRun": true
            }),
        },
        PolicyDef {
            name: "bench-always".into(),
            kind: Kind::Always,
            taint: "bench.io/always:PreferNoSchedule".into(),
            body: json!({
                "taints": [{"key": "bench.io/always", "value": "yes", "effect": "PreferNoSchedule"}],
                "matchers": [{"conditions": [{"type": "Ready", "status": "True"}]}]
            }),
        },
    ];
    for j in 1..=k.saturating_sub(5) {
        defs.push(fault(j));
    }
    defs
}

/// What the benchmark has done to the cluster so far: decides each node's taints.
#[derive(Clone, Copy, Debug)]
pub(crate) struct World {
    /// The nodes `0..flipped` take the condition flips and the readiness patches
    /// (`--flip-nodes`); the faults and readiness below are theirs only.
    pub(crate) flipped: usize,
    /// The baseline's fault: its condition is True, so it puts the fault policies'
    /// taints on.
    pub(crate) baseline_fault: bool,
    /// The suite put the standing taints on for the baseline: those the policies keep
    /// on every node through the operator's taint and untaint phases.
    pub(crate) baseline_standing: bool,
    pub(crate) policies: bool,
    pub(crate) fault: bool,
    pub(crate) critical_ready: bool,
    pub(crate) bootstrapped: bool,
    pub(crate) always_deleted: bool,
    /// A paired phase: the operator's fault only on its half of the nodes, and
    /// `baseline_fault` puts the paired taints (`paired_taints_by_group`) on the
    /// other half.
    pub(crate) paired: bool,
}

impl Default for World {
    /// Nothing done yet; every node takes the flips.
    fn default() -> Self {
        World {
            flipped: usize::MAX,
            baseline_fault: false,
            baseline_standing: false,
            policies: false,
            fault: false,
            critical_ready: false,
            bootstrapped: false,
            always_deleted: false,
            paired: false,
        }
    }
}

fn expected(defs: &[PolicyDef], i: usize, w: World) -> BTreeSet<String> {
    let mut taints: BTreeSet<String> = defs
        .iter()
        .filter(|d| taint_on(d, i, w))
        .map(|d| d.taint.clone())
        .collect();
    if w.paired && w.baseline_fault && !operator_side(i) && i < w.flipped {
        taints.extend(faults_of_group(defs, group_of(i)).map(|d| paired_key(&d.taint)));
    }
    taints
}

/// Whether policy `d`'s taint is on node `i`. The baseline does the fault policies'
/// work on the standing taints, so both runners' taint phases make the same nodes.
fn taint_on(d: &PolicyDef, i: usize, w: World) -> bool {
    let flipped = i < w.flipped;
    match &d.kind {
        Kind::Fault(groups) if w.paired => {
            groups.contains(&group_of(i)) && w.policies && w.fault && operator_side(i) && flipped
        }
        Kind::Fault(groups) => {
            groups.contains(&group_of(i))
                && flipped
                && (w.baseline_fault || (w.policies && w.fault))
        }
        Kind::Ready => w.baseline_standing || (w.policies && !(w.critical_ready && flipped)),
        Kind::Bootstrap => w.baseline_standing || (w.policies && !(w.bootstrapped && flipped)),
        Kind::DryRun => false,
        Kind::Always => w.baseline_standing || (w.policies && !w.always_deleted),
    }
}

/// The taint policy `d` puts on nodes, as the API takes it.
fn policy_taint(d: &PolicyDef) -> Taint {
    serde_json::from_value(d.body["taints"][0].clone()).expect("every policy has one taint")
}

/// The standing taints (see `World::baseline_standing`).
pub(crate) fn standing_taints(defs: &[PolicyDef]) -> Vec<Taint> {
    defs.iter()
        .filter(|d| matches!(d.kind, Kind::Ready | Kind::Bootstrap | Kind::Always))
        .map(policy_taint)
        .collect()
}

/// Per group, the taints the fault policies put on its nodes while they are faulty.
pub(crate) fn fault_taints_by_group(defs: &[PolicyDef]) -> Vec<Vec<Taint>> {
    (0..GROUPS)
        .map(|g| faults_of_group(defs, g).map(policy_taint).collect())
        .collect()
}

/// The fault policies whose node selector takes nodes of group `g`.
fn faults_of_group(defs: &[PolicyDef], g: usize) -> impl Iterator<Item = &PolicyDef> {
    defs.iter()
        .filter(move |d| matches!(&d.kind, Kind::Fault(groups) if groups.contains(&g)))
}

/// A fault policy's taint key renamed for the baseline's half of a paired phase:
/// no policy owns it, so the operator leaves it alone, and it is as long as the
/// policy's.
fn paired_key(key: &str) -> String {
    key.replacen("bench.io/fault-", "bench.io/pairf-", 1)
}

/// Per group, the taints the baseline writes on its half in a paired phase: the
/// fault policies' taints under keys of their own (`paired_key`).
pub(crate) fn paired_taints_by_group(defs: &[PolicyDef]) -> Vec<Vec<Taint>> {
    fault_taints_by_group(defs)
        .into_iter()
        .map(|taints| {
            taints
                .into_iter()
                .map(|t| Taint {
                    key: paired_key(&t.key),
                    ..t
                })
                .collect()
        })
        .collect()
}

pub(crate) fn expected_all(defs: &[PolicyDef], n: usize, w: World) -> Vec<BTreeSet<String>> {
    (0..n).map(|i| expected(defs, i, w)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operator's world in its taint and untaint phases.
    fn operator_phase(fault: bool) -> World {
        World {
            policies: true,
            fault,
            ..World::default()
        }
    }

    fn baseline_phase(fault: bool) -> World {
        World {
            baseline_fault: fault,
            baseline_standing: true,
            ..World::default()
        }
    }

    #[test]
    fn both_runners_taint_phases_make_the_same_nodes() {
        let defs = policy_defs(10, "ns");
        for i in 0..2 * GROUPS {
            for fault in [true, false] {
                assert_eq!(
                    expected(&defs, i, baseline_phase(fault)),
                    expected(&defs, i, operator_phase(fault)),
                    "node {i}, fault {fault}"
                );
            }
            // the phases change something: 2 to 4 taints per node
            let added = expected(&defs, i, operator_phase(true)).len()
                - expected(&defs, i, operator_phase(false)).len();
            assert!((2..=4).contains(&added), "node {i} gains {added}");
        }
    }

    /// `--flip-nodes`: the first nodes take every change a phase makes, exactly as
    /// without a sample; the rest keep the taints they had before the phase.
    #[test]
    fn a_flip_sample_changes_its_nodes_as_a_whole_phase_would_and_no_other() {
        let defs = policy_defs(10, "ns");
        let sample = 3 * GROUPS;
        let sampled = |w: World| World {
            flipped: sample,
            ..w
        };
        let readiness = World {
            critical_ready: true,
            bootstrapped: true,
            ..operator_phase(false)
        };
        let before = operator_phase(false);
        for i in 0..6 * GROUPS {
            for w in [
                operator_phase(true),
                baseline_phase(true),
                paired_phase(true),
                readiness,
            ] {
                let got = expected(&defs, i, sampled(w));
                if i < sample {
                    assert_eq!(got, expected(&defs, i, w), "node {i} in the sample, {w:?}");
                } else if w.baseline_standing {
                    assert_eq!(got, expected(&defs, i, baseline_phase(false)), "node {i}");
                } else {
                    assert_eq!(got, expected(&defs, i, before), "node {i} outside, {w:?}");
                }
            }
        }
    }

    #[test]
    fn the_baseline_writes_the_taints_the_observer_expects() {
        let defs = policy_defs(10, "ns");
        let by_group = fault_taints_by_group(&defs);
        let key = |t: &Taint| format!("{}:{}", t.key, t.effect);
        for i in 0..GROUPS {
            let mut written: BTreeSet<String> = standing_taints(&defs).iter().map(key).collect();
            written.extend(by_group[group_of(i)].iter().map(key));
            assert_eq!(written, expected(&defs, i, baseline_phase(true)));
        }
    }

    /// A paired phase's world: the operator's policies in place with their
    /// standing taints on, and both runners' faults `on`.
    fn paired_phase(on: bool) -> World {
        World {
            policies: true,
            fault: on,
            baseline_fault: on,
            paired: true,
            ..World::default()
        }
    }

    #[test]
    fn a_paired_phase_gives_each_runner_half_the_nodes_and_every_group_to_both() {
        let sides: Vec<bool> = (0..4 * GROUPS).map(operator_side).collect();
        assert_eq!(sides.iter().filter(|s| **s).count(), 2 * GROUPS);
        for g in 0..GROUPS {
            for side in [true, false] {
                assert_eq!(
                    (0..4 * GROUPS)
                        .filter(|&i| group_of(i) == g && operator_side(i) == side)
                        .count(),
                    2,
                    "group {g}, operator side {side}"
                );
            }
        }
        assert_eq!(Flipped::Paired.condition(0), FAULT_CONDITION);
        assert_eq!(Flipped::Paired.condition(GROUPS), BASELINE_CONDITION);
        assert_eq!(Flipped::Fault.condition(GROUPS), FAULT_CONDITION);
        assert_eq!(Flipped::Baseline.condition(0), BASELINE_CONDITION);
    }

    #[test]
    fn in_a_paired_phase_each_half_gains_what_a_whole_phase_gives_it() {
        let defs = policy_defs(10, "ns");
        let by_group = paired_taints_by_group(&defs);
        let key = |t: &Taint| format!("{}:{}", t.key, t.effect);
        let owned: BTreeSet<String> = defs.iter().map(|d| d.taint.clone()).collect();
        for i in 0..2 * GROUPS {
            let calm = expected(&defs, i, paired_phase(false));
            assert_eq!(calm, expected(&defs, i, operator_phase(false)), "node {i}");
            let faulty = expected(&defs, i, paired_phase(true));
            let gained: BTreeSet<String> = faulty.difference(&calm).cloned().collect();
            let whole_phase = expected(&defs, i, operator_phase(true));
            assert_eq!(gained.len(), whole_phase.len() - calm.len(), "node {i}");
            if operator_side(i) {
                assert_eq!(faulty, whole_phase, "node {i}");
            } else {
                // the baseline's taints: as many, no policy's key, the same length
                let written: BTreeSet<String> = by_group[group_of(i)].iter().map(key).collect();
                assert_eq!(gained, written, "node {i}");
                assert!(
                    gained
                        .iter()
                        .all(|t| !owned.contains(t) && t.starts_with(BENCH_PREFIX))
                );
                let len = |s: &BTreeSet<String>| s.iter().map(String::len).sum::<usize>();
                let theirs: BTreeSet<String> = whole_phase.difference(&calm).cloned().collect();
                assert_eq!(len(&gained), len(&theirs), "node {i}");
            }
        }
    }
}
