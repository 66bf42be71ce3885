//! The critical-pod watches read protobuf, against a scripted API server: the
//! requests they send, the frames they decode into watcher events, how they
//! resume and relist, and the JSON watch that takes over where the server does
//! not answer in protobuf.

mod support;

use std::{collections::BTreeMap, sync::Arc};

use futures::{StreamExt, stream::BoxStream};
use http::Method;
use kube::runtime::watcher::{self, Event};
use prost::Message;
use serde_json::json;
use support::{ApiServerVerifier, verifier::Call, with_scripted_server};
use taint_operator::cache::{
    initial_list::InitialLists,
    k8s_proto::{ENVELOPE_MAGIC, ObjectMetaPb, StatusPb, TypeMetaPb, UnknownPb},
    pod_proto::{
        INITIAL_EVENTS_END, PodConditionPb, PodPb, PodSpecPb, PodStatusPb, RawExtensionPb,
        WatchEventPb,
    },
    pod_watch::pod_events,
    proto_watch::{PROTOBUF_WATCH, watch_pods},
    slim::SlimPod,
};

const PODS: &str = "/api/v1/namespaces/kube-system/pods";
const SELECTOR: &str = "app=cni";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf;stream=watch";

fn envelope(kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = UnknownPb {
        type_meta: Some(TypeMetaPb {
            api_version: "v1".into(),
            kind: kind.into(),
        }),
        raw,
    };
    [ENVELOPE_MAGIC, &unknown.encode_to_vec()].concat()
}

/// One length-prefixed watch frame.
fn frame(type_: &str, kind: &str, object: Vec<u8>) -> Vec<u8> {
    let event = WatchEventPb {
        r#type: type_.into(),
        object: Some(RawExtensionPb {
            raw: envelope(kind, object),
        }),
    };
    let bytes = event.encode_to_vec();
    [&(bytes.len() as u32).to_be_bytes()[..], &bytes].concat()
}

fn pod(name: &str, node: &str, rv: &str, ready: &str) -> Vec<u8> {
    PodPb {
        metadata: Some(ObjectMetaPb {
            name: Some(name.into()),
            namespace: Some("kube-system".into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some(rv.into()),
            labels: BTreeMap::from([("app".into(), "cni".into())]),
            ..ObjectMetaPb::default()
        }),
        spec: Some(PodSpecPb {
            node_name: Some(node.into()),
        }),
        status: Some(PodStatusPb {
            phase: Some("Running".into()),
            conditions: vec![PodConditionPb {
                r#type: "Ready".into(),
                status: ready.into(),
            }],
        }),
    }
    .encode_to_vec()
}

fn bookmark(rv: &str, end_of_list: bool) -> Vec<u8> {
    let annotations = if end_of_list {
        BTreeMap::from([(INITIAL_EVENTS_END.to_string(), "true".to_string())])
    } else {
        BTreeMap::new()
    };
    PodPb {
        metadata: Some(ObjectMetaPb {
            resource_version: Some(rv.into()),
            annotations,
            ..ObjectMetaPb::default()
        }),
        ..PodPb::default()
    }
    .encode_to_vec()
}

fn status(code: i32, reason: &str, message: &str) -> Vec<u8> {
    StatusPb {
        status: Some("Failure".into()),
        message: Some(message.into()),
        reason: Some(reason.into()),
        details: None,
        code: Some(code),
    }
    .encode_to_vec()
}

fn has(call: &Call, key: &str, value: &str) -> bool {
    call.query_pairs()
        .iter()
        .any(|(k, v)| k == key && v == value)
}

fn param(call: &Call, key: &str) -> Option<String> {
    call.query_pairs()
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// The next request: a protobuf watch of the selected pods. `from`: the
/// resourceVersion it resumes from; `None`, a watch that lists first.
async fn expect_protobuf_watch(api: &mut ApiServerVerifier, from: Option<&str>) -> Call {
    let call = api.next_call("a protobuf watch of pods").await;
    assert_eq!(
        (&call.method, call.path.as_str()),
        (&Method::GET, PODS),
        "{}",
        call.describe()
    );
    assert_eq!(call.accept.as_deref(), Some(PROTOBUF_WATCH));
    assert!(has(&call, "watch", "true"), "{}", call.describe());
    assert!(
        has(&call, "allowWatchBookmarks", "true"),
        "{}",
        call.describe()
    );
    assert_eq!(param(&call, "labelSelector").as_deref(), Some("app%3Dcni"));
    match from {
        None => {
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
        }
        Some(rv) => {
            assert_eq!(param(&call, "resourceVersion").as_deref(), Some(rv));
            assert!(
                param(&call, "sendInitialEvents").is_none(),
                "{}",
                call.describe()
            );
        }
    }
    call
}

fn reply_frames(call: Call, frames: &[Vec<u8>]) {
    call.reply_raw(200, PROTOBUF, frames.concat());
}

/// Short names of the events, until `n` of them were seen.
async fn first_events(
    mut events: BoxStream<'static, Result<Event<SlimPod>, watcher::Error>>,
    n: usize,
) -> Vec<String> {
    let name = |p: &SlimPod| p.0.metadata.name.clone().unwrap_or_default();
    let mut seen = Vec::new();
    while seen.len() < n {
        let Some(event) = events.next().await else {
            break;
        };
        seen.push(match event {
            Ok(Event::Init) => "init".to_string(),
            Ok(Event::InitApply(p)) => format!("list {}", name(&p)),
            Ok(Event::InitDone) => "done".to_string(),
            Ok(Event::Apply(p)) => {
                let ready = p.0.status.as_ref().and_then(|s| s.conditions.as_ref());
                format!(
                    "apply {} on {} ready={}",
                    name(&p),
                    p.0.spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default(),
                    ready.map(|c| c[0].status.clone()).unwrap_or_default()
                )
            }
            Ok(Event::Delete(p)) => format!("delete {}", name(&p)),
            Err(watcher::Error::WatchError(s)) => format!("error {}", s.code),
            Err(watcher::Error::WatchStartFailed(kube::Error::Api(s))) => {
                format!("refused {} {}: {}", s.code, s.reason, s.message)
            }
            Err(e) => format!("error: {e}"),
        });
    }
    seen
}

#[tokio::test]
async fn the_list_and_later_changes_come_from_protobuf_frames_and_the_watch_resumes_where_it_was() {
    let seen = with_scripted_server(
        |mut api| async move {
            let call = expect_protobuf_watch(&mut api, None).await;
            reply_frames(
                call,
                &[
                    frame("ADDED", "Pod", pod("cni-a", "n1", "11", "False")),
                    frame("ADDED", "Pod", pod("cni-b", "n2", "12", "True")),
                    frame("BOOKMARK", "Pod", bookmark("12", true)),
                    frame("MODIFIED", "Pod", pod("cni-a", "n1", "13", "True")),
                    frame("BOOKMARK", "Pod", bookmark("15", false)),
                    frame("DELETED", "Pod", pod("cni-b", "n2", "16", "True")),
                ],
            );
            // The server ended the watch: it resumes from the last version seen.
            let call = expect_protobuf_watch(&mut api, Some("16")).await;
            reply_frames(
                call,
                &[frame("ADDED", "Pod", pod("cni-c", "n3", "17", "False"))],
            );
            let call = expect_protobuf_watch(&mut api, Some("17")).await;
            // Too old to resume from: it lists again.
            reply_frames(
                call,
                &[frame(
                    "ERROR",
                    "Status",
                    status(410, "Expired", "too old resource version"),
                )],
            );
            let call = expect_protobuf_watch(&mut api, None).await;
            reply_frames(
                call,
                &[
                    frame("ADDED", "Pod", pod("cni-a", "n1", "20", "True")),
                    frame("BOOKMARK", "Pod", bookmark("20", true)),
                ],
            );
        },
        |client| first_events(watch_pods(client, "kube-system", SELECTOR), 11),
    )
    .await;
    assert_eq!(
        seen,
        [
            "init",
            "list cni-a",
            "list cni-b",
            "done",
            "apply cni-a on n1 ready=True",
            "delete cni-b",
            "apply cni-c on n3 ready=False",
            "error 410",
            "init",
            "list cni-a",
            "done",
        ]
    );
}

#[tokio::test]
async fn a_refusal_in_protobuf_reads_as_the_api_server_status() {
    let seen = with_scripted_server(
        |mut api| async move {
            let call = expect_protobuf_watch(&mut api, None).await;
            call.reply_raw(
                403,
                "application/vnd.kubernetes.protobuf",
                envelope(
                    "Status",
                    status(403, "Forbidden", "pods is forbidden: cannot watch"),
                ),
            );
        },
        |client| first_events(watch_pods(client, "kube-system", SELECTOR), 1),
    )
    .await;
    assert_eq!(
        seen,
        ["refused 403 Forbidden: pods is forbidden: cannot watch"]
    );
}

#[tokio::test]
async fn where_the_server_answers_in_json_the_json_watch_takes_over() {
    let lists = Arc::new(InitialLists::default());
    let seen = with_scripted_server(
        |mut api| async move {
            // A proxy that knows only JSON.
            let call = expect_protobuf_watch(&mut api, None).await;
            call.reply_lines(&[]);
            let call = api.next_call("a JSON watch of pods").await;
            assert_eq!(call.path, PODS);
            assert_ne!(call.accept.as_deref(), Some(PROTOBUF_WATCH));
            assert!(has(&call, "sendInitialEvents", "true"), "{}", call.describe());
            call.reply_lines(&[
                json!({"type": "ADDED", "object": {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "cni-a", "namespace": "kube-system", "resourceVersion": "11"},
                    "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}}),
                json!({"type": "BOOKMARK", "object": {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"resourceVersion": "11",
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}}),
            ]);
        },
        |client| {
            let key = ("kube-system".to_string(), SELECTOR.to_string());
            first_events(pod_events(client, &key, lists.clone()), 3)
        },
    )
    .await;
    // The refused watch sent no Init: the JSON watch's is the first.
    assert_eq!(seen, ["init", "list cni-a", "done"]);
    assert!(lists.streaming());
}

#[tokio::test]
async fn where_lists_are_paged_pods_are_watched_in_json_from_the_start() {
    let lists = Arc::new(InitialLists::paged());
    let seen = with_scripted_server(
        |mut api| async move {
            let call = api.next_call("a paged JSON list of pods").await;
            assert_eq!(call.path, PODS);
            assert!(has(&call, "limit", "500"), "{}", call.describe());
            call.reply(
                200,
                &json!({"apiVersion": "v1", "kind": "PodList",
                    "metadata": {"resourceVersion": "20"}, "items": [{
                        "metadata": {"name": "cni-a", "namespace": "kube-system", "resourceVersion": "11"},
                        "spec": {"nodeName": "n1"}}]}),
            );
        },
        |client| {
            let key = ("kube-system".to_string(), SELECTOR.to_string());
            first_events(pod_events(client, &key, lists.clone()), 3)
        },
    )
    .await;
    assert_eq!(seen, ["init", "list cni-a", "done"]);
}
