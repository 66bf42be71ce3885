//! Properties of the decision core over generated small clusters.
//!
//! A cluster is a few policies (taints from a small pool of keys and effects,
//! matchers on a small pool of condition types and statuses, optional readiness,
//! random modes, dry runs, caps, deletions and the odd invalid regex) and a few
//! nodes (random labels, conditions, foreign taints, and ownership / bootstrap
//! annotations that may name existing policies, unknown ones, or taints that are
//! not there), with pods. The pools are small on purpose so that policies,
//! nodes and annotations collide often.

mod support;

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use proptest::prelude::*;
use support::*;
use taint_operator_crd::{SelectorOperator, TaintEffect, TaintPolicy};
use taint_operator_engine::{
    cluster::{NodeView, PodIndex},
    cluster_plan::Reason,
    decision::evaluate_node,
    node_plan::{NodePlan, UnknownPolicies},
    ownership::taint_id,
    policy::CompiledPolicy,
    policy_set::PolicySet,
};

const KEYS: &[&str] = &["example.com/a", "example.com/b", "c"];
const EFFECTS: &[TaintEffect] = &[NoSchedule, PreferNoSchedule, NoExecute];
const VALUES: &[Option<&str>] = &[None, Some("v1"), Some("v2")];
const TYPES: &[&str] = &["T1", "T2", "T3"];
const STATUSES: &[&str] = &["True", "False", "Unknown"];
const PATTERNS: &[&str] = &["True", "False", "True|Unknown", ".*", "NotTrue", "Fal.*"];
const NODE_REASONS: &[Option<&str>] = &[None, Some("R1"), Some("R2")];
const REASON_PATTERNS: &[Option<&str>] = &[None, None, Some("R1"), Some("R.*")];
const FORS: &[Option<&str>] = &[None, None, Some("30s"), Some("5m")];
/// Seconds since the condition's last transition; `None` = no lastTransitionTime.
const AGES: &[Option<i64>] = &[None, Some(0), Some(10), Some(30), Some(300), Some(86_400)];
const CREATED: &[&str] = &[
    "2026-01-01T00:00:00Z",
    "2026-02-01T00:00:00Z",
    "2026-03-01T00:00:00Z",
];
/// Owners named in generated annotations: policies that may or may not exist, and one that never does.
const OWNERS: &[&str] = &["p0", "p1", "p2", "p3", "ghost"];
const MAX_POLICIES: usize = 4;
const NAMESPACES: &[&str] = &["kube-system", "default"];
const APPS: &[&str] = &["cni", "dns"];
const LABEL_KEYS: &[&str] = &["zone", "tier"];
const LABEL_VALUES: &[&str] = &["a", "b"];
const PHASES: &[&str] = &["Running", "Pending", "Succeeded", "Failed"];
const CAPS: &[&str] = &["0%", "34%", "50%", "100%", "1"];

// ---------------------------------------------------------------------------
// Generated specs

#[derive(Debug, Clone)]
struct CondGen {
    type_: usize,
    pattern: usize,
    reason: usize,
    for_: usize,
}

#[derive(Debug, Clone)]
enum CapGen {
    Int(i32),
    Str(usize),
}

/// Readiness conditions as (type, pattern) and critical pods as (namespace, app).
type ReadinessGen = (Vec<(usize, usize)>, Vec<(usize, usize)>);

#[derive(Debug, Clone)]
struct PolicyGen {
    created: usize,
    other_uid: bool,
    /// (key, effect, value) indexes; duplicates by key+effect are dropped.
    taints: Vec<(usize, usize, usize)>,
    matchers: Vec<Vec<CondGen>>,
    readiness: Option<ReadinessGen>,
    selector: usize,
    bootstrap: bool,
    dry_run: bool,
    cap: Option<CapGen>,
    deleting: bool,
    invalid: bool,
}

#[derive(Debug, Clone, Copy)]
enum TaintState {
    Absent,
    /// Someone else's taint: no ownership entry.
    Foreign,
    /// The operator's taint: present, with an ownership entry.
    Owned,
    /// An ownership entry without the taint (someone removed it by hand).
    Stale,
}

#[derive(Debug, Clone)]
struct TaintGen {
    state: TaintState,
    value: usize,
    time_added: bool,
    owner: usize,
}

#[derive(Debug, Clone)]
struct NodeGen {
    labels: Vec<Option<usize>>,
    /// Per condition type: (status, reason, age).
    conditions: Vec<Option<(usize, usize, usize)>>,
    /// Per taint id in `KEYS` × `EFFECTS` order.
    taints: Vec<TaintGen>,
    /// Per policy slot: a completion with its current uid (true) or another one (false).
    bootstrapped: Vec<Option<bool>>,
    junk_entry: bool,
}

#[derive(Debug, Clone)]
struct PodGen {
    namespace: usize,
    app: usize,
    node: Option<usize>,
    /// 0: no Ready condition, 1: True, 2: False.
    ready: usize,
    /// 0: none, 1: "true", 2: "false".
    annotation: usize,
    phase: usize,
}

fn cond_gen() -> impl Strategy<Value = CondGen> {
    (
        0..TYPES.len(),
        0..PATTERNS.len(),
        0..REASON_PATTERNS.len(),
        0..FORS.len(),
    )
        .prop_map(|(type_, pattern, reason, for_)| CondGen {
            type_,
            pattern,
            reason,
            for_,
        })
}

fn cap_gen() -> impl Strategy<Value = Option<CapGen>> {
    prop_oneof![
        3 => Just(None),
        1 => (0..4i32).prop_map(|n| Some(CapGen::Int(n))),
        1 => (0..CAPS.len()).prop_map(|i| Some(CapGen::Str(i))),
    ]
}

fn policy_gen() -> impl Strategy<Value = PolicyGen> {
    (
        0..CREATED.len(),
        prop::bool::weighted(0.2),
        prop::collection::vec((0..KEYS.len(), 0..EFFECTS.len(), 0..VALUES.len()), 1..=3),
        prop::collection::vec(prop::collection::vec(cond_gen(), 1..=2), 0..=2),
        prop::option::weighted(
            0.5,
            (
                prop::collection::vec((0..TYPES.len(), 0..PATTERNS.len()), 0..=2),
                prop::collection::vec((0..NAMESPACES.len(), 0..APPS.len()), 0..=2),
            ),
        ),
        0..6usize,
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
        cap_gen(),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(
                created,
                other_uid,
                taints,
                matchers,
                readiness,
                selector,
                bootstrap,
                dry_run,
                cap,
                deleting,
                invalid,
            )| PolicyGen {
                created,
                other_uid,
                taints,
                matchers,
                readiness,
                selector,
                bootstrap,
                dry_run,
                cap,
                deleting,
                invalid,
            },
        )
}

fn taint_gen() -> impl Strategy<Value = TaintGen> {
    (
        prop_oneof![
            4 => Just(TaintState::Absent),
            2 => Just(TaintState::Foreign),
            2 => Just(TaintState::Owned),
            1 => Just(TaintState::Stale),
        ],
        0..VALUES.len(),
        any::<bool>(),
        0..OWNERS.len(),
    )
        .prop_map(|(state, value, time_added, owner)| TaintGen {
            state,
            value,
            time_added,
            owner,
        })
}

fn node_gen() -> impl Strategy<Value = NodeGen> {
    (
        prop::collection::vec(prop::option::of(0..LABEL_VALUES.len()), LABEL_KEYS.len()),
        prop::collection::vec(
            prop::option::weighted(
                0.7,
                (0..STATUSES.len(), 0..NODE_REASONS.len(), 0..AGES.len()),
            ),
            TYPES.len(),
        ),
        prop::collection::vec(taint_gen(), KEYS.len() * EFFECTS.len()),
        prop::collection::vec(prop::option::weighted(0.25, any::<bool>()), MAX_POLICIES),
        prop::bool::weighted(0.05),
    )
        .prop_map(
            |(labels, conditions, taints, bootstrapped, junk_entry)| NodeGen {
                labels,
                conditions,
                taints,
                bootstrapped,
                junk_entry,
            },
        )
}

fn pod_gen() -> impl Strategy<Value = PodGen> {
    (
        // Mostly one namespace and app, so several pods often compete for one critical-pod entry.
        prop::sample::select(vec![0usize, 0, 0, 1]),
        prop::sample::select(vec![0usize, 0, 0, 1]),
        prop::option::weighted(0.9, 0..4usize),
        0..3usize,
        0..3usize,
        prop::sample::select(vec![0usize, 0, 0, 1, 2, 3]),
    )
        .prop_map(|(namespace, app, node, ready, annotation, phase)| PodGen {
            namespace,
            app,
            node,
            ready,
            annotation,
            phase,
        })
}

// ---------------------------------------------------------------------------
// Building objects

fn build_policy(i: usize, g: &PolicyGen) -> TaintPolicy {
    let name = format!("p{i}");
    let mut p = policy(&name).created(CREATED[g.created]);
    if g.other_uid {
        p = p.uid(&format!("uid-{name}-v2"));
    }
    let mut seen = HashSet::new();
    for &(k, e, v) in &g.taints {
        if seen.insert((k, e)) {
            p = p.taint_opt(KEYS[k], VALUES[v], EFFECTS[e]);
        }
    }
    for m in &g.matchers {
        p = p.matcher(m.iter().map(|c| {
            let mut cb = cond(TYPES[c.type_], PATTERNS[c.pattern]);
            if let Some(r) = REASON_PATTERNS[c.reason] {
                cb = cb.reason(r);
            }
            if let Some(f) = FORS[c.for_] {
                cb = cb.for_(f);
            }
            cb
        }));
    }
    let mut has_readiness = false;
    if let Some((conditions, pods)) = &g.readiness {
        for &(t, s) in conditions {
            p = p.ready_when(TYPES[t], PATTERNS[s]);
            has_readiness = true;
        }
        for &(ns, app) in pods {
            p = p.critical_pod(
                APPS[app],
                NAMESPACES[ns],
                match_labels(&[("app", APPS[app])]),
            );
            has_readiness = true;
        }
    }
    // The CRD refuses a policy with neither section, and BootstrapOnly without readiness.
    if !has_readiness && (g.matchers.is_empty() || g.bootstrap) {
        p = p.ready_when("T1", "True");
    }
    if g.bootstrap {
        p = p.bootstrap_only();
    }
    p = match g.selector {
        0 => p,
        1 => p.selector(match_labels(&[("zone", "a")])),
        2 => p.selector(match_expression("zone", SelectorOperator::In, &["a", "b"])),
        3 => p.selector(match_expression("tier", SelectorOperator::NotIn, &["a"])),
        4 => p.selector(match_expression("tier", SelectorOperator::Exists, &[])),
        _ => p.selector(match_expression(
            "zone",
            SelectorOperator::DoesNotExist,
            &[],
        )),
    };
    if g.dry_run {
        p = p.dry_run();
    }
    p = match &g.cap {
        None => p,
        Some(CapGen::Int(n)) => p.max_tainted(*n),
        Some(CapGen::Str(i)) => p.max_tainted_str(CAPS[*i]),
    };
    if g.deleting {
        p = p.deleting();
    }
    if g.invalid {
        p = p.matcher([cond("T2", "(")]);
    }
    p.build()
}

fn build_node(i: usize, g: &NodeGen, policies: usize) -> Node {
    let mut n = node(&format!("n{i}"));
    for (k, v) in g.labels.iter().enumerate() {
        if let Some(v) = v {
            n = n.label(LABEL_KEYS[k], LABEL_VALUES[*v]);
        }
    }
    for (t, c) in g.conditions.iter().enumerate() {
        if let Some((status, reason, age)) = *c {
            n = n.condition_full(
                TYPES[t],
                STATUSES[status],
                NODE_REASONS[reason],
                AGES[age].map(ago),
            );
        }
    }
    for (id, t) in g.taints.iter().enumerate() {
        let key = KEYS[id / EFFECTS.len()];
        let effect = EFFECTS[id % EFFECTS.len()];
        let time_added = t.time_added.then(|| ago(3600));
        match t.state {
            TaintState::Absent => {}
            TaintState::Foreign => n = n.taint_at(key, VALUES[t.value], effect, time_added),
            TaintState::Owned => {
                n = n
                    .taint_at(key, VALUES[t.value], effect, time_added)
                    .managed(key, effect, OWNERS[t.owner])
            }
            TaintState::Stale => n = n.managed(key, effect, OWNERS[t.owner]),
        }
    }
    for (slot, b) in g.bootstrapped.iter().enumerate() {
        if let Some(same_uid) = b {
            let name = format!("p{slot}");
            // Policy slots beyond the generated policies name unknown policies.
            let uid = if *same_uid && slot < policies {
                format!("uid-{name}")
            } else {
                format!("uid-{name}-old")
            };
            n = n.bootstrapped(&name, &uid, "2026-11-19T00:00:00Z");
        }
    }
    if g.junk_entry {
        n = n.managed("junk-without-effect", NoSchedule, "p0");
        let mut built = n.build();
        // Turn the entry into one whose id does not parse.
        let annotations = built.metadata.annotations.as_mut().unwrap();
        let raw = annotations
            .get(taint_operator_crd::MANAGED_TAINTS_ANNOTATION)
            .unwrap()
            .replace("junk-without-effect:NoSchedule", "junk-without-effect");
        annotations.insert(taint_operator_crd::MANAGED_TAINTS_ANNOTATION.into(), raw);
        return built;
    }
    n.build()
}

fn build_pod(i: usize, g: &PodGen, nodes: usize) -> Pod {
    let mut p = pod(NAMESPACES[g.namespace], &format!("pod-{i}")).label("app", APPS[g.app]);
    if let Some(n) = g.node {
        // Indexes past the last node bind the pod to a node that does not exist.
        let name = if n < nodes {
            format!("n{n}")
        } else {
            format!("gone-{n}")
        };
        p = p.on(&name);
    }
    p = match g.ready {
        1 => p.ready(),
        2 => p.not_ready(),
        _ => p,
    };
    p = match g.annotation {
        1 => p.ready_annotation("true"),
        2 => p.ready_annotation("false"),
        _ => p,
    };
    p.phase(PHASES[g.phase]).build()
}

#[derive(Clone)]
struct Case {
    world: World,
    /// `world.policies` compiled once (regexes are slow to build in debug builds).
    compiled: Vec<CompiledPolicy>,
    unknown: UnknownPolicies,
    /// Drives the shuffles of the order-independence property.
    seed: u64,
}

/// A compact account of a case, so a shrunk failure reads in a few lines.
impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "Case (unknown: {:?}, seed: {})", self.unknown, self.seed)?;
        for p in &self.world.policies {
            let m = &p.metadata;
            writeln!(
                f,
                "  policy {} uid={} created={} deleting={} spec={}",
                m.name.as_deref().unwrap_or_default(),
                m.uid.as_deref().unwrap_or_default(),
                m.creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .unwrap_or_default(),
                m.deletion_timestamp.is_some(),
                serde_json::to_string(&p.spec).unwrap()
            )?;
        }
        for n in &self.world.nodes {
            let conditions: Vec<String> = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .map(|c| {
                    format!(
                        "{}={}/{}@{}",
                        c.type_,
                        c.status,
                        c.reason.as_deref().unwrap_or_default(),
                        c.last_transition_time
                            .as_ref()
                            .map(|t| t.0.to_string())
                            .unwrap_or_default()
                    )
                })
                .collect();
            let taints: Vec<String> = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .map(|t| {
                    format!(
                        "{}{}",
                        show(t),
                        if t.time_added.is_some() { "(t)" } else { "" }
                    )
                })
                .collect();
            writeln!(
                f,
                "  node {} labels={:?} conditions={conditions:?} taints={taints:?} annotations={:?}",
                n.metadata.name.as_deref().unwrap_or_default(),
                n.metadata.labels.clone().unwrap_or_default(),
                n.metadata.annotations.clone().unwrap_or_default(),
            )?;
        }
        for p in &self.world.pods {
            writeln!(
                f,
                "  pod {}/{} labels={:?} node={:?} ready={:?} annotations={:?} phase={:?}",
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default(),
                p.metadata.labels.clone().unwrap_or_default(),
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .map(|cs| cs.iter().map(|c| c.status.clone()).collect::<Vec<_>>()),
                p.metadata.annotations.clone().unwrap_or_default(),
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
            )?;
        }
        Ok(())
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(policy_gen(), 0..=MAX_POLICIES),
        prop::collection::vec(node_gen(), 1..=5),
        prop::collection::vec(pod_gen(), 0..=8),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(policies, nodes, pods, remove, seed)| {
            let mut world = World::new();
            for (i, g) in policies.iter().enumerate() {
                world = world.policy(build_policy(i, g));
            }
            for (i, g) in nodes.iter().enumerate() {
                world = world.node(build_node(i, g, policies.len()));
            }
            for (i, g) in pods.iter().enumerate() {
                world = world.pod(build_pod(i, g, nodes.len()));
            }
            Case {
                compiled: world.policies.iter().map(CompiledPolicy::compile).collect(),
                world,
                unknown: if remove {
                    UnknownPolicies::Remove
                } else {
                    UnknownPolicies::Keep
                },
                seed,
            }
        })
}

// ---------------------------------------------------------------------------
// Checks

/// A small deterministic shuffle (splitmix64 + Fisher–Yates), so a failing case
/// reproduces from its seed.
fn shuffle<T>(items: &mut [T], seed: &mut u64) {
    for i in (1..items.len()).rev() {
        *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let j = (z % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

fn id_of(t: &Taint) -> String {
    taint_id(&t.key, &t.effect)
}

impl Case {
    fn set(&self) -> PolicySet {
        PolicySet::new(self.compiled.clone())
    }

    /// Plans `world` (this case's nodes and pods, maybe after a plan was applied) at [`NOW`].
    fn plan(&self, set: &PolicySet, world: &World) -> Planned {
        plan_all(
            set,
            &world.views(),
            &PodIndex::from_pods(&world.pods),
            now(),
            self.unknown,
        )
    }

    /// The same policies and pods in another order (drawn from the case's seed).
    fn shuffled(&self) -> (PolicySet, Vec<Pod>) {
        let mut seed = self.seed;
        let mut order: Vec<usize> = (0..self.compiled.len()).collect();
        shuffle(&mut order, &mut seed);
        let mut pods = self.world.pods.clone();
        shuffle(&mut pods, &mut seed);
        let set = PolicySet::new(order.iter().map(|&i| self.compiled[i].clone()));
        (set, pods)
    }
}

/// (a) Taints without an ownership entry are never removed or changed, and keep their order.
fn check_foreign_untouched(before: &NodeView, plan: &NodePlan) {
    let foreign: Vec<&Taint> = before
        .taints
        .iter()
        .filter(|t| before.managed.owner(&id_of(t)).is_none())
        .collect();
    let kept: Vec<&Taint> = plan
        .taints
        .iter()
        .filter(|t| foreign.iter().any(|f| id_of(f) == id_of(t)))
        .collect();
    assert_eq!(
        kept, foreign,
        "node {}: a foreign taint was removed, changed or moved",
        before.name
    );
    let foreign_ids: HashSet<String> = foreign.iter().map(|t| id_of(t)).collect();
    for c in plan.added.iter().chain(&plan.removed) {
        let id = taint_id(&c.key, c.effect.as_str());
        assert!(
            !foreign_ids.contains(&id),
            "node {}: the plan touches foreign taint {id}: {c:?}",
            before.name
        );
    }
    for id in &foreign_ids {
        assert!(
            plan.managed.owner(id).is_none(),
            "node {}: foreign taint {id} adopted",
            before.name
        );
    }
}

/// (c) No two taints share key+effect; (e) every ownership entry names a present taint.
fn check_well_formed(plan: &NodePlan) {
    let mut ids = HashSet::new();
    for t in &plan.taints {
        assert!(
            ids.insert(id_of(t)),
            "node {}: two taints with id {}: {:?}",
            plan.node,
            id_of(t),
            plan.taints
        );
    }
    for (id, owner) in plan.managed.iter() {
        assert!(
            ids.contains(id),
            "node {}: ownership entry {id} -> {owner} without the taint: {:?}",
            plan.node,
            plan.taints
        );
    }
}

/// The taints a plan adds, removes and keeps account for the whole result.
fn check_changes_add_up(before: &NodeView, plan: &NodePlan) {
    let present = |key: &str, effect: TaintEffect| {
        before
            .taints
            .iter()
            .any(|t| t.key == key && t.effect == effect.as_str())
    };
    let new = plan
        .added
        .iter()
        .filter(|a| !present(&a.key, a.effect))
        .count();
    assert_eq!(
        plan.taints.len() + plan.removed.len(),
        before.taints.len() + new,
        "node {}: the changes do not account for the result: {plan:?}",
        plan.node
    );
}

/// (b) Applying `first` and planning again changes nothing, and leaves no policy Progressing.
fn check_idempotent(case: &Case, set: &PolicySet, first: &Planned) {
    let mut applied = case.world.clone();
    applied.apply(first);
    let second = case.plan(set, &applied);
    for (node, np) in applied.nodes.iter().zip(&second.nodes) {
        assert!(
            np.added.is_empty() && np.removed.is_empty(),
            "node {}: second plan still adds {:?} / removes {:?}",
            np.node,
            np.added,
            np.removed
        );
        assert!(
            !np.changes(&NodeView::from_node(node)),
            "node {}: second plan still changes the node: {np:?}",
            np.node
        );
        check_well_formed(np);
    }
    // The summaries of an applied plan describe the same decision. (A policy being
    // deleted is left out: its cleanup drops the bootstrap records it is evaluated by.)
    for (i, (a, b)) in first.policies.iter().zip(&second.policies).enumerate() {
        assert_eq!(a.name, b.name);
        assert_ne!(
            b.reason,
            Reason::Progressing,
            "{}: still progressing after the plan was applied: {}",
            b.name,
            b.message
        );
        if set.policies[i].deleting {
            continue;
        }
        assert_eq!(a.selected_nodes, b.selected_nodes, "{}", a.name);
        assert_eq!(
            a.tainted_node_names, b.tainted_node_names,
            "{}: tainted nodes differ after applying: {a:?} then {b:?}",
            a.name
        );
        assert_eq!(a.pending_nodes, b.pending_nodes, "{}", a.name);
    }
}

/// (d) The same plans, summaries and per-node evaluations (whose reasons end up in
/// events and `plan` output) with policies and pods in another order.
fn check_order_independent(case: &Case, set: &PolicySet, first: &Planned) {
    let (shuffled_set, pods) = case.shuffled();
    let index = PodIndex::from_pods(&case.world.pods);
    let shuffled_index = PodIndex::from_pods(&pods);
    let views = case.world.views();
    let shuffled = plan_all(&shuffled_set, &views, &shuffled_index, now(), case.unknown);
    for (a, b) in first.nodes.iter().zip(&shuffled.nodes) {
        assert_eq!(a, b, "node {}: plan depends on input order", a.node);
    }
    assert_eq!(first.policies, shuffled.policies);
    assert_eq!(first.next_check, shuffled.next_check);
    for view in &views {
        let a = evaluate_node(set, view, &index, now());
        let b = evaluate_node(&shuffled_set, view, &shuffled_index, now());
        assert_eq!(
            a, b,
            "node {}: evaluation depends on input order",
            view.name
        );
        for (pa, pb) in a.policies.iter().zip(&b.policies) {
            assert_eq!(pa.reasons(), pb.reasons(), "node {}", view.name);
        }
    }
}

/// Dry-run, invalid and deleting policies never add a taint, and a taint that a
/// dry-run or invalid policy owns (and no live policy takes over) stays as it is.
fn check_inactive_policies(case: &Case, set: &PolicySet, plan: &Planned) {
    let inactive: BTreeMap<&str, bool> = set
        .policies
        .iter()
        .filter(|p| !p.is_active())
        .map(|p| (p.name.as_str(), p.deleting))
        .collect();
    for (view, np) in case.world.views().iter().zip(&plan.nodes) {
        for a in &np.added {
            assert!(!inactive.contains_key(a.policy.as_str()), "{a:?}");
        }
        for t in &view.taints {
            let id = id_of(t);
            let Some(owner) = view.managed.owner(&id) else {
                continue;
            };
            let frozen = inactive.get(owner) == Some(&false)
                && set
                    .owner_of(&id)
                    .is_none_or(|i| set.policies[i].name == owner);
            if frozen {
                assert!(
                    np.taints.contains(t),
                    "{}: frozen {id} changed: {np:?}",
                    np.node
                );
                assert_eq!(np.managed.owner(&id), Some(owner));
            }
        }
    }
}

// One test per invariant. Each runs proptest's default 256 cases; most of their
// time goes into building regexes, which debug builds do slowly.
proptest! {
    /// (a) Taints not owned by the operator are never removed or changed; and the
    /// changes a plan lists account for its result.
    #[test]
    fn foreign_taints_are_never_removed_or_changed(case in case()) {
        let first = case.plan(&case.set(), &case.world);
        for (view, np) in case.world.views().iter().zip(&first.nodes) {
            prop_assert_eq!(&view.name, &np.node);
            check_foreign_untouched(view, np);
            check_changes_add_up(view, np);
        }
    }

    /// (b) Applying a plan and planning again at the same time changes nothing.
    #[test]
    fn applying_a_plan_and_planning_again_changes_nothing(case in case()) {
        let set = case.set();
        let first = case.plan(&set, &case.world);
        check_idempotent(&case, &set, &first);
    }

    /// (c) No two taints in a plan's result share key+effect.
    #[test]
    fn no_two_taints_share_key_and_effect(case in case()) {
        for np in &case.plan(&case.set(), &case.world).nodes {
            let ids: Vec<String> = np.taints.iter().map(id_of).collect();
            let unique: HashSet<&String> = ids.iter().collect();
            prop_assert_eq!(ids.len(), unique.len(), "{:?}", ids);
        }
    }

    /// (d) A node's plan does not depend on the order of the input policies or pods.
    #[test]
    fn node_plans_do_not_depend_on_policy_or_pod_order(case in case()) {
        let set = case.set();
        let first = case.plan(&set, &case.world);
        check_order_independent(&case, &set, &first);
    }

    /// (e) Every managed-taints entry in the result refers to a taint on the node.
    #[test]
    fn every_ownership_entry_refers_to_a_present_taint(case in case()) {
        for np in &case.plan(&case.set(), &case.world).nodes {
            check_well_formed(np);
        }
    }

    /// Dry-run, invalid and deleting policies never add; what dry-run and invalid ones own stays.
    #[test]
    fn inactive_policies_never_add_and_frozen_taints_stay(case in case()) {
        let set = case.set();
        let first = case.plan(&set, &case.world);
        check_inactive_policies(&case, &set, &first);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    })]

    /// The policy set is oldest first (creationTimestamp, then name) whatever the
    /// input order, and `from_resources` agrees with compiling one by one.
    #[test]
    fn policy_set_order_is_oldest_then_name(case in case()) {
        let (shuffled, _) = case.shuffled();
        let names = |s: &PolicySet| s.policies.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        let from_resources = PolicySet::from_resources(&case.world.policies);
        prop_assert_eq!(names(&shuffled), names(&from_resources));
        let keys: Vec<_> = from_resources.policies.iter().map(|p| (p.created, p.name.clone())).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        prop_assert_eq!(keys, sorted);
    }
}

#[test]
fn shuffle_is_a_permutation() {
    let mut v: Vec<u32> = (0..10).collect();
    let mut seed = 42;
    shuffle(&mut v, &mut seed);
    let mut sorted = v.clone();
    sorted.sort();
    assert_eq!(sorted, (0..10).collect::<Vec<_>>());
}
