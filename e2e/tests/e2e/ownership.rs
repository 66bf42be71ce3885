//! Scenarios 2, 4, 5, 7: others writing the same nodes, policy edits, relabeling,
//! and two policies declaring the same taint.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Taint;
use kube::ResourceExt;
use serde_json::json;
use taint_operator_e2e::{
    Cond, Harness, Result, bail, ensure, ensure_eq, eventually,
    k8s::{is_conflict, taint_str, taints},
};

use crate::common::{
    Scn, check_node, expect_node, expect_status, expect_status_names, node_is, owned,
};

const WRITER_PREFIX: &str = "writer.e2e.nodetaint.io/";
const WRITER_ANNOTATION: &str = "writer.e2e.nodetaint.io/last";

/// Someone else (kubelet, an admin) keeps adding and removing taints of their own and
/// an annotation on the same nodes, with optimistic locking, while conditions flip and
/// the operator works. Nothing the writer did may be lost, and the operator must end right.
pub async fn concurrent_writer(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("writer");
    let (p_match, p_ready) = ("e2e-writer-broken", "e2e-writer-net");
    const BROKEN: &str = "e2e.nodetaint.io/writer-broken=yes:NoExecute";
    const BROKEN_ID: &str = "e2e.nodetaint.io/writer-broken:NoExecute";
    const NET: &str = "e2e.nodetaint.io/writer-net:NoSchedule";
    let nodes: Vec<String> = (1..=4).map(|i| s.node(&i.to_string())).collect();
    let conds = |broken: bool, net: bool| {
        vec![
            Cond::now("Broken", if broken { "True" } else { "False" }, "Test"),
            Cond::now("NetReady", if net { "True" } else { "False" }, "Test"),
        ]
    };
    for n in &nodes {
        k.create_node(n, &[s.label()]).await?;
        k.set_conditions(n, &conds(false, true)).await?;
    }
    k.create_policy(s.policy(p_match, &[], json!({
        "taints": [{"key": "e2e.nodetaint.io/writer-broken", "value": "yes", "effect": "NoExecute"}],
        "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
    }))).await?;
    k.create_policy(s.policy(
        p_ready,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/writer-net", "effect": "NoSchedule"}],
            "readiness": {"conditions": [{"type": "NetReady", "status": "True"}]},
        }),
    ))
    .await?;
    expect_status(k, p_match, "True", "Reconciled", (4, 0, 0)).await?;
    expect_status(k, p_ready, "True", "Reconciled", (4, 0, 0)).await?;
    let conflicts0 = h.metrics().await?.node_write_conflicts();

    let run_for = Duration::from_secs(8);
    // The writer: its own taints (at most 3 per node, oldest removed first) and an
    // annotation, written with the resourceVersion it read, retried on conflicts.
    let writer = async {
        let started = Instant::now();
        let mut mine: BTreeMap<String, Vec<Taint>> = BTreeMap::new();
        let mut last: BTreeMap<String, String> = BTreeMap::new();
        let (mut writes, mut conflicts) = (0u32, 0u32);
        let mut i = 0u32;
        while started.elapsed() < run_for {
            let node = &nodes[(i % 4) as usize];
            let new: Taint = serde_json::from_value(json!({
                "key": format!("{WRITER_PREFIX}t{i}"), "value": "w", "effect": if i.is_multiple_of(2) { "NoSchedule" } else { "PreferNoSchedule" },
            }))?;
            let set = mine.entry(node.clone()).or_default();
            let mut next = set.clone();
            next.push(new);
            if next.len() > 3 {
                next.remove(0);
            }
            loop {
                let n = k.node(node).await?;
                let mut ts: Vec<Taint> = taints(&n)
                    .into_iter()
                    .filter(|t| !t.key.starts_with(WRITER_PREFIX))
                    .collect();
                // Keep the cluster's copy of ours (it may carry timeAdded); add the new one.
                ts.extend(next.iter().cloned());
                let mut patch = vec![
                    json!({"op": "test", "path": "/metadata/resourceVersion", "value": n.resource_version()}),
                    json!({"op": "add", "path": "/spec/taints", "value": ts}),
                ];
                if n.metadata.annotations.is_none() {
                    patch.push(json!({"op": "add", "path": "/metadata/annotations", "value": {WRITER_ANNOTATION: i.to_string()}}));
                } else {
                    patch.push(json!({"op": "add", "path": "/metadata/annotations/writer.e2e.nodetaint.io~1last", "value": i.to_string()}));
                }
                match k.json_patch_node(node, json!(patch)).await {
                    Ok(()) => break,
                    Err(e) if is_conflict(&e) => conflicts += 1,
                    Err(e) => return Err(e),
                }
            }
            writes += 1;
            *set = next;
            last.insert(node.clone(), i.to_string());
            i += 1;
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        Result::Ok((mine, last, writes, conflicts))
    };
    // Meanwhile the conditions flip, so the operator has work to do on the same nodes.
    let flipper = async {
        let started = Instant::now();
        let mut j = 0usize;
        while started.elapsed() < run_for {
            let node = &nodes[j % 4];
            k.set_conditions(
                node,
                &conds((j / 4).is_multiple_of(2), (j / 8).is_multiple_of(2)),
            )
            .await?;
            j += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Result::Ok(j)
    };
    let (w, flips) = tokio::join!(writer, flipper);
    let (mine, last, writes, writer_conflicts) = w?;
    let flips = flips?;

    // Settle on a known state.
    let finals = [(true, true), (false, false), (true, false), (false, true)];
    for (n, (b, net)) in nodes.iter().zip(finals) {
        k.set_conditions(n, &conds(b, net)).await?;
    }
    for (n, (b, net)) in nodes.iter().zip(finals) {
        let mut want: Vec<String> = mine.get(n).into_iter().flatten().map(taint_str).collect();
        let mut want_owned = vec![];
        if b {
            want.push(BROKEN.into());
            want_owned.push((BROKEN_ID, p_match));
        }
        if !net {
            want.push(NET.into());
            want_owned.push((NET, p_ready));
        }
        let want_refs: Vec<&str> = want.iter().map(String::as_str).collect();
        let node = expect_node(k, n, &want_refs, &owned(&want_owned)).await?;
        ensure_eq!(
            node.annotations().get(WRITER_ANNOTATION),
            last.get(n),
            "the writer's annotation on {n}"
        );
    }
    expect_status(k, p_match, "True", "Reconciled", (4, 2, 0)).await?;
    expect_status(k, p_ready, "True", "Reconciled", (4, 2, 0)).await?;
    let conflicts = h.metrics().await?.node_write_conflicts() - conflicts0;
    println!(
        "writer: {writes} writes ({writer_conflicts} conflicts); {flips} condition flips; operator write conflicts: {conflicts}"
    );
    ensure!(writes > 50, "the writer wrote only {writes} times");

    k.delete_policies_labelled(s.label().0, s.label().1).await?;
    for n in &nodes {
        let want: Vec<String> = mine.get(n).into_iter().flatten().map(taint_str).collect();
        let want_refs: Vec<&str> = want.iter().map(String::as_str).collect();
        expect_node(k, n, &want_refs, &owned(&[])).await?;
    }
    Ok(())
}

/// Editing a policy's taints (key, value) moves every node from the old taints to the
/// new ones, one write per node.
pub async fn policy_edit(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("edit");
    let policy = "e2e-edit";
    let nodes = [s.node("1"), s.node("2"), s.node("3")];
    for (i, n) in nodes.iter().enumerate() {
        k.create_node(n, &[s.label()]).await?;
        k.set_conditions(
            n,
            &[Cond::now(
                "Broken",
                if i < 2 { "True" } else { "False" },
                "Test",
            )],
        )
        .await?;
    }
    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [
                {"key": "e2e.nodetaint.io/edit-a", "value": "v1", "effect": "NoSchedule"},
                {"key": "e2e.nodetaint.io/edit-keep", "value": "x", "effect": "PreferNoSchedule"},
            ],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
        }),
    ))
    .await?;
    let old = [
        "e2e.nodetaint.io/edit-a=v1:NoSchedule",
        "e2e.nodetaint.io/edit-keep=x:PreferNoSchedule",
    ];
    let old_owned = owned(&[
        ("e2e.nodetaint.io/edit-a:NoSchedule", policy),
        ("e2e.nodetaint.io/edit-keep:PreferNoSchedule", policy),
    ]);
    for n in &nodes[..2] {
        expect_node(k, n, &old, &old_owned).await?;
    }
    expect_status(k, policy, "True", "Reconciled", (3, 2, 0)).await?;
    let writes0 = h.metrics().await?.node_writes();

    // New key and value for the first taint, new value for the second.
    k.patch_policy(
        policy,
        json!({"spec": {"taints": [
            {"key": "e2e.nodetaint.io/edit-b", "value": "v2", "effect": "NoSchedule"},
            {"key": "e2e.nodetaint.io/edit-keep", "value": "y", "effect": "PreferNoSchedule"},
        ]}}),
    )
    .await?;
    let new = [
        "e2e.nodetaint.io/edit-b=v2:NoSchedule",
        "e2e.nodetaint.io/edit-keep=y:PreferNoSchedule",
    ];
    let new_owned = owned(&[
        ("e2e.nodetaint.io/edit-b:NoSchedule", policy),
        ("e2e.nodetaint.io/edit-keep:PreferNoSchedule", policy),
    ]);
    for n in &nodes[..2] {
        expect_node(k, n, &new, &new_owned).await?;
        k.wait_event(
            "Node",
            n,
            "TaintRemoved",
            &[policy, "e2e.nodetaint.io/edit-a"],
        )
        .await?;
        k.wait_event(
            "Node",
            n,
            "TaintAdded",
            &[policy, "e2e.nodetaint.io/edit-b=v2"],
        )
        .await?;
    }
    check_node(k, &nodes[2], &[], &owned(&[])).await?;
    let v = expect_status(k, policy, "True", "Reconciled", (3, 2, 0)).await?;
    ensure_eq!(v.generation, 2, "generation after one edit");
    ensure_eq!(
        v.taints.as_deref(),
        Some("e2e.nodetaint.io/edit-b=v2:NoSchedule,e2e.nodetaint.io/edit-keep=y:PreferNoSchedule"),
        "status.taints after the edit"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = h.metrics().await?.node_writes() - writes0;
    println!("node writes to move 2 nodes to the edited taints: {writes}");
    ensure_eq!(writes, 2, "node writes for the edit (one per tainted node)");

    // Dropping a taint from the spec removes it from the nodes.
    k.patch_policy(
        policy,
        json!({"spec": {"taints": [
            {"key": "e2e.nodetaint.io/edit-b", "value": "v2", "effect": "NoSchedule"},
        ]}}),
    )
    .await?;
    for n in &nodes[..2] {
        expect_node(
            k,
            n,
            &[new[0]],
            &owned(&[("e2e.nodetaint.io/edit-b:NoSchedule", policy)]),
        )
        .await?;
    }

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    for n in &nodes {
        expect_node(k, n, &[], &owned(&[])).await?;
    }
    Ok(())
}

/// A node relabeled out of a policy's selector loses the policy's taints; back in, it gets them again.
pub async fn relabel(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("relabel");
    let policy = "e2e-relabel";
    const TAINT: &str = "e2e.nodetaint.io/relabel:NoSchedule";
    let (a, b) = (s.node("a"), s.node("b"));
    for n in [&a, &b] {
        k.create_node(n, &[s.label(), ("pool", "gpu")]).await?;
        k.set_conditions(n, &[Cond::now("Broken", "True", "Test")])
            .await?;
    }
    k.create_policy(s.policy(
        policy,
        &[("pool", "gpu")],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/relabel", "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}],
        }),
    ))
    .await?;
    expect_node(k, &a, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    expect_node(k, &b, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    expect_status_names(k, policy, "True", "Reconciled", (2, 2, 0), &[&a, &b]).await?;

    // Another value of the label, then no label at all.
    k.label_node(&a, "pool", Some("cpu")).await?;
    expect_node(k, &a, &[], &owned(&[])).await?;
    k.wait_event("Node", &a, "TaintRemoved", &[policy, "not selected"])
        .await?;
    expect_status_names(k, policy, "True", "Reconciled", (1, 1, 0), &[&b]).await?;
    k.label_node(&b, "pool", None).await?;
    expect_node(k, &b, &[], &owned(&[])).await?;
    expect_status_names(k, policy, "True", "Reconciled", (0, 0, 0), &[]).await?;

    // Back in: tainted again.
    k.label_node(&a, "pool", Some("gpu")).await?;
    expect_node(k, &a, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    expect_status_names(k, policy, "True", "Reconciled", (1, 1, 0), &[&a]).await?;

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    expect_node(k, &a, &[], &owned(&[])).await?;
    Ok(())
}

/// Two policies declaring the same key+effect: the older one keeps it, the newer one
/// reports Conflict (with a Warning event) and leaves that taint alone, but still
/// applies its other taints. When the older one goes, the newer one takes over.
pub async fn conflicts(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("conflict");
    // The newer policy sorts first by name: the creation time must decide, not the name.
    let (older, newer) = ("e2e-conflict-zeta", "e2e-conflict-alpha");
    const SHARED_ID: &str = "e2e.nodetaint.io/conflict:NoSchedule";
    const OWN_ID: &str = "e2e.nodetaint.io/conflict-own:NoSchedule";
    let n = s.node("1");
    k.create_node(&n, &[s.label()]).await?;
    k.set_conditions(&n, &[Cond::now("Broken", "True", "Test")])
        .await?;
    let matcher = json!([{"conditions": [{"type": "Broken", "status": "True"}]}]);
    k.create_policy(s.policy(older, &[], json!({
        "taints": [{"key": "e2e.nodetaint.io/conflict", "value": "old", "effect": "NoSchedule"}],
        "matchers": matcher,
    }))).await?;
    expect_node(
        k,
        &n,
        &["e2e.nodetaint.io/conflict=old:NoSchedule"],
        &owned(&[(SHARED_ID, older)]),
    )
    .await?;
    // creationTimestamp has whole seconds: make sure the second one is later.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    k.create_policy(s.policy(
        newer,
        &[],
        json!({
            "taints": [
                {"key": "e2e.nodetaint.io/conflict", "value": "new", "effect": "NoSchedule"},
                {"key": "e2e.nodetaint.io/conflict-own", "effect": "NoSchedule"},
            ],
            "matchers": matcher,
        }),
    ))
    .await?;
    let want = [
        "e2e.nodetaint.io/conflict=old:NoSchedule",
        "e2e.nodetaint.io/conflict-own:NoSchedule",
    ];
    expect_node(k, &n, &want, &owned(&[(SHARED_ID, older), (OWN_ID, newer)])).await?;
    let v = eventually(format!("Conflict status on {newer}"), async || {
        let v = k.policy_view(newer).await?;
        ensure!(
            v.ready_status() == "False"
                && v.reason() == "Conflict"
                && v.observed_generation == Some(v.generation),
            "Ready={} reason={} observedGeneration={:?}",
            v.ready_status(),
            v.reason(),
            v.observed_generation
        );
        Ok(v)
    })
    .await?;
    ensure!(
        v.message().contains(SHARED_ID) && v.message().contains(older),
        "the Conflict message should name the taint and the older policy: {:?}",
        v.message()
    );
    expect_status(k, older, "True", "Reconciled", (1, 1, 0)).await?;
    let e = k
        .wait_event("TaintPolicy", newer, "Conflict", &[older])
        .await?;
    ensure_eq!(
        e.type_.as_deref(),
        Some("Warning"),
        "type of the Conflict event"
    );
    // Steady: the newer policy never touches the shared taint.
    tokio::time::sleep(Duration::from_millis(500)).await;
    check_node(k, &n, &want, &owned(&[(SHARED_ID, older), (OWN_ID, newer)])).await?;

    // The older policy goes away: the newer one owns the taint, with its value.
    k.delete_policy(older).await?;
    k.wait_policy_gone(older).await?;
    let want = [
        "e2e.nodetaint.io/conflict=new:NoSchedule",
        "e2e.nodetaint.io/conflict-own:NoSchedule",
    ];
    expect_node(k, &n, &want, &owned(&[(SHARED_ID, newer), (OWN_ID, newer)])).await?;
    expect_status(k, newer, "True", "Reconciled", (1, 1, 0)).await?;

    k.delete_policy(newer).await?;
    k.wait_policy_gone(newer).await?;
    let node = k.node(&n).await?;
    node_is(&node, &[], &owned(&[]))?;
    if !taints(&node).is_empty() {
        bail!("taints left on {n}");
    }
    Ok(())
}
