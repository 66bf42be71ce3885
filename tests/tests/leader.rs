//! Leader election against a mocked API server, as far as the `taint_operator_leader`
//! gauge goes: the alerts' "nobody leads" comes from it, so it must be 1 exactly
//! while this replica holds the Lease.

mod support;

use std::time::Duration;

use http::Method;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{Client, api::ObjectMeta};
use serde_json::{Value, json};
use support::ApiServerVerifier;
use taint_operator::{leader::LeaderElector, telemetry::metrics::Metrics};

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/taint-system/leases/taint-operator";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/taint-system/leases";

fn elector(metrics: &Metrics) -> (LeaderElector, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let elector = LeaderElector::new(
        Client::new(service, "default"),
        "taint-system",
        "taint-operator",
        "me",
        Duration::from_secs(15),
        metrics.leader.clone(),
    );
    (elector, ApiServerVerifier::new(handle, &[]))
}

/// The Lease as the API server holds it: `holder` renewed it just now.
fn lease(holder: &str) -> Value {
    serde_json::to_value(Lease {
        metadata: ObjectMeta {
            name: Some("taint-operator".into()),
            namespace: Some("taint-system".into()),
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..LeaseSpec::default()
        }),
    })
    .unwrap()
}

fn not_found() -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "leases.coordination.k8s.io \"taint-operator\" not found",
        "reason": "NotFound", "code": 404
    })
}

fn leader(metrics: &Metrics) -> i64 {
    metrics.leader.get()
}

#[tokio::test]
async fn the_gauge_is_one_from_acquiring_the_lease_to_releasing_it() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    assert_eq!(leader(&metrics), 0, "a replica starts as a standby");
    let server = tokio::spawn(async move {
        api.expect(Method::GET, LEASE, None)
            .await
            .reply_status(&not_found());
        let create = api.expect(Method::POST, LEASES, None).await;
        assert_eq!(create.body["spec"]["holderIdentity"], "me");
        let body = create.body.clone();
        create.reply(201, &body);
        // release: read it back, then give it up
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease("me"));
        let update = api.expect(Method::PUT, LEASE, None).await;
        assert_eq!(update.body["spec"]["holderIdentity"], Value::Null);
        let body = update.body.clone();
        update.reply(200, &body);
        api
    });
    tokio::time::timeout(Duration::from_secs(1), async {
        elector.acquire().await;
        assert_eq!(leader(&metrics), 1, "acquired");
        elector.release().await;
        assert_eq!(leader(&metrics), 0, "released");
    })
    .await
    .expect("the exchange did not finish in time");
    drop(elector);
    server.await.unwrap().no_more_requests().await;
}

// Paused time: the renewal comes a third of the lease duration (5 s) later.
#[tokio::test(start_paused = true)]
async fn the_gauge_drops_when_another_replica_takes_the_lease() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    let server = tokio::spawn(async move {
        api.expect(Method::GET, LEASE, None)
            .await
            .reply_status(&not_found());
        let create = api.expect(Method::POST, LEASES, None).await;
        let body = create.body.clone();
        create.reply(201, &body);
        // At the first renewal someone else holds it (our renewals were lost).
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease("other"));
        api
    });
    tokio::time::timeout(Duration::from_secs(60), async {
        elector.acquire().await;
        assert_eq!(leader(&metrics), 1, "acquired");
        elector.hold().await;
        assert_eq!(leader(&metrics), 0, "lost");
    })
    .await
    .expect("the exchange did not finish in time");
    drop(elector);
    server.await.unwrap().no_more_requests().await;
}

#[tokio::test(start_paused = true)]
async fn a_standby_stays_at_zero_while_another_replica_holds_the_lease() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    let server = tokio::spawn(async move {
        for _ in 0..3 {
            api.expect(Method::GET, LEASE, None)
                .await
                .reply(200, &lease("other"));
        }
        api
    });
    // acquire() keeps waiting: stop it once the third check has been answered.
    let waited = tokio::time::timeout(Duration::from_secs(7), elector.acquire()).await;
    assert!(waited.is_err(), "took a lease another replica holds");
    assert_eq!(leader(&metrics), 0);
    drop(elector);
    server.await.unwrap().no_more_requests().await;
}
