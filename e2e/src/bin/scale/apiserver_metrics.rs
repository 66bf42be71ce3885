//! The API server's own count of the watches it closed on a watcher that fell
//! behind (`apiserver_terminated_watchers_total`): the cacher gives each watcher a
//! small buffer, and when one is full for longer than its dispatch budget it ends
//! that watch rather than hold every other watcher back. The client sees a watch
//! that ended cleanly and opens a new one from its last resourceVersion. Also the
//! Go runtime's garbage collection CPU and heap allocation, and the requests API
//! Priority and Fairness held in its queues.

use std::collections::BTreeMap;

use kube::Client;

use crate::Result;

const TERMINATED_WATCHERS: &str = "apiserver_terminated_watchers_total";
/// The Go runtime's CPU seconds in garbage collection (runtime/metrics `/cpu/classes/gc/total`).
const GC_CPU: &str = "go_cpu_classes_gc_total_cpu_seconds_total";
/// Bytes the Go runtime has allocated on the heap since the process started.
const HEAP_ALLOCATED: &str = "go_gc_heap_allocs_bytes_total";
/// How long API Priority and Fairness held each request before it ran.
const APF_WAIT: &str = "apiserver_flowcontrol_request_wait_duration_seconds";
/// A request held longer than this (a histogram bucket bound) waited for a seat.
const APF_QUEUED_AFTER: &str = "0.005";

/// Counters of the API server's own, read from its /metrics: what a phase cost it
/// beyond the CPU seconds /proc shows. On two shared cores a loaded API server
/// spends much of its CPU collecting garbage, so what a client makes it allocate
/// (large lists, big objects) slows every other request.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ApiServerCounters {
    /// Resource -> watches closed for falling behind. A resource none were closed
    /// for has no series and reads 0.
    pub(crate) watchers_closed: BTreeMap<String, f64>,
    pub(crate) gc_cpu_secs: f64,
    pub(crate) heap_allocated_bytes: f64,
    /// Requests of every priority level but `exempt` (the admin client's, the
    /// baseline's) that waited in API Priority and Fairness's queues for a seat,
    /// and their waits in seconds. Its concurrency limit per priority level, not
    /// the API server's CPU, is then what holds a client back.
    pub(crate) apf_queued: f64,
    pub(crate) apf_wait_secs: f64,
}

impl ApiServerCounters {
    /// The increase from `before` to `self`; resources with no new closes are left out.
    pub(crate) fn since(&self, before: &Self) -> Self {
        let watchers_closed = self
            .watchers_closed
            .iter()
            .map(|(resource, v)| {
                let b = before.watchers_closed.get(resource).copied().unwrap_or(0.0);
                (resource.clone(), v - b)
            })
            .filter(|(_, v)| *v > 0.0)
            .collect();
        Self {
            watchers_closed,
            gc_cpu_secs: self.gc_cpu_secs - before.gc_cpu_secs,
            heap_allocated_bytes: self.heap_allocated_bytes - before.heap_allocated_bytes,
            apf_queued: self.apf_queued - before.apf_queued,
            apf_wait_secs: self.apf_wait_secs - before.apf_wait_secs,
        }
    }
}

/// The API server's counters since it started.
pub(crate) async fn apiserver_counters(client: &Client) -> Result<ApiServerCounters> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(request)
        .await
        .map_err(|e| format!("read the API server's /metrics: {e}"))?;
    Ok(parse_counters(&text))
}

fn parse_counters(text: &str) -> ApiServerCounters {
    let mut counters = ApiServerCounters::default();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if let Some(labels) = series.strip_prefix(TERMINATED_WATCHERS) {
            let resource = labels
                .split("resource=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_string();
            *counters.watchers_closed.entry(resource).or_default() += value;
        } else if let Some(rest) = series.strip_prefix(APF_WAIT) {
            if !rest.contains("execute=\"true\"") || rest.contains("priority_level=\"exempt\"") {
                continue;
            }
            if rest.starts_with("_count") {
                counters.apf_queued += value;
            } else if rest.starts_with("_bucket")
                && rest.contains(&format!("le=\"{APF_QUEUED_AFTER}\""))
            {
                counters.apf_queued -= value;
            } else if rest.starts_with("_sum") {
                counters.apf_wait_secs += value;
            }
        } else if series == GC_CPU {
            counters.gc_cpu_secs = value;
        } else if series == HEAP_ALLOCATED {
            counters.heap_allocated_bytes = value;
        }
    }
    counters
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_by_resource_and_other_series_ignored() {
        let text = "\
# HELP apiserver_terminated_watchers_total [STABLE] Counter of watchers closed due to unresponsiveness broken by resource type.
# TYPE apiserver_terminated_watchers_total counter
apiserver_terminated_watchers_total{group=\"\",resource=\"nodes\"} 7
apiserver_terminated_watchers_total{group=\"\",resource=\"pods\"} 2
apiserver_watch_events_total{group=\"\",resource=\"nodes\",version=\"v1\"} 90000
go_cpu_classes_gc_total_cpu_seconds_total 12.5
go_cpu_classes_gc_mark_assist_cpu_seconds_total 3.25
go_gc_heap_allocs_bytes_total 1.090766016e+09
apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute=\"true\",flow_schema=\"global-default\",priority_level=\"global-default\",le=\"0.005\"} 5054
apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute=\"true\",flow_schema=\"global-default\",priority_level=\"global-default\",le=\"0.02\"} 5123
apiserver_flowcontrol_request_wait_duration_seconds_sum{execute=\"true\",flow_schema=\"global-default\",priority_level=\"global-default\"} 4.75
apiserver_flowcontrol_request_wait_duration_seconds_count{execute=\"true\",flow_schema=\"global-default\",priority_level=\"global-default\"} 5200
apiserver_flowcontrol_request_wait_duration_seconds_sum{execute=\"false\",flow_schema=\"global-default\",priority_level=\"global-default\"} 9
apiserver_flowcontrol_request_wait_duration_seconds_count{execute=\"false\",flow_schema=\"global-default\",priority_level=\"global-default\"} 3
apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute=\"true\",flow_schema=\"exempt\",priority_level=\"exempt\",le=\"0.005\"} 100
apiserver_flowcontrol_request_wait_duration_seconds_sum{execute=\"true\",flow_schema=\"exempt\",priority_level=\"exempt\"} 2
apiserver_flowcontrol_request_wait_duration_seconds_count{execute=\"true\",flow_schema=\"exempt\",priority_level=\"exempt\"} 120
";
        let counters = parse_counters(text);
        let closed = &counters.watchers_closed;
        assert_eq!(closed.len(), 2);
        assert_eq!(closed["nodes"], 7.0);
        assert_eq!(closed["pods"], 2.0);
        assert_eq!(counters.gc_cpu_secs, 12.5);
        assert_eq!(counters.heap_allocated_bytes, 1_090_766_016.0);
        // 5,200 ran, 5,054 of them within 5 ms; exempt and rejected requests left out
        assert_eq!(counters.apf_queued, 146.0);
        assert_eq!(counters.apf_wait_secs, 4.75);
    }

    #[test]
    fn the_increase_leaves_out_resources_that_did_not_move() {
        let closed = |pairs: &[(&str, f64)]| ApiServerCounters {
            watchers_closed: pairs.iter().map(|(r, v)| (r.to_string(), *v)).collect(),
            gc_cpu_secs: 10.0,
            heap_allocated_bytes: 4e9,
            apf_queued: 40.0,
            apf_wait_secs: 1.5,
        };
        let before = closed(&[("nodes", 3.0), ("pods", 2.0)]);
        let mut after = closed(&[("nodes", 5.0), ("pods", 2.0)]);
        after.gc_cpu_secs = 12.5;
        after.heap_allocated_bytes = 5e9;
        after.apf_queued = 46.0;
        after.apf_wait_secs = 2.0;
        assert_eq!(
            after.since(&before),
            ApiServerCounters {
                watchers_closed: BTreeMap::from([("nodes".to_string(), 2.0)]),
                gc_cpu_secs: 2.5,
                heap_allocated_bytes: 1e9,
                apf_queued: 6.0,
                apf_wait_secs: 0.5,
            }
        );
        // a resource first closed during the phase has no series before it
        let after = closed(&[("leases", 1.0)]);
        assert_eq!(after.since(&closed(&[])).watchers_closed["leases"], 1.0);
    }
}
