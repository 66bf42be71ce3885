//! The `TaintPolicy` custom resource (`nodetaint.io/v1alpha1`).
//!
//! Everything the API server can check is declared here, in the schema: enums,
//! formats, list bounds and CEL rules. The operator only adds what the API server
//! cannot tell (regex syntax), so `kubectl apply` refuses bad input before any
//! node could be touched.

mod selector;
mod types;
mod validation;

pub use selector::{LabelSelector, LabelSelectorRequirement, SelectorOperator};
pub use types::*;
pub use validation::{FieldError, validate_policy};

use kube_core::CustomResourceExt;

/// The CRD as YAML, exactly as `taint-operator crd` prints it and the chart ships it.
pub fn crd_yaml() -> String {
    // Long descriptions, messages and patterns stay on one line each: folding them
    // (`>-`) would make a diff of the CRD show reflowed text, not what changed.
    // Multi-line descriptions are still literal blocks (`|-`).
    let mut options = serde_saphyr::SerializerOptions::default();
    options.folded_wrap_chars = usize::MAX;
    serde_saphyr::to_string_with_options(&TaintPolicy::crd(), options)
        .expect("the CRD always serializes")
}
