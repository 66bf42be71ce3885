//! The critical pods the operator knows of, fed by several label-selected watches.
//!
//! Two policies' selectors can match the same pod, so each pod remembers which
//! watches reported it and leaves the index only when the last one forgets it.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::{PodIndex, PodView, bound_node};

/// The index holds the pod's view; an entry only says where it is and who reported it.
struct Entry {
    node: Option<Box<str>>,
    /// Usually one or two watches.
    sources: Vec<u64>,
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
        let node = bound_node(pod);
        let key = (view.namespace.to_string(), view.name.clone());
        let mut affected = Vec::new();
        match self.entries.get_mut(&key) {
            Some(e) => {
                if !e.sources.contains(&source) {
                    e.sources.push(source);
                }
                if e.node.as_deref() == node
                    && node.is_none_or(|n| indexed(&self.index, n, &view) == Some(&view))
                {
                    return affected;
                }
                if let Some(old) = e.node.take() {
                    self.index.remove(&old, &key.0, &key.1);
                    affected.push(old.into_string());
                }
                e.node = node.map(Box::from);
            }
            None => {
                self.entries.insert(
                    key,
                    Entry {
                        node: node.map(Box::from),
                        sources: vec![source],
                    },
                );
            }
        }
        if let Some(n) = node {
            self.index.insert(n, view);
            if !affected.iter().any(|a| a == n) {
                affected.push(n.to_string());
            }
        }
        affected
    }

    /// Watch `source` no longer reports the pod. Returns the node whose evaluation may change.
    pub fn forget(&mut self, source: u64, namespace: &str, name: &str) -> Option<String> {
        let key = (namespace.to_string(), name.to_string());
        let e = self.entries.get_mut(&key)?;
        e.sources.retain(|s| *s != source);
        if !e.sources.is_empty() {
            return None;
        }
        let e = self.entries.remove(&key)?;
        let node = e.node?;
        self.index.remove(&node, namespace, name);
        Some(node.into_string())
    }

    /// Forgets everything watch `source` reported (the watch was stopped).
    pub fn forget_source(&mut self, source: u64) -> Vec<String> {
        self.forget_source_except(source, &HashSet::new())
    }

    /// Forgets what watch `source` reported except the pods in `keep` (what its
    /// relist returned).
    pub fn forget_source_except(
        &mut self,
        source: u64,
        keep: &HashSet<(String, String)>,
    ) -> Vec<String> {
        let keys: Vec<(String, String)> = self
            .entries
            .iter()
            .filter(|(k, e)| e.sources.contains(&source) && !keep.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        keys.iter()
            .filter_map(|(ns, name)| self.forget(source, ns, name))
            .collect()
    }
}

/// The view of the pod called `view.name` as the index has it.
fn indexed<'a>(index: &'a PodIndex, node: &str, view: &PodView) -> Option<&'a PodView> {
    index
        .pods(node, &view.namespace)
        .iter()
        .find(|p| p.name == view.name)
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

    #[test]
    fn a_relist_forgets_only_what_it_no_longer_returns() {
        let mut c = PodCache::default();
        c.upsert(1, &pod("a", "n1", true));
        c.upsert(1, &pod("b", "n2", true));
        c.upsert(2, &pod("b", "n2", true));
        let keep = HashSet::from([("kube-system".to_string(), "a".to_string())]);
        // b is still reported by watch 2, so no node changes.
        assert_eq!(c.forget_source_except(1, &keep), Vec::<String>::new());
        assert_eq!(c.forget_source_except(2, &HashSet::new()), vec!["n2"]);
        assert_eq!(c.len(), 1);
        assert_eq!(c.index().pods("n1", "kube-system").len(), 1);
    }

    #[test]
    fn an_unchanged_pod_changes_no_node() {
        let mut c = PodCache::default();
        c.upsert(1, &pod("a", "n1", false));
        assert_eq!(c.upsert(1, &pod("a", "n1", false)), Vec::<String>::new());
        let mut unbound = pod("u", "", false);
        unbound.spec = None;
        assert_eq!(c.upsert(1, &unbound), Vec::<String>::new());
        assert_eq!(c.upsert(1, &unbound), Vec::<String>::new());
        assert_eq!(c.upsert(1, &pod("u", "n3", false)), vec!["n3"]);
    }
}
