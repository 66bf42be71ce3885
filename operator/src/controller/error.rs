//! The controller's errors, each with the object and call it concerns.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{call}: {source}")]
    Kube {
        call: String,
        #[source]
        source: kube::Error,
    },
    #[error("node {node}: still conflicting after {attempts} attempts to write")]
    ConflictRetriesExhausted { node: String, attempts: u32 },
    #[error("policy {policy}: cleanup left {remaining} node(s) to clean; retrying")]
    CleanupPending { policy: String, remaining: usize },
    #[error("policy {policy}: finalizer: {message}")]
    Finalizer { policy: String, message: String },
    /// `object` as `kind name`: "node n1", "taintpolicy p status".
    #[error("{object}: not written: this replica's Lease ran out (renew deadline passed)")]
    NotLeading { object: String },
}

impl Error {
    pub fn kube(call: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube {
            call: call.into(),
            source,
        }
    }

    /// The request failed below HTTP (connect, send, read): no answer from the
    /// API server came back, so the call says nothing about the object.
    pub fn is_transport(&self) -> bool {
        matches!(
            self,
            Error::Kube {
                source: kube::Error::HyperError(_) | kube::Error::Service(_),
                ..
            }
        )
    }

    /// Every value [`Error::category`] gives: the reconcile error counters start at
    /// zero for each, so a rate or a ratio has a series before the first error.
    pub const CATEGORIES: [&'static str; 5] = [
        "ApiError",
        "WriteConflict",
        "CleanupPending",
        "FinalizerError",
        "NotLeading",
    ];

    /// A short category for metrics labels and event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "ApiError",
            Error::ConflictRetriesExhausted { .. } => "WriteConflict",
            Error::CleanupPending { .. } => "CleanupPending",
            Error::Finalizer { .. } => "FinalizerError",
            Error::NotLeading { .. } => "NotLeading",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn categories_lists_every_category_once() {
        let every = [
            Error::kube("get node", kube::Error::Service("reset".into())),
            Error::ConflictRetriesExhausted {
                node: "n".into(),
                attempts: 5,
            },
            Error::CleanupPending {
                policy: "p".into(),
                remaining: 1,
            },
            Error::Finalizer {
                policy: "p".into(),
                message: "m".into(),
            },
            Error::NotLeading {
                object: "node n".into(),
            },
        ];
        let given: Vec<&str> = every.iter().map(Error::category).collect();
        assert_eq!(given, Error::CATEGORIES);
    }

    #[test]
    fn only_a_request_that_got_no_answer_is_a_transport_error() {
        let sent = Error::kube(
            "update lease",
            kube::Error::Service("connection reset".into()),
        );
        assert!(sent.is_transport());
        let answered = Error::kube(
            "update lease",
            kube::Error::Api(Box::new(
                kube::core::Status::failure("busy", "ServiceUnavailable").with_code(503),
            )),
        );
        assert!(!answered.is_transport());
        let conflict = Error::ConflictRetriesExhausted {
            node: "n".into(),
            attempts: 6,
        };
        assert!(!conflict.is_transport());
    }
}
