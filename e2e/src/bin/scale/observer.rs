//! The admin watch that times every phase: it decodes only names and taints, so its
//! own cost stays small next to what it measures.

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
    Api, Client, Resource,
    runtime::{WatchStreamExt, watcher},
};
use serde::Deserialize;

use crate::{
    Result,
    model::{BENCH_PREFIX, SCALE_LABEL, node_index, node_name},
};

/// A node as the observer decodes it: name and taints only (the rest is skipped).
#[derive(Deserialize, Clone, Debug)]
struct SlimNode {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<SlimSpec>,
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
    expected: Vec<BTreeSet<String>>,
    right_at: Vec<Option<Instant>>,
    wrong: usize,
    events: u64,
}

impl ObsState {
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
    pub(crate) fn start(client: Client, n: usize) -> Arc<Self> {
        let obs = Arc::new(Observer {
            state: Mutex::new(ObsState {
                taints: vec![None; n],
                expected: vec![BTreeSet::new(); n],
                right_at: vec![None; n],
                wrong: n,
                events: 0,
            }),
            synced: AtomicBool::new(false),
        });
        let o = obs.clone();
        tokio::spawn(async move {
            let api: Api<SlimNode> = Api::all(client);
            let cfg = watcher::Config::default().labels(&format!("{SCALE_LABEL}=true"));
            let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
            while let Some(ev) = events.next().await {
                let now = Instant::now();
                let node = match ev {
                    Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => n,
                    Ok(watcher::Event::InitDone) => {
                        o.synced.store(true, Ordering::Release);
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
                let mut s = o.state.lock().expect("observer lock");
                if i >= s.taints.len() {
                    continue;
                }
                s.events += 1;
                s.taints[i] = Some(taints);
                s.judge(i, now);
            }
        });
        obs
    }

    pub(crate) async fn wait_synced(&self) {
        while !self.synced.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sets what every node should carry from now on.
    pub(crate) fn begin(&self, expected: Vec<BTreeSet<String>>) {
        let now = Instant::now();
        let mut s = self.state.lock().expect("observer lock");
        s.expected = expected;
        s.right_at = vec![None; s.expected.len()];
        s.wrong = s.expected.len();
        for i in 0..s.expected.len() {
            s.judge(i, now);
        }
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
