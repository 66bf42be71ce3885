//! The API server's audit log, the one record of who wrote what that no replica
//! can shade: each replica speaks as a user of its own, and the audit policy
//! ([`policy`]) logs their writes of Nodes and Pods, and every write of the Lease
//! with the stored object, so the checker knows who held it from when.

use std::{io::SeekFrom, path::PathBuf, time::Duration};

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncSeekExt},
    sync::mpsc::UnboundedSender,
};

use crate::record::{Event, LeaseWrite, Micros, Write};

/// The audit Policy: replicas' node and pod writes at Metadata, the Lease's
/// writes with the stored object, nothing else.
pub fn policy(replica_users: &[String], lease_namespace: &str) -> String {
    let users = replica_users
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: RequestResponse
  verbs: ["create", "update", "patch"]
  resources: [{{group: "coordination.k8s.io", resources: ["leases"]}}]
  namespaces: ["{lease_namespace}"]
- level: Metadata
  users: [{users}]
  verbs: ["create", "update", "patch", "delete"]
  resources: [{{group: "", resources: ["nodes", "pods", "pods/eviction"]}}]
- level: None
"#
    )
}

fn micros(v: &Value) -> Option<Micros> {
    let t: Timestamp = v.as_str()?.parse().ok()?;
    Some(t.as_microsecond() as Micros)
}

/// One line of the log as a checker event (`None` for what the checker ignores).
pub fn parse_line(line: &str, lease_name: &str) -> Option<Event> {
    let e: Value = serde_json::from_str(line).ok()?;
    if e["stage"] != "ResponseComplete" {
        return None;
    }
    let o = &e["objectRef"];
    let user = e["user"]["username"].as_str()?.to_string();
    let code = e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16;
    let resource = o["resource"].as_str().unwrap_or_default();
    if resource == "leases" {
        if o["name"] != lease_name {
            return None;
        }
        let spec = &e["responseObject"]["spec"];
        return Some(Event::Lease(LeaseWrite {
            at: micros(&e["stageTimestamp"])?,
            user,
            holder: spec["holderIdentity"]
                .as_str()
                .filter(|h| !h.is_empty())
                .map(Into::into),
            duration_s: spec["leaseDurationSeconds"].as_i64().unwrap_or(0),
            code,
        }));
    }
    Some(Event::Write(Write {
        at: micros(&e["requestReceivedTimestamp"])?,
        user,
        verb: e["verb"].as_str().unwrap_or_default().into(),
        resource: resource.into(),
        subresource: o["subresource"].as_str().unwrap_or_default().into(),
        namespace: o["namespace"].as_str().unwrap_or_default().into(),
        name: o["name"].as_str().unwrap_or_default().into(),
        code,
    }))
}

/// Follows the log file (the API server appends to it across restarts) and sends
/// each entry on.
pub async fn follow(path: PathBuf, lease_name: String, tx: UnboundedSender<Event>) {
    let mut offset = 0u64;
    let mut partial = String::new();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Ok(mut f) = tokio::fs::File::open(&path).await else {
            continue;
        };
        if f.seek(SeekFrom::Start(offset)).await.is_err() {
            continue;
        }
        let mut buf = Vec::new();
        let Ok(n) = f.read_to_end(&mut buf).await else {
            continue;
        };
        offset += n as u64;
        partial.push_str(&String::from_utf8_lossy(&buf));
        while let Some(end) = partial.find('\n') {
            let line: String = partial.drain(..=end).collect();
            if let Some(e) = parse_line(line.trim_end(), &lease_name) {
                let _ = tx.send(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_patch_and_a_lease_renewal_are_read_from_the_log() {
        let patch = r#"{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"patch","user":{"username":"chaos-replica-1","groups":["taint-operator-chaos"]},"objectRef":{"resource":"nodes","name":"chaos-00001","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-11-29T09:00:00.250000Z","stageTimestamp":"2026-11-29T09:00:00.260000Z"}"#;
        let Some(Event::Write(w)) = parse_line(patch, "taint-operator") else {
            panic!("not a write");
        };
        assert_eq!(
            (
                w.user.as_str(),
                w.verb.as_str(),
                w.resource.as_str(),
                w.name.as_str(),
                w.code
            ),
            ("chaos-replica-1", "patch", "nodes", "chaos-00001", 200)
        );
        assert_eq!(w.at % 1_000_000, 250_000);

        let lease = r#"{"stage":"ResponseComplete","verb":"update","user":{"username":"chaos-replica-0"},"objectRef":{"resource":"leases","namespace":"taint-operator","name":"taint-operator","apiGroup":"coordination.k8s.io"},"responseStatus":{"code":200},"responseObject":{"spec":{"holderIdentity":"chaos-replica-0","leaseDurationSeconds":15}},"requestReceivedTimestamp":"2026-11-29T09:00:01.000000Z","stageTimestamp":"2026-11-29T09:00:01.004000Z"}"#;
        let Some(Event::Lease(l)) = parse_line(lease, "taint-operator") else {
            panic!("not a lease write");
        };
        assert_eq!(
            (l.holder.as_deref(), l.duration_s, l.at % 1_000_000),
            (Some("chaos-replica-0"), 15, 4_000)
        );
        assert!(parse_line(lease, "another-lease").is_none());

        let eviction = r#"{"stage":"ResponseComplete","verb":"create","user":{"username":"chaos-replica-2"},"objectRef":{"resource":"pods","subresource":"eviction","namespace":"chaos-apps","name":"web-0-3"},"responseStatus":{"code":429},"requestReceivedTimestamp":"2026-11-29T09:00:02Z","stageTimestamp":"2026-11-29T09:00:02Z"}"#;
        let Some(Event::Write(w)) = parse_line(eviction, "x") else {
            panic!("not a write");
        };
        assert_eq!(
            (w.subresource.as_str(), w.code, w.succeeded()),
            ("eviction", 429, false)
        );
        assert!(parse_line("not json", "x").is_none());
    }
}
