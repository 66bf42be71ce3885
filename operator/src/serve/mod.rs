//! What every replica serves, leader or not: `/metrics`, `/healthz`, `/readyz`
//! (`http`) and the Node CREATE admission webhook (`webhook`).

pub mod http;
pub mod webhook;
