//! Properties of drains (`spec.eviction`) over generated histories: a few nodes in
//! a few zones under one evicting policy, planned again and again while a clock
//! moves, conditions flip and pods leave or stay in the way. Each node is planned
//! on its own with its gates from paces kept across the history, as the
//! controller plans (`pace::Paces`). After every plan:
//!
//! - never NoExecute before the drain allows it (the drain started, and its pods
//!   are gone, or budgets are not respected, or its timeout passed; and its zone
//!   is not held);
//! - with `pauseWhenZoneUnhealthy`, no drain starts and no switch comes in a zone
//!   less than `zoneSettle` after one of its nodes flipped;
//! - never two paced steps of one kind in one zone less than `60 s /
//!   nodesPerMinute` apart (so never more than nodesPerMinute a minute);
//! - foreign taints untouched, no two taints with one key and effect;
//! - a node that no longer matches ends with none of the policy's taints and no
//!   drain record.

mod support;

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Taint;
use proptest::prelude::*;
use support::*;
use taint_operator_engine::{
    cluster::{NodeView, PodIndex},
    decision::evaluate_node,
    drain::{self, DrainStep},
    node_plan::{Gates, UnknownPolicies, drain_gates_asked, plan_node},
    pace::Paces,
};

const KEY: &str = "example.com/nic";

#[derive(Debug, Clone)]
struct Spec {
    respect: bool,
    per_minute: Option<i32>,
    timeout_secs: Option<u32>,
    zone_pause: Option<u32>,
    /// `zoneSettle` in seconds (with `zone_pause`); `None`: the default, 5 s.
    zone_settle: Option<u32>,
    /// Also declares `KEY:NoSchedule` itself.
    declares_no_schedule: bool,
}

#[derive(Debug, Clone)]
struct NodeGen {
    zone: usize,
    /// A foreign taint: 0 none, 1 same key NoSchedule, 2 another key NoExecute.
    foreign: u8,
}

#[derive(Debug, Clone)]
struct Step {
    /// Seconds the clock moves before this plan.
    advance: u32,
    /// Nodes whose condition flips.
    flips: Vec<usize>,
    /// Per node: its pods in the way are gone.
    evicted: Vec<bool>,
}

#[derive(Debug, Clone)]
struct History {
    spec: Spec,
    nodes: Vec<NodeGen>,
    steps: Vec<Step>,
}

fn history() -> impl Strategy<Value = History> {
    let spec = (
        any::<bool>(),
        prop::option::of(prop::sample::select(vec![1, 2, 6, 12, 60])),
        prop::option::of(prop::sample::select(vec![20u32, 60, 300])),
        prop::option::of(prop::sample::select(vec![0u32, 30, 50, 100])),
        prop::option::of(prop::sample::select(vec![0u32, 3, 20])),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(respect, per_minute, timeout_secs, zone_pause, zone_settle, declares_no_schedule)| {
                Spec {
                    respect,
                    per_minute,
                    timeout_secs,
                    zone_pause,
                    zone_settle: zone_settle.filter(|_| zone_pause.is_some()),
                    declares_no_schedule,
                }
            },
        );
    let nodes = prop::collection::vec(
        (0usize..3, 0u8..3).prop_map(|(zone, foreign)| NodeGen { zone, foreign }),
        1..8,
    );
    (spec, nodes).prop_flat_map(|(spec, nodes)| {
        let n = nodes.len();
        let step = (
            0u32..25,
            prop::collection::vec(0..n, 0..3),
            prop::collection::vec(prop::bool::weighted(0.6), n),
        )
            .prop_map(|(advance, flips, evicted)| Step {
                advance,
                flips,
                evicted,
            });
        prop::collection::vec(step, 1..30).prop_map(move |steps| History {
            spec: spec.clone(),
            nodes: nodes.clone(),
            steps,
        })
    })
}

fn build(h: &History) -> World {
    let mut eviction = serde_json::json!({"respectDisruptionBudgets": h.spec.respect});
    if let Some(n) = h.spec.per_minute {
        eviction["nodesPerMinute"] = n.into();
    }
    if let Some(t) = h.spec.timeout_secs {
        eviction["drainTimeout"] = format!("{t}s").into();
    }
    if let Some(p) = h.spec.zone_pause {
        eviction["pauseWhenZoneUnhealthy"] = format!("{p}%").into();
    }
    if let Some(s) = h.spec.zone_settle {
        eviction["zoneSettle"] = format!("{s}s").into();
    }
    // clearAfter 0s: a healed node ends with nothing of the policy at once.
    let mut p = policy("p")
        .taint(KEY, "kaput", NoExecute)
        .matcher([cond("NIC", "Kaput")])
        .eviction(eviction)
        .clear_after("0s");
    if h.spec.declares_no_schedule {
        p = p.taint(KEY, "kaput", NoSchedule);
    }
    let mut w = World::new().policy(p);
    for (i, g) in h.nodes.iter().enumerate() {
        let mut n = node(&format!("n{i}"))
            .zone(&format!("z{}", g.zone))
            .condition("NIC", "Fine");
        n = match g.foreign {
            1 => n.taint(KEY, "admin", NoSchedule),
            2 => n.taint("example.com/other", "x", NoExecute),
            _ => n,
        };
        w = w.node(n);
    }
    w
}

fn id(t: &Taint) -> String {
    format!("{}:{}", t.key, t.effect)
}

fn flip(w: &mut World, node: &str, at: k8s_openapi::jiff::Timestamp) {
    let status = {
        let view = NodeView::from_node(w.node_named(node));
        if view.condition("NIC").is_some_and(|c| &*c.status == "Kaput") {
            "Fine"
        } else {
            "Kaput"
        }
    };
    w.set_condition(node, "NIC", status);
    // The transition happened now, on the simulated clock.
    let conditions = w
        .node_mut(node)
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .expect("just set");
    for c in conditions.iter_mut().filter(|c| c.type_ == "NIC") {
        c.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn drains_keep_their_promises(h in history()) {
        let mut w = build(&h);
        let set = w.set();
        let rules = drain::rules_of(&set, 0).expect("the policy evicts").clone();
        let interval = rules.interval();
        let mut clock = now();
        let paces = std::cell::RefCell::new(Paces::default());
        // Per zone and kind, the times of the paced steps so far.
        let mut steps: HashMap<(String, &str), Vec<k8s_openapi::jiff::Timestamp>> = HashMap::new();
        // Per zone, when one of its nodes last flipped.
        let mut flipped: HashMap<String, k8s_openapi::jiff::Timestamp> = HashMap::new();
        let settle = i64::from(h.spec.zone_settle.unwrap_or(5));
        for step in &h.steps {
            clock = plus(clock, i64::from(step.advance));
            for &n in &step.flips {
                flip(&mut w, &format!("n{n}"), clock);
                flipped.insert(format!("z{}", h.nodes[n].zone), clock);
            }
            let evicted: BTreeMap<String, bool> = step
                .evicted
                .iter()
                .enumerate()
                .map(|(i, e)| (format!("n{i}"), *e))
                .collect();
            let views = w.views();
            let pods = PodIndex::new();
            let plans: Vec<_> = views
                .iter()
                .map(|view| {
                    let eval = evaluate_node(&set, view, &pods, clock);
                    let zone = drain::zone_of(&view.labels);
                    let zone_state = || {
                        rules.zone_state(&drain::zone_health(&set, 0, zone, &views, &pods, clock), clock)
                    };
                    // The controller answers these gates before it plans.
                    let asked = drain_gates_asked(&set, view, &eval, &|_| true);
                    let called = std::cell::RefCell::new(Vec::new());
                    let gate = |i: usize| {
                        called.borrow_mut().push(i);
                        paces
                            .borrow_mut()
                            .gate(
                                &set,
                                i,
                                view,
                                eval.policies[i].verdict(),
                                evicted[&view.name],
                                &zone_state,
                                &|| views.iter().collect(),
                                clock,
                            )
                            .gate
                    };
                    let gates = Gates {
                        admitted: &|_| true,
                        drain: &gate,
                    };
                    let plan = plan_node(&set, view, &eval, gates, UnknownPolicies::Remove, clock);
                    paces.borrow_mut().settle(&view.name);
                    assert_eq!(called.into_inner(), asked, "{}: planning asked other gates than drain_gates_asked", view.name);
                    plan
                })
                .collect();
            let matched_in = |zone: &str| {
                let in_zone: Vec<&NodeView> = views
                    .iter()
                    .filter(|v| drain::zone_of(&v.labels) == zone)
                    .collect();
                let matched = in_zone
                    .iter()
                    .filter(|v| v.condition("NIC").is_some_and(|c| &*c.status == "Kaput"))
                    .count();
                (matched, in_zone.len())
            };
            let settled = |zone: &str| {
                h.spec.zone_pause.is_none()
                    || flipped.get(zone).is_none_or(|&at| plus(at, settle) <= clock)
            };
            for (before, np) in views.iter().zip(&plans) {
                let zone = drain::zone_of(&before.labels).to_string();
                if !np.drain_started.is_empty() {
                    prop_assert!(settled(&zone), "{}: a drain started in zone {zone} before it settled", before.name);
                }
                let broken = before.condition("NIC").is_some_and(|c| &*c.status == "Kaput");
                let had_no_execute = before.taints.iter().any(|t| t.key == KEY && t.effect == "NoExecute");
                let has_no_execute = np.taints.iter().any(|t| t.key == KEY && t.effect == "NoExecute");
                // Never NoExecute before the drain allows it.
                if has_no_execute && !had_no_execute {
                    let DrainStep::Draining { since } = drain::step(&set, 0, before) else {
                        panic!("{}: NoExecute without a started drain: {np:?}", before.name);
                    };
                    let timed_out = rules.drain_timeout.is_some_and(|d| drain::add(since, d) <= clock);
                    prop_assert!(
                        !rules.respect_budgets || evicted[&before.name] || timed_out,
                        "{}: switched with pods in the way", before.name
                    );
                    let (matched, selected) = matched_in(&zone);
                    prop_assert!(!rules.zone_held(matched, selected), "{}: switched in a held zone", before.name);
                    prop_assert!(settled(&zone), "{}: switched in zone {zone} before it settled", before.name);
                    steps.entry((zone.clone(), "switch")).or_default().push(clock);
                }
                if !np.drain_started.is_empty() && rules.respect_budgets {
                    steps.entry((zone.clone(), "start")).or_default().push(clock);
                }
                // Foreign taints untouched; one taint per key and effect.
                for t in before.taints.iter().filter(|t| before.managed.owner(&id(t)).is_none()) {
                    prop_assert!(np.taints.contains(t), "{}: foreign {} touched", before.name, id(t));
                }
                let mut ids: Vec<String> = np.taints.iter().map(id).collect();
                ids.sort();
                let n = ids.len();
                ids.dedup();
                prop_assert_eq!(n, ids.len(), "{}: duplicate taints {:?}", before.name, np.taints);
                // A healed node keeps nothing of the policy.
                if !broken {
                    prop_assert!(np.managed.is_empty(), "{}: still owns {:?}", before.name, np.managed);
                    prop_assert!(np.drains.is_empty(), "{}: drain record kept", before.name);
                }
            }
            for (node, np) in w.nodes.iter_mut().zip(&plans) {
                *node = apply_plan(node, np);
            }
        }
        if let Some(interval) = interval {
            for ((zone, kind), times) in &steps {
                for pair in times.windows(2) {
                    let gap = pair[1].duration_since(pair[0]);
                    prop_assert!(
                        gap >= k8s_openapi::jiff::SignedDuration::try_from(interval).unwrap(),
                        "zone {zone}: {kind}s {} and {} closer than {interval:?}", pair[0], pair[1]
                    );
                }
            }
        }
    }
}
