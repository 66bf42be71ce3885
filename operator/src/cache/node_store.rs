//! The node cache: every node the watch has brought, by name, shared by the
//! reconciles, the status writer and the webhook.
//!
//! Our own rather than kube's reflector store: that one keys each object by an
//! `ObjectRef` (its own copies of the name, uid and resourceVersion) and needs the
//! object to carry a whole `ObjectMeta`. Here a node is one `Arc` in a set that
//! looks it up by the name the node holds already: 1,570 -> 1,181 heap bytes a
//! node in `operator/tests/node_cache_memory.rs`, which never counted kube's key
//! (settled 38.9 -> 35.6 MiB at 5,000 nodes: docs/performance.md#node-store-memory).

use std::{
    borrow::Borrow,
    collections::HashSet,
    hash::{Hash, Hasher},
    sync::{Arc, RwLock},
};

use crate::cache::node_cache::CachedNode;

/// A cheap handle on the node cache; clones share it.
#[derive(Clone, Debug, Default)]
pub struct NodeStore {
    nodes: Arc<RwLock<HashSet<ByName>>>,
}

impl NodeStore {
    pub fn get(&self, name: &str) -> Option<Arc<CachedNode>> {
        self.read().get(name).map(|n| n.0.clone())
    }

    /// Every cached node, at this moment.
    pub fn state(&self) -> Vec<Arc<CachedNode>> {
        self.read().iter().map(|n| n.0.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// Stores a node the watch brought, in place of the version cached before.
    pub fn apply(&self, node: CachedNode) -> Arc<CachedNode> {
        let node = Arc::new(node);
        self.write().replace(ByName(node.clone()));
        node
    }

    pub fn delete(&self, name: &str) {
        self.write().remove(name);
    }

    /// The names of every cached node, at this moment.
    pub fn names(&self) -> HashSet<String> {
        self.read().iter().map(|n| n.0.name().to_string()).collect()
    }

    /// Gives back what the set grew beyond its nodes while a list streamed in.
    pub fn shrink_to_fit(&self) {
        self.write().shrink_to_fit();
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashSet<ByName>> {
        self.nodes.read().expect("node store lock")
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<ByName>> {
        self.nodes.write().expect("node store lock")
    }
}

/// A cached node that hashes and compares as its name, so the set finds it by a
/// `&str` and keeps no key of its own.
#[derive(Debug)]
struct ByName(Arc<CachedNode>);

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for ByName {}

impl Hash for ByName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes: `Borrow<str>` requires the two to agree.
        self.0.name().hash(state)
    }
}

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;

    use super::*;

    fn node(name: &str, rv: &str) -> CachedNode {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.resource_version = Some(rv.into());
        CachedNode::from_node(&n)
    }

    #[test]
    fn a_node_is_found_by_name_and_replaced_by_its_next_version() {
        let store = NodeStore::default();
        assert!(store.is_empty());
        store.apply(node("a", "1"));
        store.apply(node("b", "1"));
        let newer = store.apply(node("a", "2"));
        assert_eq!(store.len(), 2);
        assert_eq!(store.get("a").unwrap().resource_version(), Some("2"));
        assert!(Arc::ptr_eq(&store.get("a").unwrap(), &newer));
        assert_eq!(store.get("c"), None);
        store.delete("a");
        store.delete("c");
        assert_eq!(store.get("a"), None);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn names_are_the_cached_nodes_and_shrinking_keeps_them() {
        let store = NodeStore::default();
        let clone = store.clone();
        for i in 0..100 {
            store.apply(node(&format!("n{i}"), "1"));
        }
        for i in 2..100 {
            store.delete(&format!("n{i}"));
        }
        store.shrink_to_fit();
        let mut names: Vec<String> = clone.names().into_iter().collect();
        names.sort();
        assert_eq!(names, ["n0", "n1"]);
        assert_eq!(clone.get("n1").unwrap().resource_version(), Some("1"));
    }
}
