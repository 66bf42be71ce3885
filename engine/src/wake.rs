//! When a node's reconcile looks at the node again, and whether what it planned is
//! settled (a resync may skip the node until something it read changes). Every
//! reason to come back is a field of [`Waits`]; [`next_look`] is the one place
//! they are weighed.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How soon a node held back by `maxTaintedNodes` is looked at again: nothing else
/// wakes it when another node heals and frees a place.
pub const HELD_BACK_RECHECK: Duration = Duration::from_secs(10);

/// How soon a node whose switch a zone holds (`pauseWhenZoneUnhealthy`) is looked
/// at again: the zone heals through other nodes' changes, which do not wake it.
pub const ZONE_HELD_RECHECK: Duration = Duration::from_secs(10);

/// What one reconcile of a node found to wait for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    /// From the evaluation: a `for` window ends, a condition goes stale, a
    /// `clearAfter` ends.
    pub evaluation: Option<Timestamp>,
    /// `maxTaintedNodes` held a wanted taint back.
    pub held_back: bool,
    /// A drain gate opens at this time (its turn in the zone's pace, the zone judged,
    /// `drainTimeout`).
    pub drain_at: Option<Timestamp>,
    /// A zone holds a switch to NoExecute.
    pub zone_held: bool,
    /// A drain gate stayed closed for something else (pods in the way).
    pub gate_waited: bool,
    /// This reconcile's write started a drain: its evictions are the next reconcile's job.
    pub drain_started: bool,
    /// Evictions refused by a budget, to try again after this long.
    pub eviction_retry: Option<Duration>,
    /// Evictions under way for a drain of the node.
    pub evicting: bool,
}

/// When to look again (`None`: only when something the plan read changes), and
/// whether the plan is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    pub at: Option<Timestamp>,
    pub settled: bool,
}

pub fn next_look(now: Timestamp, w: Waits) -> Wake {
    let after = |d: Duration| {
        now.checked_add(SignedDuration::try_from(d).unwrap_or_default())
            .unwrap_or(Timestamp::MAX)
    };
    let at = [
        w.evaluation,
        w.drain_started.then_some(now),
        w.held_back.then(|| after(HELD_BACK_RECHECK)),
        w.drain_at,
        w.zone_held.then(|| after(ZONE_HELD_RECHECK)),
        w.eviction_retry.map(after),
    ]
    .into_iter()
    .flatten()
    .min();
    Wake {
        at,
        settled: at.is_none() && !w.gate_waited && !w.evicting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn nothing_to_wait_for_is_settled() {
        assert_eq!(
            next_look(t(0), Waits::default()),
            Wake {
                at: None,
                settled: true
            }
        );
    }

    #[test]
    fn the_soonest_reason_wins() {
        let w = Waits {
            evaluation: Some(t(30)),
            held_back: true,
            drain_at: Some(t(12)),
            zone_held: true,
            eviction_retry: Some(Duration::from_secs(5)),
            ..Waits::default()
        };
        assert_eq!(next_look(t(0), w).at, Some(t(5)));
        let w = Waits {
            eviction_retry: None,
            ..w
        };
        assert_eq!(next_look(t(0), w).at, Some(t(10)));
        assert_eq!(
            next_look(
                t(0),
                Waits {
                    evaluation: Some(t(30)),
                    ..Waits::default()
                }
            ),
            Wake {
                at: Some(t(30)),
                settled: false
            }
        );
    }

    #[test]
    fn a_drain_this_write_started_comes_back_at_once() {
        let w = Waits {
            drain_started: true,
            evaluation: Some(t(30)),
            ..Waits::default()
        };
        assert_eq!(next_look(t(0), w).at, Some(t(0)));
    }

    #[test]
    fn the_rechecks_are_their_own_intervals() {
        let held = Waits {
            held_back: true,
            ..Waits::default()
        };
        assert_eq!(next_look(t(0), held).at, Some(t(10)));
        let zone = Waits {
            zone_held: true,
            ..Waits::default()
        };
        assert_eq!(next_look(t(0), zone).at, Some(t(10)));
    }

    #[test]
    fn a_closed_gate_or_evictions_under_way_are_not_settled_without_a_time() {
        for w in [
            Waits {
                gate_waited: true,
                ..Waits::default()
            },
            Waits {
                evicting: true,
                ..Waits::default()
            },
        ] {
            assert_eq!(
                next_look(t(0), w),
                Wake {
                    at: None,
                    settled: false
                }
            );
        }
    }
}
