//! out-of-service only on a node that is down (shared/API.md): the operator never
//! adds `node.kubernetes.io/out-of-service`, whatever its value or effect, to a node
//! whose kubelet reports `Ready=True`; the node waits, and says so, until the node
//! lifecycle controller marks it `Unknown` or `False`.

mod support;

use serde_json::json;
use support::*;
use taint_operator_crd::TaintEffect;
use taint_operator_engine::{cluster_plan::Reason, out_of_service::WAITING};

const OOS: &str = "node.kubernetes.io/out-of-service";

fn spot_policy(effect: TaintEffect) -> PolicyBuilder {
    policy("spot")
        .taint(OOS, "nodeshutdown", effect)
        .matcher([cond("SpotInterruption", "True")])
}

/// A spot node with a preemption notice, its kubelet reporting `ready` (None: no
/// Ready condition at all).
fn noticed(ready: Option<&str>) -> NodeBuilder {
    let n = node("n1").condition("SpotInterruption", "True");
    match ready {
        Some(status) => n.condition("Ready", status),
        None => n,
    }
}

#[test]
fn a_running_node_waits_and_says_why() {
    for effect in [NoExecute, NoSchedule, PreferNoSchedule] {
        let w = World::new()
            .policy(spot_policy(effect))
            .node(noticed(Some("True")));
        let plan = w.plan();
        let n1 = plan.node("n1");
        assert!(n1.added.is_empty(), "{effect:?}: {n1:?}");
        assert!(n1.taints.iter().all(|t| t.key != OOS));
        assert_eq!(n1.awaiting_shutdown, ["spot"]);
        assert_eq!(
            n1.notes,
            [format!(
                "spot: condition SpotInterruption=True matched; {WAITING}"
            )]
        );
        let s = plan.summary("spot");
        assert_eq!((s.tainted_nodes, s.pending_nodes), (0, 1));
        assert_eq!(s.awaiting_shutdown_nodes, 1);
        assert_eq!(s.reason, Reason::AwaitingShutdown);
        assert!(!s.ready);
        assert!(s.message.contains("(n1)"), "{}", s.message);
    }
}

#[test]
fn a_node_that_is_down_gets_the_taint() {
    for ready in [Some("Unknown"), Some("False"), None] {
        let w = World::new()
            .policy(spot_policy(NoExecute))
            .node(noticed(ready));
        let plan = w.plan();
        assert_eq!(
            plan.node("n1").added_list(),
            ["node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"],
            "Ready {ready:?}"
        );
        assert!(plan.node("n1").awaiting_shutdown.is_empty());
        assert_eq!(plan.summary("spot").reason, Reason::Progressing);
    }
}

#[test]
fn the_node_going_down_is_what_lets_the_taint_on() {
    let mut w = World::new()
        .policy(spot_policy(NoExecute))
        .node(noticed(Some("True")));
    let plan = w.step();
    assert!(plan.node("n1").added.is_empty());
    w.set_condition("n1", "Ready", "Unknown");
    let plan = w.step();
    assert_eq!(plan.node("n1").added.len(), 1);
    // Back up with the notice still on: the taint stays (it is never added to a
    // running node, and this node is not added to; nothing lifts it either).
    w.set_condition("n1", "Ready", "True");
    let plan = w.plan();
    assert!(plan.node("n1").is_noop(), "{:?}", plan.node("n1"));
    assert!(
        plan.node("n1")
            .taint_list()
            .contains(&"node.kubernetes.io/out-of-service=nodeshutdown:NoExecute".to_string())
    );
}

#[test]
fn a_drain_does_not_put_its_stand_in_on_a_running_node_either() {
    let p = spot_policy(NoExecute).eviction(json!({}));
    let w = World::new().policy(p).node(noticed(Some("True")));
    let plan = w.plan_evicted(now(), true);
    let n1 = plan.node("n1");
    assert!(n1.added.is_empty(), "{n1:?}");
    assert!(n1.drain_started.is_empty());
    assert_eq!(n1.awaiting_shutdown, ["spot"]);
}

#[test]
fn the_policys_other_taints_go_on_while_out_of_service_waits() {
    let p = spot_policy(NoExecute).taint("example.com/preempted", "notice", NoSchedule);
    let w = World::new().policy(p).node(noticed(Some("True")));
    let plan = w.plan();
    assert_eq!(
        plan.node("n1").added_list(),
        ["example.com/preempted=notice:NoSchedule"]
    );
    assert_eq!(plan.node("n1").awaiting_shutdown, ["spot"]);
}

#[test]
fn other_taints_on_a_running_node_are_not_held() {
    let p = policy("nic")
        .taint("example.com/nic", "broken", NoExecute)
        .matcher([cond("SpotInterruption", "True")]);
    let w = World::new().policy(p).node(noticed(Some("True")));
    let plan = w.plan();
    assert_eq!(plan.node("n1").added.len(), 1);
    assert!(plan.node("n1").awaiting_shutdown.is_empty());
}

#[test]
fn a_dry_run_policy_is_not_reported_as_waiting() {
    let p = spot_policy(NoExecute).dry_run();
    let w = World::new().policy(p).node(noticed(Some("True")));
    let plan = w.plan();
    assert!(plan.node("n1").awaiting_shutdown.is_empty());
    assert_eq!(plan.summary("spot").reason, Reason::DryRun);
}
