//! When each runner's write that put a node right was answered: a per-node latency
//! with no watch in it, to check the observer's against. The admin watch can show a
//! flip late (docs/performance.md#write-times); the time a write was answered cannot be.
//! The baseline records its own answers; the operator's come from its log, which
//! has a line for every taint it added or removed, written once the patch was
//! answered.

use std::{sync::Mutex, time::Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::model::node_index;

/// Per node, when the last write that succeeded was answered. The default records
/// nothing (no nodes).
#[derive(Default)]
pub(crate) struct WriteTimes(Mutex<Vec<Option<Instant>>>);

impl WriteTimes {
    pub(crate) fn new(n: usize) -> Self {
        WriteTimes(Mutex::new(vec![None; n]))
    }

    pub(crate) fn record(&self, i: usize, at: Instant) {
        let mut v = self.0.lock().expect("write times lock");
        if let Some(slot) = v.get_mut(i) {
            *slot = Some(slot.map_or(at, |t| t.max(at)));
        }
    }

    /// What was recorded since the last call; starts afresh.
    pub(crate) fn take(&self) -> Vec<Option<Instant>> {
        let mut v = self.0.lock().expect("write times lock");
        let n = v.len();
        std::mem::replace(&mut *v, vec![None; n])
    }
}

/// A wall-clock time and the same moment on this process's monotonic clock, to place
/// the operator log's times among this process's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Anchor {
    wall: Timestamp,
    at: Instant,
}

impl Anchor {
    pub(crate) fn now() -> Self {
        Anchor {
            wall: Timestamp::now(),
            at: Instant::now(),
        }
    }

    fn place(&self, wall: Timestamp) -> Option<Instant> {
        let d: SignedDuration = wall.duration_since(self.wall);
        let abs = d.unsigned_abs();
        if d.is_negative() {
            self.at.checked_sub(abs)
        } else {
            self.at.checked_add(abs)
        }
    }
}

/// One taint a fault policy (`bench-fault-*`) added or removed, from a line of the
/// operator's text log.
#[derive(Debug, PartialEq)]
struct LoggedWrite {
    at: Timestamp,
    node: usize,
    added: bool,
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[start..];
    let end = rest.find(' ').unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"'))
}

fn parse_line(line: &str) -> Option<LoggedWrite> {
    if !line.contains("node_reconciler:") {
        return None;
    }
    if !field(line, "policy")?.starts_with("bench-fault-") {
        return None;
    }
    let at: Timestamp = line.split_whitespace().next()?.parse().ok()?;
    let node = node_index(field(line, "node")?)?;
    let added = match field(line, "added")? {
        "true" => true,
        "false" => false,
        _ => return None,
    };
    Some(LoggedWrite { at, node, added })
}

/// Per node, when the operator's last write in `log` that `added` (or removed) a
/// fault policy's taint was answered.
pub(crate) fn operator_writes(
    log: &str,
    n: usize,
    added: bool,
    anchor: &Anchor,
) -> Vec<Option<Instant>> {
    let times = WriteTimes::new(n);
    for w in log.lines().filter_map(parse_line) {
        if w.added == added
            && let Some(at) = anchor.place(w.at)
        {
            times.record(w.node, at);
        }
    }
    times.take()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const ADDED: &str = "2026-11-27T22:39:06.395151Z  INFO taint_operator::controller::node_reconciler: policy bench-fault-1 added bench.io/fault-1:NoSchedule: condition BenchFault=True matched node=\"scale-00028\" policy=bench-fault-1 taint=bench.io/fault-1:NoSchedule added=true reason=condition BenchFault=True matched";

    #[test]
    fn a_fault_policys_log_line_gives_the_node_and_when_its_write_was_answered() {
        let w = parse_line(ADDED).expect("a write");
        assert_eq!(w.node, 28);
        assert!(w.added);
        assert_eq!(w.at.to_string(), "2026-11-27T22:39:06.395151Z");
        let removed = ADDED.replace("added=true", "added=false");
        assert!(!parse_line(&removed).expect("a write").added);
    }

    #[test]
    fn other_policies_and_other_lines_are_not_writes_of_the_fault_taints() {
        assert_eq!(
            parse_line(&ADDED.replace("policy=bench-fault-1", "policy=bench-ready")),
            None
        );
        assert_eq!(
            parse_line("2026-11-27T22:39:06.395151Z  INFO taint_operator::leader: renewed"),
            None
        );
    }

    #[test]
    fn the_last_write_of_the_direction_asked_for_counts_placed_on_this_clock() {
        let anchor = Anchor::now();
        let wall = |ms: i64| {
            anchor
                .wall
                .checked_add(SignedDuration::from_millis(ms))
                .unwrap()
        };
        let line = |ms: i64, node: &str, added: bool| {
            ADDED
                .replacen("2026-11-27T22:39:06.395151Z", &wall(ms).to_string(), 1)
                .replace("scale-00028", node)
                .replace("added=true", &format!("added={added}"))
        };
        let log = [
            line(100, "scale-00001", true),
            line(300, "scale-00001", true),
            line(-50, "scale-00002", true),
            line(900, "scale-00002", false),
        ]
        .join("\n");
        let got = operator_writes(&log, 4, true, &anchor);
        assert_eq!(got[0], None);
        assert_eq!(got[1], Some(anchor.at + Duration::from_millis(300)));
        assert_eq!(got[2], anchor.at.checked_sub(Duration::from_millis(50)));
        assert_eq!(got[3], None);
    }

    #[test]
    fn the_baseline_keeps_each_nodes_latest_answer_until_taken() {
        let t = WriteTimes::new(2);
        let at = Instant::now();
        t.record(1, at + Duration::from_millis(5));
        t.record(1, at);
        t.record(7, at);
        assert_eq!(t.take(), vec![None, Some(at + Duration::from_millis(5))]);
        assert_eq!(t.take(), vec![None, None]);
    }
}
