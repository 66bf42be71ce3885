//! A `metav1.LabelSelector` with the bounds and rules the upstream type lacks.
//!
//! It serializes exactly like `metav1.LabelSelector`, but its schema caps list
//! sizes (so CEL rules stay within the API server's cost budget) and refuses
//! unknown operators and `values` that do not fit the operator.

use std::collections::BTreeMap;

use kube_derive::KubeSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must all be present with exactly these values. Each value is a
    /// label value; the keys, which the schema cannot check, the operator checks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 64,
        "additionalProperties" = {
            "type": "string",
            "maxLength": 63,
            "pattern": "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
        }
    ))]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements that must all hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(crates(kube_core = "::kube_core"), validation = Rule::new(
    "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)"
).message("values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"))]
pub struct LabelSelectorRequirement {
    /// The label key the requirement applies to: an optional DNS subdomain prefix and
    /// `/`, then a name of at most 63 characters.
    #[schemars(
        length(min = 1, max = 317),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
        )
    )]
    pub key: String,
    pub operator: SelectorOperator,
    /// Label values: at most 63 characters each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            length(max = 63),
            regex(pattern = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
        )
    )]
    pub values: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}
