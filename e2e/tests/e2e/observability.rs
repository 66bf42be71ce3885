//! Scenarios 13-15: `kubectl get tp`, the events on nodes, and a quiet steady state.

use std::{collections::BTreeMap, time::Duration};

use kube::ResourceExt;
use serde_json::json;
use taint_operator_crd::POD_READY_ANNOTATION;
use taint_operator_e2e::{
    Cond, Harness, Result, bail, ensure, ensure_eq,
    k8s::{now_s, taint_strs},
};

use crate::common::{Scn, check_node, expect_clean, expect_node, expect_status, owned};

/// A `kubectl get` table: the header's columns, and each row by its first column.
type Table = (Vec<String>, BTreeMap<String, Vec<String>>);

fn parse_table(out: &str) -> Result<Table> {
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines
        .next()
        .ok_or("kubectl printed nothing")?
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|l| {
            let cells: Vec<String> = l.split_whitespace().map(str::to_string).collect();
            (cells[0].clone(), cells)
        })
        .collect();
    Ok((header, rows))
}

fn names(out: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.trim()
                .trim_start_matches("taintpolicy.nodetaint.io/")
                .to_string()
        })
        .collect();
    v.sort();
    v
}

/// `kubectl get tp` shows NAME TAINTS MODE SELECTED TAINTED READY AGE with the right
/// values, `-o wide` adds DRYRUN REASON, and the CRD's selectable fields filter.
pub async fn kubectl_get(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("kubectl");
    let ns = "e2e-kubectl";
    let (cont, boot, dry) = ("e2e-kubectl-cont", "e2e-kubectl-boot", "e2e-kubectl-dry");
    let (n1, n2) = (s.node("1"), s.node("2"));
    k.create_node(&n1, &[s.label()]).await?;
    k.create_node(&n2, &[s.label()]).await?;
    k.set_conditions(&n1, &[Cond::now("Broken", "True", "Test")])
        .await?;
    k.set_conditions(&n2, &[Cond::now("Broken", "False", "Test")])
        .await?;
    k.ensure_namespace(ns).await?;
    let matchers = json!([{"conditions": [{"type": "Broken", "status": "True"}]}]);
    k.create_policy(s.policy(
        cont,
        &[],
        json!({
            "taints": [
                {"key": "e2e.nodetaint.io/kubectl", "value": "yes", "effect": "NoExecute"},
                {"key": "e2e.nodetaint.io/kubectl2", "effect": "PreferNoSchedule"},
            ],
            "matchers": matchers,
        }),
    ))
    .await?;
    k.create_policy(s.policy(boot, &[], json!({
        "taints": [{"key": "e2e.nodetaint.io/kubectl-boot", "value": "wait", "effect": "NoSchedule"}],
        "readiness": {"criticalPods": [{"name": "init", "namespace": ns, "selector": {"matchLabels": {"app": "init"}}}]},
        "mode": "BootstrapOnly",
    }))).await?;
    k.create_policy(s.policy(
        dry,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/kubectl-dry", "effect": "NoSchedule"}],
            "matchers": matchers,
            "dryRun": true,
        }),
    ))
    .await?;
    expect_status(k, cont, "True", "Reconciled", (2, 1, 0)).await?;
    expect_status(k, boot, "True", "Reconciled", (2, 2, 0)).await?;
    expect_status(k, dry, "True", "DryRun", (2, 1, 0)).await?;
    // The dry run touched nothing.
    for n in [&n1, &n2] {
        let ts = taint_strs(&k.node(n).await?);
        ensure!(
            !ts.iter().any(|t| t.contains("kubectl-dry")),
            "the dry-run policy tainted {n}: {ts:?}"
        );
    }

    let out = h.kubectl(&["get", "tp", cont, boot, dry]).await?;
    println!("{out}");
    let (header, rows) = parse_table(&out)?;
    ensure_eq!(
        header,
        [
            "NAME", "TAINTS", "MODE", "SELECTED", "TAINTED", "READY", "AGE"
        ],
        "kubectl get tp columns"
    );
    let want = [
        (
            cont,
            "e2e.nodetaint.io/kubectl=yes:NoExecute,e2e.nodetaint.io/kubectl2:PreferNoSchedule",
            "Continuous",
            "2",
            "1",
            "True",
        ),
        (
            boot,
            "e2e.nodetaint.io/kubectl-boot=wait:NoSchedule",
            "BootstrapOnly",
            "2",
            "2",
            "True",
        ),
        (
            dry,
            "e2e.nodetaint.io/kubectl-dry:NoSchedule",
            "Continuous",
            "2",
            "1",
            "True",
        ),
    ];
    for (name, taints, mode, selected, tainted, ready) in want {
        let row = rows.get(name).ok_or_else(|| format!("no row for {name}"))?;
        ensure_eq!(
            row[..6],
            [name, taints, mode, selected, tainted, ready],
            "kubectl get tp row of {name}"
        );
        let age = &row[6];
        ensure!(
            row.len() == 7
                && age.chars().next().is_some_and(|c| c.is_ascii_digit())
                && age.ends_with(['s', 'm']),
            "AGE of {name}: {row:?}"
        );
    }

    let out = h
        .kubectl(&["get", "tp", cont, boot, dry, "-o", "wide"])
        .await?;
    println!("{out}");
    let (header, rows) = parse_table(&out)?;
    ensure_eq!(
        header,
        [
            "NAME", "TAINTS", "MODE", "SELECTED", "TAINTED", "READY", "AGE", "DRYRUN", "REASON"
        ],
        "kubectl get tp -o wide columns"
    );
    for (name, dry_run, reason) in [
        (cont, "false", "Reconciled"),
        (boot, "false", "Reconciled"),
        (dry, "true", "DryRun"),
    ] {
        let row = rows
            .get(name)
            .ok_or_else(|| format!("no wide row for {name}"))?;
        ensure_eq!(row[7..], [dry_run, reason], "DRYRUN and REASON of {name}");
    }

    let selector = format!("{}={}", s.label().0, s.label().1);
    let out = h
        .kubectl(&[
            "get",
            "tp",
            "-l",
            &selector,
            "--field-selector",
            "spec.mode=BootstrapOnly",
            "-o",
            "name",
        ])
        .await?;
    ensure_eq!(
        names(&out),
        [boot],
        "--field-selector spec.mode=BootstrapOnly"
    );
    let out = h
        .kubectl(&[
            "get",
            "tp",
            "-l",
            &selector,
            "--field-selector",
            "spec.mode=Continuous",
            "-o",
            "name",
        ])
        .await?;
    ensure_eq!(
        names(&out),
        [cont, dry],
        "--field-selector spec.mode=Continuous"
    );
    let out = h
        .kubectl(&[
            "get",
            "tp",
            "-l",
            &selector,
            "--field-selector",
            "spec.dryRun=true",
            "-o",
            "name",
        ])
        .await?;
    ensure_eq!(names(&out), [dry], "--field-selector spec.dryRun=true");

    k.delete_policies_labelled(s.label().0, s.label().1).await?;
    expect_clean(k, &n1).await?;
    expect_clean(k, &n2).await?;
    Ok(())
}

/// TaintAdded / TaintRemoved events (events.k8s.io) on the Node, naming the policy and why.
pub async fn node_events(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("events");
    let policy = "e2e-events";
    const TAINT: &str = "e2e.nodetaint.io/events=on:NoSchedule";
    const ID: &str = "e2e.nodetaint.io/events:NoSchedule";
    let n = s.node("1");
    let node = k.create_node(&n, &[s.label()]).await?;
    let uid = node.uid().unwrap_or_default();
    k.set_conditions(&n, &[Cond::now("NetworkInterfaceCard", "Ok", "NICHealthy")])
        .await?;
    k.create_policy(s.policy(policy, &[], json!({
        "taints": [{"key": "e2e.nodetaint.io/events", "value": "on", "effect": "NoSchedule"}],
        "matchers": [{"conditions": [{"type": "NetworkInterfaceCard", "status": "Kaput|Ruined"}]}],
    }))).await?;
    expect_status(k, policy, "True", "Reconciled", (1, 0, 0)).await?;

    k.set_conditions(
        &n,
        &[Cond::now("NetworkInterfaceCard", "Kaput", "NICLinkDown")],
    )
    .await?;
    expect_node(k, &n, &[TAINT], &owned(&[(ID, policy)])).await?;
    let added = k
        .wait_event(
            "Node",
            &n,
            "TaintAdded",
            &[policy, TAINT, "NetworkInterfaceCard=Kaput"],
        )
        .await?;
    let check = |e: &k8s_openapi::api::events::v1::Event, action: &str| -> Result {
        let r = e.regarding.as_ref().ok_or("event without regarding")?;
        ensure_eq!(
            (
                r.api_version.as_deref(),
                r.kind.as_deref(),
                r.name.as_deref(),
                r.uid.as_deref()
            ),
            (
                Some("v1"),
                Some("Node"),
                Some(n.as_str()),
                Some(uid.as_str())
            ),
            "regarding"
        );
        ensure_eq!(e.type_.as_deref(), Some("Normal"), "event type");
        ensure_eq!(e.action.as_deref(), Some(action), "event action");
        ensure_eq!(
            e.reporting_controller.as_deref(),
            Some("taint-operator"),
            "reportingController"
        );
        Ok(())
    };
    check(&added, "AddTaint")?;
    println!("TaintAdded note: {}", added.note.as_deref().unwrap_or(""));

    k.set_conditions(&n, &[Cond::now("NetworkInterfaceCard", "Ok", "NICHealthy")])
        .await?;
    expect_node(k, &n, &[], &owned(&[])).await?;
    let removed = k
        .wait_event(
            "Node",
            &n,
            "TaintRemoved",
            &[policy, "e2e.nodetaint.io/events", "no matcher matches"],
        )
        .await?;
    check(&removed, "RemoveTaint")?;
    println!(
        "TaintRemoved note: {}",
        removed.note.as_deref().unwrap_or("")
    );
    let count = |reason: &str, events: &[k8s_openapi::api::events::v1::Event]| {
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .count()
    };
    let events = k.events_about("Node", &n).await?;
    ensure_eq!(
        (count("TaintAdded", &events), count("TaintRemoved", &events)),
        (1, 1),
        "events about {n} (one add, one remove)"
    );

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await
}

/// A change many nodes share at once is one event on the TaintPolicy, counting the
/// nodes and naming the first few, instead of an event on each node.
pub async fn burst_events(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("burst");
    let policy = "e2e-burst";
    const TAINT: &str = "e2e.nodetaint.io/burst=on:NoSchedule";
    const ID: &str = "e2e.nodetaint.io/burst:NoSchedule";
    const NODES: usize = 12;
    let nodes: Vec<String> = (0..NODES).map(|i| s.node(&i.to_string())).collect();
    for n in &nodes {
        k.create_node(n, &[s.label()]).await?;
        k.set_conditions(n, &[Cond::now("NetworkInterfaceCard", "Ok", "NICHealthy")])
            .await?;
    }
    let created = k.create_policy(s.policy(policy, &[], json!({
        "taints": [{"key": "e2e.nodetaint.io/burst", "value": "on", "effect": "NoSchedule"}],
        "matchers": [{"conditions": [{"type": "NetworkInterfaceCard", "status": "Kaput"}]}],
    }))).await?;
    let uid = created.uid().unwrap_or_default();
    expect_status(k, policy, "True", "Reconciled", (NODES as i32, 0, 0)).await?;

    // All at once, as a zone's nodes lose their network together.
    let kaput = [Cond::now("NetworkInterfaceCard", "Kaput", "NICLinkDown")];
    futures::future::try_join_all(nodes.iter().map(|n| k.set_conditions(n, &kaput))).await?;
    for n in &nodes {
        expect_node(k, n, &[TAINT], &owned(&[(ID, policy)])).await?;
    }
    let summary = k
        .wait_event(
            "TaintPolicy",
            policy,
            "TaintAdded",
            &[
                &format!("policy {policy} added {TAINT} on {NODES} nodes: "),
                "NetworkInterfaceCard=Kaput",
                &format!(" and {} more", NODES - 5),
            ],
        )
        .await?;
    println!("summary note: {}", summary.note.as_deref().unwrap_or(""));
    let r = summary
        .regarding
        .as_ref()
        .ok_or("event without regarding")?;
    ensure_eq!(
        (r.kind.as_deref(), r.name.as_deref(), r.uid.as_deref()),
        (Some("TaintPolicy"), Some(policy), Some(uid.as_str())),
        "regarding"
    );
    ensure_eq!(summary.action.as_deref(), Some("AddTaint"), "action");
    for n in &nodes {
        let on_node = k.events_about("Node", n).await?;
        ensure!(
            on_node
                .iter()
                .all(|e| e.reason.as_deref() != Some("TaintAdded")),
            "{n} has its own TaintAdded event besides the summary"
        );
    }

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    for n in &nodes {
        expect_clean(k, n).await?;
    }
    Ok(())
}

/// At steady state the operator writes nothing: over 5 s its node and status write
/// counters stay put, with policies of every kind holding taints.
pub async fn quiet_period(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("quiet");
    let ns = "e2e-quiet";
    k.ensure_namespace(ns).await?;
    let q: Vec<String> = (1..=4).map(|i| s.node(&i.to_string())).collect();
    for n in &q {
        k.create_node(n, &[s.label()]).await?;
    }
    k.add_foreign_taint(
        &q[0],
        json!({"key": "admin.example.com/quiet", "effect": "NoSchedule"}),
    )
    .await?;
    let long_ago = now_s().checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(60))?;
    k.set_conditions(&q[0], &[Cond::now("Broken", "True", "Test")])
        .await?;
    k.set_conditions(&q[1], &[Cond::since("Slow", "True", "Test", long_ago)])
        .await?;
    k.create_pod(
        ns,
        "agent-3",
        &q[2],
        &[("app", "agent")],
        &[(POD_READY_ANNOTATION, "true")],
    )
    .await?;
    k.create_pod(ns, "init-3", &q[2], &[("app", "init")], &[])
        .await?;
    k.set_pod_ready(ns, "init-3", true).await?;
    let spec = |key: &str, extra: serde_json::Value| {
        let mut v =
            json!({"taints": [{"key": format!("e2e.nodetaint.io/{key}"), "effect": "NoSchedule"}]});
        for (k, val) in extra.as_object().expect("an object") {
            v[k] = val.clone();
        }
        v
    };
    let policies = [
        (
            "e2e-quiet-match",
            spec(
                "quiet-match",
                json!({"matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}]}),
            ),
        ),
        (
            "e2e-quiet-for",
            spec(
                "quiet-for",
                json!({"matchers": [{"conditions": [{"type": "Slow", "status": "True", "for": "2s"}]}]}),
            ),
        ),
        (
            "e2e-quiet-agent",
            spec(
                "quiet-agent",
                json!({"readiness": {"criticalPods": [{"name": "agent", "namespace": ns, "selector": {"matchLabels": {"app": "agent"}}}]}}),
            ),
        ),
        (
            "e2e-quiet-boot",
            spec(
                "quiet-boot",
                json!({"mode": "BootstrapOnly", "readiness": {"criticalPods": [{"name": "init", "namespace": ns, "selector": {"matchLabels": {"app": "init"}}}]}}),
            ),
        ),
    ];
    for (name, spec) in &policies {
        k.create_policy(s.policy(name, &[], spec.clone())).await?;
    }
    let id = |key: &str| format!("e2e.nodetaint.io/{key}:NoSchedule");
    let (m, f, a, b) = (
        id("quiet-match"),
        id("quiet-for"),
        id("quiet-agent"),
        id("quiet-boot"),
    );
    expect_node(
        k,
        &q[0],
        &["admin.example.com/quiet:NoSchedule", &m, &a, &b],
        &owned(&[
            (&m, policies[0].0),
            (&a, policies[2].0),
            (&b, policies[3].0),
        ]),
    )
    .await?;
    expect_node(
        k,
        &q[1],
        &[&f, &a, &b],
        &owned(&[
            (&f, policies[1].0),
            (&a, policies[2].0),
            (&b, policies[3].0),
        ]),
    )
    .await?;
    expect_node(k, &q[2], &[], &owned(&[])).await?;
    expect_node(
        k,
        &q[3],
        &[&a, &b],
        &owned(&[(&a, policies[2].0), (&b, policies[3].0)]),
    )
    .await?;
    expect_status(k, policies[0].0, "True", "Reconciled", (4, 1, 0)).await?;
    expect_status(k, policies[1].0, "True", "Reconciled", (4, 1, 0)).await?;
    expect_status(k, policies[2].0, "True", "Reconciled", (4, 3, 0)).await?;
    expect_status(k, policies[3].0, "True", "Reconciled", (4, 3, 0)).await?;

    // Let the status writer's last round land, then watch the counters.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = h.metrics().await?;
    let rvs: Vec<String> = {
        let mut v = vec![];
        for n in &q {
            v.push(k.node(n).await?.resource_version().unwrap_or_default());
        }
        v
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = h.metrics().await?;
    println!(
        "quiet period (5 s): node writes {} -> {}, status writes {} -> {}",
        before.node_writes(),
        after.node_writes(),
        before.status_writes(),
        after.status_writes()
    );
    ensure_eq!(
        after.node_writes(),
        before.node_writes(),
        "node writes during 5 quiet seconds"
    );
    ensure_eq!(
        after.status_writes(),
        before.status_writes(),
        "status writes during 5 quiet seconds"
    );
    for (n, rv) in q.iter().zip(&rvs) {
        let now = k.node(n).await?.resource_version().unwrap_or_default();
        if &now != rv {
            bail!("node {n} changed during the quiet period ({rv} -> {now})");
        }
    }
    check_node(k, &q[2], &[], &owned(&[])).await?;

    k.delete_policies_labelled(s.label().0, s.label().1).await?;
    for n in &q[1..] {
        expect_clean(k, n).await?;
    }
    expect_node(
        k,
        &q[0],
        &["admin.example.com/quiet:NoSchedule"],
        &owned(&[]),
    )
    .await?;
    Ok(())
}
