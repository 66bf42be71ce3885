//! taint-operator: keeps node taints right, declaratively.
//!
//! The decisions are made in the `taint-operator-engine` crate (imported here as
//! `engine`), which has no API client. This crate is the shell around it, in
//! layers; each imports only from the layers below it (a test checks this):
//!
//! | layer | modules | job |
//! |---|---|---|
//! | commands | `run`, `plan`, `explain`, `live`, `crd_adopt` (and `crd` in `main`) | the CLI's subcommands; `live` reads the cluster once for `explain` and `plan --live`; `crd_adopt` hands the CRD to a Helm release |
//! | serving, leadership | `serve`, `leader` | HTTP endpoints and the webhook server; the Lease |
//! | admission | `admission` | what the webhooks answer: Node CREATE taints, TaintPolicy refusals and warnings |
//! | controller | `controller` | queues, reconcilers, the node writer, events, status, the cap ledger |
//! | drains | `drain` | the pace and eviction retries a drain remembers; listing and evicting a node's pods |
//! | caches | `cache` | what the watches keep of nodes and pods, and how they decode |
//! | leaves | `telemetry`, `memory`, `jitter`, `api_connections`, `write_fence` | logs and metrics; handing freed memory back; random spread on waits; the HTTP client under kube's; until when this replica may write |
//! | engine | the `engine` crate | the pure decision core |

pub mod admission;
pub mod api_connections;
pub mod cache;
pub mod controller;
pub mod crd_adopt;
pub mod drain;
pub mod explain;
pub mod jitter;
pub mod leader;
pub mod live;
pub mod memory;
pub mod plan;
pub mod run;
pub mod serve;
pub mod telemetry;
pub mod write_fence;
