//! What every replica serves, leader or not: `/metrics`, `/healthz`, `/readyz`
//! (`http`, with `/metrics` optionally behind `metrics_auth`), the admission
//! webhooks (`webhook`), and the certificates of both (`tls`).

pub mod http;
pub mod metrics_auth;
pub mod tls;
pub mod webhook;
