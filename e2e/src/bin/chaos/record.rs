//! What the checker is fed: what its own watches saw, what the API server's audit
//! log says each replica wrote, what the foreign actor did, and when faults and
//! quiet windows began and ended. Times are the machine's wall clock in
//! microseconds: the API server stamps its audit log from the same clock.

use std::collections::BTreeMap;

pub type Micros = i64;

pub fn now_micros() -> Micros {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as Micros)
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaintRec {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

impl TaintRec {
    pub fn new(key: &str, value: Option<&str>, effect: &str) -> Self {
        TaintRec {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
        }
    }

    pub fn slot(&self) -> (String, String) {
        (self.key.clone(), self.effect.clone())
    }
}

impl std::fmt::Display for TaintRec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={}:{}", self.key, v, self.effect),
            None => write!(f, "{}:{}", self.key, self.effect),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeState {
    pub uid: String,
    pub taints: Vec<TaintRec>,
    /// The operator's annotations (`nodetaint.io/*`).
    pub records: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodState {
    pub node: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub ready: bool,
    pub terminating: bool,
    pub finished: bool,
    pub daemonset: bool,
}

impl PodState {
    /// What a budget counts: Ready and not on its way out.
    pub fn healthy(&self) -> bool {
        self.ready && !self.terminating && !self.finished
    }

    /// What a drain must move off its node first.
    pub fn evictable(&self) -> bool {
        !self.daemonset && !self.terminating && !self.finished
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionRules {
    pub drain_timeout_s: Option<i64>,
}

/// What the checker needs of a policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyRules {
    pub taints: Vec<TaintRec>,
    /// `maxTaintedNodes` when an integer.
    pub cap: Option<usize>,
    pub eviction: Option<EvictionRules>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub min_available: usize,
    pub selector: BTreeMap<String, String>,
}

/// One write of an operator replica, from the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// When the API server received it.
    pub at: Micros,
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
}

impl Write {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

/// One write of the Lease, from the audit log, as the API server stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseWrite {
    /// When the API server answered: the record holds from then.
    pub at: Micros,
    pub user: String,
    pub holder: Option<String>,
    pub duration_s: i64,
    pub code: u16,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Node {
        at: Micros,
        name: String,
        state: Option<NodeState>,
    },
    /// The node watch listed again: what it saw before may have changed unseen.
    NodesRelisted {
        at: Micros,
    },
    Pod {
        at: Micros,
        ns: String,
        name: String,
        state: Option<PodState>,
    },
    Policy {
        at: Micros,
        name: String,
        rules: Option<PolicyRules>,
    },
    Budget {
        at: Micros,
        ns: String,
        name: String,
        budget: Option<Budget>,
    },
    Write(Write),
    Lease(LeaseWrite),
    ForeignAdded {
        at: Micros,
        node: String,
        taint: TaintRec,
    },
    ForeignRemoving {
        at: Micros,
        node: String,
        taint: TaintRec,
    },
    Fault {
        at: Micros,
        kind: &'static str,
        active: bool,
    },
    Quiet {
        at: Micros,
        open: bool,
    },
    /// The convergence check after a heal: `diff` empty when the cluster matched the plan.
    Converged {
        at: Micros,
        after: String,
        seconds: f64,
        diff: Vec<String>,
    },
}

impl Event {
    pub fn at(&self) -> Micros {
        match self {
            Event::Node { at, .. }
            | Event::NodesRelisted { at }
            | Event::Pod { at, .. }
            | Event::Policy { at, .. }
            | Event::Budget { at, .. }
            | Event::ForeignAdded { at, .. }
            | Event::ForeignRemoving { at, .. }
            | Event::Fault { at, .. }
            | Event::Quiet { at, .. }
            | Event::Converged { at, .. } => *at,
            Event::Write(w) => w.at,
            Event::Lease(l) => l.at,
        }
    }
}
