//! Secure metrics against a mocked API server: the operator's router with
//! `/metrics` behind `MetricsAuth`, served on a local socket and called with and
//! without bearer tokens. The API server's side asserts each TokenReview and
//! SubjectAccessReview the operator sends, exactly, and answers it; a review the
//! script does not expect (a cached decision asked again) fails the test.

mod support;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use http::Method;
use kube::client::ClientBuilder;
use serde_json::{Value, json};
use support::ApiServerVerifier;
use taint_operator::{
    serve::{
        http as operator_http,
        metrics_auth::{CacheTtl, MetricsAuth},
    },
    telemetry::metrics::Metrics,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const PROMETHEUS: &str = "system:serviceaccount:monitoring:prometheus";

/// A response: status code, lower-cased headers, body.
struct Answer {
    status: u16,
    headers: String,
    body: String,
}

/// One GET over a plain socket, with `Authorization: Bearer <token>` when given.
async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8(response).expect("a text response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a header block");
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {status_line}"));
    Answer {
        status,
        headers: headers.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

/// The operator's HTTP router with secure metrics, on a free local port, its
/// reviews sent to the returned verifier. Decisions are kept `ttl`.
async fn serve(ttl: CacheTtl) -> (SocketAddr, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let client = ClientBuilder::new(service, "default").build();
    let auth = Arc::new(MetricsAuth::new(client, ttl));
    let metrics = Metrics::default();
    metrics.leader.set(1);
    let listener = operator_http::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(operator_http::serve(
        listener,
        operator_http::router(metrics, Arc::new(|| true), Arc::new(|| Ok(())), Some(auth)),
        std::future::pending(),
    ));
    (addr, ApiServerVerifier::new(handle, &[]))
}

fn token_review(token: &str) -> Value {
    json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "metadata": {},
        "spec": {"token": token}
    })
}

/// The API server's answer for a token it knows.
fn authenticated(token: &str, user: &Value) -> Value {
    let mut review = token_review(token);
    review["status"] = json!({"authenticated": true, "user": user, "audiences": ["https://kubernetes.default.svc"]});
    review
}

fn unauthenticated(token: &str) -> Value {
    let mut review = token_review(token);
    review["status"] = json!({"authenticated": false, "error": "invalid bearer token"});
    review
}

fn prometheus() -> Value {
    json!({
        "username": PROMETHEUS,
        "uid": "5b1e3c9a-0000-4000-8000-000000000001",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]}
    })
}

/// The SubjectAccessReview the operator must send for `user` reading /metrics:
/// the user as the TokenReview named it, every field it gave, nothing more.
fn access_review(user: &Value) -> Value {
    let mut spec = json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}});
    for (from, to) in [
        ("username", "user"),
        ("uid", "uid"),
        ("groups", "groups"),
        ("extra", "extra"),
    ] {
        if let Some(value) = user.get(from) {
            spec[to] = value.clone();
        }
    }
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "metadata": {},
        "spec": spec
    })
}

fn access(user: &Value, allowed: bool, reason: &str) -> Value {
    let mut review = access_review(user);
    review["status"] = json!({"allowed": allowed, "reason": reason});
    review
}

/// Expects a TokenReview of exactly `token` and answers `reply`.
async fn expect_token_review(api: &mut ApiServerVerifier, token: &str, reply: &Value) {
    let call = api.expect(Method::POST, TOKEN_REVIEWS, None).await;
    assert_eq!(call.body, token_review(token), "{}", call.describe());
    call.reply(201, reply);
}

/// Expects the SubjectAccessReview of `user` on `get /metrics` and answers `reply`.
async fn expect_access_review(api: &mut ApiServerVerifier, user: &Value, reply: &Value) {
    let call = api.expect(Method::POST, ACCESS_REVIEWS, None).await;
    assert_eq!(call.body, access_review(user), "{}", call.describe());
    call.reply(201, reply);
}

const LONG: CacheTtl = CacheTtl {
    allowed: Duration::from_secs(600),
    denied: Duration::from_secs(600),
};

/// Runs the API server's script beside the requests; fails on a request it did
/// not expect, and on one it expected that never came.
async fn with_api<F, Fut>(api: ApiServerVerifier, script: F) -> tokio::task::JoinHandle<()>
where
    F: FnOnce(ApiServerVerifier) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ApiServerVerifier> + Send,
{
    tokio::spawn(async move {
        let mut api = script(api).await;
        // Nothing more may come while the scrapes below run.
        if let Ok(Some(call)) =
            tokio::time::timeout(Duration::from_millis(200), api.try_next_call()).await
        {
            panic!("unexpected request: {}", call.describe());
        }
    })
}

async fn done(server: tokio::task::JoinHandle<()>) {
    // A guard against a hang, not a measurement: generous for a loaded machine.
    tokio::time::timeout(Duration::from_secs(60), server)
        .await
        .expect("the API server's script finished")
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
}

#[tokio::test]
async fn no_token_is_401_and_asks_the_api_server_nothing() {
    let (addr, api) = serve(LONG).await;
    let server = with_api(api, |api| async move { api }).await;

    let answer = get(addr, "/metrics", None).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    assert!(
        answer.headers.contains("www-authenticate: bearer"),
        "{}",
        answer.headers
    );
    assert!(!answer.body.contains("taint_operator_"), "{}", answer.body);
    // The probes are open: the kubelet sends no token.
    for probe in ["/healthz", "/readyz"] {
        let answer = get(addr, probe, None).await;
        assert_eq!(answer.status, 200, "{probe}: {}", answer.body);
    }
    done(server).await;
}

#[tokio::test]
async fn a_token_the_api_server_does_not_know_is_401_and_cached() {
    let (addr, api) = serve(LONG).await;
    let server = with_api(api, |mut api| async move {
        expect_token_review(&mut api, "made-up", &unauthenticated("made-up")).await;
        api
    })
    .await;

    for _ in 0..2 {
        let answer = get(addr, "/metrics", Some("made-up")).await;
        assert_eq!(answer.status, 401, "{}", answer.body);
    }
    done(server).await;
}

#[tokio::test]
async fn a_user_allowed_get_on_metrics_is_served_and_asked_once() {
    let (addr, api) = serve(LONG).await;
    let user = prometheus();
    let server = with_api(api, {
        let user = user.clone();
        |mut api| async move {
            expect_token_review(
                &mut api,
                "prometheus-token",
                &authenticated("prometheus-token", &user),
            )
            .await;
            expect_access_review(
                &mut api,
                &user,
                &access(
                    &user,
                    true,
                    "RBAC: allowed by ClusterRoleBinding \"metrics-reader\"",
                ),
            )
            .await;
            api
        }
    })
    .await;

    for _ in 0..3 {
        let answer = get(addr, "/metrics", Some("prometheus-token")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert!(
            answer.body.contains("taint_operator_leader 1"),
            "{}",
            answer.body
        );
    }
    done(server).await;
}

#[tokio::test]
async fn a_user_without_get_on_metrics_is_403() {
    let (addr, api) = serve(LONG).await;
    let user = json!({
        "username": "system:serviceaccount:default:nosy",
        "uid": "5b1e3c9a-0000-4000-8000-000000000002",
        "groups": ["system:serviceaccounts", "system:authenticated"]
    });
    let server = with_api(api, {
        let user = user.clone();
        |mut api| async move {
            expect_token_review(&mut api, "nosy-token", &authenticated("nosy-token", &user)).await;
            expect_access_review(&mut api, &user, &access(&user, false, "")).await;
            api
        }
    })
    .await;

    for _ in 0..2 {
        let answer = get(addr, "/metrics", Some("nosy-token")).await;
        assert_eq!(answer.status, 403, "{}", answer.body);
        assert!(
            answer.body.contains("system:serviceaccount:default:nosy"),
            "{}",
            answer.body
        );
    }
    done(server).await;
}

#[tokio::test]
async fn decisions_expire_and_are_asked_again() {
    let ttl = CacheTtl {
        allowed: Duration::from_millis(300),
        denied: Duration::from_millis(300),
    };
    let (addr, api) = serve(ttl).await;
    let user = prometheus();
    let server = with_api(api, {
        let user = user.clone();
        |mut api| async move {
            // Allowed first; once that has expired, the binding is gone.
            expect_token_review(&mut api, "t", &authenticated("t", &user)).await;
            expect_access_review(&mut api, &user, &access(&user, true, "")).await;
            expect_token_review(&mut api, "t", &authenticated("t", &user)).await;
            expect_access_review(&mut api, &user, &access(&user, false, "")).await;
            api
        }
    })
    .await;

    assert_eq!(get(addr, "/metrics", Some("t")).await.status, 200);
    assert_eq!(get(addr, "/metrics", Some("t")).await.status, 200, "cached");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(get(addr, "/metrics", Some("t")).await.status, 403);
    done(server).await;
}

#[tokio::test]
async fn a_review_the_api_server_fails_is_500_and_not_cached() {
    let (addr, api) = serve(LONG).await;
    let user = prometheus();
    let server = with_api(api, {
        let user = user.clone();
        |mut api| async move {
            let call = api.expect(Method::POST, TOKEN_REVIEWS, None).await;
            call.reply_status(&json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": "etcdserver: request timed out",
                "reason": "InternalError", "code": 500
            }));
            expect_token_review(&mut api, "t", &authenticated("t", &user)).await;
            expect_access_review(&mut api, &user, &access(&user, true, "")).await;
            api
        }
    })
    .await;

    let failed = get(addr, "/metrics", Some("t")).await;
    assert_eq!(failed.status, 500, "{}", failed.body);
    assert!(!failed.body.contains("taint_operator_"), "{}", failed.body);
    assert_eq!(get(addr, "/metrics", Some("t")).await.status, 200);
    done(server).await;
}
