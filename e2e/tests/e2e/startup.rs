//! `taint-operator run` that cannot start: the TaintPolicy CRD not installed, an API
//! server that is not there, credentials it rejects, an identity without RBAC, a
//! kubeconfig that is not one. Each time: one line on stderr saying what is wrong
//! (and what to do), nothing else, a non-zero exit, and no panic.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use serde_json::Value as Yaml;
use taint_operator_e2e::{
    Harness, Result, Started, bail, ensure, ensure_eq, free_port, start_control_plane,
};
use tokio::process::Command;

/// Runs `taint-operator run` with `kubeconfig`; it must exit non-zero within 30 s
/// having printed exactly one line, to stderr. Returns that line.
async fn fails_with_one_line(bin: &Path, kubeconfig: &Path) -> Result<String> {
    let mut cmd = Command::new(bin);
    cmd.args([
        "run",
        "--metrics-addr",
        &format!("127.0.0.1:{}", free_port()?),
        "--log-format",
        "text",
    ])
    .env("KUBECONFIG", kubeconfig)
    .env("NO_COLOR", "1")
    .env("RUST_BACKTRACE", "1")
    .env_remove("KUBERNETES_SERVICE_HOST")
    .env_remove("KUBERNETES_SERVICE_PORT")
    .env_remove("TAINT_OPERATOR_LOG")
    .env_remove("TAINT_OPERATOR_LOG_FORMAT")
    .stdin(Stdio::null())
    .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .map_err(|_| {
            format!(
                "taint-operator run with {} did not exit within 30 s",
                kubeconfig.display()
            )
        })??;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let what = format!(
        "taint-operator run with {} (exit {:?}; stdout {stdout:?}; stderr {stderr:?})",
        kubeconfig.display(),
        out.status.code()
    );
    ensure!(
        !out.status.success() && out.status.code().is_some(),
        "{what}: want a non-zero exit"
    );
    ensure!(stdout.is_empty(), "{what}: want nothing on stdout");
    let lines: Vec<&str> = stderr.lines().collect();
    ensure!(lines.len() == 1, "{what}: want exactly one line on stderr");
    ensure!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{what}: a panic"
    );
    Ok(lines[0].to_string())
}

fn read_yaml(path: &Path) -> Result<Yaml> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(serde_saphyr::from_str(&text)?)
}

fn write_yaml(path: &Path, kc: &Yaml) -> Result<PathBuf> {
    std::fs::write(path, serde_saphyr::to_string(kc)?)?;
    Ok(path.to_path_buf())
}

/// The kubeconfig's (first) cluster server URL.
fn server(kc: &Yaml) -> Result<String> {
    match kc["clusters"][0]["cluster"]["server"].as_str() {
        Some(s) => Ok(s.trim_end_matches('/').to_string()),
        None => bail!("the kubeconfig names no cluster server"),
    }
}

/// The same kubeconfig with every user's credentials replaced by a bearer token.
fn with_token(kc: &Yaml, token: &str) -> Result<Yaml> {
    let mut kc = kc.clone();
    let Some(users) = kc["users"].as_array_mut() else {
        bail!("the kubeconfig has no users");
    };
    for u in users {
        u["user"] = serde_json::json!({ "token": token });
    }
    Ok(kc)
}

pub async fn startup_errors(h: &Harness) -> Result {
    let (bin, op_kc) = {
        let op = h.op.lock().await;
        (op.bin().to_path_buf(), op.kubeconfig().to_path_buf())
    };
    let dir = h.work_dir.join("startup");
    std::fs::create_dir_all(&dir)?;
    let kc = read_yaml(&op_kc)?;
    let url = server(&kc)?;

    // (b) Nothing listens where the kubeconfig points.
    let mut closed = kc.clone();
    let port = free_port()?;
    let closed_url = format!("https://127.0.0.1:{port}");
    closed["clusters"][0]["cluster"]["server"] = Yaml::String(closed_url.clone());
    let line =
        fails_with_one_line(&bin, &write_yaml(&dir.join("closed.kubeconfig"), &closed)?).await?;
    let want = format!("error: cannot reach the API server at {closed_url}: ");
    ensure!(
        line.starts_with(&want) && line.contains("Connection refused"),
        "closed port: {line:?}, want {want:?}... Connection refused"
    );
    println!("closed port:     {line}");

    // (c) Credentials the API server does not accept: 401.
    let bogus = with_token(&kc, "e2e-not-a-valid-token")?;
    let line =
        fails_with_one_line(&bin, &write_yaml(&dir.join("bogus.kubeconfig"), &bogus)?).await?;
    ensure_eq!(
        line,
        format!(
            "error: the API server at {url} did not accept the credentials (401 Unauthorized): check the kubeconfig's user (token or client certificate)"
        ),
        "bogus token"
    );
    println!("bogus token:     {line}");

    // (c) A valid identity that no RBAC binds: a ServiceAccount's token: 403.
    let ns = "e2e-startup";
    h.k.ensure_namespace(ns).await?;
    let sa = "e2e-norbac";
    let _ = h.kubectl(&["-n", ns, "create", "serviceaccount", sa]).await;
    let token = h
        .kubectl(&["-n", ns, "create", "token", sa, "--duration", "10m"])
        .await?;
    let norbac = with_token(&kc, token.trim())?;
    let line =
        fails_with_one_line(&bin, &write_yaml(&dir.join("norbac.kubeconfig"), &norbac)?).await?;
    ensure_eq!(
        line,
        format!(
            "error: no permission to list taintpolicies.nodetaint.io: taintpolicies.nodetaint.io is forbidden: User \"system:serviceaccount:{ns}:{sa}\" cannot list resource \"taintpolicies\" in API group \"nodetaint.io\" at the cluster scope (bind the operator to the chart's ClusterRole)"
        ),
        "identity without RBAC"
    );
    println!("no RBAC:         {line}");

    // A kubeconfig that is not YAML, and one that is not there.
    let garbage = dir.join("garbage.kubeconfig");
    std::fs::write(&garbage, "this is: [not a kubeconfig\n")?;
    let prefix = "error: cannot load a kubeconfig (KUBECONFIG, ~/.kube/config or in-cluster): ";
    let missing = dir.join("missing.kubeconfig");
    for (path, says) in [
        (
            &garbage,
            vec!["failed to parse kubeconfig YAML".to_string()],
        ),
        (
            &missing,
            vec![
                missing.display().to_string(),
                "No such file or directory".to_string(),
            ],
        ),
    ] {
        let line = fails_with_one_line(&bin, path).await?;
        ensure!(
            line.starts_with(prefix) && says.iter().all(|s| line.contains(s.as_str())),
            "bad kubeconfig {}: {line:?}, want {prefix:?}...{says:?}...",
            path.display()
        );
        println!("bad kubeconfig:  {line}");
    }

    // (a) The CRD not installed: a second, bare control plane the suite never
    // installed it in, with the same least-privileged operator user and RBAC.
    let script = h.repo_root.join("e2e/control-plane.sh");
    let cp_dir = PathBuf::from(format!("{}-nocrd", h.work_dir.display()));
    if std::env::var_os("KUBE_APISERVER_BIN").is_none() {
        println!(
            "CRD missing: skipped (needs KUBE_APISERVER_BIN and ETCD_BIN for a second control plane)"
        );
        return Ok(());
    }
    let (cp, env) = match start_control_plane(&script, &cp_dir).await? {
        Started::Up(cp, env) => (cp, env),
        Started::Unavailable(why) => bail!("cannot start a second control plane: {why}"),
    };
    let outcome = async {
        let op_kc = env
            .get("OPERATOR_KUBECONFIG")
            .ok_or("OPERATOR_KUBECONFIG missing in the second control plane's env")?;
        let line = fails_with_one_line(&bin, Path::new(op_kc)).await?;
        ensure_eq!(
            line,
            "error: the TaintPolicy CRD (taintpolicies.nodetaint.io) is not installed: install it with `taint-operator crd | kubectl apply -f -` or the helm chart",
            "CRD missing"
        );
        println!("CRD missing:     {line}");

        // (b) The CRD without its selectableFields, as an API server before 1.32
        // keeps it: the start-up probe refuses to half-run.
        let admin = env
            .get("KUBECONFIG")
            .ok_or("KUBECONFIG missing in the second control plane's env")?;
        let printed = Command::new(&bin).arg("crd").output().await?;
        let mut crd: Yaml = serde_saphyr::from_str(&String::from_utf8_lossy(&printed.stdout))?;
        let versions = crd["spec"]["versions"]
            .as_array_mut()
            .ok_or("the printed CRD has no spec.versions")?;
        for version in versions {
            let fields = version
                .as_object_mut()
                .and_then(|v| v.remove("selectableFields"));
            ensure!(fields.is_some(), "a version of the printed CRD has no selectableFields");
        }
        kubectl_apply(admin, &serde_json::to_string(&crd)?).await?;
        let established = Command::new("kubectl")
            .args(["--kubeconfig", admin, "wait", "--for=condition=Established"])
            .args(["--timeout=60s", "crd/taintpolicies.nodetaint.io"])
            .output()
            .await?;
        ensure!(established.status.success(), "the CRD did not become established");
        // Established comes before the API server serves the resource (429 "storage
        // is (re)initializing" meanwhile): wait until it lists.
        let mut listed = false;
        for _ in 0..60 {
            let list = Command::new("kubectl")
                .args(["--kubeconfig", admin, "get", "taintpolicies", "-o", "name"])
                .output()
                .await?;
            if list.status.success() {
                listed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        ensure!(listed, "the TaintPolicies did not list within 30 s of the CRD's Established");
        let line = fails_with_one_line(&bin, Path::new(op_kc)).await?;
        ensure!(
            line.starts_with("error: the API server does not take field selectors on TaintPolicies (")
                && line.contains("needs Kubernetes 1.32 or later"),
            "CRD without selectableFields: {line:?}"
        );
        println!("no selectableFields: {line}");
        Ok(())
    }
    .await;
    drop(cp);
    outcome
}

/// `kubectl apply -f -` of `manifest` (JSON or YAML) with the kubeconfig `admin`.
async fn kubectl_apply(admin: &str, manifest: &str) -> Result {
    use tokio::io::AsyncWriteExt;
    let mut child = Command::new("kubectl")
        .args(["--kubeconfig", admin, "apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("kubectl's stdin")?
        .write_all(manifest.as_bytes())
        .await?;
    let out = child.wait_with_output().await?;
    ensure!(
        out.status.success(),
        "kubectl apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
