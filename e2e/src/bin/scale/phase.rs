//! What one phase measured, shared by both runners, and the arithmetic over its
//! per-node latencies (medians, nearest-rank percentiles).

use std::{collections::BTreeMap, time::Instant};

use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};

use crate::{
    Result,
    apiserver_metrics::ApiServerCounters,
    load::Flips,
    model::{GROUPS, node_name},
    operator_proc::OpMetrics,
};

/// The phases of paired rounds, where one stream of flips reaches both runners.
pub(crate) const PAIRED_TAINT: &str = "paired taint";
pub(crate) const PAIRED_UNTAINT: &str = "paired untaint";

/// "taint" in the first round, "taint 2" in the second.
pub(crate) fn round_name(kind: &str, round: u64) -> String {
    if round == 1 {
        kind.to_string()
    } else {
        format!("{kind} {round}")
    }
}

/// `cpu` with the operator's CPU seconds under the operator's name.
pub(crate) fn with_operator(
    mut cpu: BTreeMap<String, f64>,
    operator_secs: f64,
) -> BTreeMap<String, f64> {
    cpu.insert("taint-operator".into(), operator_secs);
    cpu
}

/// The field managers recorded on the first node (`manager/operation[/subresource]`).
/// The API server converts the whole node once per entry on every write to it (the
/// managed fields are reconciled manager by manager), so an entry more makes every
/// write dearer: runners are compared on nodes that carry the same entries.
pub(crate) async fn field_managers(client: &Client) -> Result<Vec<String>> {
    let node = Api::<Node>::all(client.clone()).get(&node_name(0)).await?;
    Ok(node
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let mut entry = format!(
                "{}/{}",
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default()
            );
            if let Some(sub) = m.subresource.filter(|s| !s.is_empty()) {
                entry = format!("{entry}/{sub}");
            }
            entry
        })
        .collect())
}

/// Mean JSON size of a node of each group, read when a phase's nodes are all right:
/// the API server's work on every node request grows with it.
pub(crate) async fn sample_node_bytes(client: &Client, n: usize) -> Result<f64> {
    let api: Api<Node> = Api::all(client.clone());
    let sample = n.min(GROUPS);
    let mut total = 0;
    for i in 0..sample {
        let node = api.get(&node_name(i)).await?;
        total += serde_json::to_vec(&node)?.len();
    }
    Ok(total as f64 / sample.max(1) as f64)
}

#[derive(Clone, Debug, Default)]
pub(crate) struct PhaseResult {
    /// The phase with its round when there are several ("taint 2").
    pub(crate) name: String,
    /// The phase without its round ("taint"): what the ratios group by.
    pub(crate) kind: String,
    /// "operator" or "baseline"
    pub(crate) runner: String,
    /// A baseline round run after the operator stopped.
    pub(crate) after_operator: bool,
    pub(crate) transitions: usize,
    /// First change to every node right.
    pub(crate) secs: f64,
    /// Time it took to send the changes (condition flips, pod patches).
    pub(crate) change_secs: f64,
    /// Per node: change to taints right, in milliseconds, sorted.
    pub(crate) latencies_ms: Vec<f64>,
    pub(crate) node_writes: f64,
    pub(crate) conflicts: f64,
    pub(crate) requests: OpMetrics,
    /// Cold starts: the field managers on the first node when the runner started.
    pub(crate) field_managers: Vec<String>,
    pub(crate) cpu_secs: Option<f64>,
    pub(crate) peak_rss_kib: Option<u64>,
    pub(crate) rss_end_kib: Option<u64>,
    pub(crate) observer_events: u64,
    /// CPU seconds of the other processes in this phase: this program, kube-apiserver, etcd.
    pub(crate) other_cpu: BTreeMap<String, f64>,
    /// CPU seconds of every process (the operator too) from the first change to the
    /// moment every node was right: what the phase time is made of. `other_cpu` and
    /// `cpu_secs` also count what follows (events, status writes) until the operator
    /// has settled.
    pub(crate) cpu_to_right: BTreeMap<String, f64>,
    /// Per node, in node order: (change sent, ms after the phase began; latency, ms).
    pub(crate) per_node: Vec<(f64, f64)>,
    /// The nodes `per_node` is about, in its order; empty: every node, 0 to N.
    /// A paired phase times each runner on its half.
    pub(crate) nodes: Vec<usize>,
    /// Condition flip phases: a node's latency in parts.
    pub(crate) flip: Option<FlipSplit>,
    /// Mean JSON bytes of a sampled node once every node was right.
    pub(crate) node_bytes: Option<f64>,
    /// What the phase cost the API server by its own counters: watches it closed
    /// for falling behind (any client's: the observer's and the runner's), its
    /// garbage collection and heap allocation.
    pub(crate) apiserver: ApiServerCounters,
}

impl PhaseResult {
    /// Latency by when the change was sent: the nodes in change order, in ten
    /// slices; per slice (first change, s into the phase; p50 ms; max ms).
    pub(crate) fn timeline(&self) -> Vec<(f64, f64, f64)> {
        let mut v = self.per_node.clone();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let slice = v.len().div_ceil(10).max(1);
        v.chunks(slice)
            .map(|c| {
                let mut l: Vec<f64> = c.iter().map(|x| x.1).collect();
                l.sort_by(|a, b| a.total_cmp(b));
                (c[0].0 / 1000.0, percentile(&l, 50.0), percentile(&l, 100.0))
            })
            .collect()
    }
}

pub(crate) fn per_node(
    t0: Instant,
    changes: &[Option<Instant>],
    right: &[Instant],
) -> Vec<(f64, f64)> {
    changes
        .iter()
        .zip(right)
        .map(|(c, r)| {
            let c = c.unwrap_or(t0);
            (
                c.saturating_duration_since(t0).as_secs_f64() * 1000.0,
                r.saturating_duration_since(c).as_secs_f64() * 1000.0,
            )
        })
        .collect()
}

/// The middle value; with an even count, the mean of the two middle ones (the
/// baseline has 2R rounds, and the lower middle alone would favour either side).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Per node, the milliseconds from `from` to `to`, sorted; nodes missing either
/// moment are left out.
pub(crate) fn spans(from: &[Option<Instant>], to: &[Option<Instant>]) -> Vec<f64> {
    let mut v: Vec<f64> = from
        .iter()
        .zip(to)
        .filter_map(|(f, t)| Some(t.as_ref()?.saturating_duration_since(*f.as_ref()?)))
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// A condition flip phase's per-node latency in parts, in milliseconds, each sorted
/// (nodes missing either end of a part are left out of it).
#[derive(Clone, Debug, Default)]
pub(crate) struct FlipSplit {
    /// From the flip sent until the admin watch showed it (the API server's answer
    /// and its watch delivery, which both runners wait for alike).
    pub(crate) sent_to_seen_ms: Vec<f64>,
    /// From then until the same watch showed the node's taints right (the runner's
    /// reaction: its own watch, queue and write, and the write's way back).
    pub(crate) seen_to_right_ms: Vec<f64>,
    /// From the flip sent until the API server answered it.
    pub(crate) flip_answer_ms: Vec<f64>,
    /// From the flip's answer until the admin watch showed it: the watch's delivery.
    pub(crate) answer_to_seen_ms: Vec<f64>,
    /// From the flip sent until the runner's write that put the node right was
    /// answered: the latency with no watch of the benchmark's in it.
    pub(crate) to_written_ms: Vec<f64>,
    /// Nodes with no write of the runner's recorded in the phase.
    pub(crate) unwritten: usize,
}

impl FlipSplit {
    pub(crate) fn new(
        flips: &Flips,
        seen: &[Option<Instant>],
        right: &[Instant],
        written: &[Option<Instant>],
    ) -> Self {
        // about the flipped nodes only: the first `flips.sent.len()`
        let k = flips.sent.len();
        let (seen, written) = (&seen[..k.min(seen.len())], &written[..k.min(written.len())]);
        let right: Vec<Option<Instant>> = right.iter().take(k).copied().map(Some).collect();
        FlipSplit {
            sent_to_seen_ms: spans(&flips.sent, seen),
            seen_to_right_ms: spans(seen, &right),
            flip_answer_ms: spans(&flips.sent, &flips.answered),
            answer_to_seen_ms: spans(&flips.answered, seen),
            to_written_ms: spans(&flips.sent, written),
            unwritten: written.iter().filter(|w| w.is_none()).count(),
        }
    }
}

pub(crate) fn latencies(changes: &[Option<Instant>], right: &[Instant]) -> Vec<f64> {
    let mut v: Vec<f64> = changes
        .iter()
        .zip(right)
        .map(|(c, r)| match c {
            Some(c) => r.saturating_duration_since(*c).as_secs_f64() * 1000.0,
            None => 0.0,
        })
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(
            median(vec![35.0, 24.0, 29.3, 31.9, 33.4, 27.2]),
            (29.3 + 31.9) / 2.0
        );
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![7.0]), 7.0);
        assert_eq!(median(vec![]), 0.0);
    }

    #[test]
    fn a_latency_splits_where_the_watch_showed_the_flip_and_where_it_was_answered() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let flips = Flips {
            sent: vec![Some(at(0)), Some(at(10)), Some(at(20)), None],
            answered: vec![Some(at(5)), Some(at(30)), Some(at(21)), None],
        };
        // node 2's flip was never seen (its watch relisted past it); node 3 had no change
        let seen = [Some(at(100)), Some(at(50)), None, Some(at(30))];
        let right = [at(400), at(250), at(300), at(90)];
        // node 1's write was not recorded
        let written = [Some(at(350)), None, Some(at(120)), Some(at(80))];
        let s = FlipSplit::new(&flips, &seen, &right, &written);
        assert_eq!(s.sent_to_seen_ms, vec![40.0, 100.0]);
        assert_eq!(s.seen_to_right_ms, vec![60.0, 200.0, 300.0]);
        assert_eq!(s.flip_answer_ms, vec![1.0, 5.0, 20.0]);
        assert_eq!(s.answer_to_seen_ms, vec![20.0, 95.0]);
        assert_eq!(s.to_written_ms, vec![100.0, 350.0]);
        assert_eq!(s.unwritten, 1);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
    }
}
