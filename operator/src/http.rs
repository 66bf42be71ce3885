//! `/metrics`, `/healthz` and `/readyz`.

use std::{future::Future, net::SocketAddr};

use axum::{Router, http::StatusCode, routing::get};
use tokio::sync::watch;

use crate::metrics::Metrics;

pub fn router(metrics: Metrics, ready: watch::Receiver<bool>) -> Router {
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
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = *ready.borrow();
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
