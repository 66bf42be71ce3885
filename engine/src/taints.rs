//! A node's taint list, interned as a whole like a label set.
//!
//! A taint costs about 160 bytes (four fields and their strings), and a node in a
//! fleet carries a few. Nodes in the same state carry the same list (taints added
//! in the same second included, `timeAdded` being to the second), so they share one
//! copy: at 5,000 scale-benchmark nodes with three taints each this saves about
//! 500 bytes a node.

use std::{
    hash::{Hash, Hasher},
    ops::Deref,
    sync::{Arc, LazyLock},
};

use k8s_openapi::api::core::v1::Taint;

use crate::labels::Interner;

/// The list as the API has it, in its order. k8s-openapi's `Taint` has no `Hash`;
/// this hashes what a taint is made of.
#[derive(Debug, PartialEq)]
struct TaintList(Vec<Taint>);

impl Eq for TaintList {}

impl Hash for TaintList {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.len().hash(state);
        for t in &self.0 {
            t.key.hash(state);
            t.value.hash(state);
            t.effect.hash(state);
            t.time_added.as_ref().map(|time| time.0).hash(state);
        }
    }
}

static INTERNED: LazyLock<Interner<TaintList>> = LazyLock::new(Interner::default);

/// A node's taints: read as a slice, shared by every node with the same list.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeTaints(Arc<TaintList>);

impl NodeTaints {
    pub fn new(mut taints: Vec<Taint>) -> Self {
        taints.shrink_to_fit();
        NodeTaints(INTERNED.intern(Arc::new(TaintList(taints))))
    }
}

impl Default for NodeTaints {
    fn default() -> Self {
        NodeTaints::new(Vec::new())
    }
}

impl From<Vec<Taint>> for NodeTaints {
    fn from(taints: Vec<Taint>) -> Self {
        NodeTaints::new(taints)
    }
}

impl Deref for NodeTaints {
    type Target = [Taint];

    fn deref(&self) -> &[Taint] {
        &self.0.0
    }
}

impl<'a> IntoIterator for &'a NodeTaints {
    type Item = &'a Taint;
    type IntoIter = std::slice::Iter<'a, Taint>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.0.iter()
    }
}

impl std::fmt::Debug for NodeTaints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn taint(key: &str, effect: &str, added: Option<i64>) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            value: Some("v".into()),
            time_added: added.map(|s| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())),
        }
    }

    #[test]
    fn equal_lists_are_shared_and_read_as_the_list() {
        let list = vec![
            taint("a", "NoSchedule", None),
            taint("b", "NoExecute", Some(1_700_000_000)),
        ];
        let x = NodeTaints::new(list.clone());
        let y = NodeTaints::from(list.clone());
        assert!(Arc::ptr_eq(&x.0, &y.0));
        assert_eq!(&*x, list.as_slice());
        assert_eq!((&x).into_iter().count(), 2);
        assert!(NodeTaints::default().is_empty());
    }

    #[test]
    fn lists_that_differ_anywhere_are_not_shared() {
        let base = vec![
            taint("a", "NoSchedule", None),
            taint("b", "NoExecute", Some(1)),
        ];
        let mut other_time = base.clone();
        other_time[1] = taint("b", "NoExecute", Some(2));
        let mut other_value = base.clone();
        other_value[0].value = None;
        let reordered = vec![base[1].clone(), base[0].clone()];
        let x = NodeTaints::new(base);
        for other in [other_time, other_value, reordered] {
            let y = NodeTaints::new(other.clone());
            assert!(!Arc::ptr_eq(&x.0, &y.0));
            assert_ne!(x, y);
            assert_eq!(&*y, other.as_slice());
        }
    }
}
