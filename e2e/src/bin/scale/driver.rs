//! The run's course: a clean cluster, setup, the baseline around the operator, and
//! the operator's timed phases, quiet period and final checks.

use std::{
    collections::{BTreeMap, BTreeSet},
    ops::RangeInclusive,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use taint_operator_crd::{
    BOOTSTRAPPED_ANNOTATION, DRAIN_STARTED_ANNOTATION, FIELD_MANAGER, MANAGED_TAINTS_ANNOTATION,
    TaintPolicy,
};

use crate::{
    Args, BaselineUser, PodStatusMode, Result,
    apiserver_metrics::apiserver_counters,
    baseline::{WritingAs, baseline_rounds, cold_start_between, taint_untaint_rounds},
    bench::Bench,
    config_from,
    load::{flip_condition, ready_critical_pods},
    model::{Critical, Flipped, PolicyDef, SCALE_LABEL, World, expected_all, node_name},
    observer::{Cue, Observer},
    operator_proc::{OpMetrics, OperatorProc},
    paired::paired_rounds,
    phase::{
        FlipSplit, PhaseResult, field_managers, latencies, per_node, round_name, sample_node_bytes,
        with_operator,
    },
    procfs::CpuProbes,
    report::Report,
    resync::resync_passes,
    settings::{
        SETTLE_MAX, SETTLE_QUIET, fault_status, flip_concurrency, flipped_nodes, operator_workers,
    },
    setup::{create_all, install_crd, node_json, pod_json, pod_name, pod_status_json},
    write_times::{Anchor, operator_writes},
};

#[allow(clippy::too_many_arguments)]
pub(crate) async fn drive(
    args: &Args,
    client: &Client,
    kubeconfig: &Path,
    operator_bin: &Path,
    operator_kubeconfig: &Path,
    lease_ns: Option<&str>,
    operator_log: &Path,
    defs: &[PolicyDef],
    critical: &Critical,
    report: &mut Report,
) -> Result {
    let n = args.nodes;
    let c = args.concurrency;
    let ns = args.namespace.clone();
    let probes = CpuProbes::new();

    // ---- a clean cluster
    let nodes_api: Api<Node> = Api::all(client.clone());
    let existing = nodes_api
        .list_metadata(
            &ListParams::default()
                .labels(&format!("{SCALE_LABEL}=true"))
                .limit(1),
        )
        .await?;
    if !existing.items.is_empty() {
        bail!(
            "the cluster already has nodes labelled {SCALE_LABEL}=true from an earlier run: start a fresh control plane (e2e/control-plane.sh stop DIR; start DIR)"
        );
    }
    install_crd(client, operator_bin).await?;
    let policies_api: Api<TaintPolicy> = Api::all(client.clone());
    if !policies_api
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .items
        .is_empty()
    {
        bail!("the cluster already has TaintPolicies: start a fresh control plane");
    }

    // ---- setup
    eprintln!(
        "scale: setup: {n} nodes, {} pods, {} policies",
        n * args.pods_per_node,
        defs.len()
    );
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let ns_obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    match ns_api.create(&PostParams::default(), &ns_obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let images = args.images_per_node;
    let api = nodes_api.clone();
    report.setup.push(
        create_all("create nodes (with status)", n, c, move |i| {
            let api = api.clone();
            Box::pin(async move {
                let node: Node = serde_json::from_value(node_json(i, images))?;
                api.create(&PostParams::default(), &node)
                    .await
                    .map_err(|e| format!("create node {}: {e}", node_name(i)))?;
                Ok(())
            })
        })
        .await?,
    );
    // Every real node carries its kubelet's entry for the status subresource. Here
    // the first condition flip would add it, after the baseline's cold start and
    // before the operator's: one runner would face an entry more than the other.
    let api = nodes_api.clone();
    report.setup.push(
        create_all(
            "node status heartbeat (kubelet's field manager entry)",
            n,
            c,
            move |i| {
                let api = api.clone();
                Box::pin(async move {
                    heartbeat(&api, &node_name(i)).await?;
                    Ok(())
                })
            },
        )
        .await?,
    );
    let ppn = args.pods_per_node;
    let pods_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    {
        let api = pods_api.clone();
        let ns = ns.clone();
        let critical = critical.clone();
        report.setup.push(
            create_all("create pods (bound)", n * ppn, c, move |k| {
                let api = api.clone();
                let body = pod_json(&ns, k / ppn, k % ppn, &critical);
                Box::pin(async move {
                    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(body)?;
                    api.create(&PostParams::default(), &pod)
                        .await
                        .map_err(|e| format!("create pod {}: {e}", pod.name_any()))?;
                    Ok(())
                })
            })
            .await?,
        );
    }
    {
        let status_pods: Vec<(usize, usize)> = (0..n)
            .flat_map(|i| (0..ppn).map(move |j| (i, j)))
            .filter(|&(_, j)| args.pod_status == PodStatusMode::All || j < critical.per_node)
            .collect();
        let status_pods = Arc::new(status_pods);
        let api = pods_api.clone();
        let per_node = critical.per_node;
        let list = status_pods.clone();
        report.setup.push(
            create_all(
                "pod status (Running; critical not Ready)",
                status_pods.len(),
                c,
                move |k| {
                    let api = api.clone();
                    let (i, j) = list[k];
                    let body = pod_status_json(i, j, j >= per_node);
                    Box::pin(async move {
                        api.patch_status(
                            &pod_name(i, j),
                            &PatchParams::default(),
                            &Patch::Merge(body),
                        )
                        .await
                        .map_err(|e| format!("status of pod {}: {e}", pod_name(i, j)))?;
                        Ok(())
                    })
                },
            )
            .await?,
        );
    }

    // ---- the observer
    let observer = Observer::start(config_from(kubeconfig).await?, n)?;
    observer.wait_synced().await;
    let mut world = World {
        flipped: flipped_nodes(args),
        ..World::default()
    };
    observer.begin(expected_all(defs, n, world));
    observer
        .wait_all_right(Duration::from_secs(60))
        .await
        .map_err(|e| format!("the fresh nodes are not as expected: {e}"))?;

    let bench = Bench {
        args,
        client,
        baseline_kubeconfig: baseline_kubeconfig(args, kubeconfig, operator_kubeconfig),
        defs,
        observer: &observer,
        probes: &probes,
    };

    // ---- baseline, before the operator
    if !args.skip_baseline {
        baseline_rounds(&bench, world, false, baseline_rounds_before(args), report).await?;
    }

    // ---- policies, then the operator
    for d in defs {
        let p: TaintPolicy = serde_json::from_value(json!({
            "apiVersion": "nodetaint.io/v1alpha1", "kind": "TaintPolicy",
            "metadata": {"name": d.name}, "spec": d.body}))
        .map_err(|e| format!("policy {}: {e}", d.name))?;
        policies_api
            .create(&PostParams::default(), &p)
            .await
            .map_err(|e| format!("create policy {}: {e}", d.name))?;
    }
    world.policies = true;

    eprintln!("scale: cold start: starting {}", operator_bin.display());
    let cold = ColdStartBegan::now(&bench, world, 0.0).await?;
    let mut op = OperatorProc::spawn(
        operator_bin,
        operator_kubeconfig,
        lease_ns,
        operator_workers(args),
        args.resync_secs,
        operator_log,
    )
    .await?;
    let result = operator_phases(&bench, critical, &mut op, world, cold, report).await;
    let tail = if result.is_err() {
        op.log_tail(20)
    } else {
        String::new()
    };
    report.peak_rss_kib = Some(op.sample().hwm_kib).filter(|v| *v > 0);
    if let Err(e) = op.stop().await {
        eprintln!("scale: stopping the operator: {e}");
    }
    let mut world = result.map_err(|e| format!("{e}\noperator log tail:\n{tail}"))?;
    // The operator is gone: no taint depends on its policies any more. With
    // --flip-nodes its readiness taints stay on the unflipped nodes until the
    // baseline's last clean-up takes every taint off, and then none is expected.
    world.policies = false;

    // ---- baseline, after the operator
    if !args.skip_baseline {
        clear_operator_records(client, args, ClearTaints::No).await?;
        baseline_rounds(&bench, world, true, baseline_rounds_after(args), report).await?;
    }
    Ok(())
}

/// The kubeconfig the baseline's clients are made from: by default the operator's,
/// so that API Priority and Fairness and authorization treat both runners alike.
fn baseline_kubeconfig<'a>(args: &Args, admin: &'a Path, operator: &'a Path) -> &'a Path {
    match args.baseline_as {
        BaselineUser::Operator => operator,
        BaselineUser::Admin => admin,
    }
}

/// The baseline's rounds before the operator: all of them, or with `--interleave`
/// only the first, the others running between the operator's.
fn baseline_rounds_before(args: &Args) -> RangeInclusive<u64> {
    if args.interleave {
        1..=1
    } else {
        1..=args.rounds
    }
}

/// The baseline's rounds after the operator stopped, numbered on from the others.
fn baseline_rounds_after(args: &Args) -> RangeInclusive<u64> {
    let r = args.rounds;
    if args.interleave {
        r + 1..=r + 1
    } else {
        r + 1..=2 * r
    }
}

/// Polls the operator's /readyz until it answers 200 (its policy cache listed): the
/// moment it is ready.
async fn wait_ready(op: &mut OperatorProc) -> Result<Instant> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if !op.alive() {
            bail!("the operator exited during startup");
        }
        if let Ok((200, _)) = op.get("/readyz").await {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            bail!("the operator was not ready within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What was read just before the operator's process started: its cold start is
/// timed and counted from here.
struct ColdStartBegan {
    t0: Instant,
    observer_events: u64,
    cpu: BTreeMap<String, f64>,
    /// The operator's CPU seconds so far (its processes stopped before this one).
    operator_cpu: f64,
    field_managers: Vec<String>,
}

impl ColdStartBegan {
    /// Points the observer at `world` and reads the counters; start the operator
    /// right after.
    async fn now(b: &Bench<'_>, world: World, operator_cpu: f64) -> Result<Self> {
        let field_managers = field_managers(b.client).await?;
        b.observer.begin(expected_all(b.defs, b.args.nodes, world));
        Ok(ColdStartBegan {
            observer_events: b.observer.events(),
            cpu: b.probes.snapshot(),
            operator_cpu,
            field_managers,
            t0: Instant::now(),
        })
    }
}

/// Times the operator's `k`th cold start, begun at `cold`: until every node is
/// right in the observer's watch and the operator has settled. Returns its
/// counters then.
async fn cold_start(
    b: &Bench<'_>,
    op: &mut OperatorProc,
    cold: ColdStartBegan,
    k: u64,
    report: &mut Report,
) -> Result<OpMetrics> {
    let Bench {
        args,
        client,
        observer,
        probes,
        ..
    } = *b;
    let ColdStartBegan {
        t0,
        observer_events: events_before,
        cpu: cold_cpu,
        operator_cpu,
        field_managers,
    } = cold;
    let n = args.nodes;
    // Read within milliseconds of the operator's start: no watch of its is old
    // enough to have been closed yet.
    let apiserver_before = apiserver_counters(client).await?;
    let ready_at = wait_ready(op).await?;
    if k == 1 {
        report.operator_ready_secs = Some(ready_at.duration_since(t0).as_secs_f64());
    }
    let right = observer
        .wait_all_right(Duration::from_secs(args.phase_timeout_secs))
        .await?;
    let cold_to_right = with_operator(probes.since(&cold_cpu), op.sample().cpu_secs - operator_cpu);
    let end = right.iter().max().copied().unwrap_or(t0);
    let m_cold = op.settle(SETTLE_QUIET, SETTLE_MAX).await?;
    let s = op.sample();
    report.phases.push(PhaseResult {
        name: round_name("cold start", k),
        kind: "cold start".into(),
        runner: "operator".into(),
        after_operator: false,
        transitions: n,
        secs: end.saturating_duration_since(t0).as_secs_f64(),
        change_secs: 0.0,
        latencies_ms: latencies(&vec![Some(t0); n], &right),
        per_node: per_node(t0, &vec![Some(t0); n], &right),
        node_writes: m_cold.node_writes,
        conflicts: m_cold.node_write_conflicts,
        requests: m_cold.clone(),
        field_managers,
        cpu_secs: Some(s.cpu_secs - operator_cpu),
        peak_rss_kib: Some(op.take_peak_kib()),
        rss_end_kib: Some(s.rss_kib),
        observer_events: observer.events() - events_before,
        other_cpu: probes.since(&cold_cpu),
        cpu_to_right: cold_to_right,
        node_bytes: Some(sample_node_bytes(client, n).await?),
        apiserver: apiserver_counters(client).await?.since(&apiserver_before),
        ..PhaseResult::default()
    });
    Ok(m_cold)
}

async fn operator_phases(
    b: &Bench<'_>,
    critical: &Critical,
    op: &mut OperatorProc,
    mut world: World,
    cold: ColdStartBegan,
    report: &mut Report,
) -> Result<World> {
    let Bench {
        args,
        client,
        defs,
        observer,
        probes,
        ..
    } = *b;
    let n = args.nodes;
    let sample = flipped_nodes(args);
    let flips = flip_concurrency(args);
    let timeout = Duration::from_secs(args.phase_timeout_secs);

    // ---- cold starts: the first, and with --cold-starts each further one after
    // the operator's work was cleared and the baseline's cold start ran
    let mut before = cold_start(b, op, cold, 1, report).await?;
    for k in 2..=args.cold_starts {
        op.stop().await?;
        clear_operator_records(client, args, ClearTaints::Yes).await?;
        let mut cleared = world;
        cleared.policies = false;
        observer.begin(expected_all(defs, n, cleared));
        observer
            .wait_all_right(timeout)
            .await
            .map_err(|e| format!("the operator's work cleared before cold start {k}: {e}"))?;
        if !args.skip_baseline {
            cold_start_between(b, cleared, k, report).await?;
        }
        eprintln!("scale: operator cold start {k}");
        let cold = ColdStartBegan::now(b, world, op.sample().cpu_secs).await?;
        op.relaunch()?;
        before = cold_start(b, op, cold, k, report).await?;
    }

    // ---- taint, untaint, readiness, policy delete
    let phases = (1..=args.rounds)
        .flat_map(|r| [("taint", r), ("untaint", r)])
        .chain([("readiness", 1), ("policy delete", 1)]);
    for (kind, round) in phases {
        if kind == "readiness" && args.paired_rounds > 0 {
            before = paired_rounds(b, op, world, args.paired_rounds, before, report).await?;
        }
        if kind == "taint" && round > 1 && args.interleave && !args.skip_baseline {
            eprintln!("scale: operator stopped for the baseline's round {round}");
            op.stop().await?;
            taint_untaint_rounds(
                b,
                world,
                false,
                round..=round,
                WritingAs::TheOperator,
                report,
            )
            .await?;
            op.relaunch()?;
            wait_ready(op).await?;
            op.wait_reconciled(n, SETTLE_MAX).await?;
            // The new process's counters start at zero; its start-up (lists,
            // watches, no-op reconciles) is not the next phase's work.
            before = op.settle(SETTLE_QUIET, SETTLE_MAX).await?;
        }
        let name = &round_name(kind, round);
        eprintln!("scale: operator {name} phase");
        match kind {
            "taint" => world.fault = true,
            "untaint" => world.fault = false,
            "readiness" => {
                world.critical_ready = true;
                world.bootstrapped = true;
            }
            _ => world.always_deleted = true,
        }
        let cpu_before = op.sample().cpu_secs;
        let others_before = probes.snapshot();
        let apiserver_before = apiserver_counters(client).await?;
        op.take_peak_kib();
        let events_before = observer.events();
        let cue = match kind {
            "taint" | "untaint" => Some(Cue {
                flipped: Flipped::Fault,
                on: kind == "taint",
            }),
            _ => None,
        };
        observer.begin_with_cue(expected_all(defs, n, world), cue);
        let log_from = op.log_len();
        let anchor = Anchor::now();
        let t0 = Instant::now();
        let mut flipped = None;
        let changes = match kind {
            "taint" | "untaint" => {
                let (status, reason) = fault_status(kind == "taint");
                let f =
                    flip_condition(client, sample, flips, Flipped::Fault, status, reason).await?;
                let sent = f.sent.clone();
                flipped = Some(f);
                sent
            }
            "readiness" => {
                ready_critical_pods(client, &args.namespace, sample, critical, flips).await?
            }
            _ => {
                let api: Api<TaintPolicy> = Api::all(client.clone());
                api.delete("bench-always", &DeleteParams::default())
                    .await
                    .map_err(|e| format!("delete policy bench-always: {e}"))?;
                vec![Some(t0); n]
            }
        };
        let change_secs = t0.elapsed().as_secs_f64();
        let right = observer.wait_all_right(timeout).await?;
        let seen = observer.cue_seen();
        let mut end = right.iter().max().copied().unwrap_or(t0);
        if kind == "policy delete" {
            // the phase ends when the finalizer let the policy go
            let api: Api<TaintPolicy> = Api::all(client.clone());
            let deadline = Instant::now() + timeout;
            loop {
                match api.get_opt("bench-always").await? {
                    None => break,
                    Some(_) if Instant::now() > deadline => {
                        bail!("policy bench-always still exists after {timeout:?}")
                    }
                    Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            end = end.max(Instant::now());
        }
        let cpu_to_right = with_operator(
            probes.since(&others_before),
            op.sample().cpu_secs - cpu_before,
        );
        let after = op.settle(SETTLE_QUIET, SETTLE_MAX).await?;
        let d = after.minus(&before);
        let s = op.sample();
        // Read once the operator has settled: every write's line is in the log.
        let flip = match flipped {
            Some(f) => {
                let written =
                    operator_writes(&op.log_since(log_from)?, sample, kind == "taint", &anchor);
                Some(FlipSplit::new(&f, &seen, &right, &written))
            }
            None => None,
        };
        report.phases.push(PhaseResult {
            name: name.into(),
            kind: kind.into(),
            runner: "operator".into(),
            after_operator: false,
            // every node for the policy delete, else the flipped ones
            transitions: changes.len(),
            secs: end.saturating_duration_since(t0).as_secs_f64(),
            change_secs,
            latencies_ms: latencies(&changes, &right),
            per_node: per_node(t0, &changes, &right),
            flip,
            node_writes: d.node_writes,
            conflicts: d.node_write_conflicts,
            requests: d,
            cpu_secs: Some(s.cpu_secs - cpu_before),
            peak_rss_kib: Some(op.take_peak_kib()),
            rss_end_kib: Some(s.rss_kib),
            observer_events: observer.events() - events_before,
            other_cpu: probes.since(&others_before),
            cpu_to_right,
            node_bytes: Some(sample_node_bytes(client, n).await?),
            apiserver: apiserver_counters(client).await?.since(&apiserver_before),
            ..PhaseResult::default()
        });
        before = after;
    }

    // ---- quiet period
    eprintln!("scale: quiet period: {} s", args.quiet_secs);
    let cpu_before = op.sample().cpu_secs;
    let others_before = probes.snapshot();
    let apiserver_before = apiserver_counters(client).await?;
    op.take_peak_kib();
    let events_before = observer.events();
    tokio::time::sleep(Duration::from_secs(args.quiet_secs)).await;
    let after = op.metrics().await?;
    let d = after.minus(&before);
    let s = op.sample();
    report.quiet = Some(PhaseResult {
        name: format!("quiet {} s", args.quiet_secs),
        runner: "operator".into(),
        node_writes: d.node_writes,
        conflicts: d.node_write_conflicts,
        requests: d,
        cpu_secs: Some(s.cpu_secs - cpu_before),
        peak_rss_kib: Some(op.take_peak_kib()),
        rss_end_kib: Some(s.rss_kib),
        observer_events: observer.events() - events_before,
        other_cpu: probes.since(&others_before),
        apiserver: apiserver_counters(client).await?.since(&apiserver_before),
        ..PhaseResult::default()
    });
    report.settled_rss_kib = Some(s.rss_kib);
    report.settled_rss_split_kib = Some((s.rss_anon_kib, s.rss_file_kib));
    report.total_cpu_secs = Some(s.cpu_secs);

    // ---- resync passes over the converged fleet
    report.resync_passes = resync_passes(args, client, op, observer, probes).await?;

    // ---- final state: annotations and policy status
    let nodes: Api<Node> = Api::all(client.clone());
    let mut bootstrapped = 0;
    let mut mentions_deleted = 0;
    let mut wrong_owner = 0;
    let listed = each_node(&nodes, |node| {
        let ann = node.annotations();
        if ann
            .get(BOOTSTRAPPED_ANNOTATION)
            .is_some_and(|v| v.contains("\"bench-bootstrap\""))
        {
            bootstrapped += 1;
        }
        let managed = ann
            .get(MANAGED_TAINTS_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if managed.contains("bench-always") {
            mentions_deleted += 1;
        }
        let owned: BTreeMap<String, String> =
            serde_json::from_str(if managed.is_empty() { "{}" } else { &managed })
                .unwrap_or_default();
        let node_taints: BTreeSet<String> = node
            .spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect();
        if owned.keys().any(|k| !node_taints.contains(k)) {
            wrong_owner += 1;
        }
    })
    .await?;
    report.final_check = vec![
        format!(
            "{bootstrapped} of {listed} nodes record the bench-bootstrap completion in {BOOTSTRAPPED_ANNOTATION}"
        ),
        format!(
            "{mentions_deleted} nodes still mention the deleted policy bench-always in {MANAGED_TAINTS_ANNOTATION}"
        ),
        format!(
            "{wrong_owner} nodes whose {MANAGED_TAINTS_ANNOTATION} names a taint the node does not carry"
        ),
    ];
    let policies: Api<TaintPolicy> = Api::all(client.clone());
    for p in policies.list(&ListParams::default()).await?.items {
        let st = p.status.clone().unwrap_or_default();
        let ready = st.conditions.iter().find(|c| c.type_ == "Ready");
        report.policy_status.push(json!({
            "name": p.name_any(),
            "selected": st.selected_nodes,
            "tainted": st.tainted_nodes,
            "ready": ready.map(|c| c.status.clone()),
            "reason": ready.map(|c| c.reason.clone()),
            "message": ready.map(|c| c.message.clone()),
        }));
    }
    Ok(world)
}

/// Renews the Ready condition's heartbeat through the status subresource, as the
/// condition flips write (the same client, so the same field manager).
async fn heartbeat(api: &Api<Node>, name: &str) -> Result {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": now}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map_err(|e| format!("heartbeat of node {name}: {e}"))?;
    Ok(())
}

/// Whether clearing the operator's records takes the nodes' taints off too.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClearTaints {
    /// Before another operator cold start: every node as it was before the first.
    Yes,
    /// Before the baseline after the operator: what is left on the nodes is in
    /// the world the baseline starts from.
    No,
}

/// Removes the records the operator left on the nodes (its bootstrap completions),
/// and with them its field manager entry, so the baseline after the operator writes
/// to nodes like the ones the operator and the baseline before it wrote to.
async fn clear_operator_records(client: &Client, args: &Args, taints: ClearTaints) -> Result {
    let api: Api<Node> = Api::all(client.clone());
    let ours = [
        MANAGED_TAINTS_ANNOTATION,
        BOOTSTRAPPED_ANNOTATION,
        DRAIN_STARTED_ANNOTATION,
    ];
    let mut names = Vec::new();
    each_node(&api, |n| {
        let tainted = n.spec.as_ref().is_some_and(|s| s.taints.is_some());
        if ours.iter().any(|k| n.annotations().contains_key(*k))
            || (taints == ClearTaints::Yes && tainted)
        {
            names.push(n.name_any());
        }
    })
    .await?;
    let names = Arc::new(names);
    let list = names.clone();
    let gone: serde_json::Map<String, serde_json::Value> = ours
        .iter()
        .map(|k| (k.to_string(), serde_json::Value::Null))
        .collect();
    let mut body = json!({"metadata": {"annotations": gone}});
    if taints == ClearTaints::Yes {
        body["spec"] = json!({"taints": null});
    }
    let what = match taints {
        ClearTaints::Yes => "clear the operator's records and taints",
        ClearTaints::No => "clear the operator's records",
    };
    create_all(what, names.len(), args.concurrency, move |k| {
        let api = api.clone();
        let name = list[k].clone();
        let body = body.clone();
        Box::pin(async move {
            api.patch(&name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .map_err(|e| format!("{what} on node {name}: {e}"))?;
            Ok(())
        })
    })
    .await?;
    let left = field_managers(client).await?;
    if let Some(m) = left.iter().find(|m| m.starts_with(FIELD_MANAGER)) {
        bail!(
            "the operator's field manager entry {m} is still on {} after its records were cleared",
            node_name(0)
        );
    }
    Ok(())
}

/// Calls `f` on every benchmark node, a page at a time: 100,000 whole nodes listed
/// at once took this process to 6 GiB. Returns how many there were.
async fn each_node(api: &Api<Node>, mut f: impl FnMut(&Node)) -> Result<usize> {
    let mut params = ListParams::default()
        .labels(&format!("{SCALE_LABEL}=true"))
        .limit(NODE_PAGE);
    let mut count = 0;
    loop {
        let page = api.list(&params).await?;
        count += page.items.len();
        page.items.iter().for_each(&mut f);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(count),
        }
    }
}

/// Nodes a page when the benchmark reads them all.
const NODE_PAGE: u32 = 500;

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn args(extra: &[&str]) -> Args {
        Args::parse_from(["scale", "--rounds", "3"].iter().chain(extra))
    }

    #[test]
    fn the_baseline_connects_as_the_operators_user_unless_told_otherwise() {
        let (admin, operator) = (Path::new("admin.kubeconfig"), Path::new("op.kubeconfig"));
        assert_eq!(baseline_kubeconfig(&args(&[]), admin, operator), operator);
        let as_admin = args(&["--baseline-as", "admin"]);
        assert_eq!(baseline_kubeconfig(&as_admin, admin, operator), admin);
    }

    #[test]
    fn the_baseline_runs_its_rounds_around_the_operator_or_between_its_rounds() {
        let side_by_side = args(&[]);
        assert_eq!(baseline_rounds_before(&side_by_side), 1..=3);
        assert_eq!(baseline_rounds_after(&side_by_side), 4..=6);

        // interleaved: 1 before, 2 and 3 between the operator's rounds (driven by
        // operator_phases), 4 after
        let interleaved = args(&["--interleave"]);
        assert_eq!(baseline_rounds_before(&interleaved), 1..=1);
        assert_eq!(baseline_rounds_after(&interleaved), 4..=4);

        let one = Args::parse_from(["scale", "--interleave"]);
        assert_eq!(baseline_rounds_before(&one), 1..=1);
        assert_eq!(baseline_rounds_after(&one), 2..=2);
    }
}
