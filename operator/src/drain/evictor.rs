//! A drain's I/O: the pods on a node, listed only when a drain needs them (the
//! pod cache holds critical pods only, never every pod of the cluster), and their
//! evictions through the policy/v1 Eviction API, so PodDisruptionBudgets decide.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::ListParams, core::Status};
use serde_json::json;
use taint_operator_crd::PolicyTaint;

use crate::{
    telemetry::metrics::{EvictionLabels, Metrics},
    write_fence::WriteFence,
};
use engine::drain::{in_the_way, pod_key};

/// The pods bound to `node` (field selector `spec.nodeName`), whole: their
/// tolerations and owners decide their fate.
pub async fn pods_on(client: &Client, node: &str) -> Result<Vec<Pod>, kube::Error> {
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    Ok(Api::<Pod>::all(client.clone()).list(&params).await?.items)
}

/// An eviction a PodDisruptionBudget refused (429).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// `namespace/name`.
    pub pod: String,
    /// The budget, when the API server named it.
    pub budget: Option<String>,
    /// The API server's words.
    pub message: String,
}

/// One round of evictions for one policy's drain of one node.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    /// Evictions accepted now (the pods are terminating).
    pub evicted: Vec<String>,
    /// Pods still in the way: blocked by a budget, or the eviction failed.
    pub remaining: Vec<String>,
    pub blocked: Vec<Blocked>,
}

impl Round {
    /// Every pod in the way is gone, terminating, or evicted now.
    pub fn done(&self) -> bool {
        self.remaining.is_empty()
    }
}

/// Evicts, for `policy`, every pod of `pods` in the way of `taints`, skipping
/// those `evicted` already holds (evicted this round for another policy) and
/// adding the ones it evicts.
pub async fn evict(
    client: &Client,
    metrics: &Metrics,
    fence: &WriteFence,
    policy: &str,
    taints: &[&PolicyTaint],
    pods: &[Pod],
    evicted: &mut HashSet<String>,
) -> Round {
    let mut round = Round::default();
    for pod in in_the_way(pods, taints) {
        let key = pod_key(pod);
        if evicted.contains(&key) {
            continue;
        }
        // An eviction is a write like a node patch: only while the Lease is ours.
        if !fence.is_open() {
            round.remaining.push(key);
            continue;
        }
        let outcome = match evict_pod(client, pod).await {
            Ok(()) => {
                evicted.insert(key.clone());
                round.evicted.push(key);
                "evicted"
            }
            Err(kube::Error::Api(s)) if s.code == 404 => "gone",
            Err(kube::Error::Api(s)) if s.code == 429 && budget_cause(&s).is_some() => {
                round.blocked.push(Blocked {
                    pod: key.clone(),
                    budget: budget_name(budget_cause(&s).unwrap_or_default()),
                    message: budget_cause(&s).unwrap_or(&s.message).to_string(),
                });
                round.remaining.push(key);
                "blocked"
            }
            Err(e) => {
                tracing::warn!(pod = %key, policy, error = %e, "eviction failed; retrying later");
                round.remaining.push(key);
                "failed"
            }
        };
        metrics
            .evictions
            .get_or_create(&EvictionLabels {
                policy: policy.to_string(),
                outcome,
            })
            .inc();
    }
    round
}

/// POST `pods/NAME/eviction` with a policy/v1 Eviction.
async fn evict_pod(client: &Client, pod: &Pod) -> Result<(), kube::Error> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    });
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(&body).expect("an eviction serializes"))
    .map_err(kube::Error::HttpError)?;
    client
        .request::<serde_json::Value>(request)
        .await
        .map(|_| ())
}

/// The cause the API server gives when a budget refuses an eviction (its reason
/// is `DisruptionBudget`); a 429 without one is the API server shedding load.
fn budget_cause(s: &Status) -> Option<&str> {
    s.details
        .as_ref()?
        .causes
        .iter()
        .find(|c| c.reason == "DisruptionBudget")
        .map(|c| c.message.as_str())
}

/// `web-pdb` of "The disruption budget web-pdb needs 2 healthy pods and has 2 currently".
fn budget_name(message: &str) -> Option<String> {
    message
        .strip_prefix("The disruption budget ")?
        .split_whitespace()
        .next()
        .map(str::to_string)
}

/// A 429 as the API server words a budget's refusal (for tests).
pub fn budget_refusal(budget: &str) -> serde_json::Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests", "code": 429,
        "details": {"causes": [{"reason": "DisruptionBudget",
            "message": format!("The disruption budget {budget} needs 1 healthy pods and has 1 currently")}]}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_read_from_the_cause() {
        let s: Status = serde_json::from_value(budget_refusal("web-pdb")).unwrap();
        assert_eq!(
            budget_name(budget_cause(&s).unwrap()).as_deref(),
            Some("web-pdb")
        );
        let throttled: Status =
            serde_json::from_value(json!({"code": 429, "message": "Too many requests"})).unwrap();
        assert_eq!(budget_cause(&throttled), None);
    }
}
