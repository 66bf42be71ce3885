//! The admission webhook server: TLS (certificates reloaded when they rotate), one
//! route per webhook, and the request metrics. What each webhook answers is the
//! `admission` room's: `/mutate-node` taints a Node in its CREATE,
//! `/validate-taintpolicy` refuses a TaintPolicy the operator could not apply and
//! warns about its impact.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use axum::{Json, Router, extract::State, routing::post};
use serde_json::Value;
use taint_operator_crd::TaintPolicy;

use super::tls;
use crate::{
    admission::{self, Answer, policy::Cluster},
    controller::context::Context,
    telemetry::metrics::{WebhookLabel, WebhookLabels},
};
use engine::cluster::NodeView;

#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub addr: SocketAddr,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// Counts an answered review and how long it took.
fn counted(
    ctx: &Context,
    webhook: &'static str,
    started: std::time::Instant,
    answer: Answer,
) -> Json<Value> {
    ctx.metrics
        .webhook_requests
        .get_or_create(&WebhookLabels {
            webhook,
            operation: answer.operation,
            outcome: answer.outcome.as_str(),
        })
        .inc();
    ctx.metrics
        .webhook_duration
        .get_or_create(&WebhookLabel { webhook })
        .observe(started.elapsed().as_secs_f64());
    Json(answer.body)
}

/// A TaintPolicy review against the caches as they are: conflicts once the policy
/// cache has listed, the impact once every cache has.
fn review_policy(ctx: &Context, body: Value) -> Answer {
    let policies: Option<Vec<TaintPolicy>> = ctx.caches.policies_listed().then(|| {
        ctx.caches
            .policies()
            .state()
            .iter()
            .map(|p| (**p).clone())
            .collect()
    });
    let synced = ctx.caches.synced();
    let cached = synced.then(|| ctx.caches.nodes().state());
    let views: Option<Vec<&NodeView>> =
        cached.as_ref().map(|c| c.iter().map(|n| &n.view).collect());
    let pods = ctx.caches.pods();
    let cluster = Cluster {
        policies: policies.as_deref(),
        nodes: views.as_deref().map(|v| (v, pods.index())),
        now: (ctx.clock)(),
    };
    admission::policy::review(body, &cluster)
}

/// The two webhooks the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    /// `/mutate-node`: Node CREATE.
    Node,
    /// `/validate-taintpolicy`: TaintPolicy CREATE and UPDATE.
    TaintPolicy,
}

/// Answers one review for `webhook`, counted in the request metrics.
pub fn answer(ctx: &Context, webhook: Webhook, body: Value) -> Value {
    let started = std::time::Instant::now();
    let (label, answer) = match webhook {
        Webhook::Node => (
            "node",
            admission::node::review(ctx.caches.policies_listed(), &ctx.caches.policy_set(), body),
        ),
        Webhook::TaintPolicy => ("taintpolicy", review_policy(ctx, body)),
    };
    counted(ctx, label, started, answer).0
}

pub fn router(ctx: Arc<Context>) -> Router {
    Router::new()
        .route(
            "/mutate-node",
            post(
                |State(ctx): State<Arc<Context>>, Json(body): Json<Value>| async move {
                    Json(answer(&ctx, Webhook::Node, body))
                },
            ),
        )
        .route(
            "/validate-taintpolicy",
            post(
                |State(ctx): State<Arc<Context>>, Json(body): Json<Value>| async move {
                    Json(answer(&ctx, Webhook::TaintPolicy, body))
                },
            ),
        )
        .with_state(ctx)
}

/// Starts the TLS server; its certificate is reloaded when its files change.
pub async fn start(
    cfg: &WebhookConfig,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let tls = tls::from_files(&cfg.cert_file, &cfg.key_file)
        .await
        .map_err(|e| e.to_string())?;
    let listener = super::http::bind(cfg.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.addr))?;
    tokio::spawn(super::http::serve_tls(listener, tls, router(ctx), shutdown));
    tracing::info!(addr = %cfg.addr, "webhook serving");
    Ok(())
}
