//! The start-up check (`taint_operator::run::preflight`) against a mocked API server:
//! each way it can fail gives exactly one line saying what is wrong and what to do.
//! (The e2e scenario "start-up errors" runs the binary itself against real servers.)

mod support;

use http::Method;
use serde_json::{Value, json};
use support::{ApiServerVerifier, with_scripted_server};
use taint_operator::run::{StartupError, preflight};

const URL: &str = "https://api.example:6443";
const POLICIES: &str = "/apis/nodetaint.io/v1alpha1/taintpolicies";
const NODES: &str = "/api/v1/nodes";
/// The policy list's query: one item, filtered on a selectable field (the probe).
const PROBED: &str = "fieldSelector=spec.mode%3DContinuous&limit=1";

/// A `metav1.Status` failure as kube-apiserver sends it.
fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "details": {}, "code": code,
    })
}

fn empty_list(kind: &str, api_version: &str) -> Value {
    json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": []})
}

/// Runs `preflight` against a server scripted by `server`; returns its result.
async fn run_preflight<F, Fut>(server: F) -> Result<(), StartupError>
where
    F: FnOnce(ApiServerVerifier) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    with_scripted_server(
        server,
        |client| async move { preflight(&client, URL).await },
    )
    .await
}

fn one_line(e: &StartupError) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "not one line: {s:?}");
    s
}

#[tokio::test]
async fn crd_missing_says_so_and_how_to_install_it() {
    let err = run_preflight(|mut api| async move {
        api.expect(Method::GET, POLICIES, Some(PROBED))
            .await
            .reply_status(&status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ));
        api.no_more_requests().await;
    })
    .await
    .expect_err("a missing CRD fails the start");
    assert!(matches!(err, StartupError::CrdMissing), "{err:?}");
    assert_eq!(
        one_line(&err),
        "the TaintPolicy CRD (taintpolicies.nodetaint.io) is not installed: install it with `taint-operator crd | kubectl apply -f -` or the helm chart"
    );
}

#[tokio::test]
async fn rejected_credentials_name_the_server_and_the_kubeconfig_user() {
    let err = run_preflight(|mut api| async move {
        api.expect(Method::GET, POLICIES, Some(PROBED))
            .await
            .reply_status(&status(401, "Unauthorized", "Unauthorized"));
        api.no_more_requests().await;
    })
    .await
    .expect_err("401 fails the start");
    assert_eq!(
        one_line(&err),
        "the API server at https://api.example:6443 did not accept the credentials (401 Unauthorized): check the kubeconfig's user (token or client certificate)"
    );
}

#[tokio::test]
async fn forbidden_names_the_call_and_the_cluster_role() {
    let msg = r#"taintpolicies.nodetaint.io is forbidden: User "nobody" cannot list resource "taintpolicies" in API group "nodetaint.io" at the cluster scope"#;
    let err = run_preflight(move |mut api| async move {
        api.expect(Method::GET, POLICIES, Some(PROBED))
            .await
            .reply_status(&status(403, "Forbidden", msg));
        api.no_more_requests().await;
    })
    .await
    .expect_err("403 fails the start");
    assert_eq!(
        one_line(&err),
        format!(
            "no permission to list taintpolicies.nodetaint.io: {msg} (bind the operator to the chart's ClusterRole)"
        )
    );
}

#[tokio::test]
async fn forbidden_nodes_after_policies_are_readable() {
    let msg = r#"nodes is forbidden: User "nobody" cannot list resource "nodes" in API group "" at the cluster scope"#;
    let err = run_preflight(move |mut api| async move {
        api.expect(Method::GET, POLICIES, Some(PROBED))
            .await
            .reply(200, &empty_list("TaintPolicyList", "nodetaint.io/v1alpha1"));
        api.expect(Method::GET, NODES, Some("limit=1"))
            .await
            .reply_status(&status(403, "Forbidden", msg));
        api.no_more_requests().await;
    })
    .await
    .expect_err("403 on nodes fails the start");
    assert_eq!(
        one_line(&err),
        format!(
            "no permission to list nodes: {msg} (bind the operator to the chart's ClusterRole)"
        )
    );
}

#[tokio::test]
async fn passes_with_both_lists_readable_in_two_requests() {
    run_preflight(|mut api| async move {
        api.expect(Method::GET, POLICIES, Some(PROBED))
            .await
            .reply(200, &empty_list("TaintPolicyList", "nodetaint.io/v1alpha1"));
        api.expect(Method::GET, NODES, Some("limit=1"))
            .await
            .reply(200, &empty_list("NodeList", "v1"));
        api.no_more_requests().await;
    })
    .await
    .expect("preflight passes");
}

/// An API server without CRD field selectors (before 1.32, or a CRD applied to one)
/// answers the probe with 400: the start fails with what is needed, not half-runs.
#[tokio::test]
async fn a_server_without_selectable_fields_is_refused_at_start() {
    let msg = r#"field label not supported: spec.mode"#;
    let err = run_preflight(move |mut api| async move {
        api.expect(Method::GET, POLICIES, Some(PROBED))
            .await
            .reply_status(&status(400, "BadRequest", msg));
        api.no_more_requests().await;
    })
    .await
    .expect_err("400 on the probe fails the start");
    assert!(
        matches!(err, StartupError::SelectableFieldsMissing { .. }),
        "{err:?}"
    );
    assert_eq!(
        one_line(&err),
        "the API server does not take field selectors on TaintPolicies (field label not supported: spec.mode): taint-operator needs Kubernetes 1.32 or later and this version's CRD, with its selectableFields (`taint-operator crd | kubectl apply -f -`, or the helm chart)"
    );
}

/// A CRD installed with the operator is Established before the API server serves
/// its resource (429 "storage is (re)initializing"): the start waits it out.
#[tokio::test(start_paused = true)]
async fn storage_initializing_is_waited_out() {
    run_preflight(|mut api| async move {
        api.expect(Method::GET, POLICIES, Some(PROBED))
            .await
            .reply_status(&status(
                429,
                "TooManyRequests",
                "storage is (re)initializing",
            ));
        api.expect(Method::GET, POLICIES, Some(PROBED))
            .await
            .reply(200, &empty_list("TaintPolicyList", "nodetaint.io/v1alpha1"));
        api.expect(Method::GET, NODES, Some("limit=1"))
            .await
            .reply(200, &empty_list("NodeList", "v1"));
        api.no_more_requests().await;
    })
    .await
    .expect("preflight waits out a 429 and passes");
}

/// An API server that keeps answering 429 fails the start once the patience is spent.
#[tokio::test(start_paused = true)]
async fn a_server_that_stays_unready_fails_the_start() {
    let err = run_preflight(|mut api| async move {
        let mut asked = 0;
        while let Some(call) = api.try_next_call().await {
            assert_eq!(call.path, POLICIES, "only the policy list is asked");
            asked += 1;
            call.reply_status(&status(
                429,
                "TooManyRequests",
                "storage is (re)initializing",
            ));
        }
        // once at once, then once a second for the 20 s of patience
        assert!((20..=22).contains(&asked), "asked {asked} times");
    })
    .await
    .expect_err("a server unready past the patience fails the start");
    assert!(matches!(err, StartupError::Unreachable { .. }), "{err:?}");
}
