//! `taint-operator plan`: the decision core on files, no cluster needed.

use std::{collections::HashSet, fmt::Write as _, path::PathBuf};

use k8s_openapi::{
    api::core::v1::{Node, Pod},
    jiff::Timestamp,
};
use serde::Serialize;
use serde_json::Value;
use taint_operator_crd::{TaintPolicy, validate_policy};

use engine::{
    cluster::{NodeView, PodIndex},
    cluster_plan::{ClusterPlan, plan_cluster},
    node_plan::UnknownPolicies,
    policy_set::PolicySet,
};

/// Bad input: one line naming the file, the object and the field.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: document {doc}: not valid YAML: {message}")]
    Yaml {
        file: String,
        doc: usize,
        message: String,
    },
    #[error("{file}: {object}: {message}")]
    Object {
        file: String,
        object: String,
        message: String,
    },
    #[error("--now {value:?}: not an RFC 3339 time (e.g. 2026-11-20T12:00:00Z)")]
    Now { value: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

pub struct PlanArgs {
    pub policy_files: Vec<PathBuf>,
    pub cluster_files: Vec<PathBuf>,
    pub now: Option<String>,
    pub output: Output,
}

/// Runs `plan` and returns what to print.
pub fn run(args: &PlanArgs) -> Result<String, InputError> {
    let now = match &args.now {
        None => Timestamp::now(),
        Some(s) => s
            .parse()
            .map_err(|_| InputError::Now { value: s.clone() })?,
    };
    let mut policies = Vec::new();
    for f in &args.policy_files {
        policies.extend(load_policies(f)?);
    }
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    for f in &args.cluster_files {
        let (n, p) = load_cluster(f)?;
        nodes.extend(n);
        pods.extend(p);
    }
    let set = PolicySet::from_resources(&policies);
    let views: Vec<NodeView> = nodes.iter().map(NodeView::from_node).collect();
    let index = PodIndex::from_pods(&pods);
    let plan = plan_cluster(&set, &views, &index, now, UnknownPolicies::Keep);
    let report = Report::new(&plan);
    Ok(match args.output {
        Output::Json => {
            serde_json::to_string_pretty(&report).expect("the report serializes") + "\n"
        }
        Output::Table => report.table(now),
    })
}

fn documents(file: &PathBuf) -> Result<Vec<Value>, InputError> {
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|source| InputError::Read {
        file: name.clone(),
        source,
    })?;
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = Value::deserialize_yaml(doc).map_err(|e| InputError::Yaml {
            file: name.clone(),
            doc: i + 1,
            message: e.to_string(),
        })?;
        match value {
            Value::Null => {}
            v if is_list(&v) => match v.get("items") {
                Some(Value::Array(items)) => docs.extend(items.iter().cloned()),
                Some(Value::Null) | None => {}
                Some(_) => {
                    return Err(InputError::Object {
                        file: name,
                        object: format!("document {}", i + 1),
                        message: "items: must be a list".into(),
                    });
                }
            },
            v => docs.push(v),
        }
    }
    Ok(docs)
}

trait DeserializeYaml: Sized {
    fn deserialize_yaml(doc: serde_yaml::Deserializer) -> Result<Self, serde_yaml::Error>;
}

impl DeserializeYaml for Value {
    fn deserialize_yaml(doc: serde_yaml::Deserializer) -> Result<Self, serde_yaml::Error> {
        serde::Deserialize::deserialize(doc)
    }
}

fn is_list(v: &Value) -> bool {
    v.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k == "List" || k.ends_with("List"))
}

fn describe(v: &Value, fallback: usize) -> String {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("object");
    match v.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) => format!("{kind}/{name}"),
        None => format!("{kind} #{fallback}"),
    }
}

fn load_policies(file: &PathBuf) -> Result<Vec<TaintPolicy>, InputError> {
    let name = file.display().to_string();
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (i, doc) in documents(file)?.into_iter().enumerate() {
        let object = describe(&doc, i + 1);
        let err = |message: String| InputError::Object {
            file: name.clone(),
            object: object.clone(),
            message,
        };
        let api_version = doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        if kind != "TaintPolicy" {
            return Err(err(format!(
                "kind: {kind:?} is not a TaintPolicy (or a List of them)"
            )));
        }
        if api_version != "nodetaint.io/v1alpha1" {
            return Err(err(format!(
                "apiVersion: {api_version:?} is not nodetaint.io/v1alpha1"
            )));
        }
        if doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(err("metadata.name: required field is missing".into()));
        }
        if let Err(errors) = validate_policy(&doc) {
            let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Err(err(all.join("; ")));
        }
        let policy: TaintPolicy = serde_path_to_error::deserialize(&doc)
            .map_err(|e| err(format!("{}: {}", e.path(), e.inner())))?;
        if !seen.insert(policy.metadata.name.clone()) {
            return Err(err("metadata.name: given twice".into()));
        }
        out.push(policy);
    }
    Ok(out)
}

fn load_cluster(file: &PathBuf) -> Result<(Vec<Node>, Vec<Pod>), InputError> {
    let name = file.display().to_string();
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    for (i, doc) in documents(file)?.into_iter().enumerate() {
        let object = describe(&doc, i + 1);
        let err = |e: serde_path_to_error::Error<serde_json::Error>| InputError::Object {
            file: name.clone(),
            object: object.clone(),
            message: format!("{}: {}", e.path(), e.inner()),
        };
        // A dump may hold other kinds (kubectl get all); only Nodes and Pods matter here.
        match doc.get("kind").and_then(Value::as_str) {
            Some("Node") => nodes.push(serde_path_to_error::deserialize(&doc).map_err(err)?),
            Some("Pod") => pods.push(serde_path_to_error::deserialize(&doc).map_err(err)?),
            _ => {}
        }
    }
    Ok((nodes, pods))
}

#[derive(Serialize)]
struct Report {
    nodes: Vec<NodeReport>,
    policies: Vec<PolicyReport>,
}

#[derive(Serialize)]
struct NodeReport {
    name: String,
    add: Vec<AddReport>,
    remove: Vec<RemoveReport>,
    reasons: Vec<String>,
}

#[derive(Serialize)]
struct AddReport {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    effect: String,
    policy: String,
}

#[derive(Serialize)]
struct RemoveReport {
    key: String,
    effect: String,
    policy: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PolicyReport {
    name: String,
    selected_nodes: usize,
    tainted_nodes: usize,
    pending_nodes: usize,
    ready: bool,
    reason: String,
    message: String,
}

impl Report {
    fn new(plan: &ClusterPlan) -> Self {
        let mut nodes: Vec<NodeReport> = plan
            .changes
            .iter()
            .flatten()
            .filter(|n| !n.added.is_empty() || !n.removed.is_empty())
            .map(|n| NodeReport {
                name: n.node.clone(),
                add: n
                    .added
                    .iter()
                    .map(|c| AddReport {
                        key: c.key.clone(),
                        value: c.value.clone(),
                        effect: c.effect.as_str().into(),
                        policy: c.policy.clone(),
                    })
                    .collect(),
                remove: n
                    .removed
                    .iter()
                    .map(|c| RemoveReport {
                        key: c.key.clone(),
                        effect: c.effect.as_str().into(),
                        policy: c.policy.clone(),
                    })
                    .collect(),
                reasons: n.reasons(),
            })
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let policies = plan
            .policies
            .iter()
            .map(|p| PolicyReport {
                name: p.name.clone(),
                selected_nodes: p.selected_nodes,
                tainted_nodes: p.tainted_nodes,
                pending_nodes: p.pending_nodes,
                ready: p.ready,
                reason: p.reason.as_str().into(),
                message: p.message.clone(),
            })
            .collect();
        Report { nodes, policies }
    }

    fn table(&self, now: Timestamp) -> String {
        let mut rows = vec![[
            "NODE".to_string(),
            "CHANGE".into(),
            "TAINT".into(),
            "POLICY".into(),
        ]];
        for n in &self.nodes {
            for a in &n.add {
                let taint = match &a.value {
                    Some(v) => format!("{}={}:{}", a.key, v, a.effect),
                    None => format!("{}:{}", a.key, a.effect),
                };
                rows.push([n.name.clone(), "add".into(), taint, a.policy.clone()]);
            }
            for r in &n.remove {
                rows.push([
                    n.name.clone(),
                    "remove".into(),
                    format!("{}:{}", r.key, r.effect),
                    r.policy.clone(),
                ]);
            }
        }
        let mut out = format!("Plan at {now}\n\n");
        if self.nodes.is_empty() {
            out.push_str("No node changes.\n");
        } else {
            out.push_str(&columns(&rows));
            out.push_str("\nWhy:\n");
            for n in &self.nodes {
                for r in &n.reasons {
                    let _ = writeln!(out, "  {}: {}", n.name, r);
                }
            }
        }
        let mut rows = vec![[
            "POLICY".to_string(),
            "SELECTED".into(),
            "TAINTED".into(),
            "PENDING".into(),
            "READY".into(),
            "REASON".into(),
            "MESSAGE".into(),
        ]];
        for p in &self.policies {
            rows.push([
                p.name.clone(),
                p.selected_nodes.to_string(),
                p.tainted_nodes.to_string(),
                p.pending_nodes.to_string(),
                if p.ready {
                    "True".into()
                } else {
                    "False".into()
                },
                p.reason.clone(),
                p.message.clone(),
            ]);
        }
        out.push('\n');
        out.push_str(&columns(&rows));
        out
    }
}

fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c + 1 == N {
                    cell.clone()
                } else {
                    format!("{cell:<w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}
