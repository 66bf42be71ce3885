//! Logs and metrics. A leaf: it imports nothing else of the crate, so every layer
//! may record into it.

pub mod api_metrics;
pub mod logs;
pub mod metrics;
