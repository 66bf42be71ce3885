//! Label selector matching for `nodeSelector` and critical-pod selectors.

use taint_operator_crd::{LabelSelector, SelectorOperator};

use crate::{invalid_spec::InvalidSpec, labels::LabelMap, short_str::same};

/// A selector ready to match label maps. An empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector {
    labels: Vec<(String, String)>,
    expressions: Vec<(String, SelectorOperator, Vec<String>)>,
}

/// Why a label selector cannot be used: a key that is not a label key, or a value
/// that is not a label value, at `field` (`spec.nodeSelector.matchLabels`, ...).
/// A critical-pod selector is sent to the API server in a pod watch, which would
/// refuse it; a node selector with such a label could never match.
pub fn check(selector: &LabelSelector, field: &str) -> Result<(), InvalidSpec> {
    let bad = |field: String, message: String| Err(InvalidSpec { field, message });
    for (k, v) in &selector.match_labels {
        if !is_label_key(k) {
            return bad(
                format!("{field}.matchLabels"),
                format!("{k:?} is not a label key"),
            );
        }
        if !is_label_value(v) {
            return bad(
                format!("{field}.matchLabels[{k}]"),
                format!(
                    "{v:?} is not a label value (at most 63 characters: letters, digits, '-', '_', '.', beginning and ending with a letter or digit)"
                ),
            );
        }
    }
    for (i, e) in selector.match_expressions.iter().enumerate() {
        if !is_label_key(&e.key) {
            return bad(
                format!("{field}.matchExpressions[{i}].key"),
                format!("{:?} is not a label key", e.key),
            );
        }
        if let Some((j, v)) = e
            .values
            .iter()
            .enumerate()
            .find(|(_, v)| !is_label_value(v))
        {
            return bad(
                format!("{field}.matchExpressions[{i}].values[{j}]"),
                format!("{v:?} is not a label value"),
            );
        }
    }
    Ok(())
}

/// A qualified name: an optional DNS subdomain prefix (at most 253) and `/`, then a
/// name of at most 63 letters, digits, `-`, `_`, `.`, starting and ending alphanumeric.
pub fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

/// At most 63 letters, digits, `-`, `_`, `.`, starting and ending alphanumeric; may be empty.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

impl Selector {
    pub fn new(selector: Option<&LabelSelector>) -> Self {
        let Some(s) = selector else {
            return Self::default();
        };
        Selector {
            labels: s
                .match_labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            expressions: s
                .match_expressions
                .iter()
                .map(|e| (e.key.clone(), e.operator, e.values.clone()))
                .collect(),
        }
    }

    pub fn matches(&self, labels: &impl LabelMap) -> bool {
        self.matches_by(|key| labels.get(key))
    }

    /// Matches the labels `get` looks up (the value of a key, if present).
    pub fn matches_by<'l>(&self, get: impl Fn(&str) -> Option<&'l str>) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| get(k).is_some_and(|g| same(g, v)))
            && self
                .expressions
                .iter()
                .all(|(key, op, values)| expression_holds(*op, values, get(key)))
    }

    /// The terms the labels `get` looks up fail, each in label-selector syntax with
    /// the node's value: empty exactly when [`Self::matches_by`] is true.
    pub fn failing_terms<'l>(&self, get: impl Fn(&str) -> Option<&'l str>) -> Vec<String> {
        let has = |key: &str| match get(key) {
            Some(v) => format!("node has {key}={v}"),
            None => format!("node has no {key} label"),
        };
        let labels = self
            .labels
            .iter()
            .filter(|(k, v)| !get(k).is_some_and(|g| same(g, v)))
            .map(|(k, v)| format!("{k}={v} ({})", has(k)));
        let expressions = self
            .expressions
            .iter()
            .filter(|(key, op, values)| !expression_holds(*op, values, get(key)))
            .map(|(key, op, values)| {
                format!("{} ({})", expression_text(key, *op, values), has(key))
            });
        labels.chain(expressions).collect()
    }

    /// The same selector on the slots of `keys` (which learns its keys and values).
    pub fn slotted(&self, keys: &mut LabelKeys) -> SlotSelector {
        SlotSelector {
            labels: self
                .labels
                .iter()
                .map(|(k, v)| {
                    let slot = keys.slot(k);
                    (slot, keys.value(slot, v))
                })
                .collect(),
            expressions: self
                .expressions
                .iter()
                .map(|(k, op, values)| {
                    let slot = keys.slot(k);
                    let ids = values.iter().map(|v| keys.value(slot, v)).collect();
                    (slot, *op, ids)
                })
                .collect(),
        }
    }
}

/// One `matchExpressions` term on the value of its key (`None`: the label is absent).
fn expression_holds(op: SelectorOperator, values: &[String], value: Option<&str>) -> bool {
    let listed = |v: &str| values.iter().any(|x| same(x, v));
    match op {
        SelectorOperator::In => value.is_some_and(listed),
        SelectorOperator::NotIn => value.is_none_or(|v| !listed(v)),
        SelectorOperator::Exists => value.is_some(),
        SelectorOperator::DoesNotExist => value.is_none(),
    }
}

/// A node's label as node selectors see it: absent (`None`), or present with the
/// number of its value among those selectors name for the key (0: none names it).
pub type LabelValue = Option<u32>;

/// The label keys node selectors of a policy set read, each in a slot, and the values
/// they compare each key with.
///
/// A full evaluation reads each of these keys once per node ([`LabelKeys::values`])
/// and matches every selector against the numbers of their values: matching each
/// selector against the label map read the same keys and values again and again, and
/// those reads and string compares were the largest cost of evaluation.
#[derive(Debug, Clone, Default)]
pub struct LabelKeys {
    /// The keys, by slot.
    keys: Vec<String>,
    /// By slot, the values selectors compare the key with; value number `n` is `[n - 1]`.
    values: Vec<Vec<String>>,
    /// Bit `n % 64` is set when some key is `n` bytes long. A map keeps each key's
    /// length beside the pointer to its bytes, so most of a node's labels are ruled
    /// out without reading their keys (each read of a cold key is a cache miss).
    lengths: u64,
}

impl LabelKeys {
    fn slot(&mut self, key: &str) -> usize {
        match self.keys.iter().position(|k| k == key) {
            Some(slot) => slot,
            None => {
                self.keys.push(key.to_string());
                self.values.push(Vec::new());
                self.lengths |= length_bit(key);
                self.keys.len() - 1
            }
        }
    }

    /// The number of `value` for the key in `slot`.
    fn value(&mut self, slot: usize, value: &str) -> u32 {
        let values = &mut self.values[slot];
        let n = match values.iter().position(|v| v == value) {
            Some(i) => i,
            None => {
                values.push(value.to_string());
                values.len() - 1
            }
        };
        u32::try_from(n + 1).expect("fewer than 4 billion selector values")
    }

    /// The node's [`LabelValue`] of each key, by slot.
    pub fn values(&self, labels: &impl LabelMap) -> Vec<LabelValue> {
        let mut values = Vec::new();
        self.values_into(labels, &mut values);
        values
    }

    /// [`Self::values`] into `values` (cleared first).
    pub fn values_into(&self, labels: &impl LabelMap, values: &mut Vec<LabelValue>) {
        values.clear();
        values.resize(self.keys.len(), None);
        for (key, value) in labels.sorted() {
            if self.lengths & length_bit(key) == 0 {
                continue;
            }
            // `==` compares lengths before bytes: few keys are read at all.
            if let Some(slot) = self.keys.iter().position(|k| same(k, key)) {
                let known = self.values[slot].iter().position(|v| same(v, value));
                values[slot] = Some(known.map_or(0, |i| i as u32 + 1));
            }
        }
    }
}

fn length_bit(key: &str) -> u64 {
    1 << (key.len() % 64)
}

/// A [`Selector`] on the slots and value numbers of a [`LabelKeys`]: it matches the
/// values [`LabelKeys::values`] reads exactly when the selector matches the labels.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotSelector {
    labels: Vec<(usize, u32)>,
    expressions: Vec<(usize, SelectorOperator, Vec<u32>)>,
}

impl SlotSelector {
    pub fn matches(&self, values: &[LabelValue]) -> bool {
        self.labels
            .iter()
            .all(|&(slot, value)| values[slot] == Some(value))
            && self.expressions.iter().all(|(slot, op, listed)| {
                // Number 0 (a value no selector names) is in no list.
                let value = values[*slot];
                match op {
                    SelectorOperator::In => value.is_some_and(|v| listed.contains(&v)),
                    SelectorOperator::NotIn => value.is_none_or(|v| !listed.contains(&v)),
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }
}

/// The selector in the API's label-selector syntax (`a=b,c in (x,y),!d`), as a watch
/// `labelSelector` takes it. Empty selects everything.
pub fn selector_string(s: &LabelSelector) -> String {
    let labels = s.match_labels.iter().map(|(k, v)| format!("{k}={v}"));
    let expressions = s
        .match_expressions
        .iter()
        .map(|e| expression_text(&e.key, e.operator, &e.values));
    labels.chain(expressions).collect::<Vec<_>>().join(",")
}

/// One `matchExpressions` term in label-selector syntax.
fn expression_text(key: &str, op: SelectorOperator, values: &[String]) -> String {
    match op {
        SelectorOperator::In => format!("{key} in ({})", values.join(",")),
        SelectorOperator::NotIn => format!("{key} notin ({})", values.join(",")),
        SelectorOperator::Exists => key.to_string(),
        SelectorOperator::DoesNotExist => format!("!{key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use taint_operator_crd::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, operator: SelectorOperator, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn renders_label_selector_syntax() {
        let sel = LabelSelector {
            match_labels: labels(&[("app", "cni"), ("tier", "")]),
            match_expressions: vec![
                expr("zone", SelectorOperator::In, &["a", "b"]),
                expr("gpu", SelectorOperator::NotIn, &["yes"]),
                expr("worker", SelectorOperator::Exists, &[]),
                expr("cp", SelectorOperator::DoesNotExist, &[]),
            ],
        };
        assert_eq!(
            selector_string(&sel),
            "app=cni,tier=,zone in (a,b),gpu notin (yes),worker,!cp"
        );
        assert_eq!(selector_string(&LabelSelector::default()), "");
    }

    #[test]
    fn empty_or_absent_selects_everything() {
        assert!(Selector::new(None).matches(&labels(&[])));
        assert!(Selector::new(Some(&LabelSelector::default())).matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn slotted_selectors_match_like_the_selector() {
        let sel = |labels_: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>| {
            Selector::new(Some(&LabelSelector {
                match_labels: labels(labels_),
                match_expressions: exprs,
            }))
        };
        let selectors = [
            Selector::default(),
            sel(&[("lifecycle", "spot")], vec![]),
            sel(
                &[("zone", "a")],
                vec![expr("tier", SelectorOperator::In, &["gpu", "cpu"])],
            ),
            sel(&[], vec![expr("tier", SelectorOperator::NotIn, &["gpu"])]),
            sel(&[], vec![expr("worker", SelectorOperator::Exists, &[])]),
            sel(&[], vec![expr("zone", SelectorOperator::DoesNotExist, &[])]),
            // 68 bytes: the same length bit as the 4-byte keys.
            sel(&[(&"k".repeat(68), "v")], vec![]),
        ];
        let mut keys = LabelKeys::default();
        let slotted: Vec<SlotSelector> = selectors.iter().map(|s| s.slotted(&mut keys)).collect();
        for node in [
            labels(&[]),
            labels(&[("lifecycle", "spot"), ("zone", "a"), ("tier", "gpu")]),
            labels(&[("zone", "a"), ("tier", "cpu"), ("worker", "")]),
            labels(&[("zone", "b"), ("tier", "mem"), ("lifecycle", "on-demand")]),
            // Keys as long as wanted ones, and a key whose length shares a bit with them.
            labels(&[("zonf", "a"), ("tiez", "gpu"), (&"k".repeat(68), "v")]),
            labels(&[("zone", "a"), (&"k".repeat(4), "v"), (&"k".repeat(68), "w")]),
        ] {
            let values = keys.values(&node);
            for (s, slot) in selectors.iter().zip(&slotted) {
                assert_eq!(s.matches(&node), slot.matches(&values), "{s:?} on {node:?}");
                let failing = s.failing_terms(|k| node.get(k).map(String::as_str));
                assert_eq!(s.matches(&node), failing.is_empty(), "{s:?} on {node:?}");
            }
        }
    }

    /// One term of each kind: spot, in zone a or b, not a GPU tier, a worker, not
    /// the control plane.
    fn spot_worker() -> LabelSelector {
        LabelSelector {
            match_labels: labels(&[("lifecycle", "spot")]),
            match_expressions: vec![
                expr("zone", SelectorOperator::In, &["a", "b"]),
                expr("tier", SelectorOperator::NotIn, &["gpu"]),
                expr("worker", SelectorOperator::Exists, &[]),
                expr("control-plane", SelectorOperator::DoesNotExist, &[]),
            ],
        }
    }

    #[test]
    fn match_labels_and_expressions_all_must_hold() {
        let sel = spot_worker();
        let s = Selector::new(Some(&sel));
        assert!(s.matches(&labels(&[
            ("lifecycle", "spot"),
            ("zone", "a"),
            ("worker", "")
        ])));
        assert!(s.matches(&labels(&[
            ("lifecycle", "spot"),
            ("zone", "b"),
            ("worker", ""),
            ("tier", "cpu")
        ])));
        assert!(!s.matches(&labels(&[
            ("lifecycle", "on-demand"),
            ("zone", "a"),
            ("worker", "")
        ])));
        assert!(!s.matches(&labels(&[
            ("lifecycle", "spot"),
            ("zone", "c"),
            ("worker", "")
        ])));
        assert!(!s.matches(&labels(&[
            ("lifecycle", "spot"),
            ("zone", "a"),
            ("worker", ""),
            ("tier", "gpu")
        ])));
        assert!(!s.matches(&labels(&[("lifecycle", "spot"), ("zone", "a")])));
        assert!(!s.matches(&labels(&[
            ("lifecycle", "spot"),
            ("zone", "a"),
            ("worker", ""),
            ("control-plane", "")
        ])));
    }

    #[test]
    fn failing_terms_name_each_term_and_what_the_node_has() {
        let sel = spot_worker();
        let node = labels(&[
            ("lifecycle", "on-demand"),
            ("zone", "a"),
            ("tier", "gpu"),
            ("control-plane", ""),
        ]);
        let failing = Selector::new(Some(&sel)).failing_terms(|k| node.get(k).map(String::as_str));
        assert_eq!(
            failing,
            [
                "lifecycle=spot (node has lifecycle=on-demand)",
                "tier notin (gpu) (node has tier=gpu)",
                "worker (node has no worker label)",
                "!control-plane (node has control-plane=)",
            ]
        );
    }
}
