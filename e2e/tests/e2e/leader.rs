//! Leader election with two replicas, two ways to lose the leader:
//!
//! * **two replicas**: one leads and only it writes; SIGKILLed, the other takes the
//!   Lease over once it has run out and carries on.
//! * **Lease black-holed**: the leader's Lease renewals hang (a request accepted and
//!   never answered) while it keeps writing nodes. It must stop by itself at the renew
//!   deadline, and the other replica take over only after the lease ran out: never
//!   two writers. See [`lease_black_holed`].

use std::{
    path::PathBuf,
    process::Stdio,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::{
    ByteString,
    api::coordination::v1::{Lease, LeaseSpec},
    jiff::Timestamp,
};
use kube::{Api, api::DeleteParams};
use serde_json::json;
use taint_operator_e2e::{
    Cond, Harness, K, Operator, Result, always_for, bail, ensure, ensure_eq, eventually,
    eventually_within, free_port,
};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    task::JoinHandle,
};

use crate::{
    common::{Scn, check_node, expect_clean, expect_node, expect_status, owned},
    webhook::make_certs,
};

/// The operator's election timing (`operator/src/leader.rs`, client-go's): a lease
/// lasts 15 s; the holder renews every 2 s (a waiting replica looks as often) and
/// stops when it has not renewed for 10 s.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RENEW_DEADLINE: Duration = Duration::from_secs(10);
const RETRY_PERIOD: Duration = Duration::from_secs(2);
const LEASE: &str = "e2e-two-replicas";

async fn holder(api: &Api<Lease>, lease: &str) -> Result<Option<String>> {
    Ok(api
        .get_opt(lease)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

async fn delete_lease(api: &Api<Lease>, lease: &str) -> Result {
    match api.delete(lease, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Runs `checks` on two replicas `(identity, log file)` electing on `lease`, with the
/// suite's operator stopped (it would lead and write on its own Lease); stops them
/// and starts the suite's operator again whatever happened. A failure shows the end
/// of both replicas' logs. The policies labelled for `scenario` are deleted at the
/// end, through the suite's operator's finalizer (a no-op when `checks` did it).
async fn with_two_replicas(
    h: &Harness,
    replicas: [(&str, &str); 2],
    lease: &str,
    scenario: Scn,
    checks: impl AsyncFnOnce(&Harness, &mut Operator, &mut Operator) -> Result,
) -> Result {
    let (mut a, mut b) = {
        let mut op = h.op.lock().await;
        if op.lease_namespace().is_none() {
            println!(
                "no lease namespace (E2E_OPERATOR_NAMESPACE unset): nothing to elect on; skipped"
            );
            return Ok(());
        }
        op.stop().await?;
        let replica = |(identity, log): (&str, &str)| {
            op.sibling(identity, h.work_dir.join(log))
                .with_lease_name(lease)
        };
        (replica(replicas[0]), replica(replicas[1]))
    };
    let outcome = checks(h, &mut a, &mut b).await;
    let logs = |op: &Operator| {
        format!(
            "\n--- log of replica {} (last 30 lines of {}):\n{}",
            op.identity(),
            op.log_path().display(),
            op.log_tail(30)
        )
    };
    let outcome = outcome.map_err(|e| format!("{e}{}{}", logs(&a), logs(&b)).into());
    for r in [&mut a, &mut b] {
        if let Err(e) = r.stop().await {
            println!("stopping {}: {e}", r.identity());
        }
    }
    let restarted = h.op.lock().await.start().await;
    let cleaned = match restarted {
        Ok(()) => {
            h.k.delete_policies_labelled(scenario.label().0, scenario.label().1)
                .await
        }
        Err(e) => Err(e),
    };
    outcome.and(cleaned)
}

pub async fn two_replicas(h: &Harness) -> Result {
    with_two_replicas(
        h,
        [
            ("e2e-replica-a", "operator-a.log"),
            ("e2e-replica-b", "operator-b.log"),
        ],
        LEASE,
        Scn("leader"),
        checks,
    )
    .await
}

async fn checks(h: &Harness, a: &mut Operator, b: &mut Operator) -> Result {
    let k = &h.k;
    let s = Scn("leader");
    let policy = "e2e-leader-net";
    const TAINT: &str = "e2e.nodetaint.io/leader:NoSchedule";
    let ns = a.lease_namespace().unwrap_or_default().to_string();
    let leases: Api<Lease> = Api::namespaced(k.client.clone(), &ns);
    delete_lease(&leases, LEASE).await?;

    let nodes: Vec<String> = (1..=3).map(|i| s.node(&i.to_string())).collect();
    s.create_nodes(k, &nodes, &Cond::now("NetReady", "False", "Test"))
        .await?;
    // Both become ready (every replica serves /readyz once its policy cache has listed).
    a.start().await?;
    b.start().await?;

    // Exactly one leads, and keeps leading.
    let leader_id = eventually(
        format!("a holder of Lease {ns}/{LEASE}"),
        async || match holder(&leases, LEASE).await? {
            Some(h) => Ok(h),
            None => bail!("no holder yet"),
        },
    )
    .await?;
    let (leader, follower) = if leader_id == a.identity() {
        (a, b)
    } else if leader_id == b.identity() {
        (b, a)
    } else {
        bail!("Lease {LEASE} is held by {leader_id:?}, neither replica");
    };
    println!("{} leads; {} waits", leader.identity(), follower.identity());
    always_for(
        "the leadership to stay put",
        Duration::from_secs(2),
        async || {
            let h = holder(&leases, LEASE).await?;
            ensure_eq!(h.as_deref(), Some(leader.identity()), "Lease holder");
            Ok(())
        },
    )
    .await?;
    ensure!(
        leader.log_tail(200).contains("became leader")
            && !follower.log_tail(200).contains("became leader"),
        "exactly the holder should log \"became leader\""
    );
    ensure!(
        follower
            .log_tail(200)
            .contains("another replica leads; waiting"),
        "the follower should log that another replica leads"
    );

    // A new policy is reconciled, by the leader alone.
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/leader", "effect": "NoSchedule"}],
            "readiness": {"conditions": [{"type": "NetReady", "status": "True"}]},
        }),
    ))
    .await?;
    for n in &nodes {
        expect_node(k, n, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    }
    expect_status(k, policy, "True", "Reconciled", (3, 3, 0)).await?;
    // The status can be read before the leader's status writer has taken its answer
    // and counted the write: look again briefly.
    let lm = eventually("the leader's writes in its metrics", async || {
        let lm = leader.metrics().await?;
        ensure!(
            lm.node_patches_ok() >= 3 && lm.node_writes() >= 3 && lm.status_writes() >= 1,
            "the leader should have written: {} node patches accepted, {} node writes, {} status writes",
            lm.node_patches_ok(),
            lm.node_writes(),
            lm.status_writes()
        );
        Ok(lm)
    })
    .await?;
    let fm = follower.metrics().await?;
    ensure_eq!(
        (fm.node_writes(), fm.status_writes(), fm.api_writes()),
        (0, 0, Vec::<String>::new()),
        "the follower's node writes, status writes and writing API requests"
    );
    // What the chart's TaintOperatorNoLeader alert sums; only the leader computes
    // statuses, so only it reports the policy's readiness.
    ensure_eq!(
        (
            lm.get("taint_operator_leader"),
            fm.get("taint_operator_leader")
        ),
        (1.0, 0.0),
        "taint_operator_leader of the leader and the follower"
    );
    ensure_eq!(
        (
            lm.get_with("taint_operator_policy_ready", &[("policy", policy)]),
            fm.get_with("taint_operator_policy_ready", &[("policy", policy)])
        ),
        (1.0, 0.0),
        "taint_operator_policy_ready of the leader and the follower"
    );
    println!(
        "leader: {} node writes, {} status writes; follower: none (API writes {:?})",
        lm.node_writes(),
        lm.status_writes(),
        fm.api_writes()
    );

    // SIGKILL the leader: no release. The follower takes over once the Lease ran out.
    leader.kill9().await?;
    let killed = Instant::now();
    let before = leases
        .get(LEASE)
        .await?
        .spec
        .ok_or("the Lease has no spec")?;
    let last_renewal = before
        .renew_time
        .as_ref()
        .ok_or("the Lease has no renewTime")?
        .0;
    let deadline = LEASE_DURATION + RETRY_PERIOD + Duration::from_secs(5);
    let after = eventually_within(
        format!("{} to take Lease {LEASE} over", follower.identity()),
        deadline,
        Duration::from_millis(100),
        async || {
            let spec = leases.get(LEASE).await?.spec.ok_or("no spec")?;
            ensure_eq!(
                spec.holder_identity.as_deref(),
                Some(follower.identity()),
                "Lease holder"
            );
            Ok(spec)
        },
    )
    .await?;
    let took = killed.elapsed();
    let acquired = after
        .acquire_time
        .as_ref()
        .ok_or("the Lease has no acquireTime")?
        .0;
    let waited = acquired.duration_since(last_renewal);
    println!(
        "{} took over {:.1} s after the SIGKILL, {:.1} s after the last renewal",
        follower.identity(),
        took.as_secs_f64(),
        waited.as_secs_f64()
    );
    ensure!(
        waited.as_secs_f64() >= LEASE_DURATION.as_secs_f64() - 0.5,
        "taken over {waited:?} after the last renewal, before the {LEASE_DURATION:?} lease ran out"
    );
    ensure_eq!(
        after.lease_transitions,
        Some(before.lease_transitions.unwrap_or(0) + 1),
        "leaseTransitions"
    );

    // The new leader converges new changes: a node gets ready, a new node joins.
    let writes0 = follower.metrics().await?.node_writes();
    k.set_conditions(&nodes[0], &[Cond::now("NetReady", "True", "Test")])
        .await?;
    let joined = s.node("4");
    k.create_node(&joined, &[s.label()]).await?;
    k.set_conditions(&joined, &[Cond::now("NetReady", "False", "Test")])
        .await?;
    expect_node(k, &nodes[0], &[], &owned(&[])).await?;
    expect_node(k, &joined, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    for n in &nodes[1..] {
        expect_node(k, n, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    }
    expect_status(k, policy, "True", "Reconciled", (4, 3, 0)).await?;
    let writes1 = follower.metrics().await?.node_writes();
    ensure!(
        writes1 >= writes0 + 2,
        "the new leader should have written both nodes: node writes {writes0} -> {writes1}"
    );
    ensure!(
        follower.log_tail(400).contains("became leader"),
        "the new leader should log \"became leader\""
    );

    // Cleanup through the new leader's finalizer; on SIGTERM it gives the Lease up.
    k.delete_policies_labelled(s.label().0, s.label().1).await?;
    for n in nodes.iter().chain([&joined]) {
        expect_clean(k, n).await?;
    }
    follower.stop().await?;
    eventually(
        "the Lease to be released on SIGTERM",
        async || match holder(&leases, LEASE).await? {
            None => Ok(()),
            Some(h) => bail!("still held by {h}"),
        },
    )
    .await?;
    Ok(())
}

// ------------------------------------------------------- the Lease black-holed

const BH_LEASE: &str = "e2e-lease-black-hole";
const BH_WEBHOOK: &str = "e2e-lease-black-hole";
const BH_NODES: usize = 10;
const FLIP: &str = "Flipped";
const FLIP_EVERY: Duration = Duration::from_millis(500);
/// How long the flips go on once the new leader leads.
const FLIPS_AFTER_TAKEOVER: Duration = Duration::from_secs(6);
/// How long the scenario waits, from T0, for the leader to exit and the other replica
/// to lead (both are due within 25 s; longer, to see what a broken leader does).
const WAIT_AFTER_T0: Duration = Duration::from_secs(40);
/// Slack for the timing checks: polling, process exit, scheduling on 2 busy cores.
const SLACK: f64 = 1.5;

/// The leader's Lease renewals are black-holed while it keeps writing nodes
/// (issue #24): it must stop by itself at the renew deadline, the other replica take
/// over once it has seen the Lease unchanged for a lease duration, and never two
/// writers.
///
/// The black hole is made behind the API server, not with a TCP proxy: the operator
/// has one kubeconfig and its Lease client is a connection pool of its own, so a
/// proxy could not cut the Lease traffic alone. A validating admission webhook
/// (`e2e/throttle-webhook.py --hang-lease --hang-holder --hang-file`, registered for
/// `coordination.k8s.io/v1 leases` UPDATE, limited to this Lease by a
/// `matchCondition`, `timeoutSeconds: 30`, `failurePolicy: Fail`) reads every review
/// and, while a file exists, never answers an UPDATE of this Lease whose
/// `spec.holderIdentity` is the leader's (its renewals); everything else it allows
/// at once. The leader's renewal PUT then hangs at the API server for 30 s, which
/// from the operator's side is exactly a request that is accepted and never
/// answered. Its GETs and its node writes go through as before.
///
/// Two replicas on Lease `e2e-lease-black-hole`; ten nodes whose `Flipped` condition
/// is flipped on one node after another every 0.5 s throughout, under a matcher
/// policy, so the leader writes a node every 0.5 s. T0 is when the file is created
/// (the webhook already registered and seen answering the leader's renewals).
/// Expected (lease 15 s, renew deadline 10 s, retry period 2 s):
/// * the leader logs that its renewal hung until (or was not renewed within) the
///   renew deadline, then `leadership lost; exiting`, and exits with status 1 within
///   renew deadline + retry period of T0 (its last renewal went out before T0);
/// * the other replica logs `became leader` at least a lease duration after the
///   leader's last renewal the API server stored (its `renewTime`, up to a retry
///   period before T0, so the takeover may come a little under 15 s after T0) and
///   within lease duration + renew deadline (25 s) of T0;
/// * never two writers, from both logs' timestamps (one clock, one machine): the old
///   leader's last node write is before the new leader's `became leader` and its
///   first node write, and the old leader had stopped leading by then; the new
///   leader wrote nothing before it led; the old leader did write during the black
///   hole (the node patches flowed);
/// * the new leader follows every flip made from 2 s after it led, each within 3 s
///   (its log), and once the flips stop every node is right within 5 s (the API).
pub async fn lease_black_holed(h: &Harness) -> Result {
    with_two_replicas(
        h,
        [
            ("e2e-blackhole-a", "operator-blackhole-a.log"),
            ("e2e-blackhole-b", "operator-blackhole-b.log"),
        ],
        BH_LEASE,
        Scn("blackhole"),
        black_hole_checks,
    )
    .await
}

/// A flip of a node's `Flipped` condition: when it was sent and to what.
#[derive(Debug, Clone)]
struct Flip {
    at: f64,
    node: String,
    on: bool,
}

/// Flips one node after another every `FLIP_EVERY` until stopped; aborted if dropped.
struct Flipper {
    stop: Arc<AtomicBool>,
    task: Option<JoinHandle<Result<Vec<Flip>>>>,
}

impl Flipper {
    fn start(k: K, nodes: Vec<String>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut on = vec![false; nodes.len()];
            let mut flips = Vec::new();
            let mut tick = tokio::time::interval(FLIP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for i in (0..nodes.len()).cycle() {
                tick.tick().await;
                if stopped.load(Ordering::Acquire) {
                    break;
                }
                on[i] = !on[i];
                let at = secs(Timestamp::now());
                let status = if on[i] { "True" } else { "False" };
                k.set_conditions(&nodes[i], &[Cond::now(FLIP, status, "Test")])
                    .await
                    .map_err(|e| format!("flipping {}: {e}", nodes[i]))?;
                flips.push(Flip {
                    at,
                    node: nodes[i].clone(),
                    on: on[i],
                });
            }
            Ok(flips)
        });
        Flipper {
            stop,
            task: Some(task),
        }
    }

    /// Stops flipping; every flip made, oldest first.
    async fn finish(mut self) -> Result<Vec<Flip>> {
        self.stop.store(true, Ordering::Release);
        let task = self.task.take().expect("finished once");
        task.await.map_err(|e| format!("the flipper task: {e}"))?
    }
}

impl Drop for Flipper {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The black hole's webhook server and registration; taken down when dropped,
/// whatever happened (with `failurePolicy: Fail` and its server gone, the Lease's
/// UPDATEs would fail).
struct BlackHole {
    admin_kubeconfig: PathBuf,
    switch: PathBuf,
    server: Option<Child>,
    /// The webhook's review lines (JSON: time, lease, holder, verdict).
    reviews: Arc<Mutex<Vec<String>>>,
}

impl BlackHole {
    fn off(&self) {
        let _ = std::fs::remove_file(&self.switch);
    }

    fn reviews(&self) -> Vec<Review> {
        self.reviews
            .lock()
            .expect("reviews lock")
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.off();
        let _ = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args([
                "delete",
                "validatingwebhookconfiguration",
                BH_WEBHOOK,
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
        if let Some(mut server) = self.server.take() {
            let _ = server.start_kill();
        }
    }
}

#[derive(Debug, serde::Deserialize)]
struct Review {
    time: f64,
    lease: Option<String>,
    holder: Option<String>,
    verdict: String,
}

/// Starts the webhook server black-holing `holder`'s renewals of the scenario's
/// Lease while `DIR/black-hole-on` exists (not yet), and registers it.
async fn black_hole(h: &Harness, ns: &str, holder: &str) -> Result<BlackHole> {
    let dir = h.work_dir.join("lease-black-hole");
    std::fs::create_dir_all(&dir)?;
    let ca = make_certs(&dir).await?;
    let switch = dir.join("black-hole-on");
    let _ = std::fs::remove_file(&switch);
    let port = free_port()?;
    let mut server = Command::new("python3")
        .arg(h.repo_root.join("e2e/throttle-webhook.py"))
        .args(["--port", &port.to_string()])
        .args(["--hang-lease", BH_LEASE, "--hang-holder", holder])
        .arg("--hang-file")
        .arg(&switch)
        .arg("--cert")
        .arg(dir.join("tls.crt"))
        .arg("--key")
        .arg(dir.join("tls.key"))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run python3 e2e/throttle-webhook.py: {e}"))?;
    let mut lines = BufReader::new(server.stdout.take().expect("piped")).lines();
    let ready = lines.next_line().await?.unwrap_or_default();
    let reviews = Arc::new(Mutex::new(Vec::new()));
    let guard = BlackHole {
        admin_kubeconfig: h.admin_kubeconfig.clone(),
        switch,
        server: Some(server),
        reviews: reviews.clone(),
    };
    ensure!(
        ready.trim() == "ready",
        "the black-hole webhook did not start: {ready:?}"
    );
    // Until the server is killed (end of its output).
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            reviews.lock().expect("reviews lock").push(line);
        }
    });
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": BH_WEBHOOK},
        "webhooks": [{
            "name": "lease-black-hole.e2e.nodetaint.io",
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/"),
                "caBundle": ByteString(ca.into_bytes()),
            },
            "rules": [{
                "operations": ["UPDATE"],
                "apiGroups": ["coordination.k8s.io"],
                "apiVersions": ["v1"],
                "resources": ["leases"],
                "scope": "Namespaced",
            }],
            // Only this scenario's Lease ever goes to the webhook: the API server's
            // own Leases, and the other scenarios', never wait for it.
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "matchConditions": [{
                "name": "scenario-lease",
                "expression": format!("object.metadata.name == '{BH_LEASE}'"),
            }],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 30,
        }],
    });
    let file = dir.join("webhook.json");
    std::fs::write(&file, serde_json::to_vec(&config)?)?;
    h.kubectl(&["apply", "-f", file.to_str().unwrap_or_default()])
        .await?;
    Ok(guard)
}

/// Seconds since the epoch (the logs, the Lease and the webhook share the clock).
fn secs(t: Timestamp) -> f64 {
    t.as_nanosecond() as f64 / 1e9
}

/// A replica's text log as (seconds since the epoch, rest of the line).
fn log_lines(op: &Operator) -> Vec<(f64, String)> {
    op.log_tail(usize::MAX)
        .lines()
        .filter_map(|l| {
            let (t, rest) = l.split_once(' ')?;
            Some((secs(t.parse::<Timestamp>().ok()?), rest.to_string()))
        })
        .collect()
}

/// A taint `policy` added (`true`) or removed on a node, from the log line the
/// operator writes after each node write: (time, node, added).
fn node_writes(lines: &[(f64, String)], policy: &str) -> Vec<(f64, String, bool)> {
    let added = format!("node_reconciler: policy {policy} added ");
    let removed = format!("node_reconciler: policy {policy} removed ");
    lines
        .iter()
        .filter_map(|(t, l)| {
            let add = l.contains(&added);
            if !add && !l.contains(&removed) {
                return None;
            }
            let node = l.split_once("node=\"")?.1.split_once('"')?.0;
            Some((*t, node.to_string(), add))
        })
        .collect()
}

fn first_line(lines: &[(f64, String)], text: &str) -> Option<f64> {
    lines
        .iter()
        .find(|(_, l)| l.contains(text))
        .map(|(t, _)| *t)
}

async fn black_hole_checks(h: &Harness, a: &mut Operator, b: &mut Operator) -> Result {
    let k = &h.k;
    let s = Scn("blackhole");
    let policy = "e2e-blackhole";
    let taint = "e2e.nodetaint.io/blackhole:NoSchedule";
    let ns = a.lease_namespace().unwrap_or_default().to_string();
    let leases: Api<Lease> = Api::namespaced(k.client.clone(), &ns);
    delete_lease(&leases, BH_LEASE).await?;

    let nodes: Vec<String> = (0..BH_NODES).map(|i| s.node(&format!("{i:02}"))).collect();
    s.create_nodes(k, &nodes, &Cond::now(FLIP, "False", "Test"))
        .await?;
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/blackhole", "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": FLIP, "status": "True"}]}],
        }),
    ))
    .await?;
    a.start().await?;
    b.start().await?;
    let leader_id = eventually(
        format!("a holder of Lease {ns}/{BH_LEASE}"),
        async || match holder(&leases, BH_LEASE).await? {
            Some(h) => Ok(h),
            None => bail!("no holder yet"),
        },
    )
    .await?;
    let (leader, follower) = if leader_id == a.identity() {
        (a, b)
    } else if leader_id == b.identity() {
        (b, a)
    } else {
        bail!("Lease {BH_LEASE} is held by {leader_id:?}, neither replica");
    };
    let (l, f) = (
        leader.identity().to_string(),
        follower.identity().to_string(),
    );
    println!("{l} leads; {f} waits");
    eventually(
        format!("{f} to log that another replica leads"),
        async || {
            ensure!(
                follower
                    .log_tail(200)
                    .contains("another replica leads; waiting"),
                "not yet"
            );
            Ok(())
        },
    )
    .await?;

    // 1. Node patches flow: the leader writes a node every 0.5 s.
    let flipper = Flipper::start(k.clone(), nodes.clone());
    eventually(format!("{l} to write the flipped nodes"), async || {
        let n = node_writes(&log_lines(leader), policy).len();
        ensure!(n >= 3, "{n} node writes in its log so far");
        Ok(())
    })
    .await?;

    // 2. The black hole, registered (and seen answering the leader's renewals), then on.
    let hole = black_hole(h, &ns, &l).await?;
    eventually_within(
        format!("the webhook to see a renewal of {BH_LEASE} by {l}"),
        Duration::from_secs(10),
        Duration::from_millis(100),
        async || {
            let seen = hole.reviews().iter().any(|r| {
                r.lease.as_deref() == Some(BH_LEASE)
                    && r.holder.as_deref() == Some(&l)
                    && r.verdict == "allow"
            });
            ensure!(seen, "{} reviews so far", hole.reviews().len());
            Ok(())
        },
    )
    .await?;
    let (lm, fm) = (leader.metrics().await?, follower.metrics().await?);
    ensure_eq!(
        (fm.node_writes(), fm.status_writes(), fm.api_writes()),
        (0, 0, Vec::<String>::new()),
        "the follower's node writes, status writes and writing API requests before T0"
    );
    ensure!(
        lm.node_writes() >= 3,
        "the leader should be writing nodes: {} node writes",
        lm.node_writes()
    );
    let transitions0 = leases
        .get(BH_LEASE)
        .await?
        .spec
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0);
    std::fs::write(&hole.switch, "")?;
    let t0_clock = Instant::now();
    let t0 = secs(Timestamp::now());
    println!(
        "T0: {l}'s renewals black-holed ({} node writes so far)",
        lm.node_writes()
    );

    // 3. Wait for the leader to exit by itself and the other to lead (flips going on).
    let mut exited: Option<(f64, std::process::ExitStatus)> = None;
    let mut last_renewal: Option<f64> = None;
    let mut taken: Option<LeaseSpec> = None;
    let mut f_led: Option<f64> = None;
    while t0_clock.elapsed() < WAIT_AFTER_T0 {
        if exited.is_none()
            && let Some(status) = leader.exit_status()
        {
            exited = Some((secs(Timestamp::now()), status));
        }
        if let Some(spec) = leases.get(BH_LEASE).await?.spec {
            let renewed = spec.renew_time.as_ref().map(|t| secs(t.0));
            match spec.holder_identity.as_deref() {
                Some(who) if who == l => last_renewal = renewed.or(last_renewal),
                Some(who) if who == f && taken.is_none() => taken = Some(spec),
                _ => {}
            }
        }
        // The holder logs it once its takeover is stored: after the Lease says so.
        if f_led.is_none() {
            f_led = first_line(&log_lines(follower), "became leader");
        }
        if exited.is_some() && taken.is_some() && f_led.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The new leader goes on following the flips for a while, then they stop.
    if let Some(led) = f_led {
        let until = led + FLIPS_AFTER_TAKEOVER.as_secs_f64();
        let now = secs(Timestamp::now());
        if until > now {
            tokio::time::sleep(Duration::from_secs_f64(until - now)).await;
        }
    }
    let flips = flipper.finish().await?;
    let reviews = hole.reviews();
    hole.off();
    drop(hole);

    // 4. The API server: every node as its last flip left it, within 5 s.
    let converged = if f_led.is_some() {
        let want = |n: &str| {
            flips
                .iter()
                .rev()
                .find(|fl| fl.node == n)
                .is_some_and(|fl| fl.on)
        };
        let stopped = Instant::now();
        eventually_within(
            "every node as its last flip left it",
            Duration::from_secs(5),
            Duration::from_millis(100),
            async || {
                for n in &nodes {
                    if want(n) {
                        check_node(k, n, &[taint], &owned(&[(taint, policy)])).await?;
                    } else {
                        check_node(k, n, &[], &owned(&[])).await?;
                    }
                }
                Ok(())
            },
        )
        .await
        .map(|()| stopped.elapsed())
    } else {
        Err("no new leader".into())
    };

    // What happened, from the replicas' logs (one clock: this machine's).
    let (ll, fl) = (log_lines(leader), log_lines(follower));
    let (lw, fw) = (node_writes(&ll, policy), node_writes(&fl, policy));
    let l_lost = first_line(&ll, "leadership lost; exiting");
    let l_why = ll
        .iter()
        .find(|(_, x)| {
            x.contains("lease renewal hung until the renew deadline")
                || x.contains("lease not renewed within the renew deadline")
        })
        .map(|(t, x)| (*t, x.clone()));
    let l_last = lw.last().map(|w| w.0);
    let f_first = fw.first().map(|w| w.0);
    let rel = |t: Option<f64>| t.map_or("never".into(), |t| format!("{:+.2} s", t - t0));
    let mut problems: Vec<String> = Vec::new();

    // The leader stopped by itself, in time, saying why.
    let exit_by = RENEW_DEADLINE + RETRY_PERIOD;
    match exited {
        None => problems.push(format!(
            "{l} did not exit within {WAIT_AFTER_T0:?} of T0 (renewals black-holed)"
        )),
        Some((at, status)) => {
            if status.code() != Some(1) {
                problems.push(format!("{l} exited with {status}, not status 1"));
            }
            if at - t0 > exit_by.as_secs_f64() + SLACK {
                problems.push(format!(
                    "{l} exited {:.2} s after T0, not within renew deadline + retry period ({exit_by:?}) + {SLACK} s",
                    at - t0
                ));
            }
        }
    }
    match (&l_why, l_lost) {
        (Some((why, _)), Some(lost)) if *why <= lost => {}
        _ => problems.push(format!(
            "{l}'s log should say its renewal hung until (or was not renewed within) the renew deadline, then \"leadership lost; exiting\": {:?}, lost at {}",
            l_why.as_ref().map(|w| &w.1),
            rel(l_lost)
        )),
    }
    // The other one took over after the lease ran out, within lease duration + renew deadline.
    let takeover_by = LEASE_DURATION + RENEW_DEADLINE;
    match f_led {
        None => problems.push(format!("{f} never logged \"became leader\"")),
        Some(led) => {
            if led - t0 > takeover_by.as_secs_f64() + SLACK {
                problems.push(format!(
                    "{f} became leader {:.2} s after T0, later than lease duration + renew deadline ({takeover_by:?}) + {SLACK} s",
                    led - t0
                ));
            }
            match last_renewal {
                Some(r) if led - r < LEASE_DURATION.as_secs_f64() - 0.5 => problems.push(format!(
                    "{f} became leader {:.2} s after {l}'s last stored renewal, before the {LEASE_DURATION:?} lease ran out",
                    led - r
                )),
                Some(_) => {}
                None => problems.push(format!("never saw a renewal of {BH_LEASE} by {l}")),
            }
        }
    }
    match &taken {
        None => problems.push(format!("Lease {BH_LEASE} never held by {f}")),
        Some(spec) => {
            if spec.lease_transitions != Some(transitions0 + 1) {
                problems.push(format!(
                    "leaseTransitions {:?} after the takeover, want {}",
                    spec.lease_transitions,
                    transitions0 + 1
                ));
            }
        }
    }
    // Never two writers.
    if let (Some(last), Some(led)) = (l_last, f_led) {
        if last >= led {
            problems.push(format!(
                "two writers: {l} wrote a node at {} after {f} became leader at {}",
                rel(Some(last)),
                rel(Some(led))
            ));
        }
        if let Some(first) = f_first
            && last >= first
        {
            let overlap: Vec<String> = lw
                .iter()
                .filter(|w| w.0 >= first)
                .map(|w| {
                    format!(
                        "{} {} at {}",
                        if w.2 { "added" } else { "removed" },
                        w.1,
                        rel(Some(w.0))
                    )
                })
                .collect();
            problems.push(format!(
                "two writers: {l} kept writing after {f}'s first node write at {}: {} writes ({})",
                rel(Some(first)),
                overlap.len(),
                overlap.join(", ")
            ));
        }
    }
    if let (Some(lost), Some(led)) = (l_lost, f_led)
        && lost >= led
    {
        problems.push(format!(
            "{l} gave up leading at {} but {f} became leader before, at {}",
            rel(Some(lost)),
            rel(Some(led))
        ));
    }
    if l_lost.is_none()
        && let Some(led) = f_led
    {
        problems.push(format!(
            "{f} became leader at {} while {l} never gave up leading",
            rel(Some(led))
        ));
    }
    if let (Some(first), Some(led)) = (f_first, f_led)
        && first < led
    {
        problems.push(format!(
            "{f} wrote a node at {} before it led at {}",
            rel(Some(first)),
            rel(Some(led))
        ));
    }
    let during = lw.iter().filter(|w| w.0 > t0).count();
    if during == 0 {
        problems.push(format!(
            "{l} wrote no node after T0: the node patches did not flow during the black hole"
        ));
    }
    // The black hole did it: the leader's renewals reached the webhook and hung.
    let hung: Vec<&Review> = reviews.iter().filter(|r| r.verdict == "hang").collect();
    if !hung.iter().any(|r| r.time >= t0) || hung.iter().any(|r| r.holder.as_deref() != Some(&l)) {
        problems.push(format!(
            "the webhook should have held {l}'s renewals (and nothing else) after T0: held {:?}",
            hung.iter()
                .map(|r| (r.holder.clone(), rel(Some(r.time))))
                .collect::<Vec<_>>()
        ));
    }
    // The new leader follows the flips: each one from 2 s after it led, within 3 s.
    let mut lags = Vec::new();
    if let Some(led) = f_led {
        let checked: Vec<&Flip> = flips.iter().filter(|fl| fl.at >= led + 2.0).collect();
        if checked.is_empty() {
            problems.push("no flip made 2 s after the takeover".into());
        }
        for flip in checked {
            match fw.iter().find(|w| {
                w.1 == flip.node && w.2 == flip.on && w.0 >= flip.at && w.0 <= flip.at + 3.0
            }) {
                Some(w) => lags.push(w.0 - flip.at),
                None => problems.push(format!(
                    "{f} did not follow the flip of {} to {} at {} within 3 s",
                    flip.node,
                    flip.on,
                    rel(Some(flip.at))
                )),
            }
        }
    }
    if let Err(e) = &converged {
        problems.push(format!("after the flips stopped: {e}"));
    }

    // 5. The figures.
    let max_lag = lags.iter().copied().fold(0.0, f64::max);
    println!(
        "T0 -> {l} exit: {} (log: {:?} at {}, \"leadership lost; exiting\" at {}); T0 -> {f} became leader: {} ({} after {l}'s last stored renewal at {}); {l}'s last node write {} -> {f}'s first {}: {}",
        exited.map_or("never".into(), |(at, s)| format!("{:.2} s ({s})", at - t0)),
        l_why
            .as_ref()
            .map(|w| w.1.split_once(": ").map_or(w.1.as_str(), |x| x.1)),
        rel(l_why.as_ref().map(|w| w.0)),
        rel(l_lost),
        rel(f_led),
        match (f_led, last_renewal) {
            (Some(a), Some(b)) => format!("{:.2} s", a - b),
            _ => "-".into(),
        },
        rel(last_renewal),
        rel(l_last),
        rel(f_first),
        match (l_last, f_first) {
            (Some(a), Some(b)) => format!("{:.2} s", b - a),
            _ => "-".into(),
        },
    );
    println!(
        "{l}: {} node writes, {during} after T0 (while its renewals hung); {f}: {} node writes; {} flips, {} checked after the takeover (lag up to {max_lag:.2} s); the webhook held {} renewals; converged {}",
        lw.len(),
        fw.len(),
        flips.len(),
        lags.len(),
        hung.len(),
        match &converged {
            Ok(d) => format!("{:.2} s after the flips stopped", d.as_secs_f64()),
            Err(_) => "not".into(),
        }
    );
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }

    // The new leader cleans up through its finalizer.
    k.delete_policies_labelled(s.label().0, s.label().1).await?;
    for n in &nodes {
        expect_clean(k, n).await?;
    }
    Ok(())
}
