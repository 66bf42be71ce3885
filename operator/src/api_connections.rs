//! The HTTP client under kube's `Client`: kube's own stack (TLS and timeouts from
//! the kubeconfig, base URI, credentials, extra headers), built here for one
//! setting kube does not expose: how long an idle connection stays open. Its read
//! timeout counts from each request's write, never from when its connection went
//! idle in the pool.
//!
//! kube's client speaks HTTP/1.1, one request per connection at a time, so a burst
//! of node writes opens one connection per node worker (48 by default), and hyper
//! would keep each open, with its read buffer and TLS state, until a later request
//! looked at it (kube's stack sets no timer for the pool, so not even its 90 s
//! timeout applies). Closed after [`IDLE_CONNECTION_TIMEOUT`] instead: 1.4 MiB less
//! heap a minute after a fleet-wide change at 5,000 nodes
//! (docs/performance.md#idle-connections); the next burst opens them again (one TLS handshake each). Watches are
//! never idle: they hold their connections.
//!
//! What kube's stack has and this one leaves out: its tracing layer (a debug span
//! per request, and an ERROR line for every failed one; the operator logs its
//! failures with their context itself), and the expiry of an exec plugin's client
//! certificate (`Client::valid_until`, which the operator does not read). Proxies
//! and gzip are off in the kube features the operator builds with, so neither is
//! lost; a kubeconfig naming a proxy is refused, as kube would refuse it.

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::{
    client::legacy::{Client as HyperClient, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
};
use kube::{
    Config,
    client::{Body, ClientBuilder, ConfigExt},
};
use tower::{BoxError, ServiceBuilder, ServiceExt, util::BoxService};

/// How long a connection may sit unused before it is closed. Longer than the
/// pauses inside a burst (the event publisher's quiet of 2 s, the status
/// writer's), shorter than the quiet minute after one.
pub const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(20);

/// Requests in, responses out: the stack below kube's `Client`.
pub type ApiService = BoxService<Request<Body>, Response<Incoming>, BoxError>;

/// kube's `ClientBuilder` over the stack described above, for `config`.
pub fn client_builder(config: &Config) -> Result<ClientBuilder<ApiService>, kube::Error> {
    builder_closing_idle_after(config, IDLE_CONNECTION_TIMEOUT)
}

fn builder_closing_idle_after(
    config: &Config,
    idle: Duration,
) -> Result<ClientBuilder<ApiService>, kube::Error> {
    if let Some(proxy) = &config.proxy_url {
        return Err(kube::Error::ProxyProtocolUnsupported {
            proxy_url: Box::new(proxy.clone()),
        });
    }
    let mut http = HttpConnector::new();
    // The TLS connector on top speaks https; this one must let it.
    http.enforce_http(false);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    // A read timeout bounds the wait for an answer. Without this, the time a pooled
    // connection sat idle before it carried a request counted against it too: a
    // Lease renewal (10 s reads, one every 2 s) had 8 s of the API server's time.
    connector.set_reset_reader_on_write(true);
    // Without a timer the pool has no task to close idle connections, whatever
    // the timeout says (kube's own stack sets none): they would close only when a
    // later request happens to look at them.
    let client: HyperClient<_, Body> = HyperClient::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(idle)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client)
        .boxed();
    Ok(ClientBuilder::new(
        service,
        config.default_namespace.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> Config {
        Config::new(url.parse().expect("a URL"))
    }

    /// A `/version` answer, for servers written by hand where axum cannot hold a
    /// connection the way a test needs.
    fn version_answer() -> String {
        let body = r#"{"major":"1","minor":"36","gitVersion":"v1.36.0","gitCommit":"","gitTreeState":"","buildDate":"","goVersion":"","compiler":"","platform":""}"#;
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// Reads one request's head (its requests have no body).
    async fn read_request_head(socket: &mut tokio::net::TcpStream) {
        use tokio::io::AsyncReadExt;
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "the client closed the connection");
            request.extend_from_slice(&buf[..n]);
        }
    }

    #[test]
    fn a_kubeconfig_naming_a_proxy_is_refused() {
        let mut c = config("https://127.0.0.1:6443");
        c.proxy_url = Some("http://proxy.example:3128".parse().unwrap());
        assert!(matches!(
            client_builder(&c),
            Err(kube::Error::ProxyProtocolUnsupported { .. })
        ));
    }

    /// A request goes through the whole stack: the base URI is applied, the headers
    /// added, the answer decoded.
    #[tokio::test]
    async fn a_request_reaches_the_api_server_and_its_answer_comes_back() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route(
            "/base/version",
            axum::routing::get(|| async {
                axum::Json(serde_json::json!({
                    "major": "1", "minor": "36", "gitVersion": "v1.36.0",
                    "gitCommit": "", "gitTreeState": "", "buildDate": "",
                    "goVersion": "", "compiler": "", "platform": ""
                }))
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = client_builder(&config(&format!("http://{addr}/base")))
            .unwrap()
            .build();
        let version = client.apiserver_version().await.unwrap();
        assert_eq!(version.git_version, "v1.36.0");
    }

    /// A read timeout bounds the answer, not the answer plus the time its pooled
    /// connection sat idle: a request sent after 2.5 s of idle, answered 1 s later,
    /// gets its answer under a 3 s read timeout.
    #[tokio::test]
    async fn a_read_timeout_counts_from_the_request_not_from_the_idle_connection() {
        use tokio::io::AsyncWriteExt;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            for delay in [Duration::ZERO, Duration::from_secs(1)] {
                read_request_head(&mut socket).await;
                tokio::time::sleep(delay).await;
                socket.write_all(version_answer().as_bytes()).await.unwrap();
            }
        });
        let mut c = config(&format!("http://{addr}"));
        c.read_timeout = Some(Duration::from_secs(3));
        let client = client_builder(&c).unwrap().build();
        client.apiserver_version().await.unwrap();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let second = client.apiserver_version().await;
        assert!(second.is_ok(), "the idle time counted: {second:?}");
    }

    /// The connection of a finished request is kept for the next one, and closed
    /// once it has been idle for the timeout, while the client lives on.
    #[tokio::test]
    async fn an_idle_connection_is_closed_after_the_timeout() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            read_request_head(&mut socket).await;
            socket.write_all(version_answer().as_bytes()).await.unwrap();
            // 0 bytes: the client closed the connection.
            let n = socket.read(&mut [0u8; 64]).await.unwrap();
            let _ = closed_tx.send(n);
        });
        let client = builder_closing_idle_after(
            &config(&format!("http://{addr}")),
            Duration::from_millis(200),
        )
        .unwrap()
        .build();
        client.apiserver_version().await.unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(5), closed_rx).await;
        assert_eq!(closed.expect("the idle connection stayed open").unwrap(), 0);
        drop(client);
    }
}
