//! The module import graph of a crate, read from its source, and the circles in it.
//!
//! Every `crate::` and `super::` path of a module file (`use` trees included) is
//! resolved to the module file it names. Unit tests (what follows `#[cfg(test)]`) may
//! reach anywhere and are left out. The workspace's layering tests build on this: no
//! crate may hold a circle of modules that import each other, however indirectly.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

/// Module path (`controller::context`) → the modules it imports.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// `crate::a::b::Item` (or `super::…`) paths in `source`, with use trees such as
/// `use crate::{a::{b, c::D}, e}` expanded; each path keeps its leading keyword.
pub fn paths(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = source;
    loop {
        let next = ["crate::", "super::"]
            .iter()
            .filter_map(|kw| rest.find(kw).map(|at| (at, *kw)))
            .min();
        let Some((at, keyword)) = next else { break };
        // `super::super::x` is one path, not two.
        let preceded = rest[..at].ends_with("super::");
        let tail = &rest[at + keyword.len()..];
        let (tree, used) = take_tree(tail);
        if !preceded {
            let mut expanded = Vec::new();
            expand(&tree, String::new(), &mut expanded);
            found.extend(expanded.into_iter().map(|p| format!("{keyword}{p}")));
        }
        rest = &tail[used..];
    }
    found
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
            let Some(close) = tree.rfind('}') else {
                return;
            };
            let inner = &tree[open + 1..close];
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

/// Every module file under `dir`, by module path, with its source. A `bin` folder
/// directly under the crate root holds other crates (binaries) and is skipped.
pub fn modules(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(dir, "", &mut out);
    out
}

fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{} is not readable: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if prefix.is_empty() && name == "bin" {
                continue;
            }
            walk(&path, &format!("{prefix}{name}::"), out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let module = match name.as_str() {
                "lib" | "main" if prefix.is_empty() => continue,
                "mod" => prefix.trim_end_matches("::").to_string(),
                _ => format!("{prefix}{name}"),
            };
            out.insert(module, fs::read_to_string(&path).expect("a source file"));
        }
    }
}

/// The module a crate-relative path names: its longest prefix that is a module.
fn resolve<'a>(path: &str, known: &'a BTreeMap<String, String>) -> Option<&'a str> {
    let mut candidate = path;
    loop {
        if let Some((k, _)) = known.get_key_value(candidate) {
            return Some(k);
        }
        candidate = &candidate[..candidate.rfind("::")?];
    }
}

/// `path` (starting with `crate::` or `super::`) as a crate-relative path, read
/// from inside `module`.
fn absolute(path: &str, module: &str) -> Option<String> {
    if let Some(rest) = path.strip_prefix("crate::") {
        return Some(rest.to_string());
    }
    let mut base: Vec<&str> = module.split("::").collect();
    let mut rest = path;
    while let Some(r) = rest.strip_prefix("super::") {
        base.pop()?;
        rest = r;
    }
    base.push(rest);
    Some(base.join("::"))
}

/// The import graph of the crate whose root folder is `src_dir`.
pub fn graph(src_dir: &Path) -> Graph {
    let sources = modules(src_dir);
    let mut graph = Graph::new();
    for (module, source) in &sources {
        let source = source.split("#[cfg(test)]").next().unwrap_or_default();
        let deps = paths(source)
            .iter()
            .filter_map(|p| absolute(p, module))
            .filter_map(|p| resolve(&p, &sources))
            .filter(|d| d != module && !module.starts_with(&format!("{d}::")))
            .map(str::to_string)
            .collect();
        graph.insert(module.clone(), deps);
    }
    graph
}

/// Every circle of the graph: its strongly connected components of more than one
/// module, each sorted. Empty when imports point one way only.
pub fn circles(graph: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm, recursive: module graphs are small.
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(m: &'a str, s: &mut State<'a>) {
        let i = s.index.len();
        s.index.insert(m, i);
        s.low.insert(m, i);
        s.stack.push(m);
        s.on_stack.insert(m);
        for dep in s.graph.get(m).into_iter().flatten() {
            let dep = dep.as_str();
            if !s.index.contains_key(dep) {
                visit(dep, s);
                let low = s.low[m].min(s.low[dep]);
                s.low.insert(m, low);
            } else if s.on_stack.contains(dep) {
                let low = s.low[m].min(s.index[dep]);
                s.low.insert(m, low);
            }
        }
        if s.low[m] == s.index[m] {
            let mut component = Vec::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                component.push(top.to_string());
                if top == m {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for module in graph.keys() {
        if !state.index.contains_key(module.as_str()) {
            visit(module, &mut state);
        }
    }
    state.found.sort();
    state.found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_trees_and_super_paths_expand() {
        let found = paths(
            "use crate::{\n    cache::{node_cache::CachedNode, watch::node_list_pages},\n    leader,\n};\nlet x = crate::memory::release();\nuse super::super::tls;",
        );
        assert_eq!(
            found,
            [
                "crate::cache::node_cache::CachedNode",
                "crate::cache::watch::node_list_pages",
                "crate::leader",
                "crate::memory::release",
                "super::super::tls",
            ]
        );
    }

    #[test]
    fn super_resolves_against_the_importing_module() {
        assert_eq!(
            absolute("super::http::bind", "serve::webhook").as_deref(),
            Some("serve::http::bind")
        );
        assert_eq!(
            absolute("super::super::x", "a::b::c").as_deref(),
            Some("a::x")
        );
        assert_eq!(absolute("super::x", "top"), Some("x".to_string()));
    }

    fn g(edges: &[(&str, &str)]) -> Graph {
        let mut graph = Graph::new();
        for (from, to) in edges {
            graph
                .entry(from.to_string())
                .or_default()
                .insert(to.to_string());
            graph.entry(to.to_string()).or_default();
        }
        graph
    }

    #[test]
    fn a_circle_of_five_is_found_whole() {
        let graph = g(&[
            ("selector", "policy"),
            ("policy", "drain"),
            ("drain", "decision"),
            ("decision", "policy_set"),
            ("policy_set", "selector"),
            ("cluster_plan", "policy"),
        ]);
        assert_eq!(
            circles(&graph),
            [vec![
                "decision",
                "drain",
                "policy",
                "policy_set",
                "selector"
            ]]
        );
    }

    #[test]
    fn a_one_way_graph_has_no_circle() {
        let graph = g(&[("a", "b"), ("b", "c"), ("a", "c")]);
        assert!(circles(&graph).is_empty());
    }
}
