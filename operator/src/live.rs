//! The cluster in KUBECONFIG, read once, for `explain` and `plan --live`.
//!
//! Read-only: get and list of nodes, taintpolicies and pods, nothing else. Pods are
//! read the way the controller watches them, one label-selected list per distinct
//! critical-pod selector of the policies, never every pod of the cluster; nodes
//! and pods are decoded by the controller's slim decoders, so a 5,000-node
//! cluster is read in a few seconds and little memory.

use std::collections::BTreeMap;

use kube::{
    Api, Client,
    api::{ListParams, ObjectList},
};
use serde::de::DeserializeOwned;
use taint_operator_crd::TaintPolicy;

use crate::{
    cache::{node_cache::WatchedNode, pod_watch::wanted_watches, slim::SlimPod},
    drain::evictor,
    run,
    telemetry::{
        logs::{describe, one_line},
        metrics::Metrics,
    },
};
use engine::{
    cluster::{NodeView, PodIndex},
    drain,
    policy_set::PolicySet,
};

/// Per node and policy, the pods still in the way of the policy's drain of the node
/// (`namespace/name`).
pub type InTheWay = BTreeMap<(String, String), Vec<String>>;

/// Why the cluster could not be read, on one line.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    Connect(#[from] run::StartupError),
    #[error("cannot {what} from the API server at {url}: {message}")]
    Api {
        what: String,
        url: String,
        message: String,
    },
    #[error("node {0} not found")]
    NodeNotFound(String),
    #[error(
        "the TaintPolicy CRD (taintpolicies.nodetaint.io) is not installed in the cluster at {0}"
    )]
    CrdMissing(String),
}

/// A read-only connection to the cluster in KUBECONFIG (or in-cluster config).
pub struct Live {
    client: Client,
    url: String,
}

impl Live {
    pub async fn connect() -> Result<Self, LiveError> {
        // No request limit: a CLI sends a handful of lists.
        let (client, url) = run::client(&Metrics::default(), 0).await?;
        Ok(Live { client, url })
    }

    fn failed(&self, what: &str, e: kube::Error) -> LiveError {
        let message = match &e {
            kube::Error::Api(s) => one_line(&format!("{} ({})", s.message, s.code)),
            other => one_line(&describe(other)),
        };
        LiveError::Api {
            what: what.to_string(),
            url: self.url.clone(),
            message,
        }
    }

    /// Every TaintPolicy.
    pub async fn policies(&self) -> Result<Vec<TaintPolicy>, LiveError> {
        let api = Api::<TaintPolicy>::all(self.client.clone());
        match list_all(&api, ListParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                Err(LiveError::CrdMissing(self.url.clone()))
            }
            r => r.map_err(|e| self.failed("list taintpolicies", e)),
        }
    }

    /// Fails with [`LiveError::NodeNotFound`] unless the node exists.
    pub async fn node_exists(&self, name: &str) -> Result<(), LiveError> {
        let api = Api::<WatchedNode>::all(self.client.clone());
        match api.get_opt(name).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(LiveError::NodeNotFound(name.to_string())),
            Err(e) => Err(self.failed(&format!("get node {name}"), e)),
        }
    }

    /// Every node, as the decision core sees it.
    pub async fn nodes(&self) -> Result<Vec<NodeView>, LiveError> {
        let api = Api::<WatchedNode>::all(self.client.clone());
        let nodes = list_all(&api, ListParams::default())
            .await
            .map_err(|e| self.failed("list nodes", e))?;
        Ok(nodes.into_iter().map(|n| n.node.view).collect())
    }

    /// The critical pods `set`'s policies wait for, by the controller's own lists.
    pub async fn pods(&self, set: &PolicySet) -> Result<PodIndex, LiveError> {
        let mut pods = Vec::new();
        for (namespace, selector) in wanted_watches(set) {
            let api = Api::<SlimPod>::namespaced(self.client.clone(), &namespace);
            let found = list_all(&api, ListParams::default().labels(&selector))
                .await
                .map_err(|e| self.failed(&format!("list pods in {namespace} ({selector})"), e))?;
            pods.extend(found.into_iter().map(|p| p.0));
        }
        // A pod two selectors both pick is listed twice: keep one.
        pods.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        pods.dedup_by(|a, b| {
            a.metadata.namespace == b.metadata.namespace && a.metadata.name == b.metadata.name
        });
        Ok(PodIndex::from_pods(&pods))
    }
}

impl Live {
    /// The pods in the way of every drain of `nodes` that has started and not
    /// switched: one list of each such node's pods (field selector
    /// `spec.nodeName`), as the controller lists them before it evicts.
    pub async fn pods_in_the_way<'n>(
        &self,
        set: &PolicySet,
        nodes: impl IntoIterator<Item = &'n NodeView>,
    ) -> Result<InTheWay, LiveError> {
        let mut out = InTheWay::new();
        for node in nodes {
            let draining = drain::draining(set, node);
            if draining.is_empty() {
                continue;
            }
            let pods = evictor::pods_on(&self.client, &node.name)
                .await
                .map_err(|e| self.failed(&format!("list the pods of node {}", node.name), e))?;
            for i in draining {
                let taints: Vec<_> = drain::drained_taints(set, i).collect();
                let names = drain::in_the_way(&pods, &taints)
                    .map(drain::pod_key)
                    .collect();
                out.insert((node.name.clone(), set.policies[i].name.clone()), names);
            }
        }
        Ok(out)
    }
}

/// Every page of a list, 500 objects a page, as the controller's pod lists read them.
async fn list_all<K>(api: &Api<K>, params: ListParams) -> Result<Vec<K>, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.limit(500);
    let mut out = Vec::new();
    loop {
        let page: ObjectList<K> = api.list(&params).await?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}
