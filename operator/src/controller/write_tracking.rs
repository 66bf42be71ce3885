//! Node writes in flight and just done, so that the node watch's echo of our own
//! write costs no second reconcile and a reconcile never plans on the version a
//! write of ours replaced; and the fence that says whether this replica may write
//! at all.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use prometheus_client::metrics::counter::Counter;

use crate::{
    cache::{node_cache::CachedNode, node_store::NodeStore},
    controller::node_events::WriteActivity,
    write_fence::WriteFence,
};

pub struct WriteTracking {
    /// Node name → (the resourceVersion our last write to it replaced, the node that
    /// write returned), until the node watch delivers anything newer. A reconcile
    /// that runs before then would plan on the replaced node and lose a conflict.
    recent_writes: Mutex<HashMap<String, (String, Arc<CachedNode>)>>,
    /// Node name → the newest resourceVersion the node watch brought while a patch
    /// of ours to that node was on its way (None: nothing yet). Locked before
    /// `recent_writes` wherever both are held.
    in_flight: Mutex<HashMap<String, Option<String>>>,
    /// Nodes queued for or in a reconcile: node events wait for them (see `node_events`).
    activity: Arc<WriteActivity>,
    /// Until when this replica may write (moved by the leader election).
    fence: WriteFence,
    nodes: NodeStore,
    echoes_skipped: Counter,
}

/// What the node watch brought, to the node queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Brought {
    /// A write to the node is on its way: held until it is answered.
    Parked,
    /// The echo of our own last write: planning again would change nothing.
    OwnEcho,
    /// Anything else: queue the node.
    Change,
}

impl WriteTracking {
    pub fn new(nodes: NodeStore, fence: WriteFence, echoes_skipped: Counter) -> Self {
        WriteTracking {
            recent_writes: Mutex::default(),
            in_flight: Mutex::default(),
            activity: Arc::new(WriteActivity::default()),
            fence,
            nodes,
            echoes_skipped,
        }
    }

    pub fn fence(&self) -> &WriteFence {
        &self.fence
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

    /// A patch of `node` is about to be sent: what the node watch brings for it
    /// until [`WriteTracking::write_done`] is parked there, not queued.
    pub fn writing(&self, node: &str) {
        self.in_flight
            .lock()
            .expect("writes in flight lock")
            .insert(node.to_string(), None);
    }

    /// The write that [`WriteTracking::writing`] announced is over; `written` is
    /// the version it replaced and the node it returned, None when nothing was
    /// written (no change, or an error). A version the watch brought meanwhile is
    /// dropped when it is the write's own echo or the version the write was planned
    /// on. True for anything else: the node must be queued again, as the watch
    /// would have.
    #[must_use]
    pub fn write_done(&self, node: &str, written: Option<(&str, &CachedNode)>) -> bool {
        let mut flight = self.in_flight.lock().expect("writes in flight lock");
        let parked = flight.remove(node).flatten();
        let is = |rv: Option<&str>| parked.is_some() && rv == parked.as_deref();
        if written.is_some_and(|(_, w)| is(w.resource_version())) {
            // the echo came before the answer: nothing newer to wait for
            self.echoes_skipped.inc();
            false
        } else if parked.is_none() || written.is_some_and(|(base, _)| is(Some(base))) {
            if let Some((base, w)) = written {
                self.remember_write(base, w);
            }
            false
        } else {
            true
        }
    }

    /// What the node watch brought for `node`, judged before it is queued.
    pub fn watch_brought(&self, node: &CachedNode) -> Brought {
        let mut flight = self.in_flight.lock().expect("writes in flight lock");
        if let Some(slot) = flight.get_mut(node.name()) {
            *slot = node.resource_version().map(str::to_string);
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
