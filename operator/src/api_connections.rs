//! The HTTP client under kube's `Client`: kube's own stack (TLS and timeouts from
//! the kubeconfig, base URI, credentials, extra headers), built here for one
//! setting kube does not expose: how long an idle connection stays open.
//!
//! kube's client speaks HTTP/1.1, one request per connection at a time, so a burst
//! of node writes opens one connection per node worker (48 by default), and hyper
//! keeps each open for 90 s after its last request, with its read buffer and TLS
//! state: about 2.5 MB at 5,000 nodes while the fleet is quiet again. Closed after
//! [`IDLE_CONNECTION_TIMEOUT`] instead; the next burst opens them again (one TLS
//! handshake each). Watches are never idle: they hold their connections.
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
    rt::TokioExecutor,
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
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let client: HyperClient<_, Body> = HyperClient::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT)
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
        let mut c = config(&format!("http://{addr}/base"));
        c.headers = vec![(
            http::HeaderName::from_static("x-test"),
            http::HeaderValue::from_static("1"),
        )];
        let client = client_builder(&c).unwrap().build();
        let version = client.apiserver_version().await.unwrap();
        assert_eq!(version.git_version, "v1.36.0");
    }
}
