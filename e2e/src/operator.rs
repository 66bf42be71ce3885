//! The operator under test: the real `taint-operator` binary, run as a child process
//! with the least-privileged kubeconfig, its output appended to one log file.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    process::{Child, Command},
};

use crate::{Result, bail};

/// Where the operator binary is: `E2E_OPERATOR_BIN`, or what `cargo build -p
/// taint-operator` reports (it builds it first, so the suite never tests a stale binary).
pub async fn locate_binary(repo_root: &Path) -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("E2E_OPERATOR_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    println!("e2e: cargo build -p taint-operator");
    let out = Command::new(&cargo)
        .args([
            "build",
            "-p",
            "taint-operator",
            "--bin",
            "taint-operator",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(repo_root)
        .stderr(Stdio::inherit())
        .output()
        .await
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if !out.status.success() {
        bail!("cargo build -p taint-operator failed ({})", out.status);
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] == "compiler-artifact"
            && msg["target"]["name"] == "taint-operator"
            && let Some(exe) = msg["executable"].as_str()
        {
            return Ok(PathBuf::from(exe));
        }
    }
    bail!("cargo build -p taint-operator did not report the taint-operator executable")
}

/// A TCP port on 127.0.0.1 that nobody listens on right now.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

pub struct Operator {
    bin: PathBuf,
    kubeconfig: PathBuf,
    lease_namespace: Option<String>,
    log_path: PathBuf,
    child: Option<Child>,
    port: u16,
    starts: u32,
    identity: String,
    lease_name: Option<String>,
    extra_args: Vec<String>,
    /// `--metrics-secure`: its port speaks HTTPS, /metrics wants a token.
    secure_metrics: bool,
}

impl Operator {
    pub fn new(
        bin: PathBuf,
        kubeconfig: PathBuf,
        lease_namespace: Option<String>,
        log_path: PathBuf,
    ) -> Self {
        Operator {
            bin,
            kubeconfig,
            lease_namespace,
            log_path,
            child: None,
            port: 0,
            starts: 0,
            identity: "e2e-operator".into(),
            lease_name: None,
            extra_args: Vec::new(),
            secure_metrics: false,
        }
    }

    /// Another replica of the same binary and kubeconfig (same lease namespace), with
    /// its own identity and log file: for scenarios that run more than one process.
    pub fn sibling(&self, identity: &str, log_path: PathBuf) -> Self {
        let mut op = Operator::new(
            self.bin.clone(),
            self.kubeconfig.clone(),
            self.lease_namespace.clone(),
            log_path,
        );
        op.identity = identity.into();
        op
    }

    /// Talk to the API server through this kubeconfig instead.
    pub fn with_kubeconfig(mut self, kubeconfig: PathBuf) -> Self {
        self.kubeconfig = kubeconfig;
        self
    }

    /// Run without leader election: a replica alone, that no lost Lease stops.
    pub fn without_leader_election(mut self) -> Self {
        self.lease_namespace = None;
        self
    }

    /// Elect on this Lease instead of the default one.
    pub fn with_lease_name(mut self, name: &str) -> Self {
        self.lease_name = Some(name.into());
        self
    }

    /// More `run` flags (e.g. the webhook's).
    pub fn with_args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Serve the metrics port over HTTPS with a self-signed certificate, /metrics
    /// behind the API server's TokenReview and SubjectAccessReview.
    pub fn with_secure_metrics(mut self) -> Self {
        self.secure_metrics = true;
        self.extra_args.push("--metrics-secure".into());
        self
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Where leader election runs (`None`: no leader election).
    pub fn lease_namespace(&self) -> Option<&str> {
        self.lease_namespace.as_deref()
    }

    /// The Lease this replica elects on.
    pub fn lease_name(&self) -> &str {
        self.lease_name.as_deref().unwrap_or("taint-operator")
    }

    pub fn bin(&self) -> &Path {
        &self.bin
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The running process's id, for signals the harness sends itself (SIGSTOP).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// How the process ended, once it has ended on its own (`None` while it runs,
    /// and after `stop` or `kill9`).
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Starts the operator and waits until `/readyz` answers 200 (leader, caches synced).
    pub async fn start(&mut self) -> Result<()> {
        if self.is_running() {
            bail!("the operator is already running");
        }
        self.starts += 1;
        self.port = free_port()?;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)?;
        {
            use std::io::Write;
            writeln!(
                log,
                "===== e2e: operator {} start #{} (metrics 127.0.0.1:{}) =====",
                self.identity, self.starts, self.port
            )?;
        }
        let mut cmd = Command::new(&self.bin);
        cmd.arg("run")
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{}", self.port))
            .args(["--log-format", "text", "--identity", &self.identity]);
        if let Some(ns) = &self.lease_namespace {
            cmd.args(["--leader-elect", "--lease-namespace", ns]);
            if let Some(name) = &self.lease_name {
                cmd.args(["--lease-name", name]);
            }
        }
        cmd.args(&self.extra_args);
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("NO_COLOR", "1")
            .env_remove("TAINT_OPERATOR_LOG")
            .env_remove("TAINT_OPERATOR_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        self.child = Some(
            cmd.spawn()
                .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?,
        );
        let started = Instant::now();
        loop {
            if !self.is_running() {
                bail!(
                    "the operator exited during startup; log tail:\n{}",
                    self.log_tail(30)
                );
            }
            if let Ok((status, _)) = self.get("/readyz").await
                && status == 200
            {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!(
                    "the operator was not ready within 30 s; log tail:\n{}",
                    self.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no shutdown handling at all, as when a node dies under the pod.
    pub async fn kill9(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            c.start_kill()?;
            c.wait().await?;
        }
        Ok(())
    }

    /// SIGTERM and wait (SIGKILL after 15 s).
    pub async fn stop(&mut self) -> Result<()> {
        let Some(mut c) = self.child.take() else {
            return Ok(());
        };
        if let Some(pid) = c.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        match tokio::time::timeout(Duration::from_secs(15), c.wait()).await {
            Ok(status) => {
                status?;
            }
            Err(_) => {
                c.start_kill()?;
                c.wait().await?;
                bail!("the operator ignored SIGTERM for 15 s");
            }
        }
        Ok(())
    }

    async fn get(&self, path: &str) -> Result<(u16, String)> {
        self.get_as(path, None).await
    }

    /// A GET of the metrics port, over HTTPS when the metrics are secure, with
    /// `Authorization: Bearer <token>` when a token is given.
    pub async fn get_as(&self, path: &str, token: Option<&str>) -> Result<(u16, String)> {
        if self.secure_metrics {
            https_get(self.port, path, token, Duration::from_secs(5)).await
        } else {
            http_get(self.port, path, Duration::from_secs(5)).await
        }
    }

    /// The port /metrics, /healthz and /readyz are served on (0 before the first start).
    pub fn metrics_port(&self) -> u16 {
        self.port
    }

    /// The operator's `/metrics` right now.
    pub async fn metrics(&self) -> Result<Metrics> {
        let (status, body) = self.get("/metrics").await?;
        if status != 200 {
            bail!("/metrics answered {status}");
        }
        Ok(Metrics(body))
    }

    /// Size of the log so far, to print only what a scenario produced.
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log_path).map_or(0, |m| m.len())
    }

    /// The last `n` lines of the log (escape sequences removed).
    pub fn log_tail(&self, n: usize) -> String {
        self.log_since(0, n)
    }

    /// The last `n` lines the log got after byte `offset`.
    pub fn log_since(&self, offset: u64, n: usize) -> String {
        let bytes = std::fs::read(&self.log_path).unwrap_or_default();
        let start = (offset as usize).min(bytes.len());
        let text = strip_ansi(&String::from_utf8_lossy(&bytes[start..]));
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A `/metrics` page.
pub struct Metrics(pub String);

impl Metrics {
    /// The sum of every series of `name` (labels ignored); 0 when absent.
    pub fn get(&self, name: &str) -> f64 {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let metric = series.split('{').next()?;
                (metric == name).then(|| value.parse::<f64>().ok())?
            })
            .sum()
    }

    /// The sum of the series of `name` that carry every one of `labels`.
    pub fn get_with(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
                let all = labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
                (metric == name && all).then(|| value.parse::<f64>().ok())?
            })
            .sum()
    }

    /// Node patches the API server accepted (the write counter counts attempts).
    pub fn node_patches_ok(&self) -> u64 {
        self.get_with(
            "taint_operator_api_requests_total",
            &[("verb", "patch"), ("resource", "nodes"), ("code", "200")],
        ) as u64
    }

    pub fn node_writes(&self) -> u64 {
        self.get("taint_operator_node_writes_total") as u64
    }

    pub fn status_writes(&self) -> u64 {
        self.get("taint_operator_status_writes_total") as u64
    }

    /// Every API request series that changed something (any verb but get, list and
    /// watch), as `verb resource code: count`; empty when this process wrote nothing.
    pub fn api_writes(&self) -> Vec<String> {
        self.0
            .lines()
            .filter_map(|l| l.strip_prefix("taint_operator_api_requests_total{"))
            .filter_map(|l| {
                let (labels, value) = l.rsplit_once("} ")?;
                let label = |k: &str| {
                    labels
                        .split(',')
                        .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                        .map(|v| v.trim_end_matches('"').to_string())
                        .unwrap_or_default()
                };
                let verb = label("verb");
                if matches!(verb.as_str(), "get" | "list" | "watch") {
                    return None;
                }
                Some(format!(
                    "{verb} {} {}: {value}",
                    label("resource"),
                    label("code")
                ))
            })
            .collect()
    }

    pub fn node_write_conflicts(&self) -> u64 {
        self.get("taint_operator_node_write_conflicts_total") as u64
    }
}

/// A plain HTTP GET of the operator's metrics/health port: (status, body).
pub async fn http_get(port: u16, path: &str, timeout: Duration) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    tokio::time::timeout(timeout, s.read_to_end(&mut buf)).await??;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad HTTP answer from the operator: {head:?}"))?;
    Ok((status, body.to_string()))
}

/// A GET over HTTPS to the operator's metrics port on 127.0.0.1, as Prometheus
/// scrapes a pod: the certificate is not verified (it is self-signed), the bearer
/// token is sent when given. kube's client is the TLS client at hand.
pub async fn https_get(
    port: u16,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String)> {
    use http::{HeaderValue, Request, header};

    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse()?);
    config.accept_invalid_certs = true;
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    if let Some(token) = token {
        config.headers.push((
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}"))?,
        ));
    }
    let client = kube::Client::try_from(config)?;
    let request = Request::get(path).body(kube::client::Body::empty())?;
    let response = tokio::time::timeout(timeout, client.send(request))
        .await
        .map_err(|_| {
            format!("GET https://127.0.0.1:{port}{path}: no answer within {timeout:?}")
        })??;
    let status = response.status().as_u16();
    let body = response.into_body().collect_bytes().await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}
