//! Label selector matching for `nodeSelector` and critical-pod selectors.

use taint_operator_crd::{LabelSelector, SelectorOperator};

use crate::labels::LabelMap;

/// A selector ready to match label maps. An empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector {
    labels: Vec<(String, String)>,
    expressions: Vec<(String, SelectorOperator, Vec<String>)>,
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
        self.labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v.as_str()))
            && self.expressions.iter().all(|(key, op, values)| {
                let value = labels.get(key);
                let listed = |v: &str| values.iter().any(|x| x == v);
                match op {
                    SelectorOperator::In => value.is_some_and(listed),
                    SelectorOperator::NotIn => value.is_none_or(|v| !listed(v)),
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }

    /// The same selector reading its keys' values from slots of `keys` (added as needed).
    pub fn slotted(&self, keys: &mut LabelKeys) -> SlotSelector {
        SlotSelector {
            labels: self
                .labels
                .iter()
                .map(|(k, v)| (keys.slot(k), v.clone()))
                .collect(),
            expressions: self
                .expressions
                .iter()
                .map(|(k, op, values)| (keys.slot(k), *op, values.clone()))
                .collect(),
        }
    }
}

/// The label keys the node selectors of a policy set read, each in a slot.
///
/// A full evaluation reads each of these keys once per node ([`LabelKeys::values`])
/// and matches every policy's selector against those few values: matching each
/// selector against the label map looked the same keys up again and again, and the
/// string compares inside the map were the largest single cost of evaluation.
#[derive(Debug, Clone, Default)]
pub struct LabelKeys {
    /// Sorted by key, with each key's slot.
    sorted: Vec<(String, usize)>,
}

impl LabelKeys {
    fn slot(&mut self, key: &str) -> usize {
        match self.sorted.binary_search_by(|(k, _)| k.as_str().cmp(key)) {
            Ok(i) => self.sorted[i].1,
            Err(i) => {
                let slot = self.sorted.len();
                self.sorted.insert(i, (key.to_string(), slot));
                slot
            }
        }
    }

    /// The value of each key in `labels`, by slot.
    pub fn values<'a>(&self, labels: &'a impl LabelMap) -> Vec<Option<&'a str>> {
        let mut values = Vec::new();
        self.values_into(labels, &mut values);
        values
    }

    /// [`Self::values`] into `values` (cleared first).
    pub fn values_into<'a>(&self, labels: &'a impl LabelMap, values: &mut Vec<Option<&'a str>>) {
        values.clear();
        values.resize(self.sorted.len(), None);
        // One walk of both sorted lists reads each label key once; a map look-up per
        // key reads several keys per look-up, and on a cold node each read is a miss.
        let mut wanted = self.sorted.iter().peekable();
        for (key, value) in labels.sorted() {
            while wanted.next_if(|(k, _)| k.as_str() < key).is_some() {}
            let Some((k, slot)) = wanted.peek() else {
                break;
            };
            if k == key {
                values[*slot] = Some(value);
                wanted.next();
            }
        }
    }
}

/// A [`Selector`] whose keys are slots of a [`LabelKeys`]: it matches the values
/// [`LabelKeys::values`] read, exactly as the selector matches the labels.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotSelector {
    labels: Vec<(usize, String)>,
    expressions: Vec<(usize, SelectorOperator, Vec<String>)>,
}

impl SlotSelector {
    pub fn matches(&self, values: &[Option<&str>]) -> bool {
        self.labels
            .iter()
            .all(|(slot, v)| values[*slot] == Some(v.as_str()))
            && self.expressions.iter().all(|(slot, op, values_)| {
                let value = values[*slot];
                let listed = |v: &str| values_.iter().any(|x| x == v);
                match op {
                    SelectorOperator::In => value.is_some_and(listed),
                    SelectorOperator::NotIn => value.is_none_or(|v| !listed(v)),
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
    let expressions = s.match_expressions.iter().map(|e| match e.operator {
        SelectorOperator::In => format!("{} in ({})", e.key, e.values.join(",")),
        SelectorOperator::NotIn => format!("{} notin ({})", e.key, e.values.join(",")),
        SelectorOperator::Exists => e.key.clone(),
        SelectorOperator::DoesNotExist => format!("!{}", e.key),
    });
    labels.chain(expressions).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
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
        ];
        let mut keys = LabelKeys::default();
        let slotted: Vec<SlotSelector> = selectors.iter().map(|s| s.slotted(&mut keys)).collect();
        for node in [
            labels(&[]),
            labels(&[("lifecycle", "spot"), ("zone", "a"), ("tier", "gpu")]),
            labels(&[("zone", "a"), ("tier", "cpu"), ("worker", "")]),
            labels(&[("zone", "b"), ("tier", "mem"), ("lifecycle", "on-demand")]),
        ] {
            let values = keys.values(&node);
            for (s, slot) in selectors.iter().zip(&slotted) {
                assert_eq!(s.matches(&node), slot.matches(&values), "{s:?} on {node:?}");
            }
        }
    }

    #[test]
    fn match_labels_and_expressions_all_must_hold() {
        let sel = LabelSelector {
            match_labels: labels(&[("lifecycle", "spot")]),
            match_expressions: vec![
                expr("zone", SelectorOperator::In, &["a", "b"]),
                expr("tier", SelectorOperator::NotIn, &["gpu"]),
                expr("worker", SelectorOperator::Exists, &[]),
                expr("control-plane", SelectorOperator::DoesNotExist, &[]),
            ],
        };
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
}
