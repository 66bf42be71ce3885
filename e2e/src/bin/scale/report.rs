//! The report: targets and ratios to the baseline, the Markdown tables and the
//! JSON, all computed from the phases after the run.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::{
    Args,
    model::Critical,
    operator_proc::OpMetrics,
    phase::{FlipSplit, PAIRED_TAINT, PAIRED_UNTAINT, PhaseResult, median, percentile},
    procfs::Machine,
    relabel::{Band, relabeling_band, sign_flip_band},
    settings::{flip_concurrency, operator_workers},
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
    /// `--resync-passes`: the operator's periodic passes over the converged fleet.
    pub(crate) resync_passes: Vec<PhaseResult>,
    pub(crate) peak_rss_kib: Option<u64>,
    pub(crate) settled_rss_kib: Option<u64>,
    /// The settled RSS split: (RssAnon, RssFile).
    pub(crate) settled_rss_split_kib: Option<(u64, u64)>,
    pub(crate) total_cpu_secs: Option<f64>,
    pub(crate) final_check: Vec<String>,
    pub(crate) policy_status: Vec<Value>,
    pub(crate) error: Option<String>,
}

/// A resync pass over 100,000 converged nodes may take this much operator CPU (#47).
const RESYNC_PASS_CPU_GOAL_SECS: f64 = 10.0;

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// One part of a latency split (see `PhaseResult::seen_to_right_ms`) for the JSON.
fn split_json(ms: &[f64]) -> Value {
    if ms.is_empty() {
        return Value::Null;
    }
    json!({"nodes": ms.len(), "p50": percentile(ms, 50.0), "p99": percentile(ms, 99.0)})
}

fn seen_to_right(f: &FlipSplit) -> &[f64] {
    &f.seen_to_right_ms
}

fn sent_to_written(f: &FlipSplit) -> &[f64] {
    &f.to_written_ms
}

/// A round's `q`th percentile of one part of its latency split, if it has one.
fn split_percentile(
    part: fn(&FlipSplit) -> &[f64],
    q: f64,
) -> impl Fn(&PhaseResult) -> Option<f64> + Copy {
    move |p| {
        let ms = p.flip.as_ref().map(part)?;
        (!ms.is_empty()).then(|| percentile(ms, q))
    }
}

/// One value read off each round of a phase.
type PerRound = Box<dyn Fn(&PhaseResult) -> Option<f64>>;

fn is_paired(kind: &str) -> bool {
    kind == PAIRED_TAINT || kind == PAIRED_UNTAINT
}

/// Whose phase a row of the whole-phase tables is: both runners' in a paired one.
fn whose(p: &PhaseResult) -> &str {
    if is_paired(&p.kind) {
        "both (paired)"
    } else {
        &p.runner
    }
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

pub(crate) struct Target {
    what: String,
    measured: String,
    pub(crate) ok: bool,
    /// For a ratio over rounds: what the same rounds give relabeled at random.
    noise: Option<Band>,
}

impl Target {
    fn plain(what: String, measured: String, ok: bool) -> Self {
        Target {
            what,
            measured,
            ok,
            noise: None,
        }
    }

    fn noise_cell(&self) -> String {
        self.noise.map_or("–".into(), |b| {
            format!("{:.2}–{:.2}× · {:.0} %", b.low, b.high, b.at_least * 100.0)
        })
    }
}

/// Medians over a runner's rounds of a phase, or the operator's over the baseline's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Medians {
    pub(crate) secs: f64,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
}

impl Medians {
    fn of(p: &PhaseResult) -> Self {
        Medians {
            secs: p.secs,
            p50: percentile(&p.latencies_ms, 50.0),
            p99: percentile(&p.latencies_ms, 99.0),
        }
    }

    fn over(self, base: Medians) -> Self {
        Medians {
            secs: self.secs / base.secs.max(1e-9),
            p50: self.p50 / base.p50.max(1e-9),
            p99: self.p99 / base.p99.max(1e-9),
        }
    }
}

/// The #25 goals: the operator against the baseline's medians, and its memory.
const PHASE_TIME_GOAL: f64 = 1.05;
const LATENCY_GOAL: f64 = 1.10;
const COLD_START_GOAL: f64 = 1.2;

/// Settled and peak RSS the operator may use at `nodes` nodes (#25: ≤ 32 MiB
/// settled at 5,000 nodes, ≤ 64 / 96 MiB at 15,000; no peak goal at 5,000; #47:
/// ≤ 256 / 384 MiB at 100,000).
fn rss_goal_mib(nodes: usize) -> (f64, Option<f64>) {
    if nodes <= 5_000 {
        (32.0, None)
    } else if nodes <= 15_000 {
        (64.0, Some(96.0))
    } else {
        (256.0, Some(384.0))
    }
}

impl Report {
    /// Medians of a runner's rounds of a phase.
    fn medians(&self, runner: &str, kind: &str) -> Option<Medians> {
        self.medians_of(|p| p.runner == runner && p.kind == kind)
    }

    /// Medians of the phases `which` picks.
    fn medians_of(&self, which: impl Fn(&PhaseResult) -> bool) -> Option<Medians> {
        let rounds: Vec<Medians> = self
            .phases
            .iter()
            .filter(|p| which(p))
            .map(Medians::of)
            .collect();
        if rounds.is_empty() {
            return None;
        }
        let median = |f: fn(&Medians) -> f64| median(rounds.iter().map(f).collect());
        Some(Medians {
            secs: median(|m| m.secs),
            p50: median(|m| m.p50),
            p99: median(|m| m.p99),
        })
    }

    /// The operator's medians over the baseline's.
    fn ratio(&self, kind: &str) -> Option<Medians> {
        Some(
            self.medians("operator", kind)?
                .over(self.medians("baseline", kind)?),
        )
    }

    /// One operator phase over the baseline's medians, or in a paired phase over
    /// the baseline's half of the same phase.
    fn row_ratio(&self, p: &PhaseResult) -> Option<Medians> {
        if p.runner != "operator" {
            return None;
        }
        if is_paired(&p.kind) {
            return Some(Medians::of(p).over(Medians::of(self.paired_baseline(p)?)));
        }
        Some(Medians::of(p).over(self.medians("baseline", &p.kind)?))
    }

    /// Every phase once: a paired phase by its operator's row, which holds what the
    /// phase cost the machine and the API server as a whole.
    fn whole_phases(&self) -> impl Iterator<Item = &PhaseResult> {
        self.phases
            .iter()
            .filter(|p| !(is_paired(&p.kind) && p.runner == "baseline"))
    }

    /// The baseline's half of the paired phase whose operator half is `p`.
    fn paired_baseline(&self, p: &PhaseResult) -> Option<&PhaseResult> {
        self.phases
            .iter()
            .find(|b| b.runner == "baseline" && b.name == p.name)
    }

    /// Per paired round of `kind`, the operator's `value` over the baseline's in
    /// the same phase; rounds missing either are left out.
    fn paired_ratios(&self, kind: &str, value: impl Fn(&PhaseResult) -> Option<f64>) -> Vec<f64> {
        self.phases
            .iter()
            .filter(|p| p.runner == "operator" && p.kind == kind)
            .filter_map(|p| Some(value(p)? / value(self.paired_baseline(p)?)?.max(1e-9)))
            .collect()
    }

    /// One value per round of a runner's phase, in order.
    fn per_round(
        &self,
        runner: &str,
        kind: &str,
        value: impl Fn(&PhaseResult) -> Option<f64>,
    ) -> Vec<f64> {
        self.phases
            .iter()
            .filter(|p| p.runner == runner && p.kind == kind)
            .filter_map(value)
            .collect()
    }

    /// The relabeling band of a ratio of the operator's and the baseline's rounds.
    fn band(&self, kind: &str, value: impl Fn(&PhaseResult) -> Option<f64>) -> Option<Band> {
        relabeling_band(
            &self.per_round("operator", kind, &value),
            &self.per_round("baseline", kind, &value),
        )
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
        let rounds_of = |kind: &str| {
            self.phases
                .iter()
                .filter(|p| p.runner == "baseline" && p.kind == kind)
                .count()
        };
        let mut goal = |what: String, ratio: f64, at_most: f64, noise: Option<Band>| {
            t.push(Target {
                what: format!("{what} ≤ {at_most:.2}× baseline"),
                measured: format!("{ratio:.2}×"),
                ok: ratio <= at_most,
                noise,
            })
        };
        let secs = |p: &PhaseResult| Some(p.secs);
        let p50 = |p: &PhaseResult| Some(percentile(&p.latencies_ms, 50.0));
        let p99 = |p: &PhaseResult| Some(percentile(&p.latencies_ms, 99.0));
        for name in ["taint", "untaint"] {
            if let Some(m) = self.ratio(name) {
                let of = format!(
                    " (medians of {r} operator and {} baseline rounds)",
                    rounds_of(name)
                );
                goal(
                    format!("{name} phase time{of}"),
                    m.secs,
                    PHASE_TIME_GOAL,
                    self.band(name, secs),
                );
                goal(
                    format!("{name} p50 latency{of}"),
                    m.p50,
                    LATENCY_GOAL,
                    self.band(name, p50),
                );
                goal(
                    format!("{name} p99 latency{of}"),
                    m.p99,
                    LATENCY_GOAL,
                    self.band(name, p99),
                );
            }
            if let (Some(op), Some(base)) = (
                self.split_medians("operator", name, sent_to_written),
                self.split_medians("baseline", name, sent_to_written),
            ) {
                let of = " from the flip sent to the runner's write answered, no watch (medians of the rounds)";
                goal(
                    format!("{name} p50 latency{of}"),
                    op.0 / base.0.max(1e-9),
                    LATENCY_GOAL,
                    self.band(name, split_percentile(sent_to_written, 50.0)),
                );
                goal(
                    format!("{name} p99 latency{of}"),
                    op.1 / base.1.max(1e-9),
                    LATENCY_GOAL,
                    self.band(name, split_percentile(sent_to_written, 99.0)),
                );
            }
        }
        if let Some(m) = self.ratio("cold start") {
            goal(
                format!(
                    "cold start, every node right (medians of {} operator and {} baseline list-and-patch runs)",
                    self.per_round("operator", "cold start", secs).len(),
                    rounds_of("cold start")
                ),
                m.secs,
                COLD_START_GOAL,
                self.band("cold start", secs),
            );
        }
        for kind in [PAIRED_TAINT, PAIRED_UNTAINT] {
            let measures: [(&str, PerRound); 4] = [
                ("p50 latency", Box::new(p50)),
                ("p99 latency", Box::new(p99)),
                (
                    "p50 latency from the flip sent to the runner's write answered",
                    Box::new(split_percentile(sent_to_written, 50.0)),
                ),
                (
                    "p99 latency from the flip sent to the runner's write answered",
                    Box::new(split_percentile(sent_to_written, 99.0)),
                ),
            ];
            for (what, value) in measures {
                let ratios = self.paired_ratios(kind, value);
                if ratios.is_empty() {
                    continue;
                }
                let slower = ratios.iter().filter(|r| **r > 1.0).count();
                let ratio = median(ratios.clone());
                t.push(Target {
                    what: format!(
                        "{kind} {what} ≤ {LATENCY_GOAL:.2}× baseline (median of {} rounds' ratios, both runners in the same phases)",
                        ratios.len()
                    ),
                    measured: format!(
                        "{ratio:.2}× (slower in {slower} of {} rounds)",
                        ratios.len()
                    ),
                    ok: ratio <= LATENCY_GOAL,
                    noise: sign_flip_band(&ratios),
                });
            }
        }
        let (settled_goal, peak_goal) = rss_goal_mib(self.args.nodes);
        if let Some(s) = self.settled_rss_kib {
            t.push(Target::plain(
                format!("settled RSS ≤ {settled_goal:.0} MiB"),
                format!("{:.1} MiB", mib(s)),
                mib(s) <= settled_goal,
            ));
        }
        if let (Some(p), Some(goal)) = (self.peak_rss_kib, peak_goal) {
            t.push(Target::plain(
                format!("peak RSS ≤ {goal:.0} MiB"),
                format!("{:.1} MiB", mib(p)),
                mib(p) <= goal,
            ));
        }
        for p in self.phases.iter().filter(|p| p.runner == "operator") {
            let per = p.node_writes / p.transitions.max(1) as f64;
            t.push(Target::plain(
                format!("{}: one write per node transition", p.name),
                format!(
                    "{} writes / {} transitions = {per:.3} ({} conflicts)",
                    p.node_writes, p.transitions, p.conflicts
                ),
                p.node_writes == p.transitions as f64,
            ));
        }
        for p in &self.resync_passes {
            let cpu = p.cpu_secs.unwrap_or(f64::NAN);
            t.push(Target::plain(
                format!(
                    "{}: ≤ {RESYNC_PASS_CPU_GOAL_SECS:.0} s of CPU, no writes",
                    p.name
                ),
                format!(
                    "{cpu:.2} s CPU, {} nodes planned, {} node writes",
                    p.requests.node_reconciles_timed, p.node_writes
                ),
                cpu <= RESYNC_PASS_CPU_GOAL_SECS && p.node_writes == 0.0,
            ));
        }
        if let Some(q) = &self.quiet {
            t.push(Target::plain(
                format!("no writes in the quiet {} s", self.args.quiet_secs),
                format!(
                    "{} node writes, {} status writes",
                    q.node_writes, q.requests.status_writes
                ),
                q.node_writes == 0.0 && q.requests.status_writes == 0.0,
            ));
        }
        let all = self.operator_requests_total();
        let bad: f64 = all
            .requests
            .iter()
            .filter(|((_, _, code), _)| code == "429" || code.starts_with('5') || code == "error")
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b);
        t.push(Target::plain(
            "no 5xx, 429 (throttling) or transport errors".into(),
            format!("{bad}"),
            bad == 0.0,
        ));
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
            operator_workers(a),
            self.operator_log.display()
        );
        let _ = writeln!(
            w,
            "- requests in flight: setup and baseline {}, condition flips {}",
            a.concurrency,
            flip_concurrency(a)
        );
        let _ = writeln!(w, "- the baseline connects as {}", a.baseline_as.describe());
        if a.baseline_write_delay_ms > 0 {
            let _ = writeln!(
                w,
                "- **calibration run: the baseline waited {} ms before each write of its taint and untaint phases**",
                a.baseline_write_delay_ms
            );
        }
        if let Some(r) = self.operator_ready_secs {
            let _ = writeln!(
                w,
                "- operator /readyz (policy cache listed) {r:.2} s after start"
            );
        }
        for p in self.phases.iter().filter(|p| !p.field_managers.is_empty()) {
            let _ = writeln!(
                w,
                "- field managers on {} at the {} {}{}: {}",
                crate::model::node_name(0),
                p.runner,
                p.name,
                if p.after_operator {
                    " after the operator"
                } else {
                    ""
                },
                p.field_managers.join(", ")
            );
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
        if a.interleave && self.phases.iter().any(|p| p.after_operator) {
            let r = a.rounds;
            let _ = writeln!(
                w,
                "The runners alternated: baseline round 1, the operator's cold start and round 1, then for each further round the operator stopped, the baseline's round and the operator started again, and last the baseline's round {}. Ratios compare the operator's median of {r} rounds with the baseline's of {}.",
                r + 1,
                r + 1
            );
        } else if self.phases.iter().any(|p| p.after_operator) {
            let r = a.rounds;
            let _ = writeln!(
                w,
                "The baseline ran rounds 1–{r} before the operator started and rounds {}–{} after it stopped; ratios compare the operator's median with the median of all {} baseline rounds.",
                r + 1,
                2 * r,
                2 * r
            );
            // Repeated cold starts alternate with the baseline's (their own line
            // below): a before/after split of them would mean nothing.
            let kinds: &[&str] = if a.cold_starts > 1 {
                &["taint", "untaint"]
            } else {
                &["cold start", "taint", "untaint"]
            };
            for &kind in kinds {
                let side = |after: bool| {
                    self.medians_of(|p| {
                        p.runner == "baseline" && p.kind == kind && p.after_operator == after
                    })
                    .map_or("–".into(), |m| {
                        format!("{:.1} s, p50 {:.0} ms, p99 {:.0} ms", m.secs, m.p50, m.p99)
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
        if a.cold_starts > 1 {
            let _ = writeln!(
                w,
                "The cold starts alternated: the baseline's, then {} times the operator's (stopped after each, its taints and records cleared) and the baseline's, the last of these after the operator's other phases.",
                a.cold_starts
            );
        }
        let _ = writeln!(w);
        let _ = writeln!(
            w,
            "| runner | phase | nodes | time s | vs baseline | p50 ms | p90 ms | p99 ms | max ms | p50 vs baseline | p99 vs baseline | node writes | writes/transition | conflicts | API requests | CPU s | peak RSS MiB |"
        );
        let _ = writeln!(
            w,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for p in &self.phases {
            let l = &p.latencies_ms;
            let ratio = self.row_ratio(p);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {:.2} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {:.2} | {} | {} | {} | {} |",
                p.runner,
                p.name,
                p.transitions,
                p.secs,
                ratio.map_or("–".into(), |r| format!("{:.2}×", r.secs)),
                percentile(l, 50.0),
                percentile(l, 90.0),
                percentile(l, 99.0),
                percentile(l, 100.0),
                ratio.map_or("–".into(), |r| format!("{:.2}×", r.p50)),
                ratio.map_or("–".into(), |r| format!("{:.2}×", r.p99)),
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
                "| operator | quiet {} s | – | – | – | – | – | – | – | – | – | {} | – | {} | {} | {} | {} |",
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
            "\n### Node patches: mean answer time, mean wait for a worker, node size\n"
        );
        let _ = writeln!(
            w,
            "The baseline hands what its watch (or its cold start's list) reads to its \
             writers through a queue: its wait for a worker is from a node read to a \
             writer taking it, its own echoes included. Reconcile: the operator's mean \
             time for one node reconcile, patch included (a worker's busy time): what it \
             adds to each write is this less the answer. \
             Node size: mean JSON bytes of one node per group once every node was right; \
             every request and watch event on a node costs the API server in proportion. \
             Reconciles: node queue entries taken by a worker; echoes skipped: watch events \
             that were the operator's own write coming back, not queued; resyncs: periodic \
             passes started in the phase (each queues every node once, spread over half \
             the interval).\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | patches answered | answer ms | wait for a worker ms | reconcile ms | reconciles | echoes skipped | resyncs | node bytes |"
        );
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for p in self
            .phases
            .iter()
            .filter(|p| p.requests.patches_answered > 0.0)
        {
            let r = &p.requests;
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.runner,
                p.name,
                r.patches_answered,
                fmt_opt(r.mean_patch_ms(), 0),
                fmt_opt(r.mean_queue_wait_ms(), 0),
                fmt_opt(r.mean_reconcile_ms(), 0),
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
        self.latency_split_section(w);
        self.watches_section(w);
        let _ = writeln!(
            w,
            "\n### CPU seconds from the first change until every node is right (/proc)\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | taint-operator | kube-apiserver | etcd | scale (observer, drivers, baseline) | cores busy |"
        );
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|");
        for p in self.whole_phases() {
            let o = |k: &str| fmt_opt(p.cpu_to_right.get(k).copied(), 2);
            let busy = (p.secs > 0.0).then(|| p.cpu_to_right.values().sum::<f64>() / p.secs);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} |",
                whose(p),
                p.name,
                o("taint-operator"),
                o("kube-apiserver"),
                o("etcd"),
                o("scale"),
                fmt_opt(busy, 2)
            );
        }
        let queued_whose = match a.baseline_as {
            crate::BaselineUser::Operator => "the operator's and the baseline's",
            crate::BaselineUser::Admin => "the operator's; the baseline's admin user is exempt",
        };
        let _ = writeln!(
            w,
            "\n### CPU seconds per phase until the operator has settled (events, status writes), by process (/proc); the API server's garbage collection and allocation, and the requests its priority and fairness queued for a seat ({queued_whose}), from its /metrics\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | taint-operator | kube-apiserver | of it garbage collection | API server allocated GiB | etcd | scale (observer, drivers, baseline) | requests queued > 5 ms | their wait s |"
        );
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for p in self
            .whole_phases()
            .chain(self.quiet.iter())
            .chain(self.resync_passes.iter())
        {
            let o = |k: &str| fmt_opt(p.other_cpu.get(k).copied(), 2);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {:.0} | {:.2} |",
                whose(p),
                p.name,
                fmt_opt(p.cpu_secs, 2),
                o("kube-apiserver"),
                p.apiserver.gc_cpu_secs,
                p.apiserver.heap_allocated_bytes / f64::from(1u32 << 30),
                o("etcd"),
                o("scale"),
                p.apiserver.apf_queued,
                p.apiserver.apf_wait_secs
            );
        }
        let _ = writeln!(w, "\n### Operator process (/proc)\n");
        let _ = writeln!(
            w,
            "- peak RSS (VmHWM): {} MiB; settled RSS after the quiet period: {} MiB ({} MiB heap and stacks, {} MiB mapped files); CPU (utime+stime) in total: {} s",
            fmt_opt(self.peak_rss_kib.map(mib), 1),
            fmt_opt(self.settled_rss_kib.map(mib), 1),
            fmt_opt(self.settled_rss_split_kib.map(|(a, _)| mib(a)), 1),
            fmt_opt(self.settled_rss_split_kib.map(|(_, f)| mib(f)), 1),
            fmt_opt(self.total_cpu_secs, 2)
        );
        if !self.resync_passes.is_empty() {
            self.resync_markdown(w);
        }
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
        let _ = writeln!(
            w,
            "Identical runners: the ratios the same rounds give when they are pooled and split \
             every possible way into groups of the two runners' sizes (5th–95th percentile), and \
             the share of splits at least as high as measured; a ratio inside that band is the \
             rounds' spread more than a difference of the runners.\n"
        );
        let _ = writeln!(
            w,
            "| target | measured | result | identical runners: 5–95 % · share ≥ measured |"
        );
        let _ = writeln!(w, "|---|---|---|---|");
        for t in self.targets() {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} |",
                t.what,
                t.measured,
                if t.ok { "PASS" } else { "MISS" },
                t.noise_cell()
            );
        }
        s
    }

    /// Why watches ended: the API server's closes of watchers that fell behind, the
    /// operator's node watch requests (each end, clean or not, opens one) and its
    /// counted failures and relists.
    fn watches_section(&self, w: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(w, "\n### Watches that ended during a phase\n");
        let _ = writeln!(
            w,
            "Closed by the API server: `apiserver_terminated_watchers_total`, watchers whose buffer \
             stayed full past the dispatch budget, any client's (the operator's, the admin \
             observer's, the baseline's). Node watches opened: the operator's \
             `api_requests_total{{verb=\"watch\",resource=\"nodes\"}}`; a watch also ends at \
             its 290 s timeout. Restarts: the operator's `watch_restarts_total` by watch and cause.\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | closed by the API server (nodes) | (pods) | (other) | node watches opened | operator restarts |"
        );
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---|");
        for p in self.whole_phases().chain(self.quiet.iter()) {
            let of = |r: &str| p.apiserver.watchers_closed.get(r).copied().unwrap_or(0.0);
            let other: f64 = p
                .apiserver
                .watchers_closed
                .iter()
                .filter(|(r, _)| *r != "nodes" && *r != "pods")
                .map(|(_, v)| v)
                .fold(0.0, |a, b| a + b);
            let opened = p
                .requests
                .requests
                .iter()
                .filter(|((verb, res, _), _)| verb == "watch" && res == "nodes")
                .map(|(_, v)| v)
                .fold(0.0, |a, b| a + b);
            let restarts = p
                .requests
                .watch_restarts
                .iter()
                .map(|((watch, cause), v)| format!("{watch} {cause} {v}"))
                .collect::<Vec<_>>()
                .join(", ");
            let (opened, restarts) = if p.runner == "operator" {
                (
                    opened.to_string(),
                    if restarts.is_empty() {
                        "0".into()
                    } else {
                        restarts
                    },
                )
            } else {
                ("–".into(), "–".into())
            };
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {opened} | {restarts} |",
                whose(p),
                p.name,
                of("nodes"),
                of("pods"),
                other
            );
        }
    }

    /// Each condition flip phase's latency in parts, and the medians over the
    /// rounds of the runner's reaction and of the latency with no watch in it.
    fn latency_split_section(&self, w: &mut String) {
        use std::fmt::Write;
        let split: Vec<(&PhaseResult, &FlipSplit)> = self
            .phases
            .iter()
            .filter_map(|p| Some((p, p.flip.as_ref()?)))
            .collect();
        if split.is_empty() {
            return;
        }
        let _ = writeln!(
            w,
            "\n### Where a node's latency goes: until the watch shows its flip, and after\n"
        );
        let _ = writeln!(
            w,
            "Sent → seen: from a node's condition flip sent until the admin watch showed it; \
             in two parts, the API server's answer to the flip (sent → answered) and the \
             watch's delivery (answered → seen). Seen → right: from then until the same \
             watch showed the node's taints right (the runner's own watch, its queue and \
             its write, and the write's way back). Sent → written: from the flip sent until \
             the runner's write that put the node right was answered, with no watch of the \
             benchmark's in it (the baseline's answers as it got them, the operator's from \
             the line it logs for each taint once its write was answered).\n"
        );
        let _ = writeln!(
            w,
            "| runner | phase | nodes | sent → seen p50 ms | p99 ms | sent → answered p50 ms | p99 ms | answered → seen p50 ms | p99 ms | seen → right p50 ms | p99 ms | sent → written p50 ms | p99 ms | no write seen |"
        );
        let _ = writeln!(
            w,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (p, f) in &split {
            let mut row = format!("| {} | {} | {} |", p.runner, p.name, p.transitions);
            for v in [
                &f.sent_to_seen_ms,
                &f.flip_answer_ms,
                &f.answer_to_seen_ms,
                &f.seen_to_right_ms,
                &f.to_written_ms,
            ] {
                let _ = write!(
                    row,
                    " {:.0} | {:.0} |",
                    percentile(v, 50.0),
                    percentile(v, 99.0)
                );
            }
            let _ = writeln!(w, "{row} {} |", f.unwritten);
        }
        for kind in ["taint", "untaint"] {
            for (part, what) in [
                ("seen → right", seen_to_right as fn(&FlipSplit) -> &[f64]),
                ("sent → written", sent_to_written),
            ] {
                let (Some(op), Some(base)) = (
                    self.split_medians("operator", kind, what),
                    self.split_medians("baseline", kind, what),
                ) else {
                    continue;
                };
                let _ = writeln!(
                    w,
                    "\n{kind}: {part}, medians over the rounds: operator p50 {:.0} ms, p99 {:.0} ms; baseline p50 {:.0} ms, p99 {:.0} ms ({:.2}× / {:.2}×)",
                    op.0,
                    op.1,
                    base.0,
                    base.1,
                    op.0 / base.0.max(1e-9),
                    op.1 / base.1.max(1e-9)
                );
            }
        }
    }

    /// A runner's medians over the rounds of one part of a flip phase's latency
    /// (p50, p99); `None` without such rounds.
    fn split_medians(
        &self,
        runner: &str,
        kind: &str,
        part: fn(&FlipSplit) -> &[f64],
    ) -> Option<(f64, f64)> {
        let p50 = self.per_round(runner, kind, split_percentile(part, 50.0));
        let p99 = self.per_round(runner, kind, split_percentile(part, 99.0));
        (!p50.is_empty()).then(|| (median(p50), median(p99)))
    }

    /// The resync passes: what each cost beside the quiet period's idle rate.
    fn resync_markdown(&self, w: &mut String) {
        use std::fmt::Write;
        let idle_rate = self
            .quiet
            .as_ref()
            .and_then(|q| q.cpu_secs)
            .map(|c| c / self.args.quiet_secs.max(1) as f64);
        let _ = writeln!(
            w,
            "\n### Resync passes over the converged fleet (--resync-secs {}; each watched for half the interval and 10 s)\n",
            self.args.resync_secs
        );
        let _ = writeln!(
            w,
            "| pass | watched s | nodes planned | node writes | API requests | operator CPU s | beyond the quiet period's rate |"
        );
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|");
        for p in &self.resync_passes {
            let beyond = match (p.cpu_secs, idle_rate) {
                (Some(c), Some(r)) => format!("{:.2}", c - r * p.secs),
                _ => "–".into(),
            };
            let _ = writeln!(
                w,
                "| {} | {:.1} | {} | {} | {} | {} | {beyond} |",
                p.name,
                p.secs,
                p.requests.node_reconciles_timed,
                p.node_writes,
                p.requests.total_requests(),
                fmt_opt(p.cpu_secs, 2),
            );
        }
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
            let mut v = json!({
                "runner": p.runner, "phase": p.name, "after_operator": p.after_operator, "transitions": p.transitions,
                "seconds": p.secs, "change_seconds": p.change_secs,
                "kind": p.kind,
                "ratio_to_baseline": self.row_ratio(p).map(|r| r.secs),
                "p50_ratio_to_baseline": self.row_ratio(p).map(|r| r.p50),
                "p99_ratio_to_baseline": self.row_ratio(p).map(|r| r.p99),
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
                "field_managers": p.field_managers,
                "status_writes": p.requests.status_writes,
                "reconcile_errors": p.requests.reconcile_errors,
                "api_requests": requests,
                "cpu_seconds": p.cpu_secs,
                "peak_rss_mib": p.peak_rss_kib.map(mib),
                "rss_end_mib": p.rss_end_kib.map(mib),
                "observer_events": p.observer_events,
                "other_cpu_seconds": p.other_cpu,
                "cpu_seconds_to_right": p.cpu_to_right,
                "watchers_closed_by_apiserver": p.apiserver.watchers_closed,
                "apiserver_gc_cpu_seconds": p.apiserver.gc_cpu_secs,
                "apiserver_heap_allocated_bytes": p.apiserver.heap_allocated_bytes,
                "apiserver_apf_queued_requests": p.apiserver.apf_queued,
                "apiserver_apf_wait_seconds": p.apiserver.apf_wait_secs,
                "operator_watch_restarts": p.requests.watch_restarts.iter()
                    .map(|((watch, cause), v)| json!({"watch": watch, "cause": cause, "count": v}))
                    .collect::<Vec<_>>(),
                "latency_by_change_time": p.timeline().iter()
                    .map(|(at, p50, max)| json!({"from_s": at, "p50_ms": p50, "max_ms": max}))
                    .collect::<Vec<_>>(),
            });
            // Outside the macro above, which is at serde_json's recursion limit.
            v["node_reconcile_ms_mean"] = json!(p.requests.mean_reconcile_ms());
            if let Some(f) = &p.flip {
                v["sent_to_seen_ms"] = split_json(&f.sent_to_seen_ms);
                v["seen_to_right_ms"] = split_json(&f.seen_to_right_ms);
                v["flip_answer_ms"] = split_json(&f.flip_answer_ms);
                v["answer_to_seen_ms"] = split_json(&f.answer_to_seen_ms);
                v["sent_to_written_ms"] = split_json(&f.to_written_ms);
                v["nodes_without_a_write_seen"] = json!(f.unwritten);
            }
            v
        };
        json!({
            "n_nodes": a.nodes, "pods_per_node": a.pods_per_node, "pods": a.nodes * a.pods_per_node,
            "critical_pods_per_node": self.critical.per_node,
            "k_policies": self.policies.len(), "policies": self.policies,
            "images_per_node": a.images_per_node, "node_json_bytes": self.node_json_bytes,
            "concurrency": a.concurrency, "flip_concurrency": flip_concurrency(a),
            "baseline_write_delay_ms": a.baseline_write_delay_ms,
            "cold_starts": a.cold_starts,
            "operator_concurrency": operator_workers(a),
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
            "resync_passes": self.resync_passes.iter().map(|p| json!({
                "pass": p.name, "seconds": p.secs, "resync_interval_seconds": a.resync_secs,
                "nodes_planned": p.requests.node_reconciles_timed, "node_writes": p.node_writes,
                "api_requests": p.requests.total_requests(), "cpu_seconds": p.cpu_secs,
                "apiserver_gc_cpu_seconds": p.apiserver.gc_cpu_secs})).collect::<Vec<_>>(),
            "operator_process": {
                "peak_rss_mib": self.peak_rss_kib.map(mib),
                "settled_rss_mib": self.settled_rss_kib.map(mib),
                "settled_rss_anon_mib": self.settled_rss_split_kib.map(|(a, _)| mib(a)),
                "settled_rss_file_mib": self.settled_rss_split_kib.map(|(_, f)| mib(f)),
                "cpu_seconds": self.total_cpu_secs,
            },
            "policy_status": self.policy_status,
            "final_check": self.final_check,
            "targets": self.targets().iter().map(|t| json!({
                "target": t.what,
                "measured": t.measured,
                "ok": t.ok,
                "identical_runners": t.noise.map(|b| json!({"p5": b.low, "p95": b.high, "share_at_least": b.at_least})),
            })).collect::<Vec<_>>(),
            "error": self.error,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn report(nodes: usize, phases: Vec<PhaseResult>) -> Report {
        Report {
            args: Args::parse_from(["scale", "--nodes", &nodes.to_string()]),
            machine: Machine::default(),
            node_json_bytes: 0,
            critical: Critical::new(30),
            policies: vec![],
            operator_bin: PathBuf::new(),
            operator_log: PathBuf::new(),
            operator_version: String::new(),
            leader_election: false,
            setup: vec![],
            phases,
            operator_ready_secs: None,
            quiet: None,
            resync_passes: vec![],
            peak_rss_kib: Some(100 * 1024),
            settled_rss_kib: Some(30 * 1024),
            settled_rss_split_kib: Some((20 * 1024, 10 * 1024)),
            total_cpu_secs: None,
            final_check: vec![],
            policy_status: vec![],
            error: None,
        }
    }

    /// A phase whose nodes took `ms` each (every latency the same: p50 = p99 = ms).
    fn phase(runner: &str, kind: &str, secs: f64, ms: f64) -> PhaseResult {
        PhaseResult {
            name: kind.into(),
            kind: kind.into(),
            runner: runner.into(),
            transitions: 1,
            node_writes: 1.0,
            secs,
            latencies_ms: vec![ms; 10],
            ..PhaseResult::default()
        }
    }

    /// Three baseline taint rounds of 10, 30 and 20 s (100, 300 and 200 ms a
    /// node) and one of the operator's, 21 s (220 ms).
    fn taint_rounds() -> Vec<PhaseResult> {
        vec![
            phase("baseline", "taint", 10.0, 100.0),
            phase("baseline", "taint", 30.0, 300.0),
            phase("baseline", "taint", 20.0, 200.0),
            phase("operator", "taint", 21.0, 220.0),
        ]
    }

    fn verdicts(r: &Report) -> Vec<(String, String, bool)> {
        r.targets()
            .into_iter()
            .filter(|t| !t.what.contains("write") && !t.what.contains("5xx"))
            .map(|t| (t.what, t.measured, t.ok))
            .collect()
    }

    #[test]
    fn repeated_cold_starts_are_judged_by_their_medians_not_by_one_slow_run() {
        // baseline, operator, baseline, operator, baseline, operator, baseline: the
        // operator's second run met a slow API server, as did the baseline's third
        let secs = [10.0, 11.0, 10.0, 19.0, 16.0, 11.5, 10.5];
        let phases = secs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let runner = if i % 2 == 0 { "baseline" } else { "operator" };
                phase(runner, "cold start", *s, 1.0)
            })
            .collect();
        let r = report(5_000, phases);
        let cold = r
            .targets()
            .into_iter()
            .find(|t| t.what.starts_with("cold start"))
            .expect("a cold start goal");
        assert_eq!(
            cold.what,
            "cold start, every node right (medians of 3 operator and 4 baseline list-and-patch runs) ≤ 1.20× baseline"
        );
        // 11.5 over the median of 10, 10, 16, 10.5 (10.25)
        assert_eq!(cold.measured, "1.12×");
        assert!(cold.ok);
        // seven runs, three of them the operator's: 35 relabelings give the band
        assert!(cold.noise.is_some());
    }

    #[test]
    fn alternating_cold_starts_get_no_before_and_after_split() {
        let after = |mut p: PhaseResult| {
            p.after_operator = true;
            p
        };
        let mut phases = vec![
            phase("baseline", "cold start", 10.0, 1.0),
            phase("baseline", "taint", 10.0, 100.0),
            phase("operator", "cold start", 11.0, 1.0),
            after(phase("baseline", "cold start", 12.0, 1.0)),
            phase("operator", "cold start", 11.0, 1.0),
            after(phase("baseline", "cold start", 12.0, 1.0)),
            after(phase("baseline", "taint", 12.0, 120.0)),
        ];
        phases.push(phase("operator", "taint", 11.0, 110.0));
        let mut r = report(5_000, phases);
        r.args = Args::parse_from(["scale", "--nodes", "5000", "--cold-starts", "2"]);
        let md = r.markdown();
        assert!(md.contains("- baseline taint medians: before the operator 10.0 s"));
        assert!(!md.contains("baseline cold start medians"), "{md}");
        assert!(md.contains("The cold starts alternated"));
    }

    #[test]
    fn the_goals_compare_the_operators_medians_with_the_baselines() {
        let mut phases = taint_rounds();
        phases.extend([
            phase("baseline", "cold start", 10.0, 1.0),
            phase("operator", "cold start", 12.5, 1.0),
        ]);
        let r = report(5_000, phases);
        let of = " (medians of 1 operator and 3 baseline rounds)";
        assert_eq!(
            verdicts(&r),
            [
                (format!("taint phase time{of} ≤ 1.05× baseline"), "1.05×".into(), true),
                (format!("taint p50 latency{of} ≤ 1.10× baseline"), "1.10×".into(), true),
                (format!("taint p99 latency{of} ≤ 1.10× baseline"), "1.10×".into(), true),
                (
                    "cold start, every node right (medians of 1 operator and 1 baseline list-and-patch runs) ≤ 1.20× baseline".into(),
                    "1.25×".into(),
                    false
                ),
                ("settled RSS ≤ 32 MiB".into(), "30.0 MiB".into(), true),
            ]
        );
    }

    #[test]
    fn paired_goals_take_each_rounds_ratio_within_its_own_phase() {
        let paired = |runner: &str, round: u64, ms: f64| PhaseResult {
            name: crate::phase::round_name(PAIRED_TAINT, round),
            ..phase(runner, PAIRED_TAINT, 5.0, ms)
        };
        // Round 2 is three times as slow for both: the ratios are 1.2, 0.9, 1.05,
        // while the operator's median over the baseline's would be 1.2 (360/300).
        let r = report(
            1_000,
            vec![
                paired("operator", 1, 120.0),
                paired("baseline", 1, 100.0),
                paired("operator", 2, 810.0),
                paired("baseline", 2, 900.0),
                paired("operator", 3, 315.0),
                paired("baseline", 3, 300.0),
            ],
        );
        let t = r.targets();
        let p50 = t
            .iter()
            .find(|t| t.what.starts_with("paired taint p50 latency ≤"))
            .unwrap();
        assert_eq!(p50.measured, "1.05× (slower in 2 of 3 rounds)");
        assert!(p50.ok);
        assert!(p50.what.contains("median of 3 rounds' ratios"));
        // the band inverts some rounds' ratios: from 1/1.2 ... to 1.2 ... (the
        // medians of {1.2|0.83, 0.9|1.11, 1.05|0.95})
        assert_eq!(p50.noise_cell(), "0.90–1.11× · 50 %");
        // a paired row's ratio is to its own phase's baseline half
        let row = r.row_ratio(&r.phases[2]).unwrap();
        assert!((row.p50 - 0.9).abs() < 1e-12);
        // no separate-rounds goal is made of paired phases
        assert!(!t.iter().any(|t| t.what.starts_with("taint")));
        // what a paired phase cost the machine is shown once, for both runners
        let whole: Vec<(&str, &str)> = r
            .whole_phases()
            .map(|p| (whose(p), p.name.as_str()))
            .collect();
        assert_eq!(
            whole,
            [
                ("both (paired)", "paired taint"),
                ("both (paired)", "paired taint 2"),
                ("both (paired)", "paired taint 3")
            ]
        );
    }

    #[test]
    fn a_calibration_run_says_so_in_the_report() {
        let mut r = report(1_000, taint_rounds());
        let flag = "calibration run: the baseline waited";
        assert!(!r.markdown().contains(flag));
        assert_eq!(r.json()["baseline_write_delay_ms"], 0);
        r.args.baseline_write_delay_ms = 100;
        assert!(r.markdown().contains(&format!("{flag} 100 ms")));
        assert_eq!(r.json()["baseline_write_delay_ms"], 100);
    }

    #[test]
    fn ratio_goals_say_what_identical_runners_would_show() {
        let r = report(5_000, taint_rounds());
        let t = r.targets();
        let p50 = t.iter().find(|t| t.what.starts_with("taint p50")).unwrap();
        // Pooled 220, 100, 300, 200 ms, one of them the operator's: 220/200,
        // 100/220, 300/200 and 200/220; two of the four are at least 1.10.
        assert_eq!(p50.noise_cell(), "0.45–1.50× · 50 %");
        let memory = t
            .iter()
            .find(|t| t.what.starts_with("settled RSS"))
            .unwrap();
        assert_eq!(memory.noise_cell(), "–");
        assert!(
            !t.iter()
                .any(|t| t.what.contains("sent to the runner's write")),
            "no write times recorded, so no goal on them"
        );
        assert!(
            r.markdown()
                .contains("| 1.10× | PASS | 0.45–1.50× · 50 % |")
        );
    }

    #[test]
    fn the_write_time_goals_take_their_ratio_and_band_from_the_same_rounds() {
        let written = |runner: &str, ms: f64| PhaseResult {
            flip: Some(FlipSplit {
                to_written_ms: vec![ms; 10],
                ..FlipSplit::default()
            }),
            ..phase(runner, "taint", 1.0, 1.0)
        };
        let r = report(
            5_000,
            vec![
                written("baseline", 100.0),
                written("baseline", 300.0),
                written("operator", 400.0),
                // a round with no write times recorded counts on neither side
                phase("baseline", "taint", 1.0, 1.0),
            ],
        );
        let t = r.targets();
        let p50 = t
            .iter()
            .find(|t| t.what.starts_with("taint p50 latency from the flip sent"))
            .unwrap();
        // 400 against the median of 100 and 300; relabeled: 100/350, 300/250, 400/200.
        assert_eq!(p50.measured, "2.00×");
        assert!(!p50.ok);
        assert_eq!(p50.noise_cell(), "0.29–2.00× · 33 %");
    }

    #[test]
    fn beyond_5000_nodes_the_memory_goals_are_64_settled_and_96_peak() {
        let v = verdicts(&report(15_000, vec![]));
        assert_eq!(
            v,
            [
                ("settled RSS ≤ 64 MiB".into(), "30.0 MiB".into(), true),
                ("peak RSS ≤ 96 MiB".into(), "100.0 MiB".into(), false),
            ]
        );
    }

    #[test]
    fn beyond_15000_nodes_the_memory_goals_are_256_settled_and_384_peak() {
        let v = verdicts(&report(100_000, vec![]));
        assert_eq!(
            v,
            [
                ("settled RSS ≤ 256 MiB".into(), "30.0 MiB".into(), true),
                ("peak RSS ≤ 384 MiB".into(), "100.0 MiB".into(), true),
            ]
        );
    }
}
