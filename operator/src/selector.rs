//! Label selector matching for `nodeSelector` and critical-pod selectors.

use std::collections::BTreeMap;

use taint_operator_crd::{LabelSelector, SelectorOperator};

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

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.expressions.iter().all(|(key, op, values)| {
                let value = labels.get(key);
                match op {
                    SelectorOperator::In => value.is_some_and(|v| values.contains(v)),
                    SelectorOperator::NotIn => value.is_none_or(|v| !values.contains(v)),
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
