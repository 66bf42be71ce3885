//! Summarising a burst of node taint events per policy and change.
//!
//! A fleet-wide change (a zone's nodes lose a condition, a policy is created or
//! deleted) writes thousands of nodes within seconds. An event for each would be
//! an API write and an etcd object each: a second fleet-wide write, which made the
//! events trail the change by minutes at their budget and had the queue drop most
//! of them. So the events the publisher holds when it gets to send are grouped by
//! (reason, policy, taint change). A group of more than [`SUMMARY_ABOVE`] nodes
//! becomes one event on the TaintPolicy that counts the nodes and names the first
//! few with their reasons; smaller groups keep an event on each node. This is
//! client-go's event aggregation, across objects instead of within one.
//!
//! Pure: no client, no clock. `node_events` feeds it and sends what it returns.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};

/// The most nodes that get an event each for the same change of the same policy in
/// one batch; more become one summary on the policy.
pub const SUMMARY_ABOVE: usize = 10;
/// Nodes a summary names, with their reasons.
const NAMED: usize = 5;
/// What an event note may hold (events.k8s.io: 1 kB).
const NOTE_MAX: usize = 1000;

/// One taint change a node event explains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyChange {
    pub policy: String,
    /// "added key=value:NoSchedule", "removed key:NoExecute (until ...)".
    pub what: String,
    /// Why, for this node: "condition NIC=Kaput matched".
    pub why: String,
}

impl PolicyChange {
    /// `policy p added k:NoSchedule: why`: what a node event (and the log) says.
    pub fn note(&self) -> String {
        format!("policy {} {}: {}", self.policy, self.what, self.why)
    }
}

/// A node's taint event: every change one write made in one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct TaintEvent {
    pub node: ObjectReference,
    /// `TaintAdded` or `TaintRemoved`, and its action.
    pub reason: String,
    pub action: String,
    pub changes: Vec<PolicyChange>,
}

/// What a summary stands for: the same change by the same policy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupKey {
    pub reason: String,
    pub action: String,
    pub policy: String,
    pub what: String,
}

impl GroupKey {
    pub fn of(event: &TaintEvent, change: &PolicyChange) -> Self {
        GroupKey {
            reason: event.reason.clone(),
            action: event.action.clone(),
            policy: change.policy.clone(),
            what: change.what.clone(),
        }
    }
}

/// An event to publish, about `about`.
pub struct Outgoing {
    pub event: Event,
    pub about: ObjectReference,
}

/// The event for one node: `policy a added k:NoSchedule: why; policy b ...`, cut
/// to the 1 kB a note may hold.
pub fn node_event(reason: &str, action: &str, changes: &[PolicyChange]) -> Event {
    let note = changes
        .iter()
        .map(PolicyChange::note)
        .collect::<Vec<_>>()
        .join("; ");
    Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(cut(note)),
        action: action.into(),
        secondary: None,
    }
}

/// What to publish for a batch of taint events.
pub struct Summary {
    /// Per held event, in its place: its node's event, or None when every change
    /// it made is in a summary.
    pub per_node: Vec<Option<Outgoing>>,
    /// One per summarised group, in group order.
    pub summaries: Vec<Outgoing>,
    /// Folded changes whose group stayed small enough for per-node events, which
    /// need the node the fold did not keep.
    pub lost: usize,
}

/// The events for a batch: `held`, in the order they came, and `folded`, the
/// changes of nodes the batch had no room to hold one by one (counted per group).
pub fn summarise(
    held: Vec<TaintEvent>,
    folded: &BTreeMap<GroupKey, usize>,
    policy_ref: impl Fn(&str) -> ObjectReference,
) -> Summary {
    let mut counts: BTreeMap<GroupKey, usize> = folded.clone();
    for event in &held {
        for change in &event.changes {
            *counts.entry(GroupKey::of(event, change)).or_default() += 1;
        }
    }
    let summarised = |key: &GroupKey| counts.get(key).is_some_and(|n| *n > SUMMARY_ABOVE);

    let mut per_node = Vec::with_capacity(held.len());
    // Per summarised group: the first nodes, with why.
    let mut named: BTreeMap<GroupKey, Vec<(String, String)>> = BTreeMap::new();
    for event in held {
        let mut own = Vec::new();
        for change in event.changes.iter() {
            let key = GroupKey::of(&event, change);
            if summarised(&key) {
                let names = named.entry(key).or_default();
                if names.len() < NAMED {
                    let node = event.node.name.clone().unwrap_or_default();
                    names.push((node, change.why.clone()));
                }
            } else {
                own.push(change.clone());
            }
        }
        per_node.push((!own.is_empty()).then(|| Outgoing {
            event: node_event(&event.reason, &event.action, &own),
            about: event.node,
        }));
    }
    let mut summaries = Vec::new();
    let mut lost = 0;
    for (key, n) in &counts {
        if !summarised(key) {
            lost += folded.get(key).copied().unwrap_or(0);
            continue;
        }
        let names = named.remove(key).unwrap_or_default();
        summaries.push(Outgoing {
            event: Event {
                type_: EventType::Normal,
                reason: key.reason.clone(),
                note: Some(summary_note(key, *n, &names)),
                action: key.action.clone(),
                secondary: None,
            },
            about: policy_ref(&key.policy),
        });
    }
    Summary {
        per_node,
        summaries,
        lost,
    }
}

/// `policy p added k:NoSchedule on 1200 nodes: n1 (why), n2 (why), ... and 1195 more`.
/// As many named nodes as fit in a note; the count always does.
fn summary_note(key: &GroupKey, nodes: usize, named: &[(String, String)]) -> String {
    let head = format!("policy {} {} on {nodes} nodes: ", key.policy, key.what);
    let more = |shown: usize| match nodes - shown {
        0 => String::new(),
        rest => format!(" and {rest} more"),
    };
    let items: Vec<String> = named
        .iter()
        .map(|(node, why)| format!("{node} ({why})"))
        .collect();
    for shown in (1..=items.len()).rev() {
        let note = format!("{head}{}{}", items[..shown].join(", "), more(shown));
        if note.len() <= NOTE_MAX {
            return note;
        }
    }
    // Not even one fits whole: the first, shortened.
    let tail = more(1);
    let room = NOTE_MAX.saturating_sub(head.len() + tail.len());
    let first = items.first().map(|i| cut_to(i, room)).unwrap_or_default();
    cut(format!("{head}{first}{tail}"))
}

fn cut(note: String) -> String {
    if note.len() <= NOTE_MAX {
        note
    } else {
        cut_to(&note, NOTE_MAX)
    }
}

/// `text` in at most `max` bytes, ending in "..." when shortened.
fn cut_to(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(i: usize) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(format!("n{i}")),
            uid: Some(format!("uid-{i}")),
            ..ObjectReference::default()
        }
    }

    fn change(policy: &str, what: &str, why: &str) -> PolicyChange {
        PolicyChange {
            policy: policy.into(),
            what: what.into(),
            why: why.into(),
        }
    }

    fn added(i: usize, changes: Vec<PolicyChange>) -> TaintEvent {
        TaintEvent {
            node: node(i),
            reason: "TaintAdded".into(),
            action: "AddTaint".into(),
            changes,
        }
    }

    fn policy_ref(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("nodetaint.io/v1alpha1".into()),
            kind: Some("TaintPolicy".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    /// What goes out, per-node events first, and the folded changes lost.
    fn summarise(
        held: Vec<TaintEvent>,
        folded: &BTreeMap<GroupKey, usize>,
        policy_ref: impl Fn(&str) -> ObjectReference,
    ) -> (Vec<Outgoing>, usize) {
        let s = super::summarise(held, folded, policy_ref);
        let out = s
            .per_node
            .into_iter()
            .flatten()
            .chain(s.summaries)
            .collect();
        (out, s.lost)
    }

    fn note(o: &Outgoing) -> &str {
        o.event.note.as_deref().unwrap()
    }

    #[test]
    fn a_few_nodes_keep_an_event_each_with_every_change() {
        let held: Vec<_> = (0..SUMMARY_ABOVE)
            .map(|i| {
                added(
                    i,
                    vec![
                        change("a", "added a:NoSchedule", "condition X=True matched"),
                        change("b", "added b:NoExecute", "condition Y=True matched"),
                    ],
                )
            })
            .collect();
        let (out, lost) = summarise(held, &BTreeMap::new(), policy_ref);
        assert_eq!(lost, 0);
        assert_eq!(out.len(), SUMMARY_ABOVE);
        for (i, o) in out.iter().enumerate() {
            assert_eq!(o.about, node(i));
            assert_eq!(o.event.reason, "TaintAdded");
            assert_eq!(o.event.action, "AddTaint");
            assert_eq!(
                note(o),
                "policy a added a:NoSchedule: condition X=True matched; policy b added b:NoExecute: condition Y=True matched"
            );
        }
    }

    #[test]
    fn a_burst_becomes_one_event_on_the_policy_counting_every_node() {
        let held: Vec<_> = (0..1000)
            .map(|i| {
                added(
                    i,
                    vec![change(
                        "nic",
                        "added nic:NoSchedule",
                        &format!("condition NIC=Kaput matched ({i})"),
                    )],
                )
            })
            .collect();
        let (out, lost) = summarise(held, &BTreeMap::new(), policy_ref);
        assert_eq!(lost, 0);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].about, policy_ref("nic"));
        assert_eq!(out[0].event.reason, "TaintAdded");
        assert_eq!(out[0].event.action, "AddTaint");
        assert_eq!(
            note(&out[0]),
            "policy nic added nic:NoSchedule on 1000 nodes: n0 (condition NIC=Kaput matched (0)), \
             n1 (condition NIC=Kaput matched (1)), n2 (condition NIC=Kaput matched (2)), \
             n3 (condition NIC=Kaput matched (3)), n4 (condition NIC=Kaput matched (4)) and 995 more"
        );
    }

    #[test]
    fn a_node_in_a_burst_keeps_its_event_for_the_changes_outside_it() {
        let mut held: Vec<_> = (0..20)
            .map(|i| added(i, vec![change("big", "added big:NoSchedule", "why")]))
            .collect();
        held[3]
            .changes
            .push(change("small", "added small:NoSchedule", "only here"));
        let (out, _) = summarise(held, &BTreeMap::new(), policy_ref);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].about, node(3));
        assert_eq!(
            note(&out[0]),
            "policy small added small:NoSchedule: only here"
        );
        assert_eq!(out[1].about, policy_ref("big"));
        assert!(note(&out[1]).starts_with("policy big added big:NoSchedule on 20 nodes: "));
    }

    #[test]
    fn additions_and_removals_and_policies_are_summarised_apart() {
        let mut held = Vec::new();
        for i in 0..15 {
            held.push(added(i, vec![change("a", "added a:NoSchedule", "w")]));
            held.push(added(i, vec![change("b", "added b:NoSchedule", "w")]));
            held.push(TaintEvent {
                reason: "TaintRemoved".into(),
                action: "RemoveTaint".into(),
                ..added(i + 100, vec![change("a", "removed a:NoSchedule", "w")])
            });
        }
        let (out, _) = summarise(held, &BTreeMap::new(), policy_ref);
        let got: Vec<_> = out
            .iter()
            .map(|o| (o.about.name.clone().unwrap(), o.event.reason.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("a".to_string(), "TaintAdded".to_string()),
                ("b".into(), "TaintAdded".into()),
                ("a".into(), "TaintRemoved".into()),
            ]
        );
    }

    #[test]
    fn folded_changes_count_in_their_summary() {
        let held: Vec<_> = (0..4)
            .map(|i| added(i, vec![change("p", "added p:NoSchedule", "w")]))
            .collect();
        let key = GroupKey::of(&held[0], &held[0].changes[0]);
        let folded = BTreeMap::from([(key, 4996)]);
        let (out, lost) = summarise(held, &folded, policy_ref);
        assert_eq!(lost, 0);
        assert_eq!(out.len(), 1);
        assert!(
            note(&out[0]).contains(" on 5000 nodes: n0 (w), n1 (w), n2 (w), n3 (w) and 4996 more")
        );
    }

    #[test]
    fn folded_changes_of_a_small_group_are_lost_and_counted() {
        let held = vec![added(0, vec![change("p", "added p:NoSchedule", "w")])];
        let key = GroupKey {
            policy: "q".into(),
            what: "added q:NoSchedule".into(),
            ..GroupKey::of(&held[0], &held[0].changes[0])
        };
        let (out, lost) = summarise(held, &BTreeMap::from([(key, 3)]), policy_ref);
        assert_eq!(lost, 3);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].about, node(0));
    }

    #[test]
    fn notes_fit_in_an_event_and_a_summary_keeps_its_count() {
        let long = "x".repeat(600);
        let held: Vec<_> = (0..2)
            .map(|i| {
                added(
                    i,
                    vec![
                        change("a", "added a:NoSchedule", &long),
                        change("b", "added b:NoSchedule", &long),
                    ],
                )
            })
            .collect();
        let (out, _) = summarise(held, &BTreeMap::new(), policy_ref);
        assert!(out.iter().all(|o| note(o).len() <= NOTE_MAX));
        assert!(note(&out[0]).ends_with("..."));

        let longer = "x".repeat(1200);
        let held: Vec<_> = (0..50)
            .map(|i| added(i, vec![change("a", "added a:NoSchedule", &longer)]))
            .collect();
        let (out, _) = summarise(held, &BTreeMap::new(), policy_ref);
        let n = note(&out[0]);
        assert!(n.len() <= NOTE_MAX, "{}", n.len());
        assert!(n.starts_with("policy a added a:NoSchedule on 50 nodes: n0 ("));
        assert!(n.ends_with("... and 49 more"), "{n}");

        // Short reasons: as many nodes as fit are named, and the count says the rest.
        let held: Vec<_> = (0..50)
            .map(|i| added(i, vec![change("a", "added a:NoSchedule", &"y".repeat(150))]))
            .collect();
        let (out, _) = summarise(held, &BTreeMap::new(), policy_ref);
        let n = note(&out[0]);
        assert!(n.len() <= NOTE_MAX, "{}", n.len());
        assert!(n.contains("n4 (") && n.ends_with(" and 45 more"), "{n}");
    }
}
