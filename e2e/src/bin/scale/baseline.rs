//! The yardstick: a minimal watch-then-patch loop in this process, no engine and no
//! caches, doing the fault policies' work so the operator's phases have a baseline.

use std::{
    ops::RangeInclusive,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};

use crate::{
    Result,
    apiserver_metrics::apiserver_counters,
    bench::Bench,
    config_from,
    handoff::{Handoff, Waits, start_writers},
    load::flip_condition,
    model::{
        BASELINE_CONDITION, Flipped, SCALE_LABEL, World, expected_all, fault_taints_by_group,
        group_of, node_index, node_name, standing_taints,
    },
    observer::Cue,
    operator_proc::OpMetrics,
    own_runtime::OwnRuntime,
    phase::{
        FlipSplit, PhaseResult, field_managers, latencies, per_node, round_name, sample_node_bytes,
    },
    report::Report,
    setup::create_all,
    write_times::WriteTimes,
};

#[derive(Default)]
struct BaselineCounters {
    patches: AtomicU64,
    /// Microseconds from sending a patch to its answer, summed.
    patch_micros: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
    /// How long nodes waited between being read and a writer taking them.
    waits: Arc<Waits>,
    /// When each node's last successful patch was answered (the rounds only).
    written: WriteTimes,
}

impl BaselineCounters {
    fn tally(&self) -> Tally {
        let (taken, wait_secs) = self.waits.so_far();
        Tally {
            patches: self.patches.load(Ordering::Relaxed),
            patch_micros: self.patch_micros.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            taken,
            wait_secs,
        }
    }
}

/// The counters at one moment; the difference of two is a phase's.
#[derive(Clone, Copy, Default)]
pub(crate) struct Tally {
    pub(crate) patches: u64,
    patch_micros: u64,
    pub(crate) conflicts: u64,
    taken: u64,
    wait_secs: f64,
}

impl Tally {
    pub(crate) fn since(self, before: Tally) -> Tally {
        Tally {
            patches: self.patches - before.patches,
            patch_micros: self.patch_micros - before.patch_micros,
            conflicts: self.conflicts - before.conflicts,
            taken: self.taken - before.taken,
            wait_secs: self.wait_secs - before.wait_secs,
        }
    }

    /// In the form the report takes the operator's /metrics in.
    pub(crate) fn requests(self) -> OpMetrics {
        let mut requests = OpMetrics::default();
        requests.requests.insert(
            ("patch".into(), "nodes".into(), "sent".into()),
            self.patches as f64,
        );
        requests.patches_answered = self.patches as f64;
        requests.patch_secs = self.patch_micros as f64 / 1e6;
        requests.queue_waits = self.taken as f64;
        requests.queue_wait_secs = self.wait_secs;
        requests
    }
}

/// The baseline: one watch on nodes and, for every node event, the one JSON patch
/// that puts the fault policies' taints for the node's group on or off according to
/// the node's `BaselineFault` condition: the same taints the operator writes in its
/// taint phase. No cache beyond the event itself; conflicts are left to the next event.
/// The watch hands each event to `concurrency` writers and reads on: it never waits
/// for a write (see `handoff`).
async fn baseline_loop(
    client: Client,
    concurrency: usize,
    fault_taints: Arc<Vec<Vec<Taint>>>,
    counters: Arc<BaselineCounters>,
    params: PatchParams,
    synced: Arc<AtomicBool>,
    delay: Duration,
) {
    let api: Api<Node> = Api::all(client);
    let (events, all_written) = start_writers(concurrency, counters.waits.clone(), {
        let (api, counters) = (api.clone(), counters.clone());
        move |node: Node| {
            let (api, counters) = (api.clone(), counters.clone());
            let (fault_taints, params) = (fault_taints.clone(), params.clone());
            async move { baseline_reconcile(&api, node, &fault_taints, &counters, &params, delay).await }
        }
    });
    let cfg = watcher::Config::default().labels(&format!("{SCALE_LABEL}=true"));
    watcher::watcher(api, cfg)
        .default_backoff()
        .for_each(|ev| {
            match ev {
                Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                    events.put(n);
                }
                Ok(watcher::Event::InitDone) => synced.store(true, Ordering::Release),
                _ => {}
            }
            futures::future::ready(())
        })
        .await;
    drop(events);
    all_written.await;
}

/// The node's new taint list: `mine` all on when `want`, all off otherwise, the other
/// taints kept in their order; `None` when the node is already so.
fn baseline_taints(taints: Vec<Taint>, mine: &[Taint], want: bool) -> Option<Vec<Taint>> {
    let is_mine = |t: &Taint| mine.iter().any(|m| m.key == t.key && m.effect == t.effect);
    let present = taints.iter().filter(|t| is_mine(t)).count();
    if present == if want { mine.len() } else { 0 } {
        return None;
    }
    let mut new: Vec<Taint> = taints.into_iter().filter(|t| !is_mine(t)).collect();
    if want {
        new.extend(mine.iter().cloned());
    }
    Some(new)
}

async fn baseline_reconcile(
    api: &Api<Node>,
    node: Node,
    fault_taints: &[Vec<Taint>],
    counters: &BaselineCounters,
    params: &PatchParams,
    delay: Duration,
) {
    let Some(i) = node_index(&node.name_any()) else {
        return;
    };
    let want = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == BASELINE_CONDITION))
        .is_some_and(|c| c.status == "True");
    put_taints(
        api,
        &NodeTaints::of(node),
        &fault_taints[group_of(i)],
        want,
        counters,
        params,
        delay,
    )
    .await;
}

/// The field manager the baseline writes as. Every controller that writes nodes
/// has its own (kubelet, kube-controller-manager, the operator's
/// `taint-operator`), and each one's managedFields entry on a node makes every
/// write to that node cost the API server more (a third manager: 14% more
/// allocated a patch; docs/performance.md#field-managers-and-write-cost). Writing
/// under the name of the client that created the nodes would spare it that cost.
const BASELINE_FIELD_MANAGER: &str = "scale-baseline";

fn baseline_patch_params() -> PatchParams {
    patch_params_as(BASELINE_FIELD_MANAGER)
}

fn patch_params_as(field_manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(field_manager.to_string()),
        ..PatchParams::default()
    }
}

/// Who the baseline's taint and untaint writes are made as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WritingAs {
    /// Its own field manager: on nodes the operator has not written, or whose
    /// records were cleared.
    Itself,
    /// The operator's field manager: between the operator's rounds
    /// (`--interleave`) the nodes carry the operator's entry, and writing under
    /// another name would add one more than the operator's own writes meet.
    TheOperator,
}

impl WritingAs {
    fn params(self) -> PatchParams {
        match self {
            WritingAs::Itself => baseline_patch_params(),
            WritingAs::TheOperator => patch_params_as(taint_operator_crd::FIELD_MANAGER),
        }
    }
}

/// The one JSON patch that puts `mine` on the node (`want`) or takes them off,
/// guarded by the node's resourceVersion, sent after `delay`; nothing when the
/// node is already so.
async fn put_taints(
    api: &Api<Node>,
    node: &NodeTaints,
    mine: &[Taint],
    want: bool,
    counters: &BaselineCounters,
    params: &PatchParams,
    delay: Duration,
) {
    let Some(new) = baseline_taints(node.taints.clone(), mine, want) else {
        return;
    };
    let rv = &node.resource_version;
    let mut ops = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})];
    if new.is_empty() {
        ops.push(json!({"op": "remove", "path": "/spec/taints"}));
    } else {
        ops.push(json!({"op": "add", "path": "/spec/taints", "value": new}));
    }
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).expect("valid patch");
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    counters.patches.fetch_add(1, Ordering::Relaxed);
    let sent = Instant::now();
    let answer = api
        .patch(&node.name, params, &Patch::Json::<()>(patch))
        .await;
    counters
        .patch_micros
        .fetch_add(sent.elapsed().as_micros() as u64, Ordering::Relaxed);
    match answer {
        Ok(_) => {
            if let Some(i) = node_index(&node.name) {
                counters.written.record(i, Instant::now());
            }
        }
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
            counters.conflicts.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            counters.errors.fetch_add(1, Ordering::Relaxed);
            eprintln!("scale: baseline patch of {} failed: {e}", node.name);
        }
    }
}

/// What a baseline write reads of a node. The cold start's hand-off holds one for
/// every node listed and not yet written: whole nodes (40 images each) took this
/// process to 6.9 GiB at 100,000 nodes.
struct NodeTaints {
    name: String,
    resource_version: String,
    taints: Vec<Taint>,
}

impl NodeTaints {
    fn of(node: Node) -> Self {
        NodeTaints {
            name: node.metadata.name.unwrap_or_default(),
            resource_version: node.metadata.resource_version.unwrap_or_default(),
            taints: node.spec.and_then(|s| s.taints).unwrap_or_default(),
        }
    }
}

/// Nodes per list page of the cold start. The operator's node watch asks for 100
/// (it holds a page whole while decoding it); larger pages make the yardstick faster.
const COLD_PAGE: u32 = 500;

/// The baseline's cold start, the yardstick for the operator's: a new client lists
/// the nodes page by page and, as each page arrives, patches the standing taints
/// (the ones the operator's cold start puts on) onto every node of it, `concurrency`
/// patches in flight. Timed from the first request to every node right in the
/// observer's watch.
async fn cold_start(
    b: &Bench<'_>,
    world: &mut World,
    name: &str,
    after_operator: bool,
    report: &mut Report,
) -> Result {
    let Bench {
        args,
        client,
        defs,
        observer,
        probes,
        ..
    } = *b;
    let n = args.nodes;
    eprintln!("scale: baseline {name}");
    world.baseline_standing = true;
    let events_before = observer.events();
    let cpu_before = probes.snapshot();
    let apiserver_before = apiserver_counters(client).await?;
    let field_managers = field_managers(client).await?;
    observer.begin(expected_all(defs, n, *world));
    let counters = Arc::new(BaselineCounters::default());
    let standing = Arc::new(standing_taints(defs));
    let config = config_from(b.baseline_kubeconfig).await?;
    let t0 = Instant::now();
    // As a controller in a process of its own, like its rounds (two worker
    // threads, one per core): the client and its connections are new.
    OwnRuntime::run_to_end("baseline-cold", 2, config, {
        let (counters, concurrency) = (counters.clone(), args.concurrency);
        move |client| list_and_patch(client, standing, counters, concurrency)
    })
    .await??;
    let right = observer
        .wait_all_right(Duration::from_secs(args.phase_timeout_secs))
        .await?;
    let cpu_to_right = probes.since(&cpu_before);
    let end = right.iter().max().copied().unwrap_or(t0);
    let errors = counters.errors.load(Ordering::Relaxed);
    if errors > 0 {
        bail!("the baseline cold start had {errors} failed patches");
    }
    let tally = counters.tally();
    report.phases.push(PhaseResult {
        name: name.into(),
        kind: "cold start".into(),
        runner: "baseline".into(),
        after_operator,
        transitions: n,
        secs: end.saturating_duration_since(t0).as_secs_f64(),
        change_secs: 0.0,
        latencies_ms: latencies(&vec![Some(t0); n], &right),
        per_node: per_node(t0, &vec![Some(t0); n], &right),
        node_writes: tally.patches as f64,
        conflicts: tally.conflicts as f64,
        requests: tally.requests(),
        field_managers,
        observer_events: observer.events() - events_before,
        other_cpu: probes.since(&cpu_before),
        cpu_to_right,
        apiserver: apiserver_counters(client).await?.since(&apiserver_before),
        ..PhaseResult::default()
    });
    Ok(())
}

/// The cold start's work: lists the nodes and, as each page arrives, hands its
/// nodes to `concurrency` writers that patch the standing taints on.
async fn list_and_patch(
    client: Client,
    standing: Arc<Vec<Taint>>,
    counters: Arc<BaselineCounters>,
    concurrency: usize,
) -> Result {
    let api: Api<Node> = Api::all(client);
    let (nodes, all_written) = start_writers(concurrency, counters.waits.clone(), {
        let api = api.clone();
        move |node: NodeTaints| {
            let (api, counters, standing) = (api.clone(), counters.clone(), standing.clone());
            async move {
                let params = baseline_patch_params();
                put_taints(
                    &api,
                    &node,
                    &standing,
                    true,
                    &counters,
                    &params,
                    Duration::ZERO,
                )
                .await
            }
        }
    });
    let listed = list_into(&api, &nodes).await;
    drop(nodes);
    all_written.await;
    listed
}

/// Lists the scale nodes page by page into `out`.
async fn list_into(api: &Api<Node>, out: &Handoff<NodeTaints>) -> Result {
    let mut params = ListParams::default()
        .labels(&format!("{SCALE_LABEL}=true"))
        .limit(COLD_PAGE);
    loop {
        let page = api.list(&params).await?;
        for node in page.items {
            out.put(NodeTaints::of(node));
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(()),
        }
    }
}

/// The baseline from cold: its cold start, which puts the standing taints on, its
/// taint and untaint phases for `rounds`, and the standing taints off again. Runs
/// before the operator starts and again after it stopped, so the API server's
/// drift over a run (etcd's growing history, its caches, Go's heap) weighs on both
/// runners alike.
pub(crate) async fn baseline_rounds(
    b: &Bench<'_>,
    mut world: World,
    after_operator: bool,
    rounds: RangeInclusive<u64>,
    report: &mut Report,
) -> Result {
    let name = if after_operator {
        round_name("cold start", b.args.cold_starts + 1)
    } else {
        "cold start".into()
    };
    cold_start(b, &mut world, &name, after_operator, report).await?;
    taint_untaint_rounds(b, world, after_operator, rounds, WritingAs::Itself, report).await?;
    clear_standing_taints(b, &mut world).await
}

/// A baseline cold start between two of the operator's (`--cold-starts`), the
/// `k`th of the run, on nodes cleared of the operator's work; the standing taints
/// it put on are taken off again.
pub(crate) async fn cold_start_between(
    b: &Bench<'_>,
    mut world: World,
    k: u64,
    report: &mut Report,
) -> Result {
    cold_start(b, &mut world, &round_name("cold start", k), true, report).await?;
    clear_standing_taints(b, &mut world).await
}

/// The baseline's loop running on a runtime of its own, as a controller in a
/// process of its own would (two worker threads, one per core), with its counters.
pub(crate) struct BaselineRunner {
    runtime: OwnRuntime,
    counters: Arc<BaselineCounters>,
}

impl BaselineRunner {
    /// Starts the loop writing `taints` (per group) and returns once its watch has
    /// listed the nodes and the list's reconciles (all no-ops) have drained.
    pub(crate) async fn start(
        b: &Bench<'_>,
        taints: Vec<Vec<Taint>>,
        writing_as: WritingAs,
    ) -> Result<Self> {
        let (n, c) = (b.args.nodes, b.args.concurrency);
        let delay = Duration::from_millis(b.args.baseline_write_delay_ms);
        let counters = Arc::new(BaselineCounters {
            written: WriteTimes::new(n),
            ..BaselineCounters::default()
        });
        let synced = Arc::new(AtomicBool::new(false));
        let runtime = {
            let (counters, synced) = (counters.clone(), synced.clone());
            let taints = Arc::new(taints);
            let params = writing_as.params();
            OwnRuntime::start(
                "baseline",
                2,
                config_from(b.baseline_kubeconfig).await?,
                move |client| baseline_loop(client, c, taints, counters, params, synced, delay),
            )?
        };
        while !synced.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(BaselineRunner { runtime, counters })
    }

    pub(crate) fn tally(&self) -> Tally {
        self.counters.tally()
    }

    /// When each node's last write was answered since the last call.
    pub(crate) fn take_written(&self) -> Vec<Option<Instant>> {
        self.counters.written.take()
    }

    /// Stops the loop; an error if any of its patches failed.
    pub(crate) async fn stop(self) -> Result {
        self.runtime.stop().await;
        let errors = self.counters.errors.load(Ordering::Relaxed);
        if errors > 0 {
            bail!("the baseline had {errors} failed patches");
        }
        Ok(())
    }
}

/// The baseline's taint and untaint phases for `rounds`, through a watch of its own
/// started for them. `world` has the standing taints on, the baseline's or the
/// operator's.
pub(crate) async fn taint_untaint_rounds(
    b: &Bench<'_>,
    mut world: World,
    after_operator: bool,
    rounds: RangeInclusive<u64>,
    writing_as: WritingAs,
    report: &mut Report,
) -> Result {
    let Bench {
        args,
        client,
        defs,
        observer,
        probes,
        ..
    } = *b;
    let n = args.nodes;
    let timeout = Duration::from_secs(args.phase_timeout_secs);
    let runner = BaselineRunner::start(b, fault_taints_by_group(defs), writing_as).await?;
    let rounds = rounds.flat_map(|r| [("taint", true, r), ("untaint", false, r)]);
    for (kind, on, round) in rounds {
        let name = &round_name(kind, round);
        world.baseline_fault = on;
        eprintln!("scale: baseline {name} phase");
        let before = runner.tally();
        let events_before = observer.events();
        let cpu_before = probes.snapshot();
        let apiserver_before = apiserver_counters(client).await?;
        observer.begin_with_cue(
            expected_all(defs, n, world),
            Some(Cue {
                flipped: Flipped::Baseline,
                on,
            }),
        );
        runner.take_written();
        let t0 = Instant::now();
        let flips = flip_condition(
            client,
            crate::settings::flipped_nodes(args),
            crate::settings::flip_concurrency(args),
            Flipped::Baseline,
            if on { "True" } else { "False" },
            if on {
                "BaselineFault"
            } else {
                "BaselineHealthy"
            },
        )
        .await?;
        let change_secs = t0.elapsed().as_secs_f64();
        let right = observer.wait_all_right(timeout).await?;
        let cpu_to_right = probes.since(&cpu_before);
        let flip = FlipSplit::new(&flips, &observer.cue_seen(), &right, &runner.take_written());
        let changes = flips.sent;
        let end = right.iter().max().copied().unwrap_or(t0);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let tally = runner.tally().since(before);
        let node_bytes = Some(sample_node_bytes(client, n).await?);
        report.phases.push(PhaseResult {
            name: name.into(),
            kind: kind.into(),
            runner: "baseline".into(),
            after_operator,
            transitions: changes.len(),
            secs: end.saturating_duration_since(t0).as_secs_f64(),
            change_secs,
            latencies_ms: latencies(&changes, &right),
            per_node: per_node(t0, &changes, &right),
            flip: Some(flip),
            node_writes: tally.patches as f64,
            conflicts: tally.conflicts as f64,
            requests: tally.requests(),
            observer_events: observer.events() - events_before,
            other_cpu: probes.since(&cpu_before),
            cpu_to_right,
            node_bytes,
            apiserver: apiserver_counters(client).await?.since(&apiserver_before),
            ..PhaseResult::default()
        });
    }
    runner.stop().await
}

/// Takes every taint off every node and waits until the observer sees every node
/// so: the baseline's cold start put the standing taints on, and the operator
/// never sees them (it would rightly call them someone else's).
async fn clear_standing_taints(b: &Bench<'_>, world: &mut World) -> Result {
    let Bench {
        args,
        client,
        defs,
        observer,
        ..
    } = *b;
    let (n, concurrency) = (args.nodes, args.concurrency);
    let api: Api<Node> = Api::all(client.clone());
    let what = "baseline: standing taints off";
    create_all(what, n, concurrency, move |i| {
        let api = api.clone();
        let body = json!({"spec": {"taints": Value::Null}});
        Box::pin(async move {
            api.patch(&node_name(i), &baseline_patch_params(), &Patch::Merge(body))
                .await
                .map_err(|e| format!("taints of {}: {e}", node_name(i)))?;
            Ok(())
        })
    })
    .await?;
    world.baseline_standing = false;
    observer.begin(expected_all(defs, n, *world));
    observer
        .wait_all_right(Duration::from_secs(args.phase_timeout_secs))
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn between_the_operators_rounds_the_baseline_writes_as_the_operator() {
        assert_eq!(
            WritingAs::Itself.params().field_manager.as_deref(),
            Some(BASELINE_FIELD_MANAGER)
        );
        assert_eq!(
            WritingAs::TheOperator.params().field_manager.as_deref(),
            Some(taint_operator_crd::FIELD_MANAGER)
        );
    }

    #[test]
    fn the_baseline_changes_only_its_own_taints_and_only_when_needed() {
        let t = |key: &str, effect: &str| Taint {
            key: key.into(),
            effect: effect.into(),
            ..Taint::default()
        };
        let mine = [t("f/a", "NoSchedule"), t("f/b", "NoExecute")];
        let foreign = t("other", "NoSchedule");
        // a fault: the missing one and the present one end up once each, foreign kept first
        assert_eq!(
            baseline_taints(vec![foreign.clone(), mine[1].clone()], &mine, true),
            Some(vec![foreign.clone(), mine[0].clone(), mine[1].clone()])
        );
        // all there, or all gone: nothing to write
        assert_eq!(
            baseline_taints(vec![mine[1].clone(), mine[0].clone()], &mine, true),
            None
        );
        assert_eq!(baseline_taints(vec![foreign.clone()], &mine, false), None);
        // recovery keeps the foreign taint, and the same key with another effect
        let same_key = t("f/a", "NoExecute");
        assert_eq!(
            baseline_taints(
                vec![mine[0].clone(), same_key.clone(), foreign.clone()],
                &mine,
                false
            ),
            Some(vec![same_key, foreign])
        );
    }
}
