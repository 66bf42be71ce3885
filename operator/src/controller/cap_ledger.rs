//! `maxTaintedNodes` in the controller: which nodes carry each capped policy's
//! taints, so a new node is admitted only while there is room. Reconciles run
//! concurrently, so admission reserves the place under one lock.

use std::collections::{HashMap, HashSet};

use crate::cache::node_store::NodeStore;
use engine::{
    cluster::NodeView, decision::NodeEvaluation, node_plan::carries, policy_set::PolicySet,
};

#[derive(Default, Debug)]
pub struct CapLedger {
    /// Policy name → nodes carrying (or reserved to carry) its matcher taints.
    carrying: HashMap<String, HashSet<String>>,
    /// Policy name → nodes this replica has reconciled. For the others (all of them
    /// right after a start) the cache tells whether they carry the taints.
    observed: HashMap<String, HashSet<String>>,
    /// Policy name → nodes admission turned away, to wake when a place frees up.
    held: HashMap<String, HashSet<String>>,
}

impl CapLedger {
    /// For each policy: may this node newly carry its matcher-triggered taints?
    /// Admission reserves the place right away.
    pub fn admit(
        &mut self,
        set: &PolicySet,
        eval: &NodeEvaluation,
        node: &NodeView,
        nodes: &NodeStore,
    ) -> Vec<bool> {
        (0..set.policies.len())
            .map(|i| {
                let p = &set.policies[i];
                let e = &eval.policies[i];
                if !e.capped() || carries(set, i, node) {
                    if let Some(held) = self.held.get_mut(&p.name) {
                        held.remove(&node.name);
                    }
                    return true;
                }
                // Without a cap there is nothing to count: counting scans every cached
                // node, and doing it on every reconcile made a fleet-wide taint quadratic.
                if p.rules
                    .as_ref()
                    .is_ok_and(|r| r.max_tainted_nodes.is_none())
                {
                    return true;
                }
                let selected = match &p.rules {
                    Ok(rules) => nodes
                        .state()
                        .iter()
                        .filter(|n| rules.node_selector.matches(&n.view.labels))
                        .count(),
                    Err(_) => 0,
                };
                let Some(limit) = p.tainted_limit(selected) else {
                    return true;
                };
                let carrying = self.carrying.entry(p.name.clone()).or_default();
                // Nodes that left the cluster hold no place.
                carrying.retain(|n| nodes.get(n).is_some());
                // Nodes not reconciled since this replica started hold a place when
                // the cache shows them carrying the taints.
                let observed = self.observed.entry(p.name.clone()).or_default();
                observed.retain(|n| nodes.get(n).is_some());
                let cached = nodes
                    .state()
                    .iter()
                    .filter(|n| {
                        let name = n.name();
                        !observed.contains(name)
                            && !carrying.contains(name)
                            // Cheap test first: only an owner can carry.
                            && n.annotations
                                .managed
                                .as_deref()
                                .is_some_and(|v| v.contains(p.name.as_str()))
                            && carries(set, i, &n.view)
                    })
                    .count();
                let held = self.held.entry(p.name.clone()).or_default();
                if carrying.contains(&node.name) || carrying.len() + cached < limit {
                    carrying.insert(node.name.clone());
                    held.remove(&node.name);
                    true
                } else {
                    held.insert(node.name.clone());
                    false
                }
            })
            .collect()
    }

    /// Drops what it knows of policies that are no longer capped: reconciles do not
    /// report to the ledger while no policy is capped, so that knowledge would be
    /// stale if a cap came back. A fresh start counts from the cache.
    pub fn forget_uncapped(&mut self, set: &PolicySet) {
        let capped: HashSet<&str> = set
            .policies
            .iter()
            .filter(|p| {
                p.rules
                    .as_ref()
                    .is_ok_and(|r| r.max_tainted_nodes.is_some())
            })
            .map(|p| p.name.as_str())
            .collect();
        for map in [&mut self.carrying, &mut self.observed, &mut self.held] {
            map.retain(|policy, _| capped.contains(policy.as_str()));
        }
    }

    /// Records what the node carries after a reconcile (`before` is what it carried
    /// going in), freeing places it no longer holds. Returns the nodes held back by a
    /// policy that just got a free place: they must be evaluated again now, as nothing
    /// about them changed that would wake them.
    pub fn observe(&mut self, set: &PolicySet, before: &NodeView, node: &NodeView) -> Vec<String> {
        let mut wake = Vec::new();
        for (i, p) in set.policies.iter().enumerate() {
            let Ok(rules) = &p.rules else { continue };
            if rules.max_tainted_nodes.is_none() {
                continue;
            }
            self.observed
                .entry(p.name.clone())
                .or_default()
                .insert(node.name.clone());
            let carrying = self.carrying.entry(p.name.clone()).or_default();
            if carries(set, i, node) {
                carrying.insert(node.name.clone());
            } else if carrying.remove(&node.name) | carries(set, i, before) {
                let held = self.held.get(&p.name).into_iter().flatten();
                wake.extend(held.filter(|n| **n != node.name).cloned());
            }
        }
        wake.sort();
        wake.dedup();
        wake
    }
}
