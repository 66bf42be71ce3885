//! The actors: they carry out the schedule's actions with the admin's
//! credentials, and play the parts of a real cluster that a bare control plane
//! lacks (kubelet deleting evicted pods, a ReplicaSet replacing them, the
//! disruption controller keeping budgets' status).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use k8s_openapi::{
    api::{
        core::v1::{Node, Pod},
        policy::v1::PodDisruptionBudget,
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use taint_operator_crd::TaintPolicy;
use taint_operator_e2e::{Result, bail};
use tokio::sync::{Mutex, mpsc::UnboundedSender};

use crate::{
    record::{Event, TaintRec, now_micros},
    rng::Rng,
    schedule::Action,
    setup::{self, ensure_cni_pod},
    world::{self, *},
};

pub struct Actors {
    client: Client,
    events: UnboundedSender<Event>,
    /// Foreign taints the harness put on and has not taken off, per node.
    foreign: Mutex<BTreeSet<(String, world::ForeignTaint)>>,
    nodes: usize,
    pub injected: Mutex<Option<String>>,
    rng: Mutex<Rng>,
}

fn foreign_rec(t: &world::ForeignTaint) -> TaintRec {
    TaintRec::new(t.key, t.value, t.effect)
}

fn taint_json(t: &world::ForeignTaint) -> Value {
    match t.value {
        Some(v) => json!({"key": t.key, "value": v, "effect": t.effect}),
        None => json!({"key": t.key, "effect": t.effect}),
    }
}

/// A refused optimistic lock: the JSON patch's resourceVersion test (422) or a 409.
fn is_conflict(e: &taint_operator_e2e::Error) -> bool {
    matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 409 || s.code == 422)
}

/// A node's taints as JSON, to write back with a change.
fn taints_of(n: &Node) -> Vec<Value> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| serde_json::to_value(t).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

impl Actors {
    pub fn new(client: Client, events: UnboundedSender<Event>, nodes: usize, seed: u64) -> Self {
        Actors {
            client,
            events,
            foreign: Mutex::new(BTreeSet::new()),
            nodes,
            injected: Mutex::new(None),
            rng: Mutex::new(Rng::new(seed ^ 0x5eed)),
        }
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Carries out one action. Errors are the cluster's answers (an API server
    /// down, a refused webhook): the caller counts them and goes on.
    pub async fn act(&self, action: &Action) -> Result {
        match action {
            Action::Condition {
                node,
                type_,
                status,
            } => {
                let t = Timestamp::now().to_string();
                let patch = json!({"status": {"conditions": [{"type": type_, "status": status, "reason": "Chaos",
                                                               "lastTransitionTime": t, "lastHeartbeatTime": t}]}});
                self.nodes()
                    .patch_status(node, &PatchParams::default(), &Patch::Strategic(patch))
                    .await?;
            }
            Action::CreateNode { node, pool, zone } => {
                setup::create_node(&self.client, node, pool, zone).await?;
            }
            Action::DeleteNode { node } => {
                self.nodes().delete(node, &DeleteParams::default()).await?;
            }
            Action::Relabel { node, pool } => {
                self.nodes()
                    .patch(
                        node,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"labels": {POOL_LABEL: pool}}})),
                    )
                    .await?;
            }
            Action::CriticalPod { node, ready } => {
                ensure_cni_pod(&self.client, node, *ready).await?
            }
            Action::Foreign { node, taint, add } => self.foreign_taint(node, taint, *add).await?,
            Action::ToggleSuspend => self.toggle(SUSPEND_TOGGLED, "suspend").await?,
            Action::ToggleDryRun => self.toggle(DRY_RUN_TOGGLED, "dryRun").await?,
            Action::ChurnCreate { policy, version } | Action::ChurnEdit { policy, version } => {
                setup::apply_policy(&self.client, &world::churn_policy(policy, *version)).await?;
            }
            Action::ChurnDelete { policy } => {
                let api: Api<TaintPolicy> = Api::all(self.client.clone());
                api.delete(policy, &DeleteParams::default()).await?;
            }
            Action::InjectViolation => self.inject_violation().await?,
        }
        Ok(())
    }

    /// Writes `taints` as the node's whole list, as `manager`, under the
    /// resourceVersion the node was read at.
    async fn write_taints(&self, n: &Node, taints: &[Value], manager: &str) -> Result {
        let patch = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": n.resource_version()},
            {"op": "replace", "path": "/spec/taints", "value": taints},
        ]);
        let params = PatchParams {
            field_manager: Some(manager.into()),
            ..PatchParams::default()
        };
        self.nodes()
            .patch(
                &n.name_any(),
                &params,
                &Patch::<()>::Json(serde_json::from_value(patch)?),
            )
            .await?;
        Ok(())
    }

    async fn toggle(&self, policy: &str, field: &str) -> Result {
        let api: Api<TaintPolicy> = Api::all(self.client.clone());
        let p = api.get(policy).await?;
        let spec = serde_json::to_value(&p.spec)?;
        let now = spec[field].as_bool().unwrap_or(false);
        api.patch(
            policy,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {field: !now}})),
        )
        .await?;
        Ok(())
    }

    /// Adds or removes one foreign taint by reading the node and writing its
    /// taints back under the read's resourceVersion, as an admin's tool does.
    async fn foreign_taint(&self, node: &str, taint: &world::ForeignTaint, add: bool) -> Result {
        let rec = foreign_rec(taint);
        if !add {
            // Said before the write: from here on its disappearance is ours.
            self.foreign
                .lock()
                .await
                .remove(&(node.to_string(), *taint));
            let _ = self.events.send(Event::ForeignRemoving {
                at: now_micros(),
                node: node.into(),
                taint: rec.clone(),
            });
        }
        for _ in 0..5 {
            let n = self.nodes().get(node).await?;
            let mut taints = taints_of(&n);
            let same = |t: &Value| t["key"] == taint.key && t["effect"] == taint.effect;
            let had = taints.iter().any(same);
            taints.retain(|t| !same(t));
            if add {
                taints.push(taint_json(taint));
            } else if !had {
                return Ok(());
            }
            match self.write_taints(&n, &taints, FOREIGN_MANAGER).await {
                Ok(_) => {
                    if add {
                        self.foreign.lock().await.insert((node.to_string(), *taint));
                        let _ = self.events.send(Event::ForeignAdded {
                            at: now_micros(),
                            node: node.into(),
                            taint: rec,
                        });
                    }
                    return Ok(());
                }
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e),
            }
        }
        bail!("node {node}: five conflicts in a row writing a foreign taint")
    }

    /// Removes a foreign taint as if the operator did (its field manager), telling
    /// the checker nothing: the checker must catch it.
    async fn inject_violation(&self) -> Result {
        for _ in 0..60 {
            let candidates: Vec<(String, world::ForeignTaint)> =
                self.foreign.lock().await.iter().cloned().collect();
            for (node, taint) in candidates {
                let Ok(n) = self.nodes().get(&node).await else {
                    continue;
                };
                let taints = taints_of(&n);
                let same = |t: &Value| t["key"] == taint.key && t["effect"] == taint.effect;
                if !taints.iter().any(same) {
                    continue;
                }
                // Seen by the checker's watch by now: the taint went on seconds ago.
                let kept: Vec<Value> = taints.iter().filter(|t| !same(t)).cloned().collect();
                if self.write_taints(&n, &kept, "taint-operator").await.is_ok() {
                    self.foreign.lock().await.remove(&(node.clone(), taint));
                    let what = format!(
                        "removed {} from node {node} as field manager taint-operator",
                        foreign_rec(&taint)
                    );
                    println!("chaos: injected violation: {what}");
                    *self.injected.lock().await = Some(what);
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        bail!("no foreign taint to remove for the injected violation within a minute")
    }

    /// The parts of a cluster a bare control plane lacks, once a second until `stop`.
    pub async fn run_cluster_duties(self: Arc<Self>, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = self.duties_once().await {
                // The API server may be down: next second.
                let _ = e;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn duties_once(&self) -> Result {
        let nodes = self
            .nodes()
            .list(&ListParams::default().labels(&format!("{RUN_LABEL}=1")))
            .await?;
        let node_names: BTreeSet<String> = nodes.items.iter().map(ResourceExt::name_any).collect();
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        // kubelet: an evicted pod goes a second after its eviction; pod GC: pods of
        // deleted nodes go.
        let now = Timestamp::now();
        for ns in [SYSTEM_NS, APPS_NS] {
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            for p in pods.list(&ListParams::default()).await?.items {
                let node = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                let gone = p
                    .metadata
                    .deletion_timestamp
                    .as_ref()
                    .is_some_and(|t| t.0 <= now)
                    || !node_names.contains(&node);
                if gone {
                    let _ = pods.delete(&p.name_any(), &force).await;
                }
            }
        }
        self.replace_app_pods(&nodes.items).await?;
        self.budget_status().await
    }

    /// A ReplicaSet per workload: missing replicas are made on a node no
    /// scheduling taint keeps them off (spot first), Ready a second later.
    async fn replace_app_pods(&self, nodes: &[Node]) -> Result {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), APPS_NS);
        let list = pods.list(&ListParams::default()).await?.items;
        let open: Vec<(String, String)> = nodes
            .iter()
            .filter(|n| {
                !n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| ts.iter().any(|t| t.effect != "PreferNoSchedule"))
            })
            .map(|n| {
                (
                    n.name_any(),
                    n.labels().get(POOL_LABEL).cloned().unwrap_or_default(),
                )
            })
            .collect();
        for p in &list {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if !ready && p.metadata.deletion_timestamp.is_none() {
                setup::set_pod_ready(&self.client, APPS_NS, &p.name_any(), true).await?;
            }
        }
        for app in 0..setup::app_count(self.nodes) {
            let name = setup::app_name(app);
            let live = list
                .iter()
                .filter(|p| {
                    p.labels().get("app") == Some(&name) && p.metadata.deletion_timestamp.is_none()
                })
                .count();
            for _ in live..APP_REPLICAS {
                let spot: Vec<&(String, String)> =
                    open.iter().filter(|(_, pool)| pool == "spot").collect();
                let mut rng = self.rng.lock().await;
                let node = if !spot.is_empty() {
                    spot[rng.below(spot.len())].0.clone()
                } else if !open.is_empty() {
                    open[rng.below(open.len())].0.clone()
                } else {
                    break;
                };
                let suffix = rng.next_u64() % 1_000_000;
                drop(rng);
                let pod: Pod = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("{name}-{suffix:06}"), "namespace": APPS_NS, "labels": {"app": name},
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name,
                                                      "uid": "00000000-0000-0000-0000-0000000000a5", "controller": true}]},
                    "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                             "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]},
                }))?;
                match pods.create(&PostParams::default(), &pod).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// The disruption controller: each budget's status from its pods, keeping the
    /// API server's record of pods it let go that have not started terminating.
    async fn budget_status(&self) -> Result {
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), APPS_NS);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), APPS_NS);
        let list = pods.list(&ListParams::default()).await?.items;
        for pdb in pdbs.list(&ListParams::default()).await?.items {
            let selector: BTreeMap<String, String> = pdb
                .spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(|s| s.match_labels.clone())
                .unwrap_or_default();
            let min = APP_MIN_AVAILABLE as i32;
            let matching: Vec<&Pod> = list
                .iter()
                .filter(|p| selector.iter().all(|(k, v)| p.labels().get(k) == Some(v)))
                .collect();
            let disrupted: BTreeMap<String, Value> = pdb
                .status
                .as_ref()
                .and_then(|s| s.disrupted_pods.clone())
                .unwrap_or_default()
                .into_iter()
                .filter(|(name, _)| {
                    matching
                        .iter()
                        .any(|p| p.name_any() == *name && p.metadata.deletion_timestamp.is_none())
                })
                .map(|(name, t)| (name, serde_json::to_value(t).unwrap_or_default()))
                .collect();
            let healthy = matching
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && !disrupted.contains_key(&p.name_any())
                })
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
                .count() as i32;
            let status = json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": pdb.name_any(), "namespace": APPS_NS, "resourceVersion": pdb.resource_version()},
                "status": {
                    "observedGeneration": pdb.metadata.generation,
                    "currentHealthy": healthy, "desiredHealthy": min,
                    "disruptionsAllowed": (healthy - min).max(0),
                    "expectedPods": matching.len(),
                    "disruptedPods": disrupted,
                    "conditions": [{"type": "DisruptionAllowed", "status": if healthy > min { "True" } else { "False" },
                                    "reason": if healthy > min { "SufficientPods" } else { "InsufficientPods" },
                                    "message": "", "lastTransitionTime": Timestamp::now().to_string(),
                                    "observedGeneration": pdb.metadata.generation}],
                },
            });
            // Conflicts (an eviction just changed it) wait for the next second.
            let _ = pdbs
                .replace_status(
                    &pdb.name_any(),
                    &PostParams::default(),
                    &serde_json::from_value(status)?,
                )
                .await;
        }
        Ok(())
    }
}
