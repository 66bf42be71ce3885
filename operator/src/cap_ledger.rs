//! `maxTaintedNodes` in the controller: which nodes carry each capped policy's
//! taints, so a new node is admitted only while there is room. Reconciles run
//! concurrently, so admission reserves the place under one lock.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::Store;

use crate::{
    cluster::NodeView, decision::NodeEvaluation, node_plan::carries, policy_set::PolicySet,
};

#[derive(Default, Debug)]
pub struct CapLedger {
    /// Policy name → nodes carrying (or reserved to carry) its matcher taints.
    carrying: HashMap<String, HashSet<String>>,
}

impl CapLedger {
    /// For each policy: may this node newly carry its matcher-triggered taints?
    /// Admission reserves the place right away.
    pub fn admit(
        &mut self,
        set: &PolicySet,
        eval: &NodeEvaluation,
        node: &NodeView,
        nodes: &Store<Node>,
    ) -> Vec<bool> {
        (0..set.policies.len())
            .map(|i| {
                let p = &set.policies[i];
                let e = &eval.policies[i];
                if !e.capped() || carries(set, i, node) {
                    return true;
                }
                let selected = match &p.rules {
                    Ok(rules) => nodes
                        .state()
                        .iter()
                        .filter(|n| {
                            rules
                                .node_selector
                                .matches(n.metadata.labels.as_ref().unwrap_or(&Default::default()))
                        })
                        .count(),
                    Err(_) => 0,
                };
                let Some(limit) = p.tainted_limit(selected) else {
                    return true;
                };
                let carrying = self.carrying.entry(p.name.clone()).or_default();
                // Nodes that left the cluster hold no place.
                carrying.retain(|n| {
                    nodes
                        .get(&kube::runtime::reflector::ObjectRef::new(n))
                        .is_some()
                });
                if carrying.contains(&node.name) || carrying.len() < limit {
                    carrying.insert(node.name.clone());
                    true
                } else {
                    false
                }
            })
            .collect()
    }

    /// Records what the node carries after a reconcile, freeing places it no longer holds.
    pub fn observe(&mut self, set: &PolicySet, node: &NodeView) {
        for (i, p) in set.policies.iter().enumerate() {
            let Ok(rules) = &p.rules else { continue };
            if rules.max_tainted_nodes.is_none() {
                continue;
            }
            let carrying = self.carrying.entry(p.name.clone()).or_default();
            if carries(set, i, node) {
                carrying.insert(node.name.clone());
            } else {
                carrying.remove(&node.name);
            }
        }
    }
}
