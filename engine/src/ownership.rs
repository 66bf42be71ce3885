//! The node annotations that record what the operator owns and what completed.
//!
//! `nodetaint.io/managed-taints`: `{"<key>:<effect>": "<policy>"}` — the taints the
//! operator added. Only these may ever be removed or changed by it.
//! `nodetaint.io/bootstrapped`: `{"<policy>": "<uid>@<RFC 3339>"}` — BootstrapOnly
//! completions, valid only for the policy uid they name.
//! `nodetaint.io/drain-started`: `{"<policy>": "<RFC 3339>"}` — when a policy with
//! `spec.eviction` started draining the node (see `drain`).

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use taint_operator_crd::TaintEffect;

use crate::labels::{LabelMap, Labels, Sym, sym};

/// `<key>:<effect>`, the identity of a taint (the API server refuses two taints with both equal).
pub fn taint_id(key: &str, effect: &str) -> String {
    format!("{key}:{effect}")
}

/// Splits `<key>:<effect>`; keys never contain `:`.
pub fn split_taint_id(id: &str) -> Option<(&str, TaintEffect)> {
    let (key, effect) = id.rsplit_once(':')?;
    Some((key, TaintEffect::parse(effect)?))
}

/// Taint id → owning policy name, sorted by id.
///
/// Interned as a whole, like a label set: the nodes that carry the same taints for
/// the same policies (in a fleet, most of them) share one copy, where a map of
/// their own cost each node about 800 bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagedTaints(Labels);

impl ManagedTaints {
    /// A malformed annotation owns nothing: the operator then leaves those taints
    /// alone rather than guessing, which can only err on the side of not removing.
    pub fn parse(annotation: Option<&str>) -> Self {
        annotation.and_then(Self::read).unwrap_or_default()
    }

    /// True when the annotation is what the operator writes: a JSON object of strings.
    /// Anything else is read as owning nothing (see [`ManagedTaints::parse`]).
    pub fn well_formed(annotation: &str) -> bool {
        Self::read(annotation).is_some()
    }

    fn read(annotation: &str) -> Option<Self> {
        let map: BTreeMap<String, String> = serde_json::from_str(annotation).ok()?;
        Some(ManagedTaints(Labels::from_map(Some(&map))))
    }

    /// The annotation value, or `None` when nothing is owned (the annotation is then removed).
    pub fn to_annotation(&self) -> Option<String> {
        (!self.is_empty())
            .then(|| serde_json::to_string(&self.0.to_map()).expect("a string map serializes"))
    }

    pub fn owner(&self, id: &str) -> Option<&str> {
        self.0.get(id)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every (taint id, owning policy), sorted by id.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.sorted()
    }

    /// Records `policy` as the owner of taint `id`.
    pub fn insert(&mut self, id: &str, policy: &str) {
        // A key given twice keeps its last value.
        self.0 = Labels::new(self.0.sorted().chain([(id, policy)]));
    }

    /// Keeps the entries `keep` says yes to.
    pub fn retain(&mut self, keep: impl Fn(&str, &str) -> bool) {
        if !self.0.sorted().all(|(id, owner)| keep(id, owner)) {
            self.0 = Labels::new(self.0.sorted().filter(|(id, owner)| keep(id, owner)));
        }
    }

    /// Forgets the owner of taint `id`.
    pub fn remove(&mut self, id: &str) {
        self.retain(|k, _| k != id);
    }
}

/// A recorded BootstrapOnly completion. Interned: a policy's uid is the same on
/// every node, and nodes that completed in the same second share the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub uid: Sym,
    pub at: Sym,
}

/// Policy name → completion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bootstrapped(pub Completions);

/// Completions sorted by policy name, in a small vector: a node records one per
/// BootstrapOnly policy, and a map would cost most of a node's cache entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completions(Vec<(Sym, Completion)>);

impl Completions {
    /// Keeps the completions for which `keep` says so (as `BTreeMap::retain`).
    pub fn retain(&mut self, mut keep: impl FnMut(&Sym, &mut Completion) -> bool) {
        self.0.retain_mut(|(policy, c)| keep(policy, c));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Completion)> {
        self.0.iter().map(|(p, c)| (&**p, c))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Bootstrapped {
    pub fn parse(annotation: Option<&str>) -> Self {
        let raw: BTreeMap<String, String> = annotation
            .and_then(|a| serde_json::from_str(a).ok())
            .unwrap_or_default();
        Bootstrapped(Completions(
            raw.into_iter()
                .filter_map(|(policy, v)| {
                    let (uid, at) = v.split_once('@')?;
                    Some((
                        sym(&policy),
                        Completion {
                            uid: sym(uid),
                            at: sym(at),
                        },
                    ))
                })
                .collect(),
        ))
    }

    /// True when the annotation is what the operator writes: a JSON object whose
    /// values are `<uid>@<time>`. Entries of any other shape record nothing.
    pub fn well_formed(annotation: &str) -> bool {
        serde_json::from_str::<BTreeMap<String, String>>(annotation)
            .is_ok_and(|m| m.values().all(|v| v.contains('@')))
    }

    pub fn get(&self, policy: &str) -> Option<&Completion> {
        self.position(policy).ok().map(|i| &self.0.0[i].1)
    }

    pub fn contains(&self, policy: &str) -> bool {
        self.position(policy).is_ok()
    }

    fn position(&self, policy: &str) -> Result<usize, usize> {
        self.0.0.binary_search_by(|(p, _)| (**p).cmp(policy))
    }

    pub fn to_annotation(&self) -> Option<String> {
        let raw: BTreeMap<&str, String> = self
            .0
            .iter()
            .map(|(p, c)| (p, format!("{}@{}", c.uid, c.at)))
            .collect();
        (!raw.is_empty()).then(|| serde_json::to_string(&raw).expect("a string map serializes"))
    }

    /// True when `policy` completed on this node in its current incarnation (`uid`).
    pub fn completed(&self, policy: &str, uid: &str) -> bool {
        self.get(policy).is_some_and(|c| &*c.uid == uid)
    }

    pub fn record(&mut self, policy: &str, uid: &str, now: Timestamp) {
        let at = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let completion = Completion {
            uid: sym(uid),
            at: sym(&at),
        };
        match self.position(policy) {
            Ok(i) => self.0.0[i].1 = completion,
            Err(i) => self.0.0.insert(i, (sym(policy), completion)),
        }
    }
}

/// Policy name → when its drain of the node started, sorted by policy name. Kept
/// while the node carries the policy's taints: `drainTimeout` counts from it and
/// the per-zone pace reads it, on whichever replica leads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainStarts(Vec<(Sym, Timestamp)>);

impl DrainStarts {
    /// Entries that do not read as a time are dropped: a drain without a start
    /// starts again, which only delays the switch.
    pub fn parse(annotation: Option<&str>) -> Self {
        let raw: BTreeMap<String, String> = annotation
            .and_then(|a| serde_json::from_str(a).ok())
            .unwrap_or_default();
        DrainStarts(
            raw.into_iter()
                .filter_map(|(policy, at)| Some((sym(&policy), at.parse().ok()?)))
                .collect(),
        )
    }

    /// True when the annotation is what the operator writes: policy → RFC 3339 time.
    pub fn well_formed(annotation: &str) -> bool {
        serde_json::from_str::<BTreeMap<String, String>>(annotation)
            .is_ok_and(|m| m.values().all(|v| v.parse::<Timestamp>().is_ok()))
    }

    pub fn to_annotation(&self) -> Option<String> {
        let raw: BTreeMap<&str, String> = self
            .0
            .iter()
            .map(|(p, at)| (&**p, at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
            .collect();
        (!raw.is_empty()).then(|| serde_json::to_string(&raw).expect("a string map serializes"))
    }

    pub fn started(&self, policy: &str) -> Option<Timestamp> {
        self.position(policy).ok().map(|i| self.0[i].1)
    }

    /// Records that `policy` started draining at `at` (whole seconds, as written).
    pub fn record(&mut self, policy: &str, at: Timestamp) {
        let at = at.round(k8s_openapi::jiff::Unit::Second).unwrap_or(at);
        match self.position(policy) {
            Ok(i) => self.0[i].1 = at,
            Err(i) => self.0.insert(i, (sym(policy), at)),
        }
    }

    pub fn remove(&mut self, policy: &str) {
        if let Ok(i) = self.position(policy) {
            self.0.remove(i);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, Timestamp)> {
        self.0.iter().map(|(p, at)| (&**p, *at))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn position(&self, policy: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(p, _)| (**p).cmp(policy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_formed_is_what_the_operator_writes() {
        assert!(ManagedTaints::well_formed(r#"{"k:NoSchedule":"p"}"#));
        assert!(ManagedTaints::well_formed("{}"));
        for bad in [
            "",
            "not json",
            "[]",
            r#"{"k:NoSchedule":1}"#,
            r#"{"k":{"p":1}}"#,
        ] {
            assert!(!ManagedTaints::well_formed(bad), "{bad}");
        }
        assert!(Bootstrapped::well_formed(
            r#"{"p":"uid@2026-11-20T12:00:00Z"}"#
        ));
        for bad in ["nope", r#"{"p":"no-at-sign"}"#, r#"{"p":true}"#] {
            assert!(!Bootstrapped::well_formed(bad), "{bad}");
        }
    }

    #[test]
    fn managed_taints_round_trip_and_malformed_owns_nothing() {
        let m = ManagedTaints::parse(Some(r#"{"a/b:NoSchedule":"p1"}"#));
        assert_eq!(m.owner("a/b:NoSchedule"), Some("p1"));
        assert_eq!(
            m.to_annotation().as_deref(),
            Some(r#"{"a/b:NoSchedule":"p1"}"#)
        );
        assert_eq!(
            ManagedTaints::parse(Some("not json")),
            ManagedTaints::default()
        );
        assert_eq!(ManagedTaints::default().to_annotation(), None);
    }

    #[test]
    fn managed_taints_change_by_entry_and_stay_sorted() {
        let mut m = ManagedTaints::parse(Some(r#"{"b:NoSchedule":"p1"}"#));
        m.insert("a:NoExecute", "p2");
        m.insert("b:NoSchedule", "p3");
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            [("a:NoExecute", "p2"), ("b:NoSchedule", "p3")]
        );
        assert_eq!(
            m.to_annotation().as_deref(),
            Some(r#"{"a:NoExecute":"p2","b:NoSchedule":"p3"}"#)
        );
        m.retain(|id, _| id.starts_with('a'));
        assert_eq!(m.iter().collect::<Vec<_>>(), [("a:NoExecute", "p2")]);
        m.remove("nope");
        m.remove("a:NoExecute");
        assert!(m.is_empty());
        assert_eq!(m, ManagedTaints::default());
        assert_eq!(m.to_annotation(), None);
    }

    #[test]
    fn bootstrapped_counts_only_for_the_same_uid() {
        let mut b =
            Bootstrapped::parse(Some(r#"{"p":"uid-1@2026-11-20T10:00:00Z","bad":"nouid"}"#));
        assert!(b.completed("p", "uid-1"));
        assert!(!b.completed("p", "uid-2"));
        assert!(!b.completed("bad", "nouid"));
        b.record("q", "uid-9", "2026-11-20T12:00:00Z".parse().unwrap());
        b.record("a", "uid-8", "2026-11-20T12:00:00Z".parse().unwrap());
        b.record("a", "uid-7", "2026-11-20T12:00:00Z".parse().unwrap());
        assert!(b.completed("a", "uid-7"));
        assert!(b.contains("q") && !b.contains("bad"));
        assert_eq!(
            b.to_annotation().as_deref(),
            Some(
                r#"{"a":"uid-7@2026-11-20T12:00:00Z","p":"uid-1@2026-11-20T10:00:00Z","q":"uid-9@2026-11-20T12:00:00Z"}"#
            )
        );
    }

    #[test]
    fn drain_starts_round_trip_in_whole_seconds_and_drop_what_is_not_a_time() {
        let mut d = DrainStarts::parse(Some(r#"{"p":"2026-11-20T12:00:00Z","bad":"yesterday"}"#));
        assert_eq!(
            d.started("p"),
            Some("2026-11-20T12:00:00Z".parse().unwrap())
        );
        assert_eq!(d.started("bad"), None);
        d.record("a", "2026-11-20T12:00:01.6Z".parse().unwrap());
        assert_eq!(
            d.to_annotation().as_deref(),
            Some(r#"{"a":"2026-11-20T12:00:02Z","p":"2026-11-20T12:00:00Z"}"#)
        );
        d.remove("a");
        d.remove("p");
        assert!(d.is_empty() && d.to_annotation().is_none());
        assert!(DrainStarts::well_formed(r#"{"p":"2026-11-20T12:00:00Z"}"#));
        assert!(!DrainStarts::well_formed(r#"{"p":"soon"}"#));
    }

    #[test]
    fn taint_ids_split_at_the_last_colon() {
        assert_eq!(
            split_taint_id("example.com/x:NoExecute"),
            Some(("example.com/x", TaintEffect::NoExecute))
        );
        assert_eq!(split_taint_id("x:Sometimes"), None);
    }
}
