//! No crate of the workspace holds a circle of modules that import each other,
//! however indirectly: shared types live below the modules that use them, so each
//! module can be read, tested and changed from the bottom up.

use std::path::{Path, PathBuf};

use taint_operator_testkit::import_graph::{circles, graph};

/// Every module tree of the workspace: each crate's library and each binary folder.
fn roots() -> Vec<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut roots: Vec<PathBuf> = ["crd", "engine", "operator", "testkit", "tests", "e2e"]
        .iter()
        .map(|c| workspace.join(c).join("src"))
        .collect();
    for krate in ["operator", "e2e"] {
        let bins = workspace.join(krate).join("src").join("bin");
        if let Ok(entries) = std::fs::read_dir(&bins) {
            roots.extend(
                entries
                    .map(|e| e.expect("a directory entry").path())
                    .filter(|p| p.is_dir()),
            );
        }
    }
    roots
}

#[test]
fn no_crate_holds_an_import_circle() {
    let mut found = Vec::new();
    for root in roots() {
        for circle in circles(&graph(&root)) {
            found.push(format!("{}: {}", root.display(), circle.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules that import each other, however indirectly:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_crate_is_looked_at() {
    let roots = roots();
    assert!(roots.iter().any(|r| r.ends_with("engine/src")));
    assert!(
        roots.iter().any(|r| r.ends_with("bin/scale")),
        "the scale harness's modules: {roots:?}"
    );
}
