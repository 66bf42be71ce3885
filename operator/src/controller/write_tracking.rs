//! Node reconciles under way and writes just done, so that the node watch's echo
//! of our own write costs no second reconcile and a reconcile never plans on the
//! version a write of ours replaced; and the settled records a reconcile leaves.
//!
//! A reconcile brackets its node: [`WriteTracking::begin`] gives it the freshest
//! version to plan on, [`WriteTracking::end`] takes what it wrote and whether it
//! settled. What the node watch brings in between is held and judged at the end.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use prometheus_client::metrics::counter::Counter;

use crate::{
    cache::{node_cache::CachedNode, node_store::NodeStore, settled::PlanInputs},
    controller::node_events::WriteActivity,
};

pub struct WriteTracking {
    /// Node name → (the resourceVersion our last write to it replaced, the node that
    /// write returned), until the node watch delivers anything newer. A reconcile
    /// that runs before then would plan on the replaced node and lose a conflict.
    recent_writes: Mutex<HashMap<String, (String, Arc<CachedNode>)>>,
    /// Node name → the reconciles of it under way, and the newest resourceVersion
    /// the node watch brought meanwhile (None: nothing yet). Locked before
    /// `recent_writes` wherever both are held.
    in_flight: Mutex<HashMap<String, InFlight>>,
    /// Nodes queued for or in a reconcile: node events wait for them (see `node_events`).
    activity: Arc<WriteActivity>,
    nodes: NodeStore,
    echoes_skipped: Counter,
}

#[derive(Debug, Default)]
struct InFlight {
    /// Reconciles between `begin` and `end`: the node queue runs one per node, a
    /// policy's cleanup may run beside it.
    reconciles: u32,
    /// The newest version the node watch brought since the first `begin`.
    brought: Option<String>,
}

/// What the node watch brought, to the node queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Brought {
    /// A reconcile of the node is under way: held until it ends.
    Parked,
    /// The echo of our own last write: planning again would change nothing.
    OwnEcho,
    /// Anything else: queue the node.
    Change,
}

impl WriteTracking {
    pub fn new(nodes: NodeStore, echoes_skipped: Counter) -> Self {
        WriteTracking {
            recent_writes: Mutex::default(),
            in_flight: Mutex::default(),
            activity: Arc::new(WriteActivity::default()),
            nodes,
            echoes_skipped,
        }
    }

    pub fn activity(&self) -> &Arc<WriteActivity> {
        &self.activity
    }

    /// `cached`, or the node our own last write returned when the cache has not
    /// caught up with that write yet.
    pub fn freshest(&self, cached: Arc<CachedNode>) -> Arc<CachedNode> {
        let name = cached.name();
        let mut writes = self.recent_writes.lock().expect("recent writes lock");
        match writes.get(name) {
            Some((replaced, written)) if cached.resource_version() == Some(replaced) => {
                written.clone()
            }
            Some(_) => {
                writes.remove(name);
                cached
            }
            None => cached,
        }
    }

    /// A reconcile of `cached`'s node begins: the version to plan on (`cached`, or
    /// our own last write when the cache has not caught up with it). What the node
    /// watch brings for the node until [`WriteTracking::end`] is held there, not queued.
    pub fn begin(&self, cached: Arc<CachedNode>) -> Arc<CachedNode> {
        self.in_flight
            .lock()
            .expect("writes in flight lock")
            .entry(cached.name().to_string())
            .or_default()
            .reconciles += 1;
        self.freshest(cached)
    }

    /// The reconcile that [`WriteTracking::begin`] announced is over. `written` is
    /// the version its write replaced and the node the write returned, None when
    /// nothing was written (no change, or an error); `settled` the version planned
    /// or written when planning it again would change nothing, with what that plan
    /// read. A version the watch brought meanwhile is dropped when it is the
    /// write's own echo or the version the write was planned on. True for anything
    /// else: the node must be queued again, as the watch would have.
    #[must_use]
    pub fn end(
        &self,
        node: &str,
        written: Option<(&str, &CachedNode)>,
        settled: Option<(&str, PlanInputs)>,
    ) -> bool {
        let requeue = {
            let mut flight = self.in_flight.lock().expect("writes in flight lock");
            let brought = match flight.get_mut(node) {
                Some(f) if f.reconciles > 1 => {
                    f.reconciles -= 1;
                    f.brought.clone()
                }
                _ => flight.remove(node).and_then(|f| f.brought),
            };
            self.judge(brought, written)
        };
        if let Some((version, inputs)) = settled {
            self.record_settled(node, version, inputs);
        }
        requeue
    }

    /// Whether a version the watch brought during a reconcile needs another one.
    fn judge(&self, brought: Option<String>, written: Option<(&str, &CachedNode)>) -> bool {
        let is = |rv: Option<&str>| brought.is_some() && rv == brought.as_deref();
        if written.is_some_and(|(_, w)| is(w.resource_version())) {
            // the echo came before the answer: nothing newer to wait for
            self.echoes_skipped.inc();
            false
        } else if brought.is_none() || written.is_some_and(|(base, _)| is(Some(base))) {
            if let Some((base, w)) = written {
                self.remember_write(base, w);
            }
            false
        } else {
            true
        }
    }

    /// Records, on the node version the cache (or our write) has now, that planning
    /// it found nothing to do: only when that is the `version` planned or written.
    fn record_settled(&self, node: &str, version: &str, inputs: PlanInputs) {
        let Some(cached) = self.nodes.get(node) else {
            return;
        };
        let current = self.freshest(cached);
        if current.resource_version() == Some(version) {
            current.settled.record(inputs);
        }
    }

    /// What the node watch brought for `node`, judged before it is queued.
    pub fn watch_brought(&self, node: &CachedNode) -> Brought {
        let mut flight = self.in_flight.lock().expect("writes in flight lock");
        if let Some(f) = flight.get_mut(node.name()) {
            f.brought = node.resource_version().map(str::to_string);
            return Brought::Parked;
        }
        if let Some(written) = self.own_echo_of(node) {
            // The very version our write returned: what was recorded of its plan holds.
            node.settled.copy_from(&written.settled);
            self.echoes_skipped.inc();
            self.node_seen(node.name());
            return Brought::OwnEcho;
        }
        Brought::Change
    }

    /// Remembers a write until the node watch shows something newer. Not when the
    /// cache already has moved past the node the write replaced.
    fn remember_write(&self, base_resource_version: &str, written: &CachedNode) {
        let name = written.name().to_string();
        let cached = self.nodes.get(&name);
        if cached.is_some_and(|c| c.resource_version() == Some(base_resource_version)) {
            self.recent_writes
                .lock()
                .expect("recent writes lock")
                .insert(
                    name,
                    (base_resource_version.to_string(), Arc::new(written.clone())),
                );
        }
    }

    /// Our own last write to `node`, when `node` is its echo: the version the patch
    /// answered with, coming back through the watch. The write's reconcile planned
    /// on exactly what it wrote, so planning again would find nothing to do (a plan
    /// applied twice equals it applied once); the queue is spared that reconcile.
    fn own_echo_of(&self, node: &CachedNode) -> Option<Arc<CachedNode>> {
        let writes = self.recent_writes.lock().expect("recent writes lock");
        writes
            .get(node.name())
            .filter(|(_, written)| {
                written.resource_version().is_some()
                    && written.resource_version() == node.resource_version()
            })
            .map(|(_, written)| written.clone())
    }

    /// The node watch delivered a version of `node`: newer than any write of ours it has.
    pub fn node_seen(&self, node: &str) {
        self.recent_writes
            .lock()
            .expect("recent writes lock")
            .remove(node);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;

    use super::*;

    fn node(rv: &str) -> CachedNode {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.resource_version = Some(rv.into());
        CachedNode::from_node(&n)
    }

    fn tracking() -> (WriteTracking, NodeStore) {
        let nodes = NodeStore::default();
        let t = WriteTracking::new(nodes.clone(), Counter::default());
        (t, nodes)
    }

    #[test]
    fn a_change_brought_during_a_reconcile_is_held_then_queued_at_its_end() {
        let (t, nodes) = tracking();
        let planned = t.begin(nodes.apply(node("1")));
        assert_eq!(planned.resource_version(), Some("1"));
        assert_eq!(t.watch_brought(&nodes.apply(node("2"))), Brought::Parked);
        assert!(t.end("n1", None, None), "the change must be reconciled");
        assert_eq!(t.watch_brought(&nodes.apply(node("3"))), Brought::Change);
    }

    #[test]
    fn the_writes_echo_and_the_version_it_was_planned_on_are_dropped() {
        let (t, nodes) = tracking();
        t.begin(nodes.apply(node("1")));
        assert_eq!(t.watch_brought(&nodes.apply(node("2"))), Brought::Parked);
        assert!(!t.end("n1", Some(("1", &node("2"))), None), "the echo");
        assert_eq!(t.echoes_skipped.get(), 1);

        t.begin(nodes.apply(node("2")));
        assert_eq!(t.watch_brought(&nodes.apply(node("3"))), Brought::Parked);
        // A conflict re-read version 3 and the write replaced it.
        assert!(!t.end("n1", Some(("3", &node("4"))), None));
        let fresh = t.begin(nodes.get("n1").unwrap());
        assert_eq!(
            fresh.resource_version(),
            Some("4"),
            "plans on our own write"
        );
        assert!(!t.end("n1", None, None));
    }

    #[test]
    fn two_reconciles_of_a_node_both_judge_what_came_meanwhile() {
        let (t, nodes) = tracking();
        t.begin(nodes.apply(node("1")));
        t.begin(nodes.apply(node("1")));
        assert_eq!(t.watch_brought(&nodes.apply(node("2"))), Brought::Parked);
        assert!(t.end("n1", None, None));
        assert_eq!(
            t.watch_brought(&nodes.apply(node("3"))),
            Brought::Parked,
            "one still runs"
        );
        assert!(t.end("n1", None, None));
        assert_eq!(t.watch_brought(&nodes.apply(node("4"))), Brought::Change);
    }

    #[test]
    fn a_settled_record_lands_on_the_version_planned_only() {
        let (t, nodes) = tracking();
        let inputs = PlanInputs {
            policies: 1,
            pods: 7,
        };
        t.begin(nodes.apply(node("1")));
        assert!(!t.end("n1", None, Some(("1", inputs))));
        assert!(nodes.get("n1").unwrap().settled.matches(inputs));

        t.begin(nodes.get("n1").unwrap());
        let newer = nodes.apply(node("2"));
        assert_eq!(t.watch_brought(&newer), Brought::Parked);
        assert!(t.end("n1", None, Some(("1", inputs))));
        assert!(!nodes.get("n1").unwrap().settled.matches(inputs));
    }
}
