//! A cached node's record that a reconcile planned it and found nothing to do,
//! with what that plan read: the policy set's generation and the stamp of the
//! node's pods. A plan is a function of the node, the policies and the node's
//! pods, so a periodic resync may skip a node whose record matches what it would
//! read now. A reconcile that waits for anything else (a `for` window, a cap, a
//! drain's pace or evictions) leaves no record.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a node's plan read besides the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanInputs {
    /// The policy set's generation, from 1 on.
    pub policies: u64,
    /// The node's pods' stamp (`PodIndex::changed`).
    pub pods: u64,
}

/// Empty until [`Settled::record`]; policy generations start at 1, so an empty
/// record matches nothing.
///
/// Two words, not a lock: each is only ever replaced by a newer value, and stamps
/// are never given out twice, so a record read while another is written mixes an
/// old and a new value that no current inputs match.
#[derive(Debug, Default)]
pub struct Settled {
    policies: AtomicU64,
    pods: AtomicU64,
}

impl Settled {
    pub fn record(&self, inputs: PlanInputs) {
        self.policies.store(inputs.policies, Ordering::Relaxed);
        self.pods.store(inputs.pods, Ordering::Relaxed);
    }

    /// Whether the last plan found nothing to do on exactly `inputs`.
    pub fn matches(&self, inputs: PlanInputs) -> bool {
        self.policies.load(Ordering::Relaxed) == inputs.policies
            && self.pods.load(Ordering::Relaxed) == inputs.pods
    }

    /// Takes over `other`'s record: for a copy of the same node version.
    pub fn copy_from(&self, other: &Settled) {
        self.policies
            .store(other.policies.load(Ordering::Relaxed), Ordering::Relaxed);
        self.pods
            .store(other.pods.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// A copy of a node version is that same version: the record comes along.
impl Clone for Settled {
    fn clone(&self) -> Self {
        let copy = Settled::default();
        copy.copy_from(self);
        copy
    }
}

/// Two nodes are equal by what they hold, not by what was planned on them.
impl PartialEq for Settled {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INPUTS: PlanInputs = PlanInputs {
        policies: 3,
        pods: 17,
    };

    #[test]
    fn an_empty_record_matches_nothing() {
        let s = Settled::default();
        assert!(!s.matches(INPUTS));
        assert!(!s.matches(PlanInputs {
            policies: 1,
            pods: 0
        }));
    }

    #[test]
    fn a_record_matches_its_inputs_only() {
        let s = Settled::default();
        s.record(INPUTS);
        assert!(s.matches(INPUTS));
        assert!(!s.matches(PlanInputs {
            policies: 4,
            ..INPUTS
        }));
        assert!(!s.matches(PlanInputs { pods: 18, ..INPUTS }));
        assert!(!s.matches(PlanInputs { pods: 0, ..INPUTS }));
    }

    #[test]
    fn a_copy_keeps_the_record() {
        let s = Settled::default();
        s.record(INPUTS);
        assert!(s.clone().matches(INPUTS));
        let t = Settled::default();
        t.copy_from(&s);
        assert!(t.matches(INPUTS));
    }
}
