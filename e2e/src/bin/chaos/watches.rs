//! The checker's own watches: Nodes, Pods, TaintPolicies and PodDisruptionBudgets,
//! read with the admin's credentials straight from the API server, turned into
//! [`Event`]s. After a relist, what vanished while the watch was down is reported
//! as deleted.

use std::collections::BTreeSet;

use futures::{Stream, StreamExt};
use k8s_openapi::api::{
    core::v1::{Node, Pod},
    policy::v1::PodDisruptionBudget,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        WatchStreamExt,
        watcher::{self, watcher},
    },
};
use taint_operator_crd::TaintPolicy;
use tokio::sync::mpsc::UnboundedSender;

use crate::{
    record::{
        Budget, Event, EvictionRules, Micros, NodeState, PodState, PolicyRules, TaintRec,
        now_micros,
    },
    world::RUN_LABEL,
};

pub fn node_state(node: &Node) -> NodeState {
    NodeState {
        uid: node.uid().unwrap_or_default(),
        taints: node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|ts| {
                ts.iter()
                    .map(|t| TaintRec::new(&t.key, t.value.as_deref(), &t.effect))
                    .collect()
            })
            .unwrap_or_default(),
        records: node
            .annotations()
            .iter()
            .filter(|(k, _)| k.starts_with("nodetaint.io/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

pub fn pod_state(pod: &Pod) -> PodState {
    let status = pod.status.as_ref();
    PodState {
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        labels: pod.labels().clone(),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        terminating: pod.meta().deletion_timestamp.is_some(),
        finished: status
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed"),
        daemonset: pod.owner_references().iter().any(|o| o.kind == "DaemonSet"),
    }
}

/// Seconds of a Go duration made of `h`, `m` and `s` parts (what the soak writes).
pub fn go_seconds(d: &str) -> Option<i64> {
    let mut total = 0i64;
    let mut digits = String::new();
    for c in d.chars() {
        match c {
            '0'..='9' => digits.push(c),
            'h' | 'm' | 's' => {
                let n: i64 = digits.parse().ok()?;
                total += n * match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                digits.clear();
            }
            _ => return None,
        }
    }
    digits.is_empty().then_some(total)
}

pub fn policy_rules(p: &TaintPolicy) -> PolicyRules {
    let spec = serde_json::to_value(&p.spec).unwrap_or_default();
    PolicyRules {
        taints: spec["taints"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| {
                        TaintRec::new(
                            t["key"].as_str().unwrap_or_default(),
                            t["value"].as_str(),
                            t["effect"].as_str().unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        cap: spec["maxTaintedNodes"].as_u64().map(|n| n as usize),
        eviction: spec
            .get("eviction")
            .filter(|e| !e.is_null())
            .map(|e| EvictionRules {
                drain_timeout_s: e["drainTimeout"].as_str().and_then(go_seconds),
            }),
    }
}

fn budget(pdb: &PodDisruptionBudget) -> Option<Budget> {
    let spec = pdb.spec.as_ref()?;
    let min = match spec.min_available.as_ref()? {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => *n as usize,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(_) => return None,
    };
    Some(Budget {
        min_available: min,
        selector: spec
            .selector
            .as_ref()
            .and_then(|s| s.match_labels.clone())
            .unwrap_or_default(),
    })
}

/// One watch, its objects turned into events by `to_event` (`None`: deleted).
async fn follow<K, S, F>(
    stream: S,
    tx: UnboundedSender<Event>,
    relisted: Option<fn(Micros) -> Event>,
    to_event: F,
) where
    K: Resource + Clone,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    F: Fn(Micros, String, String, Option<&K>) -> Event,
{
    let key = |o: &K| {
        (
            o.meta().namespace.clone().unwrap_or_default(),
            o.meta().name.clone().unwrap_or_default(),
        )
    };
    let mut known: BTreeSet<(String, String)> = BTreeSet::new();
    let mut listing: BTreeSet<(String, String)> = BTreeSet::new();
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        let at = now_micros();
        let Ok(event) = item else {
            continue; // the watcher retries, with backoff; a relist follows
        };
        match event {
            watcher::Event::Init => {
                listing.clear();
                if let Some(relisted) = relisted {
                    let _ = tx.send(relisted(at));
                }
            }
            watcher::Event::InitApply(o) => {
                let (ns, name) = key(&o);
                listing.insert((ns.clone(), name.clone()));
                let _ = tx.send(to_event(at, ns, name, Some(&o)));
            }
            watcher::Event::InitDone => {
                for (ns, name) in known.difference(&listing) {
                    let _ = tx.send(to_event(at, ns.clone(), name.clone(), None));
                }
                known = std::mem::take(&mut listing);
            }
            watcher::Event::Apply(o) => {
                let (ns, name) = key(&o);
                known.insert((ns.clone(), name.clone()));
                let _ = tx.send(to_event(at, ns, name, Some(&o)));
            }
            watcher::Event::Delete(o) => {
                let (ns, name) = key(&o);
                known.remove(&(ns.clone(), name.clone()));
                let _ = tx.send(to_event(at, ns, name, None));
            }
        }
    }
}

/// Starts the four watches; they run until the process ends.
pub fn start(client: &Client, namespaces: &[&str], tx: UnboundedSender<Event>) {
    let cfg = || watcher::Config::default();
    let nodes: Api<Node> = Api::all(client.clone());
    tokio::spawn(follow(
        watcher(nodes, cfg().labels(&format!("{RUN_LABEL}=1"))).default_backoff(),
        tx.clone(),
        Some(|at| Event::NodesRelisted { at }),
        |at, _, name, n: Option<&Node>| Event::Node {
            at,
            name,
            state: n.map(node_state),
        },
    ));
    for ns in namespaces {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        tokio::spawn(follow(
            watcher(pods, cfg()).default_backoff(),
            tx.clone(),
            None,
            |at, ns, name, p: Option<&Pod>| Event::Pod {
                at,
                ns,
                name,
                state: p.map(pod_state),
            },
        ));
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
        tokio::spawn(follow(
            watcher(pdbs, cfg()).default_backoff(),
            tx.clone(),
            None,
            |at, ns, name, b: Option<&PodDisruptionBudget>| Event::Budget {
                at,
                ns,
                name,
                budget: b.and_then(budget),
            },
        ));
    }
    let policies: Api<TaintPolicy> = Api::all(client.clone());
    tokio::spawn(follow(
        watcher(policies, cfg()).default_backoff(),
        tx,
        None,
        |at, _, name, p: Option<&TaintPolicy>| Event::Policy {
            at,
            name,
            rules: p.map(policy_rules),
        },
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_in_seconds() {
        assert_eq!(go_seconds("30s"), Some(30));
        assert_eq!(go_seconds("1m30s"), Some(90));
        assert_eq!(go_seconds("2h"), Some(7200));
        assert_eq!(go_seconds("1.5s"), None);
        assert_eq!(go_seconds("30"), None);
    }
}
