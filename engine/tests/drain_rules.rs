//! One test per rule of `spec.eviction` (shared/API.md, Eviction): the stand-in,
//! the drain's start and its record, the switch, the pace per zone, the zone hold,
//! and the drain stopping when the node no longer needs the taint. Plans are made
//! with the decision core alone, the clock moved by hand.

mod support;

use support::*;
use taint_operator_crd::{DRAIN_STARTED_ANNOTATION, MANAGED_TAINTS_ANNOTATION};
use taint_operator_engine::{
    cluster_plan::Reason,
    drain::{PodFate, pod_fate},
};

const KEY: &str = "example.com/nic";

/// `p` taints `example.com/nic=kaput:NoExecute` while `NIC` is `Kaput`, with
/// `eviction`; `clearAfter: 0s`, so a node that heals is done at once (how clearing
/// holds a drain is in detector_restarts.rs).
fn evicting(eviction: serde_json::Value) -> PolicyBuilder {
    policy("p")
        .taint(KEY, "kaput", NoExecute)
        .matcher([cond("NIC", "Kaput")])
        .eviction(eviction)
        .clear_after("0s")
}

fn broken(name: &str) -> NodeBuilder {
    node(name).condition("NIC", "Kaput")
}

fn at(secs: i64) -> k8s_openapi::jiff::Timestamp {
    plus(now(), secs)
}

#[test]
fn the_taint_goes_on_as_no_schedule_first_and_the_drain_starts() {
    let w = World::new()
        .policy(evicting(serde_json::json!({})))
        .node(broken("n1"));
    let plan = w.plan();
    let n1 = plan.node("n1");
    assert_eq!(n1.taint_list(), ["example.com/nic=kaput:NoSchedule"]);
    assert_eq!(n1.added.len(), 1);
    assert_eq!(n1.added[0].then, Some(NoExecute));
    assert_eq!(
        n1.managed_list(),
        owned(&[("example.com/nic:NoSchedule", "p")])
    );
    assert_eq!(n1.drains.started("p"), Some(now()));
    assert_eq!(n1.drain_started, ["p"]);
    let s = plan.summary("p");
    assert_eq!((s.tainted_nodes, s.draining_nodes), (1, 1));
    assert_eq!(s.reason, Reason::Draining);
    assert!(!s.ready);
}

#[test]
fn the_switch_waits_for_the_pods_in_the_way_then_swaps_in_one_plan() {
    let mut w = World::new()
        .policy(evicting(serde_json::json!({})))
        .node(broken("n1"));
    w.step();
    // Pods still in the way: nothing changes, however often it is planned.
    let waiting = w.plan_evicted(at(30), false);
    assert!(waiting.node("n1").is_noop());
    assert!(!waiting.node("n1").changes(&w.views()[0]));
    assert_eq!(waiting.summary("p").draining_nodes, 1);
    // Every pod gone: the stand-in goes and the NoExecute taint comes, together.
    let switch = w.plan_evicted(at(30), true);
    let n1 = switch.node("n1");
    assert_eq!(n1.taint_list(), ["example.com/nic=kaput:NoExecute"]);
    assert_eq!(n1.added_list(), ["example.com/nic=kaput:NoExecute"]);
    assert_eq!(n1.removed_list(), ["example.com/nic:NoSchedule"]);
    assert_eq!(
        n1.managed_list(),
        owned(&[("example.com/nic:NoExecute", "p")])
    );
    assert_eq!(n1.drain_finished, ["p"]);
    assert_eq!(n1.taints[0].time_added.as_ref().map(|t| t.0), Some(at(30)));
    // The start stays on record while the taint is on.
    assert_eq!(n1.drains.started("p"), Some(now()));
    assert_eq!(switch.summary("p").draining_nodes, 0);
    w.apply(&switch);
    let after = w.plan_evicted(at(60), true);
    assert!(after.node("n1").is_noop() && !after.node("n1").changes(&w.views()[0]));
    assert_eq!(after.summary("p").reason, Reason::Reconciled);
}

#[test]
fn without_budgets_nothing_is_evicted_and_the_switch_follows_the_start() {
    let mut w = World::new()
        .policy(evicting(
            serde_json::json!({"respectDisruptionBudgets": false}),
        ))
        .node(broken("n1"));
    let first = w.step();
    assert_eq!(
        first.node("n1").taint_list(),
        ["example.com/nic=kaput:NoSchedule"]
    );
    // A node with nothing to evict still takes both steps.
    let second = w.plan_evicted(at(1), false);
    assert_eq!(
        second.node("n1").taint_list(),
        ["example.com/nic=kaput:NoExecute"]
    );
}

#[test]
fn drain_timeout_switches_with_pods_still_in_the_way() {
    let mut w = World::new()
        .policy(evicting(serde_json::json!({"drainTimeout": "10m"})))
        .node(broken("n1"));
    w.step();
    let before = w.plan_evicted(at(599), false);
    assert!(before.node("n1").is_noop());
    assert_eq!(before.next_check, Some(at(600)));
    let after = w.plan_evicted(at(600), false);
    assert_eq!(
        after.node("n1").taint_list(),
        ["example.com/nic=kaput:NoExecute"]
    );
}

#[test]
fn drain_timeout_counts_from_the_recorded_start_whoever_planned_it() {
    // A drain another replica started 11 minutes ago: the timeout has passed.
    let w = World::new()
        .policy(evicting(serde_json::json!({"drainTimeout": "10m"})))
        .node(
            broken("n1")
                .owned_taint(KEY, "kaput", NoSchedule, "p")
                .drain_started("p", "2026-11-20T11:49:00Z"),
        );
    let plan = w.plan_evicted(now(), false);
    assert_eq!(
        plan.node("n1").taint_list(),
        ["example.com/nic=kaput:NoExecute"]
    );
}

#[test]
fn a_node_that_heals_mid_drain_loses_the_stand_in_and_the_record() {
    let mut w = World::new()
        .policy(evicting(serde_json::json!({})))
        .node(broken("n1"));
    w.step();
    w.set_condition("n1", "NIC", "Fine");
    let plan = w.plan();
    let n1 = plan.node("n1");
    assert!(n1.taints.is_empty());
    assert_eq!(n1.removed_list(), ["example.com/nic:NoSchedule"]);
    assert!(
        n1.removed[0].reason.starts_with("drain stopped"),
        "{:?}",
        n1.removed
    );
    assert!(n1.drains.is_empty() && n1.managed.is_empty());
    w.apply(&plan);
    assert_eq!(
        annotation(w.node_named("n1"), DRAIN_STARTED_ANNOTATION),
        None
    );
    assert_eq!(
        annotation(w.node_named("n1"), MANAGED_TAINTS_ANNOTATION),
        None
    );
}

#[test]
fn a_node_that_heals_after_the_switch_loses_the_taint_and_the_record() {
    let w = World::new().policy(evicting(serde_json::json!({}))).node(
        node("n1")
            .condition("NIC", "Fine")
            .owned_taint(KEY, "kaput", NoExecute, "p")
            .drain_started("p", "2026-11-20T11:00:00Z"),
    );
    let n1 = w.plan().node("n1").clone();
    assert!(n1.taints.is_empty() && n1.drains.is_empty());
}

#[test]
fn starts_are_paced_per_zone_one_interval_apart() {
    let p = evicting(serde_json::json!({"nodesPerMinute": 6}));
    let mut w = World::new().policy(p);
    for n in ["a1", "a2", "a3"] {
        w = w.node(broken(n).zone("a"));
    }
    w = w.node(broken("b1").zone("b"));
    let first = w.plan();
    // Every node goes NoSchedule at once; one drain starts per zone.
    for n in ["a1", "a2", "a3", "b1"] {
        assert_eq!(
            first.node(n).taint_list(),
            ["example.com/nic=kaput:NoSchedule"]
        );
    }
    let started: Vec<&str> = ["a1", "a2", "a3", "b1"]
        .into_iter()
        .filter(|n| !first.node(n).drain_started.is_empty())
        .collect();
    assert_eq!(started, ["a1", "b1"]);
    assert_eq!(first.next_check, Some(at(10)));
    w.apply(&first);
    // Nine seconds on: not yet.
    let early = w.plan_at(at(9));
    assert!(
        ["a2", "a3"]
            .iter()
            .all(|n| early.node(n).drain_started.is_empty())
    );
    // Ten seconds after the first start, the next in the zone.
    let next = w.plan_at(at(10));
    let started: Vec<&str> = ["a2", "a3"]
        .into_iter()
        .filter(|n| !next.node(n).drain_started.is_empty())
        .collect();
    assert_eq!(started, ["a2"]);
}

#[test]
fn switches_are_paced_too_and_the_pace_is_read_from_the_nodes() {
    // a1 switched 4 s ago (its NoExecute timeAdded); a2 is drained and waits 6 s more.
    let p = evicting(serde_json::json!({"nodesPerMinute": 6}));
    let w = World::new()
        .policy(p)
        .node(
            broken("a1")
                .zone("a")
                .taint_at(KEY, Some("kaput"), NoExecute, Some(at(-4)))
                .managed(KEY, NoExecute, "p")
                .drain_started("p", "2026-11-20T11:59:00Z"),
        )
        .node(
            broken("a2")
                .zone("a")
                .owned_taint(KEY, "kaput", NoSchedule, "p")
                .drain_started("p", "2026-11-20T11:59:30Z"),
        );
    let plan = w.plan_evicted(now(), true);
    assert!(plan.node("a2").is_noop());
    assert_eq!(plan.next_check, Some(at(6)));
    let plan = w.plan_evicted(at(6), true);
    assert_eq!(
        plan.node("a2").taint_list(),
        ["example.com/nic=kaput:NoExecute"]
    );
}

#[test]
fn readiness_taints_are_not_paced() {
    let p = policy("p")
        .taint(KEY, "kaput", NoExecute)
        .ready_when("NetReady", "True")
        .eviction(serde_json::json!({"nodesPerMinute": 1, "respectDisruptionBudgets": false}));
    let mut w = World::new().policy(p);
    for n in ["a1", "a2", "a3"] {
        w = w.node(node(n).zone("a"));
    }
    w.step();
    let plan = w.plan_at(at(1));
    for n in ["a1", "a2", "a3"] {
        assert_eq!(
            plan.node(n).taint_list(),
            ["example.com/nic=kaput:NoExecute"],
            "{n}"
        );
    }
}

#[test]
fn an_unhealthy_zone_holds_its_switches_and_the_policy_says_which() {
    let p = evicting(serde_json::json!({"pauseWhenZoneUnhealthy": "50%"}));
    let mut w = World::new().policy(p);
    // Zone a: 3 of 4 broken (held); zone b: 1 of 4 broken (not held); c: 2 of 4 (not "more than").
    for (zone, broken_count) in [("a", 3), ("b", 1), ("c", 2)] {
        for k in 0..4 {
            let name = format!("{zone}{k}");
            let n = if k < broken_count {
                broken(&name)
            } else {
                node(&name).condition("NIC", "Fine")
            };
            w = w.node(n.zone(zone));
        }
    }
    w.step();
    let plan = w.plan_evicted(at(1), true);
    assert_eq!(
        plan.node("a0").taint_list(),
        ["example.com/nic=kaput:NoSchedule"]
    );
    assert_eq!(
        plan.node("b0").taint_list(),
        ["example.com/nic=kaput:NoExecute"]
    );
    assert_eq!(
        plan.node("c1").taint_list(),
        ["example.com/nic=kaput:NoExecute"]
    );
    let s = plan.summary("p");
    assert_eq!(s.reason, Reason::ZoneUnhealthy);
    assert!(s.message.contains("a: 3 of 4"), "{}", s.message);
    assert!(!s.message.contains("b:"), "{}", s.message);
    // One node of zone a heals: 2 of 4 is not more than half, and once that share
    // has held still for zoneSettle (5 s) the rest switch.
    w.set_condition("a2", "NIC", "Fine");
    let settling = w.plan_evicted(at(4), true);
    assert_eq!(
        settling.node("a0").taint_list(),
        ["example.com/nic=kaput:NoSchedule"]
    );
    assert_eq!(settling.next_check, Some(at(5)));
    // Held, zone a's nodes never started draining: they start at 5 s, then switch.
    let started = w.plan_evicted(at(5), true);
    assert_eq!(started.node("a0").drain_started, ["p"]);
    w.apply(&started);
    let healed = w.plan_evicted(at(6), true);
    assert_eq!(
        healed.node("a0").taint_list(),
        ["example.com/nic=kaput:NoExecute"]
    );
    assert_eq!(healed.summary("p").reason, Reason::Progressing);
}

/// Six of a zone's ten nodes break within one second, written one by one and
/// planned after each write, as the operator sees them: the first ones judged see
/// a healthy share, but the zone has not settled, so none starts or switches; once
/// it has held still for zoneSettle the whole zone is judged unhealthy and held.
/// A node of a healthy zone that broke at the same time switches once its zone
/// settled: zoneSettle later than it would have at most.
#[test]
fn a_zone_wide_fault_is_judged_whole_after_the_zone_settles() {
    let p = evicting(serde_json::json!({
        "respectDisruptionBudgets": false, "pauseWhenZoneUnhealthy": "50%"
    }));
    let mut w = World::new().policy(p);
    for k in 0..10 {
        w = w.node(node(&format!("a{k}")).zone("a").condition("NIC", "Fine"));
    }
    for k in 0..4 {
        w = w.node(node(&format!("b{k}")).zone("b").condition("NIC", "Fine"));
    }
    w.step();
    let ms = |n: i64| {
        now()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(n))
            .unwrap()
    };
    w.set_condition_at("b0", "NIC", "Kaput", ms(0));
    for k in 0..6 {
        let flipped = ms(200 * k);
        w.set_condition_at(&format!("a{k}"), "NIC", "Kaput", flipped);
        // Planned the moment the write is seen: every broken node only NoSchedule.
        let plan = w.plan_at(flipped);
        for j in 0..=k {
            assert_eq!(
                plan.node(&format!("a{j}")).taint_list(),
                ["example.com/nic=kaput:NoSchedule"],
                "a{j} after a{k} broke"
            );
            assert!(plan.node(&format!("a{j}")).drain_started.is_empty());
        }
        w.apply(&plan);
    }
    // Zone b settles 5 s after b0 broke; the last of zone a broke at 1 s (the
    // API server keeps whole seconds), so zone a is judged at 6 s.
    let b_started = w.plan_at(at(5));
    assert_eq!(b_started.node("b0").drain_started, ["p"]);
    assert!(b_started.node("a0").drain_started.is_empty());
    w.apply(&b_started);
    let b_judged = w.plan_at(at(5));
    assert_eq!(
        b_judged.node("b0").taint_list(),
        ["example.com/nic=kaput:NoExecute"]
    );
    assert_eq!(
        b_judged.node("a0").taint_list(),
        ["example.com/nic=kaput:NoSchedule"]
    );
    w.apply(&b_judged);
    let a_judged = w.plan_at(at(6));
    for k in 0..6 {
        assert_eq!(
            a_judged.node(&format!("a{k}")).taint_list(),
            ["example.com/nic=kaput:NoSchedule"],
            "a{k}"
        );
    }
    let s = a_judged.summary("p");
    assert_eq!(s.reason, Reason::ZoneUnhealthy);
    assert!(s.message.contains("a: 6 of 10"), "{}", s.message);
}

/// `zoneSettle: 0s` judges each node at once, as before the field existed: the
/// first node of a zone-wide fault that is seen alone switches.
#[test]
fn zone_settle_zero_judges_each_node_at_once() {
    let p = evicting(serde_json::json!({
        "respectDisruptionBudgets": false, "pauseWhenZoneUnhealthy": "50%", "zoneSettle": "0s"
    }));
    let mut w = World::new().policy(p);
    for k in 0..4 {
        w = w.node(node(&format!("a{k}")).zone("a").condition("NIC", "Fine"));
    }
    w.step();
    w.set_condition("a0", "NIC", "Kaput");
    let plan = w.plan_at(now());
    assert_eq!(
        plan.node("a0").taint_list(),
        ["example.com/nic=kaput:NoSchedule"]
    );
    w.apply(&plan);
    assert_eq!(
        w.plan_at(at(1)).node("a0").taint_list(),
        ["example.com/nic=kaput:NoExecute"]
    );
}

#[test]
fn a_foreign_no_schedule_with_the_same_key_is_left_alone_and_the_drain_goes_on() {
    let w = World::new()
        .policy(evicting(
            serde_json::json!({"respectDisruptionBudgets": false}),
        ))
        .node(broken("n1").taint(KEY, "admin", NoSchedule));
    let mut w2 = w.clone();
    let first = w2.step();
    assert_eq!(
        first.node("n1").taint_list(),
        ["example.com/nic=admin:NoSchedule"]
    );
    assert!(first.node("n1").managed.is_empty());
    let second = w2.plan_at(at(1));
    assert_eq!(
        second.node("n1").taint_list(),
        [
            "example.com/nic=admin:NoSchedule",
            "example.com/nic=kaput:NoExecute"
        ]
    );
    let _ = w;
}

#[test]
fn deleting_the_policy_mid_drain_removes_the_stand_in_and_the_record() {
    let w = World::new()
        .policy(evicting(serde_json::json!({})).deleting())
        .node(
            broken("n1")
                .owned_taint(KEY, "kaput", NoSchedule, "p")
                .drain_started("p", "2026-11-20T11:59:00Z"),
        );
    let n1 = w.plan().node("n1").clone();
    assert!(n1.taints.is_empty() && n1.drains.is_empty() && n1.managed.is_empty());
}

#[test]
fn dropping_spec_eviction_mid_drain_puts_no_execute_on_at_once() {
    let w = World::new()
        .policy(
            policy("p")
                .taint(KEY, "kaput", NoExecute)
                .matcher([cond("NIC", "Kaput")]),
        )
        .node(
            broken("n1")
                .owned_taint(KEY, "kaput", NoSchedule, "p")
                .drain_started("p", "2026-11-20T11:59:00Z"),
        );
    let n1 = w.plan().node("n1").clone();
    assert_eq!(n1.taint_list(), ["example.com/nic=kaput:NoExecute"]);
    assert!(n1.drains.is_empty());
}

#[test]
fn a_no_execute_taint_already_on_stays_when_eviction_is_added() {
    let w = World::new()
        .policy(evicting(serde_json::json!({"nodesPerMinute": 1})))
        .node(broken("n1").owned_taint(KEY, "kaput", NoExecute, "p"));
    let plan = w.plan();
    assert!(plan.node("n1").is_noop());
    assert_eq!(plan.summary("p").reason, Reason::Reconciled);
}

#[test]
fn a_draining_node_holds_its_place_under_max_tainted_nodes() {
    let w = World::new()
        .policy(evicting(serde_json::json!({})).max_tainted(1))
        .node(
            broken("n2")
                .owned_taint(KEY, "kaput", NoSchedule, "p")
                .drain_started("p", "2026-11-20T11:59:00Z"),
        )
        .node(broken("n1"));
    let plan = w.plan();
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(plan.node("n1").held, ["p"]);
    let s = plan.summary("p");
    assert_eq!(
        (s.tainted_nodes, s.pending_nodes, s.draining_nodes),
        (1, 1, 1)
    );
}

#[test]
fn dry_run_and_invalid_policies_neither_drain_nor_undo_a_drain() {
    let draining = || {
        broken("n1")
            .owned_taint(KEY, "kaput", NoSchedule, "p")
            .drain_started("p", "2026-11-20T11:59:00Z")
    };
    let w = World::new()
        .policy(evicting(serde_json::json!({"respectDisruptionBudgets": false})).dry_run())
        .node(draining());
    let plan = w.plan_at(at(60));
    assert!(plan.node("n1").is_noop() && !plan.node("n1").changes(&w.views()[0]));
}

#[test]
fn pods_in_the_way_are_what_kubectl_drain_evicts_minus_those_that_tolerate() {
    let taint = taint_operator_crd::PolicyTaint {
        key: KEY.into(),
        value: Some("kaput".into()),
        effect: NoExecute,
    };
    let fate = |p: PodBuilder| pod_fate(&p.build(), [&taint]);
    assert_eq!(fate(pod("web", "w1").on("n1")), PodFate::Evict);
    assert_eq!(fate(pod("web", "w1").terminating()), PodFate::Terminating);
    assert_eq!(fate(pod("web", "w1").phase("Succeeded")), PodFate::Finished);
    assert_eq!(fate(pod("web", "w1").phase("Failed")), PodFate::Finished);
    assert_eq!(
        fate(pod("kube-system", "etcd-n1").mirror()),
        PodFate::Mirror
    );
    assert_eq!(
        fate(pod("kube-system", "cni-x").owned_by("DaemonSet", "cni")),
        PodFate::DaemonSet
    );
    assert_eq!(
        fate(pod("web", "w1").owned_by("ReplicaSet", "web")),
        PodFate::Evict
    );
    assert_eq!(
        fate(pod("web", "w1").tolerate(KEY, Some(NoExecute), None)),
        PodFate::Tolerates
    );
    assert_eq!(
        fate(pod("web", "w1").tolerate("", None, None)),
        PodFate::Tolerates
    );
    // Tolerating for a while is not tolerating: the taint manager would delete it then.
    assert_eq!(
        fate(pod("web", "w1").tolerate(KEY, Some(NoExecute), Some(300))),
        PodFate::Evict
    );
    assert_eq!(
        fate(pod("web", "w1").tolerate(KEY, Some(NoSchedule), None)),
        PodFate::Evict
    );
}

/// A `for` window still running on another node of the zone has moved nothing yet:
/// the zone is judged without waiting for it. When it ends, the share moves, and the
/// zone settles again from then.
#[test]
fn a_running_for_window_does_not_hold_the_zone_until_it_ends() {
    let p = policy("p")
        .taint(KEY, "kaput", NoExecute)
        .matcher([cond("NIC", "Kaput").for_("30s")])
        .eviction(serde_json::json!({
            "respectDisruptionBudgets": false, "pauseWhenZoneUnhealthy": "50%"
        }));
    let mut w = World::new().policy(p);
    for k in 0..4 {
        w = w.node(node(&format!("a{k}")).zone("a").condition("NIC", "Fine"));
    }
    w.step();
    // a0 broke a minute ago (window long over); a1 broke 5 s ago (25 s to go).
    w.set_condition_at("a0", "NIC", "Kaput", at(-60));
    w.set_condition_at("a1", "NIC", "Kaput", at(-5));
    let plan = w.plan_at(now());
    assert_eq!(plan.node("a0").drain_started, ["p"], "judged at once");
    assert!(plan.node("a1").taint_list().is_empty());
    w.apply(&plan);
    assert_eq!(
        w.plan_at(now()).node("a0").taint_list(),
        ["example.com/nic=kaput:NoExecute"]
    );
    // a1's window ends at 25 s: 2 of 4 match (not more than half), judged at 30 s.
    let ended = w.plan_at(at(25));
    assert_eq!(
        ended.node("a1").taint_list(),
        ["example.com/nic=kaput:NoSchedule"]
    );
    assert!(ended.node("a1").drain_started.is_empty(), "settling");
    w.apply(&ended);
    assert_eq!(w.plan_at(at(30)).node("a1").drain_started, ["p"]);
}
