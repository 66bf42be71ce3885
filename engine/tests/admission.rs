//! What admission refuses and warns about (`engine::admission`): every case the
//! operator reports as `InvalidSpec` is refused naming its field, and each
//! warning says what it should. The validating webhook and `plan` both ask here.

mod support;

use serde_json::json;
use support::*;
use taint_operator_crd::TaintPolicy;
use taint_operator_engine::{
    admission::{refusal, set_with, warnings},
    cluster::PodIndex,
    cluster_plan::plan_cluster,
    node_plan::UnknownPolicies,
};

/// A policy from the JSON of its spec (schema checks are the API server's; these
/// objects may break them, as a client that skips validation would send them).
fn from_spec(spec: serde_json::Value) -> TaintPolicy {
    serde_json::from_value(json!({
        "apiVersion": "nodetaint.io/v1alpha1",
        "kind": "TaintPolicy",
        "metadata": {"name": "p", "uid": "uid-p"},
        "spec": spec,
    }))
    .expect("a TaintPolicy")
}

fn taints() -> serde_json::Value {
    json!([{"key": "example.com/k", "effect": "NoSchedule"}])
}

#[test]
fn every_invalid_spec_case_is_refused_naming_its_field() {
    let cases = [
        (
            json!({"taints": taints(), "matchers": [{"conditions": [{"type": "A", "status": "Kaput("}]}]}),
            "spec.matchers[0].conditions[0].status",
            "invalid regex \"Kaput(\"",
        ),
        (
            json!({"taints": taints(), "matchers": [
                {"conditions": [{"type": "A", "status": "B"}]},
                {"conditions": [{"type": "A", "status": "B"}, {"type": "C", "status": "D", "reason": "[z-a]"}]}
            ]}),
            "spec.matchers[1].conditions[1].reason",
            "invalid regex \"[z-a]\"",
        ),
        (
            json!({"taints": taints(), "readiness": {"conditions": [
                {"type": "A", "status": "True"}, {"type": "B", "status": "(True"}
            ]}}),
            "spec.readiness.conditions[1].status",
            "invalid regex \"(True\"",
        ),
        (
            json!({"taints": taints(), "matchers": [{"conditions": [{"type": "A", "status": "B", "for": "2562048h"}]}]}),
            "spec.matchers[0].conditions[0].for",
            "invalid duration",
        ),
        (
            json!({"taints": taints(), "matchers": [{"conditions": []}]}),
            "spec.matchers[0].conditions",
            "must not be empty",
        ),
        (
            json!({"taints": taints()}),
            "spec",
            "at least one of spec.matchers or spec.readiness",
        ),
        (
            json!({"taints": [{"key": "k", "effect": "NoExecute"}], "matchers": [{"conditions": [{"type": "A", "status": "B"}]}],
                   "eviction": {"drainTimeout": "a while"}}),
            "spec.eviction.drainTimeout",
            "invalid duration",
        ),
        (
            json!({"taints": [{"key": "k", "effect": "NoExecute"}], "matchers": [{"conditions": [{"type": "A", "status": "B"}]}],
                   "eviction": {"nodesPerMinute": 0}}),
            "spec.eviction.nodesPerMinute",
            "at least 1",
        ),
        (
            json!({"taints": [{"key": "k", "effect": "NoExecute"}], "matchers": [{"conditions": [{"type": "A", "status": "B"}]}],
                   "eviction": {"pauseWhenZoneUnhealthy": "150%"}}),
            "spec.eviction.pauseWhenZoneUnhealthy",
            "percentage",
        ),
        // A critical-pod selector goes to the API server in a pod watch, which would
        // refuse it (and the watch would never sync): refused here instead.
        (
            json!({"taints": taints(), "readiness": {"criticalPods": [{"name": "cni", "namespace": "kube-system",
                   "selector": {"matchLabels": {"app name": "cni"}}}]}}),
            "spec.readiness.criticalPods[0].selector.matchLabels",
            "\"app name\" is not a label key",
        ),
        (
            json!({"taints": taints(), "readiness": {"criticalPods": [{"name": "cni", "namespace": "kube-system",
                   "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["ok", "not ok"]}]}}]}}),
            "spec.readiness.criticalPods[0].selector.matchExpressions[0].values[1]",
            "\"not ok\" is not a label value",
        ),
        (
            json!({"taints": taints(), "nodeSelector": {"matchLabels": {"pool": "-a"}},
                   "matchers": [{"conditions": [{"type": "A", "status": "B"}]}]}),
            "spec.nodeSelector.matchLabels[pool]",
            "\"-a\" is not a label value",
        ),
        (
            json!({"taints": taints(), "nodeSelector": {"matchExpressions": [{"key": "example.com/", "operator": "Exists"}]},
                   "matchers": [{"conditions": [{"type": "A", "status": "B"}]}]}),
            "spec.nodeSelector.matchExpressions[0].key",
            "is not a label key",
        ),
    ];
    for (spec, field, says) in cases {
        let refused = refusal(&from_spec(spec.clone())).unwrap_or_else(|| panic!("{spec} passed"));
        assert_eq!(refused.field, field, "{spec}");
        assert!(
            refused.message.contains(says),
            "{spec}: {}",
            refused.message
        );
        assert!(refused.to_string().starts_with(&format!("{field}: ")));
    }
    // A good one passes.
    assert_eq!(
        refusal(&from_spec(
            json!({"taints": taints(), "matchers": [{"conditions": [{"type": "A", "status": "Kaput|Ruined"}]}]})
        )),
        None
    );
}

#[test]
fn the_impact_names_the_tainted_nodes_and_what_the_cap_holds_back() {
    let p = policy("p")
        .taint("example.com/k", "", NoSchedule)
        .matcher([cond("NIC", "Kaput")])
        .max_tainted(2)
        .build();
    let mut w = World::new();
    for n in ["a", "b", "c", "d"] {
        w = w.node(node(n).condition("NIC", "Kaput"));
    }
    w = w.node(node("e").condition("NIC", "Fine"));
    let (set, i) = set_with(&[], &p);
    let plan = plan_cluster(
        &set,
        &w.views(),
        &PodIndex::new(),
        now(),
        UnknownPolicies::Remove,
    );
    assert_eq!(
        warnings(&set, i, Some(&plan.policies[i])),
        ["impact: would taint 2 of 5 selected nodes now (a, b); maxTaintedNodes holds back 2 more"]
    );
    // Without the cluster, no impact.
    assert!(warnings(&set, i, None).is_empty());
}

#[test]
fn the_impact_lists_five_names_at_most_and_counts_the_rest() {
    let p = policy("p")
        .taint("example.com/k", "", NoSchedule)
        .matcher([cond("NIC", "Kaput")])
        .dry_run()
        .build();
    let mut w = World::new();
    for n in 0..8 {
        w = w.node(node(&format!("n{n}")).condition("NIC", "Kaput"));
    }
    let (set, i) = set_with(&[], &p);
    let plan = plan_cluster(
        &set,
        &w.views(),
        &PodIndex::new(),
        now(),
        UnknownPolicies::Remove,
    );
    assert_eq!(
        warnings(&set, i, Some(&plan.policies[i])),
        [
            "impact: dry run, would keep tainted 8 of 8 selected nodes now (n0, n1, n2, n3, n4 and 3 more)"
        ]
    );
}

#[test]
fn an_update_replaces_the_stored_policy_and_a_conflict_names_the_older_owner() {
    let older = policy("older")
        .created("2025-01-01T00:00:00Z")
        .taint("example.com/k", "", NoSchedule)
        .matcher([cond("A", "B")])
        .build();
    let stored = policy("p")
        .taint("example.com/other", "", NoSchedule)
        .matcher([cond("A", "B")])
        .build();
    let edited = policy("p")
        .taint("example.com/k", "", NoSchedule)
        .matcher([cond("A", "B")])
        .build();
    let (set, i) = set_with(&[older, stored], &edited);
    assert_eq!(set.policies.len(), 2, "the edit replaces p");
    assert_eq!(
        warnings(&set, i, None),
        [
            "conflict: taint example.com/k:NoSchedule is owned by older policy older; this policy will not touch it (reason Conflict)"
        ]
    );
}

#[test]
fn no_execute_without_eviction_and_readiness_without_a_startup_prefix_are_warned_about() {
    let p = policy("p")
        .taint("example.com/gone", "", NoExecute)
        .taint(
            "startup-taint.cluster-autoscaler.kubernetes.io/cni",
            "",
            NoSchedule,
        )
        .taint("readiness.k8s.io/net", "", NoSchedule)
        .taint("example.com/agent", "", NoSchedule)
        .ready_when("Ready", "True")
        .build();
    let (set, i) = set_with(&[], &p);
    assert_eq!(
        warnings(&set, i, None),
        [
            "spec.taints[0] (example.com/gone:NoExecute) has no spec.eviction: every pod that does not tolerate it is deleted at once, whatever its PodDisruptionBudget says; add spec.eviction to drain first",
            "spec.taints[0] (example.com/gone): a readiness taint without a startup prefix; autoscalers may add nodes while it holds new ones. Use startup-taint.cluster-autoscaler.kubernetes.io/ or readiness.k8s.io/ (docs/autoscalers.md)",
            "spec.taints[3] (example.com/agent): a readiness taint without a startup prefix; autoscalers may add nodes while it holds new ones. Use startup-taint.cluster-autoscaler.kubernetes.io/ or readiness.k8s.io/ (docs/autoscalers.md)",
        ]
    );
    // With spec.eviction, and as a matcher policy, nothing to say.
    let p = policy("p")
        .taint("example.com/gone", "", NoExecute)
        .matcher([cond("A", "B")])
        .eviction(json!({}))
        .build();
    let (set, i) = set_with(&[], &p);
    assert!(warnings(&set, i, None).is_empty());
}

/// `node.kubernetes.io/out-of-service` marks a node that is gone: nothing runs there
/// to drain, and its pods are meant to go at once, so it needs no spec.eviction.
#[test]
fn the_out_of_service_taint_needs_no_eviction() {
    let p = policy("spot")
        .taint(
            "node.kubernetes.io/out-of-service",
            "nodeshutdown",
            NoExecute,
        )
        .taint("example.com/gone", "", NoExecute)
        .matcher([cond("SpotInterruption", "True")])
        .build();
    let (set, i) = set_with(&[], &p);
    assert_eq!(
        warnings(&set, i, None),
        [
            "spec.taints[1] (example.com/gone:NoExecute) has no spec.eviction: every pod that does not tolerate it is deleted at once, whatever its PodDisruptionBudget says; add spec.eviction to drain first",
            "spec.taints[0] (node.kubernetes.io/out-of-service): force-detaches volumes, so it goes on only once the node's kubelet stops reporting Ready, never on a running node; drain first with another taint (examples/spot-out-of-service.yaml)",
        ]
    );
}

/// Any policy that declares out-of-service is told, at apply, that the operator
/// waits for the node to be down, whatever the taint's effect.
#[test]
fn declaring_out_of_service_warns_that_it_waits_for_a_node_that_is_down() {
    for effect in [NoSchedule, NoExecute] {
        let p = policy("oos")
            .bare_taint("node.kubernetes.io/out-of-service", effect)
            .matcher([cond("SpotInterruption", "True")])
            .build();
        let (set, i) = set_with(&[], &p);
        let found = warnings(&set, i, None);
        assert!(
            found.iter().any(|w| w.starts_with(
                "spec.taints[0] (node.kubernetes.io/out-of-service): force-detaches volumes"
            )),
            "{effect:?}: {found:?}"
        );
        assert!(found.iter().all(|w| w.len() <= 256), "{found:?}");
    }
}

#[test]
fn every_warning_fits_what_the_api_server_keeps() {
    let long = "n".repeat(200);
    let p = policy("p")
        .taint("example.com/k", "", NoSchedule)
        .matcher([cond("NIC", "Kaput")])
        .build();
    let mut w = World::new();
    for n in 0..3 {
        w = w.node(node(&format!("{long}{n}")).condition("NIC", "Kaput"));
    }
    let (set, i) = set_with(&[], &p);
    let plan = plan_cluster(
        &set,
        &w.views(),
        &PodIndex::new(),
        now(),
        UnknownPolicies::Remove,
    );
    let said = warnings(&set, i, Some(&plan.policies[i]));
    assert_eq!(said.len(), 1);
    assert!(
        said[0].len() <= 256,
        "{} characters: {}",
        said[0].len(),
        said[0]
    );
    assert!(
        said[0].starts_with("impact: would taint 3 of 3 selected nodes now ("),
        "{}",
        said[0]
    );
}
