//! The operator under test as a child process: starting and stopping it, sampling
//! its memory, reading its `/metrics`, and naming which build it was.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::jiff::Timestamp;
use tokio::process::{Child, Command};

use crate::{
    Result,
    procfs::{ProcSample, clk_tck, read_proc},
};

/// The operator's `/metrics` page, parsed.
#[derive(Clone, Debug, Default)]
pub(crate) struct OpMetrics {
    pub(crate) node_writes: f64,
    pub(crate) node_write_conflicts: f64,
    pub(crate) status_writes: f64,
    pub(crate) reconcile_errors: f64,
    /// (verb, resource, code) -> count
    pub(crate) requests: BTreeMap<(String, String, String), f64>,
    /// Node patches answered and the seconds they took, summed.
    pub(crate) patches_answered: f64,
    pub(crate) patch_secs: f64,
    /// Node reconciles that waited for a worker and the seconds they waited, summed.
    pub(crate) queue_waits: f64,
    pub(crate) queue_wait_secs: f64,
    /// Node reconciles timed and the seconds they took, summed: a worker's busy
    /// time, the patch included.
    pub(crate) node_reconciles_timed: f64,
    pub(crate) node_reconcile_secs: f64,
    /// Watch echoes of its own writes the operator recognised and did not queue.
    pub(crate) echoes_skipped: f64,
    /// Periodic resync passes started (each queues every node, spread out).
    pub(crate) resyncs: f64,
    /// (watch, cause) -> watches that failed or listed again
    /// (`taint_operator_watch_restarts_total`).
    pub(crate) watch_restarts: BTreeMap<(String, String), f64>,
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some(eq) = rest.find("=\"") {
        let key = rest[..eq].trim_start_matches(',').trim().to_string();
        let after = &rest[eq + 2..];
        let Some(end) = after.find('"') else { break };
        out.insert(key, after[..end].to_string());
        rest = &after[end + 1..];
    }
    out
}

impl OpMetrics {
    fn parse(text: &str) -> Self {
        let mut m = OpMetrics::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            match name {
                "taint_operator_node_writes_total" => m.node_writes += value,
                "taint_operator_node_write_conflicts_total" => m.node_write_conflicts += value,
                "taint_operator_status_writes_total" => m.status_writes += value,
                "taint_operator_reconcile_errors_total" => m.reconcile_errors += value,
                "taint_operator_node_write_duration_seconds_count" => m.patches_answered += value,
                "taint_operator_node_write_duration_seconds_sum" => m.patch_secs += value,
                "taint_operator_node_queue_wait_seconds_count" => m.queue_waits += value,
                "taint_operator_node_queue_wait_seconds_sum" => m.queue_wait_secs += value,
                "taint_operator_reconcile_duration_seconds_count"
                    if labels.contains("controller=\"node\"") =>
                {
                    m.node_reconciles_timed += value
                }
                "taint_operator_reconcile_duration_seconds_sum"
                    if labels.contains("controller=\"node\"") =>
                {
                    m.node_reconcile_secs += value
                }
                "taint_operator_node_echoes_skipped_total" => m.echoes_skipped += value,
                "taint_operator_resyncs_total" => m.resyncs += value,
                "taint_operator_watch_restarts_total" => {
                    let l = parse_labels(labels);
                    let get = |k: &str| l.get(k).cloned().unwrap_or_default();
                    *m.watch_restarts
                        .entry((get("watch"), get("cause")))
                        .or_default() += value;
                }
                "taint_operator_api_requests_total" => {
                    let l = parse_labels(labels);
                    let get = |k: &str| l.get(k).cloned().unwrap_or_default();
                    *m.requests
                        .entry((get("verb"), get("resource"), get("code")))
                        .or_default() += value;
                }
                _ => {}
            }
        }
        m
    }

    pub(crate) fn minus(&self, before: &OpMetrics) -> OpMetrics {
        let mut requests = self.requests.clone();
        for (k, v) in requests.iter_mut() {
            *v -= before.requests.get(k).copied().unwrap_or(0.0);
        }
        requests.retain(|_, v| *v > 0.0);
        let mut watch_restarts = self.watch_restarts.clone();
        for (k, v) in watch_restarts.iter_mut() {
            *v -= before.watch_restarts.get(k).copied().unwrap_or(0.0);
        }
        watch_restarts.retain(|_, v| *v > 0.0);
        OpMetrics {
            node_writes: self.node_writes - before.node_writes,
            node_write_conflicts: self.node_write_conflicts - before.node_write_conflicts,
            status_writes: self.status_writes - before.status_writes,
            reconcile_errors: self.reconcile_errors - before.reconcile_errors,
            requests,
            patches_answered: self.patches_answered - before.patches_answered,
            patch_secs: self.patch_secs - before.patch_secs,
            queue_waits: self.queue_waits - before.queue_waits,
            queue_wait_secs: self.queue_wait_secs - before.queue_wait_secs,
            node_reconciles_timed: self.node_reconciles_timed - before.node_reconciles_timed,
            node_reconcile_secs: self.node_reconcile_secs - before.node_reconcile_secs,
            echoes_skipped: self.echoes_skipped - before.echoes_skipped,
            resyncs: self.resyncs - before.resyncs,
            watch_restarts,
        }
    }

    /// Mean time from sending a node patch to its answer, in milliseconds.
    pub(crate) fn mean_patch_ms(&self) -> Option<f64> {
        (self.patches_answered > 0.0).then(|| 1000.0 * self.patch_secs / self.patches_answered)
    }

    /// Mean wait of a changed node for a free worker, in milliseconds.
    pub(crate) fn mean_queue_wait_ms(&self) -> Option<f64> {
        (self.queue_waits > 0.0).then(|| 1000.0 * self.queue_wait_secs / self.queue_waits)
    }

    /// Mean time a worker spent on one node reconcile, patch included, in
    /// milliseconds: beside the patch's answer time it shows what the operator
    /// adds to each write.
    pub(crate) fn mean_reconcile_ms(&self) -> Option<f64> {
        (self.node_reconciles_timed > 0.0)
            .then(|| 1000.0 * self.node_reconcile_secs / self.node_reconciles_timed)
    }

    pub(crate) fn total_requests(&self) -> f64 {
        self.requests.values().sum()
    }

    /// Requests other than the Lease's: what a phase's trailing work (status writes,
    /// events) sends. The Lease is renewed every 2 s whatever happens, so a settle
    /// that waited for every request to stop would always wait its longest.
    pub(crate) fn work_requests(&self) -> f64 {
        self.requests
            .iter()
            .filter(|((_, resource, _), _)| resource != "leases")
            .map(|(_, v)| v)
            .sum()
    }
}

/// How the operator process is started, kept so that it can be started again.
#[derive(Clone)]
struct Launch {
    bin: PathBuf,
    kubeconfig: PathBuf,
    lease_ns: Option<String>,
    concurrency: u16,
    /// The operator's --resync-interval, in seconds.
    resync_secs: u64,
    log: PathBuf,
}

pub(crate) struct OperatorProc {
    launch: Launch,
    child: Child,
    pid: u32,
    port: u16,
    tck: f64,
    /// Highest VmRSS seen by the sampler since the last reset, in KiB.
    peak_kib: Arc<AtomicU64>,
    /// CPU seconds and VmHWM of the processes stopped before this one
    /// (`--interleave` restarts the operator between rounds).
    earlier_cpu_secs: f64,
    earlier_hwm_kib: u64,
}

impl OperatorProc {
    pub(crate) async fn spawn(
        bin: &Path,
        kubeconfig: &Path,
        lease_ns: Option<&str>,
        concurrency: u16,
        resync_secs: u64,
        log: &Path,
    ) -> Result<Self> {
        let launch = Launch {
            bin: bin.to_path_buf(),
            kubeconfig: kubeconfig.to_path_buf(),
            lease_ns: lease_ns.map(str::to_string),
            concurrency,
            resync_secs,
            log: log.to_path_buf(),
        };
        let logfile = std::fs::File::create(log)
            .map_err(|e| format!("cannot create the operator log {}: {e}", log.display()))?;
        let peak_kib = Arc::new(AtomicU64::new(0));
        let tck = clk_tck();
        let (child, pid, port) = start(&launch, logfile, tck, peak_kib.clone())?;
        Ok(OperatorProc {
            launch,
            child,
            pid,
            port,
            tck,
            peak_kib,
            earlier_cpu_secs: 0.0,
            earlier_hwm_kib: 0,
        })
    }

    /// Starts the operator again after `stop`, its log appended to the same file.
    pub(crate) fn relaunch(&mut self) -> Result<()> {
        let logfile = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.launch.log)
            .map_err(|e| {
                format!(
                    "cannot open the operator log {}: {e}",
                    self.launch.log.display()
                )
            })?;
        let (child, pid, port) = start(&self.launch, logfile, self.tck, self.peak_kib.clone())?;
        (self.child, self.pid, self.port) = (child, pid, port);
        Ok(())
    }

    /// The running process's memory; CPU and the high-water mark count the stopped
    /// ones too.
    pub(crate) fn sample(&self) -> ProcSample {
        let mut s = read_proc(self.pid, self.tck).unwrap_or_default();
        s.cpu_secs += self.earlier_cpu_secs;
        s.hwm_kib = s.hwm_kib.max(self.earlier_hwm_kib);
        s
    }

    /// The highest RSS since the last call (sampled every 100 ms), then restarts.
    pub(crate) fn take_peak_kib(&self) -> u64 {
        let now = self.sample().rss_kib;
        self.peak_kib.swap(now, Ordering::Relaxed).max(now)
    }

    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) async fn get(&self, path: &str) -> Result<(u16, String)> {
        taint_operator_e2e::operator::http_get(self.port, path, Duration::from_secs(10)).await
    }

    pub(crate) async fn metrics(&self) -> Result<OpMetrics> {
        let (status, body) = self.get("/metrics").await?;
        if status != 200 {
            bail!("the operator's /metrics answered {status}");
        }
        Ok(OpMetrics::parse(&body))
    }

    /// Waits until this process has reconciled `nodes` nodes: after a start, its
    /// caches have synced and its first pass over every node is done. /readyz says
    /// less: every replica serves the webhooks, so it is ready once its policy
    /// cache has listed, seconds before the node and pod lists at 5,000 nodes.
    pub(crate) async fn wait_reconciled(&mut self, nodes: usize, max: Duration) -> Result<()> {
        let deadline = Instant::now() + max;
        loop {
            if !self.alive() {
                bail!("the operator exited; log: {}", self.launch.log.display());
            }
            // Not listening yet just after a start: try again.
            let done = self.metrics().await.map_or(0.0, |m| m.queue_waits);
            if done >= nodes as f64 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the operator reconciled {done} of {nodes} nodes in {max:?} after its start");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the operator's counters stop moving (status writes, events and
    /// trailing requests of a phase are counted with it; Lease renewals are not), at
    /// most `max`.
    pub(crate) async fn settle(&mut self, quiet: Duration, max: Duration) -> Result<OpMetrics> {
        let deadline = Instant::now() + max;
        let mut last = self.metrics().await?;
        let mut since = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if !self.alive() {
                bail!("the operator exited; log: {}", self.launch.log.display());
            }
            let m = self.metrics().await?;
            if m.work_requests() != last.work_requests() || m.node_writes != last.node_writes {
                since = Instant::now();
                last = m;
            } else if since.elapsed() >= quiet || Instant::now() > deadline {
                return Ok(m);
            }
        }
    }

    /// SIGTERM, and waits for the process to exit (the Lease is released on the way
    /// out, so a relaunched process leads at once).
    pub(crate) async fn stop(&mut self) -> Result<()> {
        let last = self.sample();
        (self.earlier_cpu_secs, self.earlier_hwm_kib) = (last.cpu_secs, last.hwm_kib);
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await;
        match tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await {
            Ok(r) => {
                r?;
            }
            Err(_) => {
                self.child.start_kill()?;
                self.child.wait().await?;
                bail!("the operator ignored SIGTERM for 20 s");
            }
        }
        Ok(())
    }

    /// The log's length now: where what the operator logs next begins.
    pub(crate) fn log_len(&self) -> u64 {
        std::fs::metadata(&self.launch.log).map_or(0, |m| m.len())
    }

    /// What the operator logged from `offset` on.
    pub(crate) fn log_since(&self, offset: u64) -> Result<String> {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(&self.launch.log)?;
        f.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    pub(crate) fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.launch.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// Starts one operator process, its output to `logfile`, and a sampler that keeps
/// `peak` at the highest RSS seen: (child, pid, metrics port).
fn start(
    launch: &Launch,
    logfile: std::fs::File,
    tck: f64,
    peak: Arc<AtomicU64>,
) -> Result<(Child, u32, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut cmd = Command::new(&launch.bin);
    cmd.arg("run")
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{port}"))
        .args(["--log-format", "text", "--identity", "scale-bench"]);
    if let Some(ns) = &launch.lease_ns {
        cmd.args(["--leader-elect", "--lease-namespace", ns]);
    }
    cmd.arg("--concurrency").arg(launch.concurrency.to_string());
    cmd.arg("--resync-interval")
        .arg(format!("{}s", launch.resync_secs));
    cmd.env("KUBECONFIG", &launch.kubeconfig)
        .env("NO_COLOR", "1")
        .env_remove("TAINT_OPERATOR_LOG")
        .env_remove("TAINT_OPERATOR_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(logfile.try_clone()?)
        .stderr(logfile)
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", launch.bin.display()))?;
    let pid = child.id().ok_or("the operator exited at once")?;
    tokio::spawn(async move {
        while let Some(s) = read_proc(pid, tck) {
            peak.fetch_max(s.rss_kib, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    Ok((child, pid, port))
}

/// Which operator was measured: the binary's build time and the source it most
/// likely came from (the workspace's commit, and whether operator/ or crd/ differ).
pub(crate) fn operator_version(repo_root: &Path, bin: &Path) -> String {
    let built = std::fs::metadata(bin)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| Timestamp::try_from(t).ok())
        .map_or("unknown".into(), |t| {
            t.round(k8s_openapi::jiff::Unit::Second)
                .map_or(t.to_string(), |t| t.to_string())
        });
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo_root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "no git".into());
    let dirty =
        git(&["status", "--porcelain", "--", "operator", "crd"]).is_some_and(|s| !s.is_empty());
    format!(
        "built {built}; workspace at {commit}{}",
        if dirty {
            " with uncommitted changes in operator/ or crd/"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_restarts_are_read_by_watch_and_cause_and_subtracted() {
        let before = OpMetrics::parse(
            "# TYPE taint_operator_watch_restarts_total counter\n\
             taint_operator_watch_restarts_total{watch=\"nodes\",cause=\"relist\"} 1\n",
        );
        let after = OpMetrics::parse(
            "taint_operator_watch_restarts_total{watch=\"nodes\",cause=\"relist\"} 3\n\
             taint_operator_watch_restarts_total{watch=\"pods\",cause=\"connection\"} 2\n\
             taint_operator_api_requests_total{verb=\"watch\",resource=\"nodes\",code=\"200\"} 4\n",
        );
        let d = after.minus(&before);
        let key = |w: &str, c: &str| (w.to_string(), c.to_string());
        assert_eq!(d.watch_restarts.len(), 2);
        assert_eq!(d.watch_restarts[&key("nodes", "relist")], 2.0);
        assert_eq!(d.watch_restarts[&key("pods", "connection")], 2.0);
        assert_eq!(
            d.requests[&("watch".into(), "nodes".into(), "200".into())],
            4.0
        );
    }

    #[test]
    fn the_node_reconcile_time_leaves_the_policy_controller_out() {
        let m = OpMetrics::parse(
            "taint_operator_reconcile_duration_seconds_sum{controller=\"node\"} 30.0\n\
             taint_operator_reconcile_duration_seconds_count{controller=\"node\"} 100\n\
             taint_operator_reconcile_duration_seconds_sum{controller=\"policy\"} 9.0\n\
             taint_operator_reconcile_duration_seconds_count{controller=\"policy\"} 3\n\
             taint_operator_reconcile_duration_seconds_bucket{controller=\"node\",le=\"0.5\"} 90\n",
        );
        assert_eq!(m.mean_reconcile_ms(), Some(300.0));
        let none = OpMetrics::parse("");
        assert_eq!(none.mean_reconcile_ms(), None);
        assert_eq!(m.minus(&m).mean_reconcile_ms(), None);
    }
}
