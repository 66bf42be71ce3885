//! The chart's alerts and dashboard query only metrics the operator exports.
//!
//! A reconcile against the mocked API server (a taint added, one removed, a write
//! refused, the statuses written) gives every metric family samples; then the
//! operator's own `/metrics` endpoint is served on a socket and scraped over HTTP.
//! Every `taint_operator_*` name in `charts/taint-operator/files/prometheus-rules.yaml`
//! and `charts/taint-operator/files/grafana-dashboard.json` must be a series of that
//! scrape: a renamed or dropped metric fails here instead of silencing an alert.

mod support;

use std::{collections::BTreeSet, net::SocketAddr, path::PathBuf, sync::Arc};

use http::Method;
use serde_json::json;
use support::{
    NoExecute, cond, harness, policy, scenario, served_node,
    verifier::{EVENTS_PATH, node_invalid},
};
use taint_operator::{
    controller::{node_queue::Work, node_reconciler::reconcile_named, policy_status::refresh_all},
    serve::{
        http as operator_http,
        webhook::{Webhook, answer},
    },
    telemetry::metrics::Metrics,
};
use taint_operator_crd::TaintEffect;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NIC: &str = "NetworkInterfaceCard";

/// The files whose metric names must exist, relative to the repository.
const QUERYING_FILES: [&str; 2] = [
    "charts/taint-operator/files/prometheus-rules.yaml",
    "charts/taint-operator/files/grafana-dashboard.json",
];

fn repo_file(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Every `taint_operator_[a-z0-9_]+` in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    const PREFIX: &str = "taint_operator_";
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices(PREFIX) {
        // Part of a longer identifier (`my_taint_operator_x`) is not a name of ours.
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[at + PREFIX.len()..];
        let len = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        if len > 0 {
            names.insert(format!("{PREFIX}{}", &rest[..len]));
        }
    }
    names
}

/// The series names of a Prometheus / OpenMetrics text scrape, plus the name of
/// each histogram (`x` when `x_bucket` is a series), which queries may use too.
fn scraped_names(scrape: &str) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = scrape
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect();
    let histograms: Vec<String> = names
        .iter()
        .filter_map(|n| n.strip_suffix("_bucket").map(str::to_string))
        .collect();
    names.extend(histograms);
    names
}

/// The names `queried` uses that `exported` lacks.
fn missing(queried: &BTreeSet<String>, exported: &BTreeSet<String>) -> Vec<String> {
    queried.difference(exported).cloned().collect()
}

/// One HTTP/1.1 GET over a plain socket: the status line, the headers and the body.
async fn get(addr: SocketAddr, path: &str) -> (String, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8(response).expect("a text response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("headers end with an empty line");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let headers = headers.to_ascii_lowercase();
    let body = if headers.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status.to_string(), headers, body)
}

/// The body of a chunked HTTP/1.1 response.
fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
        if size == 0 {
            return body;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

/// Serves the operator's router on a free local port, scrapes `/metrics` and stops.
async fn scrape(metrics: Metrics) -> String {
    let listener = operator_http::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(operator_http::serve(
        listener,
        operator_http::router(metrics, Arc::new(|| true), Arc::new(|| Ok(())), None),
        async move {
            let _ = stopped.await;
        },
    ));
    let (status, headers, body) = get(addr, "/metrics").await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{headers}\n{body}");
    assert!(
        headers.contains("content-type: application/openmetrics-text"),
        "{headers}"
    );
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    body
}

/// Metrics after a reconcile that touched every family: nodes `a-add` (tainted),
/// `b-refused` (its patch refused: a reconcile error) and `c-remove` (untainted),
/// then the status write. The API server answers whatever comes, in any order:
/// what is sent is the business of node_reconcile.rs and policy_reconcile.rs.
async fn metrics_after_a_reconcile() -> Metrics {
    let nic = policy("nic-broken")
        .taint_opt(
            "example.com/nic-broken",
            Some("true"),
            TaintEffect::NoExecute,
        )
        .matcher([cond(NIC, "Kaput|Ruined")])
        .build();
    let nodes = [
        served_node("a-add").condition(NIC, "Kaput").build(),
        served_node("b-refused").condition(NIC, "Ruined").build(),
        served_node("c-remove")
            .condition(NIC, "Healthy")
            .taint_opt("example.com/nic-broken", Some("true"), NoExecute)
            .owned(&[("example.com/nic-broken:NoExecute", "nic-broken")])
            .build(),
    ];
    let (h, api) = harness(std::slice::from_ref(&nic), &nodes);
    let metrics = h.metrics();
    let reviewed = serde_json::to_value(&nic).unwrap();
    scenario(
        h,
        api,
        |mut api| async move {
            while let Some(call) = api.try_next_call().await {
                match (&call.method, call.path.as_str()) {
                    (&Method::PATCH, "/api/v1/nodes/b-refused") => {
                        call.reply_status(&node_invalid("b-refused"))
                    }
                    (&Method::PATCH, path) if path.starts_with("/api/v1/nodes/") => {
                        let name = path.trim_start_matches("/api/v1/nodes/").to_string();
                        let node = api.apply_node_patch(&name, &call.body).unwrap();
                        call.reply(200, &node);
                    }
                    (&Method::POST, EVENTS_PATH) => {
                        let event = call.body.clone();
                        call.reply(201, &event);
                    }
                    (&Method::PATCH, path)
                        if path.ends_with("/taintpolicies/nic-broken/status") =>
                    {
                        let mut reply = serde_json::to_value(&nic).unwrap();
                        reply["status"] = call.body["status"].clone();
                        call.reply(200, &reply);
                    }
                    _ => panic!("unexpected request: {}", call.describe()),
                }
            }
            api
        },
        |h| async move {
            for node in ["a-add", "b-refused", "c-remove"] {
                let work = Work {
                    node: node.into(),
                    by_resync: false,
                };
                // A refused write comes back as a retry, counted as an error.
                let _ = reconcile_named(work, h.ctx.clone()).await;
            }
            refresh_all(&h.ctx).await.unwrap();
            // Both webhooks registered (as the chart says with --registered-webhooks),
            // and each answers a review.
            h.ctx
                .metrics
                .mark_registered(&["node".to_string(), "taintpolicy".to_string()]);
            h.ctx.caches.mark_policies_listed();
            for (webhook, kind, object) in [
                (
                    Webhook::Node,
                    json!({"group": "", "version": "v1", "kind": "Node"}),
                    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "new"}}),
                ),
                (
                    Webhook::TaintPolicy,
                    json!({"group": "nodetaint.io", "version": "v1alpha1", "kind": "TaintPolicy"}),
                    reviewed.clone(),
                ),
            ] {
                let review = json!({
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {
                        "uid": "r", "kind": kind, "operation": "CREATE",
                        "resource": {"group": "", "version": "v1", "resource": "x"},
                        "userInfo": {}, "object": object
                    }
                });
                let answered = answer(&h.ctx, webhook, review);
                assert_eq!(answered["response"]["allowed"], true, "{answered}");
            }
            drop(h);
        },
    )
    .await;
    metrics
}

#[tokio::test]
async fn each_status_computation_is_timed_once() {
    // The scenario runs one status refresh over its three nodes.
    let text = scrape(metrics_after_a_reconcile().await).await;
    assert!(
        text.lines()
            .any(|l| l == "taint_operator_status_computation_seconds_count 1"),
        "{text}"
    );
}

#[tokio::test]
async fn every_metric_the_alerts_and_the_dashboard_query_is_exported() {
    let exported = scraped_names(&scrape(metrics_after_a_reconcile().await).await);
    // The scenario is what gives the families samples; without them this test
    // would compare against almost nothing.
    for family in [
        "taint_operator_taints_added_total",
        "taint_operator_taints_removed_total",
        "taint_operator_reconcile_errors_total",
        "taint_operator_api_requests_total",
        "taint_operator_policy_ready",
        "taint_operator_webhook_requests_total",
        "taint_operator_webhook_registered",
    ] {
        assert!(
            exported.contains(family),
            "{family} has no sample: {exported:?}"
        );
    }
    for file in QUERYING_FILES {
        let queried = metric_names(&repo_file(file));
        assert!(
            queried.len() >= 5,
            "{file} names only {queried:?}: is the pattern still right?"
        );
        let missing = missing(&queried, &exported);
        assert!(
            missing.is_empty(),
            "{file} queries metrics the operator does not export: {missing:?}\nexported: {exported:?}"
        );
    }
}

#[test]
fn a_query_of_a_metric_that_is_not_exported_is_reported() {
    let scrape = "# TYPE taint_operator_reconciles counter\n\
                  taint_operator_reconciles_total{controller=\"node\"} 3\n\
                  # TYPE taint_operator_reconcile_duration_seconds histogram\n\
                  taint_operator_reconcile_duration_seconds_bucket{le=\"+Inf\"} 3\n\
                  taint_operator_reconcile_duration_seconds_sum 0.1\n\
                  taint_operator_reconcile_duration_seconds_count 3\n\
                  # EOF\n";
    let rules = "expr: rate(taint_operator_reconciles_total[5m]) > 0 \
                 and histogram_quantile(0.9, taint_operator_reconcile_duration_seconds_bucket) \
                 and taint_operator_reconciles \
                 and taint_operator_leader_total";
    let queried = metric_names(rules);
    assert_eq!(
        missing(&queried, &scraped_names(scrape)),
        ["taint_operator_leader_total", "taint_operator_reconciles"],
        "a counter's family name without _total is no series either"
    );
}

#[test]
fn metric_names_are_whole_identifiers() {
    let names = metric_names(
        r#"{"expr": "sum(taint_operator_leader{namespace=~\"$namespace\"}) + my_taint_operator_x", "uid": "taint-operator"}"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["taint_operator_leader"]
    );
}
