//! The mutating webhook for Node CREATE: a node created while a readiness policy
//! selects it registers with that policy's taints already on, so no pod that does
//! not tolerate them is scheduled in the gap before the first reconcile.
//!
//! It answers from the policy cache, never calls the API server, and never removes
//! or changes what the node registered with.

use k8s_openapi::api::core::v1::Node;
use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, AdmissionResponse, Operation},
};
use serde_json::{Value, json};
use taint_operator_crd::{MANAGED_TAINTS_ANNOTATION, Mode};

use crate::admission::{Answer, Outcome};
use engine::{
    ownership::{ManagedTaints, taint_id},
    policy_set::PolicySet,
};

/// The JSON patch that adds the taints (and ownership entries) of every active
/// readiness policy selecting `node`. Empty when there is nothing to add.
pub fn node_patch(set: &PolicySet, node: &Node) -> (Vec<Value>, Vec<String>) {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let existing = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let mut managed = ManagedTaints::parse(
        node.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MANAGED_TAINTS_ANNOTATION))
            .map(String::as_str),
    );
    let mut added = Vec::new();
    let mut new_taints = Vec::new();
    // A node registering as Ready=True runs: out-of-service is never put on it.
    let view = engine::cluster::NodeView::from_node(node);
    for (i, p) in set.policies.iter().enumerate() {
        let Ok(rules) = &p.rules else { continue };
        if !p.is_active() || rules.readiness.is_none() || !rules.node_selector.matches(&labels) {
            continue;
        }
        if p.mode == Mode::BootstrapOnly {
            let done = engine::ownership::Bootstrapped::parse(
                node.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(taint_operator_crd::BOOTSTRAPPED_ANNOTATION))
                    .map(String::as_str),
            );
            if done.completed(&p.name, &p.uid) {
                continue;
            }
        }
        for t in &p.taints {
            let id = taint_id(&t.key, t.effect.as_str());
            let taken =
                existing
                    .iter()
                    .chain(&new_taints)
                    .any(|e: &k8s_openapi::api::core::v1::Taint| {
                        e.key == t.key && e.effect == t.effect.as_str()
                    });
            if set.owner_of(&id) != Some(i)
                || taken
                || engine::out_of_service::holds_back(&t.key, &view)
            {
                continue;
            }
            // timeAdded is left to the API server; NoExecute readiness taints are unusual on a new node.
            new_taints.push(k8s_openapi::api::core::v1::Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.as_str().into(),
                time_added: None,
            });
            managed.insert(&id, &p.name);
            added.push(format!("{} ({})", t.display(), p.name));
        }
    }
    if new_taints.is_empty() {
        return (Vec::new(), added);
    }
    let mut ops = Vec::new();
    match node.spec.as_ref() {
        None => ops.push(json!({"op": "add", "path": "/spec", "value": {"taints": new_taints}})),
        Some(s) if s.taints.is_none() => {
            ops.push(json!({"op": "add", "path": "/spec/taints", "value": new_taints}))
        }
        Some(_) => ops.extend(
            new_taints
                .iter()
                .map(|t| json!({"op": "add", "path": "/spec/taints/-", "value": t})),
        ),
    }
    let annotation = managed
        .to_annotation()
        .expect("at least one taint was added");
    match node.metadata.annotations.as_ref() {
        None => ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {MANAGED_TAINTS_ANNOTATION: annotation}})),
        Some(_) => ops.push(json!({"op": "add", "path": "/metadata/annotations/nodetaint.io~1managed-taints", "value": annotation})),
    }
    (ops, added)
}

/// Answers one Node review from the policy cache (see [`super::review`]).
/// `synced` says whether the policy cache has listed.
pub fn review(synced: bool, set: &PolicySet, body: Value) -> Answer {
    super::review(body, |req| respond(synced, set, req))
}

fn respond(
    synced: bool,
    set: &PolicySet,
    req: &AdmissionRequest<DynamicObject>,
) -> (AdmissionResponse, Outcome) {
    let allow = AdmissionResponse::from(req);
    if req.kind.kind != "Node" || req.operation != Operation::Create {
        let mut resp = allow;
        resp.warnings = Some(vec![format!(
            "taint-operator webhook only mutates Node CREATE; {} {:?} let through unchanged",
            req.kind.kind, req.operation
        )]);
        return (resp, Outcome::Allowed);
    }
    if !synced {
        // Letting the node in untainted would break the readiness guarantee; the kubelet retries registration.
        return (
            allow.deny("taint-operator: policy cache not synced yet; retry shortly"),
            Outcome::Unavailable,
        );
    }
    let Some(obj) = &req.object else {
        return (
            allow.deny("Node CREATE review without an object"),
            Outcome::Error,
        );
    };
    let node: Node = match serde_json::to_value(obj).and_then(serde_json::from_value) {
        Ok(n) => n,
        Err(e) => {
            return (
                allow.deny(format!("cannot read the Node in the review: {e}")),
                Outcome::Error,
            );
        }
    };
    let (ops, added) = node_patch(set, &node);
    if ops.is_empty() {
        return (allow, Outcome::Allowed);
    }
    let name = node.metadata.name.as_deref().unwrap_or("");
    tracing::info!(node = name, taints = %added.join(", "), "webhook: tainting new node");
    let patched = serde_json::from_value::<json_patch::Patch>(Value::Array(ops))
        .map_err(|e| format!("cannot build patch: {e}"))
        .and_then(|patch| {
            allow
                .clone()
                .with_patch(patch)
                .map_err(|e| format!("cannot encode patch: {e}"))
        });
    match patched {
        Ok(r) => (r, Outcome::Allowed),
        Err(e) => (allow.deny(e), Outcome::Error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Outcome;
    use k8s_openapi::{
        api::core::v1::{NodeSpec, Taint},
        apimachinery::pkg::apis::meta::v1::Time,
    };
    use kube::api::ObjectMeta;
    use taint_operator_crd::{TaintPolicy, TaintPolicySpec};

    fn policy(name: &str, created: &str, spec: Value) -> TaintPolicy {
        let spec: TaintPolicySpec = serde_json::from_value(spec).unwrap();
        let mut p = TaintPolicy::new(name, spec);
        p.metadata.uid = Some(format!("uid-{name}"));
        p.metadata.creation_timestamp = Some(Time(created.parse().unwrap()));
        p
    }

    fn readiness(key: &str, extra: Value) -> Value {
        let mut spec = json!({
            "taints": [{"key": key, "effect": "NoSchedule"}],
            "readiness": {"conditions": [{"type": "example.net/NetworkReady", "status": "True"}]},
            "nodeSelector": {"matchLabels": {"pool": "a"}}
        });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    }

    fn node(
        labels: &[(&str, &str)],
        taints: Option<Vec<Taint>>,
        annotations: Option<Vec<(&str, &str)>>,
    ) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("new-node".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                annotations: annotations.map(|a| {
                    a.into_iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect()
                }),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints,
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            value: None,
            time_added: None,
        }
    }

    fn set(policies: &[TaintPolicy]) -> PolicySet {
        PolicySet::from_resources(policies)
    }

    #[test]
    fn never_puts_out_of_service_on_a_node_that_registers_ready() {
        let s = set(&[policy(
            "oos",
            "2026-01-01T00:00:00Z",
            readiness("node.kubernetes.io/out-of-service", json!({})),
        )]);
        let mut running = node(&[("pool", "a")], None, None);
        running.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let (ops, added) = node_patch(&s, &running);
        assert!(ops.is_empty() && added.is_empty(), "{ops:?}");
        // Not reporting yet: nothing runs there, the taint goes on as for any readiness taint.
        let (ops, _) = node_patch(&s, &node(&[("pool", "a")], None, None));
        assert_eq!(ops.len(), 2, "{ops:?}");
    }

    #[test]
    fn adds_readiness_taints_and_ownership_to_a_bare_node() {
        let s = set(&[policy(
            "cni",
            "2026-01-01T00:00:00Z",
            readiness("example.net/not-ready", json!({})),
        )]);
        let (ops, _) = node_patch(&s, &node(&[("pool", "a")], None, None));
        assert_eq!(
            ops,
            vec![
                json!({"op": "add", "path": "/spec/taints", "value": [{"key": "example.net/not-ready", "effect": "NoSchedule"}]}),
                json!({"op": "add", "path": "/metadata/annotations", "value": {"nodetaint.io/managed-taints": "{\"example.net/not-ready:NoSchedule\":\"cni\"}"}}),
            ]
        );
    }

    #[test]
    fn appends_to_what_the_node_registered_with_and_never_duplicates() {
        let s = set(&[
            policy(
                "cni",
                "2026-01-01T00:00:00Z",
                readiness("example.net/not-ready", json!({})),
            ),
            policy(
                "storage",
                "2026-01-02T00:00:00Z",
                readiness("example.net/storage", json!({})),
            ),
        ]);
        // The node registered with its own taint, and already has storage's key+effect.
        let n = node(
            &[("pool", "a")],
            Some(vec![
                taint("dedicated", "NoSchedule"),
                taint("example.net/storage", "NoSchedule"),
            ]),
            Some(vec![("other", "x")]),
        );
        let (ops, _) = node_patch(&s, &n);
        assert_eq!(
            ops,
            vec![
                json!({"op": "add", "path": "/spec/taints/-", "value": {"key": "example.net/not-ready", "effect": "NoSchedule"}}),
                json!({"op": "add", "path": "/metadata/annotations/nodetaint.io~1managed-taints", "value": "{\"example.net/not-ready:NoSchedule\":\"cni\"}"}),
            ]
        );
    }

    #[test]
    fn leaves_alone_nodes_no_active_readiness_policy_selects() {
        let matcher_only = json!({"taints": [{"key": "m", "effect": "NoSchedule"}], "matchers": [{"conditions": [{"type": "A", "status": "B"}]}]});
        let s = set(&[
            policy("matcher", "2026-01-01T00:00:00Z", matcher_only),
            policy(
                "dry",
                "2026-01-01T00:00:01Z",
                readiness("d", json!({"dryRun": true})),
            ),
            policy(
                "suspended",
                "2026-01-01T00:00:03Z",
                readiness("s", json!({"suspend": true})),
            ),
            policy(
                "invalid",
                "2026-01-01T00:00:02Z",
                readiness(
                    "i",
                    json!({"readiness": {"conditions": [{"type": "X", "status": "("}]}}),
                ),
            ),
        ]);
        assert!(
            node_patch(&s, &node(&[("pool", "a")], None, None))
                .0
                .is_empty()
        );
        let s = set(&[policy(
            "cni",
            "2026-01-01T00:00:00Z",
            readiness("example.net/not-ready", json!({})),
        )]);
        assert!(
            node_patch(&s, &node(&[("pool", "b")], None, None))
                .0
                .is_empty()
        );
    }

    #[test]
    fn bootstrap_completed_for_this_uid_is_not_tainted_again() {
        let s = set(&[policy(
            "boot",
            "2026-01-01T00:00:00Z",
            readiness("startup", json!({"mode": "BootstrapOnly"})),
        )]);
        let done = node(
            &[("pool", "a")],
            None,
            Some(vec![(
                "nodetaint.io/bootstrapped",
                r#"{"boot":"uid-boot@2026-01-01T00:00:00Z"}"#,
            )]),
        );
        assert!(node_patch(&s, &done).0.is_empty());
        let other_uid = node(
            &[("pool", "a")],
            None,
            Some(vec![(
                "nodetaint.io/bootstrapped",
                r#"{"boot":"uid-old@2026-01-01T00:00:00Z"}"#,
            )]),
        );
        assert_eq!(node_patch(&s, &other_uid).0.len(), 2);
    }

    #[test]
    fn a_conflict_loser_adds_nothing() {
        let s = set(&[
            policy(
                "newer",
                "2026-02-01T00:00:00Z",
                readiness("shared", json!({})),
            ),
            policy(
                "older",
                "2026-01-01T00:00:00Z",
                readiness("shared", json!({})),
            ),
        ]);
        let (_, added) = node_patch(&s, &node(&[("pool", "a")], None, None));
        assert_eq!(added, vec!["shared:NoSchedule (older)"]);
    }

    fn admission(kind: &str, operation: &str, object: Value) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "req-1",
                "kind": {"group": "", "version": "v1", "kind": kind},
                "resource": {"group": "", "version": "v1", "resource": "nodes"},
                "operation": operation,
                "userInfo": {"username": "system:node:new-node"},
                "object": object,
                "dryRun": false
            }
        })
    }

    #[test]
    fn review_patches_a_node_create() {
        let s = set(&[policy(
            "cni",
            "2026-01-01T00:00:00Z",
            readiness("example.net/not-ready", json!({})),
        )]);
        let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "new-node", "labels": {"pool": "a"}}, "spec": {}});
        let out = review(true, &s, admission("Node", "CREATE", obj));
        assert_eq!(
            (out.outcome, out.operation.as_str()),
            (Outcome::Allowed, "CREATE")
        );
        let resp = &out.body["response"];
        assert_eq!(resp["uid"], "req-1");
        assert_eq!(resp["allowed"], true);
        assert_eq!(resp["patchType"], "JSONPatch");
        // kube sends the patch bytes as a JSON list of numbers, which Go decodes into []byte.
        let bytes: Vec<u8> = serde_json::from_value(resp["patch"].clone()).unwrap();
        let patch: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            patch[0],
            json!({"op": "add", "path": "/spec/taints", "value": [{"key": "example.net/not-ready", "effect": "NoSchedule"}]})
        );
    }

    #[test]
    fn review_answers_every_problem_with_a_message() {
        let s = set(&[]);
        let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}});
        let unsynced = review(false, &s, admission("Node", "CREATE", obj.clone()));
        assert_eq!(unsynced.outcome, Outcome::Unavailable);
        let unsynced = unsynced.body;
        assert_eq!(unsynced["response"]["allowed"], false);
        assert!(
            unsynced["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .contains("not synced")
        );

        let other = review(
            true,
            &s,
            admission(
                "Pod",
                "CREATE",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
            ),
        )
        .body;
        assert_eq!(other["response"]["allowed"], true);
        assert!(other["response"]["patch"].is_null());
        assert!(
            other["response"]["warnings"][0]
                .as_str()
                .unwrap()
                .contains("only mutates Node CREATE")
        );

        let malformed = review(true, &s, json!({"kind": "AdmissionReview", "request": 42}));
        assert_eq!(malformed.outcome, Outcome::Error);
        let malformed = malformed.body;
        assert_eq!(malformed["response"]["allowed"], false);
        assert!(
            malformed["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .contains("malformed AdmissionReview")
        );

        let nothing_to_add = review(true, &s, admission("Node", "CREATE", obj)).body;
        assert_eq!(nothing_to_add["response"]["allowed"], true);
        assert!(nothing_to_add["response"]["patch"].is_null());
    }
}
