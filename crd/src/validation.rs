//! Client-side validation of a TaintPolicy object against the CRD's own schema.
//!
//! The API server checks the OpenAPI constraints (types, required fields, unknown
//! fields, enums, patterns, lengths, list bounds) and then the CEL rules. kube's
//! client-side CEL evaluator only does the second part, so this module walks the
//! same generated schema for the first. Both read `TaintPolicy::crd()`, so `plan`
//! refuses exactly what `kubectl apply` would.

use std::sync::OnceLock;

use kube_core::CustomResourceExt;
use serde_json::Value;

use crate::TaintPolicy;

/// One refused field: `path` is a JSON path such as `spec.taints[1].effect`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let crd = TaintPolicy::crd();
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("the derived CRD has a schema");
        serde_json::to_value(schema).expect("the schema serializes")
    })
}

/// Validates a whole TaintPolicy object (as JSON). Returns every refused field.
pub fn validate_policy(object: &Value) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    // metadata, apiVersion and kind are the API server's own business, not the schema's.
    if let (Some(props), Some(obj)) = (schema().get("properties"), object.as_object()) {
        for (name, value) in obj {
            match name.as_str() {
                "apiVersion" | "kind" | "metadata" => {}
                _ => match props.get(name) {
                    Some(sub) => check(sub, value, name, &mut errors),
                    None => errors.push(field_error(name, "unknown field")),
                },
            }
        }
        if obj.get("spec").is_none() {
            errors.push(field_error("spec", "required field is missing"));
        }
    }
    if errors.is_empty() {
        // CEL rules only make sense on a structurally valid object.
        if let Err(cel) = kube_core::cel::Validator::new().validate(schema(), object, None) {
            errors.extend(cel.into_vec().into_iter().map(|e| FieldError {
                path: if e.field_path.is_empty() {
                    "spec".into()
                } else {
                    e.field_path
                },
                message: e.message,
            }));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn field_error(path: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.to_string(),
        message: message.into(),
    }
}

fn check(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true) {
            errors.push(field_error(path, "must not be null"));
        }
        return;
    }
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            errors.push(field_error(path, "must be an integer or a string"));
        }
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let names: Vec<String> = allowed
            .iter()
            .map(|v| v.as_str().map_or(v.to_string(), str::to_string))
            .collect();
        errors.push(field_error(
            path,
            format!(
                "unsupported value {value}: must be one of {}",
                names.join(", ")
            ),
        ));
        return;
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => check_object(schema, value, path, errors),
        Some("array") => check_array(schema, value, path, errors),
        Some("string") => check_string(schema, value, path, errors),
        Some("integer") => {
            if !(value.is_i64() || value.is_u64()) {
                errors.push(field_error(path, "must be an integer"));
            } else if let (Some(min), Some(n)) = (
                schema.get("minimum").and_then(Value::as_f64),
                value.as_f64(),
            ) && n < min
            {
                errors.push(field_error(path, format!("must be at least {min}")));
            }
        }
        Some("boolean") if !value.is_boolean() => {
            errors.push(field_error(path, "must be a boolean"))
        }
        _ => {}
    }
}

fn check_object(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(obj) = value.as_object() else {
        errors.push(field_error(path, "must be an object"));
        return;
    };
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(name) {
                errors.push(field_error(
                    &format!("{path}.{name}"),
                    "required field is missing",
                ));
            }
        }
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && obj.len() as u64 > max
    {
        errors.push(field_error(
            path,
            format!("must have at most {max} entries"),
        ));
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    for (name, sub) in obj {
        let child = format!("{path}.{name}");
        match (props.and_then(|p| p.get(name)), additional) {
            (Some(s), _) => check(s, sub, &child, errors),
            (None, Some(s)) if s.is_object() => check(s, sub, &child, errors),
            (None, Some(Value::Bool(true))) => {}
            _ => errors.push(field_error(&child, "unknown field")),
        }
    }
}

fn check_array(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(items) = value.as_array() else {
        errors.push(field_error(path, "must be a list"));
        return;
    };
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        errors.push(field_error(
            path,
            format!("must have at least {min} item(s)"),
        ));
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && items.len() as u64 > max
    {
        errors.push(field_error(path, format!("must have at most {max} items")));
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            check(item_schema, item, &format!("{path}[{i}]"), errors);
        }
    }
}

fn check_string(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(s) = value.as_str() else {
        errors.push(field_error(path, "must be a string"));
        return;
    };
    let len = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        errors.push(field_error(
            path,
            format!("must be at least {min} character(s)"),
        ));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        errors.push(field_error(
            path,
            format!("must be at most {max} characters"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        // The schema's patterns are written in the RE2 subset both Go and the regex crate accept.
        if !regex::Regex::new(pattern).is_ok_and(|re| re.is_match(s)) {
            errors.push(field_error(path, format!("{s:?} does not match {pattern}")));
        }
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time")
        && s.parse::<k8s_openapi::jiff::Timestamp>().is_err()
    {
        errors.push(field_error(path, format!("{s:?} is not an RFC 3339 time")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(spec: Value) -> Value {
        json!({"apiVersion": "nodetaint.io/v1alpha1", "kind": "TaintPolicy", "metadata": {"name": "p"}, "spec": spec})
    }

    fn refused(spec: Value) -> Vec<String> {
        validate_policy(&policy(spec))
            .expect_err("should be refused")
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    fn taint() -> Value {
        json!({"key": "example.com/broken", "effect": "NoSchedule"})
    }

    fn matcher() -> Value {
        json!([{"conditions": [{"type": "Ready", "status": "False"}]}])
    }

    #[test]
    fn accepts_a_full_policy() {
        let spec = json!({
            "nodeSelector": {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "Exists"}]},
            "taints": [{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}],
            "matchers": [{"conditions": [{"type": "NIC", "status": "Kaput|Ruined", "reason": "Pre.*", "for": "1m30s"}]}],
            "readiness": {"conditions": [{"type": "example.net/NetworkReady", "status": "True"}],
                          "criticalPods": [{"name": "cni", "namespace": "kube-system", "selector": {"matchLabels": {"app": "cni"}}}]},
            "mode": "BootstrapOnly", "dryRun": true, "maxTaintedNodes": "30%"
        });
        validate_policy(&policy(spec)).unwrap();
        validate_policy(&policy(
            json!({"taints": [taint()], "matchers": matcher(), "maxTaintedNodes": 3}),
        ))
        .unwrap();
    }

    #[test]
    fn refuses_bad_effect_naming_the_field() {
        let errs =
            refused(json!({"taints": [{"key": "k", "effect": "NoWay"}], "matchers": matcher()}));
        assert!(
            errs[0].starts_with("spec.taints[0].effect: unsupported value"),
            "{errs:?}"
        );
    }

    #[test]
    fn refuses_duplicate_taints() {
        let errs = refused(json!({"taints": [taint(), taint()], "matchers": matcher()}));
        assert!(
            errs.iter().any(|e| e.contains("unique by key+effect")),
            "{errs:?}"
        );
    }

    #[test]
    fn same_key_with_other_effects_is_fine() {
        let other = json!({"key": "example.com/broken", "effect": "NoExecute"});
        validate_policy(&policy(
            json!({"taints": [taint(), other], "matchers": matcher()}),
        ))
        .unwrap();
    }

    #[test]
    fn refuses_a_policy_without_matchers_or_readiness() {
        let errs = refused(json!({"taints": [taint()]}));
        assert!(
            errs.iter()
                .any(|e| e.contains("at least one of spec.matchers or spec.readiness")),
            "{errs:?}"
        );
        let errs = refused(json!({"taints": [taint()], "readiness": {}}));
        assert!(
            errs.iter()
                .any(|e| e.contains("at least one condition or critical pod")),
            "{errs:?}"
        );
    }

    #[test]
    fn refuses_bootstrap_only_without_readiness() {
        let errs =
            refused(json!({"taints": [taint()], "matchers": matcher(), "mode": "BootstrapOnly"}));
        assert!(
            errs.iter().any(|e| e.contains("readiness is required")),
            "{errs:?}"
        );
    }

    #[test]
    fn refuses_bad_taint_keys_and_values() {
        for key in ["", "-bad", "a/b/c", "UPPER.example.com/x", &"x".repeat(64)] {
            let errs = refused(
                json!({"taints": [{"key": key, "effect": "NoSchedule"}], "matchers": matcher()}),
            );
            assert!(
                errs.iter().any(|e| e.starts_with("spec.taints[0].key")),
                "{key}: {errs:?}"
            );
        }
        let errs = refused(
            json!({"taints": [{"key": "k", "value": "has space", "effect": "NoSchedule"}], "matchers": matcher()}),
        );
        assert!(errs[0].starts_with("spec.taints[0].value"), "{errs:?}");
    }

    #[test]
    fn refuses_too_many_or_no_taints() {
        let many: Vec<Value> = (0..9)
            .map(|i| json!({"key": format!("k{i}"), "effect": "NoSchedule"}))
            .collect();
        assert!(refused(json!({"taints": many, "matchers": matcher()}))[0].contains("at most 8"));
        assert!(refused(json!({"taints": [], "matchers": matcher()}))[0].contains("at least 1"));
    }

    #[test]
    fn refuses_bad_durations_percentages_and_selectors() {
        let m = json!([{"conditions": [{"type": "A", "status": "B", "for": "30 seconds"}]}]);
        assert!(
            refused(json!({"taints": [taint()], "matchers": m}))[0]
                .starts_with("spec.matchers[0].conditions[0].for")
        );
        // Longer than Go's durations go: refused, whatever the unit or digit count.
        for too_long in ["2562048h", "9999999h", "99999999999h", "999999999999999s"] {
            let m = json!([{"conditions": [{"type": "A", "status": "B", "for": too_long}]}]);
            let errs = refused(json!({"taints": [taint()], "matchers": m}));
            assert!(
                errs[0].starts_with("spec.matchers[0].conditions[0].for")
                    && errs[0].contains("at most 2562047h"),
                "{too_long}: {errs:?}"
            );
        }
        for fine in ["2562047h", "10µs", "1h30m", "0.5s"] {
            let m = json!([{"conditions": [{"type": "A", "status": "B", "for": fine}]}]);
            assert!(
                validate_policy(&policy(json!({"taints": [taint()], "matchers": m}))).is_ok(),
                "{fine}"
            );
        }
        for bad in [json!("150%"), json!("abc"), json!(-1)] {
            let errs = refused(
                json!({"taints": [taint()], "matchers": matcher(), "maxTaintedNodes": bad}),
            );
            assert!(
                errs.iter().any(|e| e.contains("maxTaintedNodes")),
                "{errs:?}"
            );
        }
        let sel = json!({"matchExpressions": [{"key": "a", "operator": "In"}]});
        let errs =
            refused(json!({"taints": [taint()], "matchers": matcher(), "nodeSelector": sel}));
        assert!(
            errs.iter().any(|e| e.contains("values must be non-empty")),
            "{errs:?}"
        );
        let sel = json!({"matchExpressions": [{"key": "a", "operator": "Near"}]});
        let errs =
            refused(json!({"taints": [taint()], "matchers": matcher(), "nodeSelector": sel}));
        assert!(
            errs[0].starts_with("spec.nodeSelector.matchExpressions[0].operator"),
            "{errs:?}"
        );
    }

    #[test]
    fn refuses_unknown_fields() {
        let errs = refused(json!({"taints": [taint()], "matchers": matcher(), "colour": "red"}));
        assert_eq!(errs, vec!["spec.colour: unknown field"]);
    }
}
