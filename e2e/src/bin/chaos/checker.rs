//! The soak's judge. It trusts nothing the operator says: it is fed only its own
//! watches, the API server's audit log, and what the harness itself did (see
//! [`crate::record`]), and checks six invariants as the events come:
//!
//! 1. `foreign-taints`: a taint the operator does not own, once seen on a node, is
//!    never removed or changed by anyone but the harness's own foreign writer;
//! 2. `max-tainted-nodes`: a capped policy's taints are never on more nodes than
//!    its cap (the soak's capped policies select every node);
//! 3. `single-writer`: no node write from a replica that does not hold the Lease
//!    when the API server receives it (the Lease as the API server last stored it,
//!    still within its duration);
//! 4. `disruption-budgets`: no pod deleted by a replica, no eviction that leaves a
//!    budget below its minimum, and no switch to NoExecute while a pod the drain
//!    had to evict is still running on the node, unless the drain timed out;
//! 5. `converge`: after each heal the cluster matches the offline plan in time
//!    (judged by the harness, reported here);
//! 6. `writes-per-transition`: in a quiet window, every node write of the operator
//!    changes what the operator keeps on the node (taints or its records).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::record::{
    Budget, Event, LeaseWrite, Micros, NodeState, PodState, PolicyRules, TaintRec, Write,
};

pub const FOREIGN: &str = "foreign-taints";
pub const CAP: &str = "max-tainted-nodes";
pub const WRITER: &str = "single-writer";
pub const BUDGETS: &str = "disruption-budgets";
pub const CONVERGE: &str = "converge";
pub const WRITES: &str = "writes-per-transition";
pub const INVARIANTS: [&str; 6] = [FOREIGN, CAP, WRITER, BUDGETS, CONVERGE, WRITES];

/// The audit log is written as answers go out, not in the order requests came in:
/// an entry is judged once it is this much older than the newest time seen.
pub const AUDIT_DELAY: Micros = 4_000_000;
/// A pod the drain had to move must be on its way out this soon after the
/// switch is seen (the checker's pod watch may trail its node watch).
pub const SWITCH_GRACE: Micros = 3_000_000;
/// Watch lag allowed when comparing the checker's view with the audit log's times.
pub const WATCH_LAG: Micros = 1_000_000;
/// A budget's status is what the API server judges an eviction by, and the
/// harness's disruption controller writes it once a second: a pod counts as
/// healthy for an eviction if it was within this much of it.
pub const BUDGET_LAG: Micros = 2_000_000;
/// A drain start first seen this soon after a relist may be older than it looks.
const RELIST_BLUR: Micros = 10_000_000;
const RECENT_LINES: usize = 12;

#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub invariant: &'static str,
    pub at: Micros,
    pub what: String,
    /// The watch events around it.
    pub context: Vec<String>,
}

struct Tracked {
    value: Option<String>,
    confirmed: bool,
}

struct PendingSwitch {
    /// When the checker saw the switch.
    at: Micros,
    due: Micros,
    node: String,
    key: String,
    pods: Vec<(String, String)>,
}

/// How much of each invariant the run exercised, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Per capped policy: the most nodes its taints were on at once, and its cap.
    pub cap_peaks: BTreeMap<String, (usize, usize)>,
    pub evictions: u64,
    pub switches_drained: u64,
    pub switches_timed_out: u64,
    /// Quiet windows not judged: the checker's node watch listed again within
    /// them, so it may have missed changes between two of its events.
    pub quiet_windows_relisted: u64,
}

/// A quiet window's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuietCounts {
    pub writes: u64,
    pub transitions: u64,
}

#[derive(Default)]
pub struct Checker {
    now: Micros,
    nodes: BTreeMap<String, NodeState>,
    pods: BTreeMap<(String, String), PodState>,
    /// When each pod was first seen and each time it became healthy or not.
    pod_health: BTreeMap<(String, String), Vec<(Micros, bool)>>,
    /// Each pod's labels, kept after it is gone: an eviction is judged seconds
    /// later, from the audit log, when the evicted pod may be deleted already.
    pod_labels: BTreeMap<(String, String), BTreeMap<String, String>>,
    policies: BTreeMap<String, PolicyRules>,
    /// Every key+effect any policy declared, and the stand-ins of eviction policies.
    operator_slots: BTreeSet<(String, String)>,
    budgets: BTreeMap<(String, String), Budget>,
    /// Pods whose eviction the API server accepted (audit log), and when.
    evicted: BTreeMap<(String, String), Micros>,
    foreign: BTreeMap<(String, (String, String)), Tracked>,
    over_cap: BTreeSet<String>,
    /// (node, key) → when the checker first saw the NoSchedule stand-in, and
    /// whether that is when it went on.
    drains: BTreeMap<(String, String), (Micros, bool)>,
    relisted: Option<Micros>,
    relists: Vec<Micros>,
    switches: Vec<PendingSwitch>,
    audit: Vec<Event>,
    lease: Option<LeaseWrite>,
    lease_lines: VecDeque<String>,
    quiet_open: Option<Micros>,
    quiet_windows: Vec<(Micros, Micros)>,
    node_writes: Vec<(Micros, String)>,
    visible_changes: Vec<(Micros, String)>,
    pub quiet_totals: QuietCounts,
    pub coverage: Coverage,
    recent: BTreeMap<String, VecDeque<String>>,
    checks: BTreeMap<&'static str, u64>,
    violations: Vec<Violation>,
    faults: BTreeMap<&'static str, u64>,
    converge_times: Vec<(String, f64)>,
}

/// A moment as the time of day (UTC) to the millisecond, as in the logs.
pub fn time_of_day(at: Micros) -> String {
    let ms = at.div_euclid(1000);
    let day_ms = ms.rem_euclid(86_400_000);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    )
}

fn taints_str(taints: &[TaintRec]) -> String {
    let v: Vec<String> = taints.iter().map(ToString::to_string).collect();
    format!("[{}]", v.join(", "))
}

impl Checker {
    pub fn new() -> Self {
        Checker::default()
    }

    pub fn checks(&self) -> &BTreeMap<&'static str, u64> {
        &self.checks
    }

    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    pub fn faults(&self) -> &BTreeMap<&'static str, u64> {
        &self.faults
    }

    pub fn converge_times(&self) -> &[(String, f64)] {
        &self.converge_times
    }

    fn check(&mut self, invariant: &'static str) {
        *self.checks.entry(invariant).or_default() += 1;
    }

    fn violate(&mut self, invariant: &'static str, at: Micros, what: String, context: Vec<String>) {
        self.violations.push(Violation {
            invariant,
            at,
            what,
            context,
        });
    }

    fn note(&mut self, node: &str, line: String) {
        let lines = self.recent.entry(node.to_string()).or_default();
        lines.push_back(line);
        if lines.len() > RECENT_LINES {
            lines.pop_front();
        }
    }

    fn node_context(&self, node: &str) -> Vec<String> {
        self.recent
            .get(node)
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether the checker's node watch has caught up with `nodes` (a fresh list).
    pub fn sees_nodes(&self, nodes: &BTreeMap<String, NodeState>) -> bool {
        self.nodes == *nodes
    }

    /// Takes one event; audit entries wait in a buffer until [`Checker::settle`].
    pub fn observe(&mut self, event: Event) {
        self.now = self.now.max(event.at());
        match event {
            Event::Node { at, name, state } => self.on_node(at, name, state),
            Event::NodesRelisted { at } => {
                self.relisted = Some(at);
                self.relists.push(at);
            }
            Event::Pod {
                at,
                ns,
                name,
                state,
            } => self.on_pod(at, (ns, name), state),
            Event::Policy { name, rules, .. } => match rules {
                Some(rules) => {
                    for t in &rules.taints {
                        self.operator_slots.insert(t.slot());
                        if rules.eviction.is_some() && t.effect == "NoExecute" {
                            self.operator_slots
                                .insert((t.key.clone(), "NoSchedule".into()));
                        }
                    }
                    self.policies.insert(name, rules);
                }
                None => {
                    self.policies.remove(&name);
                    self.over_cap.remove(&name);
                }
            },
            Event::Budget {
                ns, name, budget, ..
            } => match budget {
                Some(b) => {
                    self.budgets.insert((ns, name), b);
                }
                None => {
                    self.budgets.remove(&(ns, name));
                }
            },
            e @ (Event::Write(_) | Event::Lease(_)) => self.audit.push(e),
            Event::ForeignAdded { at, node, taint } => {
                let present = self
                    .nodes
                    .get(&node)
                    .is_some_and(|n| n.taints.contains(&taint));
                self.note(
                    &node,
                    format!("{} harness added foreign {taint}", time_of_day(at)),
                );
                self.foreign.insert(
                    (node, taint.slot()),
                    Tracked {
                        value: taint.value,
                        confirmed: present,
                    },
                );
            }
            Event::ForeignRemoving { at, node, taint } => {
                self.note(
                    &node,
                    format!("{} harness removes foreign {taint}", time_of_day(at)),
                );
                self.foreign.remove(&(node, taint.slot()));
            }
            Event::Fault { kind, active, .. } => {
                if active {
                    *self.faults.entry(kind).or_default() += 1;
                }
            }
            Event::Quiet { at, open } => {
                if open {
                    self.quiet_open = Some(at);
                } else if let Some(start) = self.quiet_open.take() {
                    self.quiet_windows.push((start, at));
                }
            }
            Event::Converged {
                at,
                after,
                seconds,
                diff,
            } => {
                self.check(CONVERGE);
                self.converge_times.push((after.clone(), seconds));
                if !diff.is_empty() {
                    self.violate(
                        CONVERGE,
                        at,
                        format!(
                            "after {after}: the cluster still differed from the offline plan after {seconds:.1} s"
                        ),
                        diff,
                    );
                }
            }
        }
    }

    fn on_node(&mut self, at: Micros, name: String, state: Option<NodeState>) {
        let before = match &state {
            Some(s) => self.nodes.insert(name.clone(), s.clone()),
            None => self.nodes.remove(&name),
        };
        let Some(state) = state else {
            self.note(&name, format!("{} node deleted", time_of_day(at)));
            self.foreign.retain(|(n, _), _| *n != name);
            self.drains.retain(|(n, _), _| *n != name);
            self.recount_caps(at, &name);
            return;
        };
        self.note(
            &name,
            format!(
                "{} node taints {}",
                time_of_day(at),
                taints_str(&state.taints)
            ),
        );
        let recreated = before.as_ref().is_some_and(|b| b.uid != state.uid);
        if recreated {
            self.foreign.retain(|(n, _), _| *n != name);
        }
        self.check_foreign(at, &name, &state);
        self.recount_caps(at, &name);
        self.track_drains(at, &name, before.as_ref().filter(|_| !recreated), &state);
        if let Some(before) = before.filter(|_| !recreated) {
            let visible = |s: &NodeState| {
                let taints: BTreeSet<TaintRec> = s
                    .taints
                    .iter()
                    .filter(|t| self.operator_slots.contains(&t.slot()))
                    .cloned()
                    .collect();
                (taints, s.records.clone())
            };
            if visible(&before) != visible(&state) {
                self.visible_changes.push((at, name));
            }
        }
    }

    fn check_foreign(&mut self, at: Micros, node: &str, state: &NodeState) {
        let mut lost = Vec::new();
        for ((n, slot), tracked) in self
            .foreign
            .range_mut((node.to_string(), (String::new(), String::new()))..)
        {
            if n != node {
                break;
            }
            let now = state
                .taints
                .iter()
                .find(|t| t.key == slot.0 && t.effect == slot.1);
            match now {
                Some(t) if t.value == tracked.value => tracked.confirmed = true,
                _ if !tracked.confirmed => {}
                Some(t) => lost.push(format!(
                    "foreign taint {}:{} changed to {t}",
                    slot.0, slot.1
                )),
                None => lost.push(format!(
                    "foreign taint {}{}:{} removed",
                    slot.0,
                    tracked
                        .value
                        .as_ref()
                        .map(|v| format!("={v}"))
                        .unwrap_or_default(),
                    slot.1
                )),
            }
        }
        let tracked = self.foreign.keys().filter(|(n, _)| n == node).count();
        for _ in 0..tracked {
            self.check(FOREIGN);
        }
        for what in lost {
            let context = self.node_context(node);
            self.violate(FOREIGN, at, format!("node {node}: {what}"), context);
        }
        // Once reported, a lost taint is not reported again on every later event.
        let state_slots: BTreeSet<(String, String)> =
            state.taints.iter().map(TaintRec::slot).collect();
        self.foreign
            .retain(|(n, slot), t| n != node || !t.confirmed || state_slots.contains(slot));
    }

    fn recount_caps(&mut self, at: Micros, node: &str) {
        type Capped = (String, usize, Vec<(String, String)>);
        let capped: Vec<Capped> = self
            .policies
            .iter()
            .filter_map(|(name, p)| {
                Some((
                    name.clone(),
                    p.cap?,
                    p.taints.iter().map(TaintRec::slot).collect(),
                ))
            })
            .collect();
        for (policy, cap, slots) in capped {
            let carrying: Vec<&String> = self
                .nodes
                .iter()
                .filter(|(_, s)| s.taints.iter().any(|t| slots.contains(&t.slot())))
                .map(|(n, _)| n)
                .collect();
            let count = carrying.len();
            let peak = self.coverage.cap_peaks.entry(policy.clone()).or_default();
            *peak = (peak.0.max(count), cap);
            self.check(CAP);
            if count > cap {
                if self.over_cap.insert(policy.clone()) {
                    let context = self.node_context(node);
                    self.violate(
                        CAP,
                        at,
                        format!("policy {policy}: its taints are on {count} nodes, over its cap of {cap} (last: node {node})"),
                        context,
                    );
                }
            } else {
                self.over_cap.remove(&policy);
            }
        }
    }

    fn track_drains(
        &mut self,
        at: Micros,
        node: &str,
        before: Option<&NodeState>,
        state: &NodeState,
    ) {
        let evicting: Vec<(String, Option<i64>)> = self
            .policies
            .values()
            .filter_map(|p| Some((p, p.eviction.as_ref()?)))
            .flat_map(|(p, e)| {
                p.taints
                    .iter()
                    .filter(|t| t.effect == "NoExecute")
                    .map(|t| (t.key.clone(), e.drain_timeout_s))
            })
            .collect();
        let has = |s: &NodeState, key: &str, effect: &str| {
            s.taints.iter().any(|t| t.key == key && t.effect == effect)
        };
        for (key, timeout) in evicting {
            let slot = (node.to_string(), key.clone());
            let stand_in = has(state, &key, "NoSchedule");
            let no_execute = has(state, &key, "NoExecute");
            if stand_in && !self.drains.contains_key(&slot) {
                let certain =
                    self.relisted.is_none_or(|r| at - r > RELIST_BLUR) && before.is_some();
                self.drains.insert(slot.clone(), (at, certain));
            }
            let switched = no_execute && !before.is_some_and(|b| has(b, &key, "NoExecute"));
            if switched {
                // A stand-in put on while the checker was not watching has no known start.
                if let Some((started, true)) = self.drains.get(&slot).copied() {
                    let timed_out =
                        timeout.is_some_and(|t| at - started >= t * 1_000_000 - WATCH_LAG);
                    if timed_out {
                        self.check(BUDGETS);
                        self.coverage.switches_timed_out += 1;
                    } else {
                        let pods = self
                            .pods
                            .iter()
                            .filter(|(_, p)| p.node.as_deref() == Some(node) && p.evictable())
                            .filter(|(k, _)| {
                                self.pod_health
                                    .get(*k)
                                    .and_then(|h| h.first())
                                    .is_some_and(|(first, _)| *first <= at - WATCH_LAG)
                            })
                            .map(|(k, _)| k.clone())
                            .collect();
                        self.switches.push(PendingSwitch {
                            at,
                            due: at + SWITCH_GRACE,
                            node: node.to_string(),
                            key: key.clone(),
                            pods,
                        });
                    }
                }
            }
            if !stand_in && !no_execute {
                self.drains.remove(&slot);
            }
        }
    }

    fn on_pod(&mut self, at: Micros, key: (String, String), state: Option<PodState>) {
        match state {
            Some(s) => {
                let healthy = s.healthy();
                let history = self.pod_health.entry(key.clone()).or_default();
                if history.last().is_none_or(|(_, h)| *h != healthy) {
                    history.push((at, healthy));
                }
                if let Some(node) = &s.node {
                    let line = format!(
                        "{} pod {}/{} ready={} terminating={}",
                        time_of_day(at),
                        key.0,
                        key.1,
                        s.ready,
                        s.terminating
                    );
                    self.note(&node.clone(), line);
                }
                self.pod_labels.insert(key.clone(), s.labels.clone());
                self.pods.insert(key, s);
            }
            None => {
                if let Some(node) = self.pods.get(&key).and_then(|p| p.node.clone()) {
                    self.note(
                        &node,
                        format!("{} pod {}/{} deleted", time_of_day(at), key.0, key.1),
                    );
                }
                self.pods.remove(&key);
                let history = self.pod_health.entry(key).or_default();
                history.push((at, false));
            }
        }
    }

    /// Whether the pod was healthy at some moment within [`BUDGET_LAG`] of `at`.
    fn healthy_near(&self, key: &(String, String), at: Micros) -> bool {
        let Some(history) = self.pod_health.get(key) else {
            return false;
        };
        let mut healthy = false;
        for (t, h) in history {
            if *t > at + BUDGET_LAG {
                break;
            }
            if *t >= at - BUDGET_LAG && healthy {
                return true;
            }
            healthy = *h;
        }
        healthy
    }

    /// Judges the audit entries old enough to be in order, and the switches whose
    /// grace has passed. `now` is the wall clock.
    pub fn settle(&mut self, now: Micros) {
        self.now = self.now.max(now);
        let horizon = now - AUDIT_DELAY;
        let mut ready: Vec<Event> = Vec::new();
        self.audit.retain(|e| {
            if e.at() <= horizon {
                ready.push(e.clone());
                false
            } else {
                true
            }
        });
        ready.sort_by_key(Event::at);
        for e in ready {
            match e {
                Event::Lease(l) => self.on_lease(l),
                Event::Write(w) => self.on_write(w),
                _ => {}
            }
        }
        // A switch is judged once the audit log up to its grace has been read.
        let due: Vec<PendingSwitch> = {
            let (due, later) = std::mem::take(&mut self.switches)
                .into_iter()
                .partition(|s| s.due <= horizon);
            self.switches = later;
            due
        };
        for s in due {
            self.judge_switch(s);
        }
        self.judge_quiet_windows(horizon - WATCH_LAG);
    }

    /// Judges everything still waiting, as at the end of the run.
    pub fn finish(&mut self) {
        self.settle(Micros::MAX / 2);
    }

    fn on_lease(&mut self, l: LeaseWrite) {
        if !(200..300).contains(&l.code) {
            return;
        }
        self.lease_lines.push_back(format!(
            "{} Lease written by {}: holder {}",
            time_of_day(l.at),
            l.user,
            l.holder.as_deref().unwrap_or("(none)")
        ));
        if self.lease_lines.len() > RECENT_LINES {
            self.lease_lines.pop_front();
        }
        self.lease = Some(l);
    }

    fn on_write(&mut self, w: Write) {
        if !w.succeeded() {
            return;
        }
        match (w.resource.as_str(), w.subresource.as_str(), w.verb.as_str()) {
            ("nodes", _, _) => {
                self.check(WRITER);
                let holds = self.lease.as_ref().is_some_and(|l| {
                    l.holder.as_deref() == Some(w.user.as_str())
                        && w.at <= l.at + l.duration_s * 1_000_000
                });
                if !holds {
                    let mut context: Vec<String> = self.lease_lines.iter().cloned().collect();
                    context.extend(self.node_context(&w.name));
                    let holder = self
                        .lease
                        .as_ref()
                        .map(|l| {
                            format!(
                                "{} (written {})",
                                l.holder.as_deref().unwrap_or("nobody"),
                                time_of_day(l.at)
                            )
                        })
                        .unwrap_or_else(|| "nobody".into());
                    self.violate(
                        WRITER,
                        w.at,
                        format!(
                            "{} {} node {} at {} while the Lease was held by {holder}",
                            w.user,
                            w.verb,
                            w.name,
                            time_of_day(w.at)
                        ),
                        context,
                    );
                }
                self.node_writes.push((w.at, w.name));
            }
            ("pods", "", "delete") => {
                self.check(BUDGETS);
                let context = self.node_context_of_pod(&w.namespace, &w.name);
                self.violate(
                    BUDGETS,
                    w.at,
                    format!(
                        "{} deleted pod {}/{} instead of evicting it",
                        w.user, w.namespace, w.name
                    ),
                    context,
                );
            }
            ("pods", "eviction", "create") => {
                self.judge_eviction(&w);
                self.evicted
                    .entry((w.namespace.clone(), w.name.clone()))
                    .or_insert(w.at);
            }
            _ => {}
        }
    }

    fn node_context_of_pod(&self, ns: &str, name: &str) -> Vec<String> {
        self.pods
            .get(&(ns.to_string(), name.to_string()))
            .and_then(|p| p.node.as_deref())
            .map(|n| self.node_context(n))
            .unwrap_or_default()
    }

    fn judge_eviction(&mut self, w: &Write) {
        let key = (w.namespace.clone(), w.name.clone());
        let labels = self.pod_labels.get(&key).cloned().unwrap_or_default();
        let covering: Vec<((String, String), Budget)> = self
            .budgets
            .iter()
            .filter(|((ns, _), b)| {
                *ns == w.namespace && b.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .map(|(k, b)| (k.clone(), b.clone()))
            .collect();
        self.coverage.evictions += 1;
        for ((ns, name), budget) in covering {
            self.check(BUDGETS);
            let healthy = self
                .pod_health
                .keys()
                .filter(|(pns, _)| *pns == ns)
                .filter(|k| {
                    let l = self.pod_labels.get(*k);
                    l.is_some_and(|l| budget.selector.iter().all(|(k, v)| l.get(k) == Some(v)))
                })
                .filter(|k| self.healthy_near(k, w.at))
                .count();
            if healthy < budget.min_available + 1 {
                let context = self.node_context_of_pod(&w.namespace, &w.name);
                self.violate(
                    BUDGETS,
                    w.at,
                    format!(
                        "{} evicted pod {}/{} while budget {ns}/{name} had {healthy} healthy pods and needs {}",
                        w.user, w.namespace, w.name, budget.min_available
                    ),
                    context,
                );
            }
        }
    }

    /// A pod of the node is in the way if the checker still sees it running there
    /// and the API server accepted no eviction of it before the switch was seen
    /// (the audit log, so the pod watch's lag does not count against the operator).
    fn judge_switch(&mut self, s: PendingSwitch) {
        self.check(BUDGETS);
        self.coverage.switches_drained += 1;
        let running: Vec<String> = s
            .pods
            .iter()
            .filter(|k| {
                self.pods
                    .get(*k)
                    .is_some_and(|p| p.node.as_deref() == Some(s.node.as_str()) && p.evictable())
            })
            .filter(|k| self.evicted.get(*k).is_none_or(|e| *e > s.at + WATCH_LAG))
            .map(|(ns, name)| format!("{ns}/{name}"))
            .collect();
        if !running.is_empty() {
            let context = self.node_context(&s.node);
            self.violate(
                BUDGETS,
                s.at,
                format!(
                    "node {}: {}:NoExecute went on while {} still ran there, before the drain had evicted them or timed out",
                    s.node,
                    s.key,
                    running.join(", ")
                ),
                context,
            );
        }
    }

    fn judge_quiet_windows(&mut self, judged_until: Micros) {
        let (done, open): (Vec<_>, Vec<_>) = std::mem::take(&mut self.quiet_windows)
            .into_iter()
            .partition(|(_, end)| *end + WATCH_LAG <= judged_until);
        self.quiet_windows = open;
        for (start, end) in done {
            if self
                .relists
                .iter()
                .any(|r| (start - WATCH_LAG..=end + WATCH_LAG).contains(r))
            {
                self.coverage.quiet_windows_relisted += 1;
                continue;
            }
            self.check(WRITES);
            let mut per_node: BTreeMap<&str, QuietCounts> = BTreeMap::new();
            for (at, node) in &self.node_writes {
                if (start..=end).contains(at) {
                    per_node.entry(node).or_default().writes += 1;
                }
            }
            for (at, node) in &self.visible_changes {
                if (start..=end + WATCH_LAG).contains(at) {
                    per_node.entry(node).or_default().transitions += 1;
                }
            }
            let mut extra = Vec::new();
            for (node, c) in &per_node {
                self.quiet_totals.writes += c.writes;
                self.quiet_totals.transitions += c.transitions;
                if c.writes > c.transitions {
                    extra.push((node.to_string(), *c));
                }
            }
            for (node, c) in extra {
                let context = self.node_context(&node);
                self.violate(
                    WRITES,
                    end,
                    format!(
                        "node {node}: {} operator writes and {} changes between {} and {} (no faults)",
                        c.writes,
                        c.transitions,
                        time_of_day(start),
                        time_of_day(end)
                    ),
                    context,
                );
            }
        }
        let keep_from = self
            .quiet_windows
            .iter()
            .map(|(s, _)| *s)
            .chain(self.quiet_open)
            .min()
            .unwrap_or(judged_until);
        self.node_writes.retain(|(at, _)| *at >= keep_from);
        self.visible_changes.retain(|(at, _)| *at >= keep_from);
    }
}

#[cfg(test)]
#[path = "checker_tests.rs"]
mod tests;
