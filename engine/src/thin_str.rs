//! A shared, immutable string behind a one-word pointer.
//!
//! `Arc<str>` is two words, pointer and length. The pod cache keeps a pod's name
//! and its node's name in each entry of a hash table that can be half empty, and
//! the index the pod's name again in each pod's view (where the second word would
//! also round the view up by a word): that weighs more than the one extra
//! allocation this type makes per string, the bytes in a box of their own behind
//! the reference counts (`tests/pod_cache_memory.rs` counts both).

use std::{borrow::Borrow, fmt, ops::Deref, sync::Arc};

/// Compares, orders and hashes like the `str` it holds, so maps keyed by it are
/// looked up with a `&str`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ThinStr(Arc<Box<str>>);

impl ThinStr {
    /// True when `a` and `b` are the same copy, not only equal strings.
    pub fn ptr_eq(a: &ThinStr, b: &ThinStr) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl Deref for ThinStr {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for ThinStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for ThinStr {
    fn from(s: &str) -> Self {
        ThinStr(Arc::new(s.into()))
    }
}

impl fmt::Debug for ThinStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl fmt::Display for ThinStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::HashMap,
        hash::{BuildHasher, RandomState},
    };

    use super::*;

    #[test]
    fn is_one_word_and_reads_like_its_str() {
        assert_eq!(size_of::<ThinStr>(), size_of::<usize>());
        assert_eq!(size_of::<Option<ThinStr>>(), size_of::<usize>());
        let (a, b) = (ThinStr::from("pod-a"), ThinStr::from("pod-b"));
        assert!(a < b && a == ThinStr::from("pod-a"));
        assert_eq!(format!("{a} {a:?}"), "pod-a \"pod-a\"");
        let hasher = RandomState::new();
        assert_eq!(hasher.hash_one(&a), hasher.hash_one("pod-a"));
        let map = HashMap::from([(a.clone(), 1)]);
        assert_eq!(map.get("pod-a"), Some(&1));
        assert!(ThinStr::ptr_eq(&a, &a.clone()));
        assert!(!ThinStr::ptr_eq(&a, &ThinStr::from("pod-a")));
    }
}
