//! What the tests do to the cluster, with the admin credentials: create Nodes and
//! set their conditions, run "pods" (created bound, marked Ready through status),
//! create and edit TaintPolicies, and read back taints, annotations and events.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        core::v1::{Namespace, Node, Pod, Taint},
        events::v1::Event,
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::{ApiResource, Status},
};
use serde_json::{Value, json};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, FINALIZER, MANAGED_TAINTS_ANNOTATION, TaintPolicy,
};

use crate::{Result, bail, eventually};

/// A node condition the test sets: type, status, reason, and when it last changed.
#[derive(Debug, Clone)]
pub struct Cond {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub since: Timestamp,
    /// `lastHeartbeatTime`; `since` when not set.
    pub heartbeat: Option<Timestamp>,
}

impl Cond {
    /// A condition that changed just now (to the second, as the API keeps it).
    pub fn now(type_: &str, status: &str, reason: &str) -> Self {
        Cond::since(type_, status, reason, now_s())
    }

    pub fn since(type_: &str, status: &str, reason: &str, since: Timestamp) -> Self {
        Cond {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            since,
            heartbeat: None,
        }
    }

    /// The same condition, last confirmed at `at` (its transition unchanged).
    pub fn seen_at(mut self, at: Timestamp) -> Self {
        self.heartbeat = Some(at);
        self
    }

    fn to_json(&self) -> Value {
        let t = self.since.to_string();
        json!({
            "type": self.type_,
            "status": self.status,
            "reason": self.reason,
            "message": format!("set by the e2e suite"),
            "lastTransitionTime": t,
            "lastHeartbeatTime": self.heartbeat.map_or(t, |h| h.to_string()),
        })
    }
}

/// Now, truncated to the second (what `lastTransitionTime` can hold).
pub fn now_s() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).expect("now is in range")
}

/// `key=value:Effect` (or `key:Effect`), the way `kubectl` and the policy status show taints.
pub fn taint_str(t: &Taint) -> String {
    match &t.value {
        Some(v) => format!("{}={}:{}", t.key, v, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

pub fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// The node's taints as sorted `key=value:Effect` strings.
pub fn taint_strs(node: &Node) -> Vec<String> {
    let mut v: Vec<String> = taints(node).iter().map(taint_str).collect();
    v.sort();
    v
}

fn annotation_map(node: &Node, key: &str) -> Result<BTreeMap<String, String>> {
    match node.annotations().get(key) {
        None => Ok(BTreeMap::new()),
        Some(v) => serde_json::from_str(v).map_err(|e| {
            format!("annotation {key}={v:?} is not a JSON object of strings: {e}").into()
        }),
    }
}

/// `nodetaint.io/managed-taints` as a map (empty when absent).
pub fn managed(node: &Node) -> Result<BTreeMap<String, String>> {
    annotation_map(node, MANAGED_TAINTS_ANNOTATION)
}

/// `nodetaint.io/bootstrapped` as a map (empty when absent).
pub fn bootstrapped(node: &Node) -> Result<BTreeMap<String, String>> {
    annotation_map(node, BOOTSTRAPPED_ANNOTATION)
}

/// A `BTreeMap<String, String>` from pairs, for comparing annotations.
pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The parts of a TaintPolicy the tests look at.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyView {
    pub uid: String,
    pub generation: i64,
    pub observed_generation: Option<i64>,
    pub finalizers: Vec<String>,
    pub deleting: bool,
    pub taints: Option<String>,
    pub selected: i32,
    pub tainted: i32,
    pub pending: i32,
    pub tainted_names: Vec<String>,
    /// Ready condition: status, reason, message, observedGeneration.
    pub ready: Option<(String, String, String, Option<i64>)>,
}

impl PolicyView {
    pub fn from(p: &TaintPolicy) -> Self {
        let status = p.status.clone().unwrap_or_default();
        PolicyView {
            uid: p.uid().unwrap_or_default(),
            generation: p.metadata.generation.unwrap_or_default(),
            observed_generation: status.observed_generation,
            finalizers: p.finalizers().to_vec(),
            deleting: p.metadata.deletion_timestamp.is_some(),
            taints: status.taints.clone(),
            selected: status.selected_nodes,
            tainted: status.tainted_nodes,
            pending: status.pending_nodes,
            tainted_names: status.tainted_node_names.clone(),
            ready: status
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| {
                    (
                        c.status.clone(),
                        c.reason.clone(),
                        c.message.clone(),
                        c.observed_generation,
                    )
                }),
        }
    }

    pub fn ready_status(&self) -> &str {
        self.ready.as_ref().map_or("", |r| r.0.as_str())
    }

    pub fn reason(&self) -> &str {
        self.ready.as_ref().map_or("", |r| r.1.as_str())
    }

    pub fn message(&self) -> &str {
        self.ready.as_ref().map_or("", |r| r.2.as_str())
    }

    /// Checks the status of the current generation: Ready status and reason, and counts.
    pub fn check(
        &self,
        ready: &str,
        reason: &str,
        selected: i32,
        tainted: i32,
        pending: i32,
    ) -> Result<()> {
        let got = (
            self.observed_generation,
            self.ready.as_ref().and_then(|r| r.3),
            self.ready_status(),
            self.reason(),
            self.selected,
            self.tainted,
            self.pending,
        );
        let want = (
            Some(self.generation),
            Some(self.generation),
            ready,
            reason,
            selected,
            tainted,
            pending,
        );
        if got != want {
            bail!(
                "status (observedGeneration, Ready.observedGeneration, Ready, reason, selected, tainted, pending) = {got:?}, want {want:?} (message {:?})",
                self.message()
            );
        }
        Ok(())
    }
}

/// The API server's answer inside an error, if the error is one.
pub fn api_error(e: &crate::Error) -> Option<&Status> {
    match e.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(s)) => Some(s.as_ref()),
        _ => None,
    }
}

#[derive(Clone)]
pub struct K {
    pub client: Client,
}

impl K {
    pub fn new(client: Client) -> Self {
        K { client }
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn policies(&self) -> Api<TaintPolicy> {
        Api::all(self.client.clone())
    }

    /// The TaintPolicy API untyped, to send what the typed spec cannot even express.
    pub fn raw_policies(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &ApiResource::erase::<TaintPolicy>(&()))
    }

    // ------------------------------------------------------------------ nodes

    pub async fn create_node(&self, name: &str, labels: &[(&str, &str)]) -> Result<Node> {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": map(labels)},
        }))?;
        Ok(self.nodes().create(&PostParams::default(), &node).await?)
    }

    /// Creates a node that already carries `taints` (someone else's).
    pub async fn create_node_with_taints(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        taints: Value,
    ) -> Result<Node> {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": map(labels)},
            "spec": {"taints": taints},
        }))?;
        Ok(self.nodes().create(&PostParams::default(), &node).await?)
    }

    pub async fn node(&self, name: &str) -> Result<Node> {
        Ok(self.nodes().get(name).await?)
    }

    /// Replaces the node's whole condition list through the status subresource.
    pub async fn set_conditions(&self, node: &str, conds: &[Cond]) -> Result<()> {
        let conditions: Vec<Value> = conds.iter().map(Cond::to_json).collect();
        self.nodes()
            .patch_status(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": conditions}})),
            )
            .await?;
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) one label.
    pub async fn label_node(&self, node: &str, key: &str, value: Option<&str>) -> Result<()> {
        self.nodes()
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
            )
            .await?;
        Ok(())
    }

    /// Adds a taint of our own, as an admin would (`kubectl taint`): read, append,
    /// write with the resourceVersion read, retrying on conflicts.
    pub async fn add_foreign_taint(&self, node: &str, taint: Value) -> Result<()> {
        let taint: Taint = serde_json::from_value(taint)?;
        for _ in 0..20 {
            let n = self.node(node).await?;
            let mut ts = taints(&n);
            ts.retain(|t| !(t.key == taint.key && t.effect == taint.effect));
            ts.push(taint.clone());
            let patch = json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": n.resource_version()},
                {"op": "add", "path": "/spec/taints", "value": ts},
            ]);
            match self.json_patch_node(node, patch).await {
                Ok(()) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e),
            }
        }
        bail!("could not add a taint to {node}: 20 conflicts in a row")
    }

    pub async fn json_patch_node(&self, node: &str, patch: Value) -> Result<()> {
        let patch: json_patch::Patch = serde_json::from_value(patch)?;
        self.nodes()
            .patch(node, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await?;
        Ok(())
    }

    // ------------------------------------------------------------------ pods

    pub async fn ensure_namespace(&self, ns: &str) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A pod bound to `node` (no scheduler needed); not Ready until `set_pod_ready`.
    pub async fn create_pod(
        &self,
        ns: &str,
        name: &str,
        node: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Result<Pod> {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": map(labels), "annotations": map(annotations)},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            },
        }))?;
        Ok(self.pods(ns).create(&PostParams::default(), &pod).await?)
    }

    /// Running, with the `Ready` condition `True` or `False`, as kubelet would report it.
    pub async fn set_pod_ready(&self, ns: &str, name: &str, ready: bool) -> Result<()> {
        let t = now_s().to_string();
        let status = if ready { "True" } else { "False" };
        self.pods(ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "phase": "Running",
                    "conditions": [
                        {"type": "Ready", "status": status, "lastTransitionTime": t},
                        {"type": "ContainersReady", "status": status, "lastTransitionTime": t},
                    ],
                }})),
            )
            .await?;
        Ok(())
    }

    pub async fn annotate_pod(
        &self,
        ns: &str,
        name: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<()> {
        self.pods(ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await?;
        Ok(())
    }

    pub async fn delete_pod(&self, ns: &str, name: &str) -> Result<()> {
        // No kubelet: a graceful delete would wait for one forever.
        self.pods(ns)
            .delete(name, &DeleteParams::default().grace_period(0))
            .await?;
        Ok(())
    }

    // ------------------------------------------------------------------ policies

    /// Creates a TaintPolicy from JSON (`apiVersion`/`kind` added when missing).
    /// Creates a policy. One that does not say `clearAfter` gets `0s`: the scenarios
    /// time how soon a taint comes off once its condition clears, and the default
    /// (2m) has a scenario of its own.
    pub async fn create_policy(&self, mut policy: Value) -> Result<TaintPolicy> {
        if policy["spec"].get("clearAfter").is_none() {
            policy["spec"]["clearAfter"] = json!("0s");
        }
        policy["apiVersion"] = json!("nodetaint.io/v1alpha1");
        policy["kind"] = json!("TaintPolicy");
        let obj: DynamicObject = serde_json::from_value(policy)?;
        let created = self
            .raw_policies()
            .create(&PostParams::default(), &obj)
            .await?;
        Ok(self.policies().get(&created.name_any()).await?)
    }

    pub async fn policy(&self, name: &str) -> Result<TaintPolicy> {
        Ok(self.policies().get(name).await?)
    }

    pub async fn policy_view(&self, name: &str) -> Result<PolicyView> {
        Ok(PolicyView::from(&self.policy(name).await?))
    }

    /// A JSON merge patch of the policy (`{"spec": {...}}`).
    pub async fn patch_policy(&self, name: &str, patch: Value) -> Result<TaintPolicy> {
        Ok(self
            .policies()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?)
    }

    pub async fn delete_policy(&self, name: &str) -> Result<()> {
        match self.policies().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn wait_policy_gone(&self, name: &str) -> Result<()> {
        eventually(format!("policy {name} to be gone"), async || {
            match self.policies().get_opt(name).await? {
                None => Ok(()),
                Some(p) => bail!(
                    "still there (deletionTimestamp {:?}, finalizers {:?})",
                    p.metadata.deletion_timestamp,
                    p.finalizers()
                ),
            }
        })
        .await
    }

    /// Deletes every policy carrying label `key=value` and waits until they are gone.
    pub async fn delete_policies_labelled(&self, key: &str, value: &str) -> Result<()> {
        let list = self
            .policies()
            .list(&ListParams::default().labels(&format!("{key}={value}")))
            .await?;
        for p in &list {
            self.delete_policy(&p.name_any()).await?;
        }
        for p in &list {
            self.wait_policy_gone(&p.name_any()).await?;
        }
        Ok(())
    }

    /// Waits until the operator has put its finalizer on the policy.
    pub async fn wait_finalizer(&self, name: &str) -> Result<()> {
        eventually(
            format!("finalizer {FINALIZER} on policy {name}"),
            async || {
                let v = self.policy_view(name).await?;
                if v.finalizers.iter().any(|f| f == FINALIZER) {
                    Ok(())
                } else {
                    bail!("finalizers {:?}", v.finalizers)
                }
            },
        )
        .await
    }

    // ------------------------------------------------------------------ events

    /// events.k8s.io/v1 Events about object `kind`/`name` (both cluster-scoped kinds
    /// we care about get their events in `default`), oldest first.
    pub async fn events_about(&self, kind: &str, name: &str) -> Result<Vec<Event>> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), "default");
        let mut events: Vec<Event> = api
            .list(&ListParams::default())
            .await?
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                })
            })
            .collect();
        events.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        Ok(events)
    }

    /// Waits for an event about `kind`/`name` with `reason` whose note contains every
    /// string of `note_has`; returns it.
    pub async fn wait_event(
        &self,
        kind: &str,
        name: &str,
        reason: &str,
        note_has: &[&str],
    ) -> Result<Event> {
        eventually(
            format!("a {reason} event about {kind} {name} whose note has {note_has:?}"),
            async || {
                let events = self.events_about(kind, name).await?;
                if let Some(e) = events.iter().find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && note_has
                            .iter()
                            .all(|s| e.note.as_deref().unwrap_or("").contains(s))
                }) {
                    return Ok(e.clone());
                }
                let seen: Vec<String> = events
                    .iter()
                    .map(|e| {
                        format!(
                            "{}: {}",
                            e.reason.as_deref().unwrap_or(""),
                            e.note.as_deref().unwrap_or("")
                        )
                    })
                    .collect();
                bail!("events so far: {seen:?}")
            },
        )
        .await
    }
}

/// An API answer saying someone else changed the object first. A failed JSON-patch
/// `test` comes back as a bare 422 ("the server rejected our request due to an error
/// in our request") naming no field; an invalid object's 422 names its fields.
pub fn is_conflict(e: &crate::Error) -> bool {
    api_error(e).is_some_and(|s| {
        s.code == 409 || (s.code == 422 && s.details.as_ref().is_none_or(|d| d.causes.is_empty()))
    })
}
