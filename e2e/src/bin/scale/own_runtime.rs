//! Runs a part of the benchmark as a process of its own would: on threads and a
//! tokio runtime of its own, its client made there, so nothing else in this
//! process delays it. An observer on the runtime it shares with the flips and the
//! probes is shown flips 12-32 s late at 15,000 nodes; on a runtime of its own,
//! 1-2 s (docs/performance.md#observer-on-its-own-runtime).

use std::future::Future;

use futures::channel::oneshot;
use kube::{Client, Config};

use crate::Result;

/// The thread running one part. Dropped without [`OwnRuntime::stop`], the part
/// runs on until the process ends.
pub(crate) struct OwnRuntime {
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl OwnRuntime {
    /// Starts `run` with a client for `config` on a thread named `name` and a
    /// runtime of `workers` threads (1: the thread itself).
    pub(crate) fn start<F, Fut>(name: &str, workers: usize, config: Config, run: F) -> Result<Self>
    where
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let runtime = match workers {
            1 => tokio::runtime::Builder::new_current_thread(),
            _ => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(workers).thread_name(name);
                b
            }
        }
        .enable_all()
        .build()?;
        let client = {
            let _inside = runtime.enter();
            Client::try_from(config)?
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        () = run(client) => {}
                        // A dropped handle leaves the part running.
                        Ok(()) = stopped => {}
                    }
                });
                // What is in flight is dropped with the runtime, as when a
                // process ends.
                runtime.shutdown_background();
            })?;
        Ok(OwnRuntime { stop, thread })
    }

    /// Runs `run` to its end as [`OwnRuntime::start`] would and hands back what
    /// it returned: for a part the benchmark waits out, such as a cold start.
    pub(crate) async fn run_to_end<F, Fut, T>(
        name: &str,
        workers: usize,
        config: Config,
        run: F,
    ) -> Result<T>
    where
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = T>,
        T: Send + 'static,
    {
        let (done, result) = oneshot::channel::<T>();
        let part = OwnRuntime::start(name, workers, config, move |client| async move {
            let _ = done.send(run(client).await);
        })?;
        let out = result
            .await
            .map_err(|_| format!("{name} ended without an answer"))?;
        part.stop().await;
        Ok(out)
    }

    /// Stops the part and waits for its thread to end.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}
