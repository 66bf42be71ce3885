//! The baseline's hand-off between what reads nodes (its watch, its cold start's
//! list) and what writes them: the reader puts each node into an unbounded queue
//! and never waits on a write; `writers` tasks take the nodes in order, one write
//! each at a time. A reader behind `buffer_unordered` stops reading while every
//! slot holds a write: with reads and writes on one thread, at 15,000 nodes such a
//! baseline's writes lag the flips by 20-46 s with each patch answered in under
//! 0.5 s, and it is no limit (docs/performance.md#baseline-hand-off).

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::{Mutex, mpsc};

/// How long the nodes waited in the queue for a writer, summed.
#[derive(Default)]
pub(crate) struct Waits {
    taken: AtomicU64,
    micros: AtomicU64,
}

impl Waits {
    fn record(&self, waited: Duration) {
        self.taken.fetch_add(1, Ordering::Relaxed);
        self.micros
            .fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
    }

    /// Nodes taken by a writer so far, and the seconds they waited, summed.
    pub(crate) fn so_far(&self) -> (u64, f64) {
        (
            self.taken.load(Ordering::Relaxed),
            self.micros.load(Ordering::Relaxed) as f64 / 1e6,
        )
    }
}

/// The queue's input. Dropping it lets the writers end once the queue is empty.
pub(crate) struct Handoff<T>(mpsc::UnboundedSender<(Instant, T)>);

impl<T> Handoff<T> {
    /// Queues `item` without waiting; false once every writer has ended.
    pub(crate) fn put(&self, item: T) -> bool {
        self.0.send((Instant::now(), item)).is_ok()
    }
}

/// Starts `writers` tasks on the current runtime, each taking the oldest queued
/// item and awaiting `write` on it before it takes another. Returns the queue's
/// input and a future that ends when the input was dropped and every item written.
pub(crate) fn start_writers<T, F, Fut>(
    writers: usize,
    waits: Arc<Waits>,
    write: F,
) -> (Handoff<T>, impl Future<Output = ()>)
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (input, queue) = mpsc::unbounded_channel::<(Instant, T)>();
    let queue = Arc::new(Mutex::new(queue));
    let write = Arc::new(write);
    let tasks: Vec<_> = (0..writers.max(1))
        .map(|_| {
            let (queue, write, waits) = (queue.clone(), write.clone(), waits.clone());
            tokio::spawn(async move {
                loop {
                    // The lock is held while waiting, so the writers take in order.
                    let next = queue.lock().await.recv().await;
                    let Some((queued, item)) = next else { return };
                    waits.record(queued.elapsed());
                    write(item).await;
                }
            })
        })
        .collect();
    let all_written = async move {
        for task in tasks {
            let _ = task.await;
        }
    };
    (Handoff(input), all_written)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_item_is_written_once_with_at_most_writers_in_flight() {
        let (in_flight, most, written) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(std::sync::Mutex::new(Vec::new())),
        );
        let waits = Arc::new(Waits::default());
        let (queue, all_written) = start_writers(3, waits.clone(), {
            let (in_flight, most, written) = (in_flight.clone(), most.clone(), written.clone());
            move |i: usize| {
                let (in_flight, most, written) = (in_flight.clone(), most.clone(), written.clone());
                async move {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    written.lock().unwrap().push(i);
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                }
            }
        });
        for i in 0..60 {
            assert!(queue.put(i));
        }
        drop(queue);
        all_written.await;
        let mut written = written.lock().unwrap().clone();
        written.sort_unstable();
        assert_eq!(written, (0..60).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 3);
        let (taken, waited) = waits.so_far();
        assert_eq!(taken, 60);
        // 60 items, 3 at a time, 2 ms each: the last ones waited
        assert!(waited > 0.0, "waited {waited} s");
    }

    #[tokio::test]
    async fn the_reader_never_waits_on_a_write() {
        let (release, released) = tokio::sync::watch::channel(false);
        let (queue, all_written) = start_writers(1, Arc::new(Waits::default()), move |_: u32| {
            let mut released = released.clone();
            async move {
                let _ = released.wait_for(|r| *r).await;
            }
        });
        // the one writer is stuck on the first item; the rest still go in at once
        for i in 0..10_000 {
            assert!(queue.put(i));
        }
        drop(queue);
        release.send(true).unwrap();
        all_written.await;
    }
}
