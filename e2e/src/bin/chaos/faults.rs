//! The faults: each one injected at its planned moment, healed after its planned
//! length, and announced to the checker both times. Replicas a fault holds down
//! are left alone by the supervisor, which restarts any other replica that exited.

use std::{
    collections::BTreeSet,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use taint_operator_e2e::{Result, bail};
use tokio::{
    process::Command,
    sync::{Mutex, mpsc::UnboundedSender},
};

use crate::{
    record::{Event, now_micros},
    schedule::{FaultKind, FaultPlan, Target},
    setup::{Cluster, LEASE_NAME, LEASE_NAMESPACE},
};

pub struct Faults {
    cluster: Arc<Cluster>,
    events: UnboundedSender<Event>,
    /// Replicas a fault keeps down or stopped.
    held: Mutex<BTreeSet<usize>>,
    active: Mutex<BTreeSet<FaultKind>>,
}

async fn signal(pid: u32, sig: &str) -> Result {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .await?;
    if !status.success() {
        bail!("kill {sig} {pid} failed");
    }
    Ok(())
}

fn pid_file(dir: &std::path::Path, name: &str) -> Result<u32> {
    let text = std::fs::read_to_string(dir.join(format!("{name}.pid")))
        .map_err(|e| format!("{name}.pid: {e}"))?;
    Ok(text.trim().parse()?)
}

impl Faults {
    pub fn new(cluster: Arc<Cluster>, events: UnboundedSender<Event>) -> Self {
        Faults {
            cluster,
            events,
            held: Mutex::new(BTreeSet::new()),
            active: Mutex::new(BTreeSet::new()),
        }
    }

    /// The replica holding the Lease now, by the API server's word.
    async fn leader(&self) -> Option<usize> {
        let api: Api<Lease> = Api::namespaced(self.cluster.client.clone(), LEASE_NAMESPACE);
        let holder = api.get_opt(LEASE_NAME).await.ok()??.spec?.holder_identity?;
        self.cluster
            .replicas
            .iter()
            .position(|r| r.identity == holder)
    }

    /// Waits (a minute at most) until a replica holds the Lease.
    pub async fn wait_for_leader(&self) -> Result {
        for _ in 0..300 {
            if let Some(i) = self.leader().await {
                println!("chaos: {} leads", self.cluster.replicas[i].identity);
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("no replica took the Lease within a minute")
    }

    async fn target(&self, target: Target) -> usize {
        match target {
            Target::Replica(i) => i % self.cluster.replicas.len(),
            Target::Leader => self.leader().await.unwrap_or(0),
        }
    }

    async fn control_plane(&self, command: &str) -> Result {
        let out = Command::new("bash")
            .arg(self.cluster.script())
            .arg(command)
            .arg(&self.cluster.cp_dir)
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "control-plane.sh {command}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Runs one fault from its start to its heal, `window_start` being the chaos
    /// window's start. A kind already active is not injected twice at once.
    pub async fn run(&self, plan: &FaultPlan, window_start: tokio::time::Instant) -> Result<bool> {
        tokio::time::sleep_until(window_start + plan.start).await;
        if !self.active.lock().await.insert(plan.kind) {
            return Ok(false);
        }
        let outcome = self.inject_and_heal(plan).await;
        self.active.lock().await.remove(&plan.kind);
        outcome.map(|()| true)
    }

    async fn inject_and_heal(&self, plan: &FaultPlan) -> Result {
        let kind = plan.kind.name();
        let c = &self.cluster;
        let announce = |active: bool| {
            let _ = self.events.send(Event::Fault {
                at: now_micros(),
                kind,
                active,
            });
        };
        let replica = self.target(plan.target).await;
        let r = &c.replicas[replica];
        println!(
            "chaos: {kind} starts{}",
            match plan.kind {
                FaultKind::LeaderKill | FaultKind::LeaderPause | FaultKind::Blackhole =>
                    format!(" on {}", r.identity),
                _ => String::new(),
            }
        );
        match plan.kind {
            FaultKind::ApiserverKill => {
                signal(pid_file(&c.cp_dir, "kube-apiserver")?, "-KILL").await?;
                announce(true);
                tokio::time::sleep(plan.length).await;
                self.control_plane("restart-apiserver").await?;
            }
            FaultKind::EtcdRestart => {
                signal(pid_file(&c.cp_dir, "etcd")?, "-KILL").await?;
                announce(true);
                tokio::time::sleep(plan.length).await;
                self.control_plane("restart-etcd").await?;
            }
            FaultKind::LeaderKill => {
                self.held.lock().await.insert(replica);
                r.op.lock().await.kill9().await?;
                announce(true);
                tokio::time::sleep(plan.length).await;
                self.held.lock().await.remove(&replica);
            }
            FaultKind::LeaderPause => {
                self.held.lock().await.insert(replica);
                let pid = r.op.lock().await.pid();
                if let Some(pid) = pid {
                    signal(pid, "-STOP").await?;
                    announce(true);
                    tokio::time::sleep(plan.length).await;
                    signal(pid, "-CONT").await?;
                } else {
                    announce(true);
                    tokio::time::sleep(plan.length).await;
                }
                self.held.lock().await.remove(&replica);
            }
            FaultKind::Blackhole => {
                r.proxy.hang();
                announce(true);
                tokio::time::sleep(plan.length).await;
                r.proxy.restore();
            }
            FaultKind::Throttle => {
                std::fs::write(&c.throttle_file, "")?;
                announce(true);
                tokio::time::sleep(plan.length).await;
                std::fs::remove_file(&c.throttle_file)?;
            }
            FaultKind::SlowAnswers => {
                std::fs::write(&c.slow_file, "")?;
                announce(true);
                tokio::time::sleep(plan.length).await;
                std::fs::remove_file(&c.slow_file)?;
            }
            FaultKind::WebhookDown => {
                c.webhook_front.cut();
                announce(true);
                tokio::time::sleep(plan.length).await;
                c.webhook_front.restore();
            }
        }
        announce(false);
        println!("chaos: {kind} healed");
        Ok(())
    }

    /// Restarts every replica that is not running and no fault holds, once a
    /// second, until `stop`.
    pub async fn supervise(self: Arc<Self>, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            for (i, r) in self.cluster.replicas.iter().enumerate() {
                if self.held.lock().await.contains(&i) {
                    continue;
                }
                let mut op = r.op.lock().await;
                if !op.is_running()
                    && let Err(e) = op.start().await
                {
                    println!("chaos: restarting {}: {e}", r.identity);
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Every replica up and no fault left over (after the last heal).
    pub async fn all_healed(&self) -> bool {
        self.active.lock().await.is_empty() && self.held.lock().await.is_empty()
    }
}
