//! Leader election on a `coordination.k8s.io` Lease: only the holder writes.
//!
//! The holder renews every `duration / 3`. A replica takes the lease over only
//! when its holder has not renewed for a whole `duration`. A leader that cannot
//! renew before its lease runs out stops (the process exits and restarts), so two
//! replicas never write at once.
//!
//! The `leading` gauge (`taint_operator_leader`) is 1 from acquiring the lease to
//! losing or releasing it: summed over the replicas it says whether anyone leads.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use prometheus_client::metrics::gauge::Gauge;

use crate::controller::error::{Error, Result};

pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    leading: Gauge,
}

impl LeaderElector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
        leading: Gauge,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            duration,
            leading,
        }
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self) {
        let mut logged = false;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
                    self.leading.set(1);
                    return;
                }
                Ok(false) if !logged => {
                    tracing::info!(lease = %self.name, "another replica leads; waiting");
                    logged = true;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(lease = %self.name, error = %e, "lease check failed"),
            }
            tokio::time::sleep(self.duration / 5).await;
        }
    }

    /// Renews the lease until it cannot; returns when leadership is lost.
    pub async fn hold(&self) {
        self.renew_while_held().await;
        self.leading.set(0);
    }

    async fn renew_while_held(&self) {
        let mut last_renewal = std::time::Instant::now();
        loop {
            tokio::time::sleep(self.duration / 3).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewal = std::time::Instant::now(),
                Ok(false) => {
                    tracing::error!(lease = %self.name, "lease taken by another replica");
                    return;
                }
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %e, "lease renewal failed");
                    // Stop before the lease can expire under us.
                    if last_renewal.elapsed() + self.duration / 3 >= self.duration {
                        return;
                    }
                }
            }
        }
    }

    /// Gives the lease up on shutdown, so the next replica need not wait it out.
    pub async fn release(&self) {
        self.leading.set(0);
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
    }

    async fn try_acquire_or_renew(&self) -> Result<bool> {
        let now = Timestamp::now();
        let secs = self.duration.as_secs() as i32;
        let call = |what: &str| format!("{what} lease {}", self.name);
        let Some(mut lease) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| Error::kube(call("get"), e))?
        else {
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
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(Error::kube(call("create"), e)),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let mine = holder.as_deref() == Some(self.identity.as_str());
        let expired = spec.renew_time.as_ref().is_none_or(|r| {
            let held_for =
                SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(secs)));
            r.0.checked_add(held_for).is_ok_and(|end| end < now)
        });
        if !mine && holder.is_some() && !expired {
            return Ok(false);
        }
        if !mine {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(secs);
        // replace carries the resourceVersion we read: a concurrent taker gets 409.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(Error::kube(call("update"), e)),
        }
    }
}
