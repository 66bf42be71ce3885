//! Counts every request the client sends, by verb, resource and status code, as a
//! tower layer on the kube client: the scale suite reads it from `/metrics`.

use std::task::{Context as TaskContext, Poll};

use futures::future::BoxFuture;
use http::{Request, Response};
use tower::{Layer, Service};

use crate::telemetry::metrics::{Metrics, RequestLabels};

#[derive(Clone)]
pub struct ApiMetricsLayer(pub Metrics);

impl<S> Layer<S> for ApiMetricsLayer {
    type Service = ApiMetrics<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ApiMetrics {
            inner,
            metrics: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct ApiMetrics<S> {
    inner: S,
    metrics: Metrics,
}

impl<S, B, R> Service<Request<B>> for ApiMetrics<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let (verb, resource) = classify(
            req.method().as_str(),
            req.uri().path(),
            req.uri().query().unwrap_or(""),
        );
        let metrics = self.metrics.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            let code = match &result {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            metrics
                .api_requests
                .get_or_create(&RequestLabels {
                    verb,
                    resource,
                    code,
                })
                .inc();
            result
        })
    }
}

/// Kubernetes verb and resource (with subresource) of a request, e.g. `("patch", "nodes")`.
pub fn classify(method: &str, path: &str, query: &str) -> (String, String) {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [] => ("unknown".to_string(), false),
        [r] => (r.to_string(), false),
        [r, _name] => (r.to_string(), true),
        [r, _name, sub, ..] => (format!("{r}/{sub}"), true),
    };
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match method {
        "GET" if watch => "watch",
        "GET" if named => "get",
        "GET" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        other => return (other.to_lowercase(), resource),
    };
    (verb.to_string(), resource)
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn classifies_requests() {
        let c = |m, p, q| classify(m, p, q);
        assert_eq!(
            c("GET", "/api/v1/nodes", "watch=true&resourceVersion=1"),
            ("watch".into(), "nodes".into())
        );
        assert_eq!(
            c("GET", "/api/v1/nodes", "limit=500"),
            ("list".into(), "nodes".into())
        );
        assert_eq!(
            c("PATCH", "/api/v1/nodes/n1", ""),
            ("patch".into(), "nodes".into())
        );
        assert_eq!(
            c(
                "GET",
                "/api/v1/namespaces/kube-system/pods",
                "labelSelector=a"
            ),
            ("list".into(), "pods".into())
        );
        assert_eq!(
            c(
                "PATCH",
                "/apis/nodetaint.io/v1alpha1/taintpolicies/p/status",
                ""
            ),
            ("patch".into(), "taintpolicies/status".into())
        );
        assert_eq!(
            c(
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                ""
            ),
            ("create".into(), "events".into())
        );
        assert_eq!(
            c(
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/x/leases/l",
                ""
            ),
            ("update".into(), "leases".into())
        );
        assert_eq!(
            c("GET", "/api/v1/namespaces/x", ""),
            ("get".into(), "namespaces".into())
        );
    }
}
