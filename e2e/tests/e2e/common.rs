//! What the scenarios share: names and labels per scenario, and the checks of a
//! node's taints and annotations and of a policy's status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use taint_operator_e2e::{
    Cond, K, PolicyView, Result, bail, eventually,
    k8s::{bootstrapped, managed, taint_strs},
};

/// The label every object of a scenario carries; policies select their nodes by it,
/// so scenarios never see each other's nodes.
pub const SCENARIO_LABEL: &str = "e2e.nodetaint.io/scenario";

#[derive(Clone, Copy)]
pub struct Scn(pub &'static str);

impl Scn {
    pub fn label(&self) -> (&'static str, &'static str) {
        (SCENARIO_LABEL, self.0)
    }

    /// A node name of this scenario.
    pub fn node(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.0)
    }

    /// Creates these nodes with the scenario's label and `condition` set.
    pub async fn create_nodes<N: AsRef<str>>(
        &self,
        k: &K,
        nodes: impl IntoIterator<Item = N>,
        condition: &Cond,
    ) -> Result {
        for n in nodes {
            k.create_node(n.as_ref(), &[self.label()]).await?;
            k.set_conditions(n.as_ref(), std::slice::from_ref(condition))
                .await?;
        }
        Ok(())
    }

    /// A policy of this scenario: labelled, selecting this scenario's nodes plus
    /// `match_labels`, with `spec` merged in.
    pub fn policy(&self, name: &str, match_labels: &[(&str, &str)], spec: Value) -> Value {
        let mut labels: serde_json::Map<String, Value> = match_labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        labels.insert(SCENARIO_LABEL.into(), json!(self.0));
        let mut spec = spec;
        spec["nodeSelector"]["matchLabels"] = Value::Object(labels);
        json!({
            "metadata": {"name": name, "labels": {SCENARIO_LABEL: self.0}},
            "spec": spec,
        })
    }

    /// An example policy from examples/, renamed, labelled and limited to this
    /// scenario's nodes (its own nodeSelector is kept and the scenario label added).
    pub fn example_policy(&self, mut example: Value, name: &str) -> Value {
        example["metadata"] = json!({"name": name, "labels": {SCENARIO_LABEL: self.0}});
        let mut selector = example["spec"]
            .get("nodeSelector")
            .cloned()
            .unwrap_or_else(|| json!({}));
        selector["matchLabels"][SCENARIO_LABEL] = json!(self.0);
        example["spec"]["nodeSelector"] = selector;
        example
    }
}

/// Owned-taint map `{"<key>:<effect>": "<policy>"}` from pairs.
pub fn owned(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    taint_operator_e2e::k8s::map(pairs)
}

/// One look at a node: exactly these taints (`key=value:Effect`, any order) and
/// exactly this ownership annotation.
pub fn node_is(
    node: &Node,
    taints: &[&str],
    managed_taints: &BTreeMap<String, String>,
) -> Result<()> {
    let mut want: Vec<String> = taints.iter().map(|s| s.to_string()).collect();
    want.sort();
    let got = taint_strs(node);
    let got_managed = managed(node)?;
    if got != want || &got_managed != managed_taints {
        bail!(
            "node {} has taints {got:?} and managed-taints {got_managed:?}; want {want:?} and {managed_taints:?}",
            node.metadata.name.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

pub async fn check_node(
    k: &K,
    name: &str,
    taints: &[&str],
    managed_taints: &BTreeMap<String, String>,
) -> Result<Node> {
    let n = k.node(name).await?;
    node_is(&n, taints, managed_taints)?;
    Ok(n)
}

/// Waits until the node has exactly `taints` and the ownership annotation `managed_taints`.
pub async fn expect_node(
    k: &K,
    name: &str,
    taints: &[&str],
    managed_taints: &BTreeMap<String, String>,
) -> Result<Node> {
    eventually(format!("node {name} to converge"), async || {
        check_node(k, name, taints, managed_taints).await
    })
    .await
}

/// Like `expect_node`, and the node records `policy`'s bootstrap completion with `uid`.
pub async fn expect_node_bootstrapped(
    k: &K,
    name: &str,
    taints: &[&str],
    managed_taints: &BTreeMap<String, String>,
    policy: &str,
    uid: &str,
) -> Result<Node> {
    eventually(
        format!("node {name} to converge, bootstrapped by {policy}"),
        async || {
            let n = check_node(k, name, taints, managed_taints).await?;
            check_bootstrapped(&n, policy, uid)?;
            Ok(n)
        },
    )
    .await
}

/// The node's bootstrap record for `policy`: checks it is `<uid>@<RFC 3339>` with the given uid.
pub fn check_bootstrapped(node: &Node, policy: &str, uid: &str) -> Result<()> {
    let b = bootstrapped(node)?;
    let Some(v) = b.get(policy) else {
        bail!("no bootstrap record for {policy}: {b:?}");
    };
    let Some((got_uid, at)) = v.split_once('@') else {
        bail!("bootstrap record {v:?} is not <uid>@<time>");
    };
    if got_uid != uid {
        bail!("bootstrap record {v:?} names uid {got_uid}, want {uid}");
    }
    let at: k8s_openapi::jiff::Timestamp = at
        .parse()
        .map_err(|e| format!("bootstrap time {at:?} is not RFC 3339: {e}"))?;
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(at);
    if age.as_secs() < -2 || age.as_secs() > 600 {
        bail!("bootstrap time {at} is not recent");
    }
    Ok(())
}

/// Waits until the policy's status reports, for its current generation, exactly this.
pub async fn expect_status(
    k: &K,
    policy: &str,
    ready: &str,
    reason: &str,
    counts: (i32, i32, i32),
) -> Result<PolicyView> {
    eventually(
        format!(
            "status of policy {policy}: Ready={ready} {reason} selected/tainted/pending={counts:?}"
        ),
        async || {
            let v = k.policy_view(policy).await?;
            v.check(ready, reason, counts.0, counts.1, counts.2)?;
            Ok(v)
        },
    )
    .await
}

/// Like `expect_status`, and the sorted tainted node names too.
pub async fn expect_status_names(
    k: &K,
    policy: &str,
    ready: &str,
    reason: &str,
    counts: (i32, i32, i32),
    names: &[&str],
) -> Result<PolicyView> {
    eventually(
        format!(
            "status of policy {policy}: Ready={ready} {reason} counts {counts:?} names {names:?}"
        ),
        async || {
            let v = k.policy_view(policy).await?;
            v.check(ready, reason, counts.0, counts.1, counts.2)?;
            if v.tainted_names != names {
                bail!("taintedNodeNames {:?}, want {names:?}", v.tainted_names);
            }
            Ok(v)
        },
    )
    .await
}

/// Waits until the node carries no taints and no ownership or bootstrap annotation entries.
pub async fn expect_clean(k: &K, name: &str) -> Result<Node> {
    eventually(format!("node {name} to be clean"), async || {
        let n = k.node(name).await?;
        node_is(&n, &[], &BTreeMap::new())?;
        let b = bootstrapped(&n)?;
        if !b.is_empty() {
            bail!("bootstrap records left: {b:?}");
        }
        Ok(n)
    })
    .await
}
