//! Building the cluster before any phase: the node, pod and pod-status bodies and
//! the bounded-concurrency loop that creates them and times each step.

use std::{
    path::Path,
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

use futures::{StreamExt, TryStreamExt, stream};
use kube::Client;
use serde_json::{Value, json};

use crate::{
    Result,
    model::{
        BASELINE_CONDITION, CRITICAL_LABEL, Critical, FAULT_CONDITION, SCALE_LABEL, group_of, hex,
        node_name, splitmix,
    },
};

pub(crate) fn node_json(i: usize, images: usize) -> Value {
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

pub(crate) fn pod_name(node: usize, j: usize) -> String {
    format!("p-{node:05}-{j:02}")
}

pub(crate) fn pod_json(ns: &str, node: usize, j: usize, critical: &Critical) -> Value {
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

pub(crate) fn pod_status_json(node: usize, j: usize, ready: bool) -> Value {
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

pub(crate) struct SetupStep {
    pub(crate) name: String,
    pub(crate) objects: usize,
    pub(crate) secs: f64,
}

pub(crate) async fn create_all(
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

pub(crate) async fn install_crd(client: &Client, bin: &Path) -> Result {
    taint_operator_e2e::cluster::install_crd(client, bin).await
}
