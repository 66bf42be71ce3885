//! The validating webhook for TaintPolicy CREATE and UPDATE.
//!
//! It refuses a policy the operator could not apply (a regex that does not
//! compile, anything `InvalidSpec` would report), naming the field; the OpenAPI
//! schema and the CRD's CEL rules have already refused everything they can check.
//! It never refuses for what the cluster looks like: the impact on the nodes (how
//! many it would taint now, which, how many the cap holds back), conflicts with
//! older policies, a NoExecute taint without `spec.eviction` and a readiness taint
//! without an autoscaler prefix are warnings, which `kubectl` prints. So
//! `kubectl apply --dry-run=server` shows a policy's impact before it acts. The
//! refusal and the warnings are the engine's (`engine::admission`), as in `plan`.

use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, AdmissionResponse, Operation},
};
use serde_json::Value;
use taint_operator_crd::TaintPolicy;

use crate::admission::{Answer, Outcome};
use engine::{
    admission::{refusal, set_with, warnings},
    cluster::{NodeView, PodIndex},
    cluster_plan::plan_cluster_refs,
    node_plan::UnknownPolicies,
};
use k8s_openapi::jiff::Timestamp;

/// What a review reads of the cluster: the stored policies once the policy cache
/// has listed, and the nodes and pods once every cache has (for the impact).
pub struct Cluster<'a> {
    pub policies: Option<&'a [TaintPolicy]>,
    pub nodes: Option<(&'a [&'a NodeView], &'a PodIndex)>,
    pub now: Timestamp,
}

/// Answers one TaintPolicy review (see [`super::review`]).
pub fn review(body: Value, cluster: &Cluster) -> Answer {
    super::review(body, |req| respond(req, cluster))
}

fn respond(
    req: &AdmissionRequest<DynamicObject>,
    cluster: &Cluster,
) -> (AdmissionResponse, Outcome) {
    let allow = AdmissionResponse::from(req);
    if req.kind.kind != "TaintPolicy"
        || !matches!(req.operation, Operation::Create | Operation::Update)
    {
        let mut resp = allow;
        resp.warnings = Some(vec![format!(
            "taint-operator validates TaintPolicy CREATE and UPDATE only; {} {:?} let through",
            req.kind.kind, req.operation
        )]);
        return (resp, Outcome::Allowed);
    }
    let Some(obj) = &req.object else {
        return (
            allow.deny("TaintPolicy review without an object"),
            Outcome::Error,
        );
    };
    let policy: TaintPolicy = match serde_json::to_value(obj).and_then(serde_json::from_value) {
        Ok(p) => p,
        Err(e) => {
            return (
                allow.deny(format!("cannot read the TaintPolicy in the review: {e}")),
                Outcome::Error,
            );
        }
    };
    if let Some(invalid) = refusal(&policy) {
        let name = policy.metadata.name.as_deref().unwrap_or_default();
        tracing::info!(policy = name, field = %invalid.field, message = %invalid.message, "webhook: policy refused");
        return (allow.deny(invalid.to_string()), Outcome::Refused);
    }
    let mut resp = allow;
    let said = said(&policy, cluster);
    if !said.is_empty() {
        resp.warnings = Some(said);
    }
    (resp, Outcome::Allowed)
}

/// The warnings for `policy` as it would be stored: conflicts need the policy
/// cache, the impact every cache.
pub fn said(policy: &TaintPolicy, cluster: &Cluster) -> Vec<String> {
    let (set, i) = set_with(cluster.policies.unwrap_or_default(), policy);
    let summary = cluster.nodes.map(|(nodes, pods)| {
        let plan = plan_cluster_refs(&set, nodes, pods, cluster.now, UnknownPolicies::Remove);
        plan.policies
            .into_iter()
            .nth(i)
            .expect("a summary per policy")
    });
    warnings(&set, i, summary.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use taint_operator_testkit::{NoExecute, NoSchedule, cond, node, policy as built};

    fn review_of(operation: &str, object: Value) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "req-7",
                "kind": {"group": "nodetaint.io", "version": "v1alpha1", "kind": "TaintPolicy"},
                "resource": {"group": "nodetaint.io", "version": "v1alpha1", "resource": "taintpolicies"},
                "operation": operation,
                "userInfo": {"username": "alice"},
                "object": object,
                "dryRun": true
            }
        })
    }

    fn nic(status: &str) -> TaintPolicy {
        built("nic")
            .taint("example.com/nic", "", NoSchedule)
            .matcher([cond("NIC", status)])
            .build()
    }

    fn none() -> Cluster<'static> {
        Cluster {
            policies: None,
            nodes: None,
            now: taint_operator_testkit::now(),
        }
    }

    #[test]
    fn a_regex_that_does_not_compile_is_refused_naming_the_field() {
        let out = review(
            review_of("CREATE", serde_json::to_value(nic("Kaput(")).unwrap()),
            &none(),
        );
        assert_eq!(
            (out.outcome, out.operation.as_str()),
            (Outcome::Refused, "CREATE")
        );
        let resp = &out.body["response"];
        assert_eq!(resp["uid"], "req-7");
        assert_eq!(resp["allowed"], false);
        let message = resp["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("spec.matchers[0].conditions[0].status: invalid regex \"Kaput(\""),
            "{message}"
        );
    }

    #[test]
    fn a_good_policy_is_allowed_with_its_impact_when_the_caches_have_synced() {
        let nodes = [
            node("n1").condition("NIC", "Kaput").build(),
            node("n2").condition("NIC", "Fine").build(),
            node("n3").condition("NIC", "Kaput").build(),
        ];
        let views: Vec<NodeView> = nodes.iter().map(NodeView::from_node).collect();
        let refs: Vec<&NodeView> = views.iter().collect();
        let pods = PodIndex::new();
        let cluster = Cluster {
            policies: Some(&[]),
            nodes: Some((&refs, &pods)),
            now: taint_operator_testkit::now(),
        };
        let out = review(
            review_of("UPDATE", serde_json::to_value(nic("Kaput")).unwrap()),
            &cluster,
        );
        assert_eq!(
            (out.outcome, out.operation.as_str()),
            (Outcome::Allowed, "UPDATE")
        );
        assert_eq!(out.body["response"]["allowed"], true);
        assert_eq!(
            out.body["response"]["warnings"],
            json!(["impact: would taint 2 of 3 selected nodes now (n1, n3)"])
        );
        // Not synced: no impact, no warning at all for this policy.
        let out = review(
            review_of("CREATE", serde_json::to_value(nic("Kaput")).unwrap()),
            &none(),
        );
        assert_eq!(out.body["response"]["allowed"], true);
        assert!(out.body["response"]["warnings"].is_null());
    }

    #[test]
    fn a_conflict_and_a_no_execute_taint_without_eviction_are_warned_about() {
        let older = built("older")
            .created("2025-01-01T00:00:00Z")
            .taint("example.com/nic", "", NoSchedule)
            .matcher([cond("A", "B")])
            .build();
        let newer = built("newer")
            .taint("example.com/nic", "", NoSchedule)
            .taint("example.com/gone", "", NoExecute)
            .matcher([cond("NIC", "Kaput")])
            .build();
        let cluster = Cluster {
            policies: Some(std::slice::from_ref(&older)),
            nodes: None,
            now: taint_operator_testkit::now(),
        };
        assert_eq!(
            said(&newer, &cluster),
            [
                "conflict: taint example.com/nic:NoSchedule is owned by older policy older; this policy will not touch it (reason Conflict)",
                "spec.taints[1] (example.com/gone:NoExecute) has no spec.eviction: every pod that does not tolerate it is deleted at once, whatever its PodDisruptionBudget says; add spec.eviction to drain first",
            ]
        );
    }

    #[test]
    fn other_kinds_and_operations_are_let_through_with_a_word() {
        let mut body = review_of("DELETE", json!(null));
        body["request"]["kind"]["kind"] = json!("TaintPolicy");
        let out = review(body, &none());
        assert_eq!(out.outcome, Outcome::Allowed);
        assert_eq!(out.body["response"]["allowed"], true);
        assert!(
            out.body["response"]["warnings"][0]
                .as_str()
                .unwrap()
                .contains("CREATE and UPDATE only")
        );
    }
}
