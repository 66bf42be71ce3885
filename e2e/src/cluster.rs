//! One control plane per test binary, the CRD, and the operator process.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, Config,
    api::{ListParams, Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use taint_operator_crd::TaintPolicy;
use tokio::{process::Command, sync::Mutex};

use crate::{K, Metrics, Operator, Result, bail, eventually, operator::locate_binary};

/// What the suite prints (and all it does) when there is no cluster to run against.
pub const SKIP_LINE: &str =
    "skipping e2e: set KUBE_APISERVER_BIN and ETCD_BIN (see e2e/README.md) or E2E_KUBECONFIG";

pub enum Setup {
    /// The one line to print, then pass.
    Skip(String),
    Run(Box<Harness>),
}

/// A control plane started by `e2e/control-plane.sh start DIR`; stopped on drop
/// (DIR kept, with every log, when the suite failed or `E2E_KEEP=1`).
pub struct ControlPlane {
    script: PathBuf,
    dir: PathBuf,
    keep: bool,
}

impl ControlPlane {
    /// Keep DIR, with every log, when this is dropped.
    pub fn keep_on_drop(&mut self) {
        self.keep = true;
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(&self.script).arg("stop").arg(&self.dir);
        if self.keep {
            cmd.env("KEEP", "1");
        }
        match cmd.output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "e2e: control-plane.sh stop failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("e2e: cannot run control-plane.sh stop: {e}"),
        }
        if self.keep {
            println!(
                "e2e: kept {} (kube-apiserver.log, etcd.log, operator.log)",
                self.dir.display()
            );
        }
    }
}

pub struct Harness {
    pub k: K,
    pub op: Mutex<Operator>,
    pub repo_root: PathBuf,
    pub admin_kubeconfig: PathBuf,
    /// Where the operator log and scratch files go.
    pub work_dir: PathBuf,
    control_plane: Option<ControlPlane>,
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `export K=V` lines of the env file `control-plane.sh start` writes.
fn read_env_file(path: &Path) -> Result<HashMap<String, String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect())
}

fn unique_dir(prefix: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()))
}

pub async fn admin_client(kubeconfig: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .map_err(|e| format!("cannot read kubeconfig {}: {e}", kubeconfig.display()))?;
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    config.read_timeout = Some(Duration::from_secs(30));
    Ok(Client::try_from(config)?)
}

impl Harness {
    /// Starts (or finds) the cluster, installs the CRD and starts the operator.
    pub async fn setup() -> Result<Setup> {
        let repo_root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("e2e/ is inside the workspace")
            .to_path_buf();
        let script = repo_root.join("e2e/control-plane.sh");

        let (admin, operator_kc, lease_ns, work_dir, control_plane) = if let Some(kc) =
            env_nonempty("E2E_KUBECONFIG")
        {
            let work_dir = unique_dir("taint-operator-e2e");
            std::fs::create_dir_all(&work_dir)?;
            let operator_kc = env_nonempty("E2E_OPERATOR_KUBECONFIG").unwrap_or(kc.clone());
            (
                PathBuf::from(kc),
                PathBuf::from(operator_kc),
                env_nonempty("E2E_OPERATOR_NAMESPACE"),
                work_dir,
                None,
            )
        } else if env_nonempty("KUBE_APISERVER_BIN").is_none() && env_nonempty("ETCD_BIN").is_none()
        {
            return Ok(Setup::Skip(SKIP_LINE.to_string()));
        } else {
            let dir = unique_dir("taint-operator-e2e");
            let (cp, env) = match start_control_plane(&script, &dir).await? {
                Started::Up(cp, env) => (cp, env),
                Started::Unavailable(why) => {
                    return Ok(Setup::Skip(format!("{SKIP_LINE} ({why})")));
                }
            };
            let get = |k: &str| {
                env.get(k)
                    .cloned()
                    .ok_or_else(|| format!("{k} missing in {}/env", dir.display()))
            };
            (
                PathBuf::from(get("KUBECONFIG")?),
                PathBuf::from(get("OPERATOR_KUBECONFIG")?),
                Some(get("OPERATOR_NAMESPACE")?),
                dir.clone(),
                Some(cp),
            )
        };

        let client = admin_client(&admin).await?;
        let bin = locate_binary(&repo_root).await?;
        install_crd(&client, &bin).await?;
        let log_path = work_dir.join("operator.log");
        println!(
            "e2e: operator {} as {} (log {})",
            bin.display(),
            operator_kc.display(),
            log_path.display()
        );
        let op = Operator::new(bin, operator_kc, lease_ns, log_path);
        let harness = Harness {
            k: K::new(client),
            op: Mutex::new(op),
            repo_root,
            admin_kubeconfig: admin,
            work_dir,
            control_plane,
        };
        harness.op.lock().await.start().await?;
        Ok(Setup::Run(Box::new(harness)))
    }

    /// Keep the control plane directory (logs) when it is stopped.
    pub fn keep_on_teardown(&mut self) {
        if let Some(cp) = &mut self.control_plane {
            cp.keep = true;
        }
    }

    /// Stops the operator, then the control plane.
    pub async fn teardown(mut self) {
        if let Err(e) = self.op.get_mut().stop().await {
            eprintln!("e2e: stopping the operator: {e}");
        }
        drop(self.control_plane.take());
    }

    pub async fn metrics(&self) -> Result<Metrics> {
        self.op.lock().await.metrics().await
    }

    /// The API server's address, from the admin kubeconfig, when the suite started
    /// the control plane itself (`None` with `E2E_KUBECONFIG`: not ours to restart).
    pub fn own_apiserver(&self) -> Option<std::net::SocketAddr> {
        let cp = self.control_plane.as_ref()?;
        let env = read_env_file(&cp.dir.join("env")).ok()?;
        let url = env.get("KUBE_APISERVER_URL")?;
        url.strip_prefix("https://")?.parse().ok()
    }

    /// `control-plane.sh restart-apiserver` or `restart-etcd` on the suite's control
    /// plane: `which` is `apiserver` or `etcd`.
    pub async fn restart(&self, which: &str) -> Result {
        self.restart_as(which, None).await
    }

    /// [`Harness::restart`] with `binary` instead of the one the suite started:
    /// the same data and port, another version.
    pub async fn restart_as(&self, which: &str, binary: Option<&std::path::Path>) -> Result {
        let Some(cp) = &self.control_plane else {
            crate::bail!("no control plane of the suite's own to restart");
        };
        let mut command = tokio::process::Command::new("bash");
        if let Some(binary) = binary {
            let variable = match which {
                "apiserver" => "KUBE_APISERVER_BIN",
                "etcd" => "ETCD_BIN",
                other => crate::bail!("no binary to swap for {other}"),
            };
            command.env(variable, binary);
        }
        let out = command
            .arg(&cp.script)
            .arg(format!("restart-{which}"))
            .arg(&cp.dir)
            .output()
            .await?;
        if !out.status.success() {
            crate::bail!(
                "control-plane.sh restart-{which} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    pub fn read_example(&self, file: &str) -> Result<serde_json::Value> {
        let path = self.repo_root.join("examples").join(file);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(serde_saphyr::from_str(&text)?)
    }

    /// Every document of an example file.
    pub fn read_examples(&self, file: &str) -> Result<Vec<serde_json::Value>> {
        let path = self.repo_root.join("examples").join(file);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(serde_saphyr::from_multiple(&text)?)
    }

    /// Runs `kubectl` with the admin kubeconfig; fails unless it exits 0.
    pub async fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args(args)
            .output()
            .await
            .map_err(|e| format!("cannot run kubectl: {e}"))?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// What a `kubectl` run said.
pub struct KubectlRun {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Harness {
    /// Runs `kubectl` with the admin kubeconfig, `stdin` on its standard input,
    /// whatever its exit status.
    pub async fn kubectl_input(&self, args: &[&str], stdin: &str) -> Result<KubectlRun> {
        use tokio::io::AsyncWriteExt;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run kubectl: {e}"))?;
        let mut input = child.stdin.take().expect("piped stdin");
        input.write_all(stdin.as_bytes()).await?;
        drop(input);
        let out = child.wait_with_output().await?;
        Ok(KubectlRun {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// What `control-plane.sh start` gave.
pub enum Started {
    /// Running (stopped when dropped), with the variables of its `DIR/env`.
    Up(ControlPlane, HashMap<String, String>),
    /// The script's one line saying why it cannot run here (exit 3: no binaries).
    Unavailable(String),
}

/// Starts a bare control plane in `dir` with `control-plane.sh start` (the suite's
/// own, or a second one for a scenario that needs a cluster of its own).
pub async fn start_control_plane(script: &Path, dir: &Path) -> Result<Started> {
    let out = Command::new("bash")
        .arg(script)
        .arg("start")
        .arg(dir)
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => {}
        Some(3) => {
            let why = stderr.lines().last().unwrap_or("").trim();
            return Ok(Started::Unavailable(why.to_string()));
        }
        _ => bail!(
            "e2e/control-plane.sh start {} failed ({}):\n{stderr}",
            dir.display(),
            out.status
        ),
    }
    print!("{}", String::from_utf8_lossy(&out.stdout));
    // From here on the control plane is stopped whatever happens.
    let cp = ControlPlane {
        script: script.to_path_buf(),
        dir: dir.to_path_buf(),
        keep: env_nonempty("E2E_KEEP").is_some_and(|v| v == "1"),
    };
    let env = read_env_file(&dir.join("env"))?;
    Ok(Started::Up(cp, env))
}

/// Applies `taint-operator crd` with the admin credentials and waits until it is served.
pub async fn install_crd(client: &Client, bin: &Path) -> Result<()> {
    let out = Command::new(bin).arg("crd").output().await?;
    if !out.status.success() {
        bail!(
            "{} crd failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Through a JSON value: serde-saphyr deserializing the CRD's recursive schema
    // type directly takes more than the test thread's 2 MiB stack in a debug build.
    let crd: serde_json::Value = serde_saphyr::from_slice(&out.stdout)?;
    let crd: CustomResourceDefinition = serde_json::from_value(crd)?;
    let name = crd.metadata.name.clone().unwrap_or_default();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply("taint-operator-e2e").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let policies: Api<TaintPolicy> = Api::all(client.clone());
    eventually(
        "the TaintPolicy CRD to be established and served",
        async || {
            let crd = api.get(&name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if !established {
                bail!("not Established yet");
            }
            policies.list(&ListParams::default().limit(1)).await?;
            Ok(())
        },
    )
    .await
}
