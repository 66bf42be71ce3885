//! `/metrics`, `/healthz` and `/readyz`: plain HTTP, or HTTPS with `/metrics`
//! behind the API server's authentication and authorization (`metrics_auth`).

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use crate::telemetry::metrics::Metrics;
use axum::{Router, http::StatusCode, middleware, routing::get};
use axum_server::tls_rustls::RustlsConfig;

use super::metrics_auth::{MetricsAuth, require_access};

/// A check behind /healthz: `Err` says why the replica should be restarted.
pub type Liveness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// `ready` answers /readyz. Every replica, leader or not, serves the webhook from its
/// policy cache, so it is ready once that cache has listed. `live` answers /healthz.
/// With `auth`, /metrics answers only callers the API server allows `get` on it;
/// the probes stay open (the kubelet sends no token, and they tell nothing).
pub fn router(
    metrics: Metrics,
    ready: Arc<dyn Fn() -> bool + Send + Sync>,
    live: Liveness,
    auth: Option<Arc<MetricsAuth>>,
) -> Router {
    let mut router = Router::new().route(
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
    );
    if let Some(auth) = auth {
        // route_layer: only the routes above are behind it.
        router = router.route_layer(middleware::from_fn_with_state(auth, require_access));
    }
    router
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

/// [`serve`] over TLS.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    tls: RustlsConfig,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = axum_server::Handle::new();
    let server = axum_server::from_tcp_rustls(listener.into_std()?, tls)?.handle(handle.clone());
    tokio::spawn(async move {
        shutdown.await;
        handle.graceful_shutdown(Some(Duration::from_secs(5)));
    });
    server.serve(router.into_make_service()).await
}

pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
