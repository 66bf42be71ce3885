//! The node controller against a mocked API server: every request it sends, exactly.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{
    NoExecute, NoSchedule, cond, harness, match_labels, pod, policy, scenario, served_node,
    verifier::{Call, assert_event, conflict, node_invalid, patch_not_applied, test_failed},
};
use taint_operator::controller::node_queue::{Next, Work};
use taint_operator::{
    controller::node_reconciler::{HELD_BACK_RECHECK, reconcile_named, reconcile_node},
    controller::node_writer::MAX_ATTEMPTS,
};
use taint_operator_crd::{TaintEffect, TaintPolicy};

const NIC: &str = "NetworkInterfaceCard";

/// Taints `example.com/nic-broken=true:NoExecute` while the NIC is Kaput or Ruined.
fn nic_policy() -> TaintPolicy {
    policy("nic-broken")
        .taint_opt(
            "example.com/nic-broken",
            Some("true"),
            TaintEffect::NoExecute,
        )
        .matcher([cond(NIC, "Kaput|Ruined")])
        .build()
}

fn test_rv(rv: &str) -> Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
}

fn foreign_taint() -> Value {
    json!({"key": "example.com/foreign", "effect": "NoSchedule"})
}

/// Our taint as the operator adds it: `timeAdded` is the operator's clock.
fn nic_taint_added_now() -> Value {
    json!({"key": "example.com/nic-broken", "value": "true", "effect": "NoExecute", "timeAdded": "2026-11-20T12:00:00Z"})
}

const MANAGED_PATH: &str = "/metadata/annotations/nodetaint.io~1managed-taints";
const NIC_OWNED: &str = r#"{"example.com/nic-broken:NoExecute":"nic-broken"}"#;

/// The patch that puts our taint and its ownership entry on a node at `rv` that has
/// no taints and no managed-taints annotation (or one to replace).
fn nic_taint_on_a_bare_node(rv: &str) -> Value {
    json!([
        test_rv(rv),
        {"op": "add", "path": "/spec/taints", "value": [nic_taint_added_now()]},
        {"op": "add", "path": MANAGED_PATH, "value": NIC_OWNED},
    ])
}
const ADDED_NOTE: &str = "policy nic-broken added example.com/nic-broken=true:NoExecute: condition NetworkInterfaceCard=Kaput matched";

fn node_ref(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "name": name, "uid": format!("uid-{name}")})
}

#[tokio::test]
async fn a_node_deleted_before_its_turn_is_skipped_without_a_request() {
    let n1 = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    let metrics = h.metrics();
    let next = scenario(
        h,
        api,
        |api| async move { api },
        |h| async move {
            reconcile_named(
                Work {
                    node: "gone".into(),
                    by_resync: false,
                },
                h.ctx.clone(),
            )
            .await
        },
    )
    .await;
    assert_eq!(next, Next::AwaitChange);
    assert_eq!(metrics.node_writes.get(), 0);
}

/// Whether a reconcile left the status writer a wake-up (and takes it).
fn status_writer_woken(h: &support::Harness) -> bool {
    futures::FutureExt::now_or_never(h.ctx.status_refresh.notified()).is_some()
}

/// Runs `reconcile_named` on n1 and says whether it woke the status writer.
async fn reconcile_n1_wakes_status<SF>(
    node: k8s_openapi::api::core::v1::Node,
    by_resync: bool,
    server: impl FnOnce(support::verifier::ApiServerVerifier) -> SF,
) -> bool
where
    SF: Future<Output = support::verifier::ApiServerVerifier> + Send + 'static,
{
    let (h, api) = harness(&[nic_policy()], &[node]);
    scenario(h, api, server, |h| async move {
        status_writer_woken(&h);
        let work = Work {
            node: "n1".into(),
            by_resync,
        };
        reconcile_named(work, h.ctx.clone()).await;
        status_writer_woken(&h)
    })
    .await
}

#[tokio::test]
async fn a_resync_that_finds_the_node_right_leaves_the_status_writer_asleep() {
    let right = || served_node("n1").condition(NIC, "Fine").build();
    assert!(!reconcile_n1_wakes_status(right(), true, |api| async { api }).await);
    // Queued by a watch event, the same reconcile may follow a change the status reports.
    assert!(reconcile_n1_wakes_status(right(), false, |api| async { api }).await);
}

#[tokio::test]
async fn a_resync_that_corrects_a_node_wakes_the_status_writer() {
    let broken = served_node("n1").condition(NIC, "Kaput").build();
    let woken = reconcile_n1_wakes_status(broken, true, |mut api| async move {
        api.expect_node_patch("n1", nic_taint_on_a_bare_node("100"))
            .await;
        api.expect_event().await;
        api
    })
    .await;
    assert!(woken);
}

#[tokio::test]
async fn add_one_patch_with_foreign_taints_kept_then_an_event() {
    let n1 = served_node("n1")
        .condition(NIC, "Kaput")
        .taint_opt("example.com/foreign", None, NoSchedule)
        .build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    let metrics = h.metrics();
    let action = scenario(
        h,
        api,
        |mut api| async move {
            let written = api
                .expect_node_patch(
                    "n1",
                    json!([
                        test_rv("100"),
                        {"op": "add", "path": "/spec/taints", "value": [foreign_taint(), nic_taint_added_now()]},
                        {"op": "add", "path": MANAGED_PATH, "value": NIC_OWNED},
                    ]),
                )
                .await;
            // Not ours: the other annotation is still there on the server.
            assert_eq!(
                written["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"],
                "0"
            );
            let event = api.expect_event().await;
            assert_event(
                &event,
                "Normal",
                "TaintAdded",
                "AddTaint",
                ADDED_NOTE,
                node_ref("n1"),
            );
            let note = event["note"].as_str().unwrap();
            assert!(note.contains("nic-broken") && note.contains("NetworkInterfaceCard=Kaput"));
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
    assert_eq!(action, Next::AwaitChange);
    assert_eq!(metrics.node_writes.get(), 1);
    assert_eq!(metrics.node_write_conflicts.get(), 0);
}

#[tokio::test]
async fn add_creates_the_annotation_map_on_a_node_without_annotations() {
    let n1 = served_node("n1")
        .without_annotations()
        .condition(NIC, "Ruined")
        .build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch(
                "n1",
                json!([
                    test_rv("100"),
                    {"op": "add", "path": "/spec/taints", "value": [nic_taint_added_now()]},
                    {"op": "add", "path": "/metadata/annotations", "value": {"nodetaint.io/managed-taints": NIC_OWNED}},
                ]),
            )
            .await;
            let event = api.expect_event().await;
            assert_eq!(event["reason"], "TaintAdded");
            assert_eq!(
                event["note"],
                "policy nic-broken added example.com/nic-broken=true:NoExecute: condition NetworkInterfaceCard=Ruined matched"
            );
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
}

#[tokio::test]
async fn remove_an_owned_taint_and_the_annotation_when_nothing_is_left() {
    let n1 = served_node("n1")
        .condition(NIC, "Healthy")
        .taint_opt("example.com/foreign", None, NoSchedule)
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
        .build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    let metrics = h.metrics();
    scenario(
        h,
        api,
        |mut api| async move {
            let written = api
                .expect_node_patch(
                    "n1",
                    json!([
                        test_rv("100"),
                        {"op": "add", "path": "/spec/taints", "value": [foreign_taint()]},
                        {"op": "remove", "path": MANAGED_PATH},
                    ]),
                )
                .await;
            assert_eq!(
                written["metadata"]["annotations"],
                json!({"node.alpha.kubernetes.io/ttl": "0"})
            );
            let event = api.expect_event().await;
            assert_event(
                &event,
                "Normal",
                "TaintRemoved",
                "RemoveTaint",
                "policy nic-broken removed example.com/nic-broken=true:NoExecute: no matcher matches",
                node_ref("n1"),
            );
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
    let removed = metrics.encode();
    assert!(
        removed.contains("taint_operator_taints_removed_total{policy=\"nic-broken\"} 1"),
        "{removed}"
    );
}

#[tokio::test]
async fn remove_the_last_taint_removes_the_list() {
    let n1 = served_node("n1")
        .condition(NIC, "Healthy")
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
        .build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    scenario(
        h,
        api,
        |mut api| async move {
            let written = api
                .expect_node_patch(
                    "n1",
                    json!([
                        test_rv("100"),
                        {"op": "remove", "path": "/spec/taints"},
                        {"op": "remove", "path": MANAGED_PATH},
                    ]),
                )
                .await;
            assert!(written["spec"].get("taints").is_none());
            assert_eq!(api.expect_event().await["reason"], "TaintRemoved");
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
}

#[tokio::test]
async fn remove_one_of_two_owned_taints_rewrites_the_annotation() {
    let disk = policy("disk-full")
        .taint_opt("example.com/disk-full", None, TaintEffect::NoSchedule)
        .matcher([cond("DiskPressure", "True")])
        .build();
    let n1 = served_node("n1")
        .condition(NIC, "Healthy")
        .condition("DiskPressure", "True")
        .taint_opt("example.com/disk-full", None, NoSchedule)
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[
            ("example.com/disk-full:NoSchedule", "disk-full"),
            ("example.com/nic-broken:NoExecute", "nic-broken"),
        ])
        .build();
    let (h, api) = harness(&[nic_policy(), disk], &[n1]);
    scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch(
                "n1",
                json!([
                    test_rv("100"),
                    {"op": "add", "path": "/spec/taints", "value": [{"key": "example.com/disk-full", "effect": "NoSchedule"}]},
                    {"op": "add", "path": MANAGED_PATH, "value": r#"{"example.com/disk-full:NoSchedule":"disk-full"}"#},
                ]),
            )
            .await;
            assert_eq!(api.expect_event().await["reason"], "TaintRemoved");
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
}

/// The first patch is refused because the node changed (someone added a taint);
/// the operator re-reads it and writes a patch built on the fresh node.
async fn retry_after(refusal: Value) {
    retry_after_refusal_in(refusal, Call::reply_status).await;
}

async fn retry_after_refusal_in(refusal: Value, reply: fn(Call, &Value)) {
    let cached = served_node("n1")
        .condition(NIC, "Kaput")
        .taint_opt("example.com/foreign", None, NoSchedule)
        .build();
    let (h, mut api) = harness(&[nic_policy()], std::slice::from_ref(&cached));
    // Meanwhile, on the server: an admin added a taint.
    let fresh = served_node("n1")
        .resource_version("101")
        .condition(NIC, "Kaput")
        .taint_opt("example.com/foreign", None, NoSchedule)
        .taint_opt("example.com/admin", Some("maintenance"), NoSchedule)
        .build();
    api.nodes
        .insert("n1".into(), serde_json::to_value(&fresh).unwrap());
    let metrics = h.metrics();
    scenario(
        h,
        api,
        |mut api| async move {
            let first = json!([
                test_rv("100"),
                {"op": "add", "path": "/spec/taints", "value": [foreign_taint(), nic_taint_added_now()]},
                {"op": "add", "path": MANAGED_PATH, "value": NIC_OWNED},
            ]);
            let call = api.expect_node_patch_request("n1", &first).await;
            // A real API server refuses it too: the `test` fails on the fresh node.
            assert!(api.apply_node_patch("n1", &first).is_err());
            reply(call, &refusal);
            api.expect_node_get("n1").await;
            api.expect_node_patch(
                "n1",
                json!([
                    test_rv("101"),
                    {"op": "add", "path": "/spec/taints", "value": [
                        foreign_taint(),
                        {"key": "example.com/admin", "value": "maintenance", "effect": "NoSchedule"},
                        nic_taint_added_now(),
                    ]},
                    {"op": "add", "path": MANAGED_PATH, "value": NIC_OWNED},
                ]),
            )
            .await;
            let event = api.expect_event().await;
            assert_eq!(event["reason"], "TaintAdded");
            assert_eq!(event["note"], ADDED_NOTE);
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
    assert_eq!(metrics.node_write_conflicts.get(), 1);
    assert_eq!(metrics.node_writes.get(), 2);
}

#[tokio::test]
async fn conflict_409_rereads_and_keeps_the_new_foreign_taint() {
    retry_after(conflict("n1")).await;
}

#[tokio::test]
async fn failed_test_422_as_kube_apiserver_words_it_rereads() {
    retry_after(patch_not_applied()).await;
}

#[tokio::test]
async fn failed_test_422_naming_the_test_rereads() {
    retry_after(test_failed()).await;
}

#[tokio::test]
async fn refusals_answered_in_protobuf_are_read_like_json_ones() {
    retry_after_refusal_in(conflict("n1"), Call::reply_status_protobuf).await;
    retry_after_refusal_in(patch_not_applied(), Call::reply_status_protobuf).await;
    validation_error_is_not_retried(Call::reply_status_protobuf).await;
}

/// The answer to the patch, in protobuf, is the node the cache plans on next:
/// the second reconcile finds nothing to change.
#[tokio::test]
async fn a_patch_answered_in_protobuf_is_read_like_json() {
    let n1 = served_node("n1")
        .condition(NIC, "Ruined")
        .taint_opt("example.com/foreign", None, NoSchedule)
        .build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    let metrics = h.metrics();
    scenario(
        h,
        api,
        |mut api| async move {
            let patch = json!([
                test_rv("100"),
                {"op": "add", "path": "/spec/taints", "value": [foreign_taint(), nic_taint_added_now()]},
                {"op": "add", "path": MANAGED_PATH, "value": NIC_OWNED},
            ]);
            let call = api.expect_node_patch_request("n1", &patch).await;
            let written = api.apply_node_patch("n1", &patch).unwrap();
            call.reply_node_protobuf(&written);
            assert_eq!(api.expect_event().await["reason"], "TaintAdded");
            api
        },
        |h| async move {
            reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap();
            reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap()
        },
    )
    .await;
    assert_eq!(metrics.node_writes.get(), 1);
}

#[tokio::test]
async fn a_422_validation_error_is_not_retried() {
    validation_error_is_not_retried(Call::reply_status).await;
}

async fn validation_error_is_not_retried(reply: fn(Call, &Value)) {
    let n1 = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    let metrics = h.metrics();
    let result = scenario(
        h,
        api,
        |mut api| async move {
            let call = api
                .expect_node_patch_request("n1", &nic_taint_on_a_bare_node("100"))
                .await;
            reply(call, &node_invalid("n1"));
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await },
    )
    .await;
    let err = result.expect_err("an invalid node is an error");
    assert_eq!(err.category(), "ApiError");
    assert!(err.to_string().contains("patch node n1"), "{err}");
    assert_eq!(metrics.node_write_conflicts.get(), 0);
}

// Paused time: the backoff between attempts adds up to more than half a second.
#[tokio::test(start_paused = true)]
async fn conflicts_that_never_end_give_up_after_the_last_attempt() {
    let n1 = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    let metrics = h.metrics();
    let result = scenario(
        h,
        api,
        |mut api| async move {
            for attempt in 0..MAX_ATTEMPTS {
                // Each time the server's node has moved on by one version.
                let rv = 100 + u64::from(attempt);
                let call = api
                    .expect_node_patch_request(
                        "n1",
                        &json!([
                            test_rv(&rv.to_string()),
                            {"op": "add", "path": "/spec/taints", "value": [nic_taint_added_now()]},
                            {"op": "add", "path": MANAGED_PATH, "value": NIC_OWNED},
                        ]),
                    )
                    .await;
                call.reply_status(&conflict("n1"));
                let server = api.nodes.get_mut("n1").unwrap();
                server["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
                api.expect_node_get("n1").await;
            }
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await },
    )
    .await;
    let err = result.expect_err("gives up");
    assert_eq!(err.category(), "WriteConflict");
    assert_eq!(metrics.node_write_conflicts.get(), u64::from(MAX_ATTEMPTS));
}

#[tokio::test]
async fn converged_nodes_get_no_request_at_all() {
    let nodes = [
        // Tainted and owned while the NIC is broken.
        served_node("tainted")
            .condition(NIC, "Kaput")
            .taint_opt("example.com/foreign", None, NoSchedule)
            .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
            .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
            .build(),
        // Healthy and clean.
        served_node("clean").condition(NIC, "Healthy").build(),
        // Someone else put the same taint there: never adopted, never duplicated.
        served_node("foreign-same-taint")
            .condition(NIC, "Kaput")
            .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
            .build(),
        // And it is never removed either when the NIC heals.
        served_node("foreign-healed")
            .condition(NIC, "Healthy")
            .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
            .build(),
    ];
    let (h, api) = harness(&[nic_policy()], &nodes);
    let metrics = h.metrics();
    let actions = scenario(
        h,
        api,
        |api| async move { api },
        |h| async move {
            let mut actions = Vec::new();
            for name in ["tainted", "clean", "foreign-same-taint", "foreign-healed"] {
                actions.push(reconcile_node(h.node(name), h.ctx.clone()).await.unwrap());
            }
            actions
        },
    )
    .await;
    assert!(actions.iter().all(|a| *a == Next::AwaitChange));
    assert_eq!(metrics.node_writes.get(), 0);
}

#[tokio::test]
async fn a_for_window_still_running_writes_nothing_and_comes_back_when_it_ends() {
    let mut p = nic_policy();
    p.spec.matchers[0].conditions[0].for_ = Some("90m".into());
    // The condition changed at 11:00, the clock says 12:00: 30 minutes to go.
    let n1 = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[p], &[n1]);
    let action = scenario(
        h,
        api,
        |api| async move { api },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
    assert_eq!(
        action,
        Next::After(Duration::from_secs(30 * 60) + Duration::from_millis(5))
    );
}

#[tokio::test]
async fn max_tainted_nodes_taints_the_first_node_and_holds_the_second() {
    let capped = policy("nic-broken")
        .taint_opt(
            "example.com/nic-broken",
            Some("true"),
            TaintEffect::NoExecute,
        )
        .matcher([cond(NIC, "Kaput|Ruined")])
        .max_tainted(1)
        .build();
    let nodes = [
        served_node("n1").condition(NIC, "Kaput").build(),
        served_node("n2").condition(NIC, "Kaput").build(),
    ];
    let (h, api) = harness(&[capped], &nodes);
    let (first, second, again) = scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch("n1", nic_taint_on_a_bare_node("100"))
                .await;
            assert_eq!(api.expect_event().await["reason"], "TaintAdded");
            // Nothing for n2: it is held back until there is room.
            api
        },
        |h| async move {
            let first = reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap();
            let second = reconcile_node(h.node("n2"), h.ctx.clone()).await.unwrap();
            // Reconciling it again changes nothing: n1 keeps its place, n2 waits.
            let again = reconcile_node(h.node("n2"), h.ctx.clone()).await.unwrap();
            (first, second, again)
        },
    )
    .await;
    assert_eq!(first, Next::AwaitChange);
    // n2 waits, and is looked at again in a while: nothing else would wake it
    // when n1 heals and frees the place.
    let recheck = Next::After(HELD_BACK_RECHECK + Duration::from_millis(5));
    assert_eq!(second, recheck);
    assert_eq!(again, recheck);
}

#[tokio::test]
async fn max_tainted_nodes_frees_the_place_when_the_tainted_node_heals() {
    let capped = policy("nic-broken")
        .taint_opt(
            "example.com/nic-broken",
            Some("true"),
            TaintEffect::NoExecute,
        )
        .matcher([cond(NIC, "Kaput|Ruined")])
        .max_tainted_str("50%")
        .build();
    let nodes = [
        served_node("n1")
            .condition(NIC, "Healthy")
            .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
            .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
            .build(),
        served_node("n2").condition(NIC, "Kaput").build(),
    ];
    let (h, api) = harness(&[capped], &nodes);
    let (held, woken) = scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch(
                "n1",
                json!([
                    test_rv("100"),
                    {"op": "remove", "path": "/spec/taints"},
                    {"op": "remove", "path": MANAGED_PATH},
                ]),
            )
            .await;
            // n1's event is published on its own and may come after n2's patch.
            api.expect_node_patch("n2", nic_taint_on_a_bare_node("100"))
                .await;
            let mut reasons = vec![api.expect_event().await, api.expect_event().await]
                .into_iter()
                .map(|e| e["reason"].as_str().unwrap().to_string())
                .collect::<Vec<_>>();
            reasons.sort();
            assert_eq!(reasons, ["TaintAdded", "TaintRemoved"]);
            api
        },
        |mut h| async move {
            // 50% of 2 nodes: n1 holds the one place, so n2 waits.
            let held = reconcile_node(h.node("n2"), h.ctx.clone()).await.unwrap();
            assert!(h.changed_nodes.try_recv().is_err(), "nothing to wake yet");
            // n1 heals: its taint goes, and n2 is woken for the place.
            reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap();
            let woken = h.changed_nodes.try_recv().expect("n2 is woken");
            reconcile_node(h.node("n2"), h.ctx.clone()).await.unwrap();
            (held, woken)
        },
    )
    .await;
    assert_eq!(
        held,
        Next::After(HELD_BACK_RECHECK + Duration::from_millis(5))
    );
    assert_eq!(woken, "n2");
}

#[tokio::test]
async fn readiness_policies_wait_for_their_pod_watches_before_writing() {
    let p = policy("cni-not-ready")
        .taint_opt("example.com/cni-not-ready", None, TaintEffect::NoSchedule)
        .critical_pod(
            "istio-cni",
            "kube-system",
            match_labels(&[("app", "istio")]),
        )
        .build();
    let n1 = served_node("n1").build();
    let (h, api) = harness(&[p], &[n1]);
    let action = scenario(
        h,
        api,
        |api| async move { api },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
    assert_eq!(action, Next::After(Duration::from_millis(200)));
}

#[tokio::test]
async fn readiness_taint_names_the_critical_pod_that_is_not_ready() {
    let p = policy("cni-not-ready")
        .taint_opt("example.com/cni-not-ready", None, TaintEffect::NoSchedule)
        .critical_pod(
            "istio-cni",
            "kube-system",
            match_labels(&[("app", "istio")]),
        )
        .build();
    let n1 = served_node("n1").build();
    let (h, api) = harness(&[p], &[n1]);
    {
        let mut pods = h.ctx.caches.pods_mut();
        for p in [
            pod("kube-system", "istio-cni-b")
                .on("n1")
                .label("app", "istio")
                .not_ready(),
            pod("kube-system", "istio-cni-a")
                .on("n1")
                .label("app", "istio")
                .not_ready(),
            // Ready, but on another node.
            pod("kube-system", "istio-cni-c")
                .on("n2")
                .label("app", "istio")
                .ready(),
            // Ready, on the node, but not selected.
            pod("kube-system", "other")
                .on("n1")
                .label("app", "other")
                .ready(),
        ] {
            pods.upsert(1, &p.build());
        }
    }
    scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch(
                "n1",
                json!([
                    test_rv("100"),
                    {"op": "add", "path": "/spec/taints", "value": [{"key": "example.com/cni-not-ready", "effect": "NoSchedule"}]},
                    {"op": "add", "path": MANAGED_PATH, "value": r#"{"example.com/cni-not-ready:NoSchedule":"cni-not-ready"}"#},
                ]),
            )
            .await;
            let event = api.expect_event().await;
            assert_event(
                &event,
                "Normal",
                "TaintAdded",
                "AddTaint",
                "policy cni-not-ready added example.com/cni-not-ready:NoSchedule: critical pod istio-cni is not Ready (kube-system/istio-cni-a)",
                node_ref("n1"),
            );
            api
        },
        |h| async move {
            // converge_node is what reconcile_node runs once the pod watches have listed.
            let set = h.ctx.caches.policy_set();
            let n1 = (*h.node("n1")).clone();
            taint_operator::controller::node_reconciler::converge_node(&h.ctx, set, n1)
                .await
                .unwrap()
        },
    )
    .await;
}

/// After a restart the operator has reconciled nothing yet, but a node may already
/// carry the policy's taints: that node holds the only place, whatever the order
/// the nodes are reconciled in.
#[tokio::test]
async fn max_tainted_nodes_counts_nodes_already_tainted_before_a_restart() {
    let capped = policy("nic-broken")
        .taint_opt(
            "example.com/nic-broken",
            Some("true"),
            TaintEffect::NoExecute,
        )
        .matcher([cond(NIC, "Kaput|Ruined")])
        .max_tainted(1)
        .build();
    let nodes = [
        served_node("n1")
            .condition(NIC, "Kaput")
            .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
            .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
            .build(),
        served_node("n2").condition(NIC, "Kaput").build(),
    ];
    let (h, api) = harness(&[capped], &nodes);
    let action = scenario(
        h,
        api,
        |api| async move { api },
        |h| async move { reconcile_node(h.node("n2"), h.ctx.clone()).await.unwrap() },
    )
    .await;
    // Held back: it comes back to see whether room has freed up.
    assert_eq!(
        action,
        Next::After(HELD_BACK_RECHECK + Duration::from_millis(5))
    );
}

/// Two policies taint the node in the same write: one event names both, each with
/// its policy, taint and reason (not an event per policy: a fleet-wide change
/// would cost the API server one per policy per node).
#[tokio::test]
async fn two_policies_adding_in_one_write_share_one_event() {
    let disk = policy("disk-full")
        .taint_opt("example.com/disk-full", None, TaintEffect::NoSchedule)
        .matcher([cond("DiskPressure", "True")])
        .created("2026-01-02T00:00:00Z")
        .build();
    let n1 = served_node("n1")
        .condition(NIC, "Kaput")
        .condition("DiskPressure", "True")
        .build();
    let (h, api) = harness(&[nic_policy(), disk], &[n1]);
    scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch(
                "n1",
                json!([
                    test_rv("100"),
                    {"op": "add", "path": "/spec/taints", "value": [
                        {"key": "example.com/disk-full", "effect": "NoSchedule"},
                        nic_taint_added_now(),
                    ]},
                    {"op": "add", "path": MANAGED_PATH, "value": r#"{"example.com/disk-full:NoSchedule":"disk-full","example.com/nic-broken:NoExecute":"nic-broken"}"#},
                ]),
            )
            .await;
            let event = api.expect_event().await;
            assert_eq!(event["reason"], "TaintAdded");
            assert_eq!(
                event["note"],
                format!(
                    "policy disk-full added example.com/disk-full:NoSchedule: condition DiskPressure=True matched; {ADDED_NOTE}"
                )
            );
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
}

/// The node watch has not delivered our own write yet when the node is reconciled
/// again (another of its pods changed): plan on the node the write returned, not on
/// the cached one it replaced, which would only lose a conflict.
#[tokio::test]
async fn a_reconcile_before_the_cache_sees_our_write_plans_on_the_written_node() {
    let n1 = served_node("n1").condition(NIC, "Ruined").build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    scenario(
        h,
        api,
        |mut api| async move {
            let written = api
                .expect_node_patch("n1", nic_taint_on_a_bare_node("100"))
                .await;
            assert_ne!(written["metadata"]["resourceVersion"], "100");
            assert_eq!(api.expect_event().await["reason"], "TaintAdded");
            // No second request: the second reconcile finds nothing to change.
            api
        },
        |h| async move {
            reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap();
            reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap()
        },
    )
    .await;
}

/// After an API server restart or an expired watch (410 Gone) the node watch lists
/// every node again, and the node cache swaps the relisted nodes in only when the
/// list is done. Reconciles for those nodes queued meanwhile (by the list itself,
/// or a pod change) must not be the last word: every node ends in the state the
/// relist brought.
#[tokio::test]
async fn a_relist_leaves_every_node_in_the_state_it_brought() {
    use futures::channel::mpsc as events;
    use kube::runtime::watcher::Event;
    use taint_operator::{
        cache::node_cache::WatchedNode,
        controller::watches::{feed_node_queue, follow_nodes},
    };
    use tokio::sync::mpsc;

    const NODES: [&str; 3] = ["n1", "n2", "n3"];
    // While the watch was down, every NIC broke.
    let relisted: Vec<_> = NODES
        .iter()
        .map(|n| {
            served_node(n)
                .resource_version("200")
                .condition(NIC, "Kaput")
                .build()
        })
        .collect();
    let (mut h, api) = harness(&[nic_policy()], &relisted);
    // What the cache held before: healthy NICs.
    for n in NODES {
        h.put_node(served_node(n).condition(NIC, "Healthy").build());
    }
    let metrics = h.metrics();
    scenario(
        h,
        api,
        |mut api| async move {
            for n in NODES {
                api.expect_node_patch(n, nic_taint_on_a_bare_node("200"))
                    .await;
            }
            for _ in NODES {
                let event = api.expect_event().await;
                assert_eq!(event["reason"], "TaintAdded");
            }
            api
        },
        |h| async move {
            let ctx = h.ctx.clone();
            let (queue, workers) = h.start_node_queue();
            let (watch_tx, watch_rx) = events::unbounded();
            let (touched_tx, touched_rx) = mpsc::unbounded_channel();
            let (_all_tx, all_rx) = mpsc::unbounded_channel();
            let feed = tokio::spawn(feed_node_queue(
                ctx.clone(),
                queue.clone(),
                touched_rx,
                all_rx,
            ));
            let watch = tokio::spawn(follow_nodes(ctx.clone(), watch_rx, touched_tx));

            watch_tx.unbounded_send(Ok(Event::Init)).unwrap();
            for node in &relisted {
                watch_tx
                    .unbounded_send(Ok(Event::InitApply(WatchedNode::from_node(node))))
                    .unwrap();
                queue.touch(node.metadata.name.as_deref().unwrap());
            }
            // The queued reconciles run while the relist is still coming in.
            tokio::time::sleep(Duration::from_millis(50)).await;
            watch_tx.unbounded_send(Ok(Event::InitDone)).unwrap();

            while ctx.metrics.node_writes.get() < NODES.len() as u64 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            queue.close();
            drop(watch_tx);
            workers.await.unwrap();
            watch.await.unwrap();
            feed.abort();
            drop(h);
        },
    )
    .await;
    assert_eq!(metrics.node_writes.get(), 3);
}

/// A fresh replica's cold start on two nodes, driven through the node watch, the
/// sync gate and the node queue as `run` wires them. The caches hold nothing but
/// the policies at first; the list brings `first`, then `between` runs, then the
/// list brings `second` and is done. Returns once both nodes were reconciled.
async fn cold_start<B, BF>(
    h: support::Harness,
    first: &k8s_openapi::api::core::v1::Node,
    second: &k8s_openapi::api::core::v1::Node,
    between: B,
) where
    B: FnOnce(std::sync::Arc<taint_operator::controller::context::Context>) -> BF,
    BF: Future<Output = ()>,
{
    use kube::runtime::watcher::Event;
    use taint_operator::{
        cache::node_cache::WatchedNode,
        controller::watches::{feed_node_queue, follow_nodes, sync_gate},
        telemetry::metrics::ControllerLabel,
    };
    use tokio::sync::mpsc;

    let ctx = h.ctx.clone();
    for node in ctx.caches.nodes().names() {
        ctx.caches.nodes().delete(&node);
    }
    h.synced.send(false).unwrap();
    ctx.caches.mark_policies_listed();
    let gate = tokio::spawn(sync_gate(ctx.clone(), h.synced.clone()));
    let (queue, workers) = h.start_node_queue();
    let (watch_tx, watch_rx) = futures::channel::mpsc::unbounded();
    let (touched_tx, touched_rx) = mpsc::unbounded_channel();
    let (_all_tx, all_rx) = mpsc::unbounded_channel();
    let feed = tokio::spawn(feed_node_queue(
        ctx.clone(),
        queue.clone(),
        touched_rx,
        all_rx,
    ));
    let watch = tokio::spawn(follow_nodes(ctx.clone(), watch_rx, touched_tx));
    let send = |e| watch_tx.unbounded_send(Ok(e)).unwrap();
    send(Event::Init);
    send(Event::InitApply(WatchedNode::from_node(first)));
    between(ctx.clone()).await;
    send(Event::InitApply(WatchedNode::from_node(second)));
    send(Event::InitDone);
    ctx.caches.wait_synced().await;
    let done = ctx
        .metrics
        .reconciles
        .get_or_create(&ControllerLabel { controller: "node" });
    while done.get() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    queue.close();
    drop(watch_tx);
    workers.await.unwrap();
    watch.await.unwrap();
    gate.await.unwrap();
    feed.abort();
    drop(h);
}

/// A cold start writes each node as the node list brings it: with the policies
/// (and the pods they need) in, the first node's patch goes out while the rest of
/// the fleet is still being listed.
#[tokio::test]
async fn a_cold_start_writes_a_node_before_the_node_list_is_done() {
    let broken = served_node("n1").condition(NIC, "Kaput").build();
    let healthy = served_node("n2").condition(NIC, "Healthy").build();
    let (h, api) = harness(&[nic_policy()], &[broken.clone(), healthy.clone()]);
    let metrics = h.metrics();
    scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch("n1", nic_taint_on_a_bare_node("100"))
                .await;
            assert_eq!(api.expect_event().await["reason"], "TaintAdded");
            api
        },
        |h| async move {
            cold_start(h, &broken, &healthy, |ctx| async move {
                while ctx.metrics.node_writes.get() < 1 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                assert!(
                    !ctx.caches.synced(),
                    "the sync gate opened before the list was done"
                );
            })
            .await
        },
    )
    .await;
    assert_eq!(metrics.node_writes.get(), 1);
}

/// Under a policy that counts across nodes (here `maxTaintedNodes`), no node is
/// planned before the node list is done: n1, listed first, would take the one place
/// that n2, listed later, holds already.
#[tokio::test]
async fn a_capped_policy_plans_no_node_before_the_node_list_is_done() {
    let capped = policy("nic-broken")
        .taint_opt(
            "example.com/nic-broken",
            Some("true"),
            TaintEffect::NoExecute,
        )
        .matcher([cond(NIC, "Kaput|Ruined")])
        .max_tainted(1)
        .build();
    let waiting = served_node("n1").condition(NIC, "Kaput").build();
    let holding = served_node("n2")
        .condition(NIC, "Kaput")
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
        .build();
    let (h, api) = harness(&[capped], &[waiting.clone(), holding.clone()]);
    let metrics = h.metrics();
    scenario(
        h,
        api,
        // Nothing to write: n2 keeps the place, n1 waits for it.
        |api| async move { api },
        |h| async move {
            cold_start(h, &waiting, &holding, |ctx| async move {
                // time for a reconcile of n1, were one allowed
                tokio::time::sleep(Duration::from_millis(100)).await;
                assert!(ctx.caches.nodes().get("n1").is_some());
            })
            .await
        },
    )
    .await;
    assert_eq!(metrics.node_writes.get(), 0);
}

/// The periodic resync plans every cached node again: a node that no event queued
/// but is wrong gets its write (counted as a correction); a converged one costs no
/// request at all.
#[tokio::test]
async fn a_resync_corrects_a_missed_node_and_leaves_a_converged_one_alone() {
    use taint_operator::{controller::resync::resync_nodes, telemetry::metrics::ControllerLabel};

    let missed = served_node("missed").condition(NIC, "Kaput").build();
    let converged = served_node("converged")
        .condition(NIC, "Kaput")
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
        .build();
    let (h, api) = harness(&[nic_policy()], &[converged, missed]);
    let metrics = h.metrics();
    scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch("missed", nic_taint_on_a_bare_node("100"))
                .await;
            let event = api.expect_event().await;
            assert_eq!(event["reason"], "TaintAdded");
            api
        },
        |h| async move {
            let ctx = h.ctx.clone();
            let (queue, workers) = h.start_node_queue();
            let resync = tokio::spawn(resync_nodes(
                ctx.clone(),
                queue.clone(),
                Duration::from_millis(20),
            ));
            let node_reconciles = ctx
                .metrics
                .reconciles
                .get_or_create(&ControllerLabel { controller: "node" });
            while node_reconciles.get() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            resync.abort();
            queue.close();
            workers.await.unwrap();
            let _ = resync.await;
            drop(h);
        },
    )
    .await;
    assert_eq!(metrics.resync_corrections.get(), 1);
    assert_eq!(metrics.node_writes.get(), 1);
    assert!(metrics.resyncs.get() >= 1);
}

/// A managed-taints annotation that is not JSON proves no ownership: the operator
/// ignores it and its write replaces it, but says so first, in a Warning event on
/// the node naming the annotation.
#[tokio::test]
async fn a_malformed_ownership_annotation_is_replaced_with_a_warning() {
    let n1 = served_node("n1")
        .condition(NIC, "Kaput")
        .annotation("nodetaint.io/managed-taints", "{not json")
        .build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch(
                "n1",
                nic_taint_on_a_bare_node("100"),
            )
            .await;
            let warning = api.expect_event().await;
            assert_event(
                &warning,
                "Warning",
                "MalformedAnnotation",
                "IgnoreAnnotation",
                "annotation nodetaint.io/managed-taints is not valid JSON of the right shape (\"{not json\"); it proves no ownership, so the operator ignores it and replaces it on its next write of this node",
                node_ref("n1"),
            );
            let added = api.expect_event().await;
            assert_eq!(added["reason"], "TaintAdded");
            api
        },
        |h| async move {
            reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap();
            // The same value again (a reconcile before the watch brings the write):
            // no second warning.
            reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap()
        },
    )
    .await;
}

/// Each of our writes comes back through the node watch. That echo is exactly the
/// node the write's reconcile planned on and wrote, so it is not reconciled again
/// (at 15,000 nodes the echoes doubled the node queue); a change by anyone else,
/// however soon after, is.
#[tokio::test]
async fn the_echo_of_our_own_write_is_not_reconciled_again() {
    use kube::runtime::watcher::Event;
    use taint_operator::{cache::node_cache::WatchedNode, telemetry::metrics::ControllerLabel};

    let broken = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[nic_policy()], std::slice::from_ref(&broken));
    let metrics = h.metrics();
    let (watch_tx, watch_rx) = futures::channel::mpsc::unbounded();
    let feed = watch_tx.clone();
    // The NIC recovered, after our write: kubelet's update, the next version.
    let healed = served_node("n1")
        .resource_version("102")
        .condition(NIC, "Healthy")
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
        .build();
    let healed_cached = WatchedNode::from_node(&healed);
    scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch("n1", nic_taint_on_a_bare_node("100"))
                .await;
            assert_eq!(api.expect_event().await["reason"], "TaintAdded");
            let call = api
                .expect_node_patch_request(
                    "n1",
                    &json!([
                        test_rv("102"),
                        {"op": "remove", "path": "/spec/taints"},
                        {"op": "remove", "path": MANAGED_PATH},
                    ]),
                )
                .await;
            let mut written = serde_json::to_value(&healed).unwrap();
            written["metadata"]["resourceVersion"] = json!("103");
            written["spec"]["taints"] = Value::Null;
            call.reply(200, &written);
            assert_eq!(api.expect_event().await["reason"], "TaintRemoved");
            api
        },
        |h| {
            with_watch_and_queue(h, watch_tx, watch_rx, &broken, move |ctx| async move {
                let reconciles = ctx
                    .metrics
                    .reconciles
                    .get_or_create(&ControllerLabel { controller: "node" });
                // The write's answer, as the watch brings it back.
                let echo = loop {
                    let cached = ctx.caches.nodes().get("n1").unwrap();
                    let freshest = ctx.writes.freshest(cached);
                    if freshest.resource_version() == Some("101") {
                        break (*freshest).clone();
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                };
                feed.unbounded_send(Ok(Event::Apply(WatchedNode::of(echo))))
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                assert_eq!(reconciles.get(), 1, "the echo was reconciled");
                assert_eq!(ctx.metrics.node_echoes_skipped.get(), 1);

                feed.unbounded_send(Ok(Event::Apply(healed_cached)))
                    .unwrap();
                while ctx.metrics.node_writes.get() < 2 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        },
    )
    .await;
    assert_eq!(metrics.node_echoes_skipped.get(), 1);
    assert_eq!(metrics.node_writes.get(), 2);
}

type NodeWatchEvents = futures::channel::mpsc::UnboundedSender<
    Result<
        kube::runtime::watcher::Event<taint_operator::cache::node_cache::WatchedNode>,
        kube::runtime::watcher::Error,
    >,
>;

/// The node watch delivers `node` (as the API server serves it).
fn watch_brings(watch: &NodeWatchEvents, node: &Value) {
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(node.clone()).unwrap();
    watch
        .unbounded_send(Ok(kube::runtime::watcher::Event::Apply(
            taint_operator::cache::node_cache::WatchedNode::from_node(&node),
        )))
        .unwrap();
}

/// Runs the node watch (fed by hand through `watch_rx`) and a one-worker node
/// queue against `h` until `done` says so; returns the node reconciles counted.
async fn with_watch_and_queue<F, Fut>(
    mut h: support::Harness,
    watch_tx: NodeWatchEvents,
    watch_rx: futures::channel::mpsc::UnboundedReceiver<
        Result<
            kube::runtime::watcher::Event<taint_operator::cache::node_cache::WatchedNode>,
            kube::runtime::watcher::Error,
        >,
    >,
    first: &k8s_openapi::api::core::v1::Node,
    done: F,
) -> u64
where
    F: FnOnce(std::sync::Arc<taint_operator::controller::context::Context>) -> Fut,
    Fut: Future<Output = ()>,
{
    use kube::runtime::watcher::Event;
    use taint_operator::{
        cache::node_cache::WatchedNode,
        controller::watches::{feed_node_queue, follow_nodes},
        telemetry::metrics::ControllerLabel,
    };
    use tokio::sync::mpsc;

    let ctx = h.ctx.clone();
    let (queue, workers) = h.start_node_queue();
    let (touched_tx, touched_rx) = mpsc::unbounded_channel();
    let (_all_tx, all_rx) = mpsc::unbounded_channel();
    let feed = tokio::spawn(feed_node_queue(
        ctx.clone(),
        queue.clone(),
        touched_rx,
        all_rx,
    ));
    // the operator's own re-queues (`WriteTracking::end`) go through the pod watches' channel
    let mut changed = std::mem::replace(&mut h.changed_nodes, mpsc::unbounded_channel().1);
    let requeue = tokio::spawn({
        let queue = queue.clone();
        async move {
            while let Some(n) = changed.recv().await {
                queue.touch(&n);
            }
        }
    });
    let watch = tokio::spawn(follow_nodes(ctx.clone(), watch_rx, touched_tx));
    let reconciles = ctx
        .metrics
        .reconciles
        .get_or_create(&ControllerLabel { controller: "node" });
    watch_tx.unbounded_send(Ok(Event::Init)).unwrap();
    watch_tx
        .unbounded_send(Ok(Event::InitApply(WatchedNode::from_node(first))))
        .unwrap();
    watch_tx.unbounded_send(Ok(Event::InitDone)).unwrap();
    done(ctx.clone()).await;
    queue.close();
    drop(watch_tx);
    workers.await.unwrap();
    watch.await.unwrap();
    feed.abort();
    requeue.abort();
    let n = reconciles.get();
    drop(h);
    n
}

/// The watch can bring our write back before the patch's answer does. That echo
/// is parked while the write is on its way, and dropped once the answer shows it
/// is ours: one reconcile, one write, no second run of the node.
#[tokio::test]
async fn an_echo_that_comes_before_the_patch_answer_is_not_reconciled_again() {
    use futures::channel::mpsc as events;

    let broken = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[nic_policy()], std::slice::from_ref(&broken));
    let metrics = h.metrics();
    let (watch_tx, watch_rx) = events::unbounded();
    let server_watch = watch_tx.clone();
    let reconciles = scenario(
        h,
        api,
        |mut api| async move {
            let call = api
                .expect_node_patch_request("n1", &nic_taint_on_a_bare_node("100"))
                .await;
            let written = api.apply_node_patch("n1", &call.body).unwrap();
            assert_eq!(written["metadata"]["resourceVersion"], "101");
            // the watch first, the answer 50 ms later
            watch_brings(&server_watch, &written);
            tokio::time::sleep(Duration::from_millis(50)).await;
            call.reply(200, &written);
            assert_eq!(api.expect_event().await["reason"], "TaintAdded");
            api
        },
        |h| {
            let metrics = h.metrics();
            with_watch_and_queue(h, watch_tx, watch_rx, &broken, move |_| async move {
                while metrics.node_writes.get() < 1 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                // time for a second reconcile, were one queued
                tokio::time::sleep(Duration::from_millis(200)).await;
            })
        },
    )
    .await;
    assert_eq!(reconciles, 1, "the early echo was reconciled");
    assert_eq!(metrics.node_echoes_skipped.get(), 1);
    assert_eq!(metrics.node_writes.get(), 1);
}

/// What the watch brings while our write is on its way and is not that write's
/// echo (kubelet's next update, say) is not lost: the node is reconciled again
/// once the answer is in, and the change is acted on.
#[tokio::test]
async fn a_change_that_comes_while_the_write_is_on_its_way_is_reconciled_after_it() {
    use futures::channel::mpsc as events;

    let broken = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[nic_policy()], std::slice::from_ref(&broken));
    let metrics = h.metrics();
    let healed = served_node("n1")
        .resource_version("102")
        .condition(NIC, "Healthy")
        .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
        .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
        .build();
    let (watch_tx, watch_rx) = events::unbounded();
    let server_watch = watch_tx.clone();
    let server_healed = healed.clone();
    let reconciles = scenario(
        h,
        api,
        |mut api| async move {
            let call = api
                .expect_node_patch_request("n1", &nic_taint_on_a_bare_node("100"))
                .await;
            let written = api.apply_node_patch("n1", &call.body).unwrap();
            // kubelet's update lands on top of our write before its answer is read
            let mut healed = serde_json::to_value(&server_healed).unwrap();
            healed["spec"]["taints"] = written["spec"]["taints"].clone();
            api.nodes.insert("n1".into(), healed.clone());
            watch_brings(&server_watch, &healed);
            tokio::time::sleep(Duration::from_millis(50)).await;
            call.reply(200, &written);
            // the node is planned again at once; its events go out once it is settled
            api.expect_node_patch(
                "n1",
                json!([
                    test_rv("102"),
                    {"op": "remove", "path": "/spec/taints"},
                    {"op": "remove", "path": MANAGED_PATH},
                ]),
            )
            .await;
            assert_eq!(api.expect_event().await["reason"], "TaintAdded");
            assert_eq!(api.expect_event().await["reason"], "TaintRemoved");
            api
        },
        |h| {
            let metrics = h.metrics();
            with_watch_and_queue(h, watch_tx, watch_rx, &broken, move |_| async move {
                while metrics.node_writes.get() < 2 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        },
    )
    .await;
    assert_eq!(reconciles, 2);
    assert_eq!(metrics.node_echoes_skipped.get(), 0);
    assert_eq!(metrics.node_writes.get(), 2);
}

/// The node watch keeps the node cache itself: a listed node is in it and named
/// to the queue as it comes, a cached node the list did not bring leaves it when
/// the list is done, a node deleted leaves it, a node applied after the list is in
/// it (and counts as joined), and every touched node is named to the queue.
#[tokio::test]
async fn the_node_watch_keeps_the_node_cache() {
    use futures::channel::mpsc as events;
    use kube::runtime::watcher::Event;
    use taint_operator::{cache::node_cache::WatchedNode, controller::watches::follow_nodes};
    use tokio::sync::mpsc;

    let (mut h, api) = harness(&[], &[]);
    // Cached before the list: gone once the list (which does not have it) is done.
    h.put_node(served_node("stale").build());
    let metrics = h.metrics();
    scenario(
        h,
        api,
        |api| async move { api },
        |h| async move {
            let ctx = h.ctx.clone();
            let (watch_tx, watch_rx) = events::unbounded();
            let (touched_tx, mut touched) = mpsc::unbounded_channel();
            let watch = tokio::spawn(follow_nodes(ctx.clone(), watch_rx, touched_tx));
            let send = |e| watch_tx.unbounded_send(Ok(e)).unwrap();
            let node = |name: &str| WatchedNode::from_node(&served_node(name).build());

            send(Event::Init);
            send(Event::InitApply(node("n1")));
            send(Event::InitApply(node("n2")));
            // Each listed node is cached and named as it comes, before the list is done.
            assert_eq!(touched.recv().await.unwrap(), "n1");
            assert_eq!(touched.recv().await.unwrap(), "n2");
            assert!(
                ctx.caches.nodes().get("n1").is_some() && ctx.caches.nodes().get("n2").is_some()
            );
            assert!(!ctx.caches.nodes_listed());
            // Not gone until the list is done: it might still come.
            assert!(ctx.caches.nodes().get("stale").is_some());
            send(Event::InitDone);
            while !ctx.caches.nodes_listed() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(ctx.caches.nodes().get("stale").is_none());
            assert_eq!(ctx.caches.nodes().len(), 2);
            assert!(
                touched.try_recv().is_err(),
                "a list's end names no node again"
            );

            send(Event::Apply(node("n3")));
            assert_eq!(touched.recv().await.unwrap(), "n3");
            assert!(ctx.caches.nodes().get("n3").is_some());
            assert_eq!(ctx.metrics.nodes_joined.get(), 1);

            send(Event::Delete(node("n2")));
            send(Event::Apply(node("n1")));
            assert_eq!(touched.recv().await.unwrap(), "n1");
            assert!(ctx.caches.nodes().get("n2").is_none());
            assert_eq!(ctx.caches.nodes().len(), 2);
            // n1 was known already: not a node joining.
            assert_eq!(ctx.metrics.nodes_joined.get(), 1);

            drop(watch_tx);
            watch.await.unwrap();
            drop(h);
        },
    )
    .await;
    assert_eq!(metrics.nodes_joined.get(), 1);
}

/// A replica frozen past its renew deadline (SIGSTOP, a stalled VM) wakes with
/// every timer due at once; a reconcile may run before the task that notices the
/// lost Lease. The write fence has shut by the clock alone: no patch goes out.
#[tokio::test]
async fn a_replica_past_its_renew_deadline_sends_no_patch() {
    let n1 = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[nic_policy()], &[n1]);
    h.ctx.fence.close();
    let metrics = h.metrics();
    scenario(
        h,
        api,
        |api| async move { api },
        |h| async move {
            reconcile_named(
                Work {
                    node: "n1".into(),
                    by_resync: false,
                },
                h.ctx.clone(),
            )
            .await
        },
    )
    .await;
    assert_eq!(metrics.node_writes.get(), 0);
}

/// A resync plans a node again only when something its last plan read has changed
/// since: the node, the policies or its pods. A converged fleet's pass then costs a
/// few lookups a node. Queued by a change, a node is always planned.
#[tokio::test]
async fn a_resync_skips_a_node_whose_plan_inputs_have_not_changed() {
    use taint_operator::{
        cache::node_cache::CachedNode, controller::write_tracking::Brought,
        telemetry::metrics::ControllerLabel,
    };

    let broken = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[nic_policy()], &[broken]);
    let metrics = h.metrics();
    let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
    scenario(
        h,
        api,
        |mut api| async move {
            let written = api
                .expect_node_patch("n1", nic_taint_on_a_bare_node("100"))
                .await;
            api.expect_event().await;
            answer_tx.send(written).unwrap();
            api
        },
        |mut h| async move {
            let planned = |h: &support::Harness| {
                h.ctx
                    .metrics
                    .reconciles
                    .get_or_create(&ControllerLabel { controller: "node" })
                    .get()
            };
            let work = |by_resync| Work {
                node: "n1".into(),
                by_resync,
            };
            // The write: what it wrote needs nothing more, before its echo comes
            // through the watch and after.
            reconcile_named(work(false), h.ctx.clone()).await;
            assert_eq!(planned(&h), 1);
            reconcile_named(work(true), h.ctx.clone()).await;
            assert_eq!(planned(&h), 1, "the written version is settled");
            let answer: k8s_openapi::api::core::v1::Node =
                serde_json::from_value(answer_rx.await.unwrap()).unwrap();
            h.put_node(answer.clone());
            assert_eq!(h.ctx.writes.watch_brought(&h.node("n1")), Brought::OwnEcho);
            reconcile_named(work(true), h.ctx.clone()).await;
            assert_eq!(planned(&h), 1, "the write's echo is settled too");

            // Queued by a change: planned whatever the record says.
            reconcile_named(work(false), h.ctx.clone()).await;
            assert_eq!(planned(&h), 2);

            // The policies compiled again.
            h.compile_policies();
            reconcile_named(work(true), h.ctx.clone()).await;
            assert_eq!(planned(&h), 3);
            reconcile_named(work(true), h.ctx.clone()).await;
            assert_eq!(planned(&h), 3);

            // A pod came to the node.
            h.ctx
                .caches
                .pods_mut()
                .upsert(1, &pod("default", "web").on("n1").ready().build());
            reconcile_named(work(true), h.ctx.clone()).await;
            assert_eq!(planned(&h), 4);
            reconcile_named(work(true), h.ctx.clone()).await;
            assert_eq!(planned(&h), 4);

            // A copy of the same version keeps the record; a version the watch
            // brings has none, even when it holds the same.
            let copy: CachedNode = (*h.node("n1")).clone();
            h.ctx.caches.nodes().apply(copy);
            reconcile_named(work(true), h.ctx.clone()).await;
            assert_eq!(planned(&h), 4);
            let mut again = answer;
            again.metadata.resource_version = Some("102".into());
            h.put_node(again);
            reconcile_named(work(true), h.ctx.clone()).await;
            assert_eq!(planned(&h), 5);
            drop(h);
        },
    )
    .await;
    assert_eq!(metrics.node_writes.get(), 1);
    assert_eq!(metrics.resync_corrections.get(), 0);
}

/// A node whose plan waits for a `for` window keeps no record: every resync plans
/// it, since the window's end (not a change) is what it waits for.
#[tokio::test]
async fn a_resync_plans_a_node_waiting_for_a_window_every_time() {
    use taint_operator::telemetry::metrics::ControllerLabel;

    let mut p = nic_policy();
    p.spec.matchers[0].conditions[0].for_ = Some("90m".into());
    let n1 = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[p], &[n1]);
    let planned = scenario(
        h,
        api,
        |api| async move { api },
        |h| async move {
            for _ in 0..3 {
                let work = Work {
                    node: "n1".into(),
                    by_resync: true,
                };
                let next = reconcile_named(work, h.ctx.clone()).await;
                assert!(matches!(next, Next::After(_)));
            }
            h.ctx
                .metrics
                .reconciles
                .get_or_create(&ControllerLabel { controller: "node" })
                .get()
        },
    )
    .await;
    assert_eq!(planned, 3);
}
