//! The policy controller and the status writer against a mocked API server:
//! the finalizer, cleanup on delete, status patches, dry runs and invalid specs.

mod support;

use std::{collections::BTreeSet, time::Duration};

use http::Method;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use support::{
    NoExecute, NoSchedule, cond, harness, harness_with_grace, policy, ready_condition, scenario,
    served_node,
    verifier::{EVENTS_PATH, FIELD_MANAGER_QUERY, JSON_PATCH, MERGE_PATCH, assert_event},
};
use taint_operator::{
    controller::context::CleanupGrace, controller::node_reconciler::reconcile_node,
    controller::policy_reconciler::reconcile_policy, controller::policy_status::refresh_all,
};
use taint_operator_crd::{Mode, TaintEffect, TaintPolicy, TaintPolicyStatus};

const NIC: &str = "NetworkInterfaceCard";
const POLICIES: &str = "/apis/nodetaint.io/v1alpha1/taintpolicies";
const MANAGED_PATH: &str = "/metadata/annotations/nodetaint.io~1managed-taints";
const BOOTSTRAPPED_PATH: &str = "/metadata/annotations/nodetaint.io~1bootstrapped";

fn nic_policy() -> support::PolicyBuilder {
    policy("nic-broken")
        .taint_opt(
            "example.com/nic-broken",
            Some("true"),
            TaintEffect::NoExecute,
        )
        .matcher([cond(NIC, "Kaput|Ruined")])
}

fn test_rv(rv: &str) -> Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
}

fn policy_ref(name: &str) -> Value {
    json!({"apiVersion": "nodetaint.io/v1alpha1", "kind": "TaintPolicy", "name": name, "uid": format!("uid-{name}")})
}

fn as_json(p: &TaintPolicy) -> Value {
    serde_json::to_value(p).unwrap()
}

// ------------------------------------------------------------------ finalizer

#[tokio::test]
async fn a_new_policy_gets_the_finalizer_first() {
    let p = nic_policy().unfinalized().build();
    let (h, api) = harness(std::slice::from_ref(&p), &[]);
    let reply = {
        let mut p = p.clone();
        p.metadata.finalizers = Some(vec!["nodetaint.io/cleanup".into()]);
        as_json(&p)
    };
    let action = scenario(
        h,
        api,
        |mut api| async move {
            let call = api
                .expect(Method::PATCH, &format!("{POLICIES}/nic-broken"), None)
                .await;
            assert_eq!(call.content_type.as_deref(), Some(JSON_PATCH));
            assert_eq!(
                call.body,
                json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["nodetaint.io/cleanup"]},
                ])
            );
            call.reply(200, &reply);
            api
        },
        |h| async move {
            reconcile_policy(h.policy("nic-broken"), h.ctx.clone())
                .await
                .unwrap()
        },
    )
    .await;
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn the_finalizer_is_appended_after_someone_elses() {
    let mut p = nic_policy().unfinalized().build();
    p.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    let (h, api) = harness(std::slice::from_ref(&p), &[]);
    let reply = as_json(&p);
    scenario(
        h,
        api,
        |mut api| async move {
            let call = api
                .expect(Method::PATCH, &format!("{POLICIES}/nic-broken"), None)
                .await;
            assert_eq!(
                call.body,
                json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": ["example.com/keep"]},
                    {"op": "add", "path": "/metadata/finalizers/-", "value": "nodetaint.io/cleanup"},
                ])
            );
            call.reply(200, &reply);
            api
        },
        |h| async move {
            reconcile_policy(h.policy("nic-broken"), h.ctx.clone())
                .await
                .unwrap()
        },
    )
    .await;
}

#[tokio::test]
async fn a_finalized_policy_sends_nothing_and_wakes_the_status_writer() {
    let p = nic_policy().build();
    let n1 = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[p], &[n1]);
    scenario(
        h,
        api,
        |api| async move { api },
        |h| async move {
            let action = reconcile_policy(h.policy("nic-broken"), h.ctx.clone())
                .await
                .unwrap();
            assert_eq!(action, Action::await_change());
            // The status writer has been asked to run.
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                h.ctx.status_refresh.notified(),
            )
            .await
            .expect("status refresh was requested");
        },
    )
    .await;
}

/// A BootstrapOnly readiness policy, deleted: its finalizer holds it.
fn cni_policy() -> support::PolicyBuilder {
    policy("cni-not-ready")
        .taint_opt("example.com/cni-not-ready", None, TaintEffect::NoSchedule)
        .ready_when("example.net/NetworkReady", "True")
        .mode(Mode::BootstrapOnly)
}

fn other_policy() -> TaintPolicy {
    policy("disk-full")
        .taint_opt("example.com/disk-full", None, TaintEffect::NoSchedule)
        .matcher([cond("DiskPressure", "True")])
        .build()
}

#[tokio::test]
async fn deleting_a_policy_cleans_every_node_that_mentions_it_then_drops_the_finalizer() {
    let live = cni_policy().build();
    let mut deleting = cni_policy().deleting().build();
    deleting.metadata.finalizers = Some(vec![
        "example.com/keep".into(),
        "nodetaint.io/cleanup".into(),
    ]);
    let nodes = [
        // Still not ready: carries the owned taint, next to someone else's.
        served_node("n1")
            .taint_opt("example.com/foreign", None, NoSchedule)
            .taint_opt("example.com/cni-not-ready", None, NoSchedule)
            .owned(&[("example.com/cni-not-ready:NoSchedule", "cni-not-ready")])
            .build(),
        // Completed long ago: only its bootstrap record, next to another policy's taint.
        served_node("n2")
            .condition("example.net/NetworkReady", "True")
            .condition("DiskPressure", "True")
            .taint_opt("example.com/disk-full", None, NoSchedule)
            .owned(&[("example.com/disk-full:NoSchedule", "disk-full")])
            .annotation(
                "nodetaint.io/bootstrapped",
                r#"{"cni-not-ready":"uid-cni-not-ready@2026-11-20T10:00:00Z"}"#,
            )
            .build(),
        // Does not mention the policy: an identical taint someone else put there stays.
        served_node("n3")
            .taint_opt("example.com/cni-not-ready", None, NoSchedule)
            .build(),
    ];
    // The policy watcher has not seen the deletion yet: the set still has it live.
    let (h, api) = harness(&[live, other_policy()], &nodes);
    let reply = {
        let mut p = deleting.clone();
        p.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        as_json(&p)
    };
    let action = scenario(
        h,
        api,
        |mut api| async move {
            // Nodes are cleaned concurrently: take their requests in any order. The
            // event is published on its own task: it may also come after the finalizer.
            let mut pending: BTreeSet<&str> = ["n1 patch", "n1 event", "n2 patch"].into();
            let mut event_seen = false;
            while pending.iter().any(|p| p.ends_with("patch")) {
                let call = api.next_call(&format!("{pending:?}")).await;
                match (call.method.as_str(), call.path.as_str()) {
                    ("PATCH", "/api/v1/nodes/n1") => {
                        assert!(pending.remove("n1 patch"), "n1 patched twice");
                        assert_eq!(call.query_pairs(), vec![("fieldManager".into(), "taint-operator".into())]);
                        assert_eq!(
                            call.body,
                            json!([
                                test_rv("100"),
                                {"op": "add", "path": "/spec/taints", "value": [{"key": "example.com/foreign", "effect": "NoSchedule"}]},
                                {"op": "remove", "path": MANAGED_PATH},
                            ])
                        );
                        let written = api.apply_node_patch("n1", &call.body).unwrap();
                        call.reply(200, &written);
                    }
                    ("PATCH", "/api/v1/nodes/n2") => {
                        assert!(pending.remove("n2 patch"), "n2 patched twice");
                        assert_eq!(
                            call.body,
                            json!([
                                test_rv("100"),
                                {"op": "remove", "path": BOOTSTRAPPED_PATH},
                            ])
                        );
                        let written = api.apply_node_patch("n2", &call.body).unwrap();
                        assert_eq!(
                            written["spec"]["taints"],
                            json!([{"key": "example.com/disk-full", "effect": "NoSchedule"}])
                        );
                        call.reply(200, &written);
                    }
                    ("POST", EVENTS_PATH) => {
                        assert!(!pending.contains("n1 patch"), "event before the write");
                        assert!(pending.remove("n1 event"), "a second event");
                        assert_cleanup_event(&call.body);
                        event_seen = true;
                        let body = call.body.clone();
                        call.reply(201, &body);
                    }
                    _ => panic!("unexpected request during cleanup: {}", call.describe()),
                }
            }
            // Only then, the finalizer goes: by index, guarded by a test of that index.
            let call = api
                .expect(Method::PATCH, &format!("{POLICIES}/cni-not-ready"), None)
                .await;
            assert_eq!(call.content_type.as_deref(), Some(JSON_PATCH));
            assert_eq!(
                call.body,
                json!([
                    {"op": "test", "path": "/metadata/finalizers/1", "value": "nodetaint.io/cleanup"},
                    {"op": "remove", "path": "/metadata/finalizers/1"},
                ])
            );
            call.reply(200, &reply);
            if !event_seen {
                assert_cleanup_event(&api.expect_event().await);
            }
            api
        },
        |h| async move {
            reconcile_policy(std::sync::Arc::new(deleting), h.ctx.clone())
                .await
                .unwrap()
        },
    )
    .await;
    assert_eq!(action, Action::await_change());
}

fn assert_cleanup_event(event: &serde_json::Value) {
    assert_event(
        event,
        "Normal",
        "TaintRemoved",
        "RemoveTaint",
        "policy cni-not-ready removed example.com/cni-not-ready:NoSchedule: policy is being deleted",
        json!({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1"}),
    );
}

#[tokio::test]
async fn a_failed_cleanup_keeps_the_finalizer() {
    let deleting = nic_policy().deleting().build();
    let n1 = served_node("n1")
        .condition(NIC, "Kaput")
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
        .build();
    let (h, api) = harness(std::slice::from_ref(&deleting), &[n1]);
    let result = scenario(
        h,
        api,
        |mut api| async move {
            let call = api
                .expect(Method::PATCH, "/api/v1/nodes/n1", Some(FIELD_MANAGER_QUERY))
                .await;
            call.reply_status(&json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500
            }));
            // No finalizer patch follows.
            api
        },
        |h| async move { reconcile_policy(h.policy("nic-broken"), h.ctx.clone()).await },
    )
    .await;
    let err = result.expect_err("cleanup failed");
    assert_eq!(err.category(), "CleanupPending");
}

/// The policy watcher has seen the deletion, so the node controller removes the
/// taints; cleanup waits for that instead of racing it for the same nodes.
#[tokio::test]
async fn cleanup_leaves_the_nodes_to_the_node_controller() {
    let deleting = nic_policy().deleting().build();
    let tainted = served_node("n1")
        .condition(NIC, "Kaput")
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")]);
    let cleaned = served_node("n1").condition(NIC, "Kaput").build();
    let grace = CleanupGrace {
        watcher: Duration::ZERO,
        node_controller_stall: Duration::from_secs(5),
    };
    let (h, api) = harness_with_grace(std::slice::from_ref(&deleting), &[tainted.build()], grace);
    let action = scenario(
        h,
        api,
        |mut api| async move {
            // No node write: only the finalizer goes.
            let call = api
                .expect(Method::PATCH, &format!("{POLICIES}/nic-broken"), None)
                .await;
            assert_eq!(
                call.body[1],
                json!({"op": "remove", "path": "/metadata/finalizers/0"})
            );
            let mut reply = deleting.clone();
            reply.metadata.finalizers = None;
            call.reply(200, &as_json(&reply));
            api
        },
        |mut h| async move {
            let cleanup = reconcile_policy(h.policy("nic-broken"), h.ctx.clone());
            let node_controller = async {
                tokio::time::sleep(Duration::from_millis(150)).await;
                h.put_node(cleaned);
            };
            tokio::join!(cleanup, node_controller).0.unwrap()
        },
    )
    .await;
    assert_eq!(action, Action::await_change());
}

/// The node controller did not clean the node within its grace: cleanup writes it.
#[tokio::test]
async fn cleanup_writes_what_the_node_controller_left() {
    let deleting = nic_policy().deleting().build();
    let n1 = served_node("n1")
        .condition(NIC, "Kaput")
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
        .build();
    let grace = CleanupGrace {
        watcher: Duration::ZERO,
        node_controller_stall: Duration::from_millis(300),
    };
    let (h, api) = harness_with_grace(std::slice::from_ref(&deleting), &[n1], grace);
    let started = std::time::Instant::now();
    let result = scenario(
        h,
        api,
        |mut api| async move {
            let call = api
                .expect(Method::PATCH, "/api/v1/nodes/n1", Some(FIELD_MANAGER_QUERY))
                .await;
            call.reply_status(&json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500
            }));
            api
        },
        |h| async move { reconcile_policy(h.policy("nic-broken"), h.ctx.clone()).await },
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "it waited first"
    );
    assert_eq!(
        result.expect_err("cleanup failed").category(),
        "CleanupPending"
    );
}

#[tokio::test]
async fn a_deleted_policy_without_our_finalizer_is_left_alone() {
    let mut p = nic_policy().deleting().build();
    p.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    let n1 = served_node("n1")
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
        .build();
    let (h, api) = harness(std::slice::from_ref(&p), &[n1]);
    scenario(
        h,
        api,
        |api| async move { api },
        |h| async move {
            reconcile_policy(h.policy("nic-broken"), h.ctx.clone())
                .await
                .unwrap()
        },
    )
    .await;
}

// --------------------------------------------------------------------- status

fn status_path(name: &str) -> String {
    format!("{POLICIES}/{name}/status")
}

/// Expects the status merge patch of `name` with exactly `status`, and answers it.
async fn expect_status(api: &mut support::ApiServerVerifier, policy: &TaintPolicy, status: Value) {
    let name = policy.metadata.name.as_deref().unwrap();
    let call = api
        .expect(Method::PATCH, &status_path(name), Some(FIELD_MANAGER_QUERY))
        .await;
    assert_eq!(call.content_type.as_deref(), Some(MERGE_PATCH));
    assert_eq!(
        call.body,
        json!({ "status": status }),
        "status patch\n got: {:#}",
        call.body
    );
    let mut reply = as_json(policy);
    reply["status"] = status;
    call.reply(200, &reply);
}

fn two_taint_policy() -> support::PolicyBuilder {
    nic_policy()
        .taint_opt("example.com/nic-broken", None, TaintEffect::NoSchedule)
        .generation(3)
}

fn broken_and_tainted(name: &str) -> k8s_openapi::api::core::v1::Node {
    served_node(name)
        .condition(NIC, "Kaput")
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .taint_opt("example.com/nic-broken", None, NoSchedule)
        .owned(&[
            ("example.com/nic-broken:NoExecute", "nic-broken"),
            ("example.com/nic-broken:NoSchedule", "nic-broken"),
        ])
        .build()
}

#[tokio::test]
async fn status_is_patched_exactly_once_and_not_again_when_equal() {
    let p = two_taint_policy().build();
    let nodes = [
        broken_and_tainted("zeta"),
        served_node("mid").condition(NIC, "Healthy").build(),
        broken_and_tainted("alpha"),
    ];
    let (h, api) = harness(std::slice::from_ref(&p), &nodes);
    let status = json!({
        "observedGeneration": 3,
        "taints": "example.com/nic-broken=true:NoExecute,example.com/nic-broken:NoSchedule",
        "selectedNodes": 3,
        "taintedNodes": 2,
        "pendingNodes": 0,
        "drainingNodes": 0,
        "taintedNodeNames": ["alpha", "zeta"],
        "conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "Reconciled",
            "message": "2 of 3 selected nodes tainted",
            "observedGeneration": 3,
            "lastTransitionTime": "2026-11-20T12:00:00Z",
        }],
    });
    let written: TaintPolicyStatus = serde_json::from_value(status.clone()).unwrap();
    let metrics = h.metrics();
    scenario(
        h,
        api,
        {
            let p = p.clone();
            |mut api| async move {
                expect_status(&mut api, &p, status).await;
                api
            }
        },
        |mut h| async move {
            refresh_all(&h.ctx).await.unwrap();
            // The watch brings our write back; the next refresh has nothing to say.
            let mut p = p;
            p.status = Some(written);
            h.put_policy(p);
            refresh_all(&h.ctx).await.unwrap();
        },
    )
    .await;
    assert_eq!(metrics.status_writes.get(), 1);
    let encoded = metrics.encode();
    for line in [
        "taint_operator_tainted_nodes{policy=\"nic-broken\"} 2",
        "taint_operator_pending_nodes{policy=\"nic-broken\"} 0",
        "taint_operator_policy_ready{policy=\"nic-broken\"} 1",
    ] {
        assert!(encoded.contains(line), "{line} not in\n{encoded}");
    }
}

/// A replica frozen past its renew deadline may wake with the status writer's timer
/// due: the write fence, shut by the clock alone, keeps its stale status off the
/// policy (the mock answers no request, so any patch would fail the test).
#[tokio::test]
async fn a_replica_past_its_renew_deadline_writes_no_status() {
    let p = two_taint_policy().build();
    let nodes = [broken_and_tainted("alpha")];
    let (h, api) = harness(std::slice::from_ref(&p), &nodes);
    h.ctx.fence.close();
    let metrics = h.metrics();
    scenario(
        h,
        api,
        |api| async move { api },
        |h| async move {
            let error = refresh_all(&h.ctx).await.unwrap_err();
            assert_eq!(error.category(), "NotLeading");
            assert!(
                error
                    .to_string()
                    .starts_with("taintpolicy nic-broken status: not written"),
                "{error}"
            );
        },
    )
    .await;
    assert_eq!(metrics.status_writes.get(), 0);
}

/// The per-policy gauges of a policy that is gone must go too: a deleted policy that
/// stayed "not ready" would page someone forever.
#[tokio::test]
async fn a_deleted_policy_loses_its_gauges() {
    let kept = other_policy();
    // A cap of 0 holds its one matching node back: not Ready, one node pending.
    let gone = nic_policy().max_tainted(0).build();
    let nodes = [served_node("n1").condition(NIC, "Kaput").build()];
    let (h, api) = harness(&[kept.clone(), gone.clone()], &nodes);
    let metrics = h.metrics();
    scenario(
        h,
        api,
        |mut api| async move {
            // Both statuses, then the kept one again (its write never came back
            // through a watch here); their content is checked by the tests above.
            let mut written = Vec::new();
            for _ in 0..3 {
                let call = api.next_call("a status patch").await;
                assert!(call.path.ends_with("/status"), "{}", call.describe());
                let name = call.path.split('/').nth_back(1).unwrap().to_string();
                let mut reply = as_json(if name == "nic-broken" { &gone } else { &kept });
                reply["status"] = call.body["status"].clone();
                call.reply(200, &reply);
                written.push(name);
            }
            written[..2].sort();
            assert_eq!(written, ["disk-full", "nic-broken", "disk-full"]);
            api
        },
        |mut h| async move {
            refresh_all(&h.ctx).await.unwrap();
            let encoded = h.metrics().encode();
            for line in [
                "taint_operator_policy_ready{policy=\"nic-broken\"} 0",
                "taint_operator_pending_nodes{policy=\"nic-broken\"} 1",
                "taint_operator_policy_ready{policy=\"disk-full\"} 1",
            ] {
                assert!(encoded.contains(line), "{line} not in\n{encoded}");
            }
            h.remove_policy("nic-broken");
            h.compile_policies();
            refresh_all(&h.ctx).await.unwrap();
        },
    )
    .await;
    let encoded = metrics.encode();
    assert!(!encoded.contains("policy=\"nic-broken\""), "{encoded}");
    assert!(
        encoded.contains("taint_operator_policy_ready{policy=\"disk-full\"} 1"),
        "{encoded}"
    );
}

#[tokio::test]
async fn last_transition_time_moves_only_when_ready_changes() {
    // Written a while ago, when one node was selected.
    let old = TaintPolicyStatus {
        observed_generation: Some(3),
        taints: Some(
            "example.com/nic-broken=true:NoExecute,example.com/nic-broken:NoSchedule".into(),
        ),
        selected_nodes: 1,
        tainted_nodes: 1,
        pending_nodes: 0,
        draining_nodes: 0,
        tainted_node_names: vec!["alpha".into()],
        conditions: vec![ready_condition(
            "True",
            "Reconciled",
            "1 of 1 selected nodes tainted",
            3,
            "2026-11-01T08:00:00Z",
        )],
    };
    let p = two_taint_policy().status(old).build();
    let nodes = [
        broken_and_tainted("alpha"),
        served_node("beta").condition(NIC, "Healthy").build(),
    ];
    let (h, api) = harness(std::slice::from_ref(&p), &nodes);
    let still_ready = json!({
        "observedGeneration": 3,
        "taints": "example.com/nic-broken=true:NoExecute,example.com/nic-broken:NoSchedule",
        "selectedNodes": 2,
        "taintedNodes": 1,
        "pendingNodes": 0,
        "drainingNodes": 0,
        "taintedNodeNames": ["alpha"],
        "conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "Reconciled",
            "message": "1 of 2 selected nodes tainted",
            "observedGeneration": 3,
            // Same Ready status, new message: the transition time stays.
            "lastTransitionTime": "2026-11-01T08:00:00Z",
        }],
    });
    let progressing = json!({
        "observedGeneration": 3,
        "taints": "example.com/nic-broken=true:NoExecute,example.com/nic-broken:NoSchedule",
        "selectedNodes": 2,
        "taintedNodes": 2,
        "pendingNodes": 0,
        "drainingNodes": 0,
        "taintedNodeNames": ["alpha", "beta"],
        "conditions": [{
            "type": "Ready",
            "status": "False",
            "reason": "Progressing",
            "message": "1 node(s) still to change; 2 of 2 selected nodes tainted",
            "observedGeneration": 3,
            "lastTransitionTime": "2026-11-20T12:00:00Z",
        }],
    });
    let still_ready_status: TaintPolicyStatus =
        serde_json::from_value(still_ready.clone()).unwrap();
    scenario(
        h,
        api,
        {
            let p = p.clone();
            |mut api| async move {
                expect_status(&mut api, &p, still_ready).await;
                expect_status(&mut api, &p, progressing).await;
                api
            }
        },
        |mut h| async move {
            refresh_all(&h.ctx).await.unwrap();
            let mut p = p;
            p.status = Some(still_ready_status);
            h.put_policy(p);
            // beta's NIC breaks; its taint is not on yet.
            h.put_node(served_node("beta").condition(NIC, "Kaput").build());
            refresh_all(&h.ctx).await.unwrap();
        },
    )
    .await;
}

// -------------------------------------------------------------------- dry run

#[tokio::test]
async fn a_dry_run_touches_no_node_and_reports_what_it_would_do() {
    let p = nic_policy().dry_run().build();
    let nodes = [
        served_node("n1").condition(NIC, "Kaput").build(),
        // Tainted before the policy became a dry run, healed since: frozen, not removed.
        served_node("n2")
            .condition(NIC, "Healthy")
            .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
            .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
            .build(),
    ];
    let (h, api) = harness(std::slice::from_ref(&p), &nodes);
    let metrics = h.metrics();
    scenario(
        h,
        api,
        {
            let p = p.clone();
            |mut api| async move {
                expect_status(
                    &mut api,
                    &p,
                    json!({
                        "observedGeneration": 1,
                        "taints": "example.com/nic-broken=true:NoExecute",
                        "selectedNodes": 2,
                        "taintedNodes": 1,
                        "pendingNodes": 0,
                        "drainingNodes": 0,
                        "taintedNodeNames": ["n1"],
                        "conditions": [{
                            "type": "Ready",
                            "status": "True",
                            "reason": "DryRun",
                            "message": "dry run: would keep 1 of 2 selected nodes tainted",
                            "observedGeneration": 1,
                            "lastTransitionTime": "2026-11-20T12:00:00Z",
                        }],
                    }),
                )
                .await;
                api
            }
        },
        |h| async move {
            for n in ["n1", "n2"] {
                let action = reconcile_node(h.node(n), h.ctx.clone()).await.unwrap();
                assert_eq!(
                    action,
                    taint_operator::controller::node_queue::Next::AwaitChange
                );
            }
            refresh_all(&h.ctx).await.unwrap();
        },
    )
    .await;
    assert_eq!(metrics.node_writes.get(), 0);
}

// ---------------------------------------------------------------- InvalidSpec

const BAD_REGEX_MESSAGE: &str =
    "spec.matchers[0].conditions[0].status: invalid regex \"Kaput(\": error: unclosed group";

#[tokio::test]
async fn an_invalid_regex_changes_no_node_and_says_which_field() {
    let p = policy("bad-regex")
        .taint_opt(
            "example.com/nic-broken",
            Some("true"),
            TaintEffect::NoExecute,
        )
        .matcher([cond(NIC, "Kaput(")])
        .build();
    let nodes = [
        served_node("n1").condition(NIC, "Kaput").build(),
        // Owned from before the edit broke the spec: frozen.
        served_node("n2")
            .condition(NIC, "Healthy")
            .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
            .owned(&[("example.com/nic-broken:NoExecute", "bad-regex")])
            .build(),
    ];
    let (h, api) = harness(std::slice::from_ref(&p), &nodes);
    let status = json!({
        "observedGeneration": 1,
        "taints": "example.com/nic-broken=true:NoExecute",
        "selectedNodes": 0,
        "taintedNodes": 0,
        "pendingNodes": 0,
        "drainingNodes": 0,
        "taintedNodeNames": [],
        "conditions": [{
            "type": "Ready",
            "status": "False",
            "reason": "InvalidSpec",
            "message": BAD_REGEX_MESSAGE,
            "observedGeneration": 1,
            "lastTransitionTime": "2026-11-20T12:00:00Z",
        }],
    });
    let written: TaintPolicyStatus = serde_json::from_value(status.clone()).unwrap();
    scenario(
        h,
        api,
        {
            let p = p.clone();
            |mut api| async move {
                expect_status(&mut api, &p, status).await;
                let event = api.expect_event().await;
                assert_event(
                    &event,
                    "Warning",
                    "InvalidSpec",
                    "Evaluate",
                    BAD_REGEX_MESSAGE,
                    policy_ref("bad-regex"),
                );
                api
            }
        },
        |mut h| async move {
            for n in ["n1", "n2"] {
                reconcile_node(h.node(n), h.ctx.clone()).await.unwrap();
            }
            refresh_all(&h.ctx).await.unwrap();
            // Once the status says so, neither the status nor the warning repeats.
            let mut p = p;
            p.status = Some(written);
            h.put_policy(p);
            refresh_all(&h.ctx).await.unwrap();
        },
    )
    .await;
}

#[tokio::test]
async fn the_newer_of_two_policies_declaring_a_taint_reports_a_conflict() {
    let older = nic_policy().build();
    let newer = policy("nic-broken-too")
        .created("2026-02-01T00:00:00Z")
        .taint_opt(
            "example.com/nic-broken",
            Some("other"),
            TaintEffect::NoExecute,
        )
        .matcher([cond(NIC, "Kaput")])
        .build();
    let n1 = served_node("n1").condition(NIC, "Healthy").build();
    let (h, api) = harness(&[newer.clone(), older.clone()], &[n1]);
    scenario(
        h,
        api,
        |mut api| async move {
            // Oldest first.
            expect_status(
                &mut api,
                &older,
                json!({
                    "observedGeneration": 1,
                    "taints": "example.com/nic-broken=true:NoExecute",
                    "selectedNodes": 1,
                    "taintedNodes": 0,
                    "pendingNodes": 0,
                    "drainingNodes": 0,
                    "taintedNodeNames": [],
                    "conditions": [{
                        "type": "Ready", "status": "True", "reason": "Reconciled",
                        "message": "0 of 1 selected nodes tainted",
                        "observedGeneration": 1, "lastTransitionTime": "2026-11-20T12:00:00Z",
                    }],
                }),
            )
            .await;
            let message = "taint example.com/nic-broken:NoExecute is owned by older policy nic-broken; 0 of 1 selected nodes tainted";
            expect_status(
                &mut api,
                &newer,
                json!({
                    "observedGeneration": 1,
                    "taints": "example.com/nic-broken=other:NoExecute",
                    "selectedNodes": 1,
                    "taintedNodes": 0,
                    "pendingNodes": 0,
                    "drainingNodes": 0,
                    "taintedNodeNames": [],
                    "conditions": [{
                        "type": "Ready", "status": "False", "reason": "Conflict",
                        "message": message,
                        "observedGeneration": 1, "lastTransitionTime": "2026-11-20T12:00:00Z",
                    }],
                }),
            )
            .await;
            let event = api.expect_event().await;
            assert_event(
                &event,
                "Warning",
                "Conflict",
                "Evaluate",
                message,
                policy_ref("nic-broken-too"),
            );
            api
        },
        |h| async move { refresh_all(&h.ctx).await.unwrap() },
    )
    .await;
}

#[tokio::test]
async fn a_policy_being_deleted_gets_no_status_write() {
    let p = nic_policy().deleting().build();
    let n1 = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[p], &[n1]);
    scenario(
        h,
        api,
        |api| async move { api },
        |h| async move { refresh_all(&h.ctx).await.unwrap() },
    )
    .await;
}

#[tokio::test]
async fn a_node_held_back_by_max_tainted_nodes_is_reported_pending() {
    let p = nic_policy().max_tainted(1).build();
    let nodes = [
        served_node("n1")
            .condition(NIC, "Kaput")
            .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
            .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
            .build(),
        served_node("n2").condition(NIC, "Ruined").build(),
    ];
    let (h, api) = harness(std::slice::from_ref(&p), &nodes);
    scenario(
        h,
        api,
        |mut api| async move {
            expect_status(
                &mut api,
                &p,
                json!({
                    "observedGeneration": 1,
                    "taints": "example.com/nic-broken=true:NoExecute",
                    "selectedNodes": 2,
                    "taintedNodes": 1,
                    "pendingNodes": 1,
                    "drainingNodes": 0,
                    "taintedNodeNames": ["n1"],
                    "conditions": [{
                        "type": "Ready", "status": "False", "reason": "LimitReached",
                        "message": "1 node(s) held back by maxTaintedNodes (limit 1); 1 of 2 selected nodes tainted",
                        "observedGeneration": 1, "lastTransitionTime": "2026-11-20T12:00:00Z",
                    }],
                }),
            )
            .await;
            api
        },
        |h| async move {
            // n2 is held back: no write.
            reconcile_node(h.node("n2"), h.ctx.clone()).await.unwrap();
            refresh_all(&h.ctx).await.unwrap();
            let encoded = h.metrics().encode();
            for line in [
                "taint_operator_pending_nodes{policy=\"nic-broken\"} 1",
                "taint_operator_policy_ready{policy=\"nic-broken\"} 0",
                "taint_operator_tainted_nodes{policy=\"nic-broken\"} 1",
            ] {
                assert!(encoded.contains(line), "{line} not in\n{encoded}");
            }
        },
    )
    .await;
}
