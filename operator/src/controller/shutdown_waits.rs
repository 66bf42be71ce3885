//! One event on a node whose out-of-service taint waits for it to be down.
//!
//! The engine keeps `node.kubernetes.io/out-of-service` off a node whose kubelet
//! reports Ready (see `engine::out_of_service`). The node is reconciled again at
//! each change while it waits (heartbeats, conditions); an event each time would
//! say the same thing again, so each wait is announced once, when it begins.

use std::{collections::HashMap, sync::Mutex};

use kube::runtime::events::{Event, EventType};

/// Node name → the policies whose out-of-service taint waits on it, as announced.
#[derive(Debug, Default)]
pub struct ShutdownWaits(Mutex<HashMap<String, Vec<String>>>);

impl ShutdownWaits {
    /// The policies of `waiting` that did not wait on `node` at its last plan; the
    /// node's record becomes `waiting`.
    pub fn newly_waiting(&self, node: &str, waiting: &[String]) -> Vec<String> {
        let mut announced = self.0.lock().expect("shutdown waits lock");
        if waiting.is_empty() {
            announced.remove(node);
            return Vec::new();
        }
        let before = announced.insert(node.to_string(), waiting.to_vec());
        waiting
            .iter()
            .filter(|p| before.as_ref().is_none_or(|b| !b.contains(p)))
            .cloned()
            .collect()
    }

    /// Forgets a deleted node.
    pub fn forget(&self, node: &str) {
        self.0.lock().expect("shutdown waits lock").remove(node);
    }
}

/// The event that says why the node does not get the taint yet.
pub fn waiting_event(policies: &[String]) -> Event {
    Event {
        type_: EventType::Warning,
        reason: "OutOfServiceWaiting".into(),
        note: Some(format!(
            "policy {}: {}",
            policies.join(", "),
            engine::out_of_service::WAITING
        )),
        action: "AddTaint".into(),
        secondary: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_wait_is_announced_once_until_it_ends() {
        let waits = ShutdownWaits::default();
        assert_eq!(waits.newly_waiting("n1", &names(&["spot"])), ["spot"]);
        assert!(waits.newly_waiting("n1", &names(&["spot"])).is_empty());
        assert_eq!(
            waits.newly_waiting("n1", &names(&["spot", "other"])),
            ["other"]
        );
        assert!(waits.newly_waiting("n1", &[]).is_empty());
        assert_eq!(waits.newly_waiting("n1", &names(&["spot"])), ["spot"]);
        assert_eq!(waits.newly_waiting("n2", &names(&["spot"])), ["spot"]);
        waits.forget("n2");
        assert_eq!(waits.newly_waiting("n2", &names(&["spot"])), ["spot"]);
    }

    #[test]
    fn the_event_names_the_policy_and_why() {
        let event = waiting_event(&names(&["spot-out-of-service"]));
        assert_eq!(event.reason, "OutOfServiceWaiting");
        let note = event.note.unwrap();
        assert!(note.starts_with("policy spot-out-of-service: node.kubernetes.io/out-of-service waits until the node is down"), "{note}");
        assert!(note.contains("Ready=True"), "{note}");
    }
}
