//! The drains of a whole-cluster plan: each zone's health and pace, read from
//! every node before any drain step is planned.
//!
//! A plan starts with fresh pacers seeded from what the nodes record (see
//! `drain::history`), and hands out turns in the order nodes ask, so within one
//! plan at most one node per zone takes each paced step at `now`. The controller
//! keeps its pacers between reconciles instead (`drain::Pacer` is the same).

use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;

use crate::{
    cluster::NodeView,
    decision::{Verdict, matchers_changed_at},
    drain::{self, DrainStep, GateFacts, Gated, PaceKind, Wait},
    eviction_rules::ZoneHealth,
    pace::Pacer,
    policy_set::PolicySet,
};

/// A policy's zone: the policy's index and the zone's name.
type Zone<'a> = (usize, &'a str);

pub struct ClusterDrains<'a> {
    set: &'a PolicySet,
    now: Timestamp,
    /// Active policies with `spec.eviction` and something to drain.
    evicting: Vec<usize>,
    /// Per zone: what judging it reads (with `pauseWhenZoneUnhealthy` only).
    health: HashMap<Zone<'a>, ZoneHealth>,
    /// Per zone and kind: the latest step the nodes record.
    history: HashMap<(Zone<'a>, PaceKind), Timestamp>,
    pacers: RefCell<HashMap<(Zone<'a>, PaceKind), Pacer>>,
    next_check: Cell<Option<Timestamp>>,
    waits: RefCell<Vec<DrainWait>>,
}

/// What a node's drain of one policy waits for after a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainWait {
    pub node: String,
    pub policy: String,
    pub wait: Wait,
}

impl<'a> ClusterDrains<'a> {
    pub fn new(set: &'a PolicySet, now: Timestamp) -> Self {
        let evicting = (0..set.policies.len())
            .filter(|&i| {
                set.policies[i].is_active() && drain::drained_taints(set, i).next().is_some()
            })
            .collect();
        ClusterDrains {
            set,
            now,
            evicting,
            health: HashMap::new(),
            history: HashMap::new(),
            pacers: RefCell::default(),
            next_check: Cell::new(None),
            waits: RefCell::default(),
        }
    }

    /// No policy drains: nothing here costs anything.
    pub fn is_empty(&self) -> bool {
        self.evicting.is_empty()
    }

    pub fn evicting(&self) -> &[usize] {
        &self.evicting
    }

    /// Counts `node`, whose verdicts are `row`, in its zone's health and pace.
    pub fn observe(&mut self, node: &'a NodeView, row: &[Verdict]) {
        let zone = drain::zone_of(&node.labels);
        for &i in &self.evicting {
            let rules = drain::rules_of(self.set, i).expect("an evicting policy");
            if rules.zone_pause.is_some() && row[i].selected {
                let changed = matchers_changed_at(&self.set.policies[i], node, self.now);
                self.health
                    .entry((i, zone))
                    .or_default()
                    .count(row[i].matched, changed);
            }
            if rules.interval().is_some() {
                let [start, switch] = drain::history(self.set, i, node);
                for (kind, at) in [(PaceKind::Start, start), (PaceKind::Switch, switch)] {
                    if let Some(at) = at {
                        let latest = self.history.entry(((i, zone), kind)).or_insert(at);
                        *latest = (*latest).max(at);
                    }
                }
            }
        }
    }

    /// True when planning `node` needs a drain gate, which waits for every node's
    /// zone health and pace history.
    pub fn asks(&self, node: &NodeView, row: &[Verdict]) -> bool {
        self.evicting.iter().any(|&i| {
            row[i].wants_taints() && drain::step(self.set, i, node) != DrainStep::Switched
        })
    }

    /// The zones where policy `i` holds its switches: `(zone, matched, selected)`,
    /// sorted by zone.
    pub fn held_zones(&self, i: usize) -> Vec<(String, usize, usize)> {
        let Some(rules) = drain::rules_of(self.set, i) else {
            return Vec::new();
        };
        let mut held: Vec<_> = self
            .health
            .iter()
            .filter(|((j, _), h)| *j == i && rules.zone_held(h.matched, h.selected))
            .map(|((_, zone), h)| (zone.to_string(), h.matched, h.selected))
            .collect();
        held.sort();
        held
    }

    /// Policy `i`'s drain gate on `node` (verdict `v`), once every node was
    /// observed. `evicted`: every pod in the way is gone, as far as the caller knows.
    pub fn gate(&self, i: usize, node: &'a NodeView, v: Verdict, evicted: bool) -> Gated {
        let Some(rules) = drain::rules_of(self.set, i) else {
            return Gated::default();
        };
        let zone = drain::zone_of(&node.labels);
        let health = self.health.get(&(i, zone)).copied().unwrap_or_default();
        let zone_state = || rules.zone_state(&health, self.now);
        let facts = GateFacts {
            paced: v.capped(),
            evicted,
            zone: &zone_state,
        };
        let step = drain::step(self.set, i, node);
        let interval = rules.interval().unwrap_or(Duration::ZERO);
        let mut asked = None;
        let mut pacers = self.pacers.borrow_mut();
        let mut pace = |kind: PaceKind| {
            asked = Some(kind);
            let last = self.history.get(&((i, zone), kind)).copied();
            pacers
                .entry(((i, zone), kind))
                .or_insert_with(|| Pacer::new(interval, last))
                .slot(&node.name, self.now)
        };
        let gated = drain::gate(rules, step, facts, self.now, &mut pace);
        if let (Some(kind), true) = (asked, gated.gate.start || gated.gate.switch) {
            pacers
                .get_mut(&((i, zone), kind))
                .expect("asked above")
                .used(&node.name, self.now);
        }
        if let Some(wait) = gated.wait {
            if let Some(at) = wait.until() {
                self.next_check
                    .set(Some(self.next_check.get().map_or(at, |n| n.min(at))));
            }
            self.waits.borrow_mut().push(DrainWait {
                node: node.name.clone(),
                policy: self.set.policies[i].name.clone(),
                wait,
            });
        }
        gated
    }

    /// The earliest moment a waiting drain may move by itself (a turn, a timeout).
    pub fn next_check(&self) -> Option<Timestamp> {
        self.next_check.get()
    }

    /// What every drain gate that stayed closed waits for.
    pub fn into_waits(self) -> Vec<DrainWait> {
        self.waits.into_inner()
    }
}
