//! All policies together: a stable order (oldest first) and, for every declared
//! taint, which policy owns it when several declare the same key+effect.

use std::collections::{BTreeMap, HashMap};

use crate::short_str::same;

use taint_operator_crd::{TaintEffect, TaintPolicy};

use crate::{
    cluster::{NodeCondition, NodeView},
    labels::LabelMap,
    ownership::taint_id,
    policy::CompiledPolicy,
    selector::{LabelKeys, LabelValue, Selector, SlotSelector},
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub taint_id: String,
    pub owner: String,
}

/// A taint an active (valid, not dry-run, not deleting) policy declares and owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    /// `<key>:<effect>`.
    pub id: String,
    /// Index of the policy.
    pub policy: usize,
    /// Index of the taint in the policy's `taints`.
    pub taint: usize,
}

#[derive(Debug, Clone)]
pub struct PolicySet {
    /// Oldest first (creationTimestamp, then name): the order conflicts are settled in.
    pub policies: Vec<CompiledPolicy>,
    owners: HashMap<String, usize>,
    /// Policy name → index (the first, should two share a name).
    names: HashMap<String, usize>,
    /// The taints active policies own, by id (see [`Owned`]).
    owned: Vec<Owned>,
    /// The label keys every node selector reads, and each valid policy's node
    /// selector on those slots (`None` when its spec is invalid): see [`LabelKeys`].
    label_keys: LabelKeys,
    node_selectors: Vec<Option<SlotSelector>>,
    /// Every distinct critical-pod look-up, and per policy the one each of its critical
    /// pods makes (none when invalid): policies that wait for the same pods share it.
    pod_checks: Vec<PodCheck>,
    pod_checks_of: Vec<Vec<usize>>,
    /// Every condition type a valid policy reads, each in a slot, and per policy the
    /// slot of each condition it reads (matchers group after group, then readiness):
    /// a node's conditions are then looked up once for all policies.
    condition_types: Vec<String>,
    condition_slots: Vec<Vec<usize>>,
}

/// Pods of a namespace that a selector picks: what a critical-pod entry looks for.
#[derive(Debug, Clone, PartialEq)]
pub struct PodCheck {
    pub namespace: String,
    pub selector: Selector,
}

impl PolicySet {
    pub fn new(policies: impl IntoIterator<Item = CompiledPolicy>) -> Self {
        let mut policies: Vec<CompiledPolicy> = policies.into_iter().collect();
        policies.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
        let mut owners = HashMap::new();
        for (i, p) in policies.iter().enumerate() {
            // A policy being deleted gives its taints up at once, so a newer policy
            // declaring the same taint takes over instead of waiting for the cleanup.
            if p.deleting {
                continue;
            }
            for id in p.taint_ids() {
                owners.entry(id).or_insert(i);
            }
        }
        let mut names = HashMap::new();
        for (i, p) in policies.iter().enumerate() {
            names.entry(p.name.clone()).or_insert(i);
        }
        // Sorted by id; where a policy declares an id twice its last taint counts.
        let mut owned: BTreeMap<&str, Owned> = BTreeMap::new();
        for (i, p) in policies.iter().enumerate() {
            if !p.is_active() {
                continue;
            }
            for (t, id) in p.ids.iter().enumerate() {
                if owners.get(id) == Some(&i) {
                    owned.insert(
                        id,
                        Owned {
                            id: id.clone(),
                            policy: i,
                            taint: t,
                        },
                    );
                }
            }
        }
        let owned = owned.into_values().collect();
        let mut label_keys = LabelKeys::default();
        let node_selectors = policies
            .iter()
            .map(|p| {
                let rules = p.rules.as_ref().ok()?;
                Some(rules.node_selector.slotted(&mut label_keys))
            })
            .collect();
        let mut pod_checks: Vec<PodCheck> = Vec::new();
        let pod_checks_of = policies
            .iter()
            .map(|p| {
                let Some(readiness) = p.rules.as_ref().ok().and_then(|r| r.readiness.as_ref())
                else {
                    return Vec::new();
                };
                readiness
                    .critical_pods
                    .iter()
                    .map(|cp| {
                        let check = PodCheck {
                            namespace: cp.namespace.clone(),
                            selector: cp.selector.clone(),
                        };
                        pod_checks
                            .iter()
                            .position(|c| *c == check)
                            .unwrap_or_else(|| {
                                pod_checks.push(check);
                                pod_checks.len() - 1
                            })
                    })
                    .collect()
            })
            .collect();
        let mut condition_types: Vec<String> = Vec::new();
        let condition_slots = policies
            .iter()
            .map(|p| {
                let Ok(rules) = &p.rules else {
                    return Vec::new();
                };
                let matchers = rules.matchers.iter().flatten().map(|c| &c.type_);
                let readiness = rules.readiness.iter().flat_map(|r| &r.conditions);
                matchers
                    .chain(readiness.map(|c| &c.type_))
                    .map(|type_| {
                        condition_types
                            .iter()
                            .position(|t| t == type_)
                            .unwrap_or_else(|| {
                                condition_types.push(type_.clone());
                                condition_types.len() - 1
                            })
                    })
                    .collect()
            })
            .collect();
        PolicySet {
            policies,
            owners,
            names,
            owned,
            label_keys,
            node_selectors,
            pod_checks,
            pod_checks_of,
            condition_types,
            condition_slots,
        }
    }

    /// The node's values of the label keys node selectors read, for [`Self::selects`].
    pub fn label_values(&self, labels: &impl LabelMap) -> Vec<LabelValue> {
        self.label_keys.values(labels)
    }

    /// [`Self::label_values`] into `values` (cleared first), to reuse its buffer.
    pub fn label_values_into(&self, labels: &impl LabelMap, values: &mut Vec<LabelValue>) {
        self.label_keys.values_into(labels, values)
    }

    /// True when policy `i` is valid and its node selector matches the node whose
    /// [`Self::label_values`] these are.
    pub fn selects(&self, i: usize, label_values: &[LabelValue]) -> bool {
        self.node_selectors[i]
            .as_ref()
            .is_some_and(|s| s.matches(label_values))
    }

    /// The node's first condition of each type in a condition slot, into `found`
    /// (cleared first).
    pub fn conditions_into<'a>(
        &self,
        node: &'a NodeView,
        found: &mut Vec<Option<&'a NodeCondition>>,
    ) {
        found.clear();
        found.resize(self.condition_types.len(), None);
        for c in &node.conditions {
            // `==` compares lengths before bytes: few types are read at all.
            if let Some(slot) = self.condition_types.iter().position(|t| same(t, &c.type_)) {
                found[slot].get_or_insert(c);
            }
        }
    }

    /// The condition slots policy `i` reads: its matchers' conditions group after
    /// group, then its readiness conditions (none when it is invalid).
    pub fn condition_slots(&self, i: usize) -> &[usize] {
        &self.condition_slots[i]
    }

    /// The distinct critical-pod look-ups of all policies.
    pub fn pod_checks(&self) -> &[PodCheck] {
        &self.pod_checks
    }

    /// The index in [`Self::pod_checks`] of each critical pod of policy `i`, in order.
    pub fn pod_checks_of(&self, i: usize) -> &[usize] {
        &self.pod_checks_of[i]
    }

    /// Some policy decides a node by counting other nodes: `maxTaintedNodes` (how
    /// many carry its taints) or `spec.eviction` (drains per minute, zones paused).
    /// A plan under such a set is only right once every node is known; any other
    /// plan reads the node, its pods and the policies alone.
    pub fn counts_across_nodes(&self) -> bool {
        self.policies.iter().any(|p| {
            p.rules
                .as_ref()
                .is_ok_and(|r| r.max_tainted_nodes.is_some() || r.eviction.is_some())
        })
    }

    pub fn from_resources<'a>(policies: impl IntoIterator<Item = &'a TaintPolicy>) -> Self {
        Self::new(policies.into_iter().map(CompiledPolicy::compile))
    }

    /// The index of the policy that owns a taint id, if any live policy declares it.
    pub fn owner_of(&self, taint_id: &str) -> Option<usize> {
        self.owners.get(taint_id).copied()
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.get(name).copied()
    }

    /// Every taint an active policy owns, sorted by id: what planning a node walks,
    /// fixed for the set, so a plan needs no map of its own and no owner look-ups.
    pub fn owned(&self) -> &[Owned] {
        &self.owned
    }

    /// The declared taints of policy `i` that an older policy owns.
    pub fn conflicts(&self, i: usize) -> Vec<Conflict> {
        let p = &self.policies[i];
        if p.deleting {
            return Vec::new();
        }
        p.taint_ids()
            .filter_map(|id| {
                let owner = self.owner_of(&id)?;
                (owner != i).then(|| Conflict {
                    owner: self.policies[owner].name.clone(),
                    taint_id: id,
                })
            })
            .collect()
    }
}

/// True when the node carries one of policy `i`'s taints, owned by it, that it
/// keeps: a taint an older policy also declares passes to that policy with the
/// node's next write, so it does not count (in a cap, a status or a `for` window
/// already served) for this one. A drain's stand-in (the NoSchedule taint under
/// the key of a NoExecute taint it drains before) holds the node's place as the
/// taint it stands in for.
pub fn carries(set: &PolicySet, i: usize, node: &NodeView) -> bool {
    let p = &set.policies[i];
    if node.managed.is_empty() {
        return false;
    }
    let owns = |key: &str, effect: &str, id: &str| {
        node.managed.owner(id) == Some(p.name.as_str())
            && set.owner_of(id).is_none_or(|owner| owner == i)
            && node
                .taints
                .iter()
                .any(|n| n.key == key && n.effect == effect)
    };
    let evicts = p.rules.as_ref().is_ok_and(|r| r.eviction.is_some());
    p.taints.iter().zip(&p.ids).any(|(t, id)| {
        owns(&t.key, t.effect.as_str(), id)
            || (evicts
                && t.effect == TaintEffect::NoExecute
                && set.owner_of(id) == Some(i)
                && owns(
                    &t.key,
                    TaintEffect::NoSchedule.as_str(),
                    &taint_id(&t.key, TaintEffect::NoSchedule.as_str()),
                ))
    })
}
