//! taint-operator: keeps node taints right, declaratively.
//!
//! The decision core (`selector`, `policy`, `policy_set`, `decision`, `node_plan`,
//! `cluster_plan`) is pure: it reads views of nodes and pods and returns plans.
//! `plan_cmd` is the no-cluster CLI around it.

pub mod cluster;
pub mod cluster_plan;
pub mod decision;
pub mod duration;
pub mod node_plan;
pub mod ownership;
pub mod plan_cmd;
pub mod policy;
pub mod policy_set;
pub mod selector;
