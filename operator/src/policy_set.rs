//! All policies together: a stable order (oldest first) and, for every declared
//! taint, which policy owns it when several declare the same key+effect.

use std::collections::HashMap;

use taint_operator_crd::TaintPolicy;

use crate::policy::CompiledPolicy;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub taint_id: String,
    pub owner: String,
}

#[derive(Debug, Clone)]
pub struct PolicySet {
    /// Oldest first (creationTimestamp, then name): the order conflicts are settled in.
    pub policies: Vec<CompiledPolicy>,
    owners: HashMap<String, usize>,
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
        PolicySet { policies, owners }
    }

    pub fn from_resources<'a>(policies: impl IntoIterator<Item = &'a TaintPolicy>) -> Self {
        Self::new(policies.into_iter().map(CompiledPolicy::compile))
    }

    /// The index of the policy that owns a taint id, if any live policy declares it.
    pub fn owner_of(&self, taint_id: &str) -> Option<usize> {
        self.owners.get(taint_id).copied()
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.policies.iter().position(|p| p.name == name)
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
