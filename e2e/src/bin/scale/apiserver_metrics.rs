//! The API server's own count of the watches it closed on a watcher that fell
//! behind (`apiserver_terminated_watchers_total`): the cacher gives each watcher a
//! small buffer, and when one is full for longer than its dispatch budget it ends
//! that watch rather than hold every other watcher back. The client sees a watch
//! that ended cleanly and opens a new one from its last resourceVersion.

use std::collections::BTreeMap;

use kube::Client;

use crate::Result;

const TERMINATED_WATCHERS: &str = "apiserver_terminated_watchers_total";

/// Watches the API server closed for falling behind, by resource, since it started.
/// A resource none were closed for has no series and reads 0.
pub(crate) async fn watchers_closed(client: &Client) -> Result<BTreeMap<String, f64>> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(request)
        .await
        .map_err(|e| format!("read the API server's /metrics: {e}"))?;
    Ok(parse_watchers_closed(&text))
}

/// The increase of each resource's count from `before` to `after`.
pub(crate) fn closed_since(
    after: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(resource, v)| {
            let b = before.get(resource).copied().unwrap_or(0.0);
            (resource.clone(), v - b)
        })
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

fn parse_watchers_closed(text: &str) -> BTreeMap<String, f64> {
    let mut closed = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(TERMINATED_WATCHERS) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let resource = labels
            .split("resource=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("")
            .to_string();
        *closed.entry(resource).or_default() += value;
    }
    closed
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
";
        let closed = parse_watchers_closed(text);
        assert_eq!(closed.len(), 2);
        assert_eq!(closed["nodes"], 7.0);
        assert_eq!(closed["pods"], 2.0);
    }

    #[test]
    fn the_increase_leaves_out_resources_that_did_not_move() {
        let before = BTreeMap::from([("nodes".to_string(), 3.0), ("pods".to_string(), 2.0)]);
        let after = BTreeMap::from([("nodes".to_string(), 5.0), ("pods".to_string(), 2.0)]);
        assert_eq!(
            closed_since(&after, &before),
            BTreeMap::from([("nodes".to_string(), 2.0)])
        );
        // a resource first closed during the phase has no series before it
        let after = BTreeMap::from([("leases".to_string(), 1.0)]);
        assert_eq!(closed_since(&after, &BTreeMap::new())["leases"], 1.0);
    }
}
