//! `scale`: drives the taint-operator binary on a real, bare control plane
//! (kube-apiserver + etcd, `e2e/control-plane.sh`) and prints a report, as a
//! Markdown table and as JSON. See `e2e/scale.md`.
//!
//! Setup: N nodes with a realistic status (conditions, addresses, capacity, node
//! info, a few dozen images), P pods bound to them (a tenth of them critical pods of
//! the readiness policies) and K TaintPolicies. Then, each timed from the first change
//! to the moment the admin watch shows every node right:
//!
//! 1. baseline taint / untaint: a minimal watch-then-patch loop in this process (no
//!    engine, no caches) reacting to a condition of its own, before the operator runs
//!    and again after it stopped. It writes the fault policies' taints on nodes that
//!    carry the policies' standing taints, so both runners' phases make the same nodes;
//! 2. cold start: the operator starts against the full cluster;
//! 3. taint: a condition flipped on every node; 4. untaint: flipped back;
//! 5. readiness: the critical pods become Ready; 6. policy delete: the finalizer
//!    cleans a policy's taint from every node;
//! 7. a quiet period in which the operator must write nothing.
//!
//! The operator runs as its own process with `OPERATOR_KUBECONFIG`; its memory and
//! CPU come from `/proc/<pid>`, its API requests and node writes from its `/metrics`.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::{ExitCode, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use clap::{Parser, ValueEnum};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::{
    api::core::v1::{Namespace, Node, Taint},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
    jiff::Timestamp,
};
use kube::{
    Api, Client, Config, Resource, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde::Deserialize;
use serde_json::{Value, json};
use taint_operator_crd::{BOOTSTRAPPED_ANNOTATION, MANAGED_TAINTS_ANNOTATION, TaintPolicy};
use tokio::process::{Child, Command};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T = ()> = std::result::Result<T, Error>;

macro_rules! bail {
    ($($arg:tt)*) => { return Err(format!($($arg)*).into()) };
}

/// Label on everything the benchmark creates.
const SCALE_LABEL: &str = "bench.io/scale";
/// Taints the benchmark's policies own start with this.
const BENCH_PREFIX: &str = "bench.io/";
/// The baseline's condition: no policy matches it.
const BASELINE_CONDITION: &str = "BaselineFault";
/// The condition the matcher policies react to.
const FAULT_CONDITION: &str = "BenchFault";
const GROUPS: usize = 4;
const CRITICAL_APPS: [&str; 3] = ["bench-cni", "bench-csi", "bench-dns"];
/// Label on the critical pods.
const CRITICAL_LABEL: &str = "bench.io/critical";

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum PodStatusMode {
    /// Every pod gets a Running status (critical pods start not Ready).
    All,
    /// Only the critical pods get a status; the others stay Pending.
    Critical,
}

/// Drives taint-operator on the cluster in KUBECONFIG and prints a scale report.
#[derive(Parser, Debug, Clone)]
#[command(name = "scale")]
struct Args {
    /// Nodes to create.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Pods per node; a tenth of them (at least one) are critical pods.
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// TaintPolicies (at least 5: matchers, readiness, BootstrapOnly, dry run, and the
    /// one deleted in the last phase; the rest are more matcher policies).
    #[arg(long, default_value_t = 10)]
    policies: usize,
    /// Images in each node's status.
    #[arg(long, default_value_t = 40)]
    images_per_node: usize,
    /// Requests in flight when creating objects and flipping conditions, and the
    /// baseline's concurrency.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// The quiet period at the end, in which the operator must not write.
    #[arg(long, default_value_t = 60)]
    quiet_secs: u64,
    /// Give up on a phase after this long.
    #[arg(long, default_value_t = 1200)]
    phase_timeout_secs: u64,
    /// Also write the JSON report to this file.
    #[arg(long)]
    out_json: Option<PathBuf>,
    /// The operator binary (default: target/release/taint-operator of this workspace).
    #[arg(long)]
    operator_bin: Option<PathBuf>,
    /// The operator's --concurrency (default: the operator's own default).
    #[arg(long)]
    operator_concurrency: Option<u16>,
    /// Where the operator's log goes (default: a file in the temp directory).
    #[arg(long)]
    operator_log: Option<PathBuf>,
    /// Skip the baseline phases (no ratios then).
    #[arg(long)]
    skip_baseline: bool,
    /// Times each runner goes through the taint and untaint phases; the baseline does
    /// them that often before the operator starts and again after it stopped. The
    /// ratios to the baseline compare medians: a loaded API server's background work
    /// (cache consistency checks, compaction, garbage collection) lands in one phase
    /// or another and moves a single phase's time by a fifth either way.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=9))]
    rounds: u64,
    #[arg(long, value_enum, default_value = "all")]
    pod_status: PodStatusMode,
    /// Namespace of the pods.
    #[arg(long, default_value = "bench-scale")]
    namespace: String,
    /// Write each phase's per-node change time and latency as CSV files into this directory.
    #[arg(long)]
    dump_latencies: Option<PathBuf>,
    /// Exit 1 when a target is missed (the report is printed either way).
    #[arg(long)]
    strict: bool,
}

// ------------------------------------------------------------------ model

fn node_name(i: usize) -> String {
    format!("scale-{i:05}")
}

fn node_index(name: &str) -> Option<usize> {
    name.strip_prefix("scale-")?.parse().ok()
}

fn group_of(i: usize) -> usize {
    i % GROUPS
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn hex(seed: u64, len: usize) -> String {
    let mut out = String::with_capacity(len);
    let mut s = seed;
    while out.len() < len {
        s = splitmix(s);
        out.push_str(&format!("{s:016x}"));
    }
    out.truncate(len);
    out
}

#[derive(Clone, Debug)]
enum Kind {
    /// Taints while BenchFault=True on nodes of these groups.
    Fault(Vec<usize>),
    /// Continuous readiness: critical pods and a condition.
    Ready,
    /// BootstrapOnly readiness on another critical pod.
    Bootstrap,
    /// Matcher on BenchFault, dry run: never touches nodes.
    DryRun,
    /// Matcher on Ready=True: taints every node; deleted in the last phase.
    Always,
}

#[derive(Clone, Debug)]
struct PolicyDef {
    name: String,
    kind: Kind,
    /// `key:Effect`
    taint: String,
    body: Value,
}

/// Critical pods per node, and which apps they run.
#[derive(Clone, Debug)]
struct Critical {
    per_node: usize,
}

impl Critical {
    fn new(pods_per_node: usize) -> Self {
        Critical {
            per_node: if pods_per_node == 0 {
                0
            } else {
                pods_per_node.div_ceil(10)
            },
        }
    }
    /// The app label of critical pod `j` of a node.
    fn app(&self, j: usize) -> &'static str {
        CRITICAL_APPS[j % CRITICAL_APPS.len()]
    }
}

/// The readiness policies' critical pods: both match every critical pod (one through
/// a label, one through the app names), so a node's first Ready critical pod satisfies
/// both and the readiness phase is one transition per node.
fn critical_pods_by_label(ns: &str) -> Value {
    json!([{"name": "node-agents", "namespace": ns,
            "selector": {"matchLabels": {CRITICAL_LABEL: "true"}}}])
}

fn critical_pods_by_app(ns: &str) -> Value {
    json!([{"name": "node-agents", "namespace": ns,
            "selector": {"matchExpressions": [
                {"key": "app", "operator": "In", "values": CRITICAL_APPS}]}}])
}

fn policy_defs(k: usize, ns: &str) -> Vec<PolicyDef> {
    let fault = |j: usize| {
        let groups = vec![j % GROUPS, (j + 1) % GROUPS];
        let effect = if j.is_multiple_of(2) {
            "NoSchedule"
        } else {
            "NoExecute"
        };
        let key = format!("bench.io/fault-{j}");
        let name = format!("bench-fault-{j}");
        let values: Vec<String> = groups.iter().map(|g| format!("g{g}")).collect();
        PolicyDef {
            taint: format!("{key}:{effect}"),
            body: json!({
                "nodeSelector": {"matchExpressions": [
                    {"key": "bench.io/group", "operator": "In", "values": values}]},
                "taints": [{"key": key, "value": "fault", "effect": effect}],
                "matchers": [
                    {"conditions": [{"type": FAULT_CONDITION, "status": "True", "reason": "Bench.*"}]},
                    {"conditions": [{"type": "BenchDisk", "status": "Kaput|Ruined"},
                                    {"type": "Ready", "status": "True"}]}
                ],
                "mode": "Continuous"
            }),
            name,
            kind: Kind::Fault(groups),
        }
    };
    let mut defs = vec![
        fault(0),
        PolicyDef {
            name: "bench-ready".into(),
            kind: Kind::Ready,
            taint: "bench.io/not-ready:NoSchedule".into(),
            body: json!({
                "nodeSelector": {"matchLabels": {"kubernetes.io/os": "linux"}},
                "taints": [{"key": "bench.io/not-ready", "effect": "NoSchedule"}],
                "readiness": {
                    "conditions": [{"type": "BenchNetworkReady", "status": "True"}],
                    "criticalPods": critical_pods_by_label(ns)
                },
                "mode": "Continuous"
            }),
        },
        PolicyDef {
            name: "bench-bootstrap".into(),
            kind: Kind::Bootstrap,
            taint: "bench.io/bootstrap:NoExecute".into(),
            body: json!({
                "taints": [{"key": "bench.io/bootstrap", "value": "initializing", "effect": "NoExecute"}],
                "readiness": {"criticalPods": critical_pods_by_app(ns)},
                "mode": "BootstrapOnly"
            }),
        },
        PolicyDef {
            name: "bench-dry-run".into(),
            kind: Kind::DryRun,
            taint: "bench.io/dry-run:NoSchedule".into(),
            body: json!({
                "taints": [{"key": "bench.io/dry-run", "effect": "NoSchedule"}],
                "matchers": [{"conditions": [{"type": FAULT_CONDITION, "status": "True"}]}],
                "dryRun": true
            }),
        },
        PolicyDef {
            name: "bench-always".into(),
            kind: Kind::Always,
            taint: "bench.io/always:PreferNoSchedule".into(),
            body: json!({
                "taints": [{"key": "bench.io/always", "value": "yes", "effect": "PreferNoSchedule"}],
                "matchers": [{"conditions": [{"type": "Ready", "status": "True"}]}]
            }),
        },
    ];
    for j in 1..=k.saturating_sub(5) {
        defs.push(fault(j));
    }
    defs
}

/// What the benchmark has done to the cluster so far: decides each node's taints.
#[derive(Clone, Copy, Debug, Default)]
struct World {
    /// The baseline's fault: its condition is True, so it puts the fault policies'
    /// taints on.
    baseline_fault: bool,
    /// The suite put the standing taints on for the baseline: those the policies keep
    /// on every node through the operator's taint and untaint phases.
    baseline_standing: bool,
    policies: bool,
    fault: bool,
    critical_ready: bool,
    bootstrapped: bool,
    always_deleted: bool,
}

fn expected(defs: &[PolicyDef], i: usize, w: World) -> BTreeSet<String> {
    defs.iter()
        .filter(|d| taint_on(d, i, w))
        .map(|d| d.taint.clone())
        .collect()
}

/// Whether policy `d`'s taint is on node `i`. The baseline does the fault policies'
/// work on the standing taints, so both runners' taint phases make the same nodes.
fn taint_on(d: &PolicyDef, i: usize, w: World) -> bool {
    match &d.kind {
        Kind::Fault(groups) => {
            groups.contains(&group_of(i)) && (w.baseline_fault || (w.policies && w.fault))
        }
        Kind::Ready => w.baseline_standing || (w.policies && !w.critical_ready),
        Kind::Bootstrap => w.baseline_standing || (w.policies && !w.bootstrapped),
        Kind::DryRun => false,
        Kind::Always => w.baseline_standing || (w.policies && !w.always_deleted),
    }
}

/// The taint policy `d` puts on nodes, as the API takes it.
fn policy_taint(d: &PolicyDef) -> Taint {
    serde_json::from_value(d.body["taints"][0].clone()).expect("every policy has one taint")
}

/// The standing taints (see `World::baseline_standing`).
fn standing_taints(defs: &[PolicyDef]) -> Vec<Taint> {
    defs.iter()
        .filter(|d| matches!(d.kind, Kind::Ready | Kind::Bootstrap | Kind::Always))
        .map(policy_taint)
        .collect()
}

/// Per group, the taints the fault policies put on its nodes while they are faulty.
fn fault_taints_by_group(defs: &[PolicyDef]) -> Vec<Vec<Taint>> {
    (0..GROUPS)
        .map(|g| {
            defs.iter()
                .filter(|d| matches!(&d.kind, Kind::Fault(groups) if groups.contains(&g)))
                .map(policy_taint)
                .collect()
        })
        .collect()
}

fn expected_all(defs: &[PolicyDef], n: usize, w: World) -> Vec<BTreeSet<String>> {
    (0..n).map(|i| expected(defs, i, w)).collect()
}

// ------------------------------------------------------------------ objects

fn node_json(i: usize, images: usize) -> Value {
    let name = node_name(i);
    let seed = i as u64 * 1_000_003;
    let ip = format!("10.{}.{}.{}", 20 + i / 65_536, (i / 256) % 256, i % 256);
    let t = "2026-01-01T00:00:00Z";
    let cond = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": t, "lastTransitionTime": t})
    };
    let image_list: Vec<Value> = (0..images)
        .map(|k| {
            let repo = format!("registry.example.com/team-{}/service-{}", k % 7, k);
            json!({
                "names": [format!("{repo}@sha256:{}", hex(seed + k as u64, 64)),
                          format!("{repo}:v1.{}.{}", k % 13, k % 5)],
                "sizeBytes": 20_000_000 + (splitmix(seed + k as u64) % 400_000_000)
            })
        })
        .collect();
    let resources = json!({
        "cpu": "8", "memory": "32817164Ki", "pods": "110", "ephemeral-storage": "101430960Ki",
        "hugepages-1Gi": "0", "hugepages-2Mi": "0", "attachable-volumes-aws-ebs": "25"
    });
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                SCALE_LABEL: "true",
                "bench.io/group": format!("g{}", group_of(i)),
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m5.2xlarge",
                "topology.kubernetes.io/region": "bench-1",
                "topology.kubernetes.io/zone": format!("bench-1{}", ["a", "b", "c"][i % 3]),
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": format!("{{\"ebs.csi.aws.com\":\"i-{}\"}}", hex(seed, 17)),
            }
        },
        "spec": {
            "podCIDR": format!("100.{}.{}.0/24", 64 + i / 256 % 64, i % 256),
            "podCIDRs": [format!("100.{}.{}.0/24", 64 + i / 256 % 64, i % 256)],
            "providerID": format!("aws:///bench-1a/i-{}", hex(seed, 17))
        },
        "status": {
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                cond("BenchNetworkReady", "True", "NetworkUp", "network plugin is ready"),
                cond(FAULT_CONDITION, "False", "BenchHealthy", "no fault"),
                cond(BASELINE_CONDITION, "False", "BaselineHealthy", "no fault"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "ExternalIP", "address": format!("203.0.{}.{}", (i / 256) % 256, i % 256)},
                {"type": "Hostname", "address": name},
                {"type": "InternalDNS", "address": format!("{name}.bench-1.compute.internal")},
            ],
            "capacity": resources,
            "allocatable": resources,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": hex(seed + 1, 32), "systemUUID": hex(seed + 2, 32),
                "bootID": hex(seed + 3, 32), "kernelVersion": "6.1.0-31-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": "v1.36.0", "kubeProxyVersion": "v1.36.0",
                "operatingSystem": "linux", "architecture": "amd64"
            },
            "images": image_list
        }
    })
}

fn pod_name(node: usize, j: usize) -> String {
    format!("p-{node:05}-{j:02}")
}

fn pod_json(ns: &str, node: usize, j: usize, critical: &Critical) -> Value {
    let is_critical = j < critical.per_node;
    let app = if is_critical {
        critical.app(j).to_string()
    } else {
        format!("workload-{}", j % 10)
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(node, j),
            "namespace": ns,
            "labels": {"app": app, SCALE_LABEL: "true",
                       CRITICAL_LABEL: if is_critical { "true" } else { "false" }}
        },
        "spec": {
            "nodeName": node_name(node),
            "containers": [{
                "name": "main",
                "image": format!("registry.example.com/bench/{app}:v1.0.0"),
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
            }],
            "tolerations": [{"operator": "Exists"}]
        }
    })
}

fn pod_status_json(node: usize, j: usize, ready: bool) -> Value {
    let t = "2026-01-01T00:00:00Z";
    let r = if ready { "True" } else { "False" };
    json!({"status": {
        "phase": "Running",
        "hostIP": format!("10.{}.{}.{}", 20 + node / 65_536, (node / 256) % 256, node % 256),
        "podIP": format!("100.{}.{}.{}", 64 + node / 256 % 64, node % 256, j + 2),
        "startTime": t,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
            {"type": "Initialized", "status": "True", "lastTransitionTime": t},
            {"type": "ContainersReady", "status": r, "lastTransitionTime": t},
            {"type": "Ready", "status": r, "lastTransitionTime": t}
        ],
        "containerStatuses": [{
            "name": "main", "ready": ready, "restartCount": 0, "started": true,
            "image": "registry.example.com/bench/app:v1.0.0",
            "imageID": format!("registry.example.com/bench/app@sha256:{}", hex(node as u64 * 97 + j as u64, 64)),
            "containerID": format!("containerd://{}", hex(node as u64 * 89 + j as u64, 64)),
            "state": {"running": {"startedAt": t}}
        }]
    }})
}

// ------------------------------------------------------------------ observer

/// A node as the observer decodes it: name and taints only (the rest is skipped).
#[derive(Deserialize, Clone, Debug)]
struct SlimNode {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<SlimSpec>,
}

#[derive(Deserialize, Clone, Debug, Default)]
struct SlimSpec {
    #[serde(default)]
    taints: Option<Vec<SlimTaint>>,
}

#[derive(Deserialize, Clone, Debug)]
struct SlimTaint {
    key: String,
    effect: String,
}

impl Resource for SlimNode {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Node".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The benchmark's taints on a node, as `key:Effect`.
fn bench_taints<'a>(taints: impl Iterator<Item = (&'a str, &'a str)>) -> BTreeSet<String> {
    taints
        .filter(|(k, _)| k.starts_with(BENCH_PREFIX))
        .map(|(k, e)| format!("{k}:{e}"))
        .collect()
}

struct ObsState {
    taints: Vec<Option<BTreeSet<String>>>,
    expected: Vec<BTreeSet<String>>,
    right_at: Vec<Option<Instant>>,
    wrong: usize,
    events: u64,
}

impl ObsState {
    fn judge(&mut self, i: usize, now: Instant) {
        let right = self.taints[i].as_ref() == Some(&self.expected[i]);
        match (right, self.right_at[i].is_some()) {
            (true, false) => {
                self.right_at[i] = Some(now);
                self.wrong -= 1;
            }
            (false, true) => {
                self.right_at[i] = None;
                self.wrong += 1;
            }
            _ => {}
        }
    }
}

/// Watches the nodes with the admin credentials and timestamps the moment each one
/// carries exactly the taints the current phase expects.
struct Observer {
    state: Mutex<ObsState>,
    synced: AtomicBool,
}

impl Observer {
    fn start(client: Client, n: usize) -> Arc<Self> {
        let obs = Arc::new(Observer {
            state: Mutex::new(ObsState {
                taints: vec![None; n],
                expected: vec![BTreeSet::new(); n],
                right_at: vec![None; n],
                wrong: n,
                events: 0,
            }),
            synced: AtomicBool::new(false),
        });
        let o = obs.clone();
        tokio::spawn(async move {
            let api: Api<SlimNode> = Api::all(client);
            let cfg = watcher::Config::default().labels(&format!("{SCALE_LABEL}=true"));
            let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
            while let Some(ev) = events.next().await {
                let now = Instant::now();
                let node = match ev {
                    Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => n,
                    Ok(watcher::Event::InitDone) => {
                        o.synced.store(true, Ordering::Release);
                        continue;
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        eprintln!("scale: observer watch error (retrying): {e}");
                        continue;
                    }
                };
                let Some(i) = node.metadata.name.as_deref().and_then(node_index) else {
                    continue;
                };
                let taints = bench_taints(
                    node.spec
                        .iter()
                        .flat_map(|s| s.taints.iter().flatten())
                        .map(|t| (t.key.as_str(), t.effect.as_str())),
                );
                let mut s = o.state.lock().expect("observer lock");
                if i >= s.taints.len() {
                    continue;
                }
                s.events += 1;
                s.taints[i] = Some(taints);
                s.judge(i, now);
            }
        });
        obs
    }

    async fn wait_synced(&self) {
        while !self.synced.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sets what every node should carry from now on.
    fn begin(&self, expected: Vec<BTreeSet<String>>) {
        let now = Instant::now();
        let mut s = self.state.lock().expect("observer lock");
        s.expected = expected;
        s.right_at = vec![None; s.expected.len()];
        s.wrong = s.expected.len();
        for i in 0..s.expected.len() {
            s.judge(i, now);
        }
    }

    fn events(&self) -> u64 {
        self.state.lock().expect("observer lock").events
    }

    /// Waits until every node is right; returns when each one became right.
    async fn wait_all_right(&self, timeout: Duration) -> Result<Vec<Instant>> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let s = self.state.lock().expect("observer lock");
                if s.wrong == 0 {
                    return Ok(s.right_at.iter().map(|t| t.expect("all right")).collect());
                }
                if Instant::now() > deadline {
                    let examples: Vec<String> = (0..s.expected.len())
                        .filter(|&i| s.right_at[i].is_none())
                        .take(5)
                        .map(|i| {
                            format!(
                                "{}: has {:?}, want {:?}",
                                node_name(i),
                                s.taints[i],
                                s.expected[i]
                            )
                        })
                        .collect();
                    bail!(
                        "{} of {} nodes still wrong after {:?}, e.g.\n  {}",
                        s.wrong,
                        s.expected.len(),
                        timeout,
                        examples.join("\n  ")
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

// ------------------------------------------------------------------ the operator process

/// `/proc` readings of one process.
#[derive(Clone, Copy, Debug, Default)]
struct ProcSample {
    rss_kib: u64,
    hwm_kib: u64,
    cpu_secs: f64,
}

fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn read_proc(pid: u32, tck: f64) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some(ProcSample {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
        cpu_secs: (utime + stime) / tck,
    })
}

/// CPU time of the processes around the operator: this program (observer, drivers,
/// baseline) and, when `CONTROL_PLANE_DIR` is set, kube-apiserver and etcd.
#[derive(Clone, Debug, Default)]
struct CpuProbes {
    procs: Vec<(String, u32)>,
    tck: f64,
}

impl CpuProbes {
    fn new() -> Self {
        let mut procs = vec![("scale".to_string(), std::process::id())];
        if let Some(dir) = env_path("CONTROL_PLANE_DIR") {
            for name in ["kube-apiserver", "etcd"] {
                if let Some(pid) = std::fs::read_to_string(dir.join(format!("{name}.pid")))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                {
                    procs.push((name.to_string(), pid));
                }
            }
        }
        CpuProbes {
            procs,
            tck: clk_tck(),
        }
    }

    fn snapshot(&self) -> BTreeMap<String, f64> {
        self.procs
            .iter()
            .filter_map(|(name, pid)| Some((name.clone(), read_proc(*pid, self.tck)?.cpu_secs)))
            .collect()
    }

    fn since(&self, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
        self.snapshot()
            .into_iter()
            .map(|(k, v)| {
                let b = before.get(&k).copied().unwrap_or(v);
                (k, v - b)
            })
            .collect()
    }
}

/// The operator's `/metrics` page, parsed.
#[derive(Clone, Debug, Default)]
struct OpMetrics {
    node_writes: f64,
    node_write_conflicts: f64,
    status_writes: f64,
    reconcile_errors: f64,
    /// (verb, resource, code) -> count
    requests: BTreeMap<(String, String, String), f64>,
    /// Node patches answered and the seconds they took, summed.
    patches_answered: f64,
    patch_secs: f64,
    /// Node reconciles that waited for a worker and the seconds they waited, summed.
    queue_waits: f64,
    queue_wait_secs: f64,
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

    fn minus(&self, before: &OpMetrics) -> OpMetrics {
        let mut requests = self.requests.clone();
        for (k, v) in requests.iter_mut() {
            *v -= before.requests.get(k).copied().unwrap_or(0.0);
        }
        requests.retain(|_, v| *v > 0.0);
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
        }
    }

    /// Mean time from sending a node patch to its answer, in milliseconds.
    fn mean_patch_ms(&self) -> Option<f64> {
        (self.patches_answered > 0.0).then(|| 1000.0 * self.patch_secs / self.patches_answered)
    }

    /// Mean wait of a changed node for a free worker, in milliseconds.
    fn mean_queue_wait_ms(&self) -> Option<f64> {
        (self.queue_waits > 0.0).then(|| 1000.0 * self.queue_wait_secs / self.queue_waits)
    }

    fn total_requests(&self) -> f64 {
        self.requests.values().sum()
    }
}

struct OperatorProc {
    child: Child,
    pid: u32,
    port: u16,
    log: PathBuf,
    tck: f64,
    /// Highest VmRSS seen by the sampler since the last reset, in KiB.
    peak_kib: Arc<AtomicU64>,
}

impl OperatorProc {
    async fn spawn(
        bin: &Path,
        kubeconfig: &Path,
        lease_ns: Option<&str>,
        concurrency: Option<u16>,
        log: &Path,
    ) -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let logfile = std::fs::File::create(log)
            .map_err(|e| format!("cannot create the operator log {}: {e}", log.display()))?;
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{port}"))
            .args(["--log-format", "text", "--identity", "scale-bench"]);
        if let Some(ns) = lease_ns {
            cmd.args(["--leader-elect", "--lease-namespace", ns]);
        }
        if let Some(c) = concurrency {
            cmd.arg("--concurrency").arg(c.to_string());
        }
        cmd.env("KUBECONFIG", kubeconfig)
            .env("NO_COLOR", "1")
            .env_remove("TAINT_OPERATOR_LOG")
            .env_remove("TAINT_OPERATOR_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(logfile.try_clone()?)
            .stderr(logfile)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let pid = child.id().ok_or("the operator exited at once")?;
        let peak_kib = Arc::new(AtomicU64::new(0));
        let tck = clk_tck();
        {
            let peak = peak_kib.clone();
            tokio::spawn(async move {
                while let Some(s) = read_proc(pid, tck) {
                    peak.fetch_max(s.rss_kib, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
        }
        Ok(OperatorProc {
            child,
            pid,
            port,
            log: log.to_path_buf(),
            tck,
            peak_kib,
        })
    }

    fn sample(&self) -> ProcSample {
        read_proc(self.pid, self.tck).unwrap_or_default()
    }

    /// The highest RSS since the last call (sampled every 100 ms), then restarts.
    fn take_peak_kib(&self) -> u64 {
        let now = self.sample().rss_kib;
        self.peak_kib.swap(now, Ordering::Relaxed).max(now)
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    async fn get(&self, path: &str) -> Result<(u16, String)> {
        taint_operator_e2e::operator::http_get(self.port, path, Duration::from_secs(10)).await
    }

    async fn metrics(&self) -> Result<OpMetrics> {
        let (status, body) = self.get("/metrics").await?;
        if status != 200 {
            bail!("the operator's /metrics answered {status}");
        }
        Ok(OpMetrics::parse(&body))
    }

    /// Waits until the operator's counters stop moving (status writes, events and
    /// trailing requests of a phase are counted with it), at most `max`.
    async fn settle(&mut self, quiet: Duration, max: Duration) -> Result<OpMetrics> {
        let deadline = Instant::now() + max;
        let mut last = self.metrics().await?;
        let mut since = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if !self.alive() {
                bail!("the operator exited; log: {}", self.log.display());
            }
            let m = self.metrics().await?;
            if m.total_requests() != last.total_requests() || m.node_writes != last.node_writes {
                since = Instant::now();
                last = m;
            } else if since.elapsed() >= quiet || Instant::now() > deadline {
                return Ok(m);
            }
        }
    }

    async fn stop(mut self) -> Result<()> {
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

    fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// "taint" in the first round, "taint 2" in the second.
fn round_name(kind: &str, round: u64) -> String {
    if round == 1 {
        kind.to_string()
    } else {
        format!("{kind} {round}")
    }
}

/// `cpu` with the operator's CPU seconds under the operator's name.
fn with_operator(mut cpu: BTreeMap<String, f64>, operator_secs: f64) -> BTreeMap<String, f64> {
    cpu.insert("taint-operator".into(), operator_secs);
    cpu
}

// ------------------------------------------------------------------ baseline

#[derive(Default)]
struct BaselineCounters {
    patches: AtomicU64,
    /// Microseconds from sending a patch to its answer, summed.
    patch_micros: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
}

/// The baseline: one watch on nodes and, for every node event, the one JSON patch
/// that puts the fault policies' taints for the node's group on or off according to
/// the node's `BaselineFault` condition: the same taints the operator writes in its
/// taint phase. No cache beyond the event itself; conflicts are left to the next event.
fn start_baseline(
    client: Client,
    concurrency: usize,
    fault_taints: Arc<Vec<Vec<Taint>>>,
    counters: Arc<BaselineCounters>,
) -> (tokio::task::JoinHandle<()>, Arc<AtomicBool>) {
    let synced = Arc::new(AtomicBool::new(false));
    let s = synced.clone();
    let handle = tokio::spawn(async move {
        let api: Api<Node> = Api::all(client);
        let cfg = watcher::Config::default().labels(&format!("{SCALE_LABEL}=true"));
        watcher::watcher(api.clone(), cfg)
            .default_backoff()
            .filter_map(|ev| {
                let out = match ev {
                    Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => Some(n),
                    Ok(watcher::Event::InitDone) => {
                        s.store(true, Ordering::Release);
                        None
                    }
                    _ => None,
                };
                futures::future::ready(out)
            })
            .map(|node| {
                let api = api.clone();
                let counters = counters.clone();
                let fault_taints = fault_taints.clone();
                async move { baseline_reconcile(&api, node, &fault_taints, &counters).await }
            })
            .buffer_unordered(concurrency)
            .for_each(|_| futures::future::ready(()))
            .await;
    });
    (handle, synced)
}

/// The node's new taint list: `mine` all on when `want`, all off otherwise, the other
/// taints kept in their order; `None` when the node is already so.
fn baseline_taints(taints: Vec<Taint>, mine: &[Taint], want: bool) -> Option<Vec<Taint>> {
    let is_mine = |t: &Taint| mine.iter().any(|m| m.key == t.key && m.effect == t.effect);
    let present = taints.iter().filter(|t| is_mine(t)).count();
    if present == if want { mine.len() } else { 0 } {
        return None;
    }
    let mut new: Vec<Taint> = taints.into_iter().filter(|t| !is_mine(t)).collect();
    if want {
        new.extend(mine.iter().cloned());
    }
    Some(new)
}

async fn baseline_reconcile(
    api: &Api<Node>,
    node: Node,
    fault_taints: &[Vec<Taint>],
    counters: &BaselineCounters,
) {
    let Some(i) = node_index(&node.name_any()) else {
        return;
    };
    let mine = &fault_taints[group_of(i)];
    let want = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == BASELINE_CONDITION))
        .is_some_and(|c| c.status == "True");
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let Some(new) = baseline_taints(taints, mine, want) else {
        return;
    };
    let rv = node.metadata.resource_version.clone().unwrap_or_default();
    let mut ops = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})];
    if new.is_empty() {
        ops.push(json!({"op": "remove", "path": "/spec/taints"}));
    } else {
        ops.push(json!({"op": "add", "path": "/spec/taints", "value": new}));
    }
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).expect("valid patch");
    counters.patches.fetch_add(1, Ordering::Relaxed);
    let sent = Instant::now();
    let answer = api
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await;
    counters
        .patch_micros
        .fetch_add(sent.elapsed().as_micros() as u64, Ordering::Relaxed);
    match answer {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
            counters.conflicts.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            counters.errors.fetch_add(1, Ordering::Relaxed);
            eprintln!("scale: baseline patch of {} failed: {e}", node.name_any());
        }
    }
}

/// The baseline's taint and untaint phases, `args.rounds` of each; the rounds after
/// the operator are numbered on from those before it. Runs before the operator
/// starts and again after it stopped, so
/// the API server's drift over a run (etcd's growing history, its caches, Go's heap)
/// weighs on both runners alike.
#[allow(clippy::too_many_arguments)]
async fn baseline_rounds(
    args: &Args,
    client: &Client,
    kubeconfig: &Path,
    defs: &[PolicyDef],
    observer: &Observer,
    mut world: World,
    probes: &CpuProbes,
    after_operator: bool,
    report: &mut Report,
) -> Result {
    let (n, c) = (args.nodes, args.concurrency);
    let timeout = Duration::from_secs(args.phase_timeout_secs);
    set_standing_taints(args, client, defs, observer, &mut world, true).await?;
    let counters = Arc::new(BaselineCounters::default());
    let (task, synced) = start_baseline(
        client_from(kubeconfig).await?,
        c,
        Arc::new(fault_taints_by_group(defs)),
        counters.clone(),
    );
    while !synced.load(Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // let the initial list's reconciles (all no-ops) drain
    tokio::time::sleep(Duration::from_secs(1)).await;
    let first_round = if after_operator { args.rounds + 1 } else { 1 };
    let rounds = (first_round..first_round + args.rounds)
        .flat_map(|r| [("taint", true, r), ("untaint", false, r)]);
    for (kind, on, round) in rounds {
        let name = &round_name(kind, round);
        world.baseline_fault = on;
        eprintln!("scale: baseline {name} phase");
        let before = counters.patches.load(Ordering::Relaxed);
        let micros_before = counters.patch_micros.load(Ordering::Relaxed);
        let conflicts_before = counters.conflicts.load(Ordering::Relaxed);
        let events_before = observer.events();
        let cpu_before = probes.snapshot();
        observer.begin(expected_all(defs, n, world));
        let t0 = Instant::now();
        let changes = flip_condition(
            client,
            n,
            c,
            BASELINE_CONDITION,
            if on { "True" } else { "False" },
            if on {
                "BaselineFault"
            } else {
                "BaselineHealthy"
            },
        )
        .await?;
        let change_secs = t0.elapsed().as_secs_f64();
        let right = observer.wait_all_right(timeout).await?;
        let cpu_to_right = probes.since(&cpu_before);
        let end = right.iter().max().copied().unwrap_or(t0);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let patches = counters.patches.load(Ordering::Relaxed) - before;
        let conflicts = counters.conflicts.load(Ordering::Relaxed) - conflicts_before;
        let mut requests = OpMetrics::default();
        requests.requests.insert(
            ("patch".into(), "nodes".into(), "sent".into()),
            patches as f64,
        );
        requests.patches_answered = patches as f64;
        requests.patch_secs =
            (counters.patch_micros.load(Ordering::Relaxed) - micros_before) as f64 / 1e6;
        let node_bytes = Some(sample_node_bytes(client, n).await?);
        report.phases.push(PhaseResult {
            name: name.into(),
            kind: kind.into(),
            runner: "baseline".into(),
            after_operator,
            transitions: n,
            secs: end.saturating_duration_since(t0).as_secs_f64(),
            change_secs,
            latencies_ms: latencies(&changes, &right),
            per_node: per_node(t0, &changes, &right),
            node_writes: patches as f64,
            conflicts: conflicts as f64,
            requests,
            observer_events: observer.events() - events_before,
            other_cpu: probes.since(&cpu_before),
            cpu_to_right,
            node_bytes,
            ..PhaseResult::default()
        });
    }
    task.abort();
    let errors = counters.errors.load(Ordering::Relaxed);
    if errors > 0 {
        bail!("the baseline had {errors} failed patches");
    }
    set_standing_taints(args, client, defs, observer, &mut world, false).await
}

/// Puts the standing taints on every node, or takes every taint off, and waits until
/// the observer sees every node so. Only around the baseline's rounds: the nodes
/// carry no other taint then, and the operator never sees these (it would rightly
/// call them someone else's).
async fn set_standing_taints(
    args: &Args,
    client: &Client,
    defs: &[PolicyDef],
    observer: &Observer,
    world: &mut World,
    on: bool,
) -> Result {
    let (n, concurrency) = (args.nodes, args.concurrency);
    let api: Api<Node> = Api::all(client.clone());
    let taints = if on {
        json!(standing_taints(defs))
    } else {
        Value::Null
    };
    let what = if on {
        "baseline: standing taints on"
    } else {
        "baseline: standing taints off"
    };
    create_all(what, n, concurrency, move |i| {
        let api = api.clone();
        let body = json!({"spec": {"taints": taints}});
        Box::pin(async move {
            api.patch(&node_name(i), &PatchParams::default(), &Patch::Merge(body))
                .await
                .map_err(|e| format!("taints of {}: {e}", node_name(i)))?;
            Ok(())
        })
    })
    .await?;
    world.baseline_standing = on;
    observer.begin(expected_all(defs, n, *world));
    observer
        .wait_all_right(Duration::from_secs(args.phase_timeout_secs))
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    Ok(())
}

/// Mean JSON size of a node of each group, read when a phase's nodes are all right:
/// the API server's work on every node request grows with it.
async fn sample_node_bytes(client: &Client, n: usize) -> Result<f64> {
    let api: Api<Node> = Api::all(client.clone());
    let sample = n.min(GROUPS);
    let mut total = 0;
    for i in 0..sample {
        let node = api.get(&node_name(i)).await?;
        total += serde_json::to_vec(&node)?.len();
    }
    Ok(total as f64 / sample.max(1) as f64)
}

// ------------------------------------------------------------------ phases

#[derive(Clone, Debug, Default)]
struct PhaseResult {
    /// The phase with its round when there are several ("taint 2").
    name: String,
    /// The phase without its round ("taint"): what the ratios group by.
    kind: String,
    /// "operator" or "baseline"
    runner: String,
    /// A baseline round run after the operator stopped.
    after_operator: bool,
    transitions: usize,
    /// First change to every node right.
    secs: f64,
    /// Time it took to send the changes (condition flips, pod patches).
    change_secs: f64,
    /// Per node: change to taints right, in milliseconds, sorted.
    latencies_ms: Vec<f64>,
    node_writes: f64,
    conflicts: f64,
    requests: OpMetrics,
    cpu_secs: Option<f64>,
    peak_rss_kib: Option<u64>,
    rss_end_kib: Option<u64>,
    observer_events: u64,
    /// CPU seconds of the other processes in this phase: this program, kube-apiserver, etcd.
    other_cpu: BTreeMap<String, f64>,
    /// CPU seconds of every process (the operator too) from the first change to the
    /// moment every node was right: what the phase time is made of. `other_cpu` and
    /// `cpu_secs` also count what follows (events, status writes) until the operator
    /// has settled.
    cpu_to_right: BTreeMap<String, f64>,
    /// Per node, in node order: (change sent, ms after the phase began; latency, ms).
    per_node: Vec<(f64, f64)>,
    /// Mean JSON bytes of a sampled node once every node was right.
    node_bytes: Option<f64>,
}

impl PhaseResult {
    /// Latency by when the change was sent: the nodes in change order, in ten
    /// slices; per slice (first change, s into the phase; p50 ms; max ms).
    fn timeline(&self) -> Vec<(f64, f64, f64)> {
        let mut v = self.per_node.clone();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let slice = v.len().div_ceil(10).max(1);
        v.chunks(slice)
            .map(|c| {
                let mut l: Vec<f64> = c.iter().map(|x| x.1).collect();
                l.sort_by(|a, b| a.total_cmp(b));
                (c[0].0 / 1000.0, percentile(&l, 50.0), percentile(&l, 100.0))
            })
            .collect()
    }
}

fn per_node(t0: Instant, changes: &[Option<Instant>], right: &[Instant]) -> Vec<(f64, f64)> {
    changes
        .iter()
        .zip(right)
        .map(|(c, r)| {
            let c = c.unwrap_or(t0);
            (
                c.saturating_duration_since(t0).as_secs_f64() * 1000.0,
                r.saturating_duration_since(c).as_secs_f64() * 1000.0,
            )
        })
        .collect()
}

/// The middle value; with an even count, the mean of the two middle ones (the
/// baseline has 2R rounds, and the lower middle alone would favour either side).
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn latencies(changes: &[Option<Instant>], right: &[Instant]) -> Vec<f64> {
    let mut v: Vec<f64> = changes
        .iter()
        .zip(right)
        .map(|(c, r)| match c {
            Some(c) => r.saturating_duration_since(*c).as_secs_f64() * 1000.0,
            None => 0.0,
        })
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// Flips `cond` on every node to `status` (strategic merge on the status
/// subresource); returns when each node's request was sent.
async fn flip_condition(
    client: &Client,
    n: usize,
    concurrency: usize,
    cond: &str,
    status: &str,
    reason: &str,
) -> Result<Vec<Option<Instant>>> {
    let api: Api<Node> = Api::all(client.clone());
    let now = Timestamp::now().to_string();
    let mut changes = vec![None; n];
    let results: Vec<(usize, Instant)> = stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let patch = json!({"status": {"conditions": [{
                "type": cond, "status": status, "reason": reason,
                "message": "set by the scale benchmark",
                "lastTransitionTime": now, "lastHeartbeatTime": now}]}});
            async move {
                let t = Instant::now();
                api.patch_status(
                    &node_name(i),
                    &PatchParams::default(),
                    &Patch::Strategic(patch),
                )
                .await
                .map_err(|e| format!("flip {cond} on {}: {e}", node_name(i)))?;
                Ok::<_, Error>((i, t))
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    for (i, t) in results {
        changes[i] = Some(t);
    }
    Ok(changes)
}

/// Marks every critical pod Ready; a node's change time is when its first pod
/// patch was sent (its pods are patched together).
async fn ready_critical_pods(
    client: &Client,
    ns: &str,
    n: usize,
    critical: &Critical,
    concurrency: usize,
) -> Result<Vec<Option<Instant>>> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let now = Timestamp::now().to_string();
    let per_node = critical.per_node.max(1);
    let mut changes = vec![None; n];
    let results: Vec<(usize, Instant)> = stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let now = now.clone();
            async move {
                let t = Instant::now();
                futures::future::try_join_all((0..critical.per_node).map(|j| {
                    let api = api.clone();
                    let patch = json!({"status": {
                        "conditions": [
                            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                            {"type": "Ready", "status": "True", "lastTransitionTime": now}],
                        "containerStatuses": [{"name": "main", "ready": true}]}});
                    async move {
                        api.patch_status(
                            &pod_name(i, j),
                            &PatchParams::default(),
                            &Patch::Strategic(patch),
                        )
                        .await
                        .map_err(|e| format!("mark pod {} Ready: {e}", pod_name(i, j)))
                    }
                }))
                .await?;
                Ok::<_, Error>((i, t))
            }
        })
        .buffer_unordered((concurrency / per_node).max(1))
        .try_collect()
        .await?;
    for (i, t) in results {
        changes[i] = Some(t);
    }
    Ok(changes)
}

// ------------------------------------------------------------------ setup

struct SetupStep {
    name: String,
    objects: usize,
    secs: f64,
}

async fn create_all(
    what: &str,
    count: usize,
    concurrency: usize,
    make: impl Fn(usize) -> futures::future::BoxFuture<'static, Result>,
) -> Result<SetupStep> {
    let started = Instant::now();
    let done = AtomicU64::new(0);
    let every = (count / 10).max(1) as u64;
    stream::iter(0..count)
        .map(make)
        .buffer_unordered(concurrency)
        .try_for_each(|_| {
            let d = done.fetch_add(1, Ordering::Relaxed) + 1;
            if d.is_multiple_of(every) {
                eprint!(
                    "\rscale: {what}: {d}/{count} ({:.0}/s)   ",
                    d as f64 / started.elapsed().as_secs_f64()
                );
            }
            futures::future::ready(Ok(()))
        })
        .await?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "\rscale: {what}: {count} in {secs:.1}s ({:.0}/s)            ",
        count as f64 / secs.max(1e-9)
    );
    Ok(SetupStep {
        name: what.to_string(),
        objects: count,
        secs,
    })
}

async fn install_crd(client: &Client, bin: &Path) -> Result {
    taint_operator_e2e::cluster::install_crd(client, bin).await
}

// ------------------------------------------------------------------ machine

#[derive(Clone, Debug, Default)]
struct Machine {
    nproc: usize,
    cpu_model: String,
    mem_gib: f64,
    load_start: String,
    load_end: String,
    apiserver_version: String,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let mem_kib: f64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Machine {
        nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        mem_gib: mem_kib / 1024.0 / 1024.0,
        load_start: loadavg(),
        ..Machine::default()
    }
}

// ------------------------------------------------------------------ report

struct Report {
    args: Args,
    machine: Machine,
    node_json_bytes: usize,
    critical: Critical,
    policies: Vec<String>,
    operator_bin: PathBuf,
    operator_log: PathBuf,
    operator_version: String,
    leader_election: bool,
    setup: Vec<SetupStep>,
    phases: Vec<PhaseResult>,
    operator_ready_secs: Option<f64>,
    quiet: Option<PhaseResult>,
    peak_rss_kib: Option<u64>,
    settled_rss_kib: Option<u64>,
    total_cpu_secs: Option<f64>,
    final_check: Vec<String>,
    policy_status: Vec<Value>,
    error: Option<String>,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

struct Target {
    what: String,
    measured: String,
    ok: bool,
}

impl Report {
    /// Median time and median p99 latency of a runner's rounds of a phase.
    fn medians(&self, runner: &str, kind: &str) -> Option<(f64, f64)> {
        self.medians_of(|p| p.runner == runner && p.kind == kind)
    }

    /// Median time and median p99 latency of the phases `which` picks.
    fn medians_of(&self, which: impl Fn(&PhaseResult) -> bool) -> Option<(f64, f64)> {
        let rounds: Vec<&PhaseResult> = self.phases.iter().filter(|p| which(p)).collect();
        if rounds.is_empty() {
            return None;
        }
        let median =
            |f: &dyn Fn(&PhaseResult) -> f64| median(rounds.iter().map(|p| f(p)).collect());
        Some((
            median(&|p| p.secs),
            median(&|p| percentile(&p.latencies_ms, 99.0)),
        ))
    }

    /// The operator's medians over the baseline's: (time, p99 latency).
    fn ratio(&self, kind: &str) -> Option<(f64, f64)> {
        let (op_secs, op_p99) = self.medians("operator", kind)?;
        let (base_secs, base_p99) = self.medians("baseline", kind)?;
        Some((op_secs / base_secs.max(1e-9), op_p99 / base_p99.max(1e-9)))
    }

    /// One operator phase over the baseline's median: (time, p99 latency).
    fn row_ratio(&self, p: &PhaseResult) -> Option<(f64, f64)> {
        if p.runner != "operator" {
            return None;
        }
        let (base_secs, base_p99) = self.medians("baseline", &p.kind)?;
        Some((
            p.secs / base_secs.max(1e-9),
            percentile(&p.latencies_ms, 99.0) / base_p99.max(1e-9),
        ))
    }

    fn operator_requests_total(&self) -> OpMetrics {
        let mut all = OpMetrics::default();
        for p in self
            .phases
            .iter()
            .filter(|p| p.runner == "operator")
            .chain(self.quiet.iter())
        {
            for (k, v) in &p.requests.requests {
                *all.requests.entry(k.clone()).or_default() += v;
            }
            all.node_writes += p.node_writes;
        }
        all
    }

    fn targets(&self) -> Vec<Target> {
        let mut t = Vec::new();
        let r = self.args.rounds;
        let base = self
            .phases
            .iter()
            .filter(|p| p.runner == "baseline")
            .count()
            / 2;
        let medians = format!(" (medians of {r} operator and {base} baseline rounds)");
        for name in ["taint", "untaint"] {
            if let Some((time, p99)) = self.ratio(name) {
                t.push(Target {
                    what: format!("{name} phase time ≤ 1.2× baseline{medians}"),
                    measured: format!("{time:.2}×"),
                    ok: time <= 1.2,
                });
                t.push(Target {
                    what: format!("{name} p99 latency ≤ 1.5× baseline{medians}"),
                    measured: format!("{p99:.2}×"),
                    ok: p99 <= 1.5,
                });
            }
        }
        if let Some(s) = self.settled_rss_kib {
            t.push(Target {
                what: "settled RSS ≤ 48 MiB".into(),
                measured: format!("{:.1} MiB", mib(s)),
                ok: mib(s) <= 48.0,
            });
        }
        for p in self.phases.iter().filter(|p| p.runner == "operator") {
            let per = p.node_writes / p.transitions.max(1) as f64;
            t.push(Target {
                what: format!("{}: one write per node transition", p.name),
                measured: format!(
                    "{} writes / {} transitions = {per:.3} ({} conflicts)",
                    p.node_writes, p.transitions, p.conflicts
                ),
                ok: p.node_writes == p.transitions as f64,
            });
        }
        if let Some(q) = &self.quiet {
            t.push(Target {
                what: format!("no writes in the quiet {} s", self.args.quiet_secs),
                measured: format!(
                    "{} node writes, {} status writes",
                    q.node_writes, q.requests.status_writes
                ),
                ok: q.node_writes == 0.0 && q.requests.status_writes == 0.0,
            });
        }
        let all = self.operator_requests_total();
        let bad: f64 = all
            .requests
            .iter()
            .filter(|((_, _, code), _)| code == "429" || code.starts_with('5') || code == "error")
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b);
        t.push(Target {
            what: "no 5xx, 429 (throttling) or transport errors".into(),
            measured: format!("{bad}"),
            ok: bad == 0.0,
        });
        t
    }

    fn markdown(&self) -> String {
        let a = &self.args;
        let m = &self.machine;
        let mut s = String::new();
        let w = &mut s;
        use std::fmt::Write;
        let _ = writeln!(w, "## taint-operator scale report\n");
        let _ = writeln!(
            w,
            "- N = {} nodes (≈ {:.1} KiB of JSON each, {} images), P = {} pods ({} per node, {} critical per node), K = {} policies: {}",
            a.nodes,
            self.node_json_bytes as f64 / 1024.0,
            a.images_per_node,
            a.nodes * a.pods_per_node,
            a.pods_per_node,
            self.critical.per_node,
            self.policies.len(),
            self.policies.join(", ")
        );
        let _ = writeln!(
            w,
            "- machine: {} × {}, {:.1} GiB RAM; load average at start {}, at end {}; kube-apiserver {} + etcd on loopback",
            m.nproc, m.cpu_model, m.mem_gib, m.load_start, m.load_end, m.apiserver_version
        );
        let _ = writeln!(
            w,
            "- operator: {} ({}; leader election {}, concurrency {}), log {}",
            self.operator_bin.display(),
            self.operator_version,
            if self.leader_election { "on" } else { "off" },
            a.operator_concurrency
                .map_or("default".into(), |c| c.to_string()),
            self.operator_log.display()
        );
        let _ = writeln!(
            w,
            "- request concurrency of setup, condition flips and baseline: {}",
            a.concurrency
        );
        if let Some(r) = self.operator_ready_secs {
            let _ = writeln!(w, "- operator /readyz (caches synced) {r:.2} s after start");
        }
        if let Some(e) = &self.error {
            let _ = writeln!(w, "\n**run failed: {e}**");
        }
        let _ = writeln!(w, "\n### Setup\n");
        let _ = writeln!(w, "| step | objects | seconds | objects/s |");
        let _ = writeln!(w, "|---|---:|---:|---:|");
        for st in &self.setup {
            let _ = writeln!(
                w,
                "| {} | {} | {:.1} | {:.0} |",
                st.name,
                st.objects,
                st.secs,
                st.objects as f64 / st.secs.max(1e-9)
            );
        }
        let _ = writeln!(w, "\n### Phases\n");
        let _ = writeln!(
            w,
            "Time: first change sent → every node right in the admin watch. Latency: a node's change sent → its taints right in the watch."
        );
        if self.phases.iter().any(|p| p.after_operator) {
            let r = a.rounds;
            let _ = writeln!(
                w,
                "The baseline ran rounds 1–{r} before the operator started and rounds {}–{} after it stopped; ratios compare the operator's median with the median of all {} baseline rounds.",
                r + 1,
                2 * r,
                2 * r
            );
            for kind in ["taint", "untaint"] {
                let side = |after: bool| {
                    self.medians_of(|p| {
                        p.runner == "baseline" && p.kind == kind && p.after_operator == after
                    })
                    .map_or("–".into(), |(t, p99)| {
                        format!("{t:.1} s, p99 {p99:.0} ms")
                    })
                };
                let _ = writeln!(
                    w,
                    "- baseline {kind} medians: before the operator {}; after it {}",
                    side(false),
                    side(true)
                );
            }
        }
        let _ = writeln!(w);
        let _ = writeln!(
            w,
            "| runner | phase | nodes | time s | vs baseline | p50 ms | p90 ms | p99 ms | max ms | p99 vs baseline | node writes | writes/transition | conflicts | API requests | CPU s | peak RSS MiB |"
        );
        let _ = writeln!(
            w,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for p in &self.phases {
            let l = &p.latencies_ms;
            let ratio = self.row_ratio(p);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {:.2} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {:.2} | {} | {} | {} | {} |",
                p.runner,
                p.name,
                p.transitions,
                p.secs,
                ratio.map_or("–".into(), |r| format!("{:.2}×", r.0)),
                percentile(l, 50.0),
                percentile(l, 90.0),
                percentile(l, 99.0),
                percentile(l, 100.0),
                ratio.map_or("–".into(), |r| format!("{:.2}×", r.1)),
                p.node_writes,
                p.node_writes / p.transitions.max(1) as f64,
                p.conflicts,
                p.requests.total_requests(),
                fmt_opt(p.cpu_secs, 2),
                fmt_opt(p.peak_rss_kib.map(mib), 1),
            );
        }
        if let Some(q) = &self.quiet {
            let _ = writeln!(
                w,
                "| operator | quiet {} s | – | – | – | – | – | – | – | – | {} | – | {} | {} | {} | {} |",
                a.quiet_secs,
                q.node_writes,
                q.conflicts,
                q.requests.total_requests(),
                fmt_opt(q.cpu_secs, 2),
                fmt_opt(q.peak_rss_kib.map(mib), 1)
            );
        }
        let _ = writeln!(w, "\n### API requests the operator sent (its /metrics)\n");
        let op_phases: Vec<&PhaseResult> = self
            .phases
            .iter()
            .filter(|p| p.runner == "operator")
            .chain(self.quiet.iter())
            .collect();
        let _ = write!(w, "| verb | resource | code |");
        for p in &op_phases {
            let _ = write!(w, " {} |", p.name);
        }
        let _ = writeln!(w, " total |");
        let _ = write!(w, "|---|---|---|");
        for _ in &op_phases {
            let _ = write!(w, "---:|");
        }
        let _ = writeln!(w, "---:|");
        let all = self.operator_requests_total();
        for ((verb, res, code), total) in &all.requests {
            let _ = write!(w, "| {verb} | {res} | {code} |");
            for p in &op_phases {
                let v = p
                    .requests
                    .requests
                    .get(&(verb.clone(), res.clone(), code.clone()))
                    .copied()
                    .unwrap_or(0.0);
                let _ = write!(w, " {v} |");
            }
            let _ = writeln!(w, " {total} |");
        }
        let _ = writeln!(
            w,
            "\n### Node patches: mean answer time, the operator's mean wait for a worker, node size\n"
        );
        let _ = writeln!(
            w,
            "The baseline has no queue: its backlog waits in the watch stream, unmeasured. \
             Node size: mean JSON bytes of one node per group once every node was right; \
             every request and watch event on a node costs the API server in proportion.\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | patches answered | answer ms | wait for a worker ms | node bytes |"
        );
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|");
        for p in self
            .phases
            .iter()
            .filter(|p| p.requests.patches_answered > 0.0)
        {
            let r = &p.requests;
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} |",
                p.runner,
                p.name,
                r.patches_answered,
                fmt_opt(r.mean_patch_ms(), 0),
                fmt_opt(r.mean_queue_wait_ms(), 0),
                fmt_opt(p.node_bytes, 0)
            );
        }
        let _ = writeln!(
            w,
            "\n### CPU seconds from the first change until every node is right (/proc)\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | taint-operator | kube-apiserver | etcd | scale (observer, drivers, baseline) | cores busy |"
        );
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|");
        for p in &self.phases {
            let o = |k: &str| fmt_opt(p.cpu_to_right.get(k).copied(), 2);
            let busy = (p.secs > 0.0).then(|| p.cpu_to_right.values().sum::<f64>() / p.secs);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} |",
                p.runner,
                p.name,
                o("taint-operator"),
                o("kube-apiserver"),
                o("etcd"),
                o("scale"),
                fmt_opt(busy, 2)
            );
        }
        let _ = writeln!(
            w,
            "\n### CPU seconds per phase until the operator has settled (events, status writes), by process (/proc)\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | taint-operator | kube-apiserver | etcd | scale (observer, drivers, baseline) |"
        );
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|");
        for p in self.phases.iter().chain(self.quiet.iter()) {
            let o = |k: &str| fmt_opt(p.other_cpu.get(k).copied(), 2);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} |",
                p.runner,
                p.name,
                fmt_opt(p.cpu_secs, 2),
                o("kube-apiserver"),
                o("etcd"),
                o("scale")
            );
        }
        let _ = writeln!(w, "\n### Operator process (/proc)\n");
        let _ = writeln!(
            w,
            "- peak RSS (VmHWM): {} MiB; settled RSS after the quiet period: {} MiB; CPU (utime+stime) in total: {} s",
            fmt_opt(self.peak_rss_kib.map(mib), 1),
            fmt_opt(self.settled_rss_kib.map(mib), 1),
            fmt_opt(self.total_cpu_secs, 2)
        );
        if !self.policy_status.is_empty() {
            let _ = writeln!(w, "\n### Policy status at the end\n");
            let _ = writeln!(
                w,
                "| policy | selected | tainted | Ready | reason | message |"
            );
            let _ = writeln!(w, "|---|---:|---:|---|---|---|");
            for p in &self.policy_status {
                let _ = writeln!(
                    w,
                    "| {} | {} | {} | {} | {} | {} |",
                    p["name"].as_str().unwrap_or(""),
                    p["selected"],
                    p["tainted"],
                    p["ready"].as_str().unwrap_or(""),
                    p["reason"].as_str().unwrap_or(""),
                    p["message"].as_str().unwrap_or("")
                );
            }
        }
        if !self.final_check.is_empty() {
            let _ = writeln!(w, "\n### Final state check\n");
            for c in &self.final_check {
                let _ = writeln!(w, "- {c}");
            }
        }
        let _ = writeln!(w, "\n### Targets\n");
        if a.nodes < 5000 {
            let _ = writeln!(
                w,
                "(the targets are stated for N = 5000 on 2 cores; this run has N = {})\n",
                a.nodes
            );
        }
        let _ = writeln!(w, "| target | measured | result |");
        let _ = writeln!(w, "|---|---|---|");
        for t in self.targets() {
            let _ = writeln!(
                w,
                "| {} | {} | {} |",
                t.what,
                t.measured,
                if t.ok { "PASS" } else { "MISS" }
            );
        }
        s
    }

    fn json(&self) -> Value {
        let a = &self.args;
        let phase = |p: &PhaseResult| {
            let l = &p.latencies_ms;
            let requests: Vec<Value> = p
                .requests
                .requests
                .iter()
                .map(|((verb, res, code), v)| json!({"verb": verb, "resource": res, "code": code, "count": v}))
                .collect();
            json!({
                "runner": p.runner, "phase": p.name, "after_operator": p.after_operator, "transitions": p.transitions,
                "seconds": p.secs, "change_seconds": p.change_secs,
                "kind": p.kind,
                "ratio_to_baseline": self.row_ratio(p).map(|r| r.0),
                "p99_ratio_to_baseline": self.row_ratio(p).map(|r| r.1),
                "latency_ms": {"p50": percentile(l, 50.0), "p90": percentile(l, 90.0),
                               "p99": percentile(l, 99.0), "max": percentile(l, 100.0)},
                "node_writes": p.node_writes,
                "writes_per_transition": p.node_writes / p.transitions.max(1) as f64,
                "node_write_conflicts": p.conflicts,
                "node_patch_answer_ms_mean": p.requests.mean_patch_ms(),
                "node_queue_wait_ms_mean": p.requests.mean_queue_wait_ms(),
                "node_bytes": p.node_bytes,
                "status_writes": p.requests.status_writes,
                "reconcile_errors": p.requests.reconcile_errors,
                "api_requests": requests,
                "cpu_seconds": p.cpu_secs,
                "peak_rss_mib": p.peak_rss_kib.map(mib),
                "rss_end_mib": p.rss_end_kib.map(mib),
                "observer_events": p.observer_events,
                "other_cpu_seconds": p.other_cpu,
                "cpu_seconds_to_right": p.cpu_to_right,
                "latency_by_change_time": p.timeline().iter()
                    .map(|(at, p50, max)| json!({"from_s": at, "p50_ms": p50, "max_ms": max}))
                    .collect::<Vec<_>>(),
            })
        };
        json!({
            "n_nodes": a.nodes, "pods_per_node": a.pods_per_node, "pods": a.nodes * a.pods_per_node,
            "critical_pods_per_node": self.critical.per_node,
            "k_policies": self.policies.len(), "policies": self.policies,
            "images_per_node": a.images_per_node, "node_json_bytes": self.node_json_bytes,
            "concurrency": a.concurrency, "operator_concurrency": a.operator_concurrency,
            "leader_election": self.leader_election,
            "operator_version": self.operator_version,
            "machine": {
                "nproc": self.machine.nproc, "cpu_model": self.machine.cpu_model,
                "mem_gib": self.machine.mem_gib, "loadavg_start": self.machine.load_start,
                "loadavg_end": self.machine.load_end,
                "kube_apiserver": self.machine.apiserver_version,
            },
            "setup": self.setup.iter().map(|s| json!({"step": s.name, "objects": s.objects, "seconds": s.secs})).collect::<Vec<_>>(),
            "operator_ready_seconds": self.operator_ready_secs,
            "phases": self.phases.iter().map(phase).collect::<Vec<_>>(),
            "quiet": self.quiet.as_ref().map(|q| json!({
                "seconds": a.quiet_secs, "node_writes": q.node_writes,
                "status_writes": q.requests.status_writes,
                "api_requests": q.requests.total_requests(), "cpu_seconds": q.cpu_secs})),
            "operator_process": {
                "peak_rss_mib": self.peak_rss_kib.map(mib),
                "settled_rss_mib": self.settled_rss_kib.map(mib),
                "cpu_seconds": self.total_cpu_secs,
            },
            "policy_status": self.policy_status,
            "final_check": self.final_check,
            "targets": self.targets().iter().map(|t| json!({"target": t.what, "measured": t.measured, "ok": t.ok})).collect::<Vec<_>>(),
            "error": self.error,
        })
    }
}

// ------------------------------------------------------------------ main

/// Which operator was measured: the binary's build time and the source it most
/// likely came from (the workspace's commit, and whether operator/ or crd/ differ).
fn operator_version(repo_root: &Path, bin: &Path) -> String {
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

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

async fn client_from(path: &Path) -> Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| format!("cannot read kubeconfig {}: {e}", path.display()))?;
    let mut config =
        Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    config.read_timeout = Some(Duration::from_secs(120));
    Ok(Client::try_from(config)?)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("scale: {e}");
            ExitCode::from(2)
        }
    }
}

/// Ok(false): the run finished but a target was missed (with --strict) or a phase failed.
async fn run(args: Args) -> Result<bool> {
    if args.policies < 5 {
        bail!(
            "--policies must be at least 5 (matchers, readiness, BootstrapOnly, dry run, and the one deleted)"
        );
    }
    if args.nodes == 0 || args.nodes > 99_999 {
        bail!("--nodes must be between 1 and 99999");
    }
    if args.pods_per_node == 0 {
        bail!("--pods-per-node must be at least 1 (the readiness policies need critical pods)");
    }
    let Some(kubeconfig) = env_path("KUBECONFIG") else {
        bail!(
            "KUBECONFIG is not set: start a control plane (e2e/control-plane.sh start DIR) and `. DIR/env` first; see e2e/scale.md"
        );
    };
    let Some(operator_kubeconfig) = env_path("OPERATOR_KUBECONFIG") else {
        bail!(
            "OPERATOR_KUBECONFIG is not set: the operator runs as the least-privileged user of `e2e/control-plane.sh start DIR` (`. DIR/env`)"
        );
    };
    let lease_ns = std::env::var("OPERATOR_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty());
    let repo_root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ is inside the workspace")
        .to_path_buf();
    let operator_bin = args
        .operator_bin
        .clone()
        .unwrap_or_else(|| repo_root.join("target/release/taint-operator"));
    if !operator_bin.is_file() {
        bail!(
            "the operator binary {} is missing: build it with `cargo build --release -p taint-operator` (or pass --operator-bin)",
            operator_bin.display()
        );
    }
    let operator_log = args.operator_log.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("taint-operator-scale-{}.log", std::process::id()))
    });

    let client = client_from(&kubeconfig).await?;
    let mut machine = machine();
    machine.apiserver_version = client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .map_err(|e| format!("cannot reach the cluster in {}: {e}", kubeconfig.display()))?;

    let critical = Critical::new(args.pods_per_node);
    let defs = policy_defs(args.policies, &args.namespace);
    let mut report = Report {
        args: args.clone(),
        machine,
        node_json_bytes: serde_json::to_vec(&node_json(0, args.images_per_node))?.len(),
        critical: critical.clone(),
        policies: defs.iter().map(|d| d.name.clone()).collect(),
        operator_bin: operator_bin.clone(),
        operator_log: operator_log.clone(),
        operator_version: operator_version(&repo_root, &operator_bin),
        leader_election: lease_ns.is_some(),
        setup: vec![],
        phases: vec![],
        operator_ready_secs: None,
        quiet: None,
        peak_rss_kib: None,
        settled_rss_kib: None,
        total_cpu_secs: None,
        final_check: vec![],
        policy_status: vec![],
        error: None,
    };

    let result = drive(
        &args,
        &client,
        &kubeconfig,
        &operator_bin,
        &operator_kubeconfig,
        lease_ns.as_deref(),
        &operator_log,
        &defs,
        &critical,
        &mut report,
    )
    .await;
    let failed = result.is_err();
    if let Err(e) = result {
        report.error = Some(e.to_string());
    }
    report.machine.load_end = loadavg();
    let md = report.markdown();
    let js = serde_json::to_string_pretty(&report.json())?;
    println!("{md}");
    println!("### JSON\n\n```json\n{js}\n```");
    if let Some(path) = &args.out_json {
        std::fs::write(path, &js).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("scale: JSON report written to {}", path.display());
    }
    if let Some(dir) = &args.dump_latencies {
        std::fs::create_dir_all(dir)?;
        for p in &report.phases {
            let file = dir.join(format!("{}-{}.csv", p.runner, p.name.replace(' ', "-")));
            let mut csv = String::from("node,change_ms,latency_ms\n");
            for (i, (c, l)) in p.per_node.iter().enumerate() {
                csv.push_str(&format!("{},{c:.1},{l:.1}\n", node_name(i)));
            }
            std::fs::write(&file, csv)?;
        }
        eprintln!("scale: per-node latencies written to {}", dir.display());
    }
    let missed = report.targets().iter().any(|t| !t.ok);
    Ok(!(failed || (args.strict && missed)))
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    args: &Args,
    client: &Client,
    kubeconfig: &Path,
    operator_bin: &Path,
    operator_kubeconfig: &Path,
    lease_ns: Option<&str>,
    operator_log: &Path,
    defs: &[PolicyDef],
    critical: &Critical,
    report: &mut Report,
) -> Result {
    let n = args.nodes;
    let c = args.concurrency;
    let ns = args.namespace.clone();
    let probes = CpuProbes::new();

    // ---- a clean cluster
    let nodes_api: Api<Node> = Api::all(client.clone());
    let existing = nodes_api
        .list_metadata(
            &ListParams::default()
                .labels(&format!("{SCALE_LABEL}=true"))
                .limit(1),
        )
        .await?;
    if !existing.items.is_empty() {
        bail!(
            "the cluster already has nodes labelled {SCALE_LABEL}=true from an earlier run: start a fresh control plane (e2e/control-plane.sh stop DIR; start DIR)"
        );
    }
    install_crd(client, operator_bin).await?;
    let policies_api: Api<TaintPolicy> = Api::all(client.clone());
    if !policies_api
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .items
        .is_empty()
    {
        bail!("the cluster already has TaintPolicies: start a fresh control plane");
    }

    // ---- setup
    eprintln!(
        "scale: setup: {n} nodes, {} pods, {} policies",
        n * args.pods_per_node,
        defs.len()
    );
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let ns_obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    match ns_api.create(&PostParams::default(), &ns_obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let images = args.images_per_node;
    let api = nodes_api.clone();
    report.setup.push(
        create_all("create nodes (with status)", n, c, move |i| {
            let api = api.clone();
            Box::pin(async move {
                let node: Node = serde_json::from_value(node_json(i, images))?;
                api.create(&PostParams::default(), &node)
                    .await
                    .map_err(|e| format!("create node {}: {e}", node_name(i)))?;
                Ok(())
            })
        })
        .await?,
    );
    let ppn = args.pods_per_node;
    let pods_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    {
        let api = pods_api.clone();
        let ns = ns.clone();
        let critical = critical.clone();
        report.setup.push(
            create_all("create pods (bound)", n * ppn, c, move |k| {
                let api = api.clone();
                let body = pod_json(&ns, k / ppn, k % ppn, &critical);
                Box::pin(async move {
                    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(body)?;
                    api.create(&PostParams::default(), &pod)
                        .await
                        .map_err(|e| format!("create pod {}: {e}", pod.name_any()))?;
                    Ok(())
                })
            })
            .await?,
        );
    }
    {
        let status_pods: Vec<(usize, usize)> = (0..n)
            .flat_map(|i| (0..ppn).map(move |j| (i, j)))
            .filter(|&(_, j)| args.pod_status == PodStatusMode::All || j < critical.per_node)
            .collect();
        let status_pods = Arc::new(status_pods);
        let api = pods_api.clone();
        let per_node = critical.per_node;
        let list = status_pods.clone();
        report.setup.push(
            create_all(
                "pod status (Running; critical not Ready)",
                status_pods.len(),
                c,
                move |k| {
                    let api = api.clone();
                    let (i, j) = list[k];
                    let body = pod_status_json(i, j, j >= per_node);
                    Box::pin(async move {
                        api.patch_status(
                            &pod_name(i, j),
                            &PatchParams::default(),
                            &Patch::Merge(body),
                        )
                        .await
                        .map_err(|e| format!("status of pod {}: {e}", pod_name(i, j)))?;
                        Ok(())
                    })
                },
            )
            .await?,
        );
    }

    // ---- the observer
    let observer = Observer::start(client_from(kubeconfig).await?, n);
    observer.wait_synced().await;
    let mut world = World::default();
    observer.begin(expected_all(defs, n, world));
    observer
        .wait_all_right(Duration::from_secs(60))
        .await
        .map_err(|e| format!("the fresh nodes are not as expected: {e}"))?;

    // ---- baseline, before the operator
    if !args.skip_baseline {
        baseline_rounds(
            args, client, kubeconfig, defs, &observer, world, &probes, false, report,
        )
        .await?;
    }

    // ---- policies, then the operator
    for d in defs {
        let p: TaintPolicy = serde_json::from_value(json!({
            "apiVersion": "nodetaint.io/v1alpha1", "kind": "TaintPolicy",
            "metadata": {"name": d.name}, "spec": d.body}))
        .map_err(|e| format!("policy {}: {e}", d.name))?;
        policies_api
            .create(&PostParams::default(), &p)
            .await
            .map_err(|e| format!("create policy {}: {e}", d.name))?;
    }
    world.policies = true;

    eprintln!("scale: cold start: starting {}", operator_bin.display());
    observer.begin(expected_all(defs, n, world));
    let events_before = observer.events();
    let cold_cpu = probes.snapshot();
    let t0 = Instant::now();
    let mut op = OperatorProc::spawn(
        operator_bin,
        operator_kubeconfig,
        lease_ns,
        args.operator_concurrency,
        operator_log,
    )
    .await?;
    let result = operator_phases(
        args,
        client,
        defs,
        critical,
        &observer,
        &mut op,
        world,
        (t0, events_before, cold_cpu),
        &probes,
        report,
    )
    .await;
    let tail = if result.is_err() {
        op.log_tail(20)
    } else {
        String::new()
    };
    report.peak_rss_kib = Some(op.sample().hwm_kib).filter(|v| *v > 0);
    if let Err(e) = op.stop().await {
        eprintln!("scale: stopping the operator: {e}");
    }
    let world = result.map_err(|e| format!("{e}\noperator log tail:\n{tail}"))?;

    // ---- baseline, after the operator
    if !args.skip_baseline {
        baseline_rounds(
            args, client, kubeconfig, defs, &observer, world, &probes, true, report,
        )
        .await?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn operator_phases(
    args: &Args,
    client: &Client,
    defs: &[PolicyDef],
    critical: &Critical,
    observer: &Observer,
    op: &mut OperatorProc,
    mut world: World,
    (t0, events_before, cold_cpu): (Instant, u64, BTreeMap<String, f64>),
    probes: &CpuProbes,
    report: &mut Report,
) -> Result<World> {
    let n = args.nodes;
    let c = args.concurrency;
    let timeout = Duration::from_secs(args.phase_timeout_secs);
    // Longer than the operator's event quiet period (2 s), so a phase's events
    // count in that phase and do not go out during the next one.
    let settle_quiet = Duration::from_secs(4);
    let settle_max = Duration::from_secs(60);

    // ---- cold start
    let ready_at = {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if !op.alive() {
                bail!("the operator exited during startup");
            }
            if let Ok((200, _)) = op.get("/readyz").await {
                break Instant::now();
            }
            if Instant::now() > deadline {
                bail!("the operator was not ready within 120 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    report.operator_ready_secs = Some(ready_at.duration_since(t0).as_secs_f64());
    let right = observer.wait_all_right(timeout).await?;
    let cold_to_right = with_operator(probes.since(&cold_cpu), op.sample().cpu_secs);
    let end = right.iter().max().copied().unwrap_or(t0);
    let m_cold = op.settle(settle_quiet, settle_max).await?;
    let s = op.sample();
    report.phases.push(PhaseResult {
        name: "cold start".into(),
        kind: "cold start".into(),
        runner: "operator".into(),
        after_operator: false,
        transitions: n,
        secs: end.saturating_duration_since(t0).as_secs_f64(),
        change_secs: 0.0,
        latencies_ms: latencies(&vec![Some(t0); n], &right),
        per_node: per_node(t0, &vec![Some(t0); n], &right),
        node_writes: m_cold.node_writes,
        conflicts: m_cold.node_write_conflicts,
        requests: m_cold.clone(),
        cpu_secs: Some(s.cpu_secs),
        peak_rss_kib: Some(op.take_peak_kib()),
        rss_end_kib: Some(s.rss_kib),
        observer_events: observer.events() - events_before,
        other_cpu: probes.since(&cold_cpu),
        cpu_to_right: cold_to_right,
        node_bytes: Some(sample_node_bytes(client, n).await?),
    });
    let mut before = m_cold;

    // ---- taint, untaint, readiness, policy delete
    let phases = (1..=args.rounds)
        .flat_map(|r| [("taint", r), ("untaint", r)])
        .chain([("readiness", 1), ("policy delete", 1)]);
    for (kind, round) in phases {
        let name = &round_name(kind, round);
        eprintln!("scale: operator {name} phase");
        match kind {
            "taint" => world.fault = true,
            "untaint" => world.fault = false,
            "readiness" => {
                world.critical_ready = true;
                world.bootstrapped = true;
            }
            _ => world.always_deleted = true,
        }
        let cpu_before = op.sample().cpu_secs;
        let others_before = probes.snapshot();
        op.take_peak_kib();
        let events_before = observer.events();
        observer.begin(expected_all(defs, n, world));
        let t0 = Instant::now();
        let changes = match kind {
            "taint" => {
                flip_condition(client, n, c, FAULT_CONDITION, "True", "BenchFaultDetected").await?
            }
            "untaint" => {
                flip_condition(client, n, c, FAULT_CONDITION, "False", "BenchHealthy").await?
            }
            "readiness" => ready_critical_pods(client, &args.namespace, n, critical, c).await?,
            _ => {
                let api: Api<TaintPolicy> = Api::all(client.clone());
                api.delete("bench-always", &DeleteParams::default())
                    .await
                    .map_err(|e| format!("delete policy bench-always: {e}"))?;
                vec![Some(t0); n]
            }
        };
        let change_secs = t0.elapsed().as_secs_f64();
        let right = observer.wait_all_right(timeout).await?;
        let mut end = right.iter().max().copied().unwrap_or(t0);
        if kind == "policy delete" {
            // the phase ends when the finalizer let the policy go
            let api: Api<TaintPolicy> = Api::all(client.clone());
            let deadline = Instant::now() + timeout;
            loop {
                match api.get_opt("bench-always").await? {
                    None => break,
                    Some(_) if Instant::now() > deadline => {
                        bail!("policy bench-always still exists after {timeout:?}")
                    }
                    Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            end = end.max(Instant::now());
        }
        let cpu_to_right = with_operator(
            probes.since(&others_before),
            op.sample().cpu_secs - cpu_before,
        );
        let after = op.settle(settle_quiet, settle_max).await?;
        let d = after.minus(&before);
        let s = op.sample();
        report.phases.push(PhaseResult {
            name: name.into(),
            kind: kind.into(),
            runner: "operator".into(),
            after_operator: false,
            transitions: n,
            secs: end.saturating_duration_since(t0).as_secs_f64(),
            change_secs,
            latencies_ms: latencies(&changes, &right),
            per_node: per_node(t0, &changes, &right),
            node_writes: d.node_writes,
            conflicts: d.node_write_conflicts,
            requests: d,
            cpu_secs: Some(s.cpu_secs - cpu_before),
            peak_rss_kib: Some(op.take_peak_kib()),
            rss_end_kib: Some(s.rss_kib),
            observer_events: observer.events() - events_before,
            other_cpu: probes.since(&others_before),
            cpu_to_right,
            node_bytes: Some(sample_node_bytes(client, n).await?),
        });
        before = after;
    }

    // ---- quiet period
    eprintln!("scale: quiet period: {} s", args.quiet_secs);
    let cpu_before = op.sample().cpu_secs;
    let others_before = probes.snapshot();
    op.take_peak_kib();
    let events_before = observer.events();
    tokio::time::sleep(Duration::from_secs(args.quiet_secs)).await;
    let after = op.metrics().await?;
    let d = after.minus(&before);
    let s = op.sample();
    report.quiet = Some(PhaseResult {
        name: format!("quiet {} s", args.quiet_secs),
        runner: "operator".into(),
        node_writes: d.node_writes,
        conflicts: d.node_write_conflicts,
        requests: d,
        cpu_secs: Some(s.cpu_secs - cpu_before),
        peak_rss_kib: Some(op.take_peak_kib()),
        rss_end_kib: Some(s.rss_kib),
        observer_events: observer.events() - events_before,
        other_cpu: probes.since(&others_before),
        ..PhaseResult::default()
    });
    report.settled_rss_kib = Some(s.rss_kib);
    report.total_cpu_secs = Some(s.cpu_secs);

    // ---- final state: annotations and policy status
    let nodes: Api<Node> = Api::all(client.clone());
    let mut bootstrapped = 0;
    let mut mentions_deleted = 0;
    let mut wrong_owner = 0;
    let list = nodes
        .list(&ListParams::default().labels(&format!("{SCALE_LABEL}=true")))
        .await?;
    for node in &list.items {
        let ann = node.annotations();
        if ann
            .get(BOOTSTRAPPED_ANNOTATION)
            .is_some_and(|v| v.contains("\"bench-bootstrap\""))
        {
            bootstrapped += 1;
        }
        let managed = ann
            .get(MANAGED_TAINTS_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if managed.contains("bench-always") {
            mentions_deleted += 1;
        }
        let owned: BTreeMap<String, String> =
            serde_json::from_str(if managed.is_empty() { "{}" } else { &managed })
                .unwrap_or_default();
        let node_taints: BTreeSet<String> = node
            .spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect();
        if owned.keys().any(|k| !node_taints.contains(k)) {
            wrong_owner += 1;
        }
    }
    report.final_check = vec![
        format!(
            "{bootstrapped} of {} nodes record the bench-bootstrap completion in {BOOTSTRAPPED_ANNOTATION}",
            list.items.len()
        ),
        format!(
            "{mentions_deleted} nodes still mention the deleted policy bench-always in {MANAGED_TAINTS_ANNOTATION}"
        ),
        format!(
            "{wrong_owner} nodes whose {MANAGED_TAINTS_ANNOTATION} names a taint the node does not carry"
        ),
    ];
    let policies: Api<TaintPolicy> = Api::all(client.clone());
    for p in policies.list(&ListParams::default()).await?.items {
        let st = p.status.clone().unwrap_or_default();
        let ready = st.conditions.iter().find(|c| c.type_ == "Ready");
        report.policy_status.push(json!({
            "name": p.name_any(),
            "selected": st.selected_nodes,
            "tainted": st.tainted_nodes,
            "ready": ready.map(|c| c.status.clone()),
            "reason": ready.map(|c| c.reason.clone()),
            "message": ready.map(|c| c.message.clone()),
        }));
    }
    Ok(world)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(
            median(vec![35.0, 24.0, 29.3, 31.9, 33.4, 27.2]),
            (29.3 + 31.9) / 2.0
        );
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![7.0]), 7.0);
        assert_eq!(median(vec![]), 0.0);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
    }

    /// The operator's world in its taint and untaint phases.
    fn operator_phase(fault: bool) -> World {
        World {
            policies: true,
            fault,
            ..World::default()
        }
    }

    fn baseline_phase(fault: bool) -> World {
        World {
            baseline_fault: fault,
            baseline_standing: true,
            ..World::default()
        }
    }

    #[test]
    fn both_runners_taint_phases_make_the_same_nodes() {
        let defs = policy_defs(10, "ns");
        for i in 0..2 * GROUPS {
            for fault in [true, false] {
                assert_eq!(
                    expected(&defs, i, baseline_phase(fault)),
                    expected(&defs, i, operator_phase(fault)),
                    "node {i}, fault {fault}"
                );
            }
            // the phases change something: 2 to 4 taints per node
            let added = expected(&defs, i, operator_phase(true)).len()
                - expected(&defs, i, operator_phase(false)).len();
            assert!((2..=4).contains(&added), "node {i} gains {added}");
        }
    }

    #[test]
    fn the_baseline_changes_only_its_own_taints_and_only_when_needed() {
        let t = |key: &str, effect: &str| Taint {
            key: key.into(),
            effect: effect.into(),
            ..Taint::default()
        };
        let mine = [t("f/a", "NoSchedule"), t("f/b", "NoExecute")];
        let foreign = t("other", "NoSchedule");
        // a fault: the missing one and the present one end up once each, foreign kept first
        assert_eq!(
            baseline_taints(vec![foreign.clone(), mine[1].clone()], &mine, true),
            Some(vec![foreign.clone(), mine[0].clone(), mine[1].clone()])
        );
        // all there, or all gone: nothing to write
        assert_eq!(
            baseline_taints(vec![mine[1].clone(), mine[0].clone()], &mine, true),
            None
        );
        assert_eq!(baseline_taints(vec![foreign.clone()], &mine, false), None);
        // recovery keeps the foreign taint, and the same key with another effect
        let same_key = t("f/a", "NoExecute");
        assert_eq!(
            baseline_taints(
                vec![mine[0].clone(), same_key.clone(), foreign.clone()],
                &mine,
                false
            ),
            Some(vec![same_key, foreign])
        );
    }

    #[test]
    fn the_baseline_writes_the_taints_the_observer_expects() {
        let defs = policy_defs(10, "ns");
        let by_group = fault_taints_by_group(&defs);
        let key = |t: &Taint| format!("{}:{}", t.key, t.effect);
        for i in 0..GROUPS {
            let mut written: BTreeSet<String> = standing_taints(&defs).iter().map(key).collect();
            written.extend(by_group[group_of(i)].iter().map(key));
            assert_eq!(written, expected(&defs, i, baseline_phase(true)));
        }
    }
}
