//! Polling: wait for the operator to get somewhere, or make sure it stays put.

use std::{
    fmt::Display,
    time::{Duration, Instant},
};

use crate::Result;

/// How long `eventually` waits by default.
pub const TIMEOUT: Duration = Duration::from_secs(20);
/// How often `eventually` and `always_for` look.
pub const INTERVAL: Duration = Duration::from_millis(50);

/// Polls `check` every 50 ms until it returns `Ok`, for at most 20 s. A check says
/// why it is not there yet with `Err`; the last such reason is in the timeout error.
pub async fn eventually<T>(what: impl Display, check: impl AsyncFnMut() -> Result<T>) -> Result<T> {
    eventually_within(what, TIMEOUT, INTERVAL, check).await
}

pub async fn eventually_within<T>(
    what: impl Display,
    timeout: Duration,
    interval: Duration,
    mut check: impl AsyncFnMut() -> Result<T>,
) -> Result<T> {
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if started.elapsed() >= timeout {
            return Err(format!(
                "timed out after {timeout:?} waiting for {what}; last check: {last}"
            )
            .into());
        }
        tokio::time::sleep(interval).await;
    }
}

/// Checks every 50 ms for `duration` that `check` keeps holding; fails at the first miss.
pub async fn always_for(
    what: impl Display,
    duration: Duration,
    mut check: impl AsyncFnMut() -> Result<()>,
) -> Result<()> {
    let started = Instant::now();
    loop {
        if let Err(e) = check().await {
            return Err(format!(
                "expected {what} to hold for {duration:?}, but after {:?}: {e}",
                started.elapsed()
            )
            .into());
        }
        if started.elapsed() >= duration {
            return Ok(());
        }
        tokio::time::sleep(INTERVAL).await;
    }
}
