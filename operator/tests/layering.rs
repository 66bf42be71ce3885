//! The operator's modules import in one direction only: commands → serving and
//! leadership → admission → controller → drains → caches → leaves (telemetry,
//! memory). (The engine is a crate of its own, so the compiler already keeps it
//! below all of these; tests/tests/import_circles.rs keeps every crate free of
//! circles.)
//!
//! Read from the source with testkit's `import_graph`.

use std::path::Path;

use taint_operator_testkit::import_graph;

/// The layer of a module, by its path under `crate`; higher layers may import lower ones.
fn layer(module: &str) -> (u8, &'static str) {
    let room = module.split("::").next().unwrap_or_default();
    match room {
        "run" | "plan" | "explain" | "live" | "crd_adopt" => (6, "commands"),
        "serve" => (5, "serve"),
        "leader" => (5, "leader"),
        "admission" => (4, "admission"),
        "controller" => (3, "controller"),
        "drain" => (2, "drain"),
        "cache" => (1, "cache"),
        "telemetry" => (0, "telemetry"),
        "memory" => (0, "memory"),
        "jitter" => (0, "jitter"),
        "api_connections" => (0, "api_connections"),
        "write_fence" => (0, "write_fence"),
        other => panic!("module {other} has no layer: add it to layering.rs and lib.rs's table"),
    }
}

fn imports() -> import_graph::Graph {
    import_graph::graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn imports_point_down_the_layers() {
    let mut wrong = Vec::new();
    for (module, deps) in imports() {
        let (from, from_room) = layer(&module);
        for dep in deps {
            let (to, to_room) = layer(&dep);
            if !(to < from || to_room == from_room) {
                wrong.push(format!("{module} ({from_room}) imports {dep} ({to_room})"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}
