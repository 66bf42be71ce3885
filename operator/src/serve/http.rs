//! `/metrics`, `/healthz` and `/readyz`.

use std::{future::Future, net::SocketAddr, sync::Arc};

use crate::telemetry::metrics::Metrics;
use axum::{Router, http::StatusCode, routing::get};

/// A check behind /healthz: `Err` says why the replica should be restarted.
pub type Liveness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// `ready` answers /readyz. Every replica, leader or not, serves the webhook from its
/// policy cache, so it is ready once that cache has listed. `live` answers /healthz.
pub fn router(
    metrics: Metrics,
    ready: Arc<dyn Fn() -> bool + Send + Sync>,
    live: Liveness,
) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(
                            "content-type",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.encode(),
                    )
                }
            }),
        )
        .route(
            "/healthz",
            get(move || {
                let live = live();
                async move {
                    match live {
                        Ok(()) => (StatusCode::OK, "ok".to_string()),
                        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
                    }
                }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let ready = ready();
                async move {
                    if ready {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet")
                    }
                }
            }),
        )
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
