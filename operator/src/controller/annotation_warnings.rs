//! Saying so when a node's ownership annotations are not what the operator writes.
//!
//! A malformed `nodetaint.io/managed-taints` or `nodetaint.io/bootstrapped` proves
//! no ownership (nor does a malformed `nodetaint.io/drain-started` prove a drain),
//! so the engine reads it as empty and the next write replaces it.
//! That is the safe reading, but silently losing someone's edit is not: each node
//! and value gets one Warning event and one log line naming the annotation.

use std::{
    collections::HashSet,
    hash::{DefaultHasher, Hash, Hasher},
    sync::Mutex,
};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, DRAIN_STARTED_ANNOTATION, MANAGED_TAINTS_ANNOTATION,
};

use crate::cache::node_cache::CachedNode;
use engine::ownership::{Bootstrapped, DrainStarts, ManagedTaints};

/// Whether an annotation's value is what the operator writes.
type WellFormed = fn(&str) -> bool;

/// The (node, annotation, value hash) triples already reported.
#[derive(Default)]
pub struct Reported(Mutex<HashSet<(Box<str>, &'static str, u64)>>);

/// Warns once per node and value about each malformed ownership annotation;
/// `emit` queues the event.
pub fn warn_malformed(
    reported: &Reported,
    node: &CachedNode,
    emit: impl Fn(Event, ObjectReference),
) {
    let checks: [(&'static str, WellFormed); 3] = [
        (MANAGED_TAINTS_ANNOTATION, ManagedTaints::well_formed),
        (BOOTSTRAPPED_ANNOTATION, Bootstrapped::well_formed),
        (DRAIN_STARTED_ANNOTATION, DrainStarts::well_formed),
    ];
    for (key, well_formed) in checks {
        let Some(value) = node.annotations.get(key) else {
            continue;
        };
        if well_formed(value) || !reported.first_time(node.name(), key, value) {
            continue;
        }
        tracing::warn!(
            node = node.name(),
            annotation = key,
            value = %shorten(value),
            "annotation is not what the operator writes; it proves no ownership and is replaced on the next write"
        );
        let event = Event {
            type_: EventType::Warning,
            reason: "MalformedAnnotation".into(),
            note: Some(format!(
                "annotation {key} is not valid JSON of the right shape ({}); it proves no ownership, so the operator ignores it and replaces it on its next write of this node",
                shorten(value)
            )),
            action: "IgnoreAnnotation".into(),
            secondary: None,
        };
        emit(event, node.object_ref());
    }
}

impl Reported {
    /// True the first time this node has this value in this annotation.
    fn first_time(&self, node: &str, key: &'static str, value: &str) -> bool {
        let mut hasher = DefaultHasher::new();
        value.hash(&mut hasher);
        self.0.lock().expect("reported annotations lock").insert((
            Box::from(node),
            key,
            hasher.finish(),
        ))
    }
}

/// The value for a log line or an event note: at most 200 bytes.
fn shorten(value: &str) -> String {
    if value.len() <= 200 {
        return format!("{value:?}");
    }
    let mut cut = 200;
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{:?}...", &value[..cut])
}

#[cfg(test)]
mod tests {
    use std::{cell::RefCell, collections::BTreeMap};

    use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::ObjectMeta};

    use super::*;

    fn node(name: &str, annotations: &[(&str, &str)]) -> CachedNode {
        CachedNode::from_node(&Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        })
    }

    #[test]
    fn each_node_and_value_is_reported_once() {
        let reported = Reported::default();
        let notes = RefCell::new(Vec::new());
        let warn = |n: &CachedNode| {
            warn_malformed(&reported, n, |e, r| {
                notes.borrow_mut().push((r.name.unwrap(), e.note.unwrap()))
            })
        };
        let bad = node("n1", &[(MANAGED_TAINTS_ANNOTATION, "oops")]);
        warn(&bad);
        warn(&bad);
        assert_eq!(notes.borrow().len(), 1, "the same value twice: one warning");
        warn(&node("n1", &[(MANAGED_TAINTS_ANNOTATION, "oops again")]));
        warn(&node("n2", &[(MANAGED_TAINTS_ANNOTATION, "oops")]));
        warn(&node(
            "n3",
            &[(BOOTSTRAPPED_ANNOTATION, r#"{"p":"no-at"}"#)],
        ));
        warn(&node(
            "n4",
            &[(MANAGED_TAINTS_ANNOTATION, r#"{"k:NoSchedule":"p"}"#)],
        ));
        let notes = notes.borrow();
        let named: Vec<(&str, bool)> = notes
            .iter()
            .map(|(n, note)| (n.as_str(), note.contains(BOOTSTRAPPED_ANNOTATION)))
            .collect();
        assert_eq!(
            named,
            [("n1", false), ("n1", false), ("n2", false), ("n3", true)]
        );
    }
}
