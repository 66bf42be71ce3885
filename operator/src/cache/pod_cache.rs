//! The critical pods the operator knows of, fed by several label-selected watches.
//!
//! Two policies' selectors can match the same pod, so each pod remembers which
//! watches reported it and leaves the index only when the last one forgets it.
//!
//! At 5,000 nodes there are some 15,000 watched pods, so what an entry holds is
//! counted in bytes (`tests/pod_cache_memory.rs` measures it): one shared copy of
//! the pod's name, of its node's name and of its set of watches, none its own.

use std::{
    borrow::Borrow,
    collections::{HashMap, HashSet},
    sync::Arc,
};

use k8s_openapi::api::core::v1::Pod;

use engine::{
    cluster::{PodIndex, PodView, bound_node},
    labels::{Sym, sym},
    thin_str::ThinStr,
};

/// The index holds the pod's view; an entry only says where it is and who reported it.
struct Entry {
    /// The index's copy of the node's name.
    node: Option<ThinStr>,
    sources: Sources,
}

#[derive(Default)]
pub struct PodCache {
    /// By namespace (a handful), then by pod name: no key holds a copy of the
    /// namespace, and the name is the copy the index's view of the pod shares.
    entries: HashMap<Sym, HashMap<ThinStr, Entry>>,
    sources: SourceSets,
    index: PodIndex,
}

impl PodCache {
    pub fn index(&self) -> &PodIndex {
        &self.index
    }

    pub fn len(&self) -> usize {
        self.entries.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records `pod` as seen by watch `source`. Returns the nodes whose evaluation may change.
    pub fn upsert(&mut self, source: u64, pod: &Pod) -> Vec<String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let node = bound_node(pod);
        if !self.entries.contains_key(namespace) {
            self.entries.insert(sym(namespace), HashMap::new());
        }
        let pods = self.entries.get_mut(namespace).expect("inserted above");
        let name = match pods.get_key_value(name) {
            Some((shared, _)) => shared.clone(),
            None => {
                let name = ThinStr::from(name);
                let sources = self.sources.of(source);
                pods.insert(
                    name.clone(),
                    Entry {
                        node: None,
                        sources,
                    },
                );
                name
            }
        };
        let e = pods.get_mut(&name).expect("found or inserted above");
        let sources = self.sources.with(&e.sources, source);
        self.sources
            .release(std::mem::replace(&mut e.sources, sources));

        let mut affected = Vec::new();
        let view = PodView::named(name.clone(), pod);
        if e.node.as_deref() == node
            && node.is_none_or(|n| indexed(&self.index, n, namespace, &view) == Some(&view))
        {
            return affected;
        }
        if let Some(old) = e.node.take() {
            // Indexing the pod on the same node replaces it there.
            if node != Some(&*old) {
                self.index.remove(&old, namespace, &name);
            }
            affected.push(old.to_string());
        }
        if let Some(n) = node {
            e.node = Some(self.index.insert(n, namespace, view));
            if !affected.iter().any(|a| a == n) {
                affected.push(n.to_string());
            }
        }
        affected
    }

    /// Watch `source` no longer reports the pod. Returns the node whose evaluation may change.
    pub fn forget(&mut self, source: u64, namespace: &str, name: &str) -> Option<String> {
        let pods = self.entries.get_mut(namespace)?;
        let e = pods.get_mut(name)?;
        if let Some(rest) = self.sources.without(&e.sources, source) {
            self.sources
                .release(std::mem::replace(&mut e.sources, rest));
            return None;
        }
        let e = pods.remove(name)?;
        if pods.is_empty() {
            self.entries.remove(namespace);
        }
        self.sources.release(e.sources);
        let node = e.node?;
        self.index.remove(&node, namespace, name);
        Some(node.to_string())
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
        // By namespace, like the entries: looked up without a copy of each key.
        let mut kept: HashMap<&str, HashSet<&str>> = HashMap::new();
        for (namespace, name) in keep {
            kept.entry(namespace).or_default().insert(name);
        }
        let gone: Vec<(Sym, ThinStr)> = self
            .entries
            .iter()
            .flat_map(|(namespace, pods)| {
                let kept = kept.get(&**namespace);
                pods.iter()
                    .filter(move |(name, e)| {
                        e.sources.contains(source) && !kept.is_some_and(|k| k.contains(&***name))
                    })
                    .map(move |(name, _)| (namespace.clone(), name.clone()))
            })
            .collect();
        gone.iter()
            .filter_map(|(namespace, name)| self.forget(source, namespace, name))
            .collect()
    }
}

/// The view of the pod called `view.name` as the index has it.
fn indexed<'a>(
    index: &'a PodIndex,
    node: &str,
    namespace: &str,
    view: &PodView,
) -> Option<&'a PodView> {
    index
        .pods(node, namespace)
        .iter()
        .find(|p| p.name == view.name)
}

/// The watches that report a pod, sorted: a set shared by every pod the same
/// watches report. There are a handful of such sets (usually one per watch: all
/// pods of a DaemonSet), so an entry holds a thin pointer and no allocation of its
/// own, however many watches report it.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Sources(Arc<Vec<u64>>);

impl Sources {
    fn contains(&self, source: u64) -> bool {
        self.0.binary_search(&source).is_ok()
    }
}

/// Looks a set up by its ids (hashed and compared like them).
impl Borrow<[u64]> for Sources {
    fn borrow(&self) -> &[u64] {
        &self.0
    }
}

/// The one copy of every set of watches some entry holds.
#[derive(Default)]
struct SourceSets(HashSet<Sources>);

impl SourceSets {
    fn of(&mut self, source: u64) -> Sources {
        self.shared(&[source])
    }

    /// `set` with `source` added.
    fn with(&mut self, set: &Sources, source: u64) -> Sources {
        match set.0.binary_search(&source) {
            Ok(_) => set.clone(),
            Err(at) => {
                let mut ids = Vec::clone(&set.0);
                ids.insert(at, source);
                self.shared(&ids)
            }
        }
    }

    /// `set` without `source`; `None` when that leaves it empty.
    fn without(&mut self, set: &Sources, source: u64) -> Option<Sources> {
        match set.0.binary_search(&source) {
            Err(_) => Some(set.clone()),
            Ok(_) if set.0.len() == 1 => None,
            Ok(at) => {
                let mut ids = Vec::clone(&set.0);
                ids.remove(at);
                Some(self.shared(&ids))
            }
        }
    }

    /// An entry no longer holds `set`: the shared copy goes when no entry does.
    fn release(&mut self, set: Sources) {
        // One reference is the shared copy's, the other `set`.
        if Arc::strong_count(&set.0) == 2 {
            self.0.remove(&**set.0);
        }
    }

    fn shared(&mut self, ids: &[u64]) -> Sources {
        if let Some(set) = self.0.get(ids) {
            return set.clone();
        }
        let set = Sources(Arc::new(ids.to_vec()));
        self.0.insert(set.clone());
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use kube::api::ObjectMeta;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

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
    fn a_ready_pod_that_starts_terminating_makes_its_node_re_evaluated() {
        let mut c = PodCache::default();
        c.upsert(1, &pod("a", "n1", true));
        let mut deleting = pod("a", "n1", true);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-20T12:00:00Z".parse().unwrap(),
            ));
        assert_eq!(c.upsert(1, &deleting), vec!["n1"]);
        assert!(!c.index().pods("n1", "kube-system")[0].ready);
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

    #[test]
    fn a_pod_seen_by_three_watches_stays_until_all_forget_it() {
        let mut c = PodCache::default();
        for source in [3, 1, 2] {
            c.upsert(source, &pod("a", "n1", true));
        }
        assert_eq!(c.forget(2, "kube-system", "a"), None);
        assert_eq!(c.forget(2, "kube-system", "a"), None, "2 forgot it already");
        assert_eq!(c.forget_source(3), Vec::<String>::new());
        assert_eq!(c.forget(1, "kube-system", "a"), Some("n1".into()));
        assert!(c.is_empty() && c.sources.0.is_empty());
    }

    /// What the cache did before it kept shared copies: a map of owned keys, and the
    /// index as a list of (node, namespace, pod) in the order pods were filed.
    #[derive(Default)]
    struct Model {
        entries: BTreeMap<(String, String), (Option<String>, Vec<u64>)>,
        index: Vec<(String, String, PodView)>,
    }

    impl Model {
        fn pods(&self, node: &str, namespace: &str) -> Vec<&PodView> {
            self.index
                .iter()
                .filter(|(n, ns, _)| n == node && ns == namespace)
                .map(|(_, _, p)| p)
                .collect()
        }

        fn unfile(&mut self, node: &str, namespace: &str, name: &str) {
            self.index
                .retain(|(n, ns, p)| !(n == node && ns == namespace && &*p.name == name));
        }

        fn upsert(&mut self, source: u64, pod: &Pod) -> Vec<String> {
            let view = PodView::from_pod(pod);
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let key = (namespace.clone(), view.name.to_string());
            let node = bound_node(pod);
            let mut affected = Vec::new();
            match self.entries.get(&key).cloned() {
                Some((old, mut sources)) => {
                    if !sources.contains(&source) {
                        sources.push(source);
                    }
                    self.entries
                        .insert(key.clone(), (old.clone(), sources.clone()));
                    if old.as_deref() == node
                        && node.is_none_or(|n| {
                            self.pods(n, &namespace)
                                .into_iter()
                                .find(|p| p.name == view.name)
                                == Some(&view)
                        })
                    {
                        return affected;
                    }
                    if let Some(old) = old {
                        self.unfile(&old, &key.0, &key.1);
                        affected.push(old);
                    }
                    self.entries
                        .insert(key.clone(), (node.map(String::from), sources));
                }
                None => {
                    self.entries
                        .insert(key.clone(), (node.map(String::from), vec![source]));
                }
            }
            if let Some(n) = node {
                self.unfile(n, &key.0, &key.1);
                self.index.push((n.to_string(), namespace, view));
                if !affected.iter().any(|a| a == n) {
                    affected.push(n.to_string());
                }
            }
            affected
        }

        fn forget(&mut self, source: u64, namespace: &str, name: &str) -> Option<String> {
            let key = (namespace.to_string(), name.to_string());
            let (node, sources) = self.entries.get_mut(&key)?;
            sources.retain(|s| *s != source);
            if !sources.is_empty() {
                return None;
            }
            let node = node.take();
            self.entries.remove(&key);
            let node = node?;
            self.unfile(&node, namespace, name);
            Some(node)
        }

        fn forget_source_except(
            &mut self,
            source: u64,
            keep: &HashSet<(String, String)>,
        ) -> Vec<String> {
            let keys: Vec<(String, String)> = self
                .entries
                .iter()
                .filter(|(k, (_, sources))| sources.contains(&source) && !keep.contains(*k))
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter()
                .filter_map(|(ns, name)| self.forget(source, ns, name))
                .collect()
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Watch, namespace, pod, node (`None`: unbound), ready, label set, finished.
        Upsert(u64, usize, usize, Option<usize>, bool, usize, bool),
        Forget(u64, usize, usize),
        /// Watch, and the (namespace, pod) pairs its relist kept.
        Relist(u64, Vec<(usize, usize)>),
    }

    const NAMESPACES: [&str; 2] = ["kube-system", "istio-system"];
    const NODES: [&str; 3] = ["n0", "n1", "n2"];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (1..4u64, 0..2usize, 0..4usize, proptest::option::weighted(0.85, 0..3usize), any::<bool>(), 0..2usize, proptest::bool::weighted(0.1))
                .prop_map(|(w, ns, p, n, r, l, f)| Op::Upsert(w, ns, p, n, r, l, f)),
            2 => (1..4u64, 0..2usize, 0..4usize).prop_map(|(w, ns, p)| Op::Forget(w, ns, p)),
            1 => (1..4u64, proptest::collection::vec((0..2usize, 0..4usize), 0..6))
                .prop_map(|(w, keep)| Op::Relist(w, keep)),
        ]
    }

    fn sorted(mut nodes: Vec<String>) -> Vec<String> {
        nodes.sort();
        nodes
    }

    proptest! {
        /// Every operation returns what the old cache returned and leaves the index
        /// listing the same pods in the same order; shared sets of watches go with
        /// the last entry that holds them.
        #[test]
        fn behaves_like_the_cache_of_owned_copies(ops in proptest::collection::vec(op(), 1..60)) {
            let mut cache = PodCache::default();
            let mut model = Model::default();
            for op in ops {
                match op {
                    Op::Upsert(watch, ns, p, node, ready, labels, finished) => {
                        let mut pod = pod(&format!("p{p}"), node.map_or("", |n| NODES[n]), ready);
                        pod.metadata.namespace = Some(NAMESPACES[ns].into());
                        pod.metadata.labels = Some(BTreeMap::from([("set".into(), labels.to_string())]));
                        if node.is_none() {
                            pod.spec = None;
                        }
                        if finished {
                            pod.status.as_mut().unwrap().phase = Some("Succeeded".into());
                        }
                        prop_assert_eq!(cache.upsert(watch, &pod), model.upsert(watch, &pod));
                    }
                    Op::Forget(watch, ns, p) => {
                        let name = format!("p{p}");
                        prop_assert_eq!(
                            cache.forget(watch, NAMESPACES[ns], &name),
                            model.forget(watch, NAMESPACES[ns], &name)
                        );
                    }
                    Op::Relist(watch, keep) => {
                        let keep: HashSet<(String, String)> = keep
                            .into_iter()
                            .map(|(ns, p)| (NAMESPACES[ns].to_string(), format!("p{p}")))
                            .collect();
                        prop_assert_eq!(
                            sorted(cache.forget_source_except(watch, &keep)),
                            sorted(model.forget_source_except(watch, &keep))
                        );
                    }
                }
                prop_assert_eq!(cache.len(), model.entries.len());
                prop_assert_eq!(cache.is_empty(), model.entries.is_empty());
                for node in NODES {
                    for namespace in NAMESPACES {
                        let pods: Vec<&PodView> = cache.index().pods(node, namespace).iter().collect();
                        prop_assert_eq!(pods, model.pods(node, namespace));
                    }
                }
                for namespace in NAMESPACES {
                    prop_assert_eq!(
                        cache.index().namespace(namespace).is_some(),
                        model.index.iter().any(|(_, ns, _)| ns == namespace)
                    );
                }
                let held: BTreeSet<Vec<u64>> = cache
                    .entries
                    .values()
                    .flat_map(|pods| pods.values())
                    .map(|e| e.sources.0.to_vec())
                    .collect();
                let shared: BTreeSet<Vec<u64>> = cache.sources.0.iter().map(|s| s.0.to_vec()).collect();
                prop_assert_eq!(held, shared);
            }
        }
    }
}
