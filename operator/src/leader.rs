//! Leader election on a `coordination.k8s.io` Lease: only the holder writes.
//!
//! Three durations, as client-go's leader election has them: a lease lasts
//! `duration` (15 s) without renewal; the holder renews every `retry_period`
//! (2 s) and gives up, stopping the process, when it has not renewed for
//! `renew_deadline` (10 s); a standby looks every `retry_period` and takes the
//! lease over only once it has seen the record unchanged for a whole `duration`,
//! measured on its own monotonic clock from when it saw the record change (never
//! by comparing the holder's `renewTime` with its own wall clock, which may be
//! skewed). Every Lease call is bounded by the time left to the deadline, so a
//! connection that hangs instead of failing cannot keep a leader writing past it.
//! Since `renew_deadline < duration`, a leader that cannot renew stops before any
//! standby can acquire: never two writers.
//!
//! The `leading` gauge (`taint_operator_leader`) is 1 from acquiring the lease to
//! losing or releasing it: summed over the replicas it says whether anyone leads.
//! [`LeaseHealth`] tells the liveness probe whether Lease calls still complete.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

// Tokio's clock: the same as the system's monotonic clock, and the tests can pause it.
use tokio::time::Instant;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use prometheus_client::metrics::gauge::Gauge;

use crate::{
    controller::error::{Error, Result},
    write_fence::WriteFence,
};

/// The three durations of an election (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The pause between renewal attempts that said nothing about the lease (an
/// answer lost in transport, our own late write met as a 409), after the first
/// such attempt was tried again at once.
pub const INCONCLUSIVE_PAUSE: Duration = Duration::from_millis(250);

/// When a Lease call last completed (an answer, whatever it said), for liveness.
#[derive(Debug)]
pub struct LeaseHealth {
    started: Instant,
    /// Milliseconds after `started`.
    last_answer: AtomicU64,
}

impl Default for LeaseHealth {
    fn default() -> Self {
        LeaseHealth {
            started: Instant::now(),
            last_answer: AtomicU64::new(0),
        }
    }
}

impl LeaseHealth {
    fn answered(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_answer.store(ms, Ordering::Release);
    }

    /// How long since a Lease call last completed (or since the start).
    pub fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_answer.load(Ordering::Acquire));
        self.started.elapsed().saturating_sub(last)
    }
}

/// The record a standby last saw, and when it saw it change.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Observed {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    resource_version: Option<String>,
}

pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    leading: Gauge,
    health: Arc<LeaseHealth>,
    observed: Mutex<Option<(Observed, Instant)>>,
    fence: WriteFence,
}

/// What one look at the Lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// This replica holds it (acquired or renewed now).
    Held,
    /// Another replica holds it and has renewed it within a lease duration.
    Taken,
    /// The Lease changed between this replica's read and its write (409).
    Raced,
}

/// What one renewal attempt of the leader came to.
enum Attempt {
    Renewed,
    /// Leadership is over: the lease is taken, or the renew deadline passed.
    Lost,
    /// Says nothing about the lease: worth looking again soon.
    Inconclusive(String),
    Failed(String),
}

impl LeaderElector {
    /// `client` should be one of its own, outside the node writes' request limiter:
    /// a renewal must not wait behind a burst of node patches.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
        leading: Gauge,
    ) -> Self {
        debug_assert!(timing.renew_deadline < timing.duration);
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            timing,
            leading,
            health: Arc::default(),
            observed: Mutex::new(None),
            fence: WriteFence::closed(),
        }
    }

    /// Moves `fence` with the Lease: open until the renew deadline after each
    /// acquisition or renewal went out, closed when leadership ends.
    pub fn with_fence(mut self, fence: WriteFence) -> Self {
        fence.close();
        self.fence = fence;
        self
    }

    pub fn health(&self) -> Arc<LeaseHealth> {
        self.health.clone()
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self) {
        let mut logged = false;
        loop {
            let sent = Instant::now();
            let look =
                tokio::time::timeout(self.timing.renew_deadline, self.try_acquire_or_renew()).await;
            match look {
                Ok(Ok(Look::Held)) => {
                    self.fence.open_until(sent + self.timing.renew_deadline);
                    tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
                    self.leading.set(1);
                    return;
                }
                Ok(Ok(Look::Taken)) if !logged => {
                    tracing::info!(lease = %self.name, "another replica leads; waiting");
                    logged = true;
                }
                Ok(Ok(Look::Taken | Look::Raced)) => {}
                Ok(Err(e)) => tracing::warn!(lease = %self.name, error = %e, "lease check failed"),
                Err(_) => tracing::warn!(lease = %self.name, "lease check timed out"),
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    /// Renews the lease until it cannot; returns when leadership is lost (taken,
    /// or not renewed for `renew_deadline`). The caller must stop writing then.
    pub async fn hold(&self) {
        self.renew_while_held().await;
        self.fence.close();
        self.leading.set(0);
    }

    async fn renew_while_held(&self) {
        // The last renewal's request went out then: the lease runs from no later.
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry_period).await;
            // An attempt that says nothing about the lease is tried again at once,
            // then every INCONCLUSIVE_PAUSE until the renew deadline: waiting a
            // whole retry period after each would leave too little of the deadline
            // on an API server answering in seconds: a renewal that timed out, then
            // one that met its late write, leave a try a retry period later 1.2 s
            // (docs/performance.md#lease-renewals).
            let mut tries = 0u32;
            loop {
                let sent = Instant::now();
                match self.renew_once(renewed).await {
                    Attempt::Renewed => {
                        renewed = sent;
                        self.fence.open_until(sent + self.timing.renew_deadline);
                        break;
                    }
                    Attempt::Lost => return,
                    Attempt::Inconclusive(why) => {
                        tracing::info!(lease = %self.name, error = %why, "lease renewal inconclusive; looking again");
                        if tries > 0 {
                            tokio::time::sleep(INCONCLUSIVE_PAUSE).await;
                        }
                        tries += 1;
                    }
                    Attempt::Failed(why) => {
                        tracing::warn!(lease = %self.name, error = %why, "lease renewal failed");
                        break;
                    }
                }
            }
        }
    }

    /// One look at the lease and, while it is ours, one renewal, within what is left
    /// of the renew deadline counted from `renewed`.
    async fn renew_once(&self, renewed: Instant) -> Attempt {
        let Some(left) = self.timing.renew_deadline.checked_sub(renewed.elapsed()) else {
            tracing::error!(lease = %self.name, "lease not renewed within the renew deadline");
            return Attempt::Lost;
        };
        match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
            Ok(Ok(Look::Held)) => Attempt::Renewed,
            Ok(Ok(Look::Taken)) => {
                tracing::error!(lease = %self.name, "lease taken by another replica");
                Attempt::Lost
            }
            // Another replica took it, or an earlier renewal of ours that seemed
            // lost (its answer timed out) reached the API server after our read:
            // the next read tells which.
            Ok(Ok(Look::Raced)) => Attempt::Inconclusive(
                "the lease changed between its read and the renewal (409)".into(),
            ),
            // A request that got no answer (a pooled connection closed under it, a
            // timeout) may or may not have renewed the lease.
            Ok(Err(e)) if e.is_transport() => {
                Attempt::Inconclusive(crate::telemetry::logs::describe(&e))
            }
            Ok(Err(e)) => Attempt::Failed(crate::telemetry::logs::describe(&e)),
            Err(_) => {
                tracing::error!(lease = %self.name, "lease renewal hung until the renew deadline");
                Attempt::Lost
            }
        }
    }

    /// Gives the lease up on shutdown, so the next replica need not wait it out.
    pub async fn release(&self) {
        self.fence.close();
        self.leading.set(0);
        let give_up = async {
            if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if spec.holder_identity.as_deref() == Some(&self.identity) {
                    spec.holder_identity = None;
                    let _ = self
                        .api
                        .replace(&self.name, &PostParams::default(), &lease)
                        .await;
                }
            }
        };
        // Shutting down: a hung call must not hold the exit.
        let _ = tokio::time::timeout(self.timing.renew_deadline, give_up).await;
    }

    /// Whether this replica may take the lease as `lease` has it: it is free, or
    /// this replica has seen it unchanged for a whole lease duration.
    fn expired(&self, lease: &Lease) -> bool {
        let spec = lease.spec.as_ref();
        let seen = Observed {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            resource_version: lease.metadata.resource_version.clone(),
        };
        let mut observed = self.observed.lock().expect("observed lease lock");
        let since = match observed.as_ref() {
            Some((o, at)) if *o == seen => *at,
            _ => {
                let now = Instant::now();
                *observed = Some((seen.clone(), now));
                now
            }
        };
        seen.holder.is_none() || since.elapsed() >= self.timing.duration
    }

    async fn try_acquire_or_renew(&self) -> Result<Look> {
        let now = Timestamp::now();
        let secs = self.timing.duration.as_secs() as i32;
        let call = |what: &str| format!("{what} lease {}", self.name);
        let found = self.api.get_opt(&self.name).await;
        self.health.answered();
        let Some(mut lease) = found.map_err(|e| Error::kube(call("get"), e))? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            let created = self.api.create(&PostParams::default(), &lease).await;
            self.health.answered();
            return match created {
                Ok(_) => Ok(Look::Held),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Look::Raced),
                Err(e) => Err(Error::kube(call("create"), e)),
            };
        };
        let mine = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.identity.as_str());
        if !mine && !self.expired(&lease) {
            return Ok(Look::Taken);
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if !mine {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(secs);
        // replace carries the resourceVersion we read: a concurrent taker gets 409.
        let replaced = self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await;
        self.health.answered();
        match replaced {
            Ok(_) => Ok(Look::Held),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Look::Raced),
            Err(e) => Err(Error::kube(call("update"), e)),
        }
    }
}
