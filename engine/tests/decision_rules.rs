//! One small test per rule of the decision core (see /work/shared/API.md), named
//! after the rule. Each builds a tiny cluster with the fixtures in `support`,
//! plans it, and checks the plan, the summary, and (where it matters) that
//! applying the plan and planning again is quiet.

mod support;

use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::Time};
use support::*;
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, MANAGED_TAINTS_ANNOTATION, SelectorOperator, TaintPolicy,
};
use taint_operator_engine::{
    cluster::{NodeView, PodIndex},
    cluster_plan::Reason,
    decision::evaluate_node,
    node_plan::UnknownPolicies,
    policy::CompiledPolicy,
    policy_set::PolicySet,
};

const KEY: &str = "example.com/broken";
const ID: &str = "example.com/broken:NoSchedule";

/// A Continuous policy `p` that taints `example.com/broken=yes:NoSchedule` while
/// condition `NIC` is `Kaput`.
fn nic_policy() -> PolicyBuilder {
    policy("p")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput")])
}

/// Plans one node against some policies (no pods) and returns the node's plan.
fn plan_one(policies: Vec<PolicyBuilder>, n: NodeBuilder) -> Planned {
    let mut w = World::new().node(n);
    for p in policies {
        w = w.policy(p);
    }
    w.plan()
}

/// True when the single node of `plan` ends up with the policy's taint.
fn has_taint(plan: &Planned, node: &str, taint: &str) -> bool {
    plan.node(node).taint_list().iter().any(|t| t == taint)
}

fn assert_quiet_after_apply(mut w: World) {
    w.step();
    let again = w.plan();
    for (n, p) in w.nodes.iter().zip(&again.nodes) {
        assert!(
            p.is_noop(),
            "second plan of {} changes taints: {p:?}",
            p.node
        );
        assert!(
            !p.changes(&NodeView::from_node(n)),
            "second plan of {} changes annotations: {p:?}",
            p.node
        );
    }
}

// ---------------------------------------------------------------------------
// Matchers

#[test]
fn status_regex_is_anchored_true_does_not_match_not_true() {
    let p = || {
        policy("p")
            .taint(KEY, "yes", NoSchedule)
            .matcher([cond("C", "True")])
    };
    let plan = plan_one(vec![p()], node("n1").condition("C", "NotTrue"));
    assert!(plan.node("n1").taints.is_empty());
    let plan = plan_one(vec![p()], node("n1").condition("C", "Truely"));
    assert!(plan.node("n1").taints.is_empty());
    let plan = plan_one(vec![p()], node("n1").condition("C", "True"));
    assert_eq!(
        plan.node("n1").taint_list(),
        ["example.com/broken=yes:NoSchedule"]
    );
}

#[test]
fn status_regex_alternation_is_anchored_as_a_whole() {
    // `^Kaput|Ruined$` would match "Kaputt" and "NotRuined"; the whole-string rule must not.
    let p = || {
        policy("p")
            .taint(KEY, "yes", NoSchedule)
            .matcher([cond("NIC", "Kaput|Ruined")])
    };
    for status in ["Kaputt", "NotRuined", "kaput"] {
        let plan = plan_one(vec![p()], node("n1").condition("NIC", status));
        assert!(plan.node("n1").taints.is_empty(), "{status} must not match");
    }
    for status in ["Kaput", "Ruined"] {
        let plan = plan_one(vec![p()], node("n1").condition("NIC", status));
        assert_eq!(plan.node("n1").taints.len(), 1, "{status} must match");
    }
}

#[test]
fn reason_regex_is_anchored() {
    let p = || {
        policy("p")
            .taint(KEY, "yes", NoSchedule)
            .matcher([cond("NIC", "Kaput").reason("Preempt.*")])
    };
    let plan = plan_one(
        vec![p()],
        node("n1").condition_reason("NIC", "Kaput", "NotPreempted"),
    );
    assert!(plan.node("n1").taints.is_empty());
    let plan = plan_one(
        vec![p()],
        node("n1").condition_reason("NIC", "Kaput", "Preempted"),
    );
    assert_eq!(plan.node("n1").taints.len(), 1);
    // A condition without a reason has the empty reason, which `Preempt.*` does not match.
    let plan = plan_one(vec![p()], node("n1").condition("NIC", "Kaput"));
    assert!(plan.node("n1").taints.is_empty());
}

#[test]
fn reason_regex_must_match_as_well_as_status() {
    let p = policy("p")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput").reason("Preempted")]);
    let plan = plan_one(
        vec![p],
        node("n1").condition_reason("NIC", "Fine", "Preempted"),
    );
    assert!(plan.node("n1").taints.is_empty());
}

#[test]
fn matchers_are_ored() {
    let p = || {
        policy("p")
            .taint(KEY, "yes", NoSchedule)
            .matcher([cond("A", "True")])
            .matcher([cond("B", "True")])
    };
    for (a, b, want) in [
        ("True", "False", true),
        ("False", "True", true),
        ("True", "True", true),
        ("False", "False", false),
    ] {
        let plan = plan_one(vec![p()], node("n1").condition("A", a).condition("B", b));
        assert_eq!(
            !plan.node("n1").taints.is_empty(),
            want,
            "A={a} B={b}: {:?}",
            plan.node("n1")
        );
    }
}

#[test]
fn conditions_within_a_matcher_are_anded() {
    let p = || {
        policy("p")
            .taint(KEY, "yes", NoSchedule)
            .matcher([cond("A", "True"), cond("B", "True")])
    };
    for (a, b, want) in [
        ("True", "False", false),
        ("False", "True", false),
        ("True", "True", true),
        ("False", "False", false),
    ] {
        let plan = plan_one(vec![p()], node("n1").condition("A", a).condition("B", b));
        assert_eq!(!plan.node("n1").taints.is_empty(), want, "A={a} B={b}");
    }
    let plan = plan_one(vec![p()], node("n1").condition("A", "True"));
    assert!(plan.node("n1").taints.is_empty(), "B missing");
}

#[test]
fn missing_condition_never_matches() {
    // Not even a pattern that would match any status, including the empty one.
    let p = policy("p")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", ".*")]);
    let plan = plan_one(vec![p], node("n1").condition("Other", "Kaput"));
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(plan.summary("p").tainted_nodes, 0);
    assert_eq!(plan.next_check, None);
}

#[test]
fn match_reason_names_the_condition() {
    let plan = plan_one(vec![nic_policy()], node("n1").condition("NIC", "Kaput"));
    assert_eq!(plan.node("n1").added.len(), 1);
    assert_eq!(
        plan.node("n1").added[0].reason,
        "condition NIC=Kaput matched"
    );
    assert_eq!(plan.node("n1").added[0].policy, "p");
}

// ---------------------------------------------------------------------------
// `for` windows

fn for_policy() -> PolicyBuilder {
    policy("p")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput").for_("30s")])
}

#[test]
fn for_window_not_yet_elapsed_no_taint_and_next_check_at_its_end() {
    let since = ago(10);
    let plan = plan_one(
        vec![for_policy()],
        node("n1").condition_since("NIC", "Kaput", since),
    );
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(plan.summary("p").tainted_nodes, 0);
    assert_eq!(plan.next_check, Some(plus(since, 30)));
}

#[test]
fn for_window_elapsed_taints() {
    let plan = plan_one(
        vec![for_policy()],
        node("n1").condition_since("NIC", "Kaput", ago(31)),
    );
    assert_eq!(
        plan.node("n1").taint_list(),
        ["example.com/broken=yes:NoSchedule"]
    );
    assert_eq!(
        plan.node("n1").added[0].reason,
        "condition NIC=Kaput for 30s matched"
    );
    assert_eq!(plan.next_check, None);
}

#[test]
fn for_window_exactly_elapsed_taints() {
    let plan = plan_one(
        vec![for_policy()],
        node("n1").condition_since("NIC", "Kaput", ago(30)),
    );
    assert_eq!(plan.node("n1").taints.len(), 1);
    assert_eq!(plan.next_check, None);
}

#[test]
fn for_window_taints_when_planned_again_at_next_check() {
    let w = World::new()
        .policy(for_policy())
        .node(node("n1").condition_since("NIC", "Kaput", ago(10)));
    let first = w.plan();
    let at = first.next_check.expect("a window is running");
    assert!(w.plan_at(at).node("n1").taints.len() == 1);
}

#[test]
fn for_window_without_last_transition_time_never_matches() {
    let plan = plan_one(
        vec![for_policy()],
        node("n1").condition_full("NIC", "Kaput", None, None),
    );
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(plan.next_check, None);
}

#[test]
fn for_window_of_a_matcher_ends_when_its_last_window_ends() {
    // Both conditions must have lasted: the matcher matches at the later end.
    let p = policy("p")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("A", "True").for_("1m"), cond("B", "True").for_("30s")]);
    let plan = plan_one(
        vec![p],
        node("n1")
            .condition_since("A", "True", ago(10))
            .condition_since("B", "True", ago(5)),
    );
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(plan.next_check, Some(plus(ago(10), 60)));
}

#[test]
fn next_check_is_the_earliest_window_end_in_the_cluster() {
    let w = World::new()
        .policy(for_policy())
        .node(node("n1").condition_since("NIC", "Kaput", ago(5)))
        .node(node("n2").condition_since("NIC", "Kaput", ago(20)))
        .node(node("n3").condition_since("NIC", "Kaput", ago(60)));
    let plan = w.plan();
    assert_eq!(plan.next_check, Some(plus(ago(20), 30)));
    assert_eq!(plan.summary("p").tainted_node_names, ["n3"]);
}

#[test]
fn for_window_does_not_run_when_the_status_does_not_match() {
    let plan = plan_one(
        vec![for_policy()],
        node("n1").condition_since("NIC", "Fine", ago(5)),
    );
    assert_eq!(plan.next_check, None);
}

// ---------------------------------------------------------------------------
// Readiness

fn readiness_policy() -> PolicyBuilder {
    policy("r")
        .taint("example.com/not-ready", "yes", NoSchedule)
        .ready_when("example.net/NetworkReady", "True")
}

#[test]
fn readiness_missing_condition_is_not_ready() {
    let plan = plan_one(vec![readiness_policy()], node("n1"));
    assert_eq!(
        plan.node("n1").taint_list(),
        ["example.com/not-ready=yes:NoSchedule"]
    );
    assert!(
        plan.node("n1").added[0].reason.contains("missing"),
        "{:?}",
        plan.node("n1").added
    );
}

#[test]
fn readiness_condition_status_regex_is_anchored() {
    let plan = plan_one(
        vec![readiness_policy()],
        node("n1").condition("example.net/NetworkReady", "NotTrue"),
    );
    assert_eq!(plan.node("n1").taints.len(), 1);
    let plan = plan_one(
        vec![readiness_policy()],
        node("n1").condition("example.net/NetworkReady", "True"),
    );
    assert!(plan.node("n1").taints.is_empty());
}

#[test]
fn readiness_satisfied_removes_owned_taints() {
    let plan = plan_one(
        vec![readiness_policy()],
        node("n1")
            .condition("example.net/NetworkReady", "True")
            .owned_taint("example.com/not-ready", "yes", NoSchedule, "r"),
    );
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(
        plan.node("n1").removed_list(),
        ["example.com/not-ready:NoSchedule"]
    );
    assert!(plan.node("n1").managed.is_empty());
}

#[test]
fn readiness_needs_every_condition() {
    let p = readiness_policy().ready_when("Disk", "Ok|Good");
    let plan = plan_one(
        vec![p.clone()],
        node("n1").condition("example.net/NetworkReady", "True"),
    );
    assert_eq!(plan.node("n1").taints.len(), 1);
    let plan = plan_one(
        vec![p],
        node("n1")
            .condition("example.net/NetworkReady", "True")
            .condition("Disk", "Good"),
    );
    assert!(plan.node("n1").taints.is_empty());
}

fn cni_policy() -> PolicyBuilder {
    policy("cni")
        .taint("example.com/cni-not-ready", "yes", NoSchedule)
        .critical_pod(
            "istio-cni",
            "kube-system",
            match_labels(&[("app", "istio")]),
        )
}

fn cni_tainted(pods: Vec<PodBuilder>) -> bool {
    let mut w = World::new()
        .policy(cni_policy())
        .node(node("n1"))
        .node(node("n2"));
    for p in pods {
        w = w.pod(p);
    }
    let plan = w.plan();
    has_taint(&plan, "n1", "example.com/cni-not-ready=yes:NoSchedule")
}

fn istio() -> PodBuilder {
    pod("kube-system", "istio-cni-abc").label("app", "istio")
}

#[test]
fn critical_pod_missing_holds_taints() {
    assert!(cni_tainted(vec![]));
}

#[test]
fn critical_pod_ready_condition_true_counts() {
    assert!(!cni_tainted(vec![istio().on("n1").ready()]));
}

#[test]
fn critical_pod_ready_annotation_counts() {
    assert!(!cni_tainted(vec![
        istio().on("n1").not_ready().ready_annotation("true")
    ]));
}

#[test]
fn critical_pod_ready_annotation_other_than_true_does_not_count() {
    assert!(cni_tainted(vec![
        istio().on("n1").not_ready().ready_annotation("yes")
    ]));
}

#[test]
fn a_terminating_critical_pod_does_not_count_whatever_it_reports() {
    assert!(cni_tainted(vec![istio().on("n1").ready().terminating()]));
    assert!(cni_tainted(vec![
        istio().on("n1").ready_annotation("true").terminating()
    ]));
    // Its replacement, Ready, counts again.
    assert!(!cni_tainted(vec![
        istio().on("n1").ready().terminating(),
        pod("kube-system", "istio-cni-new")
            .label("app", "istio")
            .on("n1")
            .ready(),
    ]));
}

#[test]
fn critical_pod_not_ready_does_not_count() {
    assert!(cni_tainted(vec![istio().on("n1").not_ready()]));
    assert!(
        cni_tainted(vec![istio().on("n1")]),
        "no Ready condition at all"
    );
}

#[test]
fn critical_pod_not_ready_reason_names_the_pod() {
    let w = World::new()
        .policy(cni_policy())
        .node(node("n1"))
        .pod(istio().on("n1").not_ready());
    let plan = w.plan();
    assert_eq!(
        plan.node("n1").added[0].reason,
        "critical pod istio-cni is not Ready (kube-system/istio-cni-abc)"
    );
}

#[test]
fn critical_pod_in_other_namespace_does_not_count() {
    assert!(cni_tainted(vec![
        pod("default", "istio-cni-abc")
            .label("app", "istio")
            .on("n1")
            .ready()
    ]));
}

#[test]
fn critical_pod_with_non_matching_labels_does_not_count() {
    assert!(cni_tainted(vec![
        pod("kube-system", "other")
            .label("app", "other")
            .on("n1")
            .ready()
    ]));
}

#[test]
fn critical_pod_on_other_node_does_not_count() {
    assert!(cni_tainted(vec![istio().on("n2").ready()]));
}

#[test]
fn critical_pod_unbound_does_not_count() {
    assert!(cni_tainted(vec![istio().ready().ready_annotation("true")]));
}

#[test]
fn critical_pod_succeeded_or_failed_does_not_count() {
    for phase in ["Succeeded", "Failed"] {
        assert!(
            cni_tainted(vec![
                istio()
                    .on("n1")
                    .ready()
                    .ready_annotation("true")
                    .phase(phase)
            ]),
            "{phase}"
        );
    }
    assert!(!cni_tainted(vec![
        istio().on("n1").ready().phase("Running")
    ]));
}

#[test]
fn critical_pod_any_ready_pod_among_several_counts() {
    assert!(!cni_tainted(vec![
        istio().on("n1").not_ready(),
        pod("kube-system", "istio-cni-def")
            .label("app", "istio")
            .on("n1")
            .ready(),
    ]));
}

#[test]
fn critical_pods_each_need_their_own_ready_pod() {
    let p = cni_policy().critical_pod("dns", "kube-system", match_labels(&[("app", "dns")]));
    let w = World::new()
        .policy(p.clone())
        .node(node("n1"))
        .pod(istio().on("n1").ready());
    assert_eq!(w.plan().node("n1").taints.len(), 1);
    let w = w.pod(
        pod("kube-system", "dns-1")
            .label("app", "dns")
            .on("n1")
            .ready(),
    );
    assert!(w.plan().node("n1").taints.is_empty());
}

#[test]
fn pod_index_keeps_one_entry_per_pod_and_forgets_removed_pods() {
    let mut index = PodIndex::from_pods(&[istio().on("n1").not_ready().build()]);
    index.insert(
        "n1",
        "kube-system",
        taint_operator_engine::cluster::PodView::from_pod(&istio().on("n1").ready().build()),
    );
    assert_eq!(index.pods("n1", "kube-system").len(), 1);
    assert!(index.pods("n1", "kube-system")[0].ready);
    index.remove("n1", "kube-system", "istio-cni-abc");
    assert!(index.pods("n1", "kube-system").is_empty());
}

#[test]
fn readiness_and_matchers_taint_while_either_says_so() {
    let p = || readiness_policy().matcher([cond("NIC", "Kaput")]);
    let ready = || node("n1").condition("example.net/NetworkReady", "True");
    assert!(plan_one(vec![p()], ready()).node("n1").taints.is_empty());
    assert_eq!(
        plan_one(vec![p()], ready().condition("NIC", "Kaput"))
            .node("n1")
            .taints
            .len(),
        1
    );
    assert_eq!(plan_one(vec![p()], node("n1")).node("n1").taints.len(), 1);
}

// ---------------------------------------------------------------------------
// nodeSelector

fn selected(selector: support::PolicyBuilder, n: NodeBuilder) -> bool {
    let plan = plan_one(vec![selector], n);
    plan.summary("p").selected_nodes == 1
}

#[test]
fn node_selector_absent_or_empty_selects_every_node() {
    assert!(selected(nic_policy(), node("n1")));
    assert!(selected(
        nic_policy().selector(match_labels(&[])),
        node("n1").label("a", "b")
    ));
}

#[test]
fn node_selector_match_labels() {
    let p = || nic_policy().selector(match_labels(&[("lifecycle", "spot"), ("zone", "a")]));
    assert!(selected(
        p(),
        node("n1")
            .label("lifecycle", "spot")
            .label("zone", "a")
            .label("x", "y")
    ));
    assert!(!selected(p(), node("n1").label("lifecycle", "spot")));
    assert!(!selected(
        p(),
        node("n1")
            .label("lifecycle", "on-demand")
            .label("zone", "a")
    ));
}

#[test]
fn node_selector_in() {
    let p = || nic_policy().selector(match_expression("zone", SelectorOperator::In, &["a", "b"]));
    assert!(selected(p(), node("n1").label("zone", "b")));
    assert!(!selected(p(), node("n1").label("zone", "c")));
    assert!(!selected(p(), node("n1")));
}

#[test]
fn node_selector_not_in() {
    let p = || nic_policy().selector(match_expression("zone", SelectorOperator::NotIn, &["a"]));
    assert!(selected(p(), node("n1").label("zone", "b")));
    assert!(
        selected(p(), node("n1")),
        "a missing label is not in the set"
    );
    assert!(!selected(p(), node("n1").label("zone", "a")));
}

#[test]
fn node_selector_exists() {
    let p = || nic_policy().selector(match_expression("gpu", SelectorOperator::Exists, &[]));
    assert!(selected(p(), node("n1").label("gpu", "")));
    assert!(!selected(p(), node("n1").label("cpu", "")));
}

#[test]
fn node_selector_does_not_exist() {
    let p = || {
        nic_policy().selector(match_expression(
            "node-role.kubernetes.io/control-plane",
            SelectorOperator::DoesNotExist,
            &[],
        ))
    };
    assert!(selected(p(), node("n1").label("worker", "")));
    assert!(!selected(
        p(),
        node("n1").label("node-role.kubernetes.io/control-plane", "")
    ));
}

#[test]
fn unselected_node_is_never_tainted() {
    let p = nic_policy().selector(match_labels(&[("lifecycle", "spot")]));
    let plan = plan_one(vec![p], node("n1").condition("NIC", "Kaput"));
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(plan.summary("p").selected_nodes, 0);
}

#[test]
fn unselected_node_loses_owned_taints() {
    // The node was relabeled out of the policy while its condition still matches.
    let p = nic_policy().selector(match_labels(&[("lifecycle", "spot")]));
    let w = World::new().policy(p).node(
        node("n1")
            .label("lifecycle", "on-demand")
            .condition("NIC", "Kaput")
            .owned_taint(KEY, "yes", NoSchedule, "p")
            .taint("admin", "x", NoSchedule),
    );
    let plan = w.plan();
    assert_eq!(plan.node("n1").removed_list(), [ID]);
    assert_eq!(plan.node("n1").removed[0].reason, "node is not selected");
    assert_eq!(plan.node("n1").taint_list(), ["admin=x:NoSchedule"]);
    assert!(plan.node("n1").managed.is_empty());
    assert_quiet_after_apply(w);
}

// ---------------------------------------------------------------------------
// Modes

fn bootstrap_policy() -> PolicyBuilder {
    policy("boot")
        .taint("example.com/bootstrapping", "yes", NoSchedule)
        .ready_when("example.net/NetworkReady", "True")
        .bootstrap_only()
}

#[test]
fn continuous_taints_again_when_readiness_is_lost() {
    let mut w = World::new()
        .policy(readiness_policy())
        .node(node("n1").condition("example.net/NetworkReady", "True"));
    assert!(w.step().node("n1").taints.is_empty());
    w.set_condition("n1", "example.net/NetworkReady", "False");
    assert_eq!(w.step().node("n1").taints.len(), 1);
}

#[test]
fn bootstrap_only_holds_taints_until_ready_and_records_nothing() {
    let plan = plan_one(vec![bootstrap_policy()], node("n1"));
    assert_eq!(
        plan.node("n1").taint_list(),
        ["example.com/bootstrapping=yes:NoSchedule"]
    );
    assert!(plan.node("n1").bootstrapped.0.is_empty());
    assert!(plan.node("n1").completed.is_empty());
}

#[test]
fn bootstrap_only_records_completion_in_the_plan_that_removes_the_taints() {
    let mut w = World::new().policy(bootstrap_policy()).node(
        node("n1")
            .condition("example.net/NetworkReady", "True")
            .owned_taint("example.com/bootstrapping", "yes", NoSchedule, "boot"),
    );
    let plan = w.step();
    let np = plan.node("n1");
    assert_eq!(np.removed_list(), ["example.com/bootstrapping:NoSchedule"]);
    assert!(np.removed[0].reason.contains("bootstrap complete"));
    assert_eq!(np.completed, ["boot"]);
    let n1 = w.node_named("n1");
    assert_eq!(
        annotation(n1, BOOTSTRAPPED_ANNOTATION),
        Some(r#"{"boot":"uid-boot@2026-11-20T12:00:00Z"}"#)
    );
    assert_eq!(annotation(n1, MANAGED_TAINTS_ANNOTATION), None);
    assert!(n1.spec.as_ref().unwrap().taints.is_none());
}

#[test]
fn bootstrap_only_completion_with_same_uid_never_taints_again() {
    let p = bootstrap_policy().matcher([cond("NIC", "Kaput")]);
    let w = World::new()
        .policy(p)
        .node(node("n1").condition("NIC", "Kaput").bootstrapped(
            "boot",
            "uid-boot",
            "2026-11-19T00:00:00Z",
        ));
    let plan = w.plan();
    let np = plan.node("n1");
    assert!(np.taints.is_empty(), "{np:?}");
    assert!(!np.changes(&w.views()[0]));
    assert_eq!(plan.summary("boot").tainted_nodes, 0);
    assert_eq!(plan.summary("boot").selected_nodes, 1);
}

#[test]
fn bootstrap_only_completion_removes_taints_still_owned() {
    // Completed earlier, but the taint is back (e.g. restored from a backup): it goes.
    let w = World::new().policy(bootstrap_policy()).node(
        node("n1")
            .owned_taint("example.com/bootstrapping", "yes", NoSchedule, "boot")
            .bootstrapped("boot", "uid-boot", "2026-11-19T00:00:00Z"),
    );
    let plan = w.plan();
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(plan.node("n1").removed.len(), 1);
}

#[test]
fn bootstrap_only_completion_with_other_uid_is_reevaluated() {
    let n = || node("n1").bootstrapped("boot", "uid-old", "2026-11-19T00:00:00Z");
    let plan = plan_one(vec![bootstrap_policy()], n());
    assert_eq!(plan.node("n1").taints.len(), 1, "not ready: tainted again");

    let plan = plan_one(
        vec![bootstrap_policy()],
        n().condition("example.net/NetworkReady", "True"),
    );
    let np = plan.node("n1");
    assert!(np.taints.is_empty());
    assert_eq!(np.completed, ["boot"]);
    assert_eq!(
        np.bootstrapped.to_annotation().as_deref(),
        Some(r#"{"boot":"uid-boot@2026-11-20T12:00:00Z"}"#)
    );
}

#[test]
fn bootstrap_only_with_a_matching_matcher_does_not_complete() {
    let p = bootstrap_policy().matcher([cond("NIC", "Kaput")]);
    let plan = plan_one(
        vec![p],
        node("n1")
            .condition("example.net/NetworkReady", "True")
            .condition("NIC", "Kaput"),
    );
    assert_eq!(plan.node("n1").taints.len(), 1);
    assert!(plan.node("n1").bootstrapped.0.is_empty());
}

#[test]
fn bootstrap_only_steady_state_is_quiet() {
    let w = World::new()
        .policy(bootstrap_policy())
        .node(node("n1").condition("example.net/NetworkReady", "True"))
        .node(node("n2"));
    assert_quiet_after_apply(w);
}

#[test]
fn deleting_policy_removes_its_bootstrap_entries() {
    let w = World::new().policy(bootstrap_policy().deleting()).node(
        node("n1")
            .bootstrapped("boot", "uid-boot", "2026-11-19T00:00:00Z")
            .bootstrapped("other", "uid-other", "2026-11-19T00:00:00Z"),
    );
    // `other` is unknown: kept only when unknown policies are kept.
    let plan = w.plan_with(now(), UnknownPolicies::Keep);
    assert_eq!(
        plan.node("n1").bootstrapped.to_annotation().as_deref(),
        Some(r#"{"other":"uid-other@2026-11-19T00:00:00Z"}"#)
    );
    let plan = w.plan_with(now(), UnknownPolicies::Remove);
    assert!(plan.node("n1").bootstrapped.0.is_empty());
}

#[test]
fn bootstrap_entries_of_live_policies_are_kept_in_any_mode() {
    let w = World::new()
        .policy(nic_policy())
        .node(node("n1").bootstrapped("p", "uid-p", "2026-11-19T00:00:00Z"));
    let plan = w.plan();
    assert_eq!(plan.node("n1").bootstrapped.0.len(), 1);
}

// ---------------------------------------------------------------------------
// Ownership

#[test]
fn foreign_identical_taint_is_not_adopted_when_the_policy_wants_it() {
    let w = World::new().policy(nic_policy()).node(
        node("n1")
            .condition("NIC", "Kaput")
            .taint(KEY, "yes", NoSchedule),
    );
    let plan = w.plan();
    let np = plan.node("n1");
    assert!(np.is_noop());
    assert_eq!(np.taint_list(), ["example.com/broken=yes:NoSchedule"]);
    assert!(np.managed.is_empty(), "ownership must not be written");
    assert!(!np.changes(&w.views()[0]));
}

#[test]
fn foreign_taint_with_other_value_is_not_overwritten() {
    let w = World::new()
        .policy(nic_policy())
        .node(
            node("n1")
                .condition("NIC", "Kaput")
                .taint(KEY, "admin-set", NoSchedule),
        );
    let plan = w.plan();
    let np = plan.node("n1");
    assert!(np.is_noop());
    assert_eq!(np.taint_list(), ["example.com/broken=admin-set:NoSchedule"]);
    assert!(np.managed.is_empty());
    assert!(
        np.notes.iter().any(|n| n.contains("someone else")),
        "{:?}",
        np.notes
    );
}

#[test]
fn foreign_taint_is_not_removed_when_the_policy_does_not_want_it() {
    let w = World::new().policy(nic_policy()).node(
        node("n1")
            .condition("NIC", "Fine")
            .taint(KEY, "yes", NoSchedule),
    );
    let plan = w.plan();
    assert!(plan.node("n1").is_noop());
    assert_eq!(plan.node("n1").taints.len(), 1);
    assert!(!plan.node("n1").changes(&w.views()[0]));
}

#[test]
fn foreign_taint_is_not_removed_from_an_unselected_node() {
    let p = nic_policy().selector(match_labels(&[("lifecycle", "spot")]));
    let plan = plan_one(vec![p], node("n1").taint(KEY, "yes", NoSchedule));
    assert!(plan.node("n1").is_noop());
    assert_eq!(plan.node("n1").taints.len(), 1);
}

#[test]
fn foreign_taint_survives_policy_deletion_and_unknown_cleanup() {
    let w = World::new()
        .policy(nic_policy().deleting())
        .node(node("n1").taint(KEY, "yes", NoSchedule))
        .node(node("n2").taint("example.com/other", "x", NoExecute));
    let plan = w.plan();
    assert!(
        plan.nodes
            .iter()
            .all(|n| n.is_noop() && n.taints.len() == 1)
    );
}

#[test]
fn same_key_with_another_effect_is_another_taint() {
    // A foreign NoExecute taint with the policy's key does not stop its NoSchedule taint.
    let w = World::new().policy(nic_policy()).node(
        node("n1")
            .condition("NIC", "Kaput")
            .taint(KEY, "yes", NoExecute),
    );
    let plan = w.plan();
    assert_eq!(
        plan.node("n1").taint_list(),
        [
            "example.com/broken=yes:NoExecute",
            "example.com/broken=yes:NoSchedule"
        ]
    );
    assert_eq!(plan.node("n1").managed_list(), owned(&[(ID, "p")]));
}

#[test]
fn added_taint_is_recorded_as_owned() {
    let plan = plan_one(vec![nic_policy()], node("n1").condition("NIC", "Kaput"));
    assert_eq!(plan.node("n1").managed_list(), owned(&[(ID, "p")]));
}

#[test]
fn owned_taint_removed_by_someone_is_added_again_while_wanted() {
    let plan = plan_one(
        vec![nic_policy()],
        node("n1")
            .condition("NIC", "Kaput")
            .managed(KEY, NoSchedule, "p"),
    );
    assert_eq!(
        plan.node("n1").added_list(),
        ["example.com/broken=yes:NoSchedule"]
    );
    assert_eq!(plan.node("n1").managed_list(), owned(&[(ID, "p")]));
}

#[test]
fn stale_ownership_entry_does_not_adopt_a_later_foreign_taint() {
    // The operator's taint was removed by hand while the policy was in dry run (so it
    // froze what it owned); an admin then put their own taint with the same key+effect.
    // When the policy goes live and does not want the taint, the admin's taint stays.
    let mut w = World::new().policy(nic_policy().dry_run()).node(
        node("n1")
            .condition("NIC", "Fine")
            .managed(KEY, NoSchedule, "p"),
    );
    w.step();
    let n1 = w.node_named("n1").clone();
    let mut taints = n1.spec.clone().unwrap().taints.unwrap_or_default();
    taints.push(k8s_openapi::api::core::v1::Taint {
        key: KEY.into(),
        value: Some("admin".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    });
    w.node_mut("n1").spec.as_mut().unwrap().taints = Some(taints);
    w.policies = vec![nic_policy().build()];
    let plan = w.plan();
    assert!(plan.node("n1").is_noop(), "{:?}", plan.node("n1"));
    assert_eq!(
        plan.node("n1").taint_list(),
        ["example.com/broken=admin:NoSchedule"]
    );
}

#[test]
fn malformed_ownership_annotation_owns_nothing() {
    let w = World::new().policy(nic_policy()).node(
        node("n1")
            .condition("NIC", "Fine")
            .taint(KEY, "yes", NoSchedule)
            .annotation(MANAGED_TAINTS_ANNOTATION, "not json"),
    );
    let plan = w.plan();
    assert!(plan.node("n1").is_noop());
    assert_eq!(plan.node("n1").taints.len(), 1);
}

// ---------------------------------------------------------------------------
// Conflicts

fn older_and_newer(older: &str, newer: &str, same_time: bool) -> (PolicyBuilder, PolicyBuilder) {
    let a = policy(older)
        .created("2026-01-01T00:00:00Z")
        .taint(KEY, "older", NoSchedule)
        .matcher([cond("A", "True")]);
    let b = policy(newer)
        .created(if same_time {
            "2026-01-01T00:00:00Z"
        } else {
            "2026-02-01T00:00:00Z"
        })
        .taint(KEY, "newer", NoSchedule)
        .matcher([cond("B", "True")]);
    (a, b)
}

#[test]
fn conflict_older_policy_by_creation_timestamp_wins() {
    // `z-old` sorts after `a-new` by name, but is older.
    let (old, new) = older_and_newer("z-old", "a-new", false);
    let plan = World::new()
        .policy(new)
        .policy(old)
        .node(node("n1").condition("A", "True").condition("B", "True"))
        .plan();
    assert_eq!(
        plan.node("n1").taint_list(),
        ["example.com/broken=older:NoSchedule"]
    );
    assert_eq!(plan.node("n1").managed_list(), owned(&[(ID, "z-old")]));
    assert_eq!(plan.summary("z-old").reason, Reason::Progressing);
    assert_eq!(plan.summary("a-new").reason, Reason::Conflict);
    assert!(!plan.summary("a-new").ready);
    assert!(
        plan.summary("a-new").message.contains("z-old"),
        "{}",
        plan.summary("a-new").message
    );
    assert_eq!(plan.policies[0].name, "z-old", "oldest first");
}

#[test]
fn conflict_same_creation_timestamp_name_breaks_the_tie() {
    let (a, b) = older_and_newer("alpha", "beta", true);
    let plan = World::new()
        .policy(b)
        .policy(a)
        .node(node("n1").condition("B", "True"))
        .plan();
    // Only `beta` wants the taint, but `alpha` owns it: nothing is added.
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(plan.summary("beta").reason, Reason::Conflict);
    assert_eq!(plan.summary("alpha").reason, Reason::Reconciled);
}

#[test]
fn conflict_loser_does_not_touch_the_taint() {
    let (old, new) = older_and_newer("old", "new", false);
    // The winner wants the taint: the loser's value is never written.
    let plan = World::new()
        .policy(old.clone())
        .policy(new.clone())
        .node(
            node("n1")
                .condition("A", "True")
                .condition("B", "False")
                .owned_taint(KEY, "older", NoSchedule, "old"),
        )
        .plan();
    assert!(plan.node("n1").is_noop());
    assert_eq!(plan.node("n1").managed_list(), owned(&[(ID, "old")]));

    // The loser wants it and the winner does not: not added.
    let plan = World::new()
        .policy(old)
        .policy(new)
        .node(node("n1").condition("A", "False").condition("B", "True"))
        .plan();
    assert!(plan.node("n1").taints.is_empty());
    assert!(plan.node("n1").managed.is_empty());
}

#[test]
fn conflict_loser_still_applies_its_other_taints() {
    let (old, new) = older_and_newer("old", "new", false);
    let new = new.taint("example.com/own", "x", PreferNoSchedule);
    let plan = World::new()
        .policy(old)
        .policy(new)
        .node(node("n1").condition("B", "True"))
        .plan();
    assert_eq!(
        plan.node("n1").taint_list(),
        ["example.com/own=x:PreferNoSchedule"]
    );
    assert_eq!(
        plan.node("n1").managed_list(),
        owned(&[("example.com/own:PreferNoSchedule", "new")])
    );
    assert_eq!(plan.summary("new").reason, Reason::Conflict);
}

#[test]
fn conflict_winner_being_deleted_hands_the_taint_over() {
    let (old, new) = older_and_newer("old", "new", false);
    let w = World::new().policy(old.deleting()).policy(new).node(
        node("n1")
            .condition("A", "True")
            .condition("B", "True")
            .owned_taint(KEY, "older", NoSchedule, "old"),
    );
    let plan = w.plan();
    assert_eq!(
        plan.node("n1").taint_list(),
        ["example.com/broken=newer:NoSchedule"]
    );
    assert_eq!(plan.node("n1").managed_list(), owned(&[(ID, "new")]));
    assert_eq!(plan.summary("new").reason, Reason::Progressing);
    assert_quiet_after_apply(w);
}

// ---------------------------------------------------------------------------
// Spec edits

#[test]
fn spec_edit_taint_key_changed_moves_the_node_to_the_new_taint() {
    let p = policy("p")
        .taint("example.com/renamed", "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput")]);
    let w = World::new().policy(p).node(
        node("n1")
            .condition("NIC", "Kaput")
            .owned_taint(KEY, "yes", NoSchedule, "p"),
    );
    let plan = w.plan();
    let np = plan.node("n1");
    assert_eq!(np.removed_list(), [ID]);
    assert_eq!(np.added_list(), ["example.com/renamed=yes:NoSchedule"]);
    assert_eq!(np.taint_list(), ["example.com/renamed=yes:NoSchedule"]);
    assert_eq!(
        np.managed_list(),
        owned(&[("example.com/renamed:NoSchedule", "p")])
    );
    assert_quiet_after_apply(w);
}

#[test]
fn spec_edit_taint_effect_changed_moves_the_node_to_the_new_taint() {
    let p = policy("p")
        .taint(KEY, "yes", PreferNoSchedule)
        .matcher([cond("NIC", "Kaput")]);
    let plan = plan_one(
        vec![p],
        node("n1")
            .condition("NIC", "Kaput")
            .owned_taint(KEY, "yes", NoSchedule, "p"),
    );
    assert_eq!(
        plan.node("n1").taint_list(),
        ["example.com/broken=yes:PreferNoSchedule"]
    );
    assert_eq!(plan.node("n1").removed_list(), [ID]);
}

#[test]
fn spec_edit_value_change_updates_the_owned_taint() {
    let p = policy("p")
        .taint(KEY, "v2", NoSchedule)
        .matcher([cond("NIC", "Kaput")]);
    let w = World::new().policy(p).node(
        node("n1")
            .condition("NIC", "Kaput")
            .taint("first", "x", NoSchedule)
            .owned_taint(KEY, "v1", NoSchedule, "p")
            .taint("last", "x", NoSchedule),
    );
    let plan = w.plan();
    let np = plan.node("n1");
    assert_eq!(
        np.taint_list(),
        [
            "first=x:NoSchedule",
            "example.com/broken=v2:NoSchedule",
            "last=x:NoSchedule"
        ],
        "updated in place"
    );
    assert_eq!(np.added_list(), ["example.com/broken=v2:NoSchedule"]);
    assert!(np.added[0].reason.contains("value changed"));
    assert_quiet_after_apply(w);
}

#[test]
fn spec_edit_taint_dropped_removes_it_when_no_longer_wanted_either() {
    let p = policy("p")
        .taint("example.com/kept", "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput")]);
    let plan = plan_one(
        vec![p],
        node("n1")
            .condition("NIC", "Fine")
            .owned_taint(KEY, "yes", NoSchedule, "p"),
    );
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(
        plan.node("n1").removed[0].reason,
        "taint is no longer declared by the policy"
    );
}

// ---------------------------------------------------------------------------
// Deletion and unknown policies

#[test]
fn deleting_policy_removes_its_owned_taints_and_entries() {
    let w = World::new()
        .policy(nic_policy().deleting())
        .node(
            node("n1")
                .condition("NIC", "Kaput")
                .owned_taint(KEY, "yes", NoSchedule, "p")
                .taint("admin", "x", NoSchedule),
        )
        .node(node("n2").condition("NIC", "Kaput"));
    let plan = w.plan();
    let n1 = plan.node("n1");
    assert_eq!(n1.removed_list(), [ID]);
    assert_eq!(n1.removed[0].reason, "policy is being deleted");
    assert_eq!(n1.taint_list(), ["admin=x:NoSchedule"]);
    assert!(n1.managed.is_empty());
    assert!(plan.node("n2").is_noop(), "a deleting policy adds nothing");
    assert_quiet_after_apply(w);
}

#[test]
fn owned_taint_of_unknown_policy_is_removed_with_remove() {
    let w = World::new().node(
        node("n1")
            .owned_taint(KEY, "yes", NoSchedule, "gone")
            .taint("admin", "x", NoSchedule),
    );
    let plan = w.plan_with(now(), UnknownPolicies::Remove);
    assert_eq!(plan.node("n1").removed_list(), [ID]);
    assert_eq!(plan.node("n1").removed[0].policy, "gone");
    assert_eq!(plan.node("n1").removed[0].reason, "policy no longer exists");
    assert_eq!(plan.node("n1").taint_list(), ["admin=x:NoSchedule"]);
    assert!(plan.node("n1").managed.is_empty());
}

#[test]
fn owned_taint_of_unknown_policy_is_kept_with_keep() {
    let w = World::new().node(node("n1").owned_taint(KEY, "yes", NoSchedule, "gone"));
    let plan = w.plan_with(now(), UnknownPolicies::Keep);
    assert!(plan.node("n1").is_noop());
    assert_eq!(plan.node("n1").managed_list(), owned(&[(ID, "gone")]));
    assert!(!plan.node("n1").changes(&w.views()[0]));
}

#[test]
fn owned_taint_of_unknown_policy_is_taken_over_by_a_live_declaring_policy() {
    let w = World::new().policy(nic_policy()).node(
        node("n1")
            .condition("NIC", "Kaput")
            .owned_taint(KEY, "yes", NoSchedule, "gone"),
    );
    let plan = w.plan();
    assert!(plan.node("n1").is_noop());
    assert_eq!(plan.node("n1").managed_list(), owned(&[(ID, "p")]));
}

// ---------------------------------------------------------------------------
// maxTaintedNodes

fn capped_world(cap: PolicyBuilder, names: &[&str]) -> World {
    let mut w = World::new().policy(cap);
    for n in names {
        w = w.node(node(n).condition("NIC", "Kaput"));
    }
    w
}

#[test]
fn max_tainted_nodes_int_admits_new_nodes_by_name_until_the_cap() {
    let w = capped_world(nic_policy().max_tainted(2), &["n4", "n2", "n3", "n1"]);
    let plan = w.plan();
    let s = plan.summary("p");
    assert_eq!(s.tainted_node_names, ["n1", "n2"]);
    assert_eq!(
        (s.selected_nodes, s.tainted_nodes, s.pending_nodes),
        (4, 2, 2)
    );
    assert_eq!(s.reason, Reason::LimitReached);
    assert!(!s.ready);
    assert!(plan.node("n3").taints.is_empty());
    assert!(plan.node("n4").taints.is_empty());
    assert!(
        plan.node("n3")
            .notes
            .iter()
            .any(|n| n.contains("maxTaintedNodes")),
        "{:?}",
        plan.node("n3").notes
    );
    assert_quiet_after_apply(w);
}

#[test]
fn max_tainted_nodes_percent_rounds_down() {
    // 25% of 10 selected nodes is 2.5: 2 may be tainted.
    let mut w = capped_world(
        nic_policy().max_tainted_str("25%"),
        &["n0", "n1", "n2", "n3", "n4"],
    );
    for n in ["n5", "n6", "n7", "n8", "n9"] {
        w = w.node(node(n).condition("NIC", "Fine"));
    }
    let s = w.plan().summary("p").clone();
    assert_eq!(s.selected_nodes, 10);
    assert_eq!(s.tainted_node_names, ["n0", "n1"]);
    assert_eq!(s.pending_nodes, 3);
}

#[test]
fn max_tainted_nodes_percent_below_one_node_admits_none() {
    let w = capped_world(nic_policy().max_tainted_str("30%"), &["n1", "n2", "n3"]);
    let s = w.plan().summary("p").clone();
    assert_eq!((s.tainted_nodes, s.pending_nodes), (0, 3));
}

#[test]
fn max_tainted_nodes_zero_admits_none() {
    let w = capped_world(nic_policy().max_tainted(0), &["n1"]);
    let plan = w.plan();
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(plan.summary("p").reason, Reason::LimitReached);
}

#[test]
fn max_tainted_nodes_numeric_string_is_a_count() {
    // The schema accepts `"2"` as well as `2`: both mean two nodes, not 2%.
    let w = capped_world(nic_policy().max_tainted_str("2"), &["n1", "n2", "n3"]);
    let s = w.plan().summary("p").clone();
    assert_eq!(s.tainted_node_names, ["n1", "n2"]);
    assert_eq!(s.pending_nodes, 1);
}

#[test]
fn max_tainted_nodes_nodes_already_carrying_keep_their_taint() {
    // n3 and n4 carry the taint already; the cap of 1 is exceeded but they keep it,
    // and no new node is admitted.
    let mut w = capped_world(nic_policy().max_tainted(1), &["n1", "n2"]);
    for n in ["n3", "n4"] {
        w = w.node(
            node(n)
                .condition("NIC", "Kaput")
                .owned_taint(KEY, "yes", NoSchedule, "p"),
        );
    }
    let plan = w.plan();
    let s = plan.summary("p");
    assert_eq!(s.tainted_node_names, ["n3", "n4"]);
    assert_eq!(s.pending_nodes, 2);
    assert!(plan.nodes.iter().all(|n| n.is_noop()));
}

#[test]
fn max_tainted_nodes_carrying_nodes_use_up_room() {
    let mut w = capped_world(nic_policy().max_tainted(2), &["n1", "n2", "n3"]);
    w = w.node(
        node("n9")
            .condition("NIC", "Kaput")
            .owned_taint(KEY, "yes", NoSchedule, "p"),
    );
    let s = w.plan().summary("p").clone();
    assert_eq!(s.tainted_node_names, ["n1", "n9"]);
    assert_eq!(s.pending_nodes, 2);
}

#[test]
fn max_tainted_nodes_pending_node_is_tainted_when_room_frees_up() {
    // clearAfter 0s: n1's taint goes the moment it recovers (the cap is the subject).
    let mut w = capped_world(nic_policy().max_tainted(1).clear_after("0s"), &["n1", "n2"]);
    w.step();
    assert_eq!(w.plan().summary("p").tainted_node_names, ["n1"]);
    // n1 recovers: its taint goes, and n2 takes the room in the same pass.
    w.set_condition("n1", "NIC", "Fine");
    let plan = w.step();
    assert_eq!(plan.node("n1").removed_list(), [ID]);
    assert_eq!(
        plan.node("n2").added_list(),
        ["example.com/broken=yes:NoSchedule"]
    );
    assert_eq!(plan.summary("p").tainted_node_names, ["n2"]);
    assert_eq!(plan.summary("p").pending_nodes, 0);
}

#[test]
fn max_tainted_nodes_does_not_hold_back_readiness_taints() {
    let p = readiness_policy()
        .matcher([cond("NIC", "Kaput")])
        .max_tainted(0);
    let w = World::new()
        .policy(p)
        .node(node("n1"))
        .node(node("n2").condition("NIC", "Kaput"))
        .node(
            node("n3")
                .condition("NIC", "Kaput")
                .condition("example.net/NetworkReady", "True"),
        );
    let plan = w.plan();
    let s = plan.summary("r");
    assert_eq!(s.tainted_node_names, ["n1", "n2"]);
    assert_eq!(s.pending_nodes, 1);
    assert!(plan.node("n3").taints.is_empty());
}

#[test]
fn max_tainted_nodes_counts_only_selected_nodes() {
    let p = nic_policy()
        .selector(match_labels(&[("pool", "spot")]))
        .max_tainted_str("50%");
    let mut w = World::new().policy(p);
    for n in ["n1", "n2", "n3", "n4"] {
        w = w.node(node(n).label("pool", "spot").condition("NIC", "Kaput"));
    }
    for n in ["o1", "o2", "o3", "o4"] {
        w = w.node(node(n).condition("NIC", "Kaput"));
    }
    let s = w.plan().summary("p").clone();
    assert_eq!(s.selected_nodes, 4);
    assert_eq!(s.tainted_node_names, ["n1", "n2"]);
}

// ---------------------------------------------------------------------------
// timeAdded

#[test]
fn no_execute_taints_get_time_added_now() {
    let p = policy("p")
        .taint("example.com/evict", "yes", NoExecute)
        .taint("example.com/sched", "yes", NoSchedule)
        .taint("example.com/prefer", "yes", PreferNoSchedule)
        .matcher([cond("NIC", "Kaput")]);
    let plan = plan_one(vec![p], node("n1").condition("NIC", "Kaput"));
    let taints = &plan.node("n1").taints;
    assert_eq!(taints.len(), 3);
    for t in taints {
        if t.effect == "NoExecute" {
            assert_eq!(t.time_added, Some(Time(now())));
        } else {
            assert_eq!(t.time_added, None, "{}", show(t));
        }
    }
}

#[test]
fn no_execute_time_added_is_kept_at_steady_state() {
    let p = policy("p")
        .taint("example.com/evict", "yes", NoExecute)
        .matcher([cond("NIC", "Kaput")]);
    let mut w = World::new()
        .policy(p)
        .node(node("n1").condition("NIC", "Kaput"));
    w.step();
    let later = plus(now(), 3600);
    let plan = w.plan_at(later);
    assert!(plan.node("n1").is_noop());
    assert_eq!(plan.node("n1").taints[0].time_added, Some(Time(now())));
}

// ---------------------------------------------------------------------------
// Dry run

#[test]
fn dry_run_never_changes_any_node() {
    let w = World::new()
        .policy(nic_policy().dry_run())
        .node(node("n1").condition("NIC", "Kaput"))
        .node(node("n2").condition("NIC", "Kaput"))
        .node(node("n3").condition("NIC", "Fine"));
    let plan = w.plan();
    for (view, np) in w.views().iter().zip(&plan.nodes) {
        assert!(np.is_noop());
        assert!(!np.changes(view));
    }
    let s = plan.summary("p");
    assert_eq!(s.reason, Reason::DryRun);
    assert!(s.ready);
    assert_eq!(
        (s.selected_nodes, s.tainted_nodes, s.pending_nodes),
        (3, 2, 0)
    );
    assert_eq!(s.tainted_node_names, ["n1", "n2"]);
    assert!(s.message.contains("would keep 2 of 3"), "{}", s.message);
}

#[test]
fn dry_run_freezes_owned_taints() {
    let p = policy("p")
        .taint(KEY, "new-value", NoSchedule)
        .matcher([cond("NIC", "Kaput")])
        .selector(match_labels(&[("pool", "spot")]))
        .dry_run();
    let w = World::new()
        .policy(p)
        // No longer wanted: kept.
        .node(
            node("n1")
                .label("pool", "spot")
                .condition("NIC", "Fine")
                .owned_taint(KEY, "yes", NoSchedule, "p"),
        )
        // Wanted with another value: not updated.
        .node(
            node("n2")
                .label("pool", "spot")
                .condition("NIC", "Kaput")
                .owned_taint(KEY, "yes", NoSchedule, "p"),
        )
        // Not selected any more: kept.
        .node(node("n3").owned_taint(KEY, "yes", NoSchedule, "p"));
    let plan = w.plan();
    for (view, np) in w.views().iter().zip(&plan.nodes) {
        assert!(np.is_noop(), "{np:?}");
        assert!(!np.changes(view), "{np:?}");
    }
}

#[test]
fn dry_run_freezes_owned_taints_it_no_longer_declares() {
    let p = policy("p")
        .taint("example.com/renamed", "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput")])
        .dry_run();
    let w = World::new().policy(p).node(
        node("n1")
            .condition("NIC", "Kaput")
            .owned_taint(KEY, "yes", NoSchedule, "p"),
    );
    let plan = w.plan();
    assert!(plan.node("n1").is_noop(), "{:?}", plan.node("n1"));
    assert!(!plan.node("n1").changes(&w.views()[0]));
}

#[test]
fn dry_run_bootstrap_records_no_completion() {
    let w = World::new()
        .policy(bootstrap_policy().dry_run())
        .node(node("n1").condition("example.net/NetworkReady", "True"));
    let plan = w.plan();
    assert!(plan.node("n1").bootstrapped.0.is_empty());
    assert!(!plan.node("n1").changes(&w.views()[0]));
}

// ---------------------------------------------------------------------------
// Invalid specs

fn assert_invalid(p: PolicyBuilder, field: &str) {
    let w = World::new()
        .policy(p)
        // Would be tainted by a valid policy.
        .node(node("n1").condition("NIC", "Kaput").condition("C", "True"))
        // Carries a taint the policy owns, though nothing wants it.
        .node(node("n2").owned_taint(KEY, "yes", NoSchedule, "p"));
    let plan = w.plan();
    let s = plan.summary("p");
    assert_eq!(s.reason, Reason::InvalidSpec);
    assert!(!s.ready);
    assert!(
        s.message.contains(field),
        "message {:?} does not name {field}",
        s.message
    );
    for (view, np) in w.views().iter().zip(&plan.nodes) {
        assert!(np.is_noop(), "{np:?}");
        assert!(!np.changes(view), "{np:?}");
    }
}

#[test]
fn invalid_status_regex_is_reported_with_its_field_and_changes_no_node() {
    let p = policy("p")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput(")]);
    assert_invalid(p, "spec.matchers[0].conditions[0].status");
}

#[test]
fn invalid_reason_regex_is_reported_with_its_field() {
    let p = policy("p")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("C", "True")])
        .matcher([cond("NIC", "Kaput"), cond("C", "True").reason("[a-")]);
    assert_invalid(p, "spec.matchers[1].conditions[1].reason");
}

#[test]
fn invalid_for_duration_is_reported_with_its_field() {
    let p = policy("p")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput").for_("5 minutes")]);
    assert_invalid(p, "spec.matchers[0].conditions[0].for");
}

/// What the CRD lets through but Go cannot hold (an API server without the CEL rule,
/// or a policy read from a file): an eleven-million-year window is refused, not waited.
#[test]
fn a_for_window_beyond_gos_durations_is_invalid() {
    let p = policy("p").taint(KEY, "yes", NoSchedule).matcher([
        cond("NIC", "Kaput"),
        cond("Other", "True").for_("99999999999h"),
    ]);
    assert_invalid(p, "spec.matchers[0].conditions[1].for");
}

#[test]
fn invalid_readiness_status_regex_is_reported_with_its_field() {
    let p = policy("p")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput")])
        .ready_when("A", "True")
        .ready_when("B", "*");
    assert_invalid(p, "spec.readiness.conditions[1].status");
}

#[test]
fn invalid_spec_without_matchers_or_readiness_changes_no_node() {
    assert_invalid(policy("p").taint(KEY, "yes", NoSchedule), "spec");
}

#[test]
fn invalid_spec_with_edited_taints_still_changes_no_node() {
    // The same edit renamed the taint and broke a regex: the old taint stays put.
    let p = policy("p")
        .taint("example.com/renamed", "yes", NoSchedule)
        .matcher([cond("NIC", "(")]);
    assert_invalid(p, "spec.matchers[0].conditions[0].status");
}

#[test]
fn invalid_policy_message_gives_the_regex_error() {
    let compiled = CompiledPolicy::compile(
        &policy("p")
            .taint(KEY, "yes", NoSchedule)
            .matcher([cond("NIC", "Kaput(")])
            .build(),
    );
    assert!(!compiled.is_active());
    let err = compiled.rules.expect_err("invalid");
    assert_eq!(err.field, "spec.matchers[0].conditions[0].status");
    assert!(err.message.contains("Kaput("), "{}", err.message);
}

#[test]
fn invalid_policy_still_owns_its_taints_against_newer_policies() {
    // An invalid older policy keeps its claim: a newer one declaring the same taint conflicts.
    let old = policy("old")
        .created("2026-01-01T00:00:00Z")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", "(")]);
    let new = policy("new")
        .created("2026-02-01T00:00:00Z")
        .taint(KEY, "yes", NoSchedule)
        .matcher([cond("NIC", "Kaput")]);
    let plan = World::new()
        .policy(old)
        .policy(new)
        .node(node("n1").condition("NIC", "Kaput"))
        .plan();
    assert!(plan.node("n1").taints.is_empty());
    assert_eq!(plan.summary("new").reason, Reason::Conflict);
}

// ---------------------------------------------------------------------------
// Summaries

#[test]
fn summary_counts_selected_tainted_pending_and_sorted_names() {
    let p = nic_policy()
        .selector(match_labels(&[("pool", "spot")]))
        .max_tainted(3);
    let mut w = World::new().policy(p);
    for (n, status) in [
        ("spot-e", "Kaput"),
        ("spot-c", "Kaput"),
        ("spot-a", "Kaput"),
        ("spot-b", "Fine"),
        ("spot-d", "Kaput"),
        ("spot-f", "Kaput"),
    ] {
        w = w.node(node(n).label("pool", "spot").condition("NIC", status));
    }
    w = w.node(node("other").condition("NIC", "Kaput"));
    let plan = w.plan();
    let s = plan.summary("p");
    assert_eq!(s.selected_nodes, 6);
    assert_eq!(s.tainted_nodes, 3);
    assert_eq!(s.pending_nodes, 2);
    assert_eq!(s.tainted_node_names, ["spot-a", "spot-c", "spot-d"]);
}

#[test]
fn summary_progressing_until_applied_then_reconciled() {
    let mut w = World::new()
        .policy(nic_policy())
        .node(node("n1").condition("NIC", "Kaput"))
        .node(node("n2").condition("NIC", "Fine"));
    let plan = w.step();
    let s = plan.summary("p");
    assert_eq!(s.reason, Reason::Progressing);
    assert!(!s.ready);
    assert_eq!(s.tainted_node_names, ["n1"]);
    let plan = w.plan();
    let s = plan.summary("p");
    assert_eq!(s.reason, Reason::Reconciled);
    assert!(s.ready);
    assert_eq!(s.message, "1 of 2 selected nodes tainted");
    assert_eq!(s.tainted_node_names, ["n1"]);
}

#[test]
fn summary_progressing_while_removals_are_pending() {
    let plan = plan_one(
        vec![nic_policy()],
        node("n1")
            .condition("NIC", "Fine")
            .owned_taint(KEY, "yes", NoSchedule, "p"),
    );
    assert_eq!(plan.summary("p").reason, Reason::Progressing);
    assert_eq!(plan.summary("p").tainted_nodes, 0);
}

#[test]
fn foreign_identical_taint_counts_as_tainted_only_where_the_policy_wants_it() {
    let plan = World::new()
        .policy(nic_policy())
        .node(
            node("wanted")
                .condition("NIC", "Kaput")
                .taint(KEY, "yes", NoSchedule),
        )
        .node(
            node("unwanted")
                .condition("NIC", "Fine")
                .taint(KEY, "yes", NoSchedule),
        )
        .plan();
    let s = plan.summary("p");
    assert_eq!(s.tainted_node_names, ["wanted"]);
    assert_eq!(s.reason, Reason::Reconciled);
}

#[test]
fn evaluation_reports_selection_and_reasons_per_policy() {
    let set = PolicySet::from_resources(&[
        nic_policy().build(),
        readiness_policy()
            .selector(match_labels(&[("pool", "x")]))
            .build(),
    ]);
    let view = node("n1").condition("NIC", "Kaput").view();
    let eval = evaluate_node(&set, &view, &PodIndex::new(), now());
    let by_name = |name: &str| &eval.policies[set.index_of(name).unwrap()];
    assert!(by_name("p").selected && by_name("p").wants_taints());
    assert_eq!(by_name("p").reasons(), ["condition NIC=Kaput matched"]);
    assert!(!by_name("r").selected && !by_name("r").wants_taints());
    assert_eq!(by_name("r").reasons(), ["node is not selected"]);
}

#[test]
fn node_plan_reasons_list_each_change_once() {
    let p = policy("p")
        .taint("a", "x", NoSchedule)
        .taint("b", "x", NoSchedule)
        .matcher([cond("NIC", "Kaput")]);
    let plan = plan_one(vec![p], node("n1").condition("NIC", "Kaput"));
    assert_eq!(
        plan.node("n1").reasons(),
        ["p: condition NIC=Kaput matched"]
    );
}

#[test]
fn applied_annotations_round_trip_through_the_node_view() {
    let mut w = World::new()
        .policy(nic_policy())
        .node(node("n1").condition("NIC", "Kaput"));
    w.step();
    let n1: &Node = w.node_named("n1");
    assert_eq!(
        annotation(n1, MANAGED_TAINTS_ANNOTATION),
        Some(r#"{"example.com/broken:NoSchedule":"p"}"#)
    );
    let view = NodeView::from_node(n1);
    assert_eq!(view.managed.owner(ID), Some("p"));
}

#[test]
fn critical_pod_reason_does_not_depend_on_pod_order() {
    // Two matching pods, neither Ready: the reason names the same one in any order.
    let a = pod("kube-system", "istio-cni-a")
        .label("app", "istio")
        .on("n1")
        .not_ready();
    let b = pod("kube-system", "istio-cni-b")
        .label("app", "istio")
        .on("n1")
        .not_ready();
    let plan_ab = World::new()
        .policy(cni_policy())
        .node(node("n1"))
        .pod(a.clone())
        .pod(b.clone())
        .plan();
    let plan_ba = World::new()
        .policy(cni_policy())
        .node(node("n1"))
        .pod(b)
        .pod(a)
        .plan();
    assert_eq!(plan_ab.node("n1"), plan_ba.node("n1"));
}

/// A plan under `maxTaintedNodes` or `spec.eviction` counts other nodes, so it
/// must wait for the whole node list; any other policy set plans a node alone.
#[test]
fn caps_and_drains_count_across_nodes_and_nothing_else_does() {
    let set = |policies: Vec<PolicyBuilder>| {
        let built: Vec<TaintPolicy> = policies.into_iter().map(|p| p.build()).collect();
        PolicySet::from_resources(built.iter())
    };
    assert!(!set(vec![]).counts_across_nodes());
    assert!(!set(vec![nic_policy(), policy("r").taint("r", "", NoSchedule)]).counts_across_nodes());
    assert!(set(vec![nic_policy(), nic_policy().max_tainted(2)]).counts_across_nodes());
    assert!(
        set(vec![
            nic_policy().eviction(serde_json::json!({"nodesPerMinute": 1}))
        ])
        .counts_across_nodes()
    );
}
