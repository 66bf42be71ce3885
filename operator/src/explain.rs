//! `taint-operator explain NODE`: why a node carries the taints it does, read from
//! the cluster in KUBECONFIG. The engine's `explain_node` does the explaining; this
//! reads the cluster and prints.

use std::fmt::Write as _;

use k8s_openapi::jiff::Timestamp;

use crate::{
    live::{Live, LiveError},
    plan::{Output, columns},
};
use engine::{
    explain::{Explanation, PolicyExplanation, explain_node},
    node_plan::UnknownPolicies,
    policy_set::PolicySet,
};

/// Reads the cluster and explains `node` at `now`.
pub async fn run(node: &str, output: Output, now: Timestamp) -> Result<String, LiveError> {
    let live = Live::connect().await?;
    live.node_exists(node).await?;
    let policies = live.policies().await?;
    let set = PolicySet::from_resources(&policies);
    let pods = live.pods(&set).await?;
    let nodes = live.nodes().await?;
    let n = nodes
        .iter()
        .position(|v| v.name == node)
        // Deleted between the get and the list.
        .ok_or_else(|| LiveError::NodeNotFound(node.to_string()))?;
    let in_the_way = live
        .pods_in_the_way(&set, [&nodes[n]])
        .await?
        .into_iter()
        .map(|((_, policy), pods)| (policy, pods))
        .collect();
    // The controller knows every policy, so it removes what a gone policy owned.
    let explanation = explain_node(
        &set,
        &nodes,
        n,
        &pods,
        now,
        UnknownPolicies::Remove,
        &in_the_way,
    );
    Ok(render(&explanation, output))
}

pub fn render(e: &Explanation, output: Output) -> String {
    match output {
        Output::Json => serde_json::to_string_pretty(e).expect("the explanation serializes") + "\n",
        Output::Table => table(e),
    }
}

fn table(e: &Explanation) -> String {
    let mut out = format!("Node {} at {}\n\n", e.node, e.at);
    if e.taints.is_empty() {
        out.push_str("No taints.\n");
    } else {
        let mut rows = vec![["TAINT".to_string(), "OWNER".into()]];
        for t in &e.taints {
            let taint = engine::explain::taint_text(&t.key, t.value.as_deref(), &t.effect);
            let owner = match &t.owner {
                Some(p) => p.clone(),
                None => "- (not the operator's; never touched)".into(),
            };
            rows.push([taint, owner]);
        }
        out.push_str(&columns(&rows));
    }
    if e.policies.is_empty() {
        out.push_str("\nNo TaintPolicy in the cluster.\n");
    }
    for p in &e.policies {
        out.push('\n');
        policy(&mut out, p);
    }
    out.push('\n');
    if e.changes.is_empty() {
        out.push_str("Next write: none, the node is as the policies want it.\n");
    } else {
        out.push_str("Next write:\n");
        for c in &e.changes {
            let _ = writeln!(
                out,
                "  {} {} ({}: {})",
                c.action.as_str(),
                c.taint,
                c.policy,
                c.reason
            );
        }
    }
    out
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn policy(out: &mut String, p: &PolicyExplanation) {
    let mut flags = vec![p.mode.clone()];
    if p.dry_run {
        flags.push("dry run".into());
    }
    if p.suspended {
        flags.push("suspended".into());
    }
    if p.deleting {
        flags.push("being deleted".into());
    }
    let _ = writeln!(out, "Policy {} ({})", p.name, flags.join(", "));
    let line = |out: &mut String, label: &str, text: &str| {
        let _ = writeln!(out, "  {label:<11}{text}");
    };
    if let Some(invalid) = &p.invalid {
        line(out, "invalid:", invalid);
    }
    let selected = if p.selected {
        "yes".to_string()
    } else if p.not_selected_because.is_empty() {
        "no".to_string()
    } else {
        format!("no: {}", p.not_selected_because.join("; "))
    };
    line(out, "selected:", &selected);
    line(out, "taints:", &p.taints.join(", "));
    line(out, "wants:", yes(p.wants_taint));
    line(out, "action:", p.action.as_str());
    line(out, "why:", &p.reasons.join("; "));
    for (i, m) in p.matchers.iter().enumerate() {
        let _ = writeln!(
            out,
            "  matcher {i}: {}",
            if m.matches {
                "matches"
            } else {
                "does not match"
            }
        );
        for c in &m.conditions {
            let want = match &c.want_reason {
                Some(r) => format!("status {} reason {}", c.want_status, r),
                None => format!("status {}", c.want_status),
            };
            let mut have = match (&c.status, &c.reason) {
                (None, _) => "no such condition".to_string(),
                (Some(s), Some(r)) => format!("{s} ({r})"),
                (Some(s), None) => s.clone(),
            };
            if let Some(at) = &c.stale_since {
                let _ = write!(have, ", reads Unknown: stale since {at}");
            }
            let window = match (&c.for_, &c.matched_for, &c.taint_at) {
                (Some(f), Some(m), Some(at)) => format!("; matched for {m} of {f}, taint at {at}"),
                (Some(f), _, _) => format!("; for {f}"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "    {} want {want}: {have}: {}{window}",
                c.type_, c.state
            );
        }
    }
    if let Some(r) = &p.readiness {
        let _ = writeln!(
            out,
            "  readiness: {}",
            if r.ready { "ready" } else { "not ready" }
        );
        for c in &r.conditions {
            let mut have = c
                .status
                .as_deref()
                .unwrap_or("no such condition")
                .to_string();
            if let Some(at) = &c.stale_since {
                let _ = write!(have, " (stale since {at})");
            }
            let _ = writeln!(
                out,
                "    condition {} want {}: {have}: {}",
                c.type_,
                c.want_status,
                if c.ready { "ok" } else { "not ready" }
            );
        }
        for cp in &r.critical_pods {
            let pods = if cp.pods.is_empty() {
                "no pod on the node".to_string()
            } else {
                cp.pods
                    .iter()
                    .map(|p| format!("{} {}", p.name, if p.ready { "Ready" } else { "not Ready" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                out,
                "    critical pod {} ({}, {}): {pods}: {}",
                cp.name,
                cp.namespace,
                cp.selector,
                if cp.ready { "ok" } else { "not ready" }
            );
        }
    }
    let owns = if p.owns.is_empty() {
        "nothing on this node".to_string()
    } else {
        p.owns.join(", ")
    };
    line(out, "owns:", &owns);
    let conflict = if p.conflicts.is_empty() {
        "none".to_string()
    } else {
        p.conflicts.join("; ")
    };
    line(out, "conflict:", &conflict);
    if let Some(cap) = &p.cap {
        line(
            out,
            "cap:",
            &format!(
                "maxTaintedNodes {} = {} of {} selected nodes, {} tainted{}",
                cap.max_tainted_nodes,
                cap.limit,
                cap.selected_nodes,
                cap.tainted_nodes,
                if cap.held {
                    "; this node is held back"
                } else {
                    ""
                }
            ),
        );
    }
    if let Some(at) = &p.bootstrap_completed_at {
        line(out, "bootstrap:", &format!("completed at {at}"));
    }
    if let Some(d) = &p.drain {
        let mut text = d.step.to_string();
        if !d.zone.is_empty() {
            let _ = write!(text, " (zone {})", d.zone);
        }
        if let Some(at) = &d.started_at {
            let _ = write!(text, ", started {at}");
        }
        if let Some(at) = &d.timeout_at {
            let _ = write!(text, ", drainTimeout at {at}");
        }
        if let Some(w) = &d.waiting_for {
            let _ = write!(text, "; waits for {w}");
        }
        line(out, "drain:", &text);
        if let Some(pods) = &d.pods_in_the_way
            && !pods.is_empty()
        {
            line(out, "in the way:", &pods.join(", "));
        }
    }
}
