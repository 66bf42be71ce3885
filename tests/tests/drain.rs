//! Drains (`spec.eviction`) against a mocked API server: the patch that starts a
//! drain, the pod list and the evictions, a budget's 429 and its retries, and the
//! one guarded write that swaps the stand-in for the NoExecute taint.

mod support;

use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use support::{
    NoExecute, NoSchedule, ago, cond, harness, harness_with_clock, pod, policy, scenario,
    served_node, verifier::assert_event,
};
use taint_operator::{
    controller::{
        node_drains::ZONE_HELD_RECHECK,
        node_queue::Next,
        node_reconciler::{WAKE_LATE, reconcile_node},
    },
    drain::evictor::budget_refusal,
    telemetry::metrics::{EvictionLabels, Metrics},
};
use taint_operator_crd::TaintPolicy;

const NIC: &str = "NetworkInterfaceCard";
const KEY: &str = "example.com/nic-broken";
const MANAGED_PATH: &str = "/metadata/annotations/nodetaint.io~1managed-taints";
const DRAIN_PATH: &str = "/metadata/annotations/nodetaint.io~1drain-started";
const STAND_IN_OWNED: &str = r#"{"example.com/nic-broken:NoSchedule":"nic-broken"}"#;
const NO_EXECUTE_OWNED: &str = r#"{"example.com/nic-broken:NoExecute":"nic-broken"}"#;
const STARTED: &str = r#"{"nic-broken":"2026-11-20T11:59:00Z"}"#;
const PODS_QUERY: &str = "fieldSelector=spec.nodeName%3Dn1";

fn evicting(eviction: Value) -> TaintPolicy {
    policy("nic-broken")
        .taint(KEY, "true", NoExecute)
        .matcher([cond(NIC, "Kaput")])
        .eviction(eviction)
        .build()
}

fn test_rv(rv: &str) -> Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
}

fn node_ref(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "name": name, "uid": format!("uid-{name}")})
}

/// n1, broken, its drain started a minute ago (another replica may have started it).
fn draining_node() -> k8s_openapi::api::core::v1::Node {
    served_node("n1")
        .condition(NIC, "Kaput")
        .owned_taint(KEY, "true", NoSchedule, "nic-broken")
        .annotation("nodetaint.io/drain-started", STARTED)
        .build()
}

/// The patch that swaps the stand-in for the NoExecute taint, keeping the start.
fn swap_patch() -> Value {
    swap_patch_at("2026-11-20T12:00:00Z")
}

/// [`swap_patch`] written at `at`.
fn swap_patch_at(at: &str) -> Value {
    json!([
        test_rv("100"),
        {"op": "add", "path": "/spec/taints", "value": [
            {"key": KEY, "value": "true", "effect": "NoExecute", "timeAdded": at}
        ]},
        {"op": "add", "path": MANAGED_PATH, "value": NO_EXECUTE_OWNED},
    ])
}

fn pod_list(pods: Vec<Pod>) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": pods})
}

fn eviction_of(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}})
}

fn evictions(m: &Metrics, outcome: &'static str) -> u64 {
    m.evictions
        .get_or_create(&EvictionLabels {
            policy: "nic-broken".into(),
            outcome,
        })
        .get()
}

#[tokio::test]
async fn a_drain_starts_with_the_stand_in_and_its_record_in_one_patch() {
    let n1 = served_node("n1").condition(NIC, "Kaput").build();
    let (h, api) = harness(&[evicting(json!({}))], &[n1]);
    let next = scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch(
                "n1",
                json!([
                    test_rv("100"),
                    {"op": "add", "path": "/spec/taints", "value": [{"key": KEY, "value": "true", "effect": "NoSchedule"}]},
                    {"op": "add", "path": MANAGED_PATH, "value": STAND_IN_OWNED},
                    {"op": "add", "path": DRAIN_PATH, "value": r#"{"nic-broken":"2026-11-20T12:00:00Z"}"#},
                ]),
            )
            .await;
            let added = api.expect_event().await;
            assert_event(
                &added,
                "Normal",
                "TaintAdded",
                "AddTaint",
                "policy nic-broken added example.com/nic-broken=true:NoSchedule (until the drain allows NoExecute): condition NetworkInterfaceCard=Kaput matched",
                node_ref("n1"),
            );
            let started = api.expect_event().await;
            assert_event(
                &started,
                "Normal",
                "DrainStarted",
                "Drain",
                "policy nic-broken started draining the node before example.com/nic-broken=true goes on as NoExecute (NoSchedule until then); the pods that do not tolerate it are evicted through the Eviction API first",
                node_ref("n1"),
            );
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
    // The evictions are the next reconcile's job, at once.
    assert_eq!(next, Next::After(Duration::from_millis(5)));
}

#[tokio::test]
async fn the_pods_in_the_way_are_evicted_and_the_switch_follows_in_the_same_reconcile() {
    let (h, api) = harness(&[evicting(json!({}))], &[draining_node()]);
    let metrics = h.metrics();
    let next = scenario(
        h,
        api,
        |mut api| async move {
            let list = api
                .expect(Method::GET, "/api/v1/pods", Some(PODS_QUERY))
                .await;
            list.reply(
                200,
                &pod_list(vec![
                    pod("web", "web-1").on("n1").owned_by("ReplicaSet", "web").build(),
                    pod("kube-system", "cni-1").on("n1").owned_by("DaemonSet", "cni").build(),
                    pod("batch", "done-1").on("n1").phase("Succeeded").build(),
                    pod("mon", "agent-1").on("n1").tolerate("", None, None).build(),
                    pod("web", "web-0").on("n1").terminating().build(),
                    pod("kube-system", "etcd-n1").on("n1").mirror().build(),
                ]),
            );
            let evict = api
                .expect(Method::POST, "/api/v1/namespaces/web/pods/web-1/eviction", None)
                .await;
            assert_eq!(evict.body, eviction_of("web", "web-1"));
            evict.reply(201, &json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}));
            api.expect_node_patch("n1", swap_patch()).await;
            let added = api.expect_event().await;
            assert_eq!(added["reason"], "TaintAdded");
            assert_eq!(
                added["note"],
                "policy nic-broken added example.com/nic-broken=true:NoExecute: condition NetworkInterfaceCard=Kaput matched"
            );
            let removed = api.expect_event().await;
            assert_eq!(removed["reason"], "TaintRemoved");
            assert_eq!(
                removed["note"],
                "policy nic-broken removed example.com/nic-broken=true:NoSchedule: switched to NoExecute"
            );
            let finished = api.expect_event().await;
            assert_event(
                &finished,
                "Normal",
                "DrainFinished",
                "Drain",
                "policy nic-broken switched example.com/nic-broken=true to NoExecute: every pod in the way was evicted",
                node_ref("n1"),
            );
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
    assert_eq!(next, Next::AwaitChange);
    assert_eq!(evictions(&metrics, "evicted"), 1);
    assert_eq!(evictions(&metrics, "blocked"), 0);
}

/// Seconds the budget test's clock has moved past `now()`.
static MOVED: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

fn moving_clock() -> k8s_openapi::jiff::Timestamp {
    support::plus(
        support::now(),
        MOVED.load(std::sync::atomic::Ordering::SeqCst),
    )
}

#[tokio::test]
async fn a_budget_refusal_keeps_the_node_no_schedule_is_reported_once_and_retried_with_growing_waits()
 {
    let (h, api) = harness_with_clock(&[evicting(json!({}))], &[draining_node()], moving_clock);
    let metrics = h.metrics();
    let web = || {
        pod("web", "web-1")
            .on("n1")
            .owned_by("ReplicaSet", "web")
            .build()
    };
    let waits = scenario(
        h,
        api,
        |mut api| async move {
            for round in 0..3 {
                api.expect(Method::GET, "/api/v1/pods", Some(PODS_QUERY))
                    .await
                    .reply(200, &pod_list(vec![web()]));
                let evict = api
                    .expect(Method::POST, "/api/v1/namespaces/web/pods/web-1/eviction", None)
                    .await;
                if round < 2 {
                    evict.reply_status(&budget_refusal("web-pdb"));
                } else {
                    evict.reply(201, &json!({"kind": "Status", "status": "Success", "code": 201}));
                }
            }
            let at = moving_clock().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            api.expect_node_patch("n1", swap_patch_at(&at)).await;
            // Events go out once node writes are quiet: the refusal's first, once.
            let blocked = api.expect_event().await;
            assert_event(
                &blocked,
                "Warning",
                "EvictionBlocked",
                "Evict",
                "policy nic-broken: eviction of pod web/web-1 blocked by PodDisruptionBudget web-pdb: The disruption budget web-pdb needs 1 healthy pods and has 1 currently; the node stays NoSchedule and the eviction is retried",
                node_ref("n1"),
            );
            for reason in ["TaintAdded", "TaintRemoved", "DrainFinished"] {
                assert_eq!(api.expect_event().await["reason"], reason);
            }
            api
        },
        |h| async move {
            let mut waits = Vec::new();
            for _ in 0..3 {
                let next = reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap();
                // The node changes before the round is due: no eviction, the wait goes on.
                MOVED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let early = reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap();
                if let (Next::After(wait), Next::After(left)) = (next, early) {
                    assert!(left < wait, "the wait goes on: {left:?} of {wait:?}");
                }
                // Then its time comes.
                if let Next::After(wait) = next {
                    MOVED.fetch_add(wait.as_secs() as i64 + 1, std::sync::atomic::Ordering::SeqCst);
                }
                waits.push(next);
            }
            waits
        },
    )
    .await;
    let Next::After(first) = waits[0] else {
        panic!("a blocked drain comes back: {waits:?}")
    };
    let Next::After(second) = waits[1] else {
        panic!("a blocked drain comes back: {waits:?}")
    };
    // 5 s, then 10 s, each ±20 % (the jitter), woken WAKE_LATE after the wait ends.
    let within = |wait: Duration, base: u64| {
        wait >= Duration::from_secs(base).mul_f64(0.8)
            && wait <= Duration::from_secs(base).mul_f64(1.2) + WAKE_LATE
    };
    assert!(within(first, 5), "{first:?}");
    assert!(within(second, 10), "{second:?}");
    assert_eq!(waits[2], Next::AwaitChange);
    assert_eq!(evictions(&metrics, "blocked"), 2);
    assert_eq!(evictions(&metrics, "evicted"), 1);
}

#[tokio::test]
async fn drain_timeout_switches_without_evicting_and_says_so() {
    // Started 11 minutes ago; the timeout is 10.
    let n1 = served_node("n1")
        .condition(NIC, "Kaput")
        .owned_taint(KEY, "true", NoSchedule, "nic-broken")
        .annotation(
            "nodetaint.io/drain-started",
            r#"{"nic-broken":"2026-11-20T11:49:00Z"}"#,
        )
        .build();
    let (h, api) = harness(&[evicting(json!({"drainTimeout": "10m"}))], &[n1]);
    scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch("n1", swap_patch()).await;
            for reason in ["TaintAdded", "TaintRemoved"] {
                assert_eq!(api.expect_event().await["reason"], reason);
            }
            let finished = api.expect_event().await;
            assert_eq!(
                finished["note"],
                "policy nic-broken switched example.com/nic-broken=true to NoExecute: drainTimeout 10m passed"
            );
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
}

#[tokio::test]
async fn a_node_that_heals_mid_drain_loses_the_stand_in_and_the_record_in_one_patch() {
    let n1 = served_node("n1")
        .condition(NIC, "Fine")
        .owned_taint(KEY, "true", NoSchedule, "nic-broken")
        .annotation("nodetaint.io/drain-started", STARTED)
        .build();
    let (h, api) = harness(&[evicting(json!({}))], &[n1]);
    scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch(
                "n1",
                json!([
                    test_rv("100"),
                    {"op": "remove", "path": "/spec/taints"},
                    {"op": "remove", "path": MANAGED_PATH},
                    {"op": "remove", "path": DRAIN_PATH},
                ]),
            )
            .await;
            let removed = api.expect_event().await;
            assert_eq!(removed["reason"], "TaintRemoved");
            assert_eq!(
                removed["note"],
                "policy nic-broken removed example.com/nic-broken=true:NoSchedule: drain stopped: no matcher matches"
            );
            api
        },
        |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
    )
    .await;
}

#[tokio::test]
async fn the_pace_holds_the_second_switch_of_a_zone_for_one_interval() {
    let p = evicting(json!({"nodesPerMinute": 6, "respectDisruptionBudgets": false}));
    let n1 = draining_node();
    let mut n2 = draining_node();
    n2.metadata.name = Some("n2".into());
    n2.metadata.uid = Some("uid-n2".into());
    let (h, api) = harness(&[p], &[n1, n2]);
    let next = scenario(
        h,
        api,
        |mut api| async move {
            api.expect_node_patch("n1", swap_patch()).await;
            for reason in ["TaintAdded", "TaintRemoved", "DrainFinished"] {
                assert_eq!(api.expect_event().await["reason"], reason);
            }
            api
        },
        |h| async move {
            reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap();
            reconcile_node(h.node("n2"), h.ctx.clone()).await.unwrap()
        },
    )
    .await;
    // n2's turn is ten seconds after n1's switch.
    assert_eq!(next, Next::After(Duration::from_millis(10_005)));
}

/// n1 of zone a is draining when others of its zone break: while the zone settles
/// (a node broke 2 s ago; `zoneSettle` is 5 s) or is held (3 of 4 broken), the
/// reconcile lists no pod, evicts nothing and writes nothing, and comes back when
/// the zone is judged (settling) or rechecked (held).
#[tokio::test]
async fn a_settling_or_held_zone_evicts_nothing_from_a_draining_node() {
    let cases = [
        (ago(2), false, Duration::from_secs(3) + WAKE_LATE),
        (ago(600), true, ZONE_HELD_RECHECK + WAKE_LATE),
    ];
    for (broke, third_broken, wake) in cases {
        let n1 = served_node("n1")
            .zone("a")
            .condition(NIC, "Kaput")
            .owned_taint(KEY, "true", NoSchedule, "nic-broken")
            .annotation("nodetaint.io/drain-started", STARTED)
            .build();
        let n2 = served_node("n2")
            .zone("a")
            .condition_since(NIC, "Kaput", broke)
            .build();
        let n3 = if third_broken {
            served_node("n3").zone("a").condition(NIC, "Kaput")
        } else {
            served_node("n3").zone("a").condition(NIC, "Fine")
        }
        .build();
        let n4 = served_node("n4").zone("a").condition(NIC, "Fine").build();
        let policy = evicting(json!({"pauseWhenZoneUnhealthy": "50%"}));
        let (h, api) = harness(&[policy], &[n1, n2, n3, n4]);
        let next = scenario(
            h,
            api,
            |api| async move { api },
            |h| async move { reconcile_node(h.node("n1"), h.ctx.clone()).await.unwrap() },
        )
        .await;
        assert_eq!(next, Next::After(wake), "third node broken: {third_broken}");
    }
}
