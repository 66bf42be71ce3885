//! The operator's modules import in one direction only: commands → serving and
//! leadership → admission → controller → drains → caches → leaves (telemetry, memory), and no module
//! imports one that imports it back, however indirectly. (The engine is a crate of
//! its own, so the compiler already keeps it below all of these.)
//!
//! Read from the source: every `crate::` path in `operator/src`, `use` trees
//! included, resolved to the module file it names.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

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
        other => panic!("module {other} has no layer: add it to layering.rs and lib.rs's table"),
    }
}

/// `crate::a::b::Item` paths, with `use crate::{a::{b, c::D}, e}` trees expanded.
fn crate_paths(source: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("crate::") {
        let tail = &rest[at + "crate::".len()..];
        let (tree, used) = take_tree(tail);
        expand(&tree, String::new(), &mut paths);
        rest = &tail[used..];
    }
    paths
}

/// The path expression at the start of `s` (identifiers, `::` and balanced braces).
fn take_tree(s: &str) -> (String, usize) {
    let mut depth = 0usize;
    let mut end = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            c if c.is_alphanumeric() || c == '_' || c == ':' => {}
            c if depth > 0 && (c == ',' || c.is_whitespace()) => {}
            _ if depth > 0 => {}
            _ => break,
        }
        end = i + c.len_utf8();
    }
    (s[..end].to_string(), end)
}

fn expand(tree: &str, prefix: String, out: &mut Vec<String>) {
    let tree = tree.trim();
    match tree.find('{') {
        None => {
            let path = tree.trim_end_matches("::");
            let path = path.strip_suffix("::self").unwrap_or(path);
            out.push(format!("{prefix}{path}"));
        }
        Some(open) => {
            let head = &tree[..open];
            let inner = &tree[open + 1..tree.rfind('}').expect("balanced braces")];
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&inner[start..i], format!("{prefix}{head}"), out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            if !inner[start..].trim().is_empty() {
                expand(&inner[start..], format!("{prefix}{head}"), out);
            }
        }
    }
}

/// Every module file under `dir`, by module path (`controller::context`).
fn modules(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
    for entry in fs::read_dir(dir).expect("operator/src is readable") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            modules(&path, &format!("{prefix}{name}::"), out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let module = match name.as_str() {
                "lib" | "main" => continue,
                "mod" => prefix.trim_end_matches("::").to_string(),
                _ => format!("{prefix}{name}"),
            };
            out.insert(module, fs::read_to_string(&path).expect("a source file"));
        }
    }
}

/// The module a path names: its longest prefix that is a module.
fn resolve<'a>(path: &str, known: &'a BTreeMap<String, String>) -> Option<&'a str> {
    let mut candidate = path;
    loop {
        if let Some((k, _)) = known.get_key_value(candidate) {
            return Some(k);
        }
        candidate = &candidate[..candidate.rfind("::")?];
    }
}

fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let mut sources = BTreeMap::new();
    modules(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "",
        &mut sources,
    );
    let mut graph = BTreeMap::new();
    for (module, source) in &sources {
        // Unit tests may reach anywhere (`use super::*` aside, they rarely do).
        let source = source.split("#[cfg(test)]").next().unwrap_or_default();
        let deps: BTreeSet<String> = crate_paths(source)
            .iter()
            .filter_map(|p| resolve(p, &sources))
            .filter(|d| d != module && !module.starts_with(&format!("{d}::")))
            .map(str::to_string)
            .collect();
        graph.insert(module.clone(), deps);
    }
    graph
}

#[test]
fn the_parser_expands_use_trees() {
    let paths = crate_paths(
        "use crate::{\n    cache::{node_cache::CachedNode, watch::node_list_pages},\n    leader,\n};\nlet x = crate::memory::release();",
    );
    assert_eq!(
        paths,
        [
            "cache::node_cache::CachedNode",
            "cache::watch::node_list_pages",
            "leader",
            "memory::release"
        ]
    );
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

#[test]
fn no_module_imports_itself_back() {
    let graph = imports();
    // Depth-first search; a module met again while still on the path closes a cycle.
    fn visit<'a>(
        m: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| *p == m) {
            let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m);
        for dep in graph.get(m).into_iter().flatten() {
            if let Some(cycle) = visit(dep, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(m);
        None
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        if let Some(cycle) = visit(module, &graph, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}", cycle.join(" → "));
        }
    }
}
