//! The chart ships the CRD that `taint-operator crd` prints; a stale copy fails here.
//! Regenerate with `just crd`.

#[test]
fn chart_crd_is_generated_from_the_types() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/taint-operator/files/taintpolicies.nodetaint.io.yaml"
    );
    let committed = std::fs::read_to_string(path).expect("the chart's CRD copy exists");
    assert!(
        committed == taint_operator_crd::crd_yaml(),
        "{path} differs from `taint-operator crd`: regenerate it with `just crd`"
    );
}
