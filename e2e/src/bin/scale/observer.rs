//! The admin watch that times every phase: it decodes only names, taints and the
//! benchmark's fault conditions, so its own cost stays small next to what it
//! measures.

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client, Config, Resource,
    runtime::{WatchStreamExt, watcher},
};
use serde::Deserialize;

use crate::{
    Result,
    model::{
        BASELINE_CONDITION, BENCH_PREFIX, FAULT_CONDITION, Flipped, SCALE_LABEL, node_index,
        node_name,
    },
    own_runtime::OwnRuntime,
};

/// A node as the observer decodes it: name, taints and conditions only (the rest
/// is skipped).
#[derive(Deserialize, Clone, Debug)]
struct SlimNode {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<SlimSpec>,
    #[serde(default)]
    status: Option<SlimStatus>,
}

#[derive(Deserialize, Clone, Debug, Default)]
struct SlimStatus {
    #[serde(default)]
    conditions: Option<Vec<SlimCondition>>,
}

#[derive(Deserialize, Clone, Debug)]
struct SlimCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

/// The conditions a phase flips, as the watch last showed them on one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Flippable {
    fault: bool,
    baseline_fault: bool,
}

impl Flippable {
    fn of(status: Option<&SlimStatus>) -> Self {
        let is_true = |ty: &str| {
            status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == ty))
                .is_some_and(|c| c.status == "True")
        };
        Flippable {
            fault: is_true(FAULT_CONDITION),
            baseline_fault: is_true(BASELINE_CONDITION),
        }
    }

    /// Whether node `i` shows `cue`'s change made.
    fn shows(self, i: usize, cue: Cue) -> bool {
        match cue.flipped.condition(i) {
            c if c == FAULT_CONDITION => self.fault == cue.on,
            c if c == BASELINE_CONDITION => self.baseline_fault == cue.on,
            _ => false,
        }
    }
}

/// The change a phase makes to every node's conditions: the `flipped` condition
/// turned True (`on`) or False.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cue {
    pub(crate) flipped: Flipped,
    pub(crate) on: bool,
}

#[derive(Deserialize, Clone, Debug, Default)]
struct SlimSpec {
    #[serde(default)]
    taints: Option<Vec<SlimTaint>>,
}

#[derive(Deserialize, Clone, Debug)]
struct SlimTaint {
    key: String,
    effect: String,
}

impl Resource for SlimNode {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Node".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The benchmark's taints on a node, as `key:Effect`.
fn bench_taints<'a>(taints: impl Iterator<Item = (&'a str, &'a str)>) -> BTreeSet<String> {
    taints
        .filter(|(k, _)| k.starts_with(BENCH_PREFIX))
        .map(|(k, e)| format!("{k}:{e}"))
        .collect()
}

struct ObsState {
    taints: Vec<Option<BTreeSet<String>>>,
    conditions: Vec<Flippable>,
    expected: Vec<BTreeSet<String>>,
    right_at: Vec<Option<Instant>>,
    wrong: usize,
    events: u64,
    cue: Option<Cue>,
    /// When the watch first showed each node with the phase's change made.
    cue_seen_at: Vec<Option<Instant>>,
}

impl ObsState {
    /// `n` nodes not yet seen, none expected right.
    fn new(n: usize) -> Self {
        ObsState {
            taints: vec![None; n],
            conditions: vec![Flippable::default(); n],
            expected: vec![BTreeSet::new(); n],
            right_at: vec![None; n],
            wrong: n,
            events: 0,
            cue: None,
            cue_seen_at: vec![None; n],
        }
    }

    fn note_cue(&mut self, i: usize, now: Instant) {
        if let Some(cue) = self.cue
            && self.cue_seen_at[i].is_none()
            && self.conditions[i].shows(i, cue)
        {
            self.cue_seen_at[i] = Some(now);
        }
    }

    fn judge(&mut self, i: usize, now: Instant) {
        let right = self.taints[i].as_ref() == Some(&self.expected[i]);
        match (right, self.right_at[i].is_some()) {
            (true, false) => {
                self.right_at[i] = Some(now);
                self.wrong -= 1;
            }
            (false, true) => {
                self.right_at[i] = None;
                self.wrong += 1;
            }
            _ => {}
        }
    }
}

/// Watches the nodes with the admin credentials and timestamps the moment each one
/// carries exactly the taints the current phase expects.
pub(crate) struct Observer {
    state: Mutex<ObsState>,
    synced: AtomicBool,
}

impl Observer {
    /// Starts the watch on a thread and runtime of its own ([`OwnRuntime`]), so
    /// nothing else in this process can delay its reading of the stream.
    pub(crate) fn start(config: Config, n: usize) -> Result<Arc<Self>> {
        let obs = Arc::new(Observer {
            state: Mutex::new(ObsState::new(n)),
            synced: AtomicBool::new(false),
        });
        let o = obs.clone();
        // Left running until the process ends.
        drop(OwnRuntime::start(
            "observer",
            1,
            config,
            move |client| async move { o.watch(client).await },
        )?);
        Ok(obs)
    }

    async fn watch(&self, client: Client) {
        let api: Api<SlimNode> = Api::all(client);
        let cfg = watcher::Config::default().labels(&format!("{SCALE_LABEL}=true"));
        let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            let node = match ev {
                Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => n,
                Ok(watcher::Event::InitDone) => {
                    self.synced.store(true, Ordering::Release);
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("scale: observer watch error (retrying): {e}");
                    continue;
                }
            };
            let Some(i) = node.metadata.name.as_deref().and_then(node_index) else {
                continue;
            };
            let taints = bench_taints(
                node.spec
                    .iter()
                    .flat_map(|s| s.taints.iter().flatten())
                    .map(|t| (t.key.as_str(), t.effect.as_str())),
            );
            let mut s = self.state.lock().expect("observer lock");
            if i >= s.taints.len() {
                continue;
            }
            s.events += 1;
            s.taints[i] = Some(taints);
            s.conditions[i] = Flippable::of(node.status.as_ref());
            s.judge(i, now);
            s.note_cue(i, now);
        }
    }

    pub(crate) async fn wait_synced(&self) {
        while !self.synced.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sets what every node should carry from now on.
    pub(crate) fn begin(&self, expected: Vec<BTreeSet<String>>) {
        self.begin_with_cue(expected, None);
    }

    /// As [`Observer::begin`], and also times when the watch first shows each node
    /// with `cue`'s change made ([`Observer::cue_seen`]).
    pub(crate) fn begin_with_cue(&self, expected: Vec<BTreeSet<String>>, cue: Option<Cue>) {
        let now = Instant::now();
        let mut s = self.state.lock().expect("observer lock");
        let n = expected.len();
        s.expected = expected;
        s.right_at = vec![None; n];
        s.wrong = n;
        s.cue = cue;
        s.cue_seen_at = vec![None; n];
        for i in 0..n {
            s.judge(i, now);
            s.note_cue(i, now);
        }
    }

    /// When the watch first showed each node with the current phase's change made
    /// (`None` where it has not, or the phase has no cue).
    pub(crate) fn cue_seen(&self) -> Vec<Option<Instant>> {
        self.state
            .lock()
            .expect("observer lock")
            .cue_seen_at
            .clone()
    }

    pub(crate) fn events(&self) -> u64 {
        self.state.lock().expect("observer lock").events
    }

    /// Waits until every node is right; returns when each one became right.
    pub(crate) async fn wait_all_right(&self, timeout: Duration) -> Result<Vec<Instant>> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let s = self.state.lock().expect("observer lock");
                if s.wrong == 0 {
                    return Ok(s.right_at.iter().map(|t| t.expect("all right")).collect());
                }
                if Instant::now() > deadline {
                    let examples: Vec<String> = (0..s.expected.len())
                        .filter(|&i| s.right_at[i].is_none())
                        .take(5)
                        .map(|i| {
                            format!(
                                "{}: has {:?}, want {:?}",
                                node_name(i),
                                s.taints[i],
                                s.expected[i]
                            )
                        })
                        .collect();
                    bail!(
                        "{} of {} nodes still wrong after {:?}, e.g.\n  {}",
                        s.wrong,
                        s.expected.len(),
                        timeout,
                        examples.join("\n  ")
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(conditions: &[(&str, &str)]) -> SlimStatus {
        SlimStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, s)| SlimCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn the_flip_is_seen_once_the_watch_shows_the_phases_condition_turned() {
        let n = 2;
        let mut s = ObsState::new(n);
        s.cue = Some(Cue {
            flipped: Flipped::Fault,
            on: true,
        });
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(300);
        // the baseline's condition turning True is not this phase's flip
        s.conditions[0] = Flippable::of(Some(&status(&[(BASELINE_CONDITION, "True")])));
        s.note_cue(0, t0);
        assert_eq!(s.cue_seen_at[0], None);
        s.conditions[0] = Flippable::of(Some(&status(&[(FAULT_CONDITION, "True")])));
        s.note_cue(0, t0);
        // a later event (the taint written) keeps the first sighting
        s.note_cue(0, later);
        assert_eq!(s.cue_seen_at, vec![Some(t0), None]);

        // recovery: False counts, and so does a node without the condition at all
        s.cue = Some(Cue {
            flipped: Flipped::Fault,
            on: false,
        });
        s.cue_seen_at = vec![None; n];
        s.conditions[0] = Flippable::of(Some(&status(&[(FAULT_CONDITION, "False")])));
        s.conditions[1] = Flippable::of(None);
        s.note_cue(0, later);
        s.note_cue(1, later);
        assert_eq!(s.cue_seen_at, vec![Some(later), Some(later)]);
    }

    #[test]
    fn in_a_paired_phase_each_node_is_seen_by_its_own_runners_condition() {
        use crate::model::{GROUPS, operator_side};
        let (ours, theirs) = (0, GROUPS);
        assert!(operator_side(ours) && !operator_side(theirs));
        let mut s = ObsState::new(GROUPS + 1);
        s.cue = Some(Cue {
            flipped: Flipped::Paired,
            on: true,
        });
        let t0 = Instant::now();
        // each node shows the other runner's condition: not its flip
        s.conditions[ours] = Flippable::of(Some(&status(&[(BASELINE_CONDITION, "True")])));
        s.conditions[theirs] = Flippable::of(Some(&status(&[(FAULT_CONDITION, "True")])));
        s.note_cue(ours, t0);
        s.note_cue(theirs, t0);
        assert_eq!((s.cue_seen_at[ours], s.cue_seen_at[theirs]), (None, None));
        s.conditions[ours] = Flippable::of(Some(&status(&[(FAULT_CONDITION, "True")])));
        s.conditions[theirs] = Flippable::of(Some(&status(&[(BASELINE_CONDITION, "True")])));
        s.note_cue(ours, t0);
        s.note_cue(theirs, t0);
        assert_eq!(
            (s.cue_seen_at[ours], s.cue_seen_at[theirs]),
            (Some(t0), Some(t0))
        );
    }
}
