//! taint-operator: keeps node taints right, declaratively.
//!
//! The decision core (`selector`, `policy`, `policy_set`, `decision`, `node_plan`,
//! `cluster_plan`) is pure: it reads views of nodes and pods and returns plans.
//! `plan_cmd` is the no-cluster CLI around it.

pub mod api_metrics;
pub mod cap_ledger;
pub mod cluster;
pub mod cluster_plan;
pub mod context;
pub mod decision;
pub mod duration;
pub mod error;
pub mod http;
pub mod labels;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod node_cache;
pub mod node_events;
pub mod node_plan;
pub mod node_queue;
pub mod node_reconciler;
pub mod node_writer;
pub mod ownership;
pub mod plan_cmd;
pub mod pod_cache;
pub mod pod_watch;
pub mod policy;
pub mod policy_reconciler;
pub mod policy_set;
pub mod policy_status;
pub mod run;
pub mod selector;
pub mod short_str;
pub mod slim;
pub mod telemetry;
pub mod thin_str;
pub mod webhook;
