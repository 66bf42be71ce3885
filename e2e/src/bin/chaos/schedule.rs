//! The run's schedule, drawn from the seed alone: cycles of a chaos window (actors
//! and overlapping faults), a heal, and a quiet window (actors, no faults). What
//! the actors do is decided here too, against a model of the fleet the schedule
//! keeps itself, so the same seed replays the same run whatever the cluster
//! answered.

use std::{collections::BTreeSet, fmt, time::Duration};

use crate::{
    rng::Rng,
    world::{
        self, CHURN_PREFIX, CHURN_SLOTS, CONDITIONS, FOREIGN_TAINTS, ForeignTaint, POOLS, ZONES,
    },
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// kube-apiserver SIGKILLed, started again later.
    ApiserverKill,
    /// etcd SIGKILLed, started again on its data later.
    EtcdRestart,
    /// The leading replica SIGKILLed, started again later.
    LeaderKill,
    /// The leading replica SIGSTOPped, SIGCONTed later: it wakes believing it leads.
    LeaderPause,
    /// One replica's connections to the API server hang.
    Blackhole,
    /// Every write of the replicas answered 429.
    Throttle,
    /// Every write of the replicas answered seconds late.
    SlowAnswers,
    /// The operator's admission webhooks unreachable.
    WebhookDown,
}

pub const FAULT_KINDS: [FaultKind; 8] = [
    FaultKind::ApiserverKill,
    FaultKind::EtcdRestart,
    FaultKind::LeaderKill,
    FaultKind::LeaderPause,
    FaultKind::Blackhole,
    FaultKind::Throttle,
    FaultKind::SlowAnswers,
    FaultKind::WebhookDown,
];

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::ApiserverKill => "apiserver-kill",
            FaultKind::EtcdRestart => "etcd-restart",
            FaultKind::LeaderKill => "leader-kill",
            FaultKind::LeaderPause => "leader-pause",
            FaultKind::Blackhole => "blackhole",
            FaultKind::Throttle => "throttle-429",
            FaultKind::SlowAnswers => "slow-answers",
            FaultKind::WebhookDown => "webhook-down",
        }
    }

    /// How long the fault lasts, in seconds: long enough to matter (a pause past
    /// the Lease's 15 s, a black hole past the renew deadline), short enough to
    /// overlap others.
    fn length_s(self) -> (u64, u64) {
        match self {
            FaultKind::ApiserverKill => (2, 10),
            FaultKind::EtcdRestart => (2, 8),
            FaultKind::LeaderKill => (3, 15),
            FaultKind::LeaderPause => (8, 30),
            FaultKind::Blackhole => (8, 30),
            FaultKind::Throttle => (5, 20),
            FaultKind::SlowAnswers => (5, 20),
            FaultKind::WebhookDown => (8, 30),
        }
    }
}

/// Which replica a fault hits: whoever leads when it starts, or one by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Leader,
    Replica(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultPlan {
    pub kind: FaultKind,
    pub start: Duration,
    pub length: Duration,
    pub target: Target,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Condition {
        node: String,
        type_: &'static str,
        status: &'static str,
    },
    CreateNode {
        node: String,
        pool: &'static str,
        zone: &'static str,
    },
    DeleteNode {
        node: String,
    },
    Relabel {
        node: String,
        pool: &'static str,
    },
    CriticalPod {
        node: String,
        ready: bool,
    },
    Foreign {
        node: String,
        taint: ForeignTaint,
        add: bool,
    },
    ToggleSuspend,
    ToggleDryRun,
    ChurnCreate {
        policy: String,
        version: u32,
    },
    ChurnEdit {
        policy: String,
        version: u32,
    },
    ChurnDelete {
        policy: String,
    },
    /// `--inject-violation`: remove a foreign taint as the operator's field manager.
    InjectViolation,
}

impl Action {
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Condition { .. } => "condition",
            Action::CreateNode { .. } => "create-node",
            Action::DeleteNode { .. } => "delete-node",
            Action::Relabel { .. } => "relabel",
            Action::CriticalPod { .. } => "critical-pod",
            Action::Foreign { .. } => "foreign-taint",
            Action::ToggleSuspend => "toggle-suspend",
            Action::ToggleDryRun => "toggle-dry-run",
            Action::ChurnCreate { .. } => "policy-create",
            Action::ChurnEdit { .. } => "policy-edit",
            Action::ChurnDelete { .. } => "policy-delete",
            Action::InjectViolation => "inject-violation",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    pub index: usize,
    pub chaos: Duration,
    pub faults: Vec<FaultPlan>,
    pub chaos_actions: Vec<(Duration, Action)>,
    pub quiet: Duration,
    pub quiet_actions: Vec<(Duration, Action)>,
}

/// The fleet as the schedule believes it to be.
struct Model {
    nodes: Vec<(String, &'static str)>,
    next_index: usize,
    foreign: BTreeSet<(String, ForeignTaint)>,
    churn: Vec<Option<u32>>,
    churn_version: u32,
}

pub struct Schedule {
    rng: Rng,
    model: Model,
    deck: Vec<FaultKind>,
    replicas: usize,
    cycles: usize,
    inject_violation: bool,
}

impl Schedule {
    pub fn new(seed: u64, nodes: usize, replicas: usize, inject_violation: bool) -> Self {
        Schedule {
            rng: Rng::new(seed),
            model: Model {
                nodes: (0..nodes)
                    .map(|i| (world::node_name(i), world::initial_labels(i).0))
                    .collect(),
                next_index: nodes,
                foreign: BTreeSet::new(),
                churn: vec![None; CHURN_SLOTS],
                churn_version: 0,
            },
            deck: Vec::new(),
            replicas,
            cycles: 0,
            inject_violation,
        }
    }

    /// Faults come off a shuffled deck of every kind, so a run of a few cycles
    /// has injected each kind at least once; a kind already in this cycle goes
    /// back under the deck for the next one.
    fn draw_fault(&mut self, drawn: &[FaultKind]) -> FaultKind {
        for _ in 0..FAULT_KINDS.len() * 2 {
            if self.deck.is_empty() {
                self.deck = FAULT_KINDS.to_vec();
                self.rng.shuffle(&mut self.deck);
            }
            let kind = self.deck.pop().expect("a refilled deck");
            if !drawn.contains(&kind) {
                return kind;
            }
            self.deck.insert(0, kind);
        }
        unreachable!("a cycle draws at most three of eight kinds")
    }

    pub fn next_cycle(&mut self) -> Cycle {
        let index = self.cycles;
        self.cycles += 1;
        let chaos = Duration::from_secs(self.rng.range(40, 70));
        let count = 1 + self.rng.below(3);
        let mut faults: Vec<FaultPlan> = Vec::new();
        for _ in 0..count {
            let drawn: Vec<FaultKind> = faults.iter().map(|f| f.kind).collect();
            let kind = self.draw_fault(&drawn);
            let (lo, hi) = kind.length_s();
            let length = self.rng.range(lo, hi + 1);
            let start = self
                .rng
                .range(0, chaos.as_secs().saturating_sub(length).max(1));
            let target = if self.rng.chance(60) {
                Target::Leader
            } else {
                Target::Replica(self.rng.below(self.replicas))
            };
            faults.push(FaultPlan {
                kind,
                start: Duration::from_secs(start),
                length: Duration::from_secs(length),
                target,
            });
        }
        faults.sort_by_key(|f| f.start);
        let mut chaos_actions = self.actions(chaos, (100, 500));
        if self.inject_violation && index == 0 {
            chaos_actions.push((Duration::from_secs(15), Action::InjectViolation));
            chaos_actions.sort_by_key(|(at, _)| *at);
        }
        let quiet = Duration::from_secs(self.rng.range(15, 25));
        let quiet_actions = self.actions(quiet, (300, 900));
        Cycle {
            index,
            chaos,
            faults,
            chaos_actions,
            quiet,
            quiet_actions,
        }
    }

    fn actions(&mut self, window: Duration, gap_ms: (u64, u64)) -> Vec<(Duration, Action)> {
        let mut out = Vec::new();
        let mut at = Duration::from_millis(self.rng.range(gap_ms.0, gap_ms.1));
        while at < window {
            out.push((at, self.action()));
            at += Duration::from_millis(self.rng.range(gap_ms.0, gap_ms.1));
        }
        out
    }

    fn random_node(&mut self) -> (String, &'static str) {
        let i = self.rng.below(self.model.nodes.len());
        self.model.nodes[i].clone()
    }

    fn action(&mut self) -> Action {
        let roll = self.rng.below(100);
        match roll {
            0..50 => {
                let (node, pool) = self.random_node();
                let (type_, statuses) = loop {
                    let c = *self.rng.pick(&CONDITIONS);
                    // Spot nodes are the ones that get preempted.
                    if c.0 != "Preempted" || pool == "spot" {
                        break c;
                    }
                };
                // Mostly back to healthy, so the fleet does not drift into one big fault.
                let status = if self.rng.chance(55) {
                    statuses[0]
                } else {
                    statuses[1 + self.rng.below(statuses.len() - 1)]
                };
                Action::Condition {
                    node,
                    type_,
                    status,
                }
            }
            50..62 => {
                let (node, _) = self.random_node();
                Action::CriticalPod {
                    node,
                    ready: self.rng.chance(60),
                }
            }
            62..74 => {
                let (node, _) = self.random_node();
                let taint = *self.rng.pick(&FOREIGN_TAINTS);
                let add = !self.model.foreign.contains(&(node.clone(), taint));
                if add {
                    self.model.foreign.insert((node.clone(), taint));
                } else {
                    self.model.foreign.remove(&(node.clone(), taint));
                }
                Action::Foreign { node, taint, add }
            }
            74..80 => {
                let (node, _) = self.random_node();
                let pool = *self.rng.pick(&POOLS);
                if let Some(n) = self.model.nodes.iter_mut().find(|(n, _)| *n == node) {
                    n.1 = pool;
                }
                Action::Relabel { node, pool }
            }
            80..85 => {
                let node = world::node_name(self.model.next_index);
                self.model.next_index += 1;
                let pool = *self.rng.pick(&POOLS);
                let zone = *self.rng.pick(&ZONES);
                self.model.nodes.push((node.clone(), pool));
                Action::CreateNode { node, pool, zone }
            }
            85..89 if self.model.nodes.len() > 3 => {
                let i = self.rng.below(self.model.nodes.len());
                let (node, _) = self.model.nodes.remove(i);
                self.model.foreign.retain(|(n, _)| *n != node);
                Action::DeleteNode { node }
            }
            89..92 => Action::ToggleSuspend,
            92..95 => Action::ToggleDryRun,
            _ => {
                let slot = self.rng.below(CHURN_SLOTS);
                let policy = format!("{CHURN_PREFIX}{slot}");
                self.model.churn_version += 1;
                let version = self.model.churn_version;
                match self.model.churn[slot] {
                    None => {
                        self.model.churn[slot] = Some(version);
                        Action::ChurnCreate { policy, version }
                    }
                    Some(_) if self.rng.chance(60) => {
                        self.model.churn[slot] = Some(version);
                        Action::ChurnEdit { policy, version }
                    }
                    Some(_) => {
                        self.model.churn[slot] = None;
                        Action::ChurnDelete { policy }
                    }
                }
            }
        }
    }
}

/// A short fingerprint of the cycles a run went through: two runs of one seed
/// print the same one.
pub struct Digest(u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(0xcbf2_9ce4_8422_2325)
    }
}

impl Digest {
    pub fn add(&mut self, cycle: &Cycle) {
        for b in format!("{cycle:?}").bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycles(seed: u64, n: usize) -> Vec<Cycle> {
        let mut s = Schedule::new(seed, 60, 3, false);
        (0..n).map(|_| s.next_cycle()).collect()
    }

    #[test]
    fn a_seed_replays_the_same_schedule() {
        assert_eq!(cycles(42, 5), cycles(42, 5));
        assert_ne!(cycles(42, 5), cycles(43, 5));
    }

    #[test]
    fn four_cycles_inject_every_fault_kind() {
        for seed in 0..20 {
            let kinds: BTreeSet<FaultKind> = cycles(seed, 8)
                .iter()
                .flat_map(|c| c.faults.iter().map(|f| f.kind))
                .collect();
            assert_eq!(kinds.len(), FAULT_KINDS.len(), "seed {seed}: {kinds:?}");
        }
    }

    #[test]
    fn a_cycle_never_draws_one_kind_twice() {
        for c in cycles(3, 200) {
            let kinds: BTreeSet<FaultKind> = c.faults.iter().map(|f| f.kind).collect();
            assert_eq!(kinds.len(), c.faults.len(), "{c:?}");
        }
    }

    #[test]
    fn faults_end_within_their_chaos_window() {
        for c in cycles(9, 30) {
            for f in &c.faults {
                assert!(
                    f.start + f.length <= c.chaos + Duration::from_secs(1),
                    "{c:?}"
                );
            }
        }
    }

    #[test]
    fn foreign_taints_are_added_before_they_are_removed() {
        let mut on = BTreeSet::new();
        for c in cycles(5, 20) {
            for (_, a) in c.chaos_actions.iter().chain(&c.quiet_actions) {
                match a {
                    Action::Foreign {
                        node,
                        taint,
                        add: true,
                    } => assert!(on.insert((node.clone(), *taint))),
                    Action::Foreign {
                        node,
                        taint,
                        add: false,
                    } => assert!(on.remove(&(node.clone(), *taint))),
                    Action::DeleteNode { node } => on.retain(|(n, _)| n != node),
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn the_injected_violation_comes_once_and_only_when_asked() {
        let mut s = Schedule::new(1, 60, 3, true);
        let first = s.next_cycle();
        let second = s.next_cycle();
        let count = |c: &Cycle| {
            c.chaos_actions
                .iter()
                .filter(|(_, a)| *a == Action::InjectViolation)
                .count()
        };
        assert_eq!((count(&first), count(&second)), (1, 0));
        assert_eq!(
            cycles(1, 1)[0]
                .chaos_actions
                .iter()
                .filter(|(_, a)| *a == Action::InjectViolation)
                .count(),
            0
        );
    }
}
