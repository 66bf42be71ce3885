//! `node.kubernetes.io/out-of-service` only on a node that is down.
//!
//! The taint makes Kubernetes force-delete the node's pods and force-detach their
//! volumes (non-graceful node shutdown). On a node that still runs those pods, their
//! filesystems are detached while they write: Kubernetes allows the taint only on a
//! node that is shut down. So while the kubelet reports the node `Ready=True`, no
//! policy puts it on (any value, any effect, a drain's stand-in too); the node waits
//! until the node lifecycle controller marks it `Unknown` or `False`.

use crate::{cluster::NodeView, policy_set::PolicySet};

/// Kubernetes' taint for a node that is shut down for good: its pods are deleted
/// and their volumes detached at once.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// Why a node waits for the taint, as plans, events and `explain` say it.
pub const WAITING: &str = "node.kubernetes.io/out-of-service waits until the node is down: its kubelet reports Ready=True, and on a running node the taint would force-detach volumes in use";

/// True when a taint with `key` must not be added to `node` now.
pub fn holds_back(key: &str, node: &NodeView) -> bool {
    key == OUT_OF_SERVICE_TAINT && node.reports_ready()
}

/// True when policy `i` declares an out-of-service taint that `node` does not carry
/// and may not get yet: it runs.
pub fn awaits_shutdown(set: &PolicySet, i: usize, node: &NodeView) -> bool {
    node.reports_ready()
        && set.policies[i].taints.iter().any(|t| {
            t.key == OUT_OF_SERVICE_TAINT
                && !node
                    .taints
                    .iter()
                    .any(|n| n.key == t.key && n.effect == t.effect.as_str())
        })
}

/// True when policy `i` declares the taint at all.
pub fn declared_by(set: &PolicySet, i: usize) -> bool {
    set.policies[i]
        .taints
        .iter()
        .any(|t| t.key == OUT_OF_SERVICE_TAINT)
}
