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
use taint_operator::{
    leader::{INCONCLUSIVE_PAUSE, LeaderElector, Timing},
    telemetry::metrics::Metrics,
    write_fence::WriteFence,
};

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
        Timing::default(),
        metrics.leader.clone(),
    );
    (elector, ApiServerVerifier::new(handle, &[]))
}

/// The Lease as the API server holds it: `holder` renewed it just now.
fn lease(holder: &str) -> Value {
    lease_at(holder, Timestamp::now(), "7")
}

/// The Lease as `holder` renewed it at `renewed`, at resourceVersion `rv`.
fn lease_at(holder: &str, renewed: Timestamp, rv: &str) -> Value {
    serde_json::to_value(Lease {
        metadata: ObjectMeta {
            name: Some("taint-operator".into()),
            namespace: Some("taint-system".into()),
            resource_version: Some(rv.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(renewed)),
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

fn conflict() -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Operation cannot be fulfilled on leases.coordination.k8s.io \"taint-operator\": the object has been modified; please apply your changes to the latest version and try again",
        "reason": "Conflict", "code": 409
    })
}

fn leader(metrics: &Metrics) -> i64 {
    metrics.leader.get()
}

#[tokio::test(start_paused = true)]
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

// Paused time: the renewal comes a retry period (2 s) later.
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
        // At 0, 2, 4 and 6 s.
        for _ in 0..4 {
            api.expect(Method::GET, LEASE, None)
                .await
                .reply(200, &lease("other"));
        }
        api
    });
    // acquire() keeps waiting: stop it once the fourth check has been answered.
    let waited = tokio::time::timeout(Duration::from_secs(7), elector.acquire()).await;
    assert!(waited.is_err(), "took a lease another replica holds");
    assert_eq!(leader(&metrics), 0);
    drop(elector);
    server.await.unwrap().no_more_requests().await;
}

/// Expiry is judged by when this replica saw the record change, on its own clock:
/// a renewTime from an hour ago (a skewed holder clock, or a replica that just
/// started) does not let it take the lease at once; it waits a whole lease duration
/// of seeing the record unchanged, and starts over whenever it changes.
#[tokio::test(start_paused = true)]
async fn a_standby_takes_the_lease_only_after_seeing_it_unchanged_for_a_whole_duration() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    let an_hour_ago = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1);
    let started = tokio::time::Instant::now();
    let server = tokio::spawn(async move {
        // 0 to 8 s: the same old record.
        for _ in 0..5 {
            api.expect(Method::GET, LEASE, None)
                .await
                .reply(200, &lease_at("other", an_hour_ago, "7"));
        }
        // At 10 s the holder renews (a new resourceVersion): the wait starts over.
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease_at("other", an_hour_ago, "8"));
        // Unchanged from 10 s: still held at 12 to 24 s.
        for _ in 0..7 {
            api.expect(Method::GET, LEASE, None)
                .await
                .reply(200, &lease_at("other", an_hour_ago, "8"));
        }
        // At 26 s it has been unchanged for 16 s: take it.
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease_at("other", an_hour_ago, "8"));
        let update = api.expect(Method::PUT, LEASE, None).await;
        assert_eq!(update.body["spec"]["holderIdentity"], "me");
        assert_eq!(update.body["spec"]["leaseTransitions"], 1);
        let body = update.body.clone();
        update.reply(200, &body);
        api
    });
    tokio::time::timeout(Duration::from_secs(60), elector.acquire())
        .await
        .expect("acquired");
    let waited = started.elapsed();
    assert_eq!(waited, Duration::from_secs(26), "taken after {waited:?}");
    assert_eq!(leader(&metrics), 1);
    drop(elector);
    server.await.unwrap().no_more_requests().await;
}

/// A renewal whose request never gets an answer (a black-holed connection) does not
/// keep the leader leading: it gives up at the renew deadline, before a standby can
/// take the lease (a whole lease duration after it last saw it change).
#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewal_hangs_gives_up_at_the_renew_deadline() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    let server = tokio::spawn(async move {
        api.expect(Method::GET, LEASE, None)
            .await
            .reply_status(&not_found());
        let create = api.expect(Method::POST, LEASES, None).await;
        let body = create.body.clone();
        create.reply(201, &body);
        // The renewal at 2 s: read, never answered. Keep the call (dropping it
        // would answer with an error).
        let hung = api.expect(Method::GET, LEASE, None).await;
        (api, hung)
    });
    let timing = Timing::default();
    elector.acquire().await;
    let acquired = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), elector.hold())
        .await
        .expect("hold() returned");
    let held = acquired.elapsed();
    assert!(
        held <= timing.renew_deadline && held < timing.duration,
        "gave up after {held:?}"
    );
    assert_eq!(leader(&metrics), 0);
    assert!(elector.health().silent_for() >= Duration::from_secs(8));
    drop(elector);
    let (api, _hung) = server.await.unwrap();
    drop(api);
}

/// The API server's side of a first acquisition: no Lease yet, so it is created.
async fn acquired(api: &mut ApiServerVerifier) {
    api.expect(Method::GET, LEASE, None)
        .await
        .reply_status(&not_found());
    let create = api.expect(Method::POST, LEASES, None).await;
    let body = create.body.clone();
    create.reply(201, &body);
}

/// Acquires the lease and holds it until it is lost.
async fn acquire_and_hold(elector: LeaderElector) {
    tokio::time::timeout(Duration::from_secs(60), async {
        elector.acquire().await;
        elector.hold().await;
    })
    .await
    .expect("the exchange did not finish in time");
}

/// A renewal whose request fails on its way (a pooled connection the API server
/// had just closed) is tried again at once, not a retry period later: the leader
/// keeps its margin to the renew deadline.
#[tokio::test(start_paused = true)]
async fn a_renewal_that_fails_in_transport_is_tried_again_at_once() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    let server = tokio::spawn(async move {
        acquired(&mut api).await;
        // The renewal at 2 s fails in transport, and is sent again at once.
        api.expect(Method::GET, LEASE, None)
            .await
            .fail_in_transport();
        let failed = tokio::time::Instant::now();
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease("me"));
        let again = failed.elapsed();
        let update = api.expect(Method::PUT, LEASE, None).await;
        assert_eq!(update.body["spec"]["holderIdentity"], "me");
        let body = update.body.clone();
        update.reply(200, &body);
        // The next renewal, 2 s later, finds the lease taken: hold() returns.
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease("other"));
        (api, again)
    });
    acquire_and_hold(elector).await;
    let (api, again) = server.await.unwrap();
    assert_eq!(
        again,
        Duration::ZERO,
        "the renewal was sent again after {again:?}"
    );
    api.no_more_requests().await;
}

/// After the try at once, attempts that say nothing about the lease follow each
/// other a quarter second apart, not a retry period: the renew deadline is 10 s.
#[tokio::test(start_paused = true)]
async fn after_the_try_at_once_inconclusive_renewals_are_a_quarter_second_apart() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    let server = tokio::spawn(async move {
        acquired(&mut api).await;
        api.expect(Method::GET, LEASE, None)
            .await
            .fail_in_transport();
        api.expect(Method::GET, LEASE, None)
            .await
            .fail_in_transport();
        let failed = tokio::time::Instant::now();
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease("other"));
        (api, failed.elapsed())
    });
    acquire_and_hold(elector).await;
    let (api, waited) = server.await.unwrap();
    assert_eq!(waited, INCONCLUSIVE_PAUSE);
    api.no_more_requests().await;
}

/// Renewals that keep failing in transport are tried until the renew deadline and
/// no longer: then the leader stops, before a standby could take the lease.
#[tokio::test(start_paused = true)]
async fn renewals_failing_in_transport_end_leadership_at_the_renew_deadline() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    let server = tokio::spawn(async move {
        acquired(&mut api).await;
        let mut failed = 0u32;
        while let Some(call) = api.try_next_call().await {
            assert_eq!(call.method, Method::GET, "{}", call.describe());
            call.fail_in_transport();
            failed += 1;
        }
        failed
    });
    let timing = Timing::default();
    elector.acquire().await;
    let acquired_at = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), elector.hold())
        .await
        .expect("hold() returned");
    let held = acquired_at.elapsed();
    assert_eq!(leader(&metrics), 0);
    drop(elector);
    let failed = server.await.unwrap();
    // The lease was last renewed on acquiring it; the first renewal goes out a
    // retry period later, then one at once and one every quarter second.
    assert!(held <= timing.renew_deadline, "held for {held:?}");
    let tries =
        (timing.renew_deadline - timing.retry_period).as_millis() / INCONCLUSIVE_PAUSE.as_millis();
    assert!(
        (tries as u32..=tries as u32 + 2).contains(&failed),
        "{failed} attempts, expected about {tries}"
    );
}

/// A renewal's update that got no answer may still reach the API server, after
/// the renewal tried again has read the lease: that second update then meets our
/// own late write (409). That says nothing of who holds the lease; the next read
/// does. Taking the 409 for another replica taking over makes a leader exit
/// under load (docs/performance.md#lease-renewals).
#[tokio::test(start_paused = true)]
async fn a_renewal_that_meets_its_own_late_write_keeps_the_lease() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    let server = tokio::spawn(async move {
        acquired(&mut api).await;
        // The renewal at 2 s: read; its update gets no answer but lands later.
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease_at("me", Timestamp::now(), "7"));
        api.expect(Method::PUT, LEASE, None)
            .await
            .fail_in_transport();
        // Tried again at once: read before the late write landed, update after.
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease_at("me", Timestamp::now(), "7"));
        api.expect(Method::PUT, LEASE, None)
            .await
            .reply_status(&conflict());
        let raced = tokio::time::Instant::now();
        // A quarter second later the read shows the lease ours: renewed as usual.
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease_at("me", Timestamp::now(), "8"));
        let waited = raced.elapsed();
        let update = api.expect(Method::PUT, LEASE, None).await;
        assert_eq!(update.body["metadata"]["resourceVersion"], "8");
        assert_eq!(update.body["spec"]["holderIdentity"], "me");
        let body = update.body.clone();
        update.reply(200, &body);
        // Still leading two seconds later; then another replica holds it.
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease("other"));
        (api, waited)
    });
    acquire_and_hold(elector).await;
    let (api, waited) = server.await.unwrap();
    assert_eq!(waited, INCONCLUSIVE_PAUSE);
    api.no_more_requests().await;
}

/// A 409 on the first try is looked into at once; when the read then shows
/// another replica holding the lease, leadership ends there.
#[tokio::test(start_paused = true)]
async fn a_conflict_on_renewal_is_read_again_at_once_and_ends_leadership_if_taken() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    let server = tokio::spawn(async move {
        acquired(&mut api).await;
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease("me"));
        api.expect(Method::PUT, LEASE, None)
            .await
            .reply_status(&conflict());
        let raced = tokio::time::Instant::now();
        api.expect(Method::GET, LEASE, None)
            .await
            .reply(200, &lease("other"));
        (api, raced.elapsed())
    });
    acquire_and_hold(elector).await;
    assert_eq!(leader(&metrics), 0);
    let (api, again) = server.await.unwrap();
    assert_eq!(again, Duration::ZERO, "read again after {again:?}");
    api.no_more_requests().await;
}

/// The write fence opens when the Lease is acquired and shuts at the renew
/// deadline by the clock alone, before the elector's own task has run: a process
/// frozen past it wakes unable to write.
#[tokio::test(start_paused = true)]
async fn the_write_fence_opens_with_the_lease_and_shuts_at_the_renew_deadline() {
    let metrics = Metrics::default();
    let (elector, mut api) = elector(&metrics);
    let fence = WriteFence::default();
    let elector = elector.with_fence(fence.clone());
    assert!(!fence.is_open(), "closed until the Lease is ours");
    let server = tokio::spawn(async move {
        api.expect(Method::GET, LEASE, None)
            .await
            .reply_status(&not_found());
        let create = api.expect(Method::POST, LEASES, None).await;
        let body = create.body.clone();
        create.reply(201, &body);
        api
    });
    elector.acquire().await;
    assert!(fence.is_open(), "open once acquired");
    tokio::time::advance(Timing::default().renew_deadline - Duration::from_millis(1)).await;
    assert!(fence.is_open(), "open until the renew deadline");
    tokio::time::advance(Duration::from_millis(2)).await;
    assert!(
        !fence.is_open(),
        "shut at the renew deadline, with no task run"
    );
    drop(elector);
    server.await.unwrap().no_more_requests().await;
}
