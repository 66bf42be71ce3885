//! The one error a policy's compilation reports: which field is wrong, and how.
//! It sits below every module that checks a part of the spec (selectors, eviction
//! rules, the policy as a whole), so none of them imports another to report it.

/// Why a policy cannot be applied, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSpec {
    pub field: String,
    pub message: String,
}
