//! `taint-operator plan`: the decision core on files, no cluster needed; or, with
//! `--live`, on the cluster in KUBECONFIG with the files' policies applied on top.

use std::{collections::HashSet, fmt::Write as _, path::PathBuf};

use k8s_openapi::{
    api::core::v1::{Node, Pod},
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use serde::Serialize;
use serde_json::Value;
use taint_operator_crd::{TaintPolicy, validate_policy};

use crate::live::{Live, LiveError};
use engine::{
    admission::{refusal, warnings},
    cluster::{NodeView, PodIndex},
    cluster_plan::{ClusterPlan, plan_cluster, plan_cluster_evicted},
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
    #[error("--without {name}: there is no TaintPolicy {name} in the cluster")]
    Without { name: String },
}

/// `plan --live` fails on bad input (exit 2) or on the cluster (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Live(#[from] LiveError),
}

impl PlanError {
    pub fn exit_code(&self) -> u8 {
        match self {
            PlanError::Input(_) => 2,
            PlanError::Live(_) => 1,
        }
    }
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

/// `plan --live`: the policies of `policy_files` replace or join the cluster's;
/// `without` names cluster policies to treat as deleted.
pub struct LiveArgs {
    pub policy_files: Vec<PathBuf>,
    pub without: Vec<String>,
    pub now: Option<String>,
    pub output: Output,
}

pub fn parse_now(now: &Option<String>) -> Result<Timestamp, InputError> {
    match now {
        None => Ok(Timestamp::now()),
        Some(s) => s.parse().map_err(|_| InputError::Now { value: s.clone() }),
    }
}

/// Runs `plan` and returns what to print.
pub fn run(args: &PlanArgs) -> Result<String, InputError> {
    let now = parse_now(&args.now)?;
    let policies = load_all_policies(&args.policy_files)?;
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
    // A dump need not hold every policy: leave what unknown ones own alone.
    let plan = plan_cluster(&set, &views, &index, now, UnknownPolicies::Keep);
    let warned = said(&set, &plan, policies.iter());
    Ok(render(&plan, &warned, now, args.output))
}

/// The admission warnings of `policies` (the files' policies), each in `set` as
/// planned in `plan`: what `kubectl apply` would print for them.
fn said<'p>(
    set: &PolicySet,
    plan: &ClusterPlan,
    policies: impl IntoIterator<Item = &'p TaintPolicy>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in policies {
        let name = p.metadata.name.clone().unwrap_or_default();
        let Some(i) = set.index_of(&name) else {
            continue;
        };
        for w in warnings(set, i, plan.policies.get(i)) {
            out.push((name.clone(), w));
        }
    }
    out
}

/// Runs `plan --live` and returns what to print. The files are read first, so bad
/// input fails before the cluster is asked anything.
pub async fn run_live(args: &LiveArgs) -> Result<String, PlanError> {
    let now = parse_now(&args.now)?;
    let files = load_all_policies(&args.policy_files)?;
    let names: HashSet<String> = files
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let live = Live::connect().await?;
    let policies = with_changes(live.policies().await?, files, &args.without, now)?;
    let set = PolicySet::from_resources(&policies);
    let pods = live.pods(&set).await?;
    let nodes = live.nodes().await?;
    let in_the_way = live.pods_in_the_way(&set, &nodes).await?;
    let evicted = |node: &str, policy: &str| {
        in_the_way
            .get(&(node.to_string(), policy.to_string()))
            .is_some_and(Vec::is_empty)
    };
    // Every policy is known, as the controller knows them: what a policy that no
    // longer exists owns is removed, as the controller would.
    let refs: Vec<&NodeView> = nodes.iter().collect();
    let plan = plan_cluster_evicted(&set, &refs, &pods, now, UnknownPolicies::Remove, &evicted);
    // The files' policies are the ones being applied: theirs are the warnings.
    let applied = policies
        .iter()
        .filter(|p| p.metadata.name.as_ref().is_some_and(|n| names.contains(n)));
    let warned = said(&set, &plan, applied);
    Ok(render(&plan, &warned, now, args.output))
}

/// The cluster's policies after applying `files` and deleting `without`, as the API
/// server would have them: a file's policy replaces the cluster's of the same name
/// and keeps its identity (uid, creation time: the conflict order and the bootstrap
/// records depend on them); a new one is created now, so it is the newest. A policy
/// in `without` is being deleted, so its taints are planned for removal as its
/// finalizer would remove them.
pub fn with_changes(
    cluster: Vec<TaintPolicy>,
    files: Vec<TaintPolicy>,
    without: &[String],
    now: Timestamp,
) -> Result<Vec<TaintPolicy>, InputError> {
    let mut policies = cluster;
    for name in without {
        let Some(p) = policies
            .iter_mut()
            .find(|p| p.metadata.name.as_ref() == Some(name))
        else {
            return Err(InputError::Without { name: name.clone() });
        };
        p.metadata.deletion_timestamp.get_or_insert(Time(now));
    }
    for mut file in files {
        match policies
            .iter_mut()
            .find(|p| p.metadata.name == file.metadata.name)
        {
            Some(live) => {
                file.metadata.uid = live.metadata.uid.clone();
                file.metadata.creation_timestamp = live.metadata.creation_timestamp.clone();
                file.metadata.deletion_timestamp = live.metadata.deletion_timestamp.clone();
                *live = file;
            }
            None => {
                file.metadata.creation_timestamp = Some(Time(now));
                policies.push(file);
            }
        }
    }
    Ok(policies)
}

fn load_all_policies(files: &[PathBuf]) -> Result<Vec<TaintPolicy>, InputError> {
    let mut policies = Vec::new();
    for f in files {
        policies.extend(load_policies(f)?);
    }
    Ok(policies)
}

fn render(
    plan: &ClusterPlan,
    warned: &[(String, String)],
    now: Timestamp,
    output: Output,
) -> String {
    let mut report = Report::new(plan);
    report.warnings = warned
        .iter()
        .map(|(policy, warning)| WarningReport {
            policy: policy.clone(),
            warning: warning.clone(),
        })
        .collect();
    match output {
        Output::Json => {
            serde_json::to_string_pretty(&report).expect("the report serializes") + "\n"
        }
        Output::Table => report.table(now),
    }
}

fn documents(file: &PathBuf) -> Result<Vec<Value>, InputError> {
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|source| InputError::Read {
        file: name.clone(),
        source,
    })?;
    let values =
        serde_saphyr::from_multiple_with_options::<Value>(&text, yaml_options()).map_err(|e| {
            InputError::Yaml {
                file: name.clone(),
                doc: failed_document(&text, &e),
                message: e.to_string(),
            }
        })?;
    let mut docs = Vec::new();
    for (i, value) in values.into_iter().enumerate() {
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

/// How `plan` reads YAML: a cluster dump of thousands of nodes is far past the
/// parser's default budget (a million events, 250,000 nodes), and the input is the
/// user's own file, so only the limits against alias bombs stay. Errors are one
/// line, without a snippet of the input.
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = usize::MAX;
    budget.max_nodes = usize::MAX;
    budget.max_documents = usize::MAX;
    budget.max_total_scalar_bytes = usize::MAX;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.with_snippet = false;
    options
}

/// The number (from 1) of the document a YAML error is in: the documents that
/// start on or before the error's line, counted by the parser itself (a `---` in
/// a block scalar or a quoted string starts no document). The deserializer skips
/// empty documents, so its own count would be off after one.
fn failed_document(text: &str, error: &serde_saphyr::Error) -> usize {
    use serde_saphyr::granit_parser::{Event, Parser};
    let line = error.location().map(|l| l.line());
    let mut started = 0;
    for event in Parser::new_from_str(text) {
        let Ok((event, span)) = event else { break };
        if line.is_some_and(|line| span.start.line() as u64 > line) {
            break;
        }
        if matches!(event, Event::DocumentStart(..)) {
            started += 1;
        }
    }
    started.max(1)
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
        // What the validating webhook refuses beyond the schema (a regex that does
        // not compile), from the same code.
        if let Some(invalid) = refusal(&policy) {
            return Err(err(invalid.to_string()));
        }
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
    /// What admission would warn about the policies being planned.
    warnings: Vec<WarningReport>,
}

#[derive(Serialize)]
struct WarningReport {
    policy: String,
    warning: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeReport {
    name: String,
    add: Vec<AddReport>,
    remove: Vec<RemoveReport>,
    /// Policies whose drain of the node starts (evictions begin): `spec.eviction`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    drains_started: Vec<String>,
    /// Policies whose out-of-service taint waits for the node to be down.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    awaiting_shutdown: Vec<String>,
    reasons: Vec<String>,
}

#[derive(Serialize)]
struct AddReport {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    effect: String,
    policy: String,
    /// A drain's stand-in: the effect the taint switches to once drained.
    #[serde(skip_serializing_if = "Option::is_none")]
    then: Option<String>,
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
    draining_nodes: usize,
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
            .filter(|n| {
                !n.added.is_empty()
                    || !n.removed.is_empty()
                    || !n.drain_started.is_empty()
                    || !n.awaiting_shutdown.is_empty()
            })
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
                        then: c.then.map(|e| e.as_str().to_string()),
                    })
                    .collect(),
                drains_started: n.drain_started.clone(),
                awaiting_shutdown: n.awaiting_shutdown.clone(),
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
        // Each policy's status once the plan is applied (shared/API.md): a policy
        // whose only pending changes are in this plan is Reconciled.
        let policies = plan
            .policies_after
            .iter()
            .map(|p| PolicyReport {
                name: p.name.clone(),
                selected_nodes: p.selected_nodes,
                tainted_nodes: p.tainted_nodes,
                pending_nodes: p.pending_nodes,
                draining_nodes: p.draining_nodes,
                ready: p.ready,
                reason: p.reason.as_str().into(),
                message: p.message.clone(),
            })
            .collect();
        Report {
            nodes,
            policies,
            warnings: Vec::new(),
        }
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
                let mut taint = match &a.value {
                    Some(v) => format!("{}={}:{}", a.key, v, a.effect),
                    None => format!("{}:{}", a.key, a.effect),
                };
                if let Some(then) = &a.then {
                    let _ = write!(taint, " (then {then})");
                }
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
            for p in &n.drains_started {
                rows.push([
                    n.name.clone(),
                    "drain".into(),
                    "(evictions start)".into(),
                    p.clone(),
                ]);
            }
            for p in &n.awaiting_shutdown {
                rows.push([
                    n.name.clone(),
                    "wait".into(),
                    "(out-of-service once the node is down)".into(),
                    p.clone(),
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
            "DRAINING".into(),
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
                p.draining_nodes.to_string(),
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
        if !self.warnings.is_empty() {
            out.push_str("\nWarnings (kubectl apply prints them too):\n");
            for w in &self.warnings {
                let _ = writeln!(out, "  {}: {}", w.policy, w.warning);
            }
        }
        out
    }
}

pub(crate) fn columns<const N: usize>(rows: &[[String; N]]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use taint_operator_testkit::{NoSchedule, policy, ts};

    fn names(policies: &[TaintPolicy]) -> Vec<&str> {
        policies
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_file_policy_replaces_the_cluster_one_and_keeps_its_identity() {
        let cluster = vec![
            policy("a")
                .uid("uid-a")
                .created("2026-01-01T00:00:00Z")
                .build(),
            policy("b").build(),
        ];
        let edited = policy("a")
            .uid("")
            .created("2026-06-01T00:00:00Z")
            .taint("k", "edited", NoSchedule)
            .build();
        let now = ts("2026-11-20T12:00:00Z");
        let out = with_changes(cluster, vec![edited], &[], now).unwrap();
        assert_eq!(names(&out), ["a", "b"]);
        let a = &out[0];
        assert_eq!(a.metadata.uid.as_deref(), Some("uid-a"));
        assert_eq!(
            a.metadata.creation_timestamp.as_ref().map(|t| t.0),
            Some(ts("2026-01-01T00:00:00Z"))
        );
        assert_eq!(a.spec.taints[0].value.as_deref(), Some("edited"));
    }

    #[test]
    fn a_new_file_policy_is_created_now_so_it_is_the_newest() {
        let cluster = vec![policy("old").created("2026-01-01T00:00:00Z").build()];
        let mut new = policy("new").build();
        new.metadata.creation_timestamp = None;
        let now = ts("2026-11-20T12:00:00Z");
        let out = with_changes(cluster, vec![new], &[], now).unwrap();
        assert_eq!(names(&out), ["old", "new"]);
        assert_eq!(
            out[1].metadata.creation_timestamp.as_ref().map(|t| t.0),
            Some(now)
        );
    }

    #[test]
    fn without_marks_the_policy_deleted_and_an_unknown_name_is_an_error() {
        let cluster = vec![policy("a").build(), policy("b").build()];
        let now = ts("2026-11-20T12:00:00Z");
        let out = with_changes(cluster.clone(), vec![], &["b".into()], now).unwrap();
        assert!(out[0].metadata.deletion_timestamp.is_none());
        assert_eq!(
            out[1].metadata.deletion_timestamp.as_ref().map(|t| t.0),
            Some(now)
        );
        let err = with_changes(cluster, vec![], &["nope".into()], now).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--without nope: there is no TaintPolicy nope in the cluster"
        );
    }
}
