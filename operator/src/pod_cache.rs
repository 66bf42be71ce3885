//! The critical pods the operator knows of, fed by several label-selected watches.
//!
//! Two policies' selectors can match the same pod, so each pod remembers which
//! watches reported it and leaves the index only when the last one forgets it.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::{PodIndex, PodView, bound_node};

struct Entry {
    node: Option<String>,
    view: PodView,
    sources: BTreeSet<u64>,
}

#[derive(Default)]
pub struct PodCache {
    entries: HashMap<(String, String), Entry>,
    index: PodIndex,
}

impl PodCache {
    pub fn index(&self) -> &PodIndex {
        &self.index
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records `pod` as seen by watch `source`. Returns the nodes whose evaluation may change.
    pub fn upsert(&mut self, source: u64, pod: &Pod) -> Vec<String> {
        let view = PodView::from_pod(pod);
        let node = bound_node(pod).map(str::to_string);
        let key = (view.namespace.clone(), view.name.clone());
        let mut affected = Vec::new();
        match self.entries.get_mut(&key) {
            Some(e) => {
                e.sources.insert(source);
                if e.node == node && e.view == view {
                    return affected;
                }
                if let Some(old) = &e.node {
                    self.index.remove(old, &key.0, &key.1);
                    affected.push(old.clone());
                }
                e.node = node.clone();
                e.view = view.clone();
            }
            None => {
                self.entries.insert(
                    key,
                    Entry {
                        node: node.clone(),
                        view: view.clone(),
                        sources: BTreeSet::from([source]),
                    },
                );
            }
        }
        if let Some(n) = node {
            self.index.insert(&n, view);
            if !affected.contains(&n) {
                affected.push(n);
            }
        }
        affected
    }

    /// Watch `source` no longer reports the pod. Returns the node whose evaluation may change.
    pub fn forget(&mut self, source: u64, namespace: &str, name: &str) -> Option<String> {
        let key = (namespace.to_string(), name.to_string());
        let e = self.entries.get_mut(&key)?;
        e.sources.remove(&source);
        if !e.sources.is_empty() {
            return None;
        }
        let e = self.entries.remove(&key)?;
        let node = e.node?;
        self.index.remove(&node, namespace, name);
        Some(node)
    }

    /// Forgets everything watch `source` reported (the watch was stopped).
    pub fn forget_source(&mut self, source: u64) -> Vec<String> {
        let keys: Vec<(String, String)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.sources.contains(&source))
            .map(|(k, _)| k.clone())
            .collect();
        keys.iter()
            .filter_map(|(ns, name)| self.forget(source, ns, name))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use kube::api::ObjectMeta;

    fn pod(name: &str, node: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("kube-system".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn a_pod_seen_by_two_watches_stays_until_both_forget_it() {
        let mut c = PodCache::default();
        assert_eq!(c.upsert(1, &pod("a", "n1", true)), vec!["n1"]);
        assert_eq!(c.upsert(2, &pod("a", "n1", true)), Vec::<String>::new());
        assert_eq!(c.forget(1, "kube-system", "a"), None);
        assert_eq!(c.index().pods("n1", "kube-system").len(), 1);
        assert_eq!(c.forget(2, "kube-system", "a"), Some("n1".into()));
        assert!(c.index().pods("n1", "kube-system").is_empty());
        assert!(c.is_empty());
    }

    #[test]
    fn readiness_changes_and_moves_update_the_index() {
        let mut c = PodCache::default();
        c.upsert(1, &pod("a", "n1", false));
        assert_eq!(c.upsert(1, &pod("a", "n1", true)), vec!["n1"]);
        assert!(c.index().pods("n1", "kube-system")[0].ready);
        assert_eq!(c.upsert(1, &pod("a", "n2", true)), vec!["n1", "n2"]);
        assert!(c.index().pods("n1", "kube-system").is_empty());
        assert_eq!(c.forget_source(1), vec!["n2"]);
        assert_eq!(c.len(), 0);
    }
}
