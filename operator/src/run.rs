//! `taint-operator run`: wires caches, controllers, the status writer, leader
//! election and the HTTP endpoints together.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use futures::{FutureExt, StreamExt, future};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, Config,
    api::ListParams,
    runtime::{Controller, reflector, watcher},
};
use taint_operator_crd::TaintPolicy;
use tokio::sync::{mpsc, watch};
use tower::limit::RateLimitLayer;
use tracing::instrument::WithSubscriber;

use crate::{
    cache::{
        initial_list::InitialLists, node_cache::WatchedNode, node_store::NodeStore,
        pod_watch::PodWatches,
    },
    controller::{
        context::{Context, ContextOptions},
        error::Error as ReconcileError,
        node_events::EventPace,
        node_queue::NodeQueue,
        node_reconciler, policy_reconciler, policy_status, resync,
        watches::{drive_nodes, feed_node_queue, sync_gate, watch_policies},
    },
    leader::{LeaderElector, LeaseHealth, Timing},
    serve::{
        http,
        metrics_auth::{CacheTtl, MetricsAuth},
        tls::{self, TlsError},
    },
    telemetry::{
        api_metrics::ApiMetricsLayer,
        logs::{describe, one_line},
        metrics::Metrics,
    },
    write_fence::WriteFence,
};

/// How long a stopping replica waits for its queued node events to go out; well
/// within the chart's 30 s termination grace period, after the 10 s reconcile drain.
const EVENT_FLUSH_LIMIT: Duration = Duration::from_secs(5);

/// Where the certificate of secure metrics comes from.
#[derive(Debug, Clone)]
pub enum MetricsCert {
    /// Made up at start (Prometheus scrapes pods without verifying them).
    SelfSigned,
    /// `tls.crt` and `tls.key` in this directory, reloaded when they change.
    Dir(PathBuf),
}

pub struct RunConfig {
    pub metrics_addr: SocketAddr,
    /// Some: /metrics over HTTPS behind the API server's authentication and
    /// authorization. None: plain HTTP.
    pub metrics_cert: Option<MetricsCert>,
    pub webhook: Option<crate::serve::webhook::WebhookConfig>,
    /// The webhooks the API server is configured to call (for alerts).
    pub registered_webhooks: Vec<String>,
    pub leader_elect: bool,
    pub lease_name: String,
    pub lease_namespace: String,
    pub identity: String,
    pub concurrency: u16,
    /// Time between periodic full resyncs; zero turns them off.
    pub resync_interval: Duration,
    /// Requests per second the client may send; zero: no limit.
    pub api_qps: u32,
    /// Node events published per second at most (0: no limit).
    pub event_qps: u32,
}

/// Why the operator could not start: one line each, said plainly.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot load a kubeconfig (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    Kubeconfig(String),
    #[error("cannot reach the API server at {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error(
        "the TaintPolicy CRD (taintpolicies.nodetaint.io) is not installed: install it with `taint-operator crd | kubectl apply -f -` or the helm chart"
    )]
    CrdMissing,
    #[error(
        "the API server does not take field selectors on TaintPolicies ({message}): taint-operator needs Kubernetes 1.32 or later and this version's CRD, with its selectableFields (`taint-operator crd | kubectl apply -f -`, or the helm chart)"
    )]
    SelectableFieldsMissing { message: String },
    #[error(
        "the API server at {url} did not accept the credentials (401 Unauthorized): check the kubeconfig's user (token or client certificate)"
    )]
    Unauthorized { url: String },
    #[error("no permission to {what}: {message} (bind the operator to the chart's ClusterRole)")]
    Forbidden { what: String, message: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("webhook: {0}")]
    Webhook(String),
    #[error("secure metrics: {0}")]
    MetricsTls(#[source] TlsError),
}

/// The API client, and the API server's URL for messages. `qps` caps the requests
/// sent per second (0: no cap).
pub async fn client(metrics: &Metrics, qps: u32) -> Result<(Client, String), StartupError> {
    client_with(metrics, qps, WATCH_READ_TIMEOUT).await
}

/// A read on an open connection that takes longer than this fails: the request is
/// retried (watches reconnect), rather than hanging on a connection that died
/// without closing. Longer than a watch's server-side timeout (290 s), so an idle
/// but healthy watch is never cut.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// [`client`] with its own read timeout.
pub async fn client_with(
    metrics: &Metrics,
    qps: u32,
    read_timeout: Duration,
) -> Result<(Client, String), StartupError> {
    let mut config = Config::infer()
        .await
        .map_err(|e| StartupError::Kubeconfig(one_line(&e.to_string())))?;
    config.read_timeout = Some(read_timeout);
    // kube retries 429, 503 and 504 inside the client, up to 15 times over minutes,
    // holding a node worker all along and hiding every refusal from the request
    // metrics. The operator retries itself instead: a failed node reconcile comes
    // back after 2 s doubling to 60 s (jittered), with its worker free meanwhile;
    // watches, the status writer and the Lease have their own retries.
    config.default_retry = false;
    let url = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let builder = crate::api_connections::client_builder(&config)
        .map_err(|e| StartupError::Kubeconfig(one_line(&describe(&e))))?
        .with_layer(&ApiMetricsLayer(metrics.clone()));
    // tower's limiter holds requests back in windows of one second, `qps` each: a
    // bug that loops on writes, or a resync of a huge fleet, cannot flood the API
    // server. Watches count once, when they open.
    let client = match qps {
        0 => builder.build(),
        qps => builder
            .with_layer(&RateLimitLayer::new(qps.into(), Duration::from_secs(1)))
            .build(),
    };
    Ok((client, url))
}

/// A field selector on one of the CRD's `selectableFields`; any value does.
pub const SELECTABLE_FIELD_PROBE: &str = "spec.mode=Continuous";

/// Fails fast, with one clear line, when the CRD is missing, permissions are short,
/// or the API server lacks what the CRD needs. `url` is the API server's, for the
/// message when it cannot be reached.
///
/// The policies are listed with a field selector on one of the CRD's
/// `selectableFields`: what `kubectl get tp --field-selector` relies on. An API
/// server older than 1.32 (or a CRD applied to one, which dropped them) answers
/// 400, so the feature is probed where it is used, not read from a version string.
pub async fn preflight(client: &Client, url: &str) -> Result<(), StartupError> {
    let one = ListParams::default().limit(1);
    let classify = |what: &str, e: kube::Error| match e {
        kube::Error::Api(s) if s.code == 404 && what.contains("taintpolicies") => {
            StartupError::CrdMissing
        }
        kube::Error::Api(s) if s.code == 400 && what.contains("taintpolicies") => {
            StartupError::SelectableFieldsMissing {
                message: one_line(&s.message),
            }
        }
        kube::Error::Api(s) if s.code == 401 => StartupError::Unauthorized {
            url: url.to_string(),
        },
        kube::Error::Api(s) if s.code == 403 => StartupError::Forbidden {
            what: what.to_string(),
            message: one_line(&s.message),
        },
        other => StartupError::Unreachable {
            url: url.to_string(),
            message: describe(&other),
        },
    };
    let policies = Api::<TaintPolicy>::all(client.clone());
    let probe = one.clone().fields(SELECTABLE_FIELD_PROBE);
    patiently(|| policies.list(&probe))
        .await
        .map_err(|e| classify("list taintpolicies.nodetaint.io", e))?;
    let nodes = Api::<Node>::all(client.clone());
    patiently(|| nodes.list(&one))
        .await
        .map_err(|e| classify("list nodes", e))?;
    Ok(())
}

/// How long start-up waits out an API server not ready to serve a resource yet
/// (429 or 503): a CRD installed in the same `helm install` is Established
/// before its storage answers, and a pod started then would exit and restart.
pub const PREFLIGHT_PATIENCE: Duration = Duration::from_secs(20);

/// `request`, asked again every second while the API server answers 429 or 503,
/// for at most [`PREFLIGHT_PATIENCE`].
async fn patiently<T, F, Fut>(request: F) -> Result<T, kube::Error>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let deadline = tokio::time::Instant::now() + PREFLIGHT_PATIENCE;
    loop {
        match request().await {
            Err(kube::Error::Api(s))
                if matches!(s.code, 429 | 503) && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            answer => return answer,
        }
    }
}

pub async fn run(cfg: RunConfig) -> Result<(), StartupError> {
    let metrics = Metrics::default();
    metrics.mark_registered(&cfg.registered_webhooks);
    for controller in [node_reconciler::CONTROLLER, policy_reconciler::CONTROLLER] {
        metrics.start_error_counts(controller.controller, &ReconcileError::CATEGORIES);
    }
    // kube logs what goes wrong while it reads the kubeconfig and sends a request;
    // at start-up the one line returned here says it all, so nothing else is
    // printed before it.
    let (client, url) = client(&metrics, cfg.api_qps)
        .with_subscriber(tracing::subscriber::NoSubscriber::default())
        .await?;
    preflight(&client, &url)
        .with_subscriber(tracing::subscriber::NoSubscriber::default())
        .await?;

    let shutdown = shutdown_signal().shared();
    let (synced_tx, synced_rx) = watch::channel(false);
    let (changed_nodes_tx, changed_nodes_rx) = mpsc::unbounded_channel::<String>();
    let (all_nodes_tx, all_nodes_rx) = mpsc::unbounded_channel::<()>();
    let (policy_reader, policy_writer) = reflector::store::<TaintPolicy>();
    // Streamed while the API server streams; one refusal pages every later list.
    let initial_lists = Arc::new(InitialLists::default());
    let pod_watches = PodWatches::new(
        client.clone(),
        changed_nodes_tx.clone(),
        metrics.clone(),
        initial_lists.clone(),
    );
    // Closed until this replica holds the Lease; open for good without an election.
    let fence = if cfg.leader_elect {
        WriteFence::closed()
    } else {
        WriteFence::default()
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        NodeStore::default(),
        policy_reader.clone(),
        pod_watches,
        metrics.clone(),
        synced_rx.clone(),
        ContextOptions {
            reporter_instance: Some(cfg.identity.clone()),
            event_pace: EventPace {
                qps: cfg.event_qps,
                ..EventPace::default()
            },
            fence: fence.clone(),
            ..ContextOptions::default()
        },
    ));

    // The Lease has a client of its own: outside the node writes' request limiter
    // (a renewal must not queue behind a burst of patches), and with reads that
    // cannot outlast the renew deadline.
    let timing = Timing::default();
    let elector = if cfg.leader_elect {
        let (lease_client, _) = client_with(&metrics, 0, timing.renew_deadline)
            .with_subscriber(tracing::subscriber::NoSubscriber::default())
            .await?;
        Some(
            LeaderElector::new(
                lease_client,
                &cfg.lease_namespace,
                &cfg.lease_name,
                &cfg.identity,
                timing,
                metrics.leader.clone(),
            )
            .with_fence(fence),
        )
    } else {
        None
    };
    let lease_health = elector.as_ref().map(|e| e.health());

    // Every replica serves health, metrics and (when enabled) the webhook.
    let listener = http::bind(cfg.metrics_addr)
        .await
        .map_err(|source| StartupError::Bind {
            addr: cfg.metrics_addr,
            source,
        })?;
    let auth = cfg
        .metrics_cert
        .as_ref()
        .map(|_| Arc::new(MetricsAuth::new(client.clone(), CacheTtl::default())));
    let router = http::router(
        metrics.clone(),
        {
            let ctx = ctx.clone();
            Arc::new(move || ctx.caches.policies_listed())
        },
        {
            let ctx = ctx.clone();
            Arc::new(move || liveness(&ctx, lease_health.as_deref(), timing))
        },
        auth,
    );
    match &cfg.metrics_cert {
        None => {
            tokio::spawn(http::serve(listener, router, shutdown.clone()));
        }
        Some(cert) => {
            let tls = match cert {
                MetricsCert::Dir(dir) => {
                    tls::from_files(&dir.join("tls.crt"), &dir.join("tls.key")).await
                }
                MetricsCert::SelfSigned => {
                    tls::self_signed(vec!["localhost".into(), cfg.identity.clone()]).await
                }
            }
            .map_err(StartupError::MetricsTls)?;
            tokio::spawn(http::serve_tls(listener, tls, router, shutdown.clone()));
        }
    }
    tracing::info!(addr = %cfg.metrics_addr, secure = cfg.metrics_cert.is_some(), "metrics serving");
    if let Some(webhook) = &cfg.webhook {
        crate::serve::webhook::start(webhook, ctx.clone(), shutdown.clone())
            .await
            .map_err(StartupError::Webhook)?;
    }
    tokio::spawn(watch_policies(ctx.clone(), policy_writer, all_nodes_tx));
    // Every replica keeps the node and pod caches, the leader and the standbys: the
    // policy webhook's impact warning reads them whichever replica the API server
    // calls, and a standby that takes over has them synced already. Touched nodes
    // wait in the node queue (one entry per node at most) for a leader's workers.
    // The node watch hands the node queue names, not nodes: 5,000 node copies
    // waiting for the caches to sync would be the operator's peak memory.
    tokio::spawn(drive_nodes(
        ctx.clone(),
        Api::<WatchedNode>::all(client.clone()),
        initial_lists,
        changed_nodes_tx.clone(),
    ));
    tokio::spawn(sync_gate(ctx.clone(), synced_tx));
    let queue = NodeQueue::new(
        ctx.writes.activity().clone(),
        ctx.metrics.node_queue_wait.clone(),
    );
    tokio::spawn(feed_node_queue(
        ctx.clone(),
        queue.clone(),
        changed_nodes_rx,
        all_nodes_rx,
    ));

    match &elector {
        Some(e) => {
            tokio::select! {
                _ = e.acquire() => {}
                _ = shutdown.clone() => return Ok(()),
            }
        }
        // Without leader election this replica is the one that writes.
        None => {
            metrics.leader.set(1);
        }
    }

    tokio::spawn(policy_status::run_status_writer(ctx.clone()));
    tokio::spawn(resync::resync_nodes(
        ctx.clone(),
        queue.clone(),
        cfg.resync_interval,
    ));
    let nodes = {
        let ctx = ctx.clone();
        let queue = queue.clone();
        let shutdown = shutdown.clone();
        async move {
            tokio::select! {
                _ = ctx.caches.wait_plannable() => {}
                _ = shutdown.clone() => return,
            }
            tracing::info!(nodes = ctx.caches.nodes().len(), "node reconciles started");
            let closer = queue.clone();
            tokio::spawn(async move {
                shutdown.await;
                closer.close();
            });
            queue
                .run(cfg.concurrency.into(), move |work| {
                    node_reconciler::reconcile_named(work, ctx.clone())
                })
                .await;
        }
    };
    let policies = Controller::new(
        Api::<TaintPolicy>::all(client.clone()),
        watcher::Config::default(),
    )
    .graceful_shutdown_on(shutdown.clone())
    .run(
        policy_reconciler::reconcile_policy,
        policy_reconciler::error_policy,
        ctx.clone(),
    )
    .for_each(|_| future::ready(()));
    // Reconciles still waiting for the caches to sync would hold a graceful shutdown
    // forever: give running work a bounded time to finish, then go.
    let drain_limit = shutdown
        .clone()
        .then(|_| tokio::time::sleep(Duration::from_secs(10)));
    let controllers = async {
        tokio::select! {
            _ = future::join(nodes, policies) => {}
            _ = drain_limit => tracing::warn!("reconciles still running 10 s after shutdown was requested; exiting"),
        }
    };
    match &elector {
        Some(e) => {
            tokio::select! {
                _ = controllers => {}
                _ = e.hold() => {
                    // Another replica may be writing now: stop at once.
                    tracing::error!("leadership lost; exiting");
                    std::process::exit(1);
                }
            }
            e.release().await;
        }
        None => {
            controllers.await;
        }
    }
    // After the Lease: the next leader need not wait for our events.
    if !ctx.flush_events(EVENT_FLUSH_LIMIT).await {
        tracing::warn!("node events still queued at shutdown; some were not published");
    }
    tracing::info!("shut down");
    Ok(())
}

/// How long the node or policy watch may fail without a break before /healthz says so.
const WATCH_FAILING_LIMIT: Duration = Duration::from_secs(300);

/// /healthz: Lease calls still complete (a replica whose calls all hang, past four
/// lease durations, is restarted), and the watches have not failed without a break
/// for five minutes (a restart starts them over; a long API server outage also
/// restarts the replicas now and then, which costs nothing).
fn liveness(ctx: &Context, lease: Option<&LeaseHealth>, timing: Timing) -> Result<(), String> {
    if let Some(lease) = lease
        && lease.silent_for() > timing.duration * 4
    {
        return Err(format!(
            "no Lease call has completed for {} s",
            lease.silent_for().as_secs()
        ));
    }
    for (watch, health) in [
        ("node", &ctx.health.node_watch),
        ("policy", &ctx.health.policy_watch),
    ] {
        if let Some(failing) = health.failing_for()
            && failing > WATCH_FAILING_LIMIT
        {
            return Err(format!(
                "the {watch} watch has failed without a break for {} s",
                failing.as_secs()
            ));
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown requested");
}
