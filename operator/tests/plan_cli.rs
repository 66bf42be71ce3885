//! `taint-operator plan`, run as a user runs it: the shipped examples give the
//! results examples/README.md promises, every way of passing the same objects
//! gives the same plan, and bad input exits 2 with one line naming the file, the
//! object and the field.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::atomic::{AtomicUsize, Ordering},
};

use serde_json::{Value, json};

const NOW: &str = "2026-11-20T12:00:00Z";
/// 30 s after cp-1's NetworkInterfaceCard turned Ruined: nic-kaput's `for` window ends.
const WINDOW_END: &str = "2026-11-20T12:00:15Z";

const POLICY_FILES: [&str; 5] = [
    "spot-out-of-service.yaml",
    "nic-kaput.yaml",
    "startup-init-daemonset.yaml",
    "istio-cni-readiness.yaml",
    "cni-network-ready.yaml",
];

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn example(name: &str) -> PathBuf {
    examples().join(name)
}

fn policy_examples() -> Vec<PathBuf> {
    POLICY_FILES.iter().map(|f| example(f)).collect()
}

fn cluster() -> PathBuf {
    example("cluster.yaml")
}

/// `taint-operator plan` with a `-f` per policy file, a `--cluster` per dump, and `extra`.
fn plan(policies: &[PathBuf], clusters: &[PathBuf], extra: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_taint-operator"));
    cmd.arg("plan");
    for p in policies {
        cmd.arg("-f").arg(p);
    }
    for c in clusters {
        cmd.arg("--cluster").arg(c);
    }
    // A panic would print its backtrace too, which the one-line checks then catch.
    cmd.args(extra).env("RUST_BACKTRACE", "1");
    cmd.output().expect("the taint-operator binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("stderr is UTF-8")
}

/// Runs plan with `-o json`, asserts exit 0 and a quiet stderr, returns the parsed report.
fn plan_json(policies: &[PathBuf], clusters: &[PathBuf], now: &str) -> Value {
    let out = plan(policies, clusters, &["--now", now, "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "plan failed: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "stderr of a good run");
    serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("-o json prints one JSON object ({e}):\n{}", stdout(&out)))
}

/// A directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "taint-operator-plan-cli-{}-{test}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write a temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ------------------------------------------------------------ expected results

/// `(key, value, effect, policy)`
type Add = (
    &'static str,
    Option<&'static str>,
    &'static str,
    &'static str,
);
/// `(key, effect, policy)`
type Remove = (&'static str, &'static str, &'static str);

struct NodeChanges {
    name: &'static str,
    add: Vec<Add>,
    remove: Vec<Remove>,
}

const NIC: &str = "example.com/network-unavailable";
const ISTIO: &str = "cni.istio.io/not-ready";
const NETWORK: &str = "readiness.k8s.io/network-unavailable";
const STARTUP: &str = "startup-taint.cluster-autoscaler.kubernetes.io/initializing";
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
const SPOT_DRAIN: &str = "nodetaint.io/spot-preempted";
/// nic-kaput's NoExecute taint goes on through a drain: NoSchedule first.
const STAND_IN: &str = "NoSchedule then NoExecute";

/// examples/README.md, "All five together, per node", at 12:00:00.
fn expected_nodes() -> Vec<NodeChanges> {
    vec![
        NodeChanges {
            name: "od-1",
            add: vec![],
            remove: vec![(NIC, "NoSchedule", "nic-kaput")],
        },
        NodeChanges {
            name: "od-2",
            add: vec![(NIC, None, STAND_IN, "nic-kaput")],
            remove: vec![],
        },
        NodeChanges {
            name: "od-4",
            add: vec![
                (
                    STARTUP,
                    Some("wait"),
                    "NoSchedule",
                    "startup-init-daemonset",
                ),
                (ISTIO, None, "NoSchedule", "istio-cni-readiness"),
                (NETWORK, None, "NoSchedule", "cni-network-ready"),
            ],
            remove: vec![],
        },
        NodeChanges {
            name: "od-5",
            add: vec![],
            remove: vec![
                (STARTUP, "NoSchedule", "startup-init-daemonset"),
                (ISTIO, "NoSchedule", "istio-cni-readiness"),
                (NETWORK, "NoSchedule", "cni-network-ready"),
            ],
        },
        NodeChanges {
            name: "od-6",
            add: vec![
                (NIC, None, STAND_IN, "nic-kaput"),
                (NETWORK, None, "NoSchedule", "cni-network-ready"),
            ],
            remove: vec![],
        },
        // Ready=True: drained while it runs; out-of-service waits for it to be down.
        NodeChanges {
            name: "spot-1",
            add: vec![(
                SPOT_DRAIN,
                Some("notice"),
                STAND_IN,
                "spot-preemption-drain",
            )],
            remove: vec![],
        },
        NodeChanges {
            name: "spot-2",
            add: vec![],
            remove: vec![(OUT_OF_SERVICE, "NoExecute", "spot-out-of-service")],
        },
        NodeChanges {
            name: "spot-3",
            add: vec![],
            remove: vec![(ISTIO, "NoSchedule", "istio-cni-readiness")],
        },
    ]
}

/// `(name, selected, tainted, pending)` from examples/README.md at 12:00:00.
fn expected_policies() -> Vec<(&'static str, u64, u64, u64)> {
    vec![
        ("spot-preemption-drain", 3, 1, 0),
        ("spot-out-of-service", 3, 0, 1),
        ("nic-kaput", 10, 2, 0),
        ("startup-init-daemonset", 9, 1, 0),
        ("istio-cni-readiness", 10, 1, 0),
        ("cni-network-ready", 9, 2, 0),
    ]
}

fn str_field<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{field} is a string in {v}"))
}

fn u64_field(v: &Value, field: &str) -> u64 {
    v.get(field)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{field} is a count in {v}"))
}

fn node<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["nodes"]
        .as_array()
        .expect("nodes is a list")
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("node {name} is in the plan: {report:#}"))
}

fn policy<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["policies"]
        .as_array()
        .expect("policies is a list")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("policy {name} is in the plan: {report:#}"))
}

fn adds(node: &Value) -> Vec<(String, Option<String>, String, String)> {
    let mut adds: Vec<_> = node["add"]
        .as_array()
        .expect("add is a list")
        .iter()
        .map(|a| {
            for k in a.as_object().expect("an add is an object").keys() {
                assert!(
                    ["key", "value", "effect", "policy", "then"].contains(&k.as_str()),
                    "unexpected field {k} in {a}"
                );
            }
            // A drain's stand-in reads `NoSchedule then NoExecute`.
            let effect = match a.get("then") {
                Some(then) => format!(
                    "{} then {}",
                    str_field(a, "effect"),
                    then.as_str().expect("then is a string")
                ),
                None => str_field(a, "effect").to_string(),
            };
            (
                str_field(a, "key").to_string(),
                a.get("value")
                    .map(|v| v.as_str().expect("value is a string").to_string()),
                effect,
                str_field(a, "policy").to_string(),
            )
        })
        .collect();
    adds.sort();
    adds
}

fn removes(node: &Value) -> Vec<(String, String, String)> {
    let mut removes: Vec<_> = node["remove"]
        .as_array()
        .expect("remove is a list")
        .iter()
        .map(|r| {
            (
                str_field(r, "key").to_string(),
                str_field(r, "effect").to_string(),
                str_field(r, "policy").to_string(),
            )
        })
        .collect();
    removes.sort();
    removes
}

/// Asserts the report's nodes are exactly `expected`, taint by taint.
fn assert_nodes(report: &Value, expected: &[NodeChanges]) {
    let mut names: Vec<&str> = report["nodes"]
        .as_array()
        .expect("nodes is a list")
        .iter()
        .map(|n| str_field(n, "name"))
        .collect();
    names.sort();
    let mut want: Vec<&str> = expected.iter().map(|n| n.name).collect();
    want.sort();
    assert_eq!(names, want, "the nodes with something to change");
    for e in expected {
        let n = node(report, e.name);
        let mut want_add: Vec<_> = e
            .add
            .iter()
            .map(|(k, v, eff, p)| {
                (
                    k.to_string(),
                    v.map(str::to_string),
                    eff.to_string(),
                    p.to_string(),
                )
            })
            .collect();
        want_add.sort();
        assert_eq!(adds(n), want_add, "taints to add on {}", e.name);
        let mut want_remove: Vec<_> = e
            .remove
            .iter()
            .map(|(k, eff, p)| (k.to_string(), eff.to_string(), p.to_string()))
            .collect();
        want_remove.sort();
        assert_eq!(removes(n), want_remove, "taints to remove on {}", e.name);
        // Every change says why, naming its policy.
        let reasons: Vec<&str> = n["reasons"]
            .as_array()
            .expect("reasons is a list")
            .iter()
            .map(|r| r.as_str().expect("a reason is a string"))
            .collect();
        for policy in e
            .add
            .iter()
            .map(|a| a.3)
            .chain(e.remove.iter().map(|r| r.2))
        {
            assert!(
                reasons
                    .iter()
                    .any(|r| r.starts_with(&format!("{policy}: "))),
                "{}: no reason for {policy} in {reasons:?}",
                e.name
            );
        }
    }
}

/// Asserts the policy summaries: counts, and the status once the plan is applied.
fn assert_policies(report: &Value, expected: &[(&str, u64, u64, u64)]) {
    let policies = report["policies"].as_array().expect("policies is a list");
    assert_eq!(policies.len(), expected.len(), "one entry per policy");
    for &(name, selected, tainted, pending) in expected {
        let p = policy(report, name);
        assert_eq!(
            u64_field(p, "selectedNodes"),
            selected,
            "{name} selectedNodes"
        );
        assert_eq!(u64_field(p, "taintedNodes"), tainted, "{name} taintedNodes");
        assert_eq!(u64_field(p, "pendingNodes"), pending, "{name} pendingNodes");
        // The status once the plan is applied: converged, but nic-kaput's nodes stay
        // NoSchedule until their drains allow NoExecute.
        let (ready, reason) = match name {
            "nic-kaput" | "spot-preemption-drain" => (false, "Draining"),
            // spot-1 reports Ready=True: out-of-service waits for it to be down.
            "spot-out-of-service" => (false, "AwaitingShutdown"),
            _ => (true, "Reconciled"),
        };
        assert_eq!(p["ready"], json!(ready), "{name} ready");
        assert_eq!(str_field(p, "reason"), reason, "{name} reason");
        let counts = format!("{tainted} of {selected} selected nodes tainted");
        assert!(
            str_field(p, "message").contains(&counts),
            "{name} message {:?} should say {counts:?}",
            p["message"]
        );
    }
}

// ------------------------------------------------------------ the examples

#[test]
fn examples_plan_as_the_readme_says() {
    let report = plan_json(&policy_examples(), &[cluster()], NOW);
    assert_nodes(&report, &expected_nodes());
    assert_policies(&report, &expected_policies());
    // No out-of-service on a node whose kubelet reports Ready=True: spot-1 waits.
    assert_eq!(
        node(&report, "spot-1")["awaitingShutdown"],
        json!(["spot-out-of-service"])
    );
    assert!(
        node(&report, "spot-1")["reasons"]
            .to_string()
            .contains("spot-out-of-service: condition SpotInterruption=True matched; node.kubernetes.io/out-of-service waits until the node is down"),
        "{}",
        node(&report, "spot-1")["reasons"]
    );

    // The reasons carry the facts the README gives for each change.
    let reasons = |name: &str| node(&report, name)["reasons"].to_string();
    assert!(
        reasons("od-2").contains("PrivateLink=Down"),
        "{}",
        reasons("od-2")
    );
    assert!(
        reasons("od-6").contains("NetworkInterfaceCard=Kaput"),
        "{}",
        reasons("od-6")
    );
    assert!(
        reasons("od-4").contains("node-init-dld49"),
        "{}",
        reasons("od-4")
    );
    assert!(
        reasons("od-4").contains("istio-cni-node-btrmb"),
        "{}",
        reasons("od-4")
    );
    assert!(
        reasons("od-4").contains("example.net/NetworkReady"),
        "{}",
        reasons("od-4")
    );
    assert!(
        reasons("spot-1").contains("SpotInterruption=True"),
        "{}",
        reasons("spot-1")
    );
}

#[test]
fn each_example_alone_gives_its_own_part_of_the_plan() {
    // No two examples share a taint, so planned alone each gives exactly its own rows.
    for (file, names) in [
        (
            "spot-out-of-service.yaml",
            &["spot-preemption-drain", "spot-out-of-service"][..],
        ),
        ("nic-kaput.yaml", &["nic-kaput"]),
        ("startup-init-daemonset.yaml", &["startup-init-daemonset"]),
        ("istio-cni-readiness.yaml", &["istio-cni-readiness"]),
        ("cni-network-ready.yaml", &["cni-network-ready"]),
    ] {
        let report = plan_json(&[example(file)], &[cluster()], NOW);
        let expected: Vec<NodeChanges> = expected_nodes()
            .into_iter()
            .map(|n| NodeChanges {
                name: n.name,
                add: n.add.into_iter().filter(|a| names.contains(&a.3)).collect(),
                remove: n
                    .remove
                    .into_iter()
                    .filter(|r| names.contains(&r.2))
                    .collect(),
            })
            .filter(|n| !n.add.is_empty() || !n.remove.is_empty())
            .collect();
        assert_nodes(&report, &expected);
        let counts: Vec<_> = expected_policies()
            .into_iter()
            .filter(|p| names.contains(&p.0))
            .collect();
        assert_policies(&report, &counts);
    }
}

#[test]
fn table_output_lists_every_change_and_policy() {
    let out = plan(&policy_examples(), &[cluster()], &["--now", NOW]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let table = stdout(&out);
    for n in expected_nodes() {
        for (key, _, effect, policy) in &n.add {
            // The table says `NoSchedule (then NoExecute)` for a drain's stand-in.
            let effect = match effect.split_once(" then ") {
                Some((now, then)) => format!("{now} (then {then})"),
                None => effect.to_string(),
            };
            assert!(
                table.lines().any(|l| l.contains(n.name)
                    && l.contains(" add ")
                    && l.contains(key)
                    && l.contains(&effect)
                    && l.contains(policy)),
                "no add row for {key} on {}:\n{table}",
                n.name
            );
        }
        for (key, effect, policy) in &n.remove {
            assert!(
                table.lines().any(|l| l.contains(n.name)
                    && l.contains(" remove ")
                    && l.contains(&format!("{key}:{effect}"))
                    && l.contains(policy)),
                "no remove row for {key} on {}:\n{table}",
                n.name
            );
        }
    }
    // Nodes with nothing to change are left out.
    for unchanged in ["cp-1", "od-3"] {
        assert!(
            !table.lines().any(|l| l.starts_with(unchanged)),
            "{unchanged} has nothing to change:\n{table}"
        );
    }
    for (name, selected, tainted, pending) in expected_policies() {
        assert!(
            table.lines().any(|l| {
                let cells: Vec<&str> = l.split_whitespace().take(4).collect();
                let want = [
                    name.to_string(),
                    selected.to_string(),
                    tainted.to_string(),
                    pending.to_string(),
                ];
                cells == want
            }),
            "no summary row for {name}:\n{table}"
        );
    }
}

// ------------------------------------------------------------ ways to pass the input

/// Each example file as a JSON value.
fn example_objects() -> Vec<Value> {
    policy_examples()
        .iter()
        .flat_map(|p| {
            let text = std::fs::read_to_string(p).expect("read an example");
            serde_saphyr::from_multiple::<Value>(&text).expect("an example is YAML")
        })
        .collect()
}

#[test]
fn many_files_one_multi_document_file_and_a_list_give_the_same_plan() {
    let dir = TempDir::new("forms");
    let separate = plan_json(&policy_examples(), &[cluster()], NOW);

    let multi_doc: Vec<String> = policy_examples()
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("read an example"))
        .collect();
    let multi_doc = dir.write("all.yaml", &multi_doc.join("\n---\n"));
    let from_multi_doc = plan_json(&[multi_doc], &[cluster()], NOW);
    assert_eq!(from_multi_doc, separate, "one file, five documents");

    let list = json!({"apiVersion": "v1", "kind": "List", "items": example_objects()});
    let list = dir.write("list.yaml", &serde_saphyr::to_string(&list).expect("YAML"));
    let from_list = plan_json(std::slice::from_ref(&list), &[cluster()], NOW);
    assert_eq!(from_list, separate, "one kind: List");

    // A mix: a List, then a file of two documents.
    let objects = example_objects();
    let head = json!({"apiVersion": "v1", "kind": "List", "items": objects[..3]});
    let head = dir.write("head.yaml", &serde_saphyr::to_string(&head).expect("YAML"));
    let tail: Vec<String> = objects[3..]
        .iter()
        .map(|o| serde_saphyr::to_string(o).expect("YAML"))
        .collect();
    let tail = tail.join("---\n");
    let tail = dir.write("tail.yaml", &tail);
    assert_eq!(
        plan_json(&[head, tail], &[cluster()], NOW),
        separate,
        "a List and two documents"
    );

    // --cluster more than once: the Nodes in one dump, the Pods in another.
    let dump: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(cluster()).expect("read the dump"))
            .expect("the dump is YAML");
    let items = dump["items"].as_array().expect("the dump is a List");
    let of_kind = |kind: &str| {
        let items: Vec<&Value> = items.iter().filter(|i| i["kind"] == kind).collect();
        json!({"apiVersion": "v1", "kind": "List", "items": items})
    };
    let nodes = dir.write(
        "nodes.yaml",
        &serde_saphyr::to_string(&of_kind("Node")).expect("YAML"),
    );
    let pods = dir.write(
        "pods.yaml",
        &serde_saphyr::to_string(&of_kind("Pod")).expect("YAML"),
    );
    assert_eq!(
        plan_json(&[list], &[nodes, pods], NOW),
        separate,
        "Nodes and Pods in separate dumps"
    );
}

#[test]
fn the_for_window_ending_adds_cp_1() {
    // cp-1 has been Ruined since 11:59:45: at 12:00:15 that is the 30 s nic-kaput asks for.
    let report = plan_json(&policy_examples(), &[cluster()], WINDOW_END);
    let mut expected = expected_nodes();
    expected.push(NodeChanges {
        name: "cp-1",
        add: vec![(NIC, None, STAND_IN, "nic-kaput")],
        remove: vec![],
    });
    assert_nodes(&report, &expected);
    let policies: Vec<_> = expected_policies()
        .into_iter()
        .map(|p| {
            if p.0 == "nic-kaput" {
                ("nic-kaput", 10, 3, 0)
            } else {
                p
            }
        })
        .collect();
    assert_policies(&report, &policies);
    assert!(
        node(&report, "cp-1")["reasons"]
            .to_string()
            .contains("NetworkInterfaceCard=Ruined for 30s"),
        "{}",
        node(&report, "cp-1")["reasons"]
    );

    // One second earlier the window is still running.
    let before = plan_json(&policy_examples(), &[cluster()], "2026-11-20T12:00:14Z");
    assert_nodes(&before, &expected_nodes());
}

// ------------------------------------------------------------ bad input

const GOOD_POLICY: &str = "\
apiVersion: nodetaint.io/v1alpha1
kind: TaintPolicy
metadata:
  name: bad
spec:
  taints:
    - key: example.com/broken
      effect: NoSchedule
  matchers:
    - conditions:
        - type: Ready
          status: \"False\"
";

/// `GOOD_POLICY` with `from` replaced by `to` (which must occur).
fn edited(from: &str, to: &str) -> String {
    assert!(GOOD_POLICY.contains(from), "{from:?} is in the policy");
    GOOD_POLICY.replacen(from, to, 1)
}

/// Runs plan and asserts exit 2 with one line on stderr containing every `needle`.
fn assert_refused(policies: &[PathBuf], clusters: &[PathBuf], extra: &[&str], needles: &[&str]) {
    let mut args = extra.to_vec();
    if !args.contains(&"--now") {
        args.extend(["--now", NOW]);
    }
    let out = plan(policies, clusters, &args);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "bad input exits 2; stderr: {err}"
    );
    assert_eq!(stdout(&out), "", "nothing on stdout");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "a panic is not an error message: {err}"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {err}");
    for needle in needles {
        assert!(lines[0].contains(needle), "{needle:?} is named in: {err}");
    }
}

#[test]
fn a_good_policy_file_is_accepted() {
    // The base the bad inputs below are edited from must itself be fine.
    let dir = TempDir::new("good");
    let good = dir.write("good.yaml", GOOD_POLICY);
    let report = plan_json(&[good], &[cluster()], NOW);
    assert_eq!(str_field(policy(&report, "bad"), "reason"), "Reconciled");
}

#[test]
fn unreadable_files_are_named() {
    let dir = TempDir::new("unreadable");
    let missing = dir.0.join("missing.yaml");
    assert_refused(
        std::slice::from_ref(&missing),
        &[cluster()],
        &[],
        &["missing.yaml", "cannot read"],
    );
    assert_refused(
        &[example("nic-kaput.yaml")],
        &[missing],
        &[],
        &["missing.yaml", "cannot read"],
    );
    // A directory is not a file to read either.
    assert_refused(
        std::slice::from_ref(&dir.0),
        &[cluster()],
        &[],
        &[&dir.0.display().to_string(), "cannot read"],
    );
}

#[test]
fn yaml_syntax_errors_name_the_file_document_and_line() {
    let dir = TempDir::new("syntax");
    let text = format!("{GOOD_POLICY}---\napiVersion: v1\nmetadata: {{name: [oops\n");
    let file = dir.write("syntax.yaml", &text);
    assert_refused(
        std::slice::from_ref(&file),
        &[cluster()],
        &[],
        &["syntax.yaml", "document 2", "not valid YAML", "line"],
    );
    // The same in a cluster dump.
    assert_refused(
        &[example("nic-kaput.yaml")],
        &[file],
        &[],
        &["syntax.yaml", "document 2", "not valid YAML"],
    );
}

#[test]
fn yaml_errors_count_empty_documents_and_no_separator_inside_a_block_scalar() {
    let dir = TempDir::new("documents");
    // Document 1 holds a `---` line inside a literal block, document 2 is empty,
    // document 3 is the policy, and the error is in document 4.
    let text = format!(
        "kind: List\nitems: []\nnote: |\n  ---\n  not a separator\n---\n---\n{GOOD_POLICY}---\nkind: [oops\n"
    );
    let file = dir.write("counted.yaml", &text);
    assert_refused(
        &[file],
        &[cluster()],
        &[],
        &["counted.yaml", "document 4", "not valid YAML", "line 21"],
    );
}

#[test]
fn other_kinds_in_policy_files_are_refused() {
    let dir = TempDir::new("kind");
    let text = format!(
        "{GOOD_POLICY}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: b\n"
    );
    let file = dir.write("mixed.yaml", &text);
    assert_refused(
        &[file],
        &[cluster()],
        &[],
        &[
            "mixed.yaml",
            "ConfigMap/settings",
            "kind",
            "not a TaintPolicy",
        ],
    );
}

#[test]
fn invalid_policies_are_refused_naming_the_field() {
    let dir = TempDir::new("invalid");
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "unknown-field",
            edited("  taints:", "  colour: red\n  taints:"),
            vec!["TaintPolicy/bad", "spec.colour", "unknown field"],
        ),
        (
            "bad-effect",
            edited("effect: NoSchedule", "effect: NoWay"),
            vec!["TaintPolicy/bad", "spec.taints[0].effect", "NoWay"],
        ),
        (
            "duplicate-taint",
            edited(
                "  matchers:",
                "    - key: example.com/broken\n      value: again\n      effect: NoSchedule\n  matchers:",
            ),
            vec!["TaintPolicy/bad", "spec.taints", "unique by key+effect"],
        ),
        (
            "neither",
            GOOD_POLICY[..GOOD_POLICY.find("  matchers:").expect("matchers")].to_string(),
            vec!["TaintPolicy/bad", "spec", "matchers", "readiness"],
        ),
        (
            "bad-for",
            edited(
                "status: \"False\"",
                "status: \"False\"\n          for: 30 seconds",
            ),
            vec!["TaintPolicy/bad", "spec.matchers[0].conditions[0].for"],
        ),
        (
            "bad-percent",
            format!("{GOOD_POLICY}  maxTaintedNodes: \"150%\"\n"),
            vec!["TaintPolicy/bad", "spec.maxTaintedNodes"],
        ),
        (
            "bad-operator",
            edited(
                "  taints:",
                "  nodeSelector:\n    matchExpressions:\n      - {key: zone, operator: Near, values: [a]}\n  taints:",
            ),
            vec![
                "TaintPolicy/bad",
                "spec.nodeSelector.matchExpressions[0].operator",
                "Near",
            ],
        ),
        (
            "api-version",
            edited("nodetaint.io/v1alpha1", "nodetaint.io/v1"),
            vec!["TaintPolicy/bad", "apiVersion", "nodetaint.io/v1"],
        ),
        (
            "no-name",
            edited("  name: bad", "  labels: {team: network}"),
            vec!["TaintPolicy", "metadata.name"],
        ),
    ];
    for (name, text, needles) in cases {
        let file = dir.write(&format!("{name}.yaml"), &text);
        let mut needles = needles;
        let file_name = format!("{name}.yaml");
        needles.push(&file_name);
        assert_refused(&[file], &[cluster()], &[], &needles);
    }
}

#[test]
fn a_bad_policy_among_good_ones_is_named_by_its_own_name() {
    let dir = TempDir::new("second");
    let second = edited("  name: bad", "  name: second").replace("NoSchedule", "Never");
    let file = dir.write(
        "two.yaml",
        &format!("{}---\n{second}", edited("bad", "first")),
    );
    assert_refused(
        &[example("nic-kaput.yaml"), file],
        &[cluster()],
        &[],
        &["two.yaml", "TaintPolicy/second", "spec.taints[0].effect"],
    );
}

#[test]
fn a_node_with_a_field_of_the_wrong_type_is_refused() {
    let dir = TempDir::new("node");
    let dump = "\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: n1
  spec:
    taints: not-a-list
";
    let file = dir.write("dump.yaml", dump);
    assert_refused(
        &[example("nic-kaput.yaml")],
        &[cluster(), file],
        &[],
        &["dump.yaml", "Node/n1", "spec.taints"],
    );
}

#[test]
fn a_bad_now_is_refused() {
    assert_refused(
        &[example("nic-kaput.yaml")],
        &[cluster()],
        &["--now", "yesterday"],
        &["--now", "yesterday", "RFC 3339"],
    );
}

// ------------------------------------------------------------ invalid regex

#[test]
fn an_invalid_regex_is_refused_as_the_webhook_refuses_it() {
    // The schema accepts any string as a regex; the operator's validating webhook
    // refuses this one, and plan refuses it the same way, from the same code.
    let dir = TempDir::new("regex");
    let broken = dir.write(
        "broken-regex.yaml",
        "\
apiVersion: nodetaint.io/v1alpha1
kind: TaintPolicy
metadata:
  name: broken-regex
  creationTimestamp: \"2026-09-01T00:00:00Z\"
spec:
  taints:
    - key: example.com/broken-regex
      effect: NoExecute
  matchers:
    - conditions:
        - type: NetworkInterfaceCard
          status: \"(Kaput\"
    - conditions:
        - type: PrivateLink
          status: Down
  readiness:
    conditions:
      - type: example.net/NetworkReady
        status: \"True\"
",
    );
    let mut files = policy_examples();
    files.push(broken);
    assert_refused(
        &files,
        &[cluster()],
        &[],
        &[
            "broken-regex.yaml",
            "TaintPolicy/broken-regex",
            "spec.matchers[0].conditions[0].status: invalid regex \"(Kaput\"",
        ],
    );
}

#[test]
fn the_files_policies_get_the_webhooks_warnings() {
    let report = plan_json(&policy_examples(), &[cluster()], NOW);
    let warnings: Vec<(String, String)> = report["warnings"]
        .as_array()
        .expect("warnings is a list")
        .iter()
        .map(|w| {
            (
                str_field(w, "policy").to_string(),
                str_field(w, "warning").to_string(),
            )
        })
        .collect();
    let of = |policy: &str| -> Vec<&str> {
        warnings
            .iter()
            .filter(|(p, _)| p == policy)
            .map(|(_, w)| w.as_str())
            .collect()
    };
    assert_eq!(
        of("nic-kaput"),
        ["impact: would taint 2 of 10 selected nodes now (od-2, od-6)"]
    );
    // out-of-service needs no eviction warning, but says it waits for a node that is down.
    assert_eq!(
        of("spot-out-of-service"),
        [
            "impact: would taint 0 of 3 selected nodes now; 1 more once they are down (out-of-service)",
            "spec.taints[0] (node.kubernetes.io/out-of-service): force-detaches volumes, so it goes on only once the node's kubelet stops reporting Ready, never on a running node; drain first with another taint (examples/spot-out-of-service.yaml)",
        ]
    );
    assert_eq!(
        of("spot-preemption-drain"),
        ["impact: would taint 1 of 3 selected nodes now (spot-1)"]
    );
    // A startup prefix: no autoscaler warning.
    assert!(
        of("startup-init-daemonset")
            .iter()
            .all(|w| w.starts_with("impact: ")),
        "{warnings:?}"
    );
    // Only Istio's fixed key and the out-of-service taint earn a warning beyond the impact lines.
    let beyond_impact: Vec<&(String, String)> = warnings
        .iter()
        .filter(|(_, w)| !w.starts_with("impact: "))
        .collect();
    assert!(
        beyond_impact
            .iter()
            .all(|(p, _)| p == "istio-cni-readiness" || p == "spot-out-of-service"),
        "{beyond_impact:?}"
    );
    // Karpenter's prefix: no autoscaler warning.
    assert_eq!(
        of("cni-network-ready"),
        ["impact: would taint 2 of 9 selected nodes now (od-4, od-6)"]
    );
    assert!(
        of("istio-cni-readiness").iter().any(|w| w.starts_with(
            "spec.taints[0] (cni.istio.io/not-ready): a readiness taint without a startup prefix"
        )),
        "{warnings:?}"
    );
    let table = stdout(&plan(&policy_examples(), &[cluster()], &["--now", NOW]));
    assert!(
        table.contains("Warnings (kubectl apply prints them too):\n")
            && table.contains(
                "  nic-kaput: impact: would taint 2 of 10 selected nodes now (od-2, od-6)\n"
            ),
        "{table}"
    );
}
