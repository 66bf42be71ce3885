//! `taint-operator adopt-crd` (the chart's pre-upgrade hook for a CRD that chart
//! 0.1.0 installed unowned) against a mocked API server: the exact requests, the
//! object it writes, and that it never takes a CRD another release owns.

mod support;

use http::Method;
use kube::CustomResourceExt;
use serde_json::{Value, json};
use support::{
    ApiServerVerifier,
    verifier::{Call, conflict},
    with_scripted_server,
};
use taint_operator::crd_adopt::{AdoptError, Adopted, Release, adopt};
use taint_operator_crd::TaintPolicy;

const FIELD_MANAGER_QUERY: &str = "&fieldManager=taint-operator-adopt-crd";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const CRD: &str =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/taintpolicies.nodetaint.io";

fn release(keep: bool) -> Release {
    Release {
        name: "taint-operator".into(),
        namespace: "ops".into(),
        keep,
    }
}

/// The CRD as the cluster holds it: this version's, with an older schema, the
/// given annotations and a foreign label that must survive.
fn live_crd(resource_version: &str, annotations: Value) -> Value {
    let mut crd = serde_json::to_value(TaintPolicy::crd()).expect("the CRD serializes");
    crd["metadata"]["uid"] = json!("3f0b5a52-0000-4000-8000-000000000001");
    crd["metadata"]["resourceVersion"] = json!(resource_version);
    crd["metadata"]["labels"] = json!({"team": "platform"});
    crd["metadata"]["annotations"] = annotations;
    // chart 0.1.0's node selector: a plain object, none of today's rules
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["nodeSelector"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    crd
}

/// What adopt-crd must write over `live`: this binary's spec, the release's
/// ownership, everything else as it was (uid and resourceVersion included, so the
/// write is a guarded replace of the same object).
fn adopted(live: &Value, keep: bool) -> Value {
    let mut want = live.clone();
    want["spec"] = serde_json::to_value(TaintPolicy::crd().spec).expect("serializes");
    want["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
    let annotations = &mut want["metadata"]["annotations"];
    if annotations.is_null() {
        *annotations = json!({});
    }
    annotations["meta.helm.sh/release-name"] = json!("taint-operator");
    annotations["meta.helm.sh/release-namespace"] = json!("ops");
    if keep {
        annotations["helm.sh/resource-policy"] = json!("keep");
    } else if let Some(a) = annotations.as_object_mut() {
        a.remove("helm.sh/resource-policy");
    }
    want
}

fn not_found() -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "customresourcedefinitions.apiextensions.k8s.io \"taintpolicies.nodetaint.io\" not found",
        "reason": "NotFound", "details": {}, "code": 404,
    })
}

async fn run_adopt<F, Fut>(release: Release, server: F) -> Result<Adopted, AdoptError>
where
    F: FnOnce(ApiServerVerifier) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    with_scripted_server(
        server,
        |client| async move { adopt(&client, &release).await },
    )
    .await
}

/// The GET of the CRD, answered with `live`, and the PUT that must follow it
/// (returned unanswered).
async fn get_then_put(api: &mut ApiServerVerifier, live: &Value) -> Call {
    api.expect(Method::GET, CRD, None).await.reply(200, live);
    api.expect(Method::PUT, CRD, Some(FIELD_MANAGER_QUERY))
        .await
}

#[tokio::test]
async fn an_unowned_crd_gets_this_schema_and_the_release_s_ownership_in_one_guarded_replace() {
    let live = live_crd("41", Value::Null);
    let want = adopted(&live, true);
    let result = run_adopt(release(true), |mut api| async move {
        let put = get_then_put(&mut api, &live).await;
        assert_eq!(put.body, want, "the replaced CRD");
        assert_eq!(
            put.query_pairs(),
            vec![(
                "fieldManager".to_string(),
                "taint-operator-adopt-crd".to_string()
            )]
        );
        let mut answer = want.clone();
        answer["metadata"]["resourceVersion"] = json!("42");
        put.reply(200, &answer);
        api.no_more_requests().await;
    })
    .await;
    assert_eq!(result.expect("adopted"), Adopted::Adopted);
}

#[tokio::test]
async fn without_keep_the_resource_policy_is_taken_off() {
    let live = live_crd(
        "7",
        json!({"helm.sh/resource-policy": "keep", "note": "mine"}),
    );
    let want = adopted(&live, false);
    assert_eq!(want["metadata"]["annotations"]["note"], "mine");
    assert!(
        want["metadata"]["annotations"]
            .get("helm.sh/resource-policy")
            .is_none()
    );
    let result = run_adopt(release(false), |mut api| async move {
        let put = get_then_put(&mut api, &live).await;
        assert_eq!(put.body, want);
        put.reply(200, &want);
        api.no_more_requests().await;
    })
    .await;
    assert_eq!(result.expect("adopted"), Adopted::Adopted);
}

#[tokio::test]
async fn a_crd_of_another_release_is_refused_untouched_with_the_commands_to_run() {
    let live = live_crd(
        "9",
        json!({"meta.helm.sh/release-name": "other", "meta.helm.sh/release-namespace": "elsewhere"}),
    );
    let err = run_adopt(release(true), |mut api| async move {
        api.expect(Method::GET, CRD, None).await.reply(200, &live);
        api.no_more_requests().await;
    })
    .await
    .expect_err("another release's CRD is not taken");
    assert_eq!(
        err.to_string(),
        "CustomResourceDefinition taintpolicies.nodetaint.io belongs to Helm release \"other\" in namespace \"elsewhere\", \
         not to \"taint-operator\" in \"ops\": install this release with --set crds.install=false, or hand the CRD over with \
         `kubectl annotate crd taintpolicies.nodetaint.io --overwrite meta.helm.sh/release-name=taint-operator meta.helm.sh/release-namespace=ops`"
    );
}

#[tokio::test]
async fn a_half_owned_crd_is_refused_too() {
    // one annotation without the other is not this release's: Helm would refuse it as well
    let live = live_crd("9", json!({"meta.helm.sh/release-name": "taint-operator"}));
    let err = run_adopt(release(true), |mut api| async move {
        api.expect(Method::GET, CRD, None).await.reply(200, &live);
        api.no_more_requests().await;
    })
    .await
    .expect_err("refused");
    assert!(
        matches!(err, AdoptError::OwnedByAnotherRelease { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_replace_that_loses_a_race_reads_again_and_retries() {
    let first = live_crd("10", Value::Null);
    let second = live_crd("11", json!({"touched": "by someone"}));
    let (want_first, want_second) = (adopted(&first, true), adopted(&second, true));
    let result = run_adopt(release(true), |mut api| async move {
        let put = get_then_put(&mut api, &first).await;
        assert_eq!(put.body, want_first);
        put.reply_status(&conflict("taintpolicies.nodetaint.io"));
        let put = get_then_put(&mut api, &second).await;
        assert_eq!(
            put.body, want_second,
            "the second write starts from what was read again"
        );
        put.reply(200, &want_second);
        api.no_more_requests().await;
    })
    .await;
    assert_eq!(result.expect("adopted"), Adopted::Adopted);
}

#[tokio::test]
async fn the_release_s_own_crd_is_brought_to_this_schema() {
    let live = live_crd(
        "12",
        json!({"meta.helm.sh/release-name": "taint-operator", "meta.helm.sh/release-namespace": "ops"}),
    );
    let want = adopted(&live, true);
    let result = run_adopt(release(true), |mut api| async move {
        let put = get_then_put(&mut api, &live).await;
        assert_eq!(put.body, want);
        put.reply(200, &want);
        api.no_more_requests().await;
    })
    .await;
    assert_eq!(result.expect("updated"), Adopted::AlreadyOwned);
}

#[tokio::test]
async fn a_missing_crd_is_created_owned() {
    let result = run_adopt(release(true), |mut api| async move {
        api.expect(Method::GET, CRD, None)
            .await
            .reply_status(&not_found());
        let post = api
            .expect(Method::POST, CRDS, Some(FIELD_MANAGER_QUERY))
            .await;
        let mut want = serde_json::to_value(TaintPolicy::crd()).expect("serializes");
        want["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "Helm"});
        want["metadata"]["annotations"] = json!({
            "meta.helm.sh/release-name": "taint-operator",
            "meta.helm.sh/release-namespace": "ops",
            "helm.sh/resource-policy": "keep",
        });
        assert_eq!(post.body, want);
        post.reply(201, &want);
        api.no_more_requests().await;
    })
    .await;
    assert_eq!(result.expect("created"), Adopted::Created);
}

#[tokio::test]
async fn a_refused_replace_names_the_call_and_the_crd() {
    let live = live_crd("13", Value::Null);
    let err = run_adopt(release(true), |mut api| async move {
        let put = get_then_put(&mut api, &live).await;
        put.reply_status(&json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "customresourcedefinitions.apiextensions.k8s.io \"taintpolicies.nodetaint.io\" is forbidden: User \"system:serviceaccount:ops:x\" cannot update resource",
            "reason": "Forbidden", "details": {}, "code": 403,
        }));
        api.no_more_requests().await;
    })
    .await
    .expect_err("a 403 fails");
    let said = err.to_string();
    assert!(
        said.starts_with("replace CustomResourceDefinition taintpolicies.nodetaint.io: "),
        "{said}"
    );
    assert!(said.contains("forbidden"), "{said}");
}
