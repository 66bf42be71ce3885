//! `spec.eviction`, compiled: how fast a drain may go, how long it may wait, and
//! when a zone is judged unhealthy. The policy compiles it; `drain` and `pace` read it.

use std::time::Duration;

use k8s_openapi::{apimachinery::pkg::util::intstr::IntOrString, jiff::Timestamp};
use taint_operator_crd::Eviction;

use crate::{duration::parse_go_duration, invalid_spec::InvalidSpec};

/// `spec.eviction`, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionRules {
    pub respect_budgets: bool,
    pub drain_timeout: Option<Duration>,
    /// As written, for messages.
    pub drain_timeout_source: Option<String>,
    pub nodes_per_minute: Option<u32>,
    pub zone_pause: Option<IntOrString>,
    /// How long a zone's matching share must hold still before the zone is judged
    /// (only with `zone_pause`).
    pub zone_settle: Duration,
}

/// `zoneSettle` when not given: longer than a burst of condition writes from one
/// fault takes to reach the API server, shorter than a drain.
pub const DEFAULT_ZONE_SETTLE: Duration = Duration::from_secs(5);

/// What a policy reads of one zone to judge it: of its selected nodes, how many
/// its matchers match, and the latest moment any of their matcher answers changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZoneHealth {
    pub matched: usize,
    pub selected: usize,
    pub changed: Option<Timestamp>,
}

impl ZoneHealth {
    /// Counts one selected node: whether it matches, and when its answer last
    /// changed (or will change, when a `for` window is running).
    pub fn count(&mut self, matched: bool, changed: Option<Timestamp>) {
        self.selected += 1;
        self.matched += usize::from(matched);
        self.changed = self.changed.max(changed);
    }
}

/// A zone as a drain gate sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    /// Drains go ahead.
    Open,
    /// Its matching share changed less than `zoneSettle` ago: nothing starts or
    /// switches before `until`.
    Settling { until: Timestamp },
    /// More than `pauseWhenZoneUnhealthy` of it matches: nothing starts or
    /// switches until it heals.
    Held,
}

impl EvictionRules {
    pub fn compile(e: &Eviction) -> Result<Self, InvalidSpec> {
        let drain_timeout = match &e.drain_timeout {
            None => None,
            Some(d) => Some(parse_go_duration(d).ok_or_else(|| InvalidSpec {
                field: "spec.eviction.drainTimeout".into(),
                message: format!(
                    "invalid duration {d:?}: use a Go duration such as 10m or 1h30m, at most 2562047h"
                ),
            })?),
        };
        let nodes_per_minute = match e.nodes_per_minute {
            None => None,
            Some(n) if n >= 1 => Some(n as u32),
            Some(n) => {
                return Err(InvalidSpec {
                    field: "spec.eviction.nodesPerMinute".into(),
                    message: format!("must be at least 1, not {n}"),
                });
            }
        };
        if let Some(share) = &e.pause_when_zone_unhealthy
            && parse_share(share).is_none()
        {
            return Err(InvalidSpec {
                field: "spec.eviction.pauseWhenZoneUnhealthy".into(),
                message: "must be a non-negative integer or a percentage from 0% to 100%".into(),
            });
        }
        let zone_settle = match &e.zone_settle {
            None => DEFAULT_ZONE_SETTLE,
            Some(d) => parse_go_duration(d).ok_or_else(|| InvalidSpec {
                field: "spec.eviction.zoneSettle".into(),
                message: format!("invalid duration {d:?}: use a Go duration such as 5s or 1m"),
            })?,
        };
        Ok(EvictionRules {
            zone_settle,
            respect_budgets: e.respect_disruption_budgets.unwrap_or(true),
            drain_timeout,
            drain_timeout_source: e.drain_timeout.clone(),
            nodes_per_minute,
            zone_pause: e.pause_when_zone_unhealthy.clone(),
        })
    }

    /// The time between two paced steps in one zone: `60 s / nodesPerMinute`.
    pub fn interval(&self) -> Option<Duration> {
        self.nodes_per_minute
            .map(|n| Duration::from_secs(60) / n.max(1))
    }

    /// How a zone with `health` stands at `now`: settling while its share changed
    /// less than `zoneSettle` ago, then held or open by the share. Without
    /// `pauseWhenZoneUnhealthy`, always open.
    pub fn zone_state(&self, health: &ZoneHealth, now: Timestamp) -> ZoneState {
        if self.zone_pause.is_none() {
            return ZoneState::Open;
        }
        if let Some(changed) = health.changed {
            let until = crate::duration::add(changed, self.zone_settle);
            if until > now {
                return ZoneState::Settling { until };
            }
        }
        if self.zone_held(health.matched, health.selected) {
            ZoneState::Held
        } else {
            ZoneState::Open
        }
    }

    /// True when a zone where `matched` of `selected` nodes match the matchers is
    /// unhealthy: more than `pauseWhenZoneUnhealthy` of them.
    pub fn zone_held(&self, matched: usize, selected: usize) -> bool {
        match self.zone_pause.as_ref().and_then(parse_share) {
            None => false,
            Some(Share::Count(n)) => matched > n,
            Some(Share::Percent(p)) => matched * 100 > selected * p,
        }
    }
}

enum Share {
    Count(usize),
    Percent(usize),
}

fn parse_share(share: &IntOrString) -> Option<Share> {
    match share {
        IntOrString::Int(n) => usize::try_from(*n).ok().map(Share::Count),
        IntOrString::String(s) => match s.strip_suffix('%') {
            Some(p) => p
                .parse::<usize>()
                .ok()
                .filter(|p| *p <= 100)
                .map(Share::Percent),
            None => s.parse().ok().map(Share::Count),
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    pub(crate) fn rules(json: serde_json::Value) -> EvictionRules {
        EvictionRules::compile(&serde_json::from_value(json).unwrap()).unwrap()
    }

    #[test]
    fn the_share_is_more_than_a_count_or_a_percentage() {
        let r = rules(serde_json::json!({"pauseWhenZoneUnhealthy": "50%"}));
        assert!(!r.zone_held(2, 4));
        assert!(r.zone_held(3, 4));
        let r = rules(serde_json::json!({"pauseWhenZoneUnhealthy": 2}));
        assert!(!r.zone_held(2, 100));
        assert!(r.zone_held(3, 100));
        let r = rules(serde_json::json!({"pauseWhenZoneUnhealthy": "0%"}));
        assert!(!r.zone_held(0, 4) && r.zone_held(1, 4));
        assert!(!rules(serde_json::json!({})).zone_held(4, 4));
    }

    #[test]
    fn bad_fields_are_named() {
        let bad =
            |json| EvictionRules::compile(&serde_json::from_value(json).unwrap()).unwrap_err();
        assert_eq!(
            bad(serde_json::json!({"drainTimeout": "soon"})).field,
            "spec.eviction.drainTimeout"
        );
        assert_eq!(
            bad(serde_json::json!({"nodesPerMinute": 0})).field,
            "spec.eviction.nodesPerMinute"
        );
        assert_eq!(
            bad(serde_json::json!({"pauseWhenZoneUnhealthy": "120%"})).field,
            "spec.eviction.pauseWhenZoneUnhealthy"
        );
    }

    #[test]
    fn defaults_respect_budgets_and_pace_nothing() {
        let r = rules(serde_json::json!({}));
        assert!(r.respect_budgets);
        assert_eq!(r.interval(), None);
        assert_eq!(
            rules(serde_json::json!({"nodesPerMinute": 6})).interval(),
            Some(Duration::from_secs(10))
        );
    }

    fn health(matched: usize, selected: usize, changed: &str) -> ZoneHealth {
        ZoneHealth {
            matched,
            selected,
            changed: Some(t(changed)),
        }
    }

    #[test]
    fn a_zone_is_judged_once_its_share_has_held_still_for_zone_settle() {
        let r = rules(serde_json::json!({"pauseWhenZoneUnhealthy": "50%"}));
        assert_eq!(r.zone_settle, DEFAULT_ZONE_SETTLE);
        let now = t("2026-11-20T12:00:10Z");
        // Moved 4 s ago: settling until 5 s after the move, healthy or not.
        for (matched, selected) in [(1, 4), (3, 4)] {
            assert_eq!(
                r.zone_state(&health(matched, selected, "2026-11-20T12:00:06Z"), now),
                ZoneState::Settling {
                    until: t("2026-11-20T12:00:11Z")
                }
            );
        }
        // Moved exactly 5 s ago: judged by its share.
        let still = "2026-11-20T12:00:05Z";
        assert_eq!(r.zone_state(&health(3, 4, still), now), ZoneState::Held);
        assert_eq!(r.zone_state(&health(2, 4, still), now), ZoneState::Open);
        // A move stamped ahead of now (a reporter's clock runs fast) settles from then.
        assert!(matches!(
            r.zone_state(&health(0, 4, "2026-11-20T12:00:30Z"), now),
            ZoneState::Settling { .. }
        ));
        // No time known: judged at once.
        let timeless = ZoneHealth {
            matched: 3,
            selected: 4,
            changed: None,
        };
        assert_eq!(r.zone_state(&timeless, now), ZoneState::Held);
    }

    #[test]
    fn zone_settle_can_be_changed_or_turned_off_and_needs_a_zone_pause() {
        let now = t("2026-11-20T12:00:10Z");
        let moved = health(3, 4, "2026-11-20T12:00:09Z");
        let off = rules(serde_json::json!({"pauseWhenZoneUnhealthy": "50%", "zoneSettle": "0s"}));
        assert_eq!(off.zone_state(&moved, now), ZoneState::Held);
        let long = rules(serde_json::json!({"pauseWhenZoneUnhealthy": "50%", "zoneSettle": "1m"}));
        assert_eq!(
            long.zone_state(&moved, now),
            ZoneState::Settling {
                until: t("2026-11-20T12:01:09Z")
            }
        );
        // Without pauseWhenZoneUnhealthy nothing is judged.
        assert_eq!(
            rules(serde_json::json!({})).zone_state(&moved, now),
            ZoneState::Open
        );
    }

    #[test]
    fn a_bad_zone_settle_is_named() {
        let bad = EvictionRules::compile(
            &serde_json::from_value(
                serde_json::json!({"pauseWhenZoneUnhealthy": 1, "zoneSettle": "soon"}),
            )
            .unwrap(),
        )
        .unwrap_err();
        assert_eq!(bad.field, "spec.eviction.zoneSettle");
    }
}
