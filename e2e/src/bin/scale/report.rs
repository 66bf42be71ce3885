//! The report: targets and ratios to the baseline, the Markdown tables and the
//! JSON, all computed from the phases after the run.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::{
    Args,
    model::Critical,
    operator_proc::OpMetrics,
    phase::{PhaseResult, median, percentile},
    procfs::Machine,
    setup::SetupStep,
};

pub(crate) struct Report {
    pub(crate) args: Args,
    pub(crate) machine: Machine,
    pub(crate) node_json_bytes: usize,
    pub(crate) critical: Critical,
    pub(crate) policies: Vec<String>,
    pub(crate) operator_bin: PathBuf,
    pub(crate) operator_log: PathBuf,
    pub(crate) operator_version: String,
    pub(crate) leader_election: bool,
    pub(crate) setup: Vec<SetupStep>,
    pub(crate) phases: Vec<PhaseResult>,
    pub(crate) operator_ready_secs: Option<f64>,
    pub(crate) quiet: Option<PhaseResult>,
    pub(crate) peak_rss_kib: Option<u64>,
    pub(crate) settled_rss_kib: Option<u64>,
    pub(crate) total_cpu_secs: Option<f64>,
    pub(crate) final_check: Vec<String>,
    pub(crate) policy_status: Vec<Value>,
    pub(crate) error: Option<String>,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

pub(crate) struct Target {
    what: String,
    measured: String,
    pub(crate) ok: bool,
}

impl Report {
    /// Median time and median p99 latency of a runner's rounds of a phase.
    fn medians(&self, runner: &str, kind: &str) -> Option<(f64, f64)> {
        self.medians_of(|p| p.runner == runner && p.kind == kind)
    }

    /// Median time and median p99 latency of the phases `which` picks.
    fn medians_of(&self, which: impl Fn(&PhaseResult) -> bool) -> Option<(f64, f64)> {
        let rounds: Vec<&PhaseResult> = self.phases.iter().filter(|p| which(p)).collect();
        if rounds.is_empty() {
            return None;
        }
        let median =
            |f: &dyn Fn(&PhaseResult) -> f64| median(rounds.iter().map(|p| f(p)).collect());
        Some((
            median(&|p| p.secs),
            median(&|p| percentile(&p.latencies_ms, 99.0)),
        ))
    }

    /// The operator's medians over the baseline's: (time, p99 latency).
    fn ratio(&self, kind: &str) -> Option<(f64, f64)> {
        let (op_secs, op_p99) = self.medians("operator", kind)?;
        let (base_secs, base_p99) = self.medians("baseline", kind)?;
        Some((op_secs / base_secs.max(1e-9), op_p99 / base_p99.max(1e-9)))
    }

    /// One operator phase over the baseline's median: (time, p99 latency).
    fn row_ratio(&self, p: &PhaseResult) -> Option<(f64, f64)> {
        if p.runner != "operator" {
            return None;
        }
        let (base_secs, base_p99) = self.medians("baseline", &p.kind)?;
        Some((
            p.secs / base_secs.max(1e-9),
            percentile(&p.latencies_ms, 99.0) / base_p99.max(1e-9),
        ))
    }

    fn operator_requests_total(&self) -> OpMetrics {
        let mut all = OpMetrics::default();
        for p in self
            .phases
            .iter()
            .filter(|p| p.runner == "operator")
            .chain(self.quiet.iter())
        {
            for (k, v) in &p.requests.requests {
                *all.requests.entry(k.clone()).or_default() += v;
            }
            all.node_writes += p.node_writes;
        }
        all
    }

    pub(crate) fn targets(&self) -> Vec<Target> {
        let mut t = Vec::new();
        let r = self.args.rounds;
        let base = self
            .phases
            .iter()
            .filter(|p| p.runner == "baseline")
            .count()
            / 2;
        let medians = format!(" (medians of {r} operator and {base} baseline rounds)");
        for name in ["taint", "untaint"] {
            if let Some((time, p99)) = self.ratio(name) {
                t.push(Target {
                    what: format!("{name} phase time ≤ 1.2× baseline{medians}"),
                    measured: format!("{time:.2}×"),
                    ok: time <= 1.2,
                });
                t.push(Target {
                    what: format!("{name} p99 latency ≤ 1.5× baseline{medians}"),
                    measured: format!("{p99:.2}×"),
                    ok: p99 <= 1.5,
                });
            }
        }
        if let Some(s) = self.settled_rss_kib {
            t.push(Target {
                what: "settled RSS ≤ 48 MiB".into(),
                measured: format!("{:.1} MiB", mib(s)),
                ok: mib(s) <= 48.0,
            });
        }
        for p in self.phases.iter().filter(|p| p.runner == "operator") {
            let per = p.node_writes / p.transitions.max(1) as f64;
            t.push(Target {
                what: format!("{}: one write per node transition", p.name),
                measured: format!(
                    "{} writes / {} transitions = {per:.3} ({} conflicts)",
                    p.node_writes, p.transitions, p.conflicts
                ),
                ok: p.node_writes == p.transitions as f64,
            });
        }
        if let Some(q) = &self.quiet {
            t.push(Target {
                what: format!("no writes in the quiet {} s", self.args.quiet_secs),
                measured: format!(
                    "{} node writes, {} status writes",
                    q.node_writes, q.requests.status_writes
                ),
                ok: q.node_writes == 0.0 && q.requests.status_writes == 0.0,
            });
        }
        let all = self.operator_requests_total();
        let bad: f64 = all
            .requests
            .iter()
            .filter(|((_, _, code), _)| code == "429" || code.starts_with('5') || code == "error")
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b);
        t.push(Target {
            what: "no 5xx, 429 (throttling) or transport errors".into(),
            measured: format!("{bad}"),
            ok: bad == 0.0,
        });
        t
    }

    pub(crate) fn markdown(&self) -> String {
        let a = &self.args;
        let m = &self.machine;
        let mut s = String::new();
        let w = &mut s;
        use std::fmt::Write;
        let _ = writeln!(w, "## taint-operator scale report\n");
        let _ = writeln!(
            w,
            "- N = {} nodes (≈ {:.1} KiB of JSON each, {} images), P = {} pods ({} per node, {} critical per node), K = {} policies: {}",
            a.nodes,
            self.node_json_bytes as f64 / 1024.0,
            a.images_per_node,
            a.nodes * a.pods_per_node,
            a.pods_per_node,
            self.critical.per_node,
            self.policies.len(),
            self.policies.join(", ")
        );
        let _ = writeln!(
            w,
            "- machine: {} × {}, {:.1} GiB RAM; load average at start {}, at end {}; kube-apiserver {} + etcd on loopback",
            m.nproc, m.cpu_model, m.mem_gib, m.load_start, m.load_end, m.apiserver_version
        );
        let _ = writeln!(
            w,
            "- operator: {} ({}; leader election {}, concurrency {}), log {}",
            self.operator_bin.display(),
            self.operator_version,
            if self.leader_election { "on" } else { "off" },
            crate::driver::operator_workers(a),
            self.operator_log.display()
        );
        let _ = writeln!(
            w,
            "- request concurrency of setup, condition flips and baseline: {}",
            a.concurrency
        );
        if let Some(r) = self.operator_ready_secs {
            let _ = writeln!(w, "- operator /readyz (caches synced) {r:.2} s after start");
        }
        if let Some(e) = &self.error {
            let _ = writeln!(w, "\n**run failed: {e}**");
        }
        let _ = writeln!(w, "\n### Setup\n");
        let _ = writeln!(w, "| step | objects | seconds | objects/s |");
        let _ = writeln!(w, "|---|---:|---:|---:|");
        for st in &self.setup {
            let _ = writeln!(
                w,
                "| {} | {} | {:.1} | {:.0} |",
                st.name,
                st.objects,
                st.secs,
                st.objects as f64 / st.secs.max(1e-9)
            );
        }
        let _ = writeln!(w, "\n### Phases\n");
        let _ = writeln!(
            w,
            "Time: first change sent → every node right in the admin watch. Latency: a node's change sent → its taints right in the watch."
        );
        if self.phases.iter().any(|p| p.after_operator) {
            let r = a.rounds;
            let _ = writeln!(
                w,
                "The baseline ran rounds 1–{r} before the operator started and rounds {}–{} after it stopped; ratios compare the operator's median with the median of all {} baseline rounds.",
                r + 1,
                2 * r,
                2 * r
            );
            for kind in ["taint", "untaint"] {
                let side = |after: bool| {
                    self.medians_of(|p| {
                        p.runner == "baseline" && p.kind == kind && p.after_operator == after
                    })
                    .map_or("–".into(), |(t, p99)| {
                        format!("{t:.1} s, p99 {p99:.0} ms")
                    })
                };
                let _ = writeln!(
                    w,
                    "- baseline {kind} medians: before the operator {}; after it {}",
                    side(false),
                    side(true)
                );
            }
        }
        let _ = writeln!(w);
        let _ = writeln!(
            w,
            "| runner | phase | nodes | time s | vs baseline | p50 ms | p90 ms | p99 ms | max ms | p99 vs baseline | node writes | writes/transition | conflicts | API requests | CPU s | peak RSS MiB |"
        );
        let _ = writeln!(
            w,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for p in &self.phases {
            let l = &p.latencies_ms;
            let ratio = self.row_ratio(p);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {:.2} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {:.2} | {} | {} | {} | {} |",
                p.runner,
                p.name,
                p.transitions,
                p.secs,
                ratio.map_or("–".into(), |r| format!("{:.2}×", r.0)),
                percentile(l, 50.0),
                percentile(l, 90.0),
                percentile(l, 99.0),
                percentile(l, 100.0),
                ratio.map_or("–".into(), |r| format!("{:.2}×", r.1)),
                p.node_writes,
                p.node_writes / p.transitions.max(1) as f64,
                p.conflicts,
                p.requests.total_requests(),
                fmt_opt(p.cpu_secs, 2),
                fmt_opt(p.peak_rss_kib.map(mib), 1),
            );
        }
        if let Some(q) = &self.quiet {
            let _ = writeln!(
                w,
                "| operator | quiet {} s | – | – | – | – | – | – | – | – | {} | – | {} | {} | {} | {} |",
                a.quiet_secs,
                q.node_writes,
                q.conflicts,
                q.requests.total_requests(),
                fmt_opt(q.cpu_secs, 2),
                fmt_opt(q.peak_rss_kib.map(mib), 1)
            );
        }
        let _ = writeln!(w, "\n### API requests the operator sent (its /metrics)\n");
        let op_phases: Vec<&PhaseResult> = self
            .phases
            .iter()
            .filter(|p| p.runner == "operator")
            .chain(self.quiet.iter())
            .collect();
        let _ = write!(w, "| verb | resource | code |");
        for p in &op_phases {
            let _ = write!(w, " {} |", p.name);
        }
        let _ = writeln!(w, " total |");
        let _ = write!(w, "|---|---|---|");
        for _ in &op_phases {
            let _ = write!(w, "---:|");
        }
        let _ = writeln!(w, "---:|");
        let all = self.operator_requests_total();
        for ((verb, res, code), total) in &all.requests {
            let _ = write!(w, "| {verb} | {res} | {code} |");
            for p in &op_phases {
                let v = p
                    .requests
                    .requests
                    .get(&(verb.clone(), res.clone(), code.clone()))
                    .copied()
                    .unwrap_or(0.0);
                let _ = write!(w, " {v} |");
            }
            let _ = writeln!(w, " {total} |");
        }
        let _ = writeln!(
            w,
            "\n### Node patches: mean answer time, the operator's mean wait for a worker, node size\n"
        );
        let _ = writeln!(
            w,
            "The baseline has no queue: its backlog waits in the watch stream, unmeasured. \
             Node size: mean JSON bytes of one node per group once every node was right; \
             every request and watch event on a node costs the API server in proportion. \
             Reconciles: node queue entries taken by a worker; echoes skipped: watch events \
             that were the operator's own write coming back, not queued; resyncs: periodic \
             passes started in the phase (each queues every node once, spread over half \
             the interval).\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | patches answered | answer ms | wait for a worker ms | reconciles | echoes skipped | resyncs | node bytes |"
        );
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for p in self
            .phases
            .iter()
            .filter(|p| p.requests.patches_answered > 0.0)
        {
            let r = &p.requests;
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.runner,
                p.name,
                r.patches_answered,
                fmt_opt(r.mean_patch_ms(), 0),
                fmt_opt(r.mean_queue_wait_ms(), 0),
                if p.runner == "operator" {
                    r.queue_waits.to_string()
                } else {
                    "–".into()
                },
                if p.runner == "operator" {
                    r.echoes_skipped.to_string()
                } else {
                    "–".into()
                },
                if p.runner == "operator" {
                    r.resyncs.to_string()
                } else {
                    "–".into()
                },
                fmt_opt(p.node_bytes, 0)
            );
        }
        let _ = writeln!(
            w,
            "\n### CPU seconds from the first change until every node is right (/proc)\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | taint-operator | kube-apiserver | etcd | scale (observer, drivers, baseline) | cores busy |"
        );
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|");
        for p in &self.phases {
            let o = |k: &str| fmt_opt(p.cpu_to_right.get(k).copied(), 2);
            let busy = (p.secs > 0.0).then(|| p.cpu_to_right.values().sum::<f64>() / p.secs);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} |",
                p.runner,
                p.name,
                o("taint-operator"),
                o("kube-apiserver"),
                o("etcd"),
                o("scale"),
                fmt_opt(busy, 2)
            );
        }
        let _ = writeln!(
            w,
            "\n### CPU seconds per phase until the operator has settled (events, status writes), by process (/proc)\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | taint-operator | kube-apiserver | etcd | scale (observer, drivers, baseline) |"
        );
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|");
        for p in self.phases.iter().chain(self.quiet.iter()) {
            let o = |k: &str| fmt_opt(p.other_cpu.get(k).copied(), 2);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} |",
                p.runner,
                p.name,
                fmt_opt(p.cpu_secs, 2),
                o("kube-apiserver"),
                o("etcd"),
                o("scale")
            );
        }
        let _ = writeln!(w, "\n### Operator process (/proc)\n");
        let _ = writeln!(
            w,
            "- peak RSS (VmHWM): {} MiB; settled RSS after the quiet period: {} MiB; CPU (utime+stime) in total: {} s",
            fmt_opt(self.peak_rss_kib.map(mib), 1),
            fmt_opt(self.settled_rss_kib.map(mib), 1),
            fmt_opt(self.total_cpu_secs, 2)
        );
        if !self.policy_status.is_empty() {
            let _ = writeln!(w, "\n### Policy status at the end\n");
            let _ = writeln!(
                w,
                "| policy | selected | tainted | Ready | reason | message |"
            );
            let _ = writeln!(w, "|---|---:|---:|---|---|---|");
            for p in &self.policy_status {
                let _ = writeln!(
                    w,
                    "| {} | {} | {} | {} | {} | {} |",
                    p["name"].as_str().unwrap_or(""),
                    p["selected"],
                    p["tainted"],
                    p["ready"].as_str().unwrap_or(""),
                    p["reason"].as_str().unwrap_or(""),
                    p["message"].as_str().unwrap_or("")
                );
            }
        }
        if !self.final_check.is_empty() {
            let _ = writeln!(w, "\n### Final state check\n");
            for c in &self.final_check {
                let _ = writeln!(w, "- {c}");
            }
        }
        let _ = writeln!(w, "\n### Targets\n");
        if a.nodes < 5000 {
            let _ = writeln!(
                w,
                "(the targets are stated for N = 5000 on 2 cores; this run has N = {})\n",
                a.nodes
            );
        }
        let _ = writeln!(w, "| target | measured | result |");
        let _ = writeln!(w, "|---|---|---|");
        for t in self.targets() {
            let _ = writeln!(
                w,
                "| {} | {} | {} |",
                t.what,
                t.measured,
                if t.ok { "PASS" } else { "MISS" }
            );
        }
        s
    }

    pub(crate) fn json(&self) -> Value {
        let a = &self.args;
        let phase = |p: &PhaseResult| {
            let l = &p.latencies_ms;
            let requests: Vec<Value> = p
                .requests
                .requests
                .iter()
                .map(|((verb, res, code), v)| json!({"verb": verb, "resource": res, "code": code, "count": v}))
                .collect();
            json!({
                "runner": p.runner, "phase": p.name, "after_operator": p.after_operator, "transitions": p.transitions,
                "seconds": p.secs, "change_seconds": p.change_secs,
                "kind": p.kind,
                "ratio_to_baseline": self.row_ratio(p).map(|r| r.0),
                "p99_ratio_to_baseline": self.row_ratio(p).map(|r| r.1),
                "latency_ms": {"p50": percentile(l, 50.0), "p90": percentile(l, 90.0),
                               "p99": percentile(l, 99.0), "max": percentile(l, 100.0)},
                "node_writes": p.node_writes,
                "writes_per_transition": p.node_writes / p.transitions.max(1) as f64,
                "node_write_conflicts": p.conflicts,
                "node_patch_answer_ms_mean": p.requests.mean_patch_ms(),
                "node_queue_wait_ms_mean": p.requests.mean_queue_wait_ms(),
                "node_reconciles": p.requests.queue_waits,
                "node_echoes_skipped": p.requests.echoes_skipped,
                "resyncs": p.requests.resyncs,
                "node_bytes": p.node_bytes,
                "status_writes": p.requests.status_writes,
                "reconcile_errors": p.requests.reconcile_errors,
                "api_requests": requests,
                "cpu_seconds": p.cpu_secs,
                "peak_rss_mib": p.peak_rss_kib.map(mib),
                "rss_end_mib": p.rss_end_kib.map(mib),
                "observer_events": p.observer_events,
                "other_cpu_seconds": p.other_cpu,
                "cpu_seconds_to_right": p.cpu_to_right,
                "latency_by_change_time": p.timeline().iter()
                    .map(|(at, p50, max)| json!({"from_s": at, "p50_ms": p50, "max_ms": max}))
                    .collect::<Vec<_>>(),
            })
        };
        json!({
            "n_nodes": a.nodes, "pods_per_node": a.pods_per_node, "pods": a.nodes * a.pods_per_node,
            "critical_pods_per_node": self.critical.per_node,
            "k_policies": self.policies.len(), "policies": self.policies,
            "images_per_node": a.images_per_node, "node_json_bytes": self.node_json_bytes,
            "concurrency": a.concurrency, "operator_concurrency": crate::driver::operator_workers(a),
            "leader_election": self.leader_election,
            "operator_version": self.operator_version,
            "machine": {
                "nproc": self.machine.nproc, "cpu_model": self.machine.cpu_model,
                "mem_gib": self.machine.mem_gib, "loadavg_start": self.machine.load_start,
                "loadavg_end": self.machine.load_end,
                "kube_apiserver": self.machine.apiserver_version,
            },
            "setup": self.setup.iter().map(|s| json!({"step": s.name, "objects": s.objects, "seconds": s.secs})).collect::<Vec<_>>(),
            "operator_ready_seconds": self.operator_ready_secs,
            "phases": self.phases.iter().map(phase).collect::<Vec<_>>(),
            "quiet": self.quiet.as_ref().map(|q| json!({
                "seconds": a.quiet_secs, "node_writes": q.node_writes,
                "status_writes": q.requests.status_writes,
                "api_requests": q.requests.total_requests(), "cpu_seconds": q.cpu_secs})),
            "operator_process": {
                "peak_rss_mib": self.peak_rss_kib.map(mib),
                "settled_rss_mib": self.settled_rss_kib.map(mib),
                "cpu_seconds": self.total_cpu_secs,
            },
            "policy_status": self.policy_status,
            "final_check": self.final_check,
            "targets": self.targets().iter().map(|t| json!({"target": t.what, "measured": t.measured, "ok": t.ok})).collect::<Vec<_>>(),
            "error": self.error,
        })
    }
}
