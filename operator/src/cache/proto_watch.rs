//! A pod watch that reads protobuf (see `pod_proto`): the initial list streamed by
//! the API server (WatchList), then the watch resumed from the last
//! resourceVersion seen, as kube's `watcher` does for JSON. It yields the
//! watcher's own events and errors, so the backoff, the 410 handling, the restart
//! counter and the pod cache take it unchanged.
//!
//! kube's client speaks JSON only; this module sends its requests through the
//! same `Client` (credentials, timeouts, request metrics, limiter) and frames and
//! decodes the body itself.

use bytes::{Buf, Bytes, BytesMut};
use futures::{StreamExt, stream::BoxStream};
use http::{HeaderValue, header};
use http_body_util::BodyExt;
use kube::{
    Client,
    api::WatchParams,
    client::Body,
    core::Status,
    runtime::watcher::{self, Event},
};

use crate::cache::{
    k8s_proto::{FrameError, is_protobuf, read_error, refusal},
    pod_proto::{PodFrame, decode_frame},
    slim::SlimPod,
};

/// What the watch asks for: protobuf, framed for a stream.
pub const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The server ends a watch after this long (kube's watcher asks the same); the
/// watch then resumes from where it was.
const WATCH_TIMEOUT_SECS: u32 = 290;

/// A frame longer than this is refused instead of buffered: no pod comes near it,
/// and a corrupt length must not make the operator allocate gigabytes.
const MAX_FRAME_BYTES: usize = 16 << 20;

/// The pods of `namespace` that `selector` selects, as a watcher stream.
pub fn watch_pods(
    client: Client,
    namespace: &str,
    selector: &str,
) -> BoxStream<'static, Result<Event<SlimPod>, watcher::Error>> {
    let watch = ProtoWatch {
        client,
        path: format!("/api/v1/namespaces/{namespace}/pods"),
        selector: selector.to_string(),
        next: Next::List,
    };
    futures::stream::unfold(watch, |mut w| async move {
        let item = w.step().await;
        Some((item, w))
    })
    .filter_map(futures::future::ready)
    .boxed()
}

struct ProtoWatch {
    client: Client,
    path: String,
    selector: String,
    next: Next,
}

enum Next {
    /// Open a watch that streams the initial list first.
    List,
    /// Reading the initial list.
    Listing(Frames),
    /// Open a watch from this resourceVersion.
    Resume(String),
    /// Watching, the last resourceVersion seen with it.
    Watching(Frames, String),
}

type Item = Option<Result<Event<SlimPod>, watcher::Error>>;

impl ProtoWatch {
    /// One step: an event, an error, or nothing to pass on (a bookmark).
    async fn step(&mut self) -> Item {
        match std::mem::replace(&mut self.next, Next::List) {
            Next::List => match open(&self.client, &self.path, &self.selector, None).await {
                Ok(frames) => {
                    self.next = Next::Listing(frames);
                    Some(Ok(Event::Init))
                }
                Err(e) => Some(Err(watcher::Error::WatchStartFailed(e))),
            },
            Next::Resume(rv) => {
                match open(&self.client, &self.path, &self.selector, Some(&rv)).await {
                    Ok(frames) => {
                        self.next = Next::Watching(frames, rv);
                        None
                    }
                    Err(e) => {
                        if !is_gone(&e) {
                            self.next = Next::Resume(rv);
                        }
                        Some(Err(watcher::Error::WatchStartFailed(e)))
                    }
                }
            }
            Next::Listing(mut frames) => match frames.next().await {
                Ok(Some(PodFrame::Added(pod) | PodFrame::Modified(pod))) => {
                    self.next = Next::Listing(frames);
                    Some(Ok(Event::InitApply(pod)))
                }
                Ok(Some(PodFrame::Bookmark {
                    resource_version,
                    end_of_list,
                })) => {
                    if end_of_list {
                        self.next = Next::Watching(frames, resource_version);
                        Some(Ok(Event::InitDone))
                    } else {
                        self.next = Next::Listing(frames);
                        None
                    }
                }
                // The API server sends no deletions in an initial list.
                Ok(Some(PodFrame::Deleted(_))) => {
                    self.next = Next::Listing(frames);
                    None
                }
                Ok(Some(PodFrame::Error(status))) => {
                    Some(Err(watcher::Error::WatchError(Box::new(status))))
                }
                // A list cut short starts over.
                Ok(None) => None,
                Err(e) => Some(Err(watcher::Error::WatchFailed(e))),
            },
            Next::Watching(mut frames, rv) => match frames.next().await {
                Ok(Some(PodFrame::Added(pod) | PodFrame::Modified(pod))) => {
                    self.next = Next::Watching(frames, version_of(&pod, rv));
                    Some(Ok(Event::Apply(pod)))
                }
                Ok(Some(PodFrame::Deleted(pod))) => {
                    self.next = Next::Watching(frames, version_of(&pod, rv));
                    Some(Ok(Event::Delete(pod)))
                }
                Ok(Some(PodFrame::Bookmark {
                    resource_version, ..
                })) => {
                    self.next = Next::Watching(frames, resource_version);
                    None
                }
                Ok(Some(PodFrame::Error(status))) => {
                    // 410 Gone: what we had is too old to resume from; list again.
                    if status.code != 410 {
                        self.next = Next::Resume(rv);
                    }
                    Some(Err(watcher::Error::WatchError(Box::new(status))))
                }
                Ok(None) => {
                    self.next = Next::Resume(rv);
                    None
                }
                Err(e) => {
                    self.next = Next::Resume(rv);
                    Some(Err(watcher::Error::WatchFailed(e)))
                }
            },
        }
    }
}

/// Opens a watch: from `rv`, or (without) one that lists first, from the
/// API server's cache as kube's streaming watcher asks (`resourceVersion=0`).
async fn open(
    client: &Client,
    path: &str,
    selector: &str,
    rv: Option<&str>,
) -> Result<Frames, kube::Error> {
    let mut params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
    if !selector.is_empty() {
        params = params.labels(selector);
    }
    if rv.is_none() {
        params = params.initial_events();
    }
    let mut request = kube::core::Request::new(path)
        .watch(&params, rv.unwrap_or("0"))
        .map_err(kube::Error::BuildRequest)?
        .map(Body::from);
    let headers = request.headers_mut();
    headers.insert(header::ACCEPT, HeaderValue::from_static(PROTOBUF_WATCH));
    // Kubernetes 1.37 compresses watch streams; frames are read as they come.
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    let response = client.send(request).await?;
    let code = response.status();
    if !code.is_success() {
        let body = response.into_body().collect().await?.to_bytes();
        return Err(kube::Error::Api(Box::new(refusal(code.as_u16(), &body))));
    }
    if !is_protobuf(response.headers().get(header::CONTENT_TYPE)) {
        // Something between us and the API server answered, or a server
        // that does not encode pods as protobuf: the JSON watch takes over.
        return Err(kube::Error::Api(Box::new(
            Status::failure(
                "the pod watch was not answered in protobuf",
                "NotAcceptable",
            )
            .with_code(406),
        )));
    }
    Ok(Frames {
        body: response.into_body().into_data_stream().boxed(),
        buf: BytesMut::new(),
    })
}

fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410)
}

fn version_of(pod: &SlimPod, last: String) -> String {
    pod.0.metadata.resource_version.clone().unwrap_or(last)
}

/// The frames of a protobuf watch body: each a 4-byte big-endian length, then
/// that many bytes.
struct Frames {
    body: BoxStream<'static, Result<Bytes, kube::Error>>,
    buf: BytesMut,
}

impl Frames {
    /// The next decoded frame; `None` when the server ended the watch.
    async fn next(&mut self) -> Result<Option<PodFrame>, kube::Error> {
        loop {
            if self.buf.len() >= 4 {
                let len =
                    u32::from_be_bytes(self.buf[..4].try_into().expect("four bytes")) as usize;
                if len > MAX_FRAME_BYTES {
                    return Err(read_error(format!(
                        "a watch frame of {len} bytes (at most {MAX_FRAME_BYTES})"
                    )));
                }
                if self.buf.len() >= 4 + len {
                    self.buf.advance(4);
                    let frame = self.buf.split_to(len);
                    return decode_frame(&frame)
                        .map(Some)
                        .map_err(|e: FrameError| read_error(e.to_string()));
                }
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(e),
                // A frame cut short is a connection that broke, not an end.
                None if !self.buf.is_empty() => {
                    return Err(read_error("the watch ended inside a frame".into()));
                }
                None => return Ok(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::pod_proto::encode_event;
    use prost::Message;

    fn bookmark_frame(rv: &str) -> Vec<u8> {
        let pod = crate::cache::pod_proto::PodPb {
            metadata: Some(crate::cache::k8s_proto::ObjectMetaPb {
                resource_version: Some(rv.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let event = encode_event("BOOKMARK", pod.encode_to_vec());
        [&(event.len() as u32).to_be_bytes()[..], &event].concat()
    }

    fn frames_of(chunks: Vec<Vec<u8>>) -> Frames {
        Frames {
            body: futures::stream::iter(chunks.into_iter().map(|c| Ok(Bytes::from(c)))).boxed(),
            buf: BytesMut::new(),
        }
    }

    fn version(frame: Option<PodFrame>) -> String {
        match frame {
            Some(PodFrame::Bookmark {
                resource_version, ..
            }) => resource_version,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn frames_are_read_whole_however_the_body_is_cut() {
        let body = [
            bookmark_frame("1"),
            bookmark_frame("22"),
            bookmark_frame("333"),
        ]
        .concat();
        // every cut: one byte at a time, a length prefix split, two frames in one chunk
        for size in [1, 3, 5, 7, body.len()] {
            let mut frames = frames_of(body.chunks(size).map(<[u8]>::to_vec).collect());
            let mut seen = Vec::new();
            while let Some(frame) = frames.next().await.unwrap() {
                seen.push(version(Some(frame)));
            }
            assert_eq!(seen, ["1", "22", "333"], "chunks of {size}");
        }
    }

    #[tokio::test]
    async fn a_body_that_ends_inside_a_frame_is_a_broken_connection() {
        let frame = bookmark_frame("1");
        let mut frames = frames_of(vec![frame[..frame.len() - 2].to_vec()]);
        let e = frames.next().await.unwrap_err();
        assert!(e.to_string().contains("inside a frame"), "{e}");
    }

    #[tokio::test]
    async fn a_length_beyond_any_pod_is_refused_before_it_is_buffered() {
        let mut frames = frames_of(vec![vec![0x7f, 0xff, 0xff, 0xff, 0, 0]]);
        let e = frames.next().await.unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
    }
}
