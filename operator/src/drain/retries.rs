//! Each node's eviction retries: how many rounds in a row left pods in the way,
//! when the next round is due, and the blocked evictions already reported. A
//! node's reconcile asks before evicting ([`EvictionRetries::due_in`]) and tells
//! how its rounds ended ([`EvictionRetries::end`]).

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;

use crate::jitter::jitter;

/// The first wait before evicting again when pods are still in the way; it
/// doubles to [`EVICTION_RETRY_MAX`]. kubectl drain retries every 5 s.
pub const EVICTION_RETRY_FIRST: Duration = Duration::from_secs(5);
pub const EVICTION_RETRY_MAX: Duration = Duration::from_secs(60);

/// How a node's evictions stand when its reconcile ends.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Evictions {
    /// Nothing waits for an eviction (any more): the retries start over.
    #[default]
    Done,
    /// The last round's backoff still runs: nothing was tried.
    BackingOff,
    /// Pods are still in the way after this reconcile's rounds.
    PodsLeft,
}

/// What the retries answer a reconcile whose rounds ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RoundsEnded {
    /// When to evict again: pods are still in the way.
    pub evict_again_in: Option<Duration>,
    /// For each blocked eviction told: reported for the first time.
    pub first_blocks: Vec<bool>,
}

#[derive(Default)]
pub struct EvictionRetries(Mutex<Retries>);

impl EvictionRetries {
    /// How long until the node's next eviction round is due; `None`: it is due now.
    pub fn due_in(&self, node: &str, now: Timestamp) -> Option<Duration> {
        self.lock().round_due_in(node, now)
    }

    /// The node's reconcile ended with its evictions as `evictions`, and found
    /// `blocked` (pod, the API server's message) evictions.
    pub fn end<'b>(
        &self,
        node: &str,
        now: Timestamp,
        evictions: Evictions,
        blocked: impl IntoIterator<Item = (&'b str, &'b str)>,
    ) -> RoundsEnded {
        let mut retries = self.lock();
        let evict_again_in = match evictions {
            Evictions::Done => {
                retries.evictions_done(node);
                None
            }
            Evictions::BackingOff => None,
            Evictions::PodsLeft => Some(retries.evict_again_in(node, now)),
        };
        let first_blocks = blocked
            .into_iter()
            .map(|(pod, message)| retries.first_block(node, pod, message))
            .collect();
        RoundsEnded {
            evict_again_in,
            first_blocks,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Retries> {
        self.0.lock().expect("eviction retries lock")
    }
}

#[derive(Default)]
struct Retries {
    /// Eviction rounds in a row that left pods in the way, per node.
    rounds: HashMap<String, u32>,
    /// When each node's next eviction round is due: a reconcile that comes sooner
    /// (the node changed, its own write came back) does not evict again.
    next_round: HashMap<String, Timestamp>,
    /// (node, pod, budget message) blocked evictions already reported.
    reported: HashSet<(String, String, String)>,
}

impl Retries {
    /// An eviction round at `now` left pods in the way: how long until the next one.
    fn evict_again_in(&mut self, node: &str, now: Timestamp) -> Duration {
        let rounds = self.rounds.entry(node.to_string()).or_default();
        *rounds += 1;
        let base = EVICTION_RETRY_FIRST
            .saturating_mul(1 << (*rounds - 1).min(8))
            .min(EVICTION_RETRY_MAX);
        let wait = jitter(base, 0.2);
        self.next_round
            .insert(node.to_string(), engine::drain::add(now, wait));
        wait
    }

    fn round_due_in(&self, node: &str, now: Timestamp) -> Option<Duration> {
        let due = *self.next_round.get(node)?;
        (due > now).then(|| Duration::try_from(due.duration_since(now)).unwrap_or_default())
    }

    /// Nothing is in the way of the node's drains any more (or it drains nothing).
    fn evictions_done(&mut self, node: &str) {
        self.rounds.remove(node);
        self.next_round.remove(node);
        self.reported.retain(|(n, _, _)| n != node);
    }

    /// True the first time this pod's eviction is blocked with this message on this
    /// node's drain: one Warning event each, not one per retry.
    fn first_block(&mut self, node: &str, pod: &str, message: &str) -> bool {
        self.reported
            .insert((node.to_string(), pod.to_string(), message.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_retries_grow_and_reset() {
        let now = taint_operator_testkit::now();
        let mut ledger = Retries::default();
        assert_eq!(ledger.round_due_in("n", now), None);
        let first = ledger.evict_again_in("n", now);
        assert!(first >= Duration::from_secs(4) && first <= Duration::from_secs(6));
        // A reconcile before the round is due does not evict.
        let left = ledger.round_due_in("n", engine::drain::add(now, Duration::from_secs(1)));
        assert!(
            left.is_some_and(|d| d + Duration::from_secs(1) <= first + Duration::from_millis(1))
        );
        assert_eq!(
            ledger.round_due_in("n", engine::drain::add(now, first)),
            None
        );
        let second = ledger.evict_again_in("n", now);
        assert!(second >= Duration::from_secs(8) && second <= Duration::from_secs(12));
        assert!(ledger.first_block("n", "ns/p", "budget b"));
        assert!(!ledger.first_block("n", "ns/p", "budget b"));
        ledger.evictions_done("n");
        assert_eq!(ledger.round_due_in("n", now), None);
        assert!(ledger.evict_again_in("n", now) <= Duration::from_secs(6));
        assert!(ledger.first_block("n", "ns/p", "budget b"));
    }

    #[test]
    fn a_reconcile_backs_off_until_its_evictions_are_done() {
        let now = Timestamp::UNIX_EPOCH;
        let retries = EvictionRetries::default();
        let first = retries.end("n1", now, Evictions::PodsLeft, [("ns/p", "budget b")]);
        let wait = first.evict_again_in.expect("pods left: evict again");
        assert_eq!(first.first_blocks, [true]);
        assert_eq!(retries.due_in("n1", now), Some(wait));
        let again = retries.end("n1", now, Evictions::BackingOff, []);
        assert_eq!(again.evict_again_in, None, "backing off tries nothing");
        let second = retries.end("n1", now, Evictions::PodsLeft, [("ns/p", "budget b")]);
        assert_eq!(second.first_blocks, [false], "reported once");
        assert!(second.evict_again_in.is_some(), "pods still left");
        retries.end("n1", now, Evictions::Done, []);
        assert_eq!(retries.due_in("n1", now), None);
    }
}
