//! Whether the node and the policy watches keep failing, for /healthz.

use std::{sync::Mutex, time::Duration};

#[derive(Debug, Default)]
pub struct Health {
    pub node_watch: WatchHealth,
    pub policy_watch: WatchHealth,
}

/// Since when a watch has failed without a break, if it has.
#[derive(Debug, Default)]
pub struct WatchHealth(Mutex<Option<std::time::Instant>>);

impl WatchHealth {
    /// A watch failed (an error from the API server or the connection).
    pub fn failed(&self) {
        self.0
            .lock()
            .expect("watch health lock")
            .get_or_insert_with(std::time::Instant::now);
    }

    /// A watch delivered something: the break is over.
    pub fn delivered(&self) {
        *self.0.lock().expect("watch health lock") = None;
    }

    pub fn failing_for(&self) -> Option<Duration> {
        self.0
            .lock()
            .expect("watch health lock")
            .map(|since| since.elapsed())
    }
}
