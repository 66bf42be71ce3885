//! Scenarios 11 and 12: input only the operator can judge (regex syntax) and input
//! the API server itself refuses.

use std::time::Duration;

use kube::ResourceExt;
use serde_json::{Value, json};
use taint_operator_e2e::{
    Cond, Harness, Result, always_for, bail, ensure, eventually,
    k8s::{api_error, taint_strs},
};

use crate::common::{Scn, check_node, expect_node, expect_status, owned};

/// An invalid regex: Ready=False InvalidSpec naming the field, a Warning event, and
/// no node touched. Fixed, the policy works; broken again, it freezes what it owns.
pub async fn invalid_regex(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("invalid");
    let policy = "e2e-invalid";
    const TAINT: &str = "e2e.nodetaint.io/invalid:NoSchedule";
    let n = s.node("1");
    k.create_node(&n, &[s.label()]).await?;
    k.set_conditions(&n, &[Cond::now("Broken", "True", "Test")])
        .await?;
    let rv = k.node(&n).await?.resource_version();

    k.create_policy(s.policy(
        policy,
        &[],
        json!({
            "taints": [{"key": "e2e.nodetaint.io/invalid", "effect": "NoSchedule"}],
            "matchers": [{"conditions": [{"type": "Broken", "status": "(True"}]}],
        }),
    ))
    .await?;
    let field = "spec.matchers[0].conditions[0].status";
    expect_invalid(h, policy, field).await?;
    let e = k
        .wait_event("TaintPolicy", policy, "InvalidSpec", &[field])
        .await?;
    ensure!(
        e.type_.as_deref() == Some("Warning"),
        "InvalidSpec event type {:?}",
        e.type_
    );
    always_for(
        format!("node {n} to stay untouched"),
        Duration::from_secs(2),
        async || {
            let node = check_node(k, &n, &[], &owned(&[])).await?;
            ensure!(
                node.resource_version() == rv,
                "node {n} was written (resourceVersion {:?} -> {:?})",
                rv,
                node.resource_version()
            );
            ensure!(
                node.annotations().is_empty(),
                "annotations appeared: {:?}",
                node.annotations()
            );
            Ok(())
        },
    )
    .await?;

    // Fixed: it taints.
    k.patch_policy(
        policy,
        json!({"spec": {"matchers": [{"conditions": [{"type": "Broken", "status": "True"}]}]}}),
    )
    .await?;
    expect_node(k, &n, &[TAINT], &owned(&[(TAINT, policy)])).await?;
    expect_status(k, policy, "True", "Reconciled", (1, 1, 0)).await?;

    // Broken again (reason regex), and the condition clears: an invalid policy changes
    // no node, so its taint stays where it is.
    k.patch_policy(policy, json!({"spec": {"matchers": [{"conditions": [{"type": "Broken", "status": "True", "reason": "[Test"}]}]}})).await?;
    expect_invalid(h, policy, "spec.matchers[0].conditions[0].reason").await?;
    k.set_conditions(&n, &[Cond::now("Broken", "False", "Test")])
        .await?;
    always_for(
        format!("node {n} to keep the taint of the invalid policy"),
        Duration::from_secs(2),
        async || {
            check_node(k, &n, &[TAINT], &owned(&[(TAINT, policy)]))
                .await
                .map(|_| ())
        },
    )
    .await?;

    k.delete_policy(policy).await?;
    k.wait_policy_gone(policy).await?;
    expect_node(k, &n, &[], &owned(&[])).await?;
    Ok(())
}

async fn expect_invalid(h: &Harness, policy: &str, field: &str) -> Result {
    let v = eventually(
        format!("{policy} to report InvalidSpec for {field}"),
        async || {
            let v = h.k.policy_view(policy).await?;
            ensure!(
                v.ready_status() == "False"
                    && v.reason() == "InvalidSpec"
                    && v.observed_generation == Some(v.generation)
                    && v.message().contains(field),
                "Ready={} reason={} observedGeneration={:?}/{} message={:?}",
                v.ready_status(),
                v.reason(),
                v.observed_generation,
                v.generation,
                v.message()
            );
            Ok(v)
        },
    )
    .await?;
    ensure!(
        v.tainted == 0,
        "an invalid policy reports {} tainted nodes",
        v.tainted
    );
    Ok(())
}

/// Objects the API server must refuse with 422, naming the field.
pub async fn refused(h: &Harness) -> Result {
    let k = &h.k;
    let s = Scn("refused");
    let matchers = json!([{"conditions": [{"type": "Broken", "status": "True"}]}]);
    let taint = json!([{"key": "e2e.nodetaint.io/refused", "effect": "NoSchedule"}]);
    let cases: Vec<(&str, Value, &[&str])> = vec![
        (
            "bad effect",
            json!({"taints": [{"key": "e2e.nodetaint.io/refused", "effect": "Sometimes"}], "matchers": matchers}),
            &["spec.taints[0].effect", "Sometimes"],
        ),
        (
            "duplicate taint key+effect",
            json!({"taints": [
                {"key": "e2e.nodetaint.io/dup", "value": "a", "effect": "NoSchedule"},
                {"key": "e2e.nodetaint.io/dup", "value": "b", "effect": "NoSchedule"},
            ], "matchers": matchers}),
            &["spec.taints", "unique by key+effect"],
        ),
        (
            "no matchers and no readiness",
            json!({"taints": taint}),
            &["spec", "at least one of spec.matchers or spec.readiness"],
        ),
        (
            "no taints",
            json!({"taints": [], "matchers": matchers}),
            &["spec.taints"],
        ),
        (
            "bad for duration",
            json!({"taints": taint, "matchers": [{"conditions": [{"type": "Broken", "status": "True", "for": "3 seconds"}]}]}),
            &["spec.matchers[0].conditions[0].for"],
        ),
        (
            "for longer than Go's durations",
            json!({"taints": taint, "matchers": [{"conditions": [{"type": "Broken", "status": "True", "for": "99999999999h"}]}]}),
            &["spec.matchers[0].conditions[0].for", "at most 2562047h"],
        ),
        (
            "maxTaintedNodes over 100%",
            json!({"taints": taint, "matchers": matchers, "maxTaintedNodes": "150%"}),
            &["spec.maxTaintedNodes"],
        ),
        (
            "BootstrapOnly without readiness",
            json!({"taints": taint, "matchers": matchers, "mode": "BootstrapOnly"}),
            &["spec", "spec.readiness is required"],
        ),
        (
            "bad taint key",
            json!({"taints": [{"key": "not a key!", "effect": "NoSchedule"}], "matchers": matchers}),
            &["spec.taints[0].key"],
        ),
    ];
    let mut failures = vec![];
    for (i, (what, spec, wants)) in cases.into_iter().enumerate() {
        let name = format!("e2e-refused-{i}");
        let object =
            json!({"metadata": {"name": name, "labels": {s.label().0: s.label().1}}, "spec": spec});
        match k.create_policy(object).await {
            Ok(_) => {
                failures.push(format!("{what}: the API server accepted it"));
                k.delete_policy(&name).await?;
            }
            Err(e) => match api_error(&e) {
                Some(st) if st.code == 422 && wants.iter().all(|w| st.message.contains(w)) => {
                    println!("refused ({what}): {}", st.message);
                }
                Some(st) => failures.push(format!(
                    "{what}: got {} {:?}, want 422 naming {wants:?}",
                    st.code, st.message
                )),
                None => failures.push(format!("{what}: {e}")),
            },
        }
        if k.policies().get_opt(&name).await?.is_some() {
            failures.push(format!("{what}: the policy exists"));
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    // Nothing was created, so nothing could taint.
    for n in k.nodes().list(&Default::default()).await? {
        let ts = taint_strs(&n);
        ensure!(
            !ts.iter().any(|t| t.starts_with("e2e.nodetaint.io/refused")
                || t.starts_with("e2e.nodetaint.io/dup")),
            "node {} carries {ts:?}",
            n.name_any()
        );
    }
    Ok(())
}
