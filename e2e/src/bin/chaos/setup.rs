//! The soak's cluster: a bare control plane with an audit log, one user and one
//! API-server proxy per replica, the admission webhooks behind a front that
//! spreads connections over the replicas, a webhook that throttles or slows the
//! replicas' writes on demand, and the fleet itself.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
};

use futures::{StreamExt, stream};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use taint_operator_e2e::{
    Operator, Proxy, Result, bail,
    cluster::{ControlPlane, Started, admin_client, install_crd, start_control_plane},
    free_port,
};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::Mutex,
};

use crate::{
    audit,
    world::{self, *},
};

pub const LEASE_NAMESPACE: &str = "taint-operator";
pub const LEASE_NAME: &str = "taint-operator";
pub const REPLICA_GROUP: &str = "taint-operator-chaos";

pub fn replica_user(i: usize) -> String {
    format!("chaos-replica-{i}")
}

pub struct Replica {
    pub identity: String,
    pub op: Mutex<Operator>,
    pub proxy: Proxy,
}

pub struct Cluster {
    pub repo_root: PathBuf,
    pub dir: PathBuf,
    pub cp_dir: PathBuf,
    pub admin_kubeconfig: PathBuf,
    pub client: Client,
    pub operator_bin: PathBuf,
    pub replicas: Vec<Arc<Replica>>,
    pub webhook_front: Proxy,
    pub throttle_file: PathBuf,
    pub slow_file: PathBuf,
    pub audit_log: PathBuf,
    _throttle: Child,
    control_plane: std::sync::Mutex<Option<ControlPlane>>,
}

impl Cluster {
    /// Keep the control plane's directory (its logs) when it stops.
    pub fn keep(&self) {
        if let Some(cp) = self
            .control_plane
            .lock()
            .expect("control plane lock")
            .as_mut()
        {
            cp.keep_on_drop();
        }
    }

    /// Stops the control plane now (kept or removed as asked).
    pub fn stop(&self) {
        drop(
            self.control_plane
                .lock()
                .expect("control plane lock")
                .take(),
        );
    }

    pub fn script(&self) -> PathBuf {
        self.repo_root.join("e2e/control-plane.sh")
    }
}

async fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .output()
        .await
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A key and certificate signed by the control plane's CA (e2e/lib.sh's `pki_sign`).
async fn sign(
    repo_root: &Path,
    pki: &Path,
    name: &str,
    subject: &str,
    usage: &str,
    san: &str,
) -> Result {
    let script = r#"log() { echo "$*" >&2; }; die() { log "$*"; exit 1; }; source "$1"; pki_sign "$2" "$3" "$4" "$5" "$6""#;
    run(
        Command::new("bash")
            .args(["-c", script, "sign"])
            .arg(repo_root.join("e2e/lib.sh"))
            .arg(pki)
            .args([name, subject, usage, san]),
        &format!("pki_sign {name}"),
    )
    .await?;
    Ok(())
}

fn kubeconfig(pki: &Path, user: &str, port: u16) -> String {
    let p = |f: &str| pki.join(f).display().to_string();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: chaos\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate: {crt}\n    client-key: {key}\ncontexts:\n- name: chaos\n  context: {{cluster: chaos, user: {user}}}\ncurrent-context: chaos\n",
        ca = p("ca.crt"),
        crt = p(&format!("{user}.crt")),
        key = p(&format!("{user}.key")),
    )
}

/// `kubectl apply --server-side` of JSON objects with the admin's credentials.
pub async fn apply(admin_kubeconfig: &Path, objects: &[Value]) -> Result {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(admin_kubeconfig)
        .args([
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            ACTOR_MANAGER,
            "-f",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(&serde_json::to_vec(&list)?).await?;
    }
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        bail!(
            "kubectl apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn ca_bundle(pki: &Path) -> Result<Value> {
    Ok(serde_json::to_value(ByteString(std::fs::read(
        pki.join("ca.crt"),
    )?))?)
}

/// Role bindings and API priority for the replicas' group, as the control plane
/// script gives the operator's single user.
async fn replica_rbac(client: &Client, admin: &Path) -> Result {
    use k8s_openapi::api::flowcontrol::v1::FlowSchema;
    let mut objects = vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "taint-operator-chaos"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "taint-operator"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": REPLICA_GROUP}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "taint-operator-chaos-leader-election", "namespace": LEASE_NAMESPACE},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "taint-operator-leader-election"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": REPLICA_GROUP}]}),
    ];
    let schemas: Api<FlowSchema> = Api::all(client.clone());
    for name in ["taint-operator", "taint-operator-leader-election"] {
        let Some(fs) = schemas.get_opt(name).await? else {
            continue;
        };
        let mut spec = serde_json::to_value(fs.spec)?;
        for rule in spec["rules"].as_array_mut().into_iter().flatten() {
            rule["subjects"] = json!([{"kind": "Group", "group": {"name": REPLICA_GROUP}}]);
        }
        objects.push(
            json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                            "metadata": {"name": format!("{name}-chaos")}, "spec": spec}),
        );
    }
    apply(admin, &objects).await
}

pub struct Options {
    pub dir: PathBuf,
    pub replicas: usize,
    pub operator_bin: PathBuf,
}

/// Starts everything but the replicas' processes and the fleet.
pub async fn start(repo_root: &Path, o: &Options) -> Result<Option<Cluster>> {
    std::fs::create_dir_all(&o.dir)?;
    let users: Vec<String> = (0..o.replicas).map(replica_user).collect();
    let policy_file = o.dir.join("audit-policy.yaml");
    let audit_log = o.dir.join("audit.log");
    std::fs::write(&policy_file, audit::policy(&users, LEASE_NAMESPACE))?;
    // control-plane.sh passes these on to kube-apiserver, at start and at every restart.
    // SAFETY: set before any other thread of this process reads the environment.
    unsafe {
        std::env::set_var(
            "KUBE_APISERVER_EXTRA_ARGS",
            format!(
                "--audit-policy-file={} --audit-log-path={} --audit-log-maxsize=0",
                policy_file.display(),
                audit_log.display()
            ),
        );
    }
    let cp_dir = o.dir.join("control-plane");
    let script = repo_root.join("e2e/control-plane.sh");
    let (control_plane, env) = match start_control_plane(&script, &cp_dir).await? {
        Started::Up(cp, env) => (cp, env),
        Started::Unavailable(why) => {
            println!("chaos: skipped: {why}");
            return Ok(None);
        }
    };
    let admin = PathBuf::from(
        env.get("KUBECONFIG")
            .ok_or("no KUBECONFIG in the control plane's env")?,
    );
    let apiserver: SocketAddr = env
        .get("KUBE_APISERVER_URL")
        .and_then(|u| u.strip_prefix("https://"))
        .ok_or("no KUBE_APISERVER_URL in the control plane's env")?
        .parse()?;
    let client = admin_client(&admin).await?;
    install_crd(&client, &o.operator_bin).await?;
    replica_rbac(&client, &admin).await?;

    let pki = cp_dir.join("pki");
    sign(
        repo_root,
        &pki,
        "webhook",
        "/CN=127.0.0.1",
        "serverAuth",
        "IP:127.0.0.1",
    )
    .await?;
    let mut replicas = Vec::new();
    let mut webhook_ports = Vec::new();
    for user in &users {
        sign(
            repo_root,
            &pki,
            user,
            &format!("/O={REPLICA_GROUP}/CN={user}"),
            "clientAuth",
            "",
        )
        .await?;
        let proxy = Proxy::start(apiserver).await?;
        let kc = o.dir.join(format!("{user}.kubeconfig"));
        std::fs::write(&kc, kubeconfig(&pki, user, proxy.port()))?;
        let webhook_port = free_port()?;
        webhook_ports.push(SocketAddr::from(([127, 0, 0, 1], webhook_port)));
        let op = Operator::new(
            o.operator_bin.clone(),
            kc,
            Some(LEASE_NAMESPACE.into()),
            o.dir.join(format!("{user}.log")),
        )
        .sibling(user, o.dir.join(format!("{user}.log")))
        .with_args([
            "--webhook-addr".to_string(),
            format!("127.0.0.1:{webhook_port}"),
            "--webhook-cert-file".into(),
            pki.join("webhook.crt").display().to_string(),
            "--webhook-key-file".into(),
            pki.join("webhook.key").display().to_string(),
            "--registered-webhooks".into(),
            "node,taintpolicy".into(),
        ]);
        replicas.push(Arc::new(Replica {
            identity: user.clone(),
            op: Mutex::new(op),
            proxy,
        }));
    }
    let webhook_front = Proxy::start_spread(webhook_ports).await?;

    let throttle_file = o.dir.join("throttle-on");
    let slow_file = o.dir.join("slow-on");
    let throttle_port = free_port()?;
    let mut throttle = Command::new("python3")
        .arg(repo_root.join("e2e/throttle-webhook.py"))
        .args([
            "--port",
            &throttle_port.to_string(),
            "--user-prefix",
            "chaos-replica-",
        ])
        .arg("--cert")
        .arg(pki.join("webhook.crt"))
        .arg("--key")
        .arg(pki.join("webhook.key"))
        .arg("--throttle-file")
        .arg(&throttle_file)
        .arg("--slow-file")
        .arg(&slow_file)
        .args(["--slow-seconds", "3"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run python3 e2e/throttle-webhook.py: {e}"))?;
    let mut ready = String::new();
    BufReader::new(throttle.stdout.take().expect("piped"))
        .read_line(&mut ready)
        .await?;
    if ready.trim() != "ready" {
        bail!("the throttle webhook did not start: {ready:?}");
    }

    let ca = ca_bundle(&pki)?;
    let front = webhook_front.port();
    apply(
        &admin,
        &[
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                   "metadata": {"name": "chaos-taint-operator-node"},
                   "webhooks": [{"name": "nodes.nodetaint.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                                 "failurePolicy": "Ignore", "timeoutSeconds": 3, "reinvocationPolicy": "Never",
                                 "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                            "resources": ["nodes"], "scope": "Cluster"}],
                                 "objectSelector": {"matchLabels": {RUN_LABEL: "1"}},
                                 "clientConfig": {"url": format!("https://127.0.0.1:{front}/mutate-node"), "caBundle": ca}}]}),
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                   "metadata": {"name": "chaos-taint-operator-policy"},
                   "webhooks": [{"name": "taintpolicies.nodetaint.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                                 "failurePolicy": "Ignore", "timeoutSeconds": 5,
                                 "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["nodetaint.io"],
                                            "apiVersions": ["v1alpha1"], "resources": ["taintpolicies"]}],
                                 "clientConfig": {"url": format!("https://127.0.0.1:{front}/validate-taintpolicy"), "caBundle": ca}}]}),
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                   "metadata": {"name": "chaos-throttle"},
                   "webhooks": [{"name": "throttle.chaos.nodetaint.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                                 "failurePolicy": "Ignore", "timeoutSeconds": 10,
                                 "rules": [
                                     {"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": [""], "apiVersions": ["v1"],
                                      "resources": ["nodes", "pods", "pods/eviction"]},
                                     {"operations": ["CREATE", "UPDATE"], "apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"],
                                      "resources": ["leases"]}],
                                 "clientConfig": {"url": format!("https://127.0.0.1:{throttle_port}/"), "caBundle": ca}}]}),
        ],
    )
    .await?;

    Ok(Some(Cluster {
        repo_root: repo_root.to_path_buf(),
        dir: o.dir.clone(),
        cp_dir,
        admin_kubeconfig: admin,
        client,
        operator_bin: o.operator_bin.clone(),
        replicas,
        webhook_front,
        throttle_file,
        slow_file,
        audit_log,
        _throttle: throttle,
        control_plane: std::sync::Mutex::new(Some(control_plane)),
    }))
}

/// Every condition the actors flip, healthy.
pub fn healthy_conditions() -> Value {
    let t = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut conds = vec![
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "lastTransitionTime": t, "lastHeartbeatTime": t}),
    ];
    for (type_, statuses) in CONDITIONS {
        conds.push(
            json!({"type": type_, "status": statuses[0], "reason": "Chaos",
                          "lastTransitionTime": t, "lastHeartbeatTime": t}),
        );
    }
    json!({"status": {"conditions": conds}})
}

pub fn node_object(name: &str, pool: &str, zone: &str) -> Result<Node> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {RUN_LABEL: "1", POOL_LABEL: pool, ZONE_LABEL: zone,
                                              "kubernetes.io/hostname": name}},
    }))?)
}

/// Creates a node with its healthy conditions.
pub async fn create_node(client: &Client, name: &str, pool: &str, zone: &str) -> Result {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &node_object(name, pool, zone)?)
        .await?;
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(healthy_conditions()),
        )
        .await?;
    Ok(())
}

pub fn cni_pod_name(node: &str) -> String {
    format!("cni-{node}")
}

/// The critical DaemonSet pod of a node, Ready or not.
pub async fn ensure_cni_pod(client: &Client, node: &str, ready: bool) -> Result {
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM_NS);
    let name = cni_pod_name(node);
    if pods.get_opt(&name).await?.is_none() {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": SYSTEM_NS, "labels": {"app": CNI_APP},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "cni",
                                              "uid": "00000000-0000-0000-0000-00000000c0de", "controller": true}]},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "cni", "image": "registry.k8s.io/pause:3.10"}]},
        }))?;
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    set_pod_ready(client, SYSTEM_NS, &name, ready).await
}

pub async fn set_pod_ready(client: &Client, ns: &str, name: &str, ready: bool) -> Result {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let t = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = if ready { "True" } else { "False" };
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": status, "lastTransitionTime": t},
            {"type": "ContainersReady", "status": status, "lastTransitionTime": t}]}})),
    )
    .await?;
    Ok(())
}

/// Workloads of five pods: about one pod for every five nodes, most on spot nodes,
/// so preempted spot nodes have pods to drain.
pub fn app_count(nodes: usize) -> usize {
    (nodes / 25).clamp(2, 20)
}

pub fn app_name(app: usize) -> String {
    format!("web-{app}")
}

/// The fleet: nodes, their critical pods, the workloads and their budgets, then
/// the policies.
pub async fn populate(cluster: &Cluster, nodes: usize) -> Result {
    apply(
        &cluster.admin_kubeconfig,
        &[
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NS}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APPS_NS}}),
        ],
    )
    .await?;
    let client = &cluster.client;
    let results: Vec<Result> = stream::iter(0..nodes)
        .map(|i| async move {
            let name = world::node_name(i);
            let (pool, zone) = world::initial_labels(i);
            create_node(client, &name, pool, zone).await?;
            // One node in twenty waits for its CNI pod: the readiness policy holds it.
            ensure_cni_pod(client, &name, i % 20 != 7).await
        })
        .buffer_unordered(24)
        .collect()
        .await;
    results.into_iter().collect::<Result>()?;
    let mut budgets = Vec::new();
    for app in 0..app_count(nodes) {
        budgets.push(
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                            "metadata": {"name": app_name(app), "namespace": APPS_NS},
                            "spec": {"minAvailable": APP_MIN_AVAILABLE,
                                     "selector": {"matchLabels": {"app": app_name(app)}}}}),
        );
    }
    apply(&cluster.admin_kubeconfig, &budgets).await?;
    apply(&cluster.admin_kubeconfig, &world::fixed_policies(nodes)).await?;
    Ok(())
}

/// Creates or changes one policy by server-side apply.
pub async fn apply_policy(client: &Client, policy: &Value) -> Result {
    use taint_operator_crd::TaintPolicy;
    let api: Api<TaintPolicy> = Api::all(client.clone());
    let name = policy["metadata"]["name"]
        .as_str()
        .ok_or("a policy without a name")?;
    api.patch(
        name,
        &PatchParams::apply(ACTOR_MANAGER).force(),
        &Patch::Apply(policy),
    )
    .await?;
    Ok(())
}
