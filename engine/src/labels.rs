//! Interned strings and label sets for the node and pod caches.
//!
//! At 5,000 nodes and 15,000 critical pods nearly every label key, label value,
//! condition type, status and reason is one of a few dozen strings, and most pods
//! carry one of a handful of label sets. Each cached object holds a pointer to the
//! one shared copy instead of its own `String`s in its own `BTreeMap`. A node's
//! labels name the node itself (kubelet's `kubernetes.io/hostname`), so
//! [`NodeLabels`] keeps those apart and shares the rest.

use std::{
    collections::{BTreeMap, HashSet},
    hash::Hash,
    sync::{Arc, LazyLock, Mutex},
};

/// A shared, immutable string.
pub type Sym = Arc<str>;

/// What a label selector reads of a label map: works on the API's `BTreeMap` and on
/// the caches' [`Labels`] alike.
pub trait LabelMap {
    fn get(&self, key: &str) -> Option<&str>;
    /// Every label, sorted by key.
    fn sorted(&self) -> impl Iterator<Item = (&str, &str)>;

    fn to_map(&self) -> BTreeMap<String, String> {
        self.sorted()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

impl LabelMap for BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(String::as_str)
    }

    fn sorted(&self) -> impl Iterator<Item = (&str, &str)> {
        self.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// A label set, sorted by key, interned as a whole: pods of one DaemonSet share one.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Labels(Arc<[(Sym, Sym)]>);

impl Default for Labels {
    fn default() -> Self {
        Labels::new(std::iter::empty::<(&str, &str)>())
    }
}

impl Labels {
    /// The interned set of these labels (given in any order; a key given twice keeps its last value).
    pub fn new<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Labels::of_sorted(sorted_by_key(labels))
    }

    /// The interned set of `pairs`, sorted by key already, each key once.
    fn of_sorted(pairs: Vec<(&str, &str)>) -> Self {
        let set: Arc<[(Sym, Sym)]> = pairs.into_iter().map(|(k, v)| (sym(k), sym(v))).collect();
        Labels(INTERNED.sets.intern(set))
    }

    pub fn from_map(map: Option<&BTreeMap<String, String>>) -> Self {
        Labels::new(
            map.into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `labels` sorted by key; a key given twice keeps its last value.
fn sorted_by_key<'a>(
    labels: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<(&'a str, &'a str)> {
    let mut pairs: Vec<(&str, &str)> = labels.into_iter().collect();
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    pairs.dedup_by(|later, earlier| {
        let same = later.0 == earlier.0;
        if same {
            earlier.1 = later.1;
        }
        same
    });
    pairs
}

impl LabelMap for Labels {
    fn get(&self, key: &str) -> Option<&str> {
        Labels::get(self, key)
    }

    fn sorted(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

impl std::fmt::Debug for Labels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.sorted()).finish()
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Self {
        Labels::from_map(Some(&map))
    }
}

/// A node's labels: the set it shares with nodes like it, and apart from it the
/// labels whose value is the node's own name (kubelet's `kubernetes.io/hostname`).
/// Every node has its own name, so one such label in the set would make each
/// node's set its own copy (about 350 bytes a node at ten labels).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeLabels {
    shared: Labels,
    /// The keys whose value is the node's name (sorted, interned: nodes share
    /// them), and that name.
    own: Option<(Arc<[Sym]>, Arc<str>)>,
}

impl NodeLabels {
    /// The labels of the node named `name` (given in any order; a key given twice
    /// keeps its last value).
    pub fn new<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>, name: &str) -> Self {
        // Split before interning: neither the node's whole set nor its name goes
        // into the interners, where each would stay until the next sweep.
        let (own, shared): (Vec<_>, Vec<_>) = sorted_by_key(labels)
            .into_iter()
            .partition(|(_, v)| !name.is_empty() && *v == name);
        let own = (!own.is_empty()).then(|| {
            let keys: Arc<[Sym]> = own.into_iter().map(|(k, _)| sym(k)).collect();
            (INTERNED.keys.intern(keys), Arc::from(name))
        });
        NodeLabels {
            shared: Labels::of_sorted(shared),
            own,
        }
    }

    pub fn from_map(map: Option<&BTreeMap<String, String>>, name: &str) -> Self {
        NodeLabels::new(
            map.into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.as_str())),
            name,
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        if let Some((keys, name)) = &self.own
            && keys.binary_search_by(|k| (**k).cmp(key)).is_ok()
        {
            return Some(name);
        }
        self.shared.get(key)
    }

    pub fn len(&self) -> usize {
        self.shared.len() + self.own.as_ref().map_or(0, |(keys, _)| keys.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl LabelMap for NodeLabels {
    fn get(&self, key: &str) -> Option<&str> {
        NodeLabels::get(self, key)
    }

    /// The two sorted parts merged (their keys are disjoint).
    fn sorted(&self) -> impl Iterator<Item = (&str, &str)> {
        let (keys, name): (&[Sym], &str) = match &self.own {
            Some((keys, name)) => (keys, name),
            None => (&[], ""),
        };
        let mut own = keys.iter().map(move |k| (&**k, name)).peekable();
        let mut shared = self.shared.sorted().peekable();
        std::iter::from_fn(move || match (own.peek(), shared.peek()) {
            (Some(a), Some(b)) if a.0 > b.0 => shared.next(),
            (Some(_), _) => own.next(),
            (None, _) => shared.next(),
        })
    }
}

impl std::fmt::Debug for NodeLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.sorted()).finish()
    }
}

/// The shared copy of `s`.
pub fn sym(s: &str) -> Sym {
    INTERNED.strings.intern_str(s)
}

struct Interned {
    strings: Interner<str>,
    sets: Interner<[(Sym, Sym)]>,
    keys: Interner<[Sym]>,
}

static INTERNED: LazyLock<Interned> = LazyLock::new(|| Interned {
    strings: Interner::default(),
    sets: Interner::default(),
    keys: Interner::default(),
});

/// A set of shared values. Values no one else holds any more are dropped whenever
/// the set has doubled since the last sweep, so a cluster whose nodes come and go
/// does not grow it for good.
pub(crate) struct Interner<T: ?Sized> {
    inner: Mutex<InternerState<T>>,
}

struct InternerState<T: ?Sized> {
    values: HashSet<Arc<T>>,
    sweep_at: usize,
}

const FIRST_SWEEP: usize = 1024;

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            inner: Mutex::new(InternerState {
                values: HashSet::new(),
                sweep_at: FIRST_SWEEP,
            }),
        }
    }
}

impl<T: ?Sized + Hash + Eq> Interner<T> {
    pub(crate) fn intern(&self, value: Arc<T>) -> Arc<T> {
        let mut state = self.inner.lock().expect("interner lock");
        if let Some(shared) = state.values.get(&value) {
            return shared.clone();
        }
        state.insert(value.clone());
        value
    }
}

impl Interner<str> {
    /// Allocates only when `s` is new.
    fn intern_str(&self, s: &str) -> Arc<str> {
        let mut state = self.inner.lock().expect("interner lock");
        if let Some(shared) = state.values.get(s) {
            return shared.clone();
        }
        let value: Arc<str> = Arc::from(s);
        state.insert(value.clone());
        value
    }
}

impl<T: ?Sized + Hash + Eq> InternerState<T> {
    fn insert(&mut self, value: Arc<T>) {
        if self.values.len() >= self.sweep_at {
            self.values.retain(|v| Arc::strong_count(v) > 1);
            self.values.shrink_to_fit();
            self.sweep_at = (self.values.len() * 2).max(FIRST_SWEEP);
        }
        self.values.insert(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_and_sets_are_shared() {
        let a = sym("bench.io/group");
        let b = sym(&String::from("bench.io/group"));
        assert!(Arc::ptr_eq(&a, &b));
        let x = Labels::new([("b", "2"), ("a", "1")]);
        let y = Labels::from(BTreeMap::from([
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), "2".to_string()),
        ]));
        assert!(Arc::ptr_eq(&x.0, &y.0));
        assert_eq!(x.sorted().collect::<Vec<_>>(), [("a", "1"), ("b", "2")]);
    }

    #[test]
    fn labels_read_like_the_map_they_came_from() {
        let map = BTreeMap::from([
            ("zone".to_string(), "a".to_string()),
            ("app".to_string(), "cni".to_string()),
            ("empty".to_string(), String::new()),
        ]);
        let labels = Labels::from_map(Some(&map));
        for key in ["zone", "app", "empty", "missing", ""] {
            assert_eq!(
                LabelMap::get(&labels, key),
                LabelMap::get(&map, key),
                "{key}"
            );
        }
        assert!(LabelMap::sorted(&labels).eq(LabelMap::sorted(&map)));
        assert_eq!(labels.to_map(), map);
        assert!(Labels::from_map(None).is_empty());
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value() {
        let labels = Labels::new([("k", "1"), ("k", "2")]);
        assert_eq!(labels.len(), 1);
        assert_eq!(labels.get("k"), Some("2"));
    }

    #[test]
    fn a_nodes_own_name_is_kept_apart_and_the_rest_is_shared() {
        let a = NodeLabels::new(
            [
                ("zone", "a"),
                ("kubernetes.io/hostname", "n1"),
                ("alias", "n1"),
            ],
            "n1",
        );
        let b = NodeLabels::new(
            [
                ("kubernetes.io/hostname", "n2"),
                ("alias", "n2"),
                ("zone", "a"),
            ],
            "n2",
        );
        assert!(Arc::ptr_eq(&a.shared.0, &b.shared.0));
        let (a_keys, b_keys) = (&a.own.as_ref().unwrap().0, &b.own.as_ref().unwrap().0);
        assert!(Arc::ptr_eq(a_keys, b_keys));
        assert_eq!(a.get("kubernetes.io/hostname"), Some("n1"));
        assert_eq!(b.get("alias"), Some("n2"));
        assert_eq!(a.get("zone"), Some("a"));
        assert_eq!(a.get("missing"), None);
        assert_eq!(a.len(), 3);
        assert_eq!(
            a.sorted().collect::<Vec<_>>(),
            [
                ("alias", "n1"),
                ("kubernetes.io/hostname", "n1"),
                ("zone", "a")
            ]
        );
        // Nothing names the node: one shared set, as for any label set.
        let plain = NodeLabels::new([("zone", "a")], "n3");
        assert!(plain.own.is_none());
        assert_eq!(
            NodeLabels::new([("k", "v")], ""),
            NodeLabels::new([("k", "v")], "x")
        );
        assert!(NodeLabels::from_map(None, "n").is_empty());
    }

    proptest::proptest! {
        /// Whatever the labels and the name, the node's labels read exactly like
        /// the map they came from: every key, in order.
        #[test]
        fn node_labels_read_like_their_map(
            map in proptest::collection::btree_map("[a-d]{1,2}", "[a-c]{0,2}", 0..8),
            name in "[a-c]{0,2}",
        ) {
            let labels = NodeLabels::from_map(Some(&map), &name);
            proptest::prop_assert!(LabelMap::sorted(&labels).eq(LabelMap::sorted(&map)));
            proptest::prop_assert_eq!(labels.to_map(), map.clone());
            proptest::prop_assert_eq!(labels.len(), map.len());
            for key in ["a", "b", "ab", "dd", "z", ""] {
                proptest::prop_assert_eq!(labels.get(key), LabelMap::get(&map, key));
            }
        }
    }

    #[test]
    fn values_no_one_holds_are_swept() {
        let interner: Interner<str> = Interner::default();
        let kept = interner.intern_str("kept");
        for i in 0..5 * FIRST_SWEEP {
            interner.intern_str(&format!("gone-{i}"));
        }
        let state = interner.inner.lock().unwrap();
        assert!(state.values.len() <= FIRST_SWEEP + 1);
        assert!(state.values.contains(&kept));
    }
}
