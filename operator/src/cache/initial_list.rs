//! How a watch gets what exists before it starts watching: streamed by the API
//! server, or listed in pages when the server cannot stream.
//!
//! Each page of a paged list is a scan of its own for the API server, from where
//! the page starts to the end of the namespace, from its watch cache as well. At
//! 15,000 nodes the operator's two label-selected lists of 45,000 critical pods (of
//! 450,000), 180 pages of 500, took 18 s, and the API server's cache looked at 41.9
//! million pods for 184 list requests (`apiserver_cache_list_fetched_objects_total`).
//! A streamed list (a watch with `sendInitialEvents`, Kubernetes' WatchList) is one
//! pass over the watch cache, and neither side holds a page.
//!
//! Not every API server streams: WatchList is beta from Kubernetes 1.32, an
//! administrator can turn it off, and kube-apiserver streams only from an etcd
//! that answers progress requests (3.5.13 and later). Such a server refuses the
//! watch with an error status; the watch then lists in pages, and so does every
//! watch started after it ([`InitialLists`] is shared).

use std::{
    fmt::Debug,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use futures::{StreamExt, stream::BoxStream};
use kube::{
    Api, Resource,
    runtime::watcher::{self, Event},
};
use serde::de::DeserializeOwned;

/// Whether this operator's watches still ask the API server to stream their
/// initial lists. One refusal turns streaming off for every later watch.
#[derive(Debug, Default)]
pub struct InitialLists {
    refused: AtomicBool,
}

impl InitialLists {
    /// Paged lists only, from the start: for tests whose scripted API servers answer pages.
    pub fn paged() -> Self {
        InitialLists {
            refused: AtomicBool::new(true),
        }
    }

    pub fn streaming(&self) -> bool {
        !self.refused.load(Ordering::Acquire)
    }

    fn refuse(&self) {
        self.refused.store(true, Ordering::Release);
    }
}

/// True for an answer that says the API server cannot stream an initial list, as
/// opposed to one that any watch could get (the server restarting, throttling, a
/// broken connection): those the watcher retries as they are.
fn refuses_streaming(e: &watcher::Error) -> bool {
    let code = match e {
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return false,
    };
    !matches!(code, 401 | 410 | 429 | 503 | 504)
}

/// `watcher::watcher(api, paged)`, with the initial list streamed while the API
/// server streams. `paged` says how to page a list (and what to select): a
/// streamed list takes its selectors and ignores its page size.
pub fn watch_with_initial_list<K>(
    api: Api<K>,
    paged: watcher::Config,
    lists: Arc<InitialLists>,
) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    if !lists.streaming() {
        return watcher::watcher(api, paged).boxed();
    }
    let streamed = watcher::watcher(api.clone(), paged.clone().streaming_lists()).boxed();
    fall_back_to_pages(streamed, lists, move || {
        watcher::watcher(api.clone(), paged.clone()).boxed()
    })
}

/// Passes `streamed` on until its first initial list is done. An error before that
/// which says the server cannot stream is not passed on: the watch goes on with
/// `paged()` (whose `Init` restarts the list the consumer was collecting).
fn fall_back_to_pages<K, P>(
    streamed: BoxStream<'static, Result<Event<K>, watcher::Error>>,
    lists: Arc<InitialLists>,
    paged: P,
) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
where
    K: Send + 'static,
    P: Fn() -> BoxStream<'static, Result<Event<K>, watcher::Error>> + Send + 'static,
{
    fall_back_on_refusal(streamed, move |e| {
        tracing::info!(
            error = %e,
            "the API server does not stream initial lists; listing in pages"
        );
        lists.refuse();
        paged()
    })
}

/// Passes `streamed` on until its first initial list is done. An error before that
/// which refuses what `streamed` asked for (as opposed to one any watch can get,
/// see [`refuses_streaming`]) is not passed on: `instead` takes over, and its
/// `Init` restarts the list the consumer was collecting.
pub fn fall_back_on_refusal<K, P>(
    streamed: BoxStream<'static, Result<Event<K>, watcher::Error>>,
    instead: P,
) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
where
    K: Send + 'static,
    P: FnOnce(&watcher::Error) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
        + Send
        + 'static,
{
    struct Watch<K, P> {
        inner: BoxStream<'static, Result<Event<K>, watcher::Error>>,
        /// Until the first list is done: what takes over on a refusal.
        undecided: Option<P>,
    }
    let watch = Watch {
        inner: streamed,
        undecided: Some(instead),
    };
    futures::stream::unfold(watch, |mut w| async move {
        loop {
            let event = w.inner.next().await?;
            if w.undecided.is_some() {
                match &event {
                    Ok(Event::InitDone) => w.undecided = None,
                    Err(e) if refuses_streaming(e) => {
                        let instead = w.undecided.take().expect("checked above");
                        w.inner = instead(e);
                        continue;
                    }
                    _ => {}
                }
            }
            return Some((event, w));
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> Box<kube::core::Status> {
        Box::new(kube::core::Status {
            code,
            message: message.into(),
            ..Default::default()
        })
    }

    type Events = Vec<Result<Event<u32>, watcher::Error>>;

    fn stream_of(events: Events) -> BoxStream<'static, Result<Event<u32>, watcher::Error>> {
        futures::stream::iter(events).boxed()
    }

    fn kinds(events: &[Result<Event<u32>, watcher::Error>]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Ok(Event::Init) => "init".to_string(),
                Ok(Event::InitApply(n)) => format!("list {n}"),
                Ok(Event::InitDone) => "done".to_string(),
                Ok(Event::Apply(n)) => format!("apply {n}"),
                Ok(Event::Delete(n)) => format!("delete {n}"),
                Err(_) => "error".to_string(),
            })
            .collect()
    }

    fn paged() -> BoxStream<'static, Result<Event<u32>, watcher::Error>> {
        stream_of(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(1)),
            Ok(Event::InitApply(2)),
            Ok(Event::InitDone),
            Ok(Event::Apply(3)),
        ])
    }

    #[tokio::test]
    async fn a_server_that_cannot_stream_gets_paged_lists_from_then_on() {
        // kube-apiserver with an etcd older than 3.5.13 answers the watch, then
        // sends this error as its first event.
        let refused = stream_of(vec![
            Ok(Event::Init),
            Err(watcher::Error::WatchError(status(
                500,
                "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled",
            ))),
        ]);
        let lists = Arc::new(InitialLists::default());
        let got: Events = fall_back_to_pages(refused, lists.clone(), paged)
            .collect()
            .await;
        assert_eq!(
            kinds(&got),
            ["init", "init", "list 1", "list 2", "done", "apply 3"]
        );
        assert!(!lists.streaming());
    }

    #[tokio::test]
    async fn a_refused_watch_request_falls_back_too() {
        // WatchList turned off: the API server refuses the parameter.
        let refused = stream_of(vec![Err(watcher::Error::WatchStartFailed(
            kube::Error::Api(status(422, "sendInitialEvents is forbidden")),
        ))]);
        let lists = Arc::new(InitialLists::default());
        let got: Events = fall_back_to_pages(refused, lists.clone(), paged)
            .collect()
            .await;
        assert_eq!(kinds(&got), ["init", "list 1", "list 2", "done", "apply 3"]);
        assert!(!lists.streaming());
    }

    #[tokio::test]
    async fn a_server_that_streams_keeps_streaming_and_later_errors_pass() {
        let streamed = stream_of(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(7)),
            Ok(Event::InitDone),
            // after the list is in, an error is the watch's own: passed on, retried
            Err(watcher::Error::WatchError(status(500, "internal error"))),
            Ok(Event::Apply(8)),
        ]);
        let lists = Arc::new(InitialLists::default());
        let got: Events = fall_back_to_pages(streamed, lists.clone(), paged)
            .collect()
            .await;
        assert_eq!(kinds(&got), ["init", "list 7", "done", "error", "apply 8"]);
        assert!(lists.streaming());
    }

    #[tokio::test]
    async fn errors_any_watch_can_get_do_not_turn_streaming_off() {
        for code in [401, 410, 429, 503, 504] {
            let streamed = stream_of(vec![
                Err(watcher::Error::WatchError(status(code, "try again"))),
                Ok(Event::Init),
                Ok(Event::InitApply(5)),
                Ok(Event::InitDone),
            ]);
            let lists = Arc::new(InitialLists::default());
            let got: Events = fall_back_to_pages(streamed, lists.clone(), paged)
                .collect()
                .await;
            assert_eq!(got.len(), 4, "{code}: {:?}", kinds(&got));
            assert!(got[0].is_err());
            assert!(lists.streaming(), "{code}");
        }
        // nor does a broken connection
        let broken = stream_of(vec![Err(watcher::Error::NoResourceVersion)]);
        let lists = Arc::new(InitialLists::default());
        let got: Events = fall_back_to_pages(broken, lists.clone(), paged)
            .collect()
            .await;
        assert_eq!(got.len(), 1);
        assert!(lists.streaming());
    }
}
