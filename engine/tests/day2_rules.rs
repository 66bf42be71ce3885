//! Day-2 controls (shared/API.md, Suspend and Stale conditions): a suspended
//! policy freezes, a condition whose reporter stopped counts as `Unknown`, and the
//! operator looks again exactly when a condition goes stale.

mod support;

use support::*;
use taint_operator_engine::{cluster_plan::Reason, explain::Action};

const KEY: &str = "example.com/k";

fn nic() -> PolicyBuilder {
    policy("p")
        .taint(KEY, "v", NoSchedule)
        .matcher([cond("NIC", "Kaput")])
}

#[test]
fn a_suspended_policy_adds_and_removes_nothing_and_says_what_it_would_do() {
    let w = World::new()
        .policy(nic().suspended())
        .node(node("broken").condition("NIC", "Kaput"))
        .node(
            node("healed")
                .condition("NIC", "Fine")
                .owned_taint(KEY, "v", NoSchedule, "p"),
        );
    let plan = w.plan();
    assert!(plan.node("broken").is_noop() && plan.node("broken").taints.is_empty());
    assert!(plan.node("healed").is_noop());
    assert_eq!(
        plan.node("healed").taint_list(),
        ["example.com/k=v:NoSchedule"]
    );
    let s = plan.summary("p");
    assert_eq!(s.reason, Reason::Suspended);
    assert!(!s.ready);
    assert_eq!((s.selected_nodes, s.tainted_nodes), (2, 1));
    assert!(s.message.contains("would keep 1 of 2"), "{}", s.message);
}

#[test]
fn unsuspending_converges_at_once() {
    let mut w = World::new()
        .policy(nic())
        .node(node("broken").condition("NIC", "Kaput"));
    let plan = w.step();
    assert_eq!(
        plan.node("broken").added_list(),
        ["example.com/k=v:NoSchedule"]
    );
}

#[test]
fn deleting_a_suspended_policy_still_cleans_up() {
    let w = World::new().policy(nic().suspended().deleting()).node(
        node("n")
            .condition("NIC", "Kaput")
            .owned_taint(KEY, "v", NoSchedule, "p"),
    );
    let plan = w.plan();
    assert_eq!(plan.node("n").removed_list(), ["example.com/k:NoSchedule"]);
}

#[test]
fn explain_says_suspended() {
    let w = World::new()
        .policy(nic().suspended())
        .node(node("n").condition("NIC", "Kaput"));
    let views = w.views();
    let e = taint_operator_engine::explain::explain_node(
        &w.set(),
        &views,
        0,
        &taint_operator_engine::cluster::PodIndex::new(),
        now(),
        taint_operator_engine::node_plan::UnknownPolicies::Remove,
        &Default::default(),
    );
    assert_eq!(e.policies[0].action, Action::Suspended);
    assert!(e.policies[0].suspended);
}

/// A readiness policy wanting `NetReady=True`, which goes stale after 2 minutes.
fn net_ready() -> PolicyBuilder {
    policy("p")
        .taint(KEY, "v", NoSchedule)
        .ready_when_fresh("NetReady", "True", "2m")
}

#[test]
fn a_true_its_reporter_stopped_renewing_is_not_ready() {
    // Heartbeat 3 minutes ago: stale since 1 minute ago.
    let w = World::new()
        .policy(net_ready())
        .node(node("n").condition_seen("NetReady", "True", Some(ago(3600)), Some(ago(180))));
    let plan = w.plan();
    let n = plan.node("n");
    assert_eq!(n.added_list(), ["example.com/k=v:NoSchedule"]);
    assert_eq!(
        n.added[0].reason,
        format!(
            "readiness condition NetReady is Unknown (stale since {}) (want True)",
            ago(60)
        )
    );
}

#[test]
fn a_fresh_true_is_ready_and_the_operator_looks_again_when_it_goes_stale() {
    let w = World::new()
        .policy(net_ready())
        .node(node("n").condition_seen("NetReady", "True", Some(ago(3600)), Some(ago(30))));
    let plan = w.plan();
    assert!(plan.node("n").taints.is_empty());
    // 30 s ago + 2 min: in 90 s.
    assert_eq!(plan.next_check, Some(plus(now(), 90)));
    // Exactly then it is stale.
    let later = w.plan_at(plus(now(), 90));
    assert_eq!(later.node("n").added_list(), ["example.com/k=v:NoSchedule"]);
}

#[test]
fn without_a_heartbeat_the_last_transition_counts() {
    let w = World::new()
        .policy(net_ready())
        .node(node("n").condition_seen("NetReady", "True", Some(ago(600)), None));
    assert_eq!(
        w.plan().node("n").added_list(),
        ["example.com/k=v:NoSchedule"]
    );
    let fresh = World::new()
        .policy(net_ready())
        .node(node("n").condition_seen("NetReady", "True", Some(ago(60)), None));
    assert!(fresh.plan().node("n").taints.is_empty());
}

#[test]
fn a_matcher_on_unknown_matches_a_stale_condition_and_for_counts_from_going_stale() {
    let p = policy("p")
        .taint(KEY, "v", NoSchedule)
        .matcher([cond("DiskHealthy", "False|Unknown")
            .stale_after("2m")
            .for_("30s")]);
    // Heartbeat 2m20s ago: stale for 20 s, not yet the 30 s the matcher wants.
    let w = World::new()
        .policy(p.clone())
        .node(node("n").condition_seen("DiskHealthy", "True", Some(ago(3600)), Some(ago(140))));
    let plan = w.plan();
    assert!(plan.node("n").taints.is_empty());
    assert_eq!(plan.next_check, Some(plus(now(), 10)));
    // Heartbeat 2m40s ago: stale for 40 s.
    let w = World::new().policy(p).node(node("n").condition_seen(
        "DiskHealthy",
        "True",
        Some(ago(3600)),
        Some(ago(160)),
    ));
    let plan = w.plan();
    let n = plan.node("n");
    assert_eq!(n.added_list(), ["example.com/k=v:NoSchedule"]);
    assert_eq!(
        n.added[0].reason,
        format!(
            "condition DiskHealthy=Unknown (stale since {}) for 30s matched",
            ago(40)
        )
    );
}

#[test]
fn without_stale_after_an_old_heartbeat_changes_nothing() {
    let w = World::new()
        .policy(
            policy("p")
                .taint(KEY, "v", NoSchedule)
                .ready_when("NetReady", "True"),
        )
        .node(node("n").condition_seen("NetReady", "True", Some(ago(86_400)), Some(ago(86_400))));
    let plan = w.plan();
    assert!(plan.node("n").taints.is_empty());
    assert_eq!(plan.next_check, None);
}
