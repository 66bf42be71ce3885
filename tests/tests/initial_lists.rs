//! How the node and pod watches get their initial state, against a scripted API
//! server: a streamed list (a watch with `sendInitialEvents`) where the server
//! streams, paged lists from the first refusal on.

mod support;

use std::sync::Arc;

use futures::StreamExt;
use http::Method;
use kube::{Api, runtime::watcher::Event};
use serde_json::{Value, json};
use support::{ApiServerVerifier, with_scripted_server};
use taint_operator::cache::{
    initial_list::{InitialLists, watch_with_initial_list},
    node_cache::WatchedNode,
    watch::node_list_pages,
};

const NODES: &str = "/api/v1/nodes";

fn node(name: &str, rv: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": rv},
        "spec": {}, "status": {"conditions": []},
    })
}

/// The watch's events up to and including the first `InitDone`, as short names.
async fn first_list(client: kube::Client, lists: Arc<InitialLists>) -> Vec<String> {
    let api: Api<WatchedNode> = Api::all(client);
    let mut events = watch_with_initial_list(api, node_list_pages(), lists);
    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        let done = matches!(event, Ok(Event::InitDone));
        seen.push(match event {
            Ok(Event::Init) => "init".to_string(),
            Ok(Event::InitApply(n)) => format!("list {}", n.node.name()),
            Ok(Event::InitDone) => "done".to_string(),
            Ok(other) => format!("{other:?}"),
            Err(e) => format!("error: {e}"),
        });
        if done {
            break;
        }
    }
    seen
}

fn has(call: &support::verifier::Call, key: &str, value: &str) -> bool {
    call.query_pairs()
        .iter()
        .any(|(k, v)| k == key && v == value)
}

/// The first request: a watch asking for its initial state as events.
async fn expect_streamed_list(api: &mut ApiServerVerifier) -> support::verifier::Call {
    let call = api
        .next_call("a watch of nodes with sendInitialEvents")
        .await;
    assert_eq!((&call.method, call.path.as_str()), (&Method::GET, NODES));
    assert!(has(&call, "watch", "true"), "{}", call.describe());
    assert!(
        has(&call, "sendInitialEvents", "true"),
        "{}",
        call.describe()
    );
    assert!(
        has(&call, "resourceVersionMatch", "NotOlderThan"),
        "{}",
        call.describe()
    );
    call
}

#[tokio::test]
async fn a_server_that_streams_sends_the_initial_list_as_watch_events() {
    let lists = Arc::new(InitialLists::default());
    let seen = with_scripted_server(
        |mut api| async move {
            expect_streamed_list(&mut api).await.reply_lines(&[
                json!({"type": "ADDED", "object": node("n1", "11")}),
                json!({"type": "ADDED", "object": node("n2", "12")}),
                json!({"type": "BOOKMARK", "object": {
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {"resourceVersion": "12",
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}}),
            ]);
        },
        |client| first_list(client, lists.clone()),
    )
    .await;
    assert_eq!(seen, ["init", "list n1", "list n2", "done"]);
    assert!(lists.streaming());
}

/// kube-apiserver on an etcd older than 3.5.13: it takes the watch, then ends it
/// with this error.
async fn refuse_streaming(api: &mut ApiServerVerifier) {
    expect_streamed_list(api).await.reply_lines(&[json!({
        "type": "ERROR",
        "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled",
            "reason": "InternalError", "code": 500,
        },
    })]);
}

/// A paged list of nodes, answered in one page.
async fn expect_paged_list(api: &mut ApiServerVerifier, items: Vec<Value>) {
    api.expect(Method::GET, NODES, Some("limit=100"))
        .await
        .reply(
            200,
            &json!({"apiVersion": "v1", "kind": "NodeList",
                "metadata": {"resourceVersion": "20"}, "items": items}),
        );
}

#[tokio::test]
async fn a_server_that_cannot_stream_is_listed_in_pages_from_then_on() {
    let lists = Arc::new(InitialLists::default());
    let seen = with_scripted_server(
        |mut api| async move {
            refuse_streaming(&mut api).await;
            expect_paged_list(&mut api, vec![node("n1", "11")]).await;
        },
        |client| first_list(client, lists.clone()),
    )
    .await;
    // The consumer sees the refused watch's Init, then the paged list's: it
    // collects the list again from the second.
    assert_eq!(seen, ["init", "init", "list n1", "done"]);
    assert!(!lists.streaming());
}

#[tokio::test]
async fn once_refused_every_later_watch_lists_in_pages_at_once() {
    let lists = Arc::new(InitialLists::default());
    let (first, second) = with_scripted_server(
        |mut api| async move {
            refuse_streaming(&mut api).await;
            expect_paged_list(&mut api, vec![node("n1", "11")]).await;
            // the second watch asks for no stream
            expect_paged_list(&mut api, vec![node("n1", "11"), node("n2", "12")]).await;
        },
        |client| async {
            let first = first_list(client.clone(), lists.clone()).await;
            let second = first_list(client, lists.clone()).await;
            (first, second)
        },
    )
    .await;
    assert_eq!(first, ["init", "init", "list n1", "done"]);
    assert_eq!(second, ["init", "list n1", "list n2", "done"]);
}
