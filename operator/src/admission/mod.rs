//! Admission: what the webhook server (`serve::webhook`) answers. `node` taints a
//! Node in its CREATE request (readiness policies); `policy` refuses a TaintPolicy
//! the operator could not apply, naming the field, and warns about what it would
//! do to the cluster. Both answer from the caches and never call the API server.

pub mod node;
pub mod policy;

use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, AdmissionResponse, AdmissionReview},
};
use serde_json::Value;

/// How a review ended, for `taint_operator_webhook_requests_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Let through (with a patch or warnings, or as it was).
    Allowed,
    /// Refused on its merits: a policy the operator could not apply.
    Refused,
    /// Refused because this replica cannot judge yet (its caches have not synced).
    Unavailable,
    /// The review itself could not be read or answered.
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Refused => "refused",
            Outcome::Unavailable => "unavailable",
            Outcome::Error => "error",
        }
    }
}

/// An answered review: the AdmissionReview to send back, how it ended, and the
/// operation it was about (`CREATE`, `UPDATE`, ..., `unknown` when unreadable).
#[derive(Debug, Clone)]
pub struct Answer {
    pub body: Value,
    pub outcome: Outcome,
    pub operation: String,
}

/// Reads an AdmissionReview and answers it with `respond`. Never errors: every
/// problem becomes a response with a message.
pub fn review(
    body: Value,
    respond: impl FnOnce(&AdmissionRequest<DynamicObject>) -> (AdmissionResponse, Outcome),
) -> Answer {
    let unreadable = |message: String| Answer {
        body: serde_json::to_value(AdmissionResponse::invalid(message).into_review())
            .expect("a review serializes"),
        outcome: Outcome::Error,
        operation: "unknown".into(),
    };
    let review: AdmissionReview<DynamicObject> = match serde_json::from_value(body) {
        Ok(r) => r,
        // Without a request uid there is nothing to answer to; an invalid review gets an explicit denial.
        Err(e) => return unreadable(format!("malformed AdmissionReview: {e}")),
    };
    let req: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => return unreadable(format!("AdmissionReview without a request: {e}")),
    };
    let (resp, outcome) = respond(&req);
    Answer {
        body: serde_json::to_value(resp.into_review()).expect("a review serializes"),
        outcome,
        operation: format!("{:?}", req.operation).to_uppercase(),
    }
}
