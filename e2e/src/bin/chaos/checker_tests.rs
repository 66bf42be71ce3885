//! The checker on recorded event streams: each kind of violation is caught, and
//! the same streams without the fault pass.

use super::*;
use crate::record::EvictionRules;

const S: Micros = 1_000_000;

fn node(uid: &str, taints: &[TaintRec]) -> Option<NodeState> {
    Some(NodeState {
        uid: uid.into(),
        taints: taints.to_vec(),
        records: BTreeMap::new(),
    })
}

fn node_ev(at: Micros, name: &str, taints: &[TaintRec]) -> Event {
    Event::Node {
        at,
        name: name.into(),
        state: node("u1", taints),
    }
}

fn t(key: &str, effect: &str) -> TaintRec {
    TaintRec::new(key, None, effect)
}

fn foreign() -> TaintRec {
    TaintRec::new(
        "foreign.example.com/maintenance",
        Some("planned"),
        "NoSchedule",
    )
}

fn run(events: Vec<Event>) -> Checker {
    let mut c = Checker::new();
    for e in events {
        c.observe(e);
    }
    c.finish();
    c
}

fn kinds(c: &Checker) -> Vec<&'static str> {
    c.violations().iter().map(|v| v.invariant).collect()
}

#[test]
fn a_foreign_taint_removed_by_someone_else_is_a_violation() {
    let added = Event::ForeignAdded {
        at: S,
        node: "n1".into(),
        taint: foreign(),
    };
    let c = run(vec![
        node_ev(0, "n1", &[]),
        added.clone(),
        node_ev(2 * S, "n1", &[foreign()]),
        node_ev(3 * S, "n1", &[]),
        node_ev(4 * S, "n1", &[t("x", "NoSchedule")]),
    ]);
    assert_eq!(kinds(&c), [FOREIGN], "reported once: {:?}", c.violations());
    assert!(
        c.violations()[0]
            .what
            .contains("foreign.example.com/maintenance=planned:NoSchedule removed")
    );
    assert!(!c.violations()[0].context.is_empty());

    // Removed by the harness itself: fine.
    let c = run(vec![
        node_ev(0, "n1", &[]),
        added.clone(),
        node_ev(2 * S, "n1", &[foreign()]),
        Event::ForeignRemoving {
            at: 3 * S,
            node: "n1".into(),
            taint: foreign(),
        },
        node_ev(4 * S, "n1", &[]),
    ]);
    assert!(c.violations().is_empty(), "{:?}", c.violations());
    assert!(c.checks()[FOREIGN] >= 1);
}

#[test]
fn a_foreign_taint_changed_is_a_violation_and_one_never_seen_or_on_a_new_node_is_not() {
    let changed = TaintRec::new(
        "foreign.example.com/maintenance",
        Some("other"),
        "NoSchedule",
    );
    let added = Event::ForeignAdded {
        at: S,
        node: "n1".into(),
        taint: foreign(),
    };
    let c = run(vec![
        node_ev(0, "n1", &[foreign()]),
        added.clone(),
        node_ev(2 * S, "n1", &[changed]),
    ]);
    assert_eq!(kinds(&c), [FOREIGN]);

    // Added, but the watch never showed it before it went: nothing to judge.
    let c = run(vec![
        node_ev(0, "n1", &[]),
        added.clone(),
        node_ev(2 * S, "n1", &[]),
    ]);
    assert!(c.violations().is_empty());

    // The node was deleted and made again under the same name.
    let c = run(vec![
        node_ev(0, "n1", &[foreign()]),
        added,
        Event::Node {
            at: 2 * S,
            name: "n1".into(),
            state: node("u2", &[]),
        },
    ]);
    assert!(c.violations().is_empty(), "{:?}", c.violations());
}

fn capped(cap: usize) -> Event {
    Event::Policy {
        at: 0,
        name: "capped".into(),
        rules: Some(PolicyRules {
            taints: vec![t("disk", "NoSchedule")],
            cap: Some(cap),
            eviction: None,
        }),
    }
}

#[test]
fn more_nodes_than_the_cap_is_a_violation_reported_once_per_excess() {
    let disk = [t("disk", "NoSchedule")];
    let c = run(vec![
        capped(2),
        node_ev(S, "n1", &disk),
        node_ev(S, "n2", &disk),
        node_ev(2 * S, "n3", &disk),
        node_ev(3 * S, "n4", &disk),
    ]);
    assert_eq!(kinds(&c), [CAP], "{:?}", c.violations());
    assert!(
        c.violations()[0]
            .what
            .contains("on 3 nodes, over its cap of 2")
    );

    // The same key under another effect is someone else's.
    let c = run(vec![
        capped(2),
        node_ev(S, "n1", &disk),
        node_ev(S, "n2", &disk),
        node_ev(2 * S, "n3", &[t("disk", "NoExecute")]),
    ]);
    assert!(c.violations().is_empty());
}

fn lease(at: Micros, user: &str, holder: Option<&str>) -> Event {
    Event::Lease(LeaseWrite {
        at,
        user: user.into(),
        holder: holder.map(Into::into),
        duration_s: 15,
        code: 200,
    })
}

fn write(
    at: Micros,
    user: &str,
    resource: &str,
    sub: &str,
    verb: &str,
    name: &str,
    code: u16,
) -> Event {
    Event::Write(Write {
        at,
        user: user.into(),
        verb: verb.into(),
        resource: resource.into(),
        subresource: sub.into(),
        namespace: if resource == "pods" {
            "apps".into()
        } else {
            String::new()
        },
        name: name.into(),
        code,
    })
}

#[test]
fn a_node_write_by_a_replica_without_the_lease_is_a_violation() {
    let c = run(vec![
        lease(S, "r0", Some("r0")),
        write(2 * S, "r0", "nodes", "", "patch", "n1", 200),
        // r1 takes over; the stopped r0 wakes and writes.
        lease(20 * S, "r1", Some("r1")),
        write(21 * S, "r1", "nodes", "", "patch", "n1", 200),
        write(22 * S, "r0", "nodes", "", "patch", "n2", 200),
        // refused writes are no writes
        write(23 * S, "r0", "nodes", "", "patch", "n3", 409),
    ]);
    assert_eq!(kinds(&c), [WRITER], "{:?}", c.violations());
    assert!(c.violations()[0].what.contains("r0 patch node n2"));
    assert_eq!(c.checks()[WRITER], 3);
}

#[test]
fn a_write_past_the_leases_duration_is_a_violation_and_audit_order_does_not_matter() {
    // Entries come in the order answers went out; the checker sorts them.
    let c = run(vec![
        write(5 * S, "r0", "nodes", "", "patch", "n1", 200),
        lease(S, "r0", Some("r0")),
        write(17 * S, "r0", "nodes", "", "patch", "n1", 200),
    ]);
    assert_eq!(kinds(&c), [WRITER], "{:?}", c.violations());
    assert!(c.violations()[0].what.contains("at 00:00:17.000"));
}

fn pod(node: &str, ready: bool, terminating: bool) -> Option<PodState> {
    Some(PodState {
        node: Some(node.into()),
        labels: [("app".to_string(), "web".to_string())].into(),
        ready,
        terminating,
        finished: false,
        daemonset: false,
    })
}

fn pod_ev(at: Micros, name: &str, state: Option<PodState>) -> Event {
    Event::Pod {
        at,
        ns: "apps".into(),
        name: name.into(),
        state,
    }
}

fn budget(min: usize) -> Event {
    Event::Budget {
        at: 0,
        ns: "apps".into(),
        name: "web".into(),
        budget: Some(Budget {
            min_available: min,
            selector: [("app".to_string(), "web".to_string())].into(),
        }),
    }
}

#[test]
fn deleting_a_pod_or_evicting_below_a_budget_is_a_violation() {
    let c = run(vec![
        budget(2),
        pod_ev(0, "a", pod("n1", true, false)),
        pod_ev(0, "b", pod("n2", true, false)),
        pod_ev(0, "c", pod("n3", true, false)),
        lease(0, "r0", Some("r0")),
        write(5 * S, "r0", "pods", "eviction", "create", "a", 201),
        pod_ev(5 * S, "a", pod("n1", true, true)),
        // a is on its way out: evicting b leaves 1 of the 2 the budget needs
        write(10 * S, "r0", "pods", "eviction", "create", "b", 201),
        // b is gone by the time the audit entry is judged
        pod_ev(10 * S + 500_000, "b", None),
        write(11 * S, "r0", "pods", "", "delete", "c", 200),
    ]);
    assert_eq!(kinds(&c), [BUDGETS, BUDGETS], "{:?}", c.violations());
    assert!(
        c.violations()[0]
            .what
            .contains("evicted pod apps/b while budget apps/web had 2 healthy pods and needs 2")
    );
    assert!(c.violations()[1].what.contains("deleted pod apps/c"));

    // Evictions the budget allows, of pods deleted a moment later: fine.
    let c = run(vec![
        budget(1),
        pod_ev(0, "a", pod("n1", true, false)),
        pod_ev(0, "b", pod("n2", true, false)),
        pod_ev(0, "c", pod("n3", true, false)),
        lease(0, "r0", Some("r0")),
        write(5 * S, "r0", "pods", "eviction", "create", "a", 201),
        pod_ev(5 * S + 300_000, "a", None),
    ]);
    assert!(c.violations().is_empty(), "{:?}", c.violations());
    assert_eq!(c.coverage.evictions, 1);
    assert_eq!(
        c.checks()[BUDGETS],
        1,
        "the eviction was judged against its budget"
    );
}

fn evicting() -> Event {
    Event::Policy {
        at: 0,
        name: "spot".into(),
        rules: Some(PolicyRules {
            taints: vec![t("oos", "NoExecute")],
            cap: None,
            eviction: Some(EvictionRules {
                drain_timeout_s: Some(30),
            }),
        }),
    }
}

#[test]
fn a_switch_while_a_pod_still_runs_is_a_violation_unless_the_drain_timed_out() {
    let stand_in = [t("oos", "NoSchedule")];
    let switched = [t("oos", "NoExecute")];
    let base = vec![
        evicting(),
        node_ev(0, "n1", &[]),
        pod_ev(0, "a", pod("n1", true, false)),
        node_ev(2 * S, "n1", &stand_in),
    ];

    let mut early = base.clone();
    early.push(node_ev(5 * S, "n1", &switched));
    let c = run(early);
    assert_eq!(kinds(&c), [BUDGETS], "{:?}", c.violations());
    assert!(c.violations()[0].what.contains("apps/a still ran there"));

    let mut evicted = base.clone();
    evicted.push(pod_ev(4 * S, "a", pod("n1", true, true)));
    evicted.push(node_ev(5 * S, "n1", &switched));
    let c = run(evicted);
    assert!(c.violations().is_empty(), "{:?}", c.violations());

    // the checker's pod watch trails: the pod's eviction shows after the switch
    let mut trailing = base.clone();
    trailing.push(node_ev(5 * S, "n1", &switched));
    trailing.push(pod_ev(6 * S, "a", pod("n1", true, true)));
    let c = run(trailing);
    assert!(c.violations().is_empty(), "{:?}", c.violations());

    // the eviction was accepted before the switch; the pod watch never showed it
    let mut accepted = base.clone();
    accepted.push(lease(0, "r0", Some("r0")));
    accepted.push(write(4 * S, "r0", "pods", "eviction", "create", "a", 201));
    accepted.push(node_ev(5 * S, "n1", &switched));
    let c = run(accepted);
    assert!(c.violations().is_empty(), "{:?}", c.violations());

    // an eviction accepted only after the switch does not excuse it
    let mut late = base.clone();
    late.push(lease(0, "r0", Some("r0")));
    late.push(node_ev(5 * S, "n1", &switched));
    late.push(write(7 * S, "r0", "pods", "eviction", "create", "a", 201));
    let c = run(late);
    assert_eq!(kinds(&c), [BUDGETS], "{:?}", c.violations());

    let mut timed_out = base;
    timed_out.push(node_ev(32 * S, "n1", &switched));
    let c = run(timed_out);
    assert!(c.violations().is_empty(), "{:?}", c.violations());
}

#[test]
fn a_cluster_that_did_not_converge_is_a_violation() {
    let c = run(vec![
        Event::Converged {
            at: S,
            after: "cycle 1".into(),
            seconds: 4.0,
            diff: vec![],
        },
        Event::Converged {
            at: 2 * S,
            after: "cycle 2".into(),
            seconds: 30.0,
            diff: vec!["n1: add k:NoSchedule (p)".into()],
        },
    ]);
    assert_eq!(kinds(&c), [CONVERGE]);
    assert_eq!(c.checks()[CONVERGE], 2);
    assert_eq!(c.converge_times().len(), 2);
}

#[test]
fn a_quiet_window_write_that_changed_nothing_is_a_violation() {
    let nic = [t("nic", "NoSchedule")];
    let policy = Event::Policy {
        at: 0,
        name: "nic".into(),
        rules: Some(PolicyRules {
            taints: nic.to_vec(),
            cap: None,
            eviction: None,
        }),
    };
    let base = vec![
        policy,
        node_ev(0, "n1", &[]),
        lease(0, "r0", Some("r0")),
        Event::Quiet { at: S, open: true },
        write(2 * S, "r0", "nodes", "", "patch", "n1", 200),
        node_ev(2 * S + 1000, "n1", &nic),
    ];
    let mut once = base.clone();
    once.push(Event::Quiet {
        at: 9 * S,
        open: false,
    });
    let c = run(once);
    assert!(c.violations().is_empty(), "{:?}", c.violations());
    assert_eq!(
        c.quiet_totals,
        QuietCounts {
            writes: 1,
            transitions: 1
        }
    );

    // The same, but the checker's watch listed again in the window: not judged.
    let mut relisted = base.clone();
    relisted.push(write(3 * S, "r0", "nodes", "", "patch", "n1", 200));
    relisted.push(Event::NodesRelisted { at: 5 * S });
    relisted.push(Event::Quiet {
        at: 9 * S,
        open: false,
    });
    let c = run(relisted);
    assert!(c.violations().is_empty(), "{:?}", c.violations());
    assert_eq!(c.coverage.quiet_windows_relisted, 1);

    let mut twice = base;
    twice.push(write(3 * S, "r0", "nodes", "", "patch", "n1", 200));
    // a foreign taint on the node is not the operator's change
    twice.push(node_ev(4 * S, "n1", &[nic[0].clone(), foreign()]));
    twice.push(Event::Quiet {
        at: 9 * S,
        open: false,
    });
    let c = run(twice);
    assert_eq!(kinds(&c), [WRITES], "{:?}", c.violations());
    assert!(
        c.violations()[0]
            .what
            .contains("2 operator writes and 1 changes")
    );
}

#[test]
fn faults_are_counted_by_kind() {
    let c = run(vec![
        Event::Fault {
            at: 0,
            kind: "blackhole",
            active: true,
        },
        Event::Fault {
            at: S,
            kind: "blackhole",
            active: false,
        },
        Event::Fault {
            at: 2 * S,
            kind: "blackhole",
            active: true,
        },
    ]);
    assert_eq!(c.faults().get("blackhole"), Some(&2));
}
