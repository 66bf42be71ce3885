//! The events this replica publishes: node events queued until the node writes
//! are idle (`node_events`), taint events summarised per policy
//! (`event_summary`), policy events sent at once, and the malformed annotations
//! already warned about.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, Reporter},
};

use crate::controller::{
    annotation_warnings::Reported,
    event_summary::TaintEvent,
    node_events::{self, EventPace, EventQueue, PolicyRef, WriteActivity},
};

/// A node event of either kind a reconcile tells.
pub enum NodeEvent {
    Plain(Event, ObjectReference),
    Taints(TaintEvent),
}

pub struct Events {
    client: Client,
    /// Who the events say they come from.
    reporter: Reporter,
    queue: EventQueue,
    /// Malformed ownership annotations already warned about.
    malformed_reported: Reported,
}

impl Events {
    pub fn start(
        client: Client,
        reporter: Reporter,
        activity: Arc<WriteActivity>,
        pace: EventPace,
        dropped: prometheus_client::metrics::counter::Counter,
        policy_ref: PolicyRef,
    ) -> Self {
        let queue = EventQueue::start(
            client.clone(),
            reporter.clone(),
            activity,
            pace,
            dropped,
            policy_ref,
        );
        Events {
            client,
            reporter,
            queue,
            malformed_reported: Reported::default(),
        }
    }

    pub fn malformed_reported(&self) -> &Reported {
        &self.malformed_reported
    }

    /// Publishes an event about `reference` now; see `node_events::publish`.
    pub async fn publish(
        &self,
        event: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        node_events::publish(&self.client, &self.reporter, event, reference).await
    }

    /// Queues a node event; it goes out once the node writes are done.
    pub fn emit(&self, event: Event, reference: ObjectReference) {
        self.queue.push(event, reference);
    }

    /// Queues a node's taint event; a burst of them is summarised per policy.
    fn emit_taints(&self, event: TaintEvent) {
        self.queue.push_taints(event);
    }

    /// Queues what a node's reconcile tells, in order.
    pub fn emit_all(&self, events: Vec<NodeEvent>) {
        for event in events {
            match event {
                NodeEvent::Plain(event, reference) => self.emit(event, reference),
                NodeEvent::Taints(event) => self.emit_taints(event),
            }
        }
    }

    /// Sends the queued node events now, waiting at most `limit` for them. False
    /// if some were left unsent.
    pub async fn drain(&self, limit: Duration) -> bool {
        self.queue.drain(limit).await
    }
}
