//! Who may read `/metrics` when it is served securely: the caller's bearer token
//! is checked by the API server (a TokenReview says whose it is), and that user
//! must be allowed `get` on the non-resource URL `/metrics` (a
//! SubjectAccessReview), as controller-runtime's secure metrics filter and
//! kube-rbac-proxy decide. Prometheus then needs a ClusterRole granting it that
//! URL, and nothing else on the network can read the operator's metrics.
//!
//! Answers are cached briefly per token, so a scrape every 30 s costs the API
//! server two reviews a minute at most per scraper, not two per scrape.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec},
    authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::{Api, Client, api::PostParams};
use tokio::time::Instant;

/// How long a decision is reused for the same token, verb and path. An allowed
/// scraper is asked about once a minute; a refused one is told again quickly once
/// its RoleBinding is fixed.
#[derive(Debug, Clone, Copy)]
pub struct CacheTtl {
    pub allowed: Duration,
    pub denied: Duration,
}

impl Default for CacheTtl {
    fn default() -> Self {
        Self {
            allowed: Duration::from_secs(60),
            denied: Duration::from_secs(10),
        }
    }
}

/// Cached decisions kept at most; past this, expired ones are dropped first and,
/// if that is not enough (a flood of made-up tokens), all of them.
const CACHE_LIMIT: usize = 1024;

/// What the API server said about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed {
        user: String,
    },
    /// No token, or one the API server does not know (401).
    Unauthenticated,
    /// A known user without `get` on the path (403).
    Forbidden {
        user: String,
        reason: String,
    },
}

/// A review the API server did not answer: the request is refused, nothing is cached.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("TokenReview failed: {0}")]
    TokenReview(#[source] kube::Error),
    #[error("SubjectAccessReview of {user} failed: {source}")]
    SubjectAccessReview {
        user: String,
        #[source]
        source: kube::Error,
    },
    #[error("SubjectAccessReview of {user}: {message}")]
    Evaluation { user: String, message: String },
}

/// Decides, through the API server, who may read the protected paths.
pub struct MetricsAuth {
    client: Client,
    ttl: CacheTtl,
    cache: Mutex<HashMap<[u8; 32], (Verdict, Instant)>>,
}

impl MetricsAuth {
    pub fn new(client: Client, ttl: CacheTtl) -> Self {
        Self {
            client,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// May the holder of `token` do `verb` on `path`? Cached per (verb, path, token).
    pub async fn decide(
        &self,
        token: Option<&str>,
        verb: &str,
        path: &str,
    ) -> Result<Verdict, ReviewError> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(Verdict::Unauthenticated);
        };
        // The key is a digest: the cache never holds a usable credential.
        let key = cache_key(verb, path, token);
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let verdict = self.review(token, verb, path).await?;
        let ttl = match verdict {
            Verdict::Allowed { .. } => self.ttl.allowed,
            _ => self.ttl.denied,
        };
        self.remember(key, verdict.clone(), Instant::now() + ttl);
        Ok(verdict)
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Verdict> {
        let cache = self.cache.lock().expect("metrics auth cache lock");
        cache
            .get(key)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(verdict, _)| verdict.clone())
    }

    fn remember(&self, key: [u8; 32], verdict: Verdict, until: Instant) {
        let mut cache = self.cache.lock().expect("metrics auth cache lock");
        if cache.len() >= CACHE_LIMIT {
            let now = Instant::now();
            cache.retain(|_, (_, until)| *until > now);
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
        }
        cache.insert(key, (verdict, until));
    }

    async fn review(&self, token: &str, verb: &str, path: &str) -> Result<Verdict, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                // The API server's own audiences: a token minted for it (a
                // ServiceAccount's projected token) is what scrapers present.
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(ReviewError::TokenReview)?;
        let Some(user) = reviewed
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
        else {
            return Ok(Verdict::Unauthenticated);
        };
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answered = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(|source| ReviewError::SubjectAccessReview {
                user: name.clone(),
                source,
            })?;
        let status = answered.status.unwrap_or_default();
        if status.allowed {
            return Ok(Verdict::Allowed { user: name });
        }
        // An authorizer that failed to evaluate is not a "no" to cache.
        if let Some(message) = status.evaluation_error.filter(|e| !e.is_empty())
            && status.denied != Some(true)
        {
            return Err(ReviewError::Evaluation {
                user: name,
                message,
            });
        }
        Ok(Verdict::Forbidden {
            user: name,
            reason: status.reason.unwrap_or_default(),
        })
    }
}

fn cache_key(verb: &str, path: &str, token: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [verb, path, token] {
        ctx.update(part.as_bytes());
        ctx.update(&[0]);
    }
    let mut key = [0; 32];
    key.copy_from_slice(ctx.finish().as_ref());
    key
}

/// The token of an `Authorization: Bearer TOKEN` header.
fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// An axum middleware for the protected routes: 401 without a valid token, 403
/// for a user without access, 500 when the API server could not decide.
pub async fn require_access(
    State(auth): State<Arc<MetricsAuth>>,
    request: Request,
    next: Next,
) -> Response {
    let verb = request.method().as_str().to_ascii_lowercase();
    let path = request.uri().path().to_string();
    match auth.decide(bearer(&request), &verb, &path).await {
        Ok(Verdict::Allowed { .. }) => next.run(request).await,
        Ok(Verdict::Unauthenticated) => {
            let mut response = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            response
        }
        Ok(Verdict::Forbidden { user, reason }) => {
            tracing::debug!(%user, %reason, %path, "metrics request forbidden");
            (
                StatusCode::FORBIDDEN,
                format!("Forbidden: user {user:?} may not {verb} {path}\n"),
            )
                .into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, %path, "metrics request not authorized: the review failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Authorization failed: the API server did not answer the review\n",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(authorization: Option<&str>) -> Request {
        let mut builder = axum::http::Request::builder().uri("/metrics");
        if let Some(value) = authorization {
            builder = builder.header(header::AUTHORIZATION, value);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn the_bearer_token_is_read_from_the_authorization_header() {
        assert_eq!(bearer(&request(Some("Bearer abc.def"))), Some("abc.def"));
        assert_eq!(bearer(&request(Some("bearer  abc "))), Some("abc"));
        assert_eq!(bearer(&request(Some("Basic dXNlcjpwdw=="))), None);
        assert_eq!(bearer(&request(Some("Bearer"))), None);
        assert_eq!(bearer(&request(None)), None);
    }

    #[test]
    fn cache_keys_differ_by_token_verb_and_path() {
        let key = cache_key("get", "/metrics", "t");
        assert_eq!(key, cache_key("get", "/metrics", "t"));
        assert_ne!(key, cache_key("get", "/metrics", "u"));
        assert_ne!(key, cache_key("post", "/metrics", "t"));
        assert_ne!(key, cache_key("get", "/metricst", ""));
    }
}
