//! The pure decision core of taint-operator.
//!
//! Policies and slim views of nodes and pods go in; plans come out. Nothing here
//! reads the cluster, waits, or writes: the controller (`taint-operator run`) and
//! the `plan` command call the same functions, so a dry run and the operator
//! decide alike. The crate has no API client and no async runtime among its
//! dependencies, so that stays true.
//!
//! Reading order: `selector` (which nodes a policy selects) → `policy` (one
//! compiled TaintPolicy) → `policy_set` (all of them, conflicts resolved) →
//! `decision` (what one policy wants on one node, and why) → `node_plan` (the
//! taints and annotations one node should end with) → `cluster_plan` (every node,
//! with the `maxTaintedNodes` cap and per-policy summaries). `drain` is how a
//! policy with `spec.eviction` puts its NoExecute taints on in steps, and
//! `out_of_service` keeps Kubernetes' out-of-service taint off running nodes;
//! `node_decision` is the controller's plan of one node from its ledgers' answers,
//! and `wake` says when that node is looked at again.
//!
//! `admission` says whether a policy is refused and what warnings it gets (the
//! validating webhook and `plan` ask it alike).
//!
//! `cluster` holds the node and pod views the rules read, `ownership` the two node
//! annotations that record what the operator added, and `labels`, `short_str`,
//! `thin_str` the compact strings that keep those views small at 5,000 nodes.

pub mod admission;
pub mod cluster;
pub mod cluster_plan;
pub mod decision;
pub mod drain;
pub mod drain_plan;
pub mod duration;
pub mod eviction_rules;
pub mod explain;
pub mod invalid_spec;
pub mod labels;
pub mod node_decision;
pub mod node_plan;
pub mod out_of_service;
pub mod ownership;
pub mod pace;
pub mod policy;
pub mod policy_set;
pub mod selector;
pub mod short_str;
pub mod taints;
pub mod thin_str;
pub mod wake;
