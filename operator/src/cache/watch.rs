//! How the node, pod and policy watches list and retry, and the one mapping of
//! their events that the slim decoders need.

use std::time::Duration;

use futures::{Stream, StreamExt};

use crate::{
    jitter::jitter,
    telemetry::metrics::{Metrics, WatchRestartLabels},
};
use kube::runtime::{
    utils::Backoff,
    watcher::{self, Event},
};

/// Drops "410 Gone" from a watch before the backoff sees it. The watcher answers
/// it by listing again on its next poll; counted as a failure, it would wait a
/// backoff step first, although the API server is up and only asks for the relist
/// (after its own restart, every watch gets one).
pub fn relist_at_once<K, S>(events: S) -> impl Stream<Item = Result<Event<K>, watcher::Error>>
where
    S: Stream<Item = Result<Event<K>, watcher::Error>>,
{
    events.filter(|event| {
        let gone = match event {
            Err(watcher::Error::WatchError(status)) => status.code == 410,
            Err(
                watcher::Error::WatchStartFailed(kube::Error::Api(status))
                | watcher::Error::WatchFailed(kube::Error::Api(status)),
            ) => status.code == 410,
            _ => false,
        };
        if gone {
            tracing::info!("watch expired (410 Gone); listing again");
        }
        futures::future::ready(!gone)
    })
}

/// Counts a watch's failures and relists in `taint_operator_watch_restarts_total`.
///
/// A watch that the API server ends cleanly (its timeout, or a watcher it closed
/// for falling behind) resumes from its last resourceVersion without an event:
/// those show only as `api_requests_total{verb="watch"}`. When the resourceVersion
/// is too old by then (410 Gone), the watcher lists everything again: `relist`.
#[derive(Debug)]
pub struct RestartCounter {
    watch: &'static str,
    listed: bool,
}

impl RestartCounter {
    pub fn new(watch: &'static str) -> Self {
        RestartCounter {
            watch,
            listed: false,
        }
    }

    pub fn observe<K>(&mut self, metrics: &Metrics, event: &Result<Event<K>, watcher::Error>) {
        let cause = match event {
            Ok(Event::Init) if self.listed => "relist",
            Ok(Event::InitDone) => {
                self.listed = true;
                return;
            }
            Ok(_) => return,
            Err(watcher::Error::InitialListFailed(_)) => "list_failed",
            Err(watcher::Error::WatchStartFailed(_)) => "watch_failed",
            Err(watcher::Error::WatchError(_)) => "watch_error",
            Err(watcher::Error::WatchFailed(_)) => "connection",
            Err(watcher::Error::NoResourceVersion) => "no_resource_version",
        };
        metrics
            .watch_restarts
            .get_or_create(&WatchRestartLabels {
                watch: self.watch,
                cause,
            })
            .inc();
    }
}

/// The wait between a watch's failed tries: doubling from 250 ms to at most 5 s,
/// ±20%, back to the start once an event comes through.
///
/// kube's default goes up to 30 s. After an API server restart of a few seconds
/// that is up to 30 s more of a node broken and untainted; a watch that retries
/// every 5 s costs one refused connection or one failed request each time.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

pub const WATCH_RETRY_FIRST: Duration = Duration::from_millis(250);
pub const WATCH_RETRY_MAX: Duration = Duration::from_secs(5);

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: WATCH_RETRY_FIRST,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next;
        self.next = (self.next * 2).min(WATCH_RETRY_MAX);
        Some(jitter(wait, 0.2))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = WATCH_RETRY_FIRST;
    }
}

/// Node lists, where the API server does not stream them (see `initial_list`),
/// come in small pages: each page is held whole, as text and decoded, while it is
/// read, and a kubelet's Node is about 10 kB of JSON.
pub fn node_list_pages() -> watcher::Config {
    watcher::Config::default().page_size(100)
}

/// Pod lists, where the API server does not stream them, are label-selected, and
/// the API server scans the namespace's pods again for each page: small pages would
/// make the first sync take minutes at 150,000 pods. A pod is about 3 kB of JSON.
pub fn pod_list_pages() -> watcher::Config {
    watcher::Config::default().page_size(500)
}

/// The same watch event holding the full type (the slim wrappers only change decoding).
pub fn slim_event<S, K>(event: Event<S>, unwrap: impl Fn(S) -> K) -> Event<K> {
    match event {
        Event::Apply(o) => Event::Apply(unwrap(o)),
        Event::Delete(o) => Event::Delete(unwrap(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(unwrap(o)),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_410_reaches_neither_the_backoff_nor_the_log_of_failures() {
        let status = |code| {
            Box::new(kube::core::Status {
                code,
                ..Default::default()
            })
        };
        let events = futures::stream::iter([
            Err(watcher::Error::WatchError(status(410))),
            Ok(Event::<()>::Init),
            Err(watcher::Error::WatchError(status(500))),
        ]);
        let passed: Vec<_> = relist_at_once(events).collect().await;
        assert!(matches!(passed[0], Ok(Event::Init)));
        assert!(matches!(&passed[1], Err(watcher::Error::WatchError(s)) if s.code == 500));
        assert_eq!(passed.len(), 2);
    }

    #[test]
    fn the_watch_backoff_doubles_to_five_seconds_and_resets() {
        let mut b = WatchBackoff::default();
        let waits: Vec<Duration> = (&mut b).take(8).collect();
        let nominal = [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0];
        for (w, n) in waits.iter().zip(nominal) {
            let n = Duration::from_secs_f64(n);
            assert!(
                *w >= n.mul_f64(0.8) && *w <= n.mul_f64(1.2),
                "{w:?} vs {n:?}"
            );
        }
        b.reset();
        assert!(b.next().unwrap() <= WATCH_RETRY_FIRST.mul_f64(1.2));
    }
}
