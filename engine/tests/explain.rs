//! `explain_node`: one test per thing on-call asks of a node, and a property that
//! the action it reports is the one the plan takes.

mod support;

use proptest::prelude::*;
use support::*;
use taint_operator_crd::SelectorOperator;
use taint_operator_engine::{
    cluster::{NodeView, PodIndex},
    explain::{Action, Explanation, PolicyExplanation, explain_node},
    node_plan::UnknownPolicies,
};

const KEY: &str = "example.com/broken";

fn explain(w: &World, node: &str) -> Explanation {
    explain_at(w, node, now())
}

fn explain_at(w: &World, node: &str, at: k8s_openapi::jiff::Timestamp) -> Explanation {
    let views = w.views();
    let n = views.iter().position(|v| v.name == node).expect("the node");
    explain_node(
        &w.set(),
        &views,
        n,
        &PodIndex::from_pods(&w.pods),
        at,
        UnknownPolicies::Remove,
        &Default::default(),
    )
}

fn policy_of<'e>(e: &'e Explanation, name: &str) -> &'e PolicyExplanation {
    e.policies
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no policy {name} in {e:#?}"))
}

fn nic(name: &str) -> PolicyBuilder {
    policy(name)
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput|Ruined").reason("Dead.*")])
}

#[test]
fn a_matched_node_is_explained_by_its_condition_and_gets_the_taint() {
    let w = World::new()
        .policy(nic("p"))
        .node(node("n1").condition_reason("NIC", "Kaput", "DeadLink"));
    let e = explain(&w, "n1");
    let p = policy_of(&e, "p");
    assert!(p.selected && p.wants_taint);
    assert_eq!(p.action, Action::Add);
    assert_eq!(p.reasons, ["condition NIC=Kaput matched"]);
    let c = &p.matchers[0].conditions[0];
    assert_eq!(
        (
            c.type_.as_str(),
            c.want_status.as_str(),
            c.status.as_deref()
        ),
        ("NIC", "Kaput|Ruined", Some("Kaput"))
    );
    assert_eq!(c.want_reason.as_deref(), Some("Dead.*"));
    assert_eq!(c.reason.as_deref(), Some("DeadLink"));
    assert!(c.matches && p.matchers[0].matches);
    assert_eq!(c.state, "matches");
    assert_eq!(e.changes.len(), 1);
    assert_eq!(e.changes[0].taint, "example.com/broken=yes:NoSchedule");
    assert_eq!(e.changes[0].action, Action::Add);

    // Once the taint is there, nothing more to do, and it is listed as the policy's.
    let mut w = w;
    w.step();
    let e = explain(&w, "n1");
    assert_eq!(policy_of(&e, "p").action, Action::None);
    assert_eq!(policy_of(&e, "p").owns, ["example.com/broken:NoSchedule"]);
    assert_eq!(e.taints[0].owner.as_deref(), Some("p"));
    assert!(e.changes.is_empty());
}

#[test]
fn a_reason_that_differs_is_shown_as_such() {
    let w = World::new()
        .policy(nic("p"))
        .node(node("n1").condition_reason("NIC", "Kaput", "Unplugged"));
    let p = policy_of(&explain(&w, "n1"), "p").clone();
    assert_eq!(p.matchers[0].conditions[0].state, "differs");
    assert!(!p.wants_taint);
    assert_eq!(p.action, Action::None);
    assert_eq!(p.reasons, ["no matcher matches"]);
}

#[test]
fn a_running_for_window_says_how_long_and_when_the_taint_is_due() {
    let p = policy("p")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput").for_("30s")]);
    let w = World::new()
        .policy(p)
        .node(node("n1").condition_since("NIC", "Kaput", ago(12)));
    let e = explain(&w, "n1");
    let c = &policy_of(&e, "p").matchers[0].conditions[0];
    assert_eq!(c.state, "waiting");
    assert!(!c.matches);
    assert_eq!(c.for_.as_deref(), Some("30s"));
    assert_eq!(c.matched_for.as_deref(), Some("12s"));
    assert_eq!(
        c.taint_at.as_deref(),
        Some(plus(now(), 18).to_string().as_str())
    );
    assert_eq!(policy_of(&e, "p").action, Action::None);

    // At the end of the window the taint goes on.
    let e = explain_at(&w, "n1", plus(now(), 18));
    let p = policy_of(&e, "p");
    assert_eq!(p.matchers[0].conditions[0].state, "matches");
    assert_eq!(p.action, Action::Add);
}

#[test]
fn a_node_held_by_a_critical_pod_names_the_pods_found() {
    let p = policy("cni")
        .taint("example.com/not-ready", "", NoSchedule)
        .ready_when("NetworkReady", "True")
        .critical_pod("agent", "kube-system", match_labels(&[("app", "agent")]));
    let w = World::new()
        .policy(p)
        .node(node("n1").condition("NetworkReady", "True"))
        .pod(
            pod("kube-system", "agent-b")
                .label("app", "agent")
                .on("n1")
                .not_ready(),
        )
        .pod(
            pod("kube-system", "agent-a")
                .label("app", "agent")
                .on("n1")
                .terminating()
                .ready(),
        )
        .pod(
            pod("kube-system", "other")
                .label("app", "other")
                .on("n1")
                .not_ready(),
        )
        .pod(
            pod("kube-system", "agent-c")
                .label("app", "agent")
                .on("n2")
                .ready(),
        );
    let e = explain(&w, "n1");
    let p = policy_of(&e, "cni");
    assert!(p.wants_taint);
    assert_eq!(p.action, Action::Add);
    let r = p.readiness.as_ref().expect("readiness");
    assert!(!r.ready);
    assert!(r.conditions[0].ready);
    let cp = &r.critical_pods[0];
    assert_eq!(
        (cp.name.as_str(), cp.selector.as_str()),
        ("agent", "app=agent")
    );
    assert!(!cp.ready);
    let pods: Vec<(&str, bool)> = cp.pods.iter().map(|p| (p.name.as_str(), p.ready)).collect();
    // A terminating pod is not Ready, whatever it reports.
    assert_eq!(pods, [("agent-a", false), ("agent-b", false)]);
    assert_eq!(
        p.reasons,
        ["critical pod agent is not Ready (kube-system/agent-a)"]
    );
}

#[test]
fn a_conflict_names_the_older_policy_and_the_loser_does_nothing() {
    let w = World::new()
        .policy(nic("old").created("2026-01-01T00:00:00Z"))
        .policy(nic("new").created("2026-02-01T00:00:00Z"))
        .node(node("n1").condition_reason("NIC", "Kaput", "Dead"));
    let e = explain(&w, "n1");
    let new = policy_of(&e, "new");
    assert_eq!(new.conflict_with.as_deref(), Some("old"));
    assert_eq!(
        new.conflicts,
        ["example.com/broken:NoSchedule owned by old"]
    );
    assert_eq!(new.action, Action::None);
    assert!(new.wants_taint);
    let old = policy_of(&e, "old");
    assert_eq!(old.conflict_with, None);
    assert_eq!(old.action, Action::Add);
    // Oldest first.
    assert_eq!(e.policies[0].name, "old");
}

#[test]
fn a_foreign_taint_has_no_owner_and_is_left_alone() {
    let w = World::new().policy(nic("p")).node(
        node("n1")
            .condition_reason("NIC", "Kaput", "Dead")
            .taint(KEY, "theirs", NoSchedule)
            .taint("other.io/x", "1", NoExecute),
    );
    let e = explain(&w, "n1");
    assert!(e.taints.iter().all(|t| t.owner.is_none()), "{:?}", e.taints);
    assert_eq!(e.taints.len(), 2);
    let p = policy_of(&e, "p");
    assert!(p.wants_taint);
    assert_eq!(p.action, Action::None);
    assert!(e.changes.is_empty());
}

#[test]
fn a_node_the_selector_misses_says_which_term_fails() {
    let p = nic("p")
        .select("lifecycle", "spot")
        .selector(match_expression("zone", SelectorOperator::In, &["a"]));
    let w = World::new().policy(p).node(
        node("n1")
            .label("zone", "b")
            .condition_reason("NIC", "Kaput", "Dead"),
    );
    let p = policy_of(&explain(&w, "n1"), "p").clone();
    assert!(!p.selected && !p.wants_taint);
    assert!(
        p.not_selected_because
            .iter()
            .any(|t| t == "zone in (a) (node has zone=b)"),
        "{:?}",
        p.not_selected_because
    );
    assert_eq!(p.reasons, ["node is not selected"]);
}

#[test]
fn the_cap_holds_back_nodes_beyond_the_limit() {
    let mut w = World::new().policy(nic("p").max_tainted(1));
    for n in ["n1", "n2", "n3"] {
        w = w.node(node(n).condition_reason("NIC", "Kaput", "Dead"));
    }
    let first = policy_of(&explain(&w, "n1"), "p").clone();
    assert_eq!(first.action, Action::Add);
    let cap = first.cap.expect("a cap");
    assert_eq!((cap.limit, cap.selected_nodes, cap.held), (1, 3, false));
    let third = policy_of(&explain(&w, "n3"), "p").clone();
    assert_eq!(third.action, Action::Held);
    assert!(third.cap.expect("a cap").held);
}

#[test]
fn dry_run_bootstrap_and_removal_are_reported() {
    let dry = nic("dry").dry_run();
    let boot = policy("boot")
        .bootstrap_only()
        .taint("example.com/boot", "", NoSchedule)
        .ready_when("Ready", "True");
    let w = World::new().policy(dry).policy(boot).node(
        node("n1")
            .condition_reason("NIC", "Kaput", "Dead")
            .condition("Ready", "True")
            .bootstrapped("boot", "uid-boot", "2026-01-02T00:00:00Z")
            // Owned by a policy that no longer exists: the controller removes it.
            .owned_taint("gone.io/x", "1", NoSchedule, "gone"),
    );
    let e = explain(&w, "n1");
    let dry = policy_of(&e, "dry");
    assert!(dry.dry_run && dry.wants_taint);
    assert_eq!(dry.action, Action::None);
    let boot = policy_of(&e, "boot");
    assert_eq!(
        boot.bootstrap_completed_at.as_deref(),
        Some("2026-01-02T00:00:00Z")
    );
    assert_eq!(boot.reasons, ["bootstrap completed earlier"]);
    assert_eq!(e.changes.len(), 1);
    assert_eq!(e.changes[0].action, Action::Remove);
    assert_eq!(e.changes[0].policy, "gone");
    assert_eq!(e.taints[0].owner.as_deref(), Some("gone"));
}

#[test]
fn the_json_has_the_contract_members() {
    let w = World::new().policy(nic("p")).node(
        node("n1")
            .condition_reason("NIC", "Kaput", "Dead")
            .taint("f", "v", NoSchedule),
    );
    let json = serde_json::to_value(explain(&w, "n1")).unwrap();
    assert_eq!(json["node"], "n1");
    assert_eq!(json["taints"][0]["key"], "f");
    assert_eq!(json["taints"][0]["value"], "v");
    assert_eq!(json["taints"][0]["effect"], "NoSchedule");
    assert!(json["taints"][0]["owner"].is_null());
    let p = &json["policies"][0];
    assert_eq!(p["name"], "p");
    assert_eq!(p["selected"], true);
    assert_eq!(p["wantsTaint"], true);
    assert_eq!(p["action"], "add");
    assert_eq!(p["reasons"][0], "condition NIC=Kaput matched");
    assert!(p["conflictWith"].is_null());
    assert_eq!(p["matchers"][0]["conditions"][0]["type"], "NIC");
}

#[test]
fn a_drain_shows_its_step_zone_start_timeout_and_the_pods_in_the_way() {
    let w = World::new()
        .policy(
            policy("p")
                .taint(KEY, "yes", NoExecute)
                .matcher([cond("NIC", "Kaput")])
                .eviction(serde_json::json!({"drainTimeout": "10m"})),
        )
        .node(
            node("n1")
                .zone("a")
                .condition("NIC", "Kaput")
                .owned_taint(KEY, "yes", NoSchedule, "p")
                .drain_started("p", "2026-11-20T11:58:00Z"),
        );
    let views = w.views();
    let in_the_way: std::collections::BTreeMap<String, Vec<String>> =
        [("p".to_string(), vec!["web/web-1".to_string()])].into();
    let e = explain_node(
        &w.set(),
        &views,
        0,
        &PodIndex::new(),
        now(),
        UnknownPolicies::Remove,
        &in_the_way,
    );
    let p = policy_of(&e, "p");
    assert_eq!(p.action, Action::Draining);
    assert_eq!(p.action.as_str(), "draining");
    let d = p.drain.as_ref().expect("a drain");
    assert_eq!((d.step, d.zone.as_str()), ("draining", "a"));
    assert_eq!(d.started_at.as_deref(), Some("2026-11-20T11:58:00Z"));
    assert_eq!(d.timeout_at.as_deref(), Some("2026-11-20T12:08:00Z"));
    assert_eq!(
        d.waiting_for.as_deref(),
        Some("1 pod(s) in the way to be evicted")
    );
    assert_eq!(
        d.pods_in_the_way.as_deref(),
        Some(&["web/web-1".to_string()][..])
    );
    assert!(e.changes.is_empty());
    // The pods gone, the next write switches.
    let gone: std::collections::BTreeMap<String, Vec<String>> = [("p".to_string(), vec![])].into();
    let e = explain_node(
        &w.set(),
        &views,
        0,
        &PodIndex::new(),
        now(),
        UnknownPolicies::Remove,
        &gone,
    );
    let p = policy_of(&e, "p");
    assert_eq!(p.action, Action::Add);
    assert_eq!(p.drain.as_ref().unwrap().step, "switched");
    let changes: Vec<(&str, &str)> = e
        .changes
        .iter()
        .map(|c| (c.action.as_str(), c.taint.as_str()))
        .collect();
    assert_eq!(
        changes,
        [
            ("add", "example.com/broken=yes:NoExecute"),
            ("remove", "example.com/broken=yes:NoSchedule")
        ]
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The action `explain` reports for a policy is what the node's plan does with
    /// its taints, for every node of generated clusters.
    #[test]
    fn the_action_is_the_plans(
        statuses in proptest::collection::vec(prop_oneof!["Kaput", "Fine"], 1..6),
        cap in 0i32..4,
        ready in proptest::collection::vec(any::<bool>(), 1..6),
    ) {
        let mut w = World::new()
            .policy(nic("p").max_tainted(cap))
            .policy(
                policy("r")
                    .taint("example.com/r", "", NoSchedule)
                    .critical_pod("a", "ns", match_labels(&[("app", "a")])),
            );
        for (i, s) in statuses.iter().enumerate() {
            w = w.node(node(&format!("n{i}")).condition_reason("NIC", s, "Dead"));
            if let Some(&r) = ready.get(i) {
                let p = pod("ns", &format!("a{i}")).label("app", "a").on(&format!("n{i}"));
                w = w.pod(if r { p.ready() } else { p.not_ready() });
            }
        }
        let plan = w.plan();
        let views: Vec<NodeView> = w.views();
        for (n, np) in plan.nodes.iter().enumerate() {
            let e = explain(&w, &views[n].name);
            for p in &e.policies {
                let adds = np.added.iter().any(|c| c.policy == p.name);
                let removes = np.removed.iter().any(|c| c.policy == p.name);
                prop_assert_eq!(p.action == Action::Add, adds, "{:?}", p);
                prop_assert_eq!(p.action == Action::Remove, removes, "{:?}", p);
                prop_assert_eq!(p.action == Action::Held, np.held.contains(&p.name));
            }
        }
    }
}
