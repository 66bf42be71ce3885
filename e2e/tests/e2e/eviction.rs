//! `spec.eviction` (#21) on a bare control plane: drains paced per zone, a zone that
//! holds its switches while too many of its nodes match, and a drain a PodDisruptionBudget
//! blocks, whose `drainTimeout` survives a leader failover.
//!
//! A bare control plane has no taint manager: a NoExecute taint evicts nothing here,
//! so what the scenarios see is the operator's own doing (the stand-in, the drain
//! record, the Eviction API calls, the switch).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Node, policy::v1::PodDisruptionBudget},
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::json;
use taint_operator_crd::{DRAIN_STARTED_ANNOTATION, ZONE_LABEL};
use taint_operator_e2e::{
    Cond, Harness, K, Operator, PolicyView, Result, always_for, bail, ensure, ensure_eq,
    eventually, eventually_within,
    k8s::{managed, now_s, taint_strs, taints},
};

use crate::common::{SCENARIO_LABEL, Scn, check_node, expect_clean, expect_node, owned};

/// The node annotation `nodetaint.io/drain-started` as a map (empty when absent).
fn drain_started(node: &Node) -> Result<BTreeMap<String, String>> {
    match node.annotations().get(DRAIN_STARTED_ANNOTATION) {
        None => Ok(BTreeMap::new()),
        Some(v) => serde_json::from_str(v).map_err(|e| {
            format!(
                "annotation {DRAIN_STARTED_ANNOTATION}={v:?} is not a JSON object of strings: {e}"
            )
            .into()
        }),
    }
}

/// When `policy` started draining `node`, as the node records it.
fn drain_start_of(node: &Node, policy: &str) -> Result<Option<Timestamp>> {
    match drain_started(node)?.get(policy) {
        None => Ok(None),
        Some(at) => Ok(Some(at.parse().map_err(|e| {
            format!("drain start {at:?} of {policy} is not RFC 3339: {e}")
        })?)),
    }
}

/// `timeAdded` of the node's taint `key` with effect NoExecute.
fn no_execute_added(node: &Node, key: &str) -> Result<Timestamp> {
    taints(node)
        .into_iter()
        .find(|t| t.key == key && t.effect == "NoExecute")
        .ok_or_else(|| format!("no {key}:NoExecute taint on the node"))?
        .time_added
        .map(|t| t.0)
        .ok_or_else(|| format!("the {key}:NoExecute taint has no timeAdded").into())
}

/// The policy's status as the tests look at it, plus `drainingNodes`.
async fn policy_status(k: &K, name: &str) -> Result<(PolicyView, i32)> {
    let p = k.policy(name).await?;
    let draining = p.status.as_ref().map_or(0, |s| s.draining_nodes);
    Ok((PolicyView::from(&p), draining))
}

/// Waits until the policy reports, for its current generation, this Ready status,
/// reason, selected/tainted/pending counts and `drainingNodes`.
async fn expect_drain_status(
    k: &K,
    policy: &str,
    ready: &str,
    reason: &str,
    counts: (i32, i32, i32),
    draining: i32,
) -> Result<PolicyView> {
    eventually(
        format!(
            "status of policy {policy}: Ready={ready} {reason} selected/tainted/pending={counts:?} drainingNodes={draining}"
        ),
        async || {
            let (v, d) = policy_status(k, policy).await?;
            v.check(ready, reason, counts.0, counts.1, counts.2)?;
            ensure_eq!(d, draining, "drainingNodes (message {:?})", v.message());
            Ok(v)
        },
    )
    .await
}

/// The nodes of a scenario, by name.
async fn scenario_nodes(k: &K, s: Scn) -> Result<BTreeMap<String, Node>> {
    let list = k
        .nodes()
        .list(&ListParams::default().labels(&format!("{SCENARIO_LABEL}={}", s.0)))
        .await?;
    Ok(list.items.into_iter().map(|n| (n.name_any(), n)).collect())
}

fn secs(d: SignedDuration) -> f64 {
    d.as_secs_f64()
}

/// When a node was first seen with the stand-in and with the NoExecute taint, since
/// the nodes broke.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    stand_in: Option<Duration>,
    switched: Option<Duration>,
}

/// 20 nodes of one zone break at once under a policy with `nodesPerMinute: 60`:
/// every one gets the NoSchedule stand-in at once, the drains start and the switches
/// to NoExecute happen one a second, never both taints on a node at once.
pub async fn pacing(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("epace");
    let policy = "e2e-epace";
    const KEY: &str = "e2e.nodetaint.io/pace";
    const STAND_IN: &str = "e2e.nodetaint.io/pace=1:NoSchedule";
    const NO_EXECUTE: &str = "e2e.nodetaint.io/pace=1:NoExecute";
    const STAND_IN_ID: &str = "e2e.nodetaint.io/pace:NoSchedule";
    const NO_EXECUTE_ID: &str = "e2e.nodetaint.io/pace:NoExecute";
    const COUNT: usize = 20;
    // One a second: 20 switches spread over 19 s.
    const SAMPLE: Duration = Duration::from_millis(200);
    const STAND_IN_WITHIN: Duration = Duration::from_secs(5);
    const ALL_SWITCHED_WITHIN: Duration = Duration::from_secs(35);
    const MIN_SPREAD: f64 = 17.0;

    let nodes: Vec<String> = (1..=COUNT).map(|i| s.node(&format!("{i:02}"))).collect();
    for n in &nodes {
        k.create_node(n, &[s.label(), (ZONE_LABEL, "e2e-pace-zone")])
            .await?;
        k.set_conditions(n, &[Cond::now("Broken", "False", "Test")])
            .await?;
    }
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": KEY, "value": "1", "effect": "NoExecute"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
            "eviction": {"nodesPerMinute": 60},
        }),
    ))
    .await?;
    expect_drain_status(k, policy, "True", "Reconciled", (20, 0, 0), 0).await?;

    // All 20 break at once.
    let broke = Instant::now();
    let broke_at = Timestamp::now();
    for n in &nodes {
        k.set_conditions(n, &[Cond::now("Broken", "True", "Test")])
            .await?;
    }
    let broken_in = broke.elapsed();

    // Sample every node (one list) and the status every 0.2 s until every node switched.
    let mut seen: BTreeMap<String, Seen> =
        nodes.iter().map(|n| (n.clone(), Seen::default())).collect();
    // (since the break, reason, drainingNodes)
    let mut statuses: Vec<(Duration, String, i32)> = Vec::new();
    let mut samples = 0usize;
    loop {
        let tick = Instant::now();
        let at = broke.elapsed();
        samples += 1;
        let current = scenario_nodes(k, s).await?;
        for (name, n) in &current {
            let Some(seen) = seen.get_mut(name) else {
                continue;
            };
            let ts = taint_strs(n);
            let m = managed(n)?;
            let (has_stand_in, has_no_execute) = (
                ts.iter().any(|t| t == STAND_IN),
                ts.iter().any(|t| t == NO_EXECUTE),
            );
            ensure!(
                !(has_stand_in && has_no_execute),
                "{name} carries the NoExecute taint and its stand-in at once, {:.1} s after the break: {ts:?}",
                at.as_secs_f64()
            );
            ensure!(
                ts.iter().all(|t| t == STAND_IN || t == NO_EXECUTE),
                "{name} carries taints other than the policy's: {ts:?}"
            );
            if has_stand_in {
                ensure_eq!(
                    m,
                    owned(&[(STAND_IN_ID, policy)]),
                    "managed-taints of {name} carrying the stand-in"
                );
                seen.stand_in.get_or_insert(at);
            }
            if has_no_execute {
                ensure_eq!(
                    m,
                    owned(&[(NO_EXECUTE_ID, policy)]),
                    "managed-taints of {name} carrying the NoExecute taint"
                );
                seen.switched.get_or_insert(at);
            } else if let Some(when) = seen.switched {
                bail!(
                    "{name} switched to NoExecute {:.1} s after the break, but at {:.1} s it has {ts:?}",
                    when.as_secs_f64(),
                    at.as_secs_f64()
                );
            }
            if seen.stand_in.is_none() && seen.switched.is_none() && at > STAND_IN_WITHIN {
                bail!(
                    "{name} has no stand-in {:.1} s after the break: {ts:?}",
                    at.as_secs_f64()
                );
            }
        }
        let (v, draining) = policy_status(k, policy).await?;
        statuses.push((at, v.reason().to_string(), draining));
        if seen.values().all(|s| s.switched.is_some()) {
            break;
        }
        if at > ALL_SWITCHED_WITHIN {
            let left: Vec<&String> = seen
                .iter()
                .filter(|(_, s)| s.switched.is_none())
                .map(|(n, _)| n)
                .collect();
            bail!(
                "{} node(s) not switched to NoExecute {:.1} s after the break: {left:?}",
                left.len(),
                at.as_secs_f64()
            );
        }
        tokio::time::sleep(SAMPLE.saturating_sub(tick.elapsed())).await;
    }

    // Stand-ins: on every node within a few seconds (a node that switched within
    // 2 s may have had its stand-in for less than a sample).
    let stand_ins_by = seen
        .values()
        .map(|s| s.stand_in.or(s.switched).unwrap_or_default())
        .max()
        .unwrap_or_default();
    for (name, sn) in &seen {
        ensure!(
            sn.stand_in.is_some() || sn.switched.unwrap_or_default() < Duration::from_secs(2),
            "{name} switched to NoExecute {:?} after the break without its stand-in ever seen",
            sn.switched
        );
    }

    // The switches, from the nodes' own record (timeAdded) and from the sampler.
    let mut added: Vec<(Timestamp, String)> = Vec::new();
    let mut starts: Vec<(Timestamp, String)> = Vec::new();
    for n in &nodes {
        let node = check_node(k, n, &[NO_EXECUTE], &owned(&[(NO_EXECUTE_ID, policy)])).await?;
        let t = no_execute_added(&node, KEY)?;
        // timeAdded is whole seconds (cut, not rounded): the sampler sees the switch
        // in [timeAdded, timeAdded + 1 s + a sample + a request].
        let observed = broke_at.checked_add(SignedDuration::try_from(
            seen[n].switched.unwrap_or_default(),
        )?)?;
        let lag = observed.duration_since(t);
        ensure!(
            lag >= SignedDuration::from_millis(-500) && lag <= SignedDuration::from_millis(2500),
            "{n}: timeAdded {t} is not when the switch happened (seen at {observed})"
        );
        added.push((t, n.clone()));
        let start = drain_start_of(&node, policy)?
            .ok_or_else(|| format!("{n} switched with no drain start recorded"))?;
        ensure!(
            start <= t,
            "{n}: the drain started at {start}, after the switch at {t}"
        );
        starts.push((start, n.clone()));
    }
    added.sort();
    starts.sort();
    let gaps = |v: &[(Timestamp, String)]| -> Vec<f64> {
        v.windows(2)
            .map(|w| secs(w[1].0.duration_since(w[0].0)))
            .collect()
    };
    let switch_gaps = gaps(&added);
    let start_gaps = gaps(&starts);
    let spread = secs(added[COUNT - 1].0.duration_since(added[0].0));
    let mut observed: Vec<f64> = seen
        .values()
        .map(|s| s.switched.unwrap_or_default().as_secs_f64())
        .collect();
    observed.sort_by(f64::total_cmp);
    let observed_gaps: Vec<f64> = observed.windows(2).map(|w| w[1] - w[0]).collect();
    let observed_spread = observed[COUNT - 1] - observed[0];
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    println!(
        "eviction pacing: 20 nodes broken in {:.2} s; stand-ins on all by {:.1} s; {samples} samples",
        broken_in.as_secs_f64(),
        stand_ins_by.as_secs_f64()
    );
    println!(
        "eviction pacing: switches (timeAdded) spread {spread:.0} s, gaps {:.0}..{:.0} s; drain starts spread {:.0} s, gaps {:.0}..{:.0} s",
        min(&switch_gaps),
        max(&switch_gaps),
        secs(starts[COUNT - 1].0.duration_since(starts[0].0)),
        min(&start_gaps),
        max(&start_gaps)
    );
    println!(
        "eviction pacing: switches seen from {:.1} s to {:.1} s after the break (spread {observed_spread:.1} s, gaps {:.1}..{:.1} s)",
        observed[0],
        observed[COUNT - 1],
        min(&observed_gaps),
        max(&observed_gaps)
    );
    ensure!(
        stand_ins_by <= STAND_IN_WITHIN,
        "the last stand-in was seen only {stand_ins_by:?} after the break"
    );
    for (w, gap) in added.windows(2).zip(&switch_gaps) {
        ensure!(
            *gap >= 1.0,
            "{} switched at {}, only {gap} s after {} at {}: no more than one a second",
            w[1].1,
            w[1].0,
            w[0].1,
            w[0].0
        );
    }
    for (w, gap) in starts.windows(2).zip(&start_gaps) {
        ensure!(
            *gap >= 1.0,
            "{}'s drain started at {}, only {gap} s after {}'s at {}: no more than one a second",
            w[1].1,
            w[1].0,
            w[0].1,
            w[0].0
        );
    }
    ensure!(
        spread >= MIN_SPREAD && observed_spread >= MIN_SPREAD,
        "20 switches at one a second should take about 19 s: timeAdded spread {spread} s, seen over {observed_spread:.1} s"
    );

    // Status: never ZoneUnhealthy (no zone pause) nor LimitReached; Draining while
    // the nodes drain (from once the status has caught up with the stand-ins until
    // shortly before the last switch was seen).
    let (from, to) = (
        stand_ins_by + Duration::from_secs(3),
        Duration::from_secs_f64(observed[COUNT - 1]).saturating_sub(Duration::from_secs(1)),
    );
    for (at, reason, draining) in &statuses {
        ensure!(
            reason != "ZoneUnhealthy" && reason != "LimitReached",
            "status reason {reason} {:.1} s after the break",
            at.as_secs_f64()
        );
        if *at >= from && *at <= to {
            ensure!(
                reason == "Draining" && *draining >= 1,
                "status {reason} with drainingNodes {draining} {:.1} s after the break, while nodes were draining",
                at.as_secs_f64()
            );
        }
    }
    ensure!(
        statuses.iter().any(|(_, r, _)| r == "Draining"),
        "the status never said Draining: {statuses:?}"
    );
    let most = statuses.iter().map(|s| s.2).max().unwrap_or(0);
    println!("eviction pacing: drainingNodes reached {most}");
    let v = expect_drain_status(k, policy, "True", "Reconciled", (20, 20, 0), 0).await?;
    ensure_eq!(
        v.message(),
        "20 of 20 selected nodes tainted",
        "Ready message"
    );
    // The first node's drain is explained.
    k.wait_event("Node", &added[0].1, "DrainStarted", &[policy])
        .await?;
    k.wait_event("Node", &added[0].1, "DrainFinished", &[policy, "NoExecute"])
        .await?;

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    for n in &nodes {
        let node = expect_clean(k, n).await?;
        ensure!(
            drain_started(&node)?.is_empty(),
            "{n} keeps drain records after the policy went: {:?}",
            drain_started(&node)?
        );
    }
    Ok(())
}

/// Creates `size` nodes in each zone (`zone` names it, `node` names its i-th node,
/// from 1), with a healthy `Broken` condition.
async fn create_zones(
    k: &K,
    s: Scn,
    sizes: &[(&str, usize)],
    zone: impl Fn(&str) -> String,
    node: impl Fn(&str, usize) -> String,
) -> Result {
    for &(z, size) in sizes {
        for i in 1..=size {
            let n = node(z, i);
            k.create_node(&n, &[s.label(), (ZONE_LABEL, &zone(z))])
                .await?;
            k.set_conditions(&n, &[Cond::now("Broken", "False", "Test")])
                .await?;
        }
    }
    Ok(())
}

/// Three zones of four nodes, `pauseWhenZoneUnhealthy: "50%"`: zone a, with three
/// of its four nodes broken, keeps them NoSchedule without starting their drains and
/// the policy says which zone is unhealthy; b (one of four) and c (two of four: not
/// MORE than half) switch once their zones settled (zoneSettle, 5 s). Once a node of a
/// heals and the zone settled again, a's other two switch too.
pub async fn zone_hold(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("ezone");
    let policy = "e2e-ezone";
    const KEY: &str = "e2e.nodetaint.io/zone-hold";
    const STAND_IN: &str = "e2e.nodetaint.io/zone-hold:NoSchedule";
    const NO_EXECUTE: &str = "e2e.nodetaint.io/zone-hold:NoExecute";
    const HOLD: Duration = Duration::from_secs(5);
    const FOR: &str = "3s";
    // The operator looks at a held node again every 10 s (ZONE_HELD_RECHECK); the
    // zone is judged 5 s (zoneSettle) after the heal.
    const RELEASED_WITHIN: Duration = Duration::from_secs(20);
    let zone = |z: &str| format!("e2e-zone-{z}");
    let node = |z: &str, i: usize| s.node(&format!("{z}{i}"));

    create_zones(k, s, &[("a", 4), ("b", 4), ("c", 4)], zone, node).await?;
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": KEY, "effect": "NoExecute"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True", "for": FOR}]}],
            "eviction": {"respectDisruptionBudgets": false, "pauseWhenZoneUnhealthy": "50%"},
        }),
    ))
    .await?;
    expect_drain_status(k, policy, "True", "Reconciled", (12, 0, 0), 0).await?;

    // The six nodes break at the same second. Their conditions are written one after
    // another, and without a `for` window the operator would see a1 broken alone
    // first (1 of 4: zone a healthy) and rightly switch it; with one, all six start
    // matching at the same instant, when the window ends.
    let held = [node("a", 1), node("a", 2), node("a", 3)];
    let switching = [node("b", 1), node("c", 1), node("c", 2)];
    let since = now_s();
    for n in held.iter().chain(&switching) {
        k.set_conditions(n, &[Cond::since("Broken", "True", "Test", since)])
            .await?;
    }
    let window_end = since.checked_add(SignedDuration::from_secs(3))?;
    let wait = window_end.duration_since(Timestamp::now());
    ensure!(
        wait > SignedDuration::from_millis(500),
        "writing the conditions took until {:.1} s before the {FOR} window ends",
        secs(wait)
    );
    for n in held.iter().chain(&switching) {
        check_node(k, n, &[], &owned(&[])).await?;
    }
    tokio::time::sleep(Duration::try_from(wait)?).await;
    let broke = Instant::now();
    for n in &switching {
        expect_node(k, n, &[NO_EXECUTE], &owned(&[(NO_EXECUTE, policy)])).await?;
    }
    println!(
        "eviction zone hold: b's and c's broken nodes NoExecute {:.1} s after the `for` window ended",
        broke.elapsed().as_secs_f64()
    );
    for n in &held {
        expect_node(k, n, &[STAND_IN], &owned(&[(STAND_IN, policy)])).await?;
    }
    let v = expect_drain_status(k, policy, "False", "ZoneUnhealthy", (12, 6, 0), 3).await?;
    let msg = v.message().to_string();
    println!("eviction zone hold: status message {msg:?}");
    ensure!(
        msg.contains(&zone("a")) && !msg.contains(&zone("b")) && !msg.contains(&zone("c")),
        "the ZoneUnhealthy message should name zone {} and no other: {msg:?}",
        zone("a")
    );
    ensure!(
        msg.contains("3 of 4"),
        "the ZoneUnhealthy message should say how many of the zone's nodes match: {msg:?}"
    );
    // a's nodes stay NoSchedule, and a held zone starts no drain (it evicts nothing).
    always_for(
        "zone a's broken nodes to stay NoSchedule while the zone is unhealthy",
        HOLD,
        async || {
            for n in &held {
                let node = check_node(k, n, &[STAND_IN], &owned(&[(STAND_IN, policy)])).await?;
                ensure!(
                    drain_start_of(&node, policy)?.is_none(),
                    "{n} started draining in a held zone: {:?}",
                    drain_started(&node)?
                );
            }
            let (v, draining) = policy_status(k, policy).await?;
            v.check("False", "ZoneUnhealthy", 12, 6, 0)?;
            ensure_eq!(draining, 3, "drainingNodes");
            Ok(())
        },
    )
    .await?;
    println!(
        "eviction zone hold: zone a held {:.1} s after the `for` window ended",
        broke.elapsed().as_secs_f64()
    );

    // One of a's nodes heals: 2 of 4 is not more than half, the zone switches.
    let healed = Instant::now();
    k.set_conditions(&held[0], &[Cond::now("Broken", "False", "Test")])
        .await?;
    let remaining = &held[1..];
    eventually_within(
        "zone a's two broken nodes to switch to NoExecute once the zone healed",
        RELEASED_WITHIN,
        Duration::from_millis(100),
        async || {
            for n in remaining {
                check_node(k, n, &[NO_EXECUTE], &owned(&[(NO_EXECUTE, policy)])).await?;
            }
            Ok(())
        },
    )
    .await?;
    let released = healed.elapsed();
    println!(
        "eviction zone hold: a's two broken nodes NoExecute {:.1} s after a node healed",
        released.as_secs_f64()
    );
    let n = expect_clean(k, &held[0]).await?;
    ensure!(
        drain_started(&n)?.is_empty(),
        "the healed node keeps a drain record: {:?}",
        drain_started(&n)?
    );
    expect_drain_status(k, policy, "True", "Reconciled", (12, 5, 0), 0).await?;
    for z in ["a", "b", "c"] {
        for i in 1..=4 {
            let n = node(z, i);
            if !remaining.contains(&n) && !switching.contains(&n) {
                check_node(k, &n, &[], &owned(&[])).await?;
            }
        }
    }

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    for z in ["a", "b", "c"] {
        for i in 1..=4 {
            let n = expect_clean(k, &node(z, i)).await?;
            ensure!(
                drain_started(&n)?.is_empty(),
                "{} keeps drain records after the policy went",
                node(z, i)
            );
        }
    }
    Ok(())
}

/// A zone-wide fault as it reaches the API server, without a `for` window: six of
/// zone a's ten nodes break one after another within a second, and one of zone b's
/// two. With `pauseWhenZoneUnhealthy: "50%"` and the default zoneSettle (5 s), the
/// first of a's nodes the operator sees is not judged alone: none of the six starts
/// draining or switches, the policy says zone a is unhealthy with 6 of 10, and b's
/// node switches once its zone settled.
pub async fn zone_settle(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("esettle");
    let policy = "e2e-esettle";
    const KEY: &str = "e2e.nodetaint.io/zone-settle";
    const STAND_IN: &str = "e2e.nodetaint.io/zone-settle:NoSchedule";
    const NO_EXECUTE: &str = "e2e.nodetaint.io/zone-settle:NoExecute";
    // Longer than zoneSettle and a held node's recheck after it: the zone was judged.
    const WATCHED: Duration = Duration::from_secs(8);
    let zone = |z: &str| format!("e2e-settle-{z}");
    let node = |z: &str, i: usize| s.node(&format!("{z}{i}"));
    let sizes = [("a", 10), ("b", 2)];
    create_zones(k, s, &sizes, zone, node).await?;
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": KEY, "effect": "NoExecute"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
            "eviction": {"respectDisruptionBudgets": false, "pauseWhenZoneUnhealthy": "50%"},
        }),
    ))
    .await?;
    expect_drain_status(k, policy, "True", "Reconciled", (12, 0, 0), 0).await?;

    let broken: Vec<String> = (1..=6).map(|i| node("a", i)).collect();
    let started = Instant::now();
    for n in &broken {
        k.set_conditions(n, &[Cond::now("Broken", "True", "Test")])
            .await?;
    }
    k.set_conditions(&node("b", 1), &[Cond::now("Broken", "True", "Test")])
        .await?;
    ensure!(
        started.elapsed() < Duration::from_secs(2),
        "writing seven conditions took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    always_for(
        "zone a's six broken nodes to stay without NoExecute or a drain start",
        WATCHED,
        async || {
            for n in &broken {
                let node = k.node(n).await?;
                let on = taint_strs(&node);
                ensure!(!on.iter().any(|t| t == NO_EXECUTE), "{n} switched: {on:?}");
                ensure!(
                    drain_start_of(&node, policy)?.is_none(),
                    "{n} started draining before its zone was judged: {:?}",
                    drain_started(&node)?
                );
            }
            Ok(())
        },
    )
    .await?;
    for n in &broken {
        check_node(k, n, &[STAND_IN], &owned(&[(STAND_IN, policy)])).await?;
    }
    expect_node(
        k,
        &node("b", 1),
        &[NO_EXECUTE],
        &owned(&[(NO_EXECUTE, policy)]),
    )
    .await?;
    let v = expect_drain_status(k, policy, "False", "ZoneUnhealthy", (12, 7, 0), 6).await?;
    ensure!(
        v.message().contains(&zone("a")) && v.message().contains("6 of 10"),
        "the ZoneUnhealthy message should name zone a with 6 of 10: {:?}",
        v.message()
    );
    println!(
        "eviction zone settle: zone a's six broken nodes held whole for {:.1} s; b's node switched",
        started.elapsed().as_secs_f64()
    );

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    for (z, size) in sizes {
        for i in 1..=size {
            expect_clean(k, &node(z, i)).await?;
        }
    }
    Ok(())
}

/// The operator's lease duration (`run.rs`) and a waiting replica's retry (a fifth).
const LEASE_DURATION: Duration = Duration::from_secs(15);
const ACQUIRE_RETRY: Duration = Duration::from_secs(3);
const FAILOVER_LEASE: &str = "e2e-eviction-failover";

async fn lease_holder(api: &Api<Lease>) -> Result<Option<String>> {
    Ok(api
        .get_opt(FAILOVER_LEASE)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// Two replicas on a Lease; a drain with `drainTimeout: 25s` that a
/// PodDisruptionBudget blocks (a bare control plane has no disruption controller:
/// the budget's status is never observed and every eviction gets 429). The leader
/// is SIGKILLed a few seconds into the drain; the other replica takes over and
/// switches to NoExecute 25 s after the start the node records, not 25 s after it
/// took over. The suite's operator stops for this scenario and starts again at the end.
pub async fn failover_mid_drain(h: &Harness) -> Result {
    let (mut a, mut b) = {
        let mut op = h.op.lock().await;
        if op.lease_namespace().is_none() {
            println!(
                "no lease namespace (E2E_OPERATOR_NAMESPACE unset): nothing to elect on; skipped"
            );
            return Ok(());
        }
        op.stop().await?;
        (
            op.sibling("e2e-evict-a", h.work_dir.join("operator-evict-a.log"))
                .with_lease_name(FAILOVER_LEASE),
            op.sibling("e2e-evict-b", h.work_dir.join("operator-evict-b.log"))
                .with_lease_name(FAILOVER_LEASE),
        )
    };
    let outcome = failover_checks(h, &mut a, &mut b).await;
    let logs = |op: &Operator| {
        format!(
            "\n--- log of replica {} (last 40 lines of {}):\n{}",
            op.identity(),
            op.log_path().display(),
            op.log_tail(40)
        )
    };
    let outcome = outcome.map_err(|e| format!("{e}{}{}", logs(&a), logs(&b)).into());
    for r in [&mut a, &mut b] {
        if let Err(e) = r.stop().await {
            println!("stopping {}: {e}", r.identity());
        }
    }
    let restarted = h.op.lock().await.start().await;
    outcome.and(restarted)
}

async fn failover_checks(h: &Harness, a: &mut Operator, b: &mut Operator) -> Result {
    let k = &h.k;
    let s = Scn("efail");
    let policy = "e2e-efail";
    let ns = "e2e-efail";
    let (pod, pdb) = ("web-1", "web-pdb");
    const KEY: &str = "e2e.nodetaint.io/failover";
    const STAND_IN: &str = "e2e.nodetaint.io/failover:NoSchedule";
    const NO_EXECUTE: &str = "e2e.nodetaint.io/failover:NoExecute";
    const TIMEOUT: SignedDuration = SignedDuration::from_secs(25);
    const KILL_AFTER: SignedDuration = SignedDuration::from_secs(3);
    const TOLERANCE: SignedDuration = SignedDuration::from_secs(4);

    let lease_ns = a.lease_namespace().unwrap_or_default().to_string();
    let leases: Api<Lease> = Api::namespaced(k.client.clone(), &lease_ns);
    match leases
        .delete(FAILOVER_LEASE, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }

    // A node running one ordinary pod that a budget protects.
    let n = s.node("1");
    k.create_node(&n, &[s.label()]).await?;
    k.set_conditions(&n, &[Cond::now("Broken", "False", "Test")])
        .await?;
    k.ensure_namespace(ns).await?;
    k.create_pod(ns, pod, &n, &[("app", "e2e-efail")], &[])
        .await?;
    // Running and Ready: the Eviction API lets a Pending pod go whatever its budget says.
    k.set_pod_ready(ns, pod, true).await?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(k.client.clone(), ns);
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": pdb, "namespace": ns},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "e2e-efail"}}},
        }))?,
    )
    .await?;

    a.start().await?;
    b.start().await?;
    let leader_id = eventually(
        format!("a holder of Lease {lease_ns}/{FAILOVER_LEASE}"),
        async || match lease_holder(&leases).await? {
            Some(h) => Ok(h),
            None => bail!("no holder yet"),
        },
    )
    .await?;
    let (leader, follower) = if leader_id == a.identity() {
        (a, b)
    } else if leader_id == b.identity() {
        (b, a)
    } else {
        bail!("Lease {FAILOVER_LEASE} is held by {leader_id:?}, neither replica");
    };
    println!(
        "eviction failover: {} leads; {} waits",
        leader.identity(),
        follower.identity()
    );

    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": KEY, "effect": "NoExecute"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
            "eviction": {"drainTimeout": "25s"},
        }),
    ))
    .await?;
    expect_drain_status(k, policy, "True", "Reconciled", (1, 0, 0), 0).await?;

    // The node breaks: the stand-in goes on, the drain starts, the eviction is refused.
    k.set_conditions(&n, &[Cond::now("Broken", "True", "Test")])
        .await?;
    let started = eventually("the stand-in and the drain start on the node", async || {
        let node = check_node(k, &n, &[STAND_IN], &owned(&[(STAND_IN, policy)])).await?;
        drain_start_of(&node, policy)?.ok_or_else(|| {
            format!(
                "no drain start for {policy}: {:?}",
                node.annotations().get(DRAIN_STARTED_ANNOTATION)
            )
            .into()
        })
    })
    .await?;
    let deadline = started.checked_add(TIMEOUT)?;
    println!("eviction failover: drain started at {started}; drainTimeout ends at {deadline}");
    let blocked = k
        .wait_event(
            "Node",
            &n,
            "EvictionBlocked",
            &[policy, &format!("{ns}/{pod}"), pdb],
        )
        .await?;
    println!(
        "eviction failover: EvictionBlocked: {}",
        blocked.note.as_deref().unwrap_or("")
    );
    let lm = leader.metrics().await?;
    ensure!(
        lm.get_with(
            "taint_operator_evictions_total",
            &[("policy", policy), ("outcome", "blocked")]
        ) >= 1.0,
        "the leader should count a blocked eviction: {:?}",
        lm.0.lines()
            .filter(|l| l.contains("evictions"))
            .collect::<Vec<_>>()
    );
    let p = k.pods(ns).get(pod).await?;
    ensure!(
        p.metadata.deletion_timestamp.is_none(),
        "the pod was evicted in spite of its budget"
    );

    // SIGKILL the leader a few seconds into the drain.
    let kill_at = started.checked_add(KILL_AFTER)?;
    let wait = kill_at.duration_since(Timestamp::now());
    if wait > SignedDuration::ZERO {
        tokio::time::sleep(Duration::try_from(wait)?).await;
    }
    check_node(k, &n, &[STAND_IN], &owned(&[(STAND_IN, policy)])).await?;
    leader.kill9().await?;
    let killed = Timestamp::now();
    println!(
        "eviction failover: {} SIGKILLed {:.1} s after the drain start",
        leader.identity(),
        secs(killed.duration_since(started))
    );

    // The other replica takes the Lease over once it ran out.
    let takeover = eventually_within(
        format!(
            "{} to take Lease {FAILOVER_LEASE} over",
            follower.identity()
        ),
        LEASE_DURATION + ACQUIRE_RETRY + Duration::from_secs(5),
        Duration::from_millis(100),
        async || {
            let spec = leases.get(FAILOVER_LEASE).await?.spec.ok_or("no spec")?;
            ensure_eq!(
                spec.holder_identity.as_deref(),
                Some(follower.identity()),
                "Lease holder"
            );
            Ok(Timestamp::now())
        },
    )
    .await?;
    println!(
        "eviction failover: {} took over {:.1} s after the drain start",
        follower.identity(),
        secs(takeover.duration_since(started))
    );

    // NoSchedule until the timeout; then the switch, by the new leader.
    let switched_seen = eventually_within(
        "the switch to NoExecute",
        Duration::try_from(deadline.duration_since(Timestamp::now())).unwrap_or_default()
            + Duration::from_secs(15),
        Duration::from_millis(200),
        async || {
            let node = k.node(&n).await?;
            let ts = taint_strs(&node);
            let now = Timestamp::now();
            if ts == [NO_EXECUTE] {
                return Ok(now);
            }
            ensure!(
                ts == [STAND_IN],
                "{n} has {ts:?} {:.1} s after the drain start",
                secs(now.duration_since(started))
            );
            bail!("still {ts:?}")
        },
    )
    .await?;
    let node = check_node(k, &n, &[NO_EXECUTE], &owned(&[(NO_EXECUTE, policy)])).await?;
    let added = no_execute_added(&node, KEY)?;
    let off = added.duration_since(deadline);
    println!(
        "eviction failover: NoExecute timeAdded {added} = drain start + {:.0} s ({:+.0} s from start + 25 s; takeover + 25 s would be start + {:.0} s); seen {:.1} s after the start",
        secs(added.duration_since(started)),
        secs(off),
        secs(takeover.duration_since(started)) + 25.0,
        secs(switched_seen.duration_since(started))
    );
    ensure!(
        off.abs() <= TOLERANCE,
        "the switch (timeAdded {added}) should come at the drain start {started} + 25 s = {deadline}, within {TOLERANCE:?}"
    );
    ensure_eq!(
        drain_start_of(&node, policy)?,
        Some(started),
        "the drain start the node records after the switch"
    );
    let p = k.pods(ns).get(pod).await?;
    ensure!(
        p.metadata.deletion_timestamp.is_none(),
        "the pod was evicted in spite of its budget"
    );

    // The new leader did it.
    let switched_line = |op: &Operator| {
        op.log_tail(2000)
            .lines()
            .any(|l| l.contains("drain finished; switched to NoExecute") && l.contains(&n))
    };
    ensure!(
        switched_line(follower),
        "the new leader's log should say it switched {n}"
    );
    ensure!(
        !switched_line(leader),
        "the killed leader's log says it switched {n}"
    );
    let fm = follower.metrics().await?;
    ensure!(
        fm.node_writes() >= 1
            && fm.get_with(
                "taint_operator_evictions_total",
                &[("policy", policy), ("outcome", "blocked")]
            ) >= 1.0,
        "the new leader should have tried the eviction and written the node: {} node writes, evictions {:?}",
        fm.node_writes(),
        fm.0.lines()
            .filter(|l| l.contains("evictions"))
            .collect::<Vec<_>>()
    );
    let finished = k
        .wait_event(
            "Node",
            &n,
            "DrainFinished",
            &[policy, "NoExecute", "drainTimeout", "passed"],
        )
        .await?;
    println!(
        "eviction failover: DrainFinished: {}",
        finished.note.as_deref().unwrap_or("")
    );
    expect_drain_status(k, policy, "True", "Reconciled", (1, 1, 0), 0).await?;

    // Cleanup through the new leader's finalizer.
    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    let node = expect_clean(k, &n).await?;
    ensure!(
        drain_started(&node)?.is_empty(),
        "{n} keeps drain records after the policy went"
    );
    pdbs.delete(pdb, &DeleteParams::default()).await?;
    k.delete_pod(ns, pod).await?;
    Ok(())
}
