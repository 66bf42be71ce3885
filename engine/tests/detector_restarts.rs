//! Detectors restart; conditions blink (shared/API.md): a taint held for a matcher
//! stays through a restart that re-posts the default status for a moment or only
//! moves `lastTransitionTime`, and comes off once no matcher has matched for
//! `clearAfter`. Driven by the plan's clock, never by the wall clock.

mod support;

use std::time::Duration;

use k8s_openapi::{
    api::core::v1::NodeCondition, apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp,
};
use serde_json::json;
use support::*;
use taint_operator_engine::policy::{CompiledPolicy, DEFAULT_CLEAR_AFTER};

const TAINT: &str = "example.com/nic=broken:NoSchedule";

fn at(secs: i64) -> Timestamp {
    now() + k8s_openapi::jiff::SignedDuration::from_secs(secs)
}

fn nic_policy() -> PolicyBuilder {
    policy("nic")
        .taint("example.com/nic", "broken", NoSchedule)
        .matcher([cond("NIC", "True")])
}

/// Sets `NIC` as a detector posts it: status, reason, transition at `since`.
fn post(w: &mut World, status: &str, reason: &str, since: Timestamp) {
    let conditions = w
        .node_mut("n1")
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "NIC");
    conditions.push(NodeCondition {
        type_: "NIC".into(),
        status: status.into(),
        reason: Some(reason.into()),
        last_transition_time: Some(Time(since)),
        last_heartbeat_time: Some(Time(since)),
        ..NodeCondition::default()
    });
}

/// A world whose node n1 carries the policy's taint, its NIC broken since long ago.
fn tainted(p: PolicyBuilder) -> World {
    let mut w = World::new().policy(p).node(node("n1"));
    post(&mut w, "True", "NICDown", at(-3600));
    let first = w.plan_at(at(-1));
    assert_eq!(first.node("n1").added_list(), [TAINT]);
    w.apply(&first);
    w
}

fn carries(w: &World, t: Timestamp) -> bool {
    let plan = w.plan_at(t);
    plan.node("n1").taint_list().iter().any(|x| x == TAINT)
}

#[test]
fn the_default_clear_after_outlasts_a_restart_and_is_two_minutes() {
    assert_eq!(DEFAULT_CLEAR_AFTER, Duration::from_secs(120));
    let compiled = CompiledPolicy::compile(&nic_policy().build());
    assert_eq!(compiled.rules.unwrap().clear_after, DEFAULT_CLEAR_AFTER);
    let zero = CompiledPolicy::compile(&nic_policy().clear_after("0s").build());
    assert_eq!(zero.rules.unwrap().clear_after, Duration::ZERO);
}

#[test]
fn a_bad_clear_after_is_invalid_spec_naming_the_field() {
    let compiled = CompiledPolicy::compile(&nic_policy().clear_after("soon").build());
    let err = compiled.rules.unwrap_err();
    assert_eq!(err.field, "spec.clearAfter");
    assert!(err.message.contains("\"soon\""), "{}", err.message);
}

#[test]
fn a_restart_that_posts_the_default_status_keeps_the_taint() {
    let mut w = tainted(nic_policy());
    // The detector restarts at 0: its default status first...
    post(&mut w, "False", "NICUp", at(0));
    let plan = w.plan_at(at(1));
    assert!(plan.node("n1").is_noop(), "{:?}", plan.node("n1"));
    assert_eq!(
        plan.next_check,
        Some(at(120)),
        "looked at again when clearAfter ends"
    );
    let reasons = w.plan_at(at(1)).nodes[0].reasons();
    assert!(reasons.is_empty(), "a kept taint is no change: {reasons:?}");
    // ...then, a few seconds later, what its first check finds.
    post(&mut w, "True", "NICDown", at(4));
    for t in [4, 5, 60, 119, 120, 600] {
        assert!(carries(&w, at(t)), "taint lifted at {t} s");
        assert!(w.plan_at(at(t)).node("n1").is_noop());
    }
}

#[test]
fn the_taint_comes_off_once_no_matcher_has_matched_for_clear_after() {
    let mut w = tainted(nic_policy());
    post(&mut w, "False", "NICUp", at(0));
    assert!(carries(&w, at(119)));
    let plan = w.plan_at(at(120));
    assert_eq!(
        plan.node("n1").removed_list(),
        ["example.com/nic:NoSchedule"]
    );
    assert_eq!(plan.summary("nic").tainted_nodes, 0);
}

#[test]
fn clear_after_zero_takes_the_taint_off_at_once() {
    let mut w = tainted(nic_policy().clear_after("0s"));
    post(&mut w, "False", "NICUp", at(0));
    assert_eq!(
        w.plan_at(at(0)).node("n1").removed_list(),
        ["example.com/nic:NoSchedule"]
    );
}

#[test]
fn a_waiting_node_is_counted_tainted_and_says_until_when() {
    let mut w = tainted(nic_policy().clear_after("90s"));
    post(&mut w, "Unknown", "CheckTimedOut", at(0));
    let plan = w.plan_at(at(10));
    assert_eq!(plan.summary("nic").tainted_nodes, 1);
    assert_eq!(plan.next_check, Some(at(90)));
    let set = w.set();
    let eval = taint_operator_engine::decision::evaluate_node(
        &set,
        &w.views()[0],
        &taint_operator_engine::cluster::PodIndex::default(),
        at(10),
    );
    let reason = eval.policies[0].reason();
    assert_eq!(
        reason,
        format!(
            "no matcher has matched since {}: taints stay until {} (clearAfter 90s)",
            at(0),
            at(90)
        )
    );
}

#[test]
fn with_for_a_new_transition_time_alone_does_not_lift_the_taint() {
    let mut w = tainted(
        policy("nic")
            .taint("example.com/nic", "broken", NoSchedule)
            .matcher([cond("NIC", "True").for_("15s")]),
    );
    // The restart re-posts the problem at once with a new lastTransitionTime.
    post(&mut w, "True", "NICDown", at(0));
    for t in [0, 1, 14, 15, 300] {
        assert!(carries(&w, at(t)), "taint lifted at {t} s");
        assert!(w.plan_at(at(t)).node("n1").is_noop());
    }
}

#[test]
fn with_for_a_restart_that_blinks_keeps_the_taint() {
    let mut w = tainted(
        policy("nic")
            .taint("example.com/nic", "broken", NoSchedule)
            .matcher([cond("NIC", "True").for_("15s")]),
    );
    post(&mut w, "False", "NICUp", at(0));
    assert!(carries(&w, at(2)));
    post(&mut w, "True", "NICDown", at(3));
    for t in [3, 10, 17, 18, 200] {
        assert!(carries(&w, at(t)), "taint lifted at {t} s");
    }
}

#[test]
fn an_untainted_node_still_waits_out_its_for_window() {
    let mut w = World::new()
        .policy(
            policy("nic")
                .taint("example.com/nic", "broken", NoSchedule)
                .matcher([cond("NIC", "True").for_("15s")]),
        )
        .node(node("n1"));
    post(&mut w, "True", "NICDown", at(0));
    assert!(!carries(&w, at(14)));
    assert_eq!(w.plan_at(at(14)).next_check, Some(at(15)));
    assert!(carries(&w, at(15)));
}

#[test]
fn every_restart_gap_shorter_than_clear_after_leaves_no_moment_without_the_taint() {
    for gap in [1, 5, 30, 59, 119] {
        let mut w = tainted(nic_policy());
        post(&mut w, "False", "NICUp", at(0));
        for t in 0..gap {
            assert!(carries(&w, at(t)), "gap {gap}: lifted at {t} s");
        }
        post(&mut w, "True", "NICDown", at(gap));
        for t in gap..gap + 5 {
            assert!(carries(&w, at(t)), "gap {gap}: lifted at {t} s");
        }
    }
}

#[test]
fn a_missing_condition_gives_no_time_to_count_from_so_the_taint_comes_off() {
    let mut w = tainted(nic_policy());
    w.node_mut("n1")
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()
        .retain(|c| c.type_ != "NIC");
    assert_eq!(
        w.plan_at(at(0)).node("n1").removed_list(),
        ["example.com/nic:NoSchedule"]
    );
}

#[test]
fn a_node_that_never_carried_the_taint_is_not_tainted_by_a_recent_recovery() {
    let mut w = World::new().policy(nic_policy()).node(node("n1"));
    post(&mut w, "False", "NICUp", at(0));
    assert!(!carries(&w, at(1)));
    assert_eq!(w.plan_at(at(1)).next_check, None);
}

#[test]
fn clearing_adds_nothing_and_starts_no_drain() {
    // The node drains (NoSchedule stand-in on) when its NIC recovers: the stand-in
    // stays, no switch to NoExecute and no drain start happen, and the policy's
    // second taint, not on the node, is not added.
    let p = policy("nic")
        .taint("example.com/nic", "broken", NoExecute)
        .taint("example.com/nic-extra", "broken", NoSchedule)
        .matcher([cond("NIC", "True")])
        .eviction(json!({"respectDisruptionBudgets": false}));
    let mut w = World::new().policy(p).node(
        node("n1")
            .owned_taint("example.com/nic", "broken", NoSchedule, "nic")
            .drain_started("nic", "2026-11-20T11:59:00Z"),
    );
    post(&mut w, "False", "NICUp", at(0));
    let plan = w.plan_evicted(at(5), true);
    let n1 = plan.node("n1");
    assert!(n1.is_noop(), "{n1:?}");
    assert_eq!(n1.taint_list(), ["example.com/nic=broken:NoSchedule"]);
    assert!(n1.drain_finished.is_empty() && n1.drain_started.is_empty());
    let later = w.plan_evicted(at(120), true);
    assert_eq!(
        later.node("n1").removed_list(),
        ["example.com/nic:NoSchedule"]
    );
}

#[test]
fn a_readiness_check_that_fails_again_taints_at_once() {
    let p = policy("ready")
        .taint("readiness.k8s.io/net", "", NoSchedule)
        .ready_when("NetReady", "True");
    let mut w = World::new()
        .policy(p)
        .node(node("n1").condition("NetReady", "True"));
    assert!(w.plan_at(at(0)).node("n1").is_noop());
    w.set_condition_at("n1", "NetReady", "False", at(1));
    assert_eq!(
        w.plan_at(at(1)).node("n1").added_list(),
        ["readiness.k8s.io/net=:NoSchedule"]
    );
}
