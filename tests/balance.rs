//! Readiness mode (`src/readiness/`) under `tower::balance::p2c`: an endpoint whose
//! breaker would not make a call is not ready, so the balancer routes around it.
//!
//! Two parts:
//!
//! - Over real TCP on loopback: three hyper servers (`tests/common/server.rs`, each
//!   counting the requests it receives), hyper-util's client behind a breaker in
//!   readiness mode for each, and `Balance` over a `ServiceList` of the three. No
//!   fallback is set, so a call the breaker skipped would reach the caller as an error:
//!   "every call succeeds" also says the balancer never sent one to an open breaker. Time
//!   is crossed as in `tests/http_tcp.rs`, with [`skip`]: tokio's clock paused, advanced
//!   and resumed while no request is in flight (an open endpoint's timer fires then).
//! - On paused time, one endpoint polled by hand with a waker that counts its wakes: the
//!   waking rules (the probe's instant, a reset, a revive, a probe's end, a dwell limit,
//!   a change of mode), with a `service_fn` or a `tower_test` mock behind the breaker.
#![cfg(feature = "http")]

#[path = "common/server.rs"]
mod server;

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use server::{Reply, TestServer};
use tower::balance::p2c::Balance;
use tower::discover::ServiceList;
use tower::load::Constant;
use tower::util::rng::HasherRng;
use tower::{service_fn, BoxError, Layer, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::future::Changed;
use tower_circuit_breaker::http::HttpClassifier;
use tower_circuit_breaker::readiness::{CooldownInCalls, Readiness, ReadinessLayer};
use tower_circuit_breaker::{
    Answer, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, Mode, Source, State,
};

const COOLDOWN: Duration = Duration::from_secs(30);
/// The bound on any one call through the balancer: a test that exceeds it fails instead
/// of hanging.
const CALL_BOUND: Duration = Duration::from_secs(5);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------------------------------------------------------------------------------
// Over TCP.

type ReqBody = Full<Bytes>;
type Reply200 = Answer<Response<Incoming>>;

/// One endpoint of the balancer: hyper-util's client sending to `server`, behind a
/// breaker in readiness mode that opens after `threshold` failures (a 503, a refused
/// connection) and probes after [`COOLDOWN`]; no fallback.
fn endpoint(
    server: &TestServer,
    name: &'static str,
    threshold: u32,
) -> (
    Constant<
        impl Service<Request<ReqBody>, Response = Reply200, Error = BoxError> + Send + 'static,
        u32,
    >,
    CircuitBreakerHandle,
) {
    // No idle connections kept: a stopped server refuses the next request, and a
    // restarted one counts it.
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http::<ReqBody>();
    let breaker = CircuitBreakerLayer::builder()
        .name(name)
        .failure_threshold(threshold)
        .cooldown(Cooldown::Time(COOLDOWN))
        .build()
        .expect("a valid configuration")
        .with_classifier(HttpClassifier::new());
    let handle = breaker.handle();
    let authority = server.addr().to_string();
    let svc = ServiceBuilder::new()
        .layer(breaker.pending_while_open().expect("a cooldown in time"))
        .map_request(move |mut request: Request<ReqBody>| {
            let uri = format!("http://{authority}{}", request.uri().path());
            *request.uri_mut() = uri.parse::<Uri>().expect("a valid URI");
            request
        })
        .service(client);
    // Equal loads: the balancer picks between two ready endpoints at random.
    (Constant::new(svc, 0), handle)
}

/// The three endpoints, each with its handle, under one p2c balancer whose choices are
/// the same on every run.
struct Pool<B> {
    balance: B,
    handles: [CircuitBreakerHandle; 3],
}

fn pool(
    servers: [&TestServer; 3],
    threshold: u32,
) -> Pool<impl Service<Request<ReqBody>, Response = Reply200, Error = BoxError>> {
    let (a, a_handle) = endpoint(servers[0], "a", threshold);
    let (b, b_handle) = endpoint(servers[1], "b", threshold);
    let (c, c_handle) = endpoint(servers[2], "c", threshold);
    let rng = HasherRng::with_hasher(BuildHasherDefault::<DefaultHasher>::default());
    Pool {
        balance: Balance::from_rng(ServiceList::new(vec![a, b, c]), rng),
        handles: [a_handle, b_handle, c_handle],
    }
}

fn chat_request() -> Request<ReqBody> {
    Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Full::from(
            r#"{"model":"local","messages":[{"role":"user","content":"six times seven?"}]}"#,
        ))
        .expect("a valid request")
}

/// One call through the balancer, bounded by [`CALL_BOUND`].
async fn call<B>(balance: &mut B) -> Result<Reply200, BoxError>
where
    B: Service<Request<ReqBody>, Response = Reply200, Error = BoxError>,
{
    let call = async { balance.ready().await?.call(chat_request()).await };
    tokio::time::timeout(CALL_BOUND, call)
        .await
        .expect("a call through the balancer ends within its bound")
}

/// `n` calls that must all be answered 200 by a service (not a fallback, not an error).
async fn all_succeed<B>(balance: &mut B, n: usize)
where
    B: Service<Request<ReqBody>, Response = Reply200, Error = BoxError>,
{
    for i in 0..n {
        let answer = call(balance)
            .await
            .unwrap_or_else(|error| panic!("call {i} failed: {error}"));
        assert_eq!(answer.get_ref().status(), StatusCode::OK, "call {i}");
        assert!(
            answer.source().is_service(),
            "call {i}: {:?}",
            answer.source()
        );
    }
}

/// Calls until `handle`'s breaker is open (the balancer reached its endpoint
/// `threshold` times); returns how many calls failed on the way (each one that reached
/// it). Bounded: the balancer must reach it within 200 calls.
async fn until_open<B>(balance: &mut B, handle: &CircuitBreakerHandle) -> usize
where
    B: Service<Request<ReqBody>, Response = Reply200, Error = BoxError>,
{
    let mut failed = 0;
    for _ in 0..200 {
        if handle.state() == State::Open {
            return failed;
        }
        match call(balance).await {
            Ok(answer) if answer.get_ref().status() == StatusCode::OK => {}
            _ => failed += 1,
        }
    }
    panic!("the balancer never opened `{}`", handle.name());
}

/// Lets `wait` pass on tokio's clock, the breaker's, without waiting for it. Only with
/// no request in flight.
async fn skip(wait: Duration) {
    tokio::time::pause();
    tokio::time::advance(wait).await;
    tokio::time::resume();
}

// ---------------------------------------------------------------------------------
// Over TCP: the tests.

/// Three endpoints on loopback: two that answer 200 and a third that answers `third`.
async fn servers(third: Reply) -> [TestServer; 3] {
    [
        TestServer::start([], Reply::Ok).await,
        TestServer::start([], Reply::Ok).await,
        TestServer::start([], third).await,
    ]
}

#[tokio::test]
async fn after_its_breaker_opens_no_request_reaches_the_endpoint_answering_503_and_every_call_succeeds_through_the_other_two(
) {
    let [a, b, down] = servers(Reply::Unavailable).await;
    let Pool {
        mut balance,
        handles: [_, _, down_handle],
    } = pool([&a, &b, &down], 2);

    let failed = until_open(&mut balance, &down_handle).await;
    assert_eq!(
        failed, 2,
        "the two 503s that opened it, and no other failure"
    );
    assert_eq!(down.requests(), 2);

    let before = a.requests() + b.requests();
    all_succeed(&mut balance, 40).await;
    assert_eq!(down.requests(), 2, "nothing reached the open endpoint");
    assert_eq!(a.requests() + b.requests(), before + 40);
    assert!(
        a.requests() > 0 && b.requests() > 0,
        "both others share the load"
    );
    let counts = down_handle.snapshot().counts;
    assert_eq!(counts.skipped(), 0, "no call was even sent to its breaker");
    assert_eq!(counts.made, 2);
}

#[tokio::test]
async fn an_endpoint_refusing_connections_is_routed_around_then_probed_when_due_and_rejoins() {
    let [a, b, mut down] = servers(Reply::Ok).await;
    down.stop().await; // connection refused
    let Pool {
        mut balance,
        handles: [_, _, down_handle],
    } = pool([&a, &b, &down], 1);

    assert_eq!(until_open(&mut balance, &down_handle).await, 1);
    all_succeed(&mut balance, 20).await;

    // Back up, but its probe is not due: still out of rotation.
    down.restart().await;
    all_succeed(&mut balance, 20).await;
    assert_eq!(down.requests(), 0);
    assert_eq!(down_handle.snapshot().counts.made, 1);

    // The probe is due: the endpoint wakes, is tried again, and its probe closes it.
    skip(COOLDOWN).await;
    all_succeed(&mut balance, 40).await;
    assert_eq!(down_handle.state(), State::Closed);
    let counts = down_handle.snapshot().counts;
    assert_eq!(counts.probes, 1, "one probe");
    assert_eq!(counts.skipped(), 0);
    assert!(down.requests() > 1, "back in rotation: {}", down.requests());
}

#[tokio::test]
async fn a_failed_probe_takes_one_request_and_the_endpoint_is_out_again() {
    let [a, b, down] = servers(Reply::Unavailable).await;
    let Pool {
        mut balance,
        handles: [_, _, down_handle],
    } = pool([&a, &b, &down], 1);

    assert_eq!(until_open(&mut balance, &down_handle).await, 1);
    skip(COOLDOWN).await;

    // Exactly one call reaches it, the probe, which fails; every other one succeeds.
    let mut failed = 0;
    for _ in 0..40 {
        match call(&mut balance).await {
            Ok(answer) if answer.get_ref().status() == StatusCode::OK => {}
            Ok(answer) => {
                assert_eq!(answer.source(), Source::Probe);
                failed += 1;
            }
            Err(error) => panic!("no call fails with an error: {error}"),
        }
    }
    assert_eq!(failed, 1);
    assert_eq!(down.requests(), 2, "the opening failure and the probe");
    assert_eq!(down_handle.state(), State::Open);
    assert_eq!(down_handle.snapshot().counts.skipped(), 0);
}

#[tokio::test]
async fn a_killed_endpoint_gets_no_request_until_revived() {
    let [a, b, c] = servers(Reply::Ok).await;
    let Pool {
        mut balance,
        handles: [_, _, c_handle],
    } = pool([&a, &b, &c], 1);
    // Every endpoint has been ready, and holds a reservation, before the kill.
    all_succeed(&mut balance, 10).await;
    let reached = c.requests();

    c_handle.kill_switch().kill();
    all_succeed(&mut balance, 40).await;
    assert_eq!(c.requests(), reached, "nothing reached the killed endpoint");
    assert_eq!(
        c_handle.snapshot().counts.skipped_killed,
        0,
        "nor its breaker"
    );

    c_handle.kill_switch().revive();
    all_succeed(&mut balance, 40).await;
    assert!(c.requests() > reached, "back in rotation on the revive");
}

#[tokio::test]
async fn a_forced_open_endpoint_rejoins_at_once_on_a_reset() {
    let [a, b, c] = servers(Reply::Ok).await;
    let Pool {
        mut balance,
        handles: [_, _, c_handle],
    } = pool([&a, &b, &c], 1);

    c_handle.force_open();
    all_succeed(&mut balance, 40).await;
    assert_eq!(c.requests(), 0);

    // No time passes: the reset alone wakes it.
    c_handle.reset();
    all_succeed(&mut balance, 40).await;
    assert!(c.requests() > 0);
    assert_eq!(c_handle.snapshot().counts.skipped(), 0);
}

// ---------------------------------------------------------------------------------
// On paused time: one endpoint, polled by hand.

/// A waker that counts how often it was woken.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls a service's readiness by hand, with a waker that counts its wakes.
struct Poller {
    wakes: Arc<Wakes>,
    waker: Waker,
}

impl Poller {
    fn new() -> Self {
        let wakes = Arc::new(Wakes::default());
        Poller {
            waker: Waker::from(wakes.clone()),
            wakes,
        }
    }

    fn wakes(&self) -> usize {
        self.wakes.0.load(Ordering::SeqCst)
    }

    fn ready<S: Service<R>, R>(&self, svc: &mut S) -> bool
    where
        S::Error: std::fmt::Debug,
    {
        match svc.poll_ready(&mut Context::from_waker(&self.waker)) {
            Poll::Ready(result) => {
                result.expect("never fails");
                true
            }
            Poll::Pending => false,
        }
    }
}

/// Lets the timers and the tasks run, with no time passing.
async fn settle() {
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}

/// A breaker with a 30 s cooldown and a 10 s half-open dwell limit that opens on one
/// failure.
fn breaker() -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder()
        .name("model")
        .failure_threshold(1)
        .cooldown(Cooldown::Time(COOLDOWN))
        .max_half_open_dwell(Some(secs(10)))
        .build()
        .expect("a valid configuration")
}

/// A service that fails while `down` is set.
fn flaky(
    down: &Arc<AtomicBool>,
) -> impl Service<(), Response = &'static str, Error = BoxError, Future: Send> + Clone {
    let down = down.clone();
    service_fn(move |()| {
        let down = down.load(Ordering::SeqCst);
        async move {
            if down {
                Err(BoxError::from("connection refused"))
            } else {
                Ok("up")
            }
        }
    })
}

/// An endpoint that is pending while its breaker is open, over [`flaky`]`(down)`.
fn pending_endpoint(
    down: &Arc<AtomicBool>,
) -> (
    impl Service<(), Response = Answer<&'static str>, Error = BoxError> + Clone,
    CircuitBreakerHandle,
) {
    let layer = breaker();
    let handle = layer.handle();
    let svc = layer
        .pending_while_open()
        .expect("a cooldown in time")
        .layer(flaky(down));
    (svc, handle)
}

/// An endpoint in readiness mode over [`flaky`], opened by one failed call.
async fn opened(
    down: &Arc<AtomicBool>,
) -> (
    impl Service<(), Response = Answer<&'static str>, Error = BoxError> + Clone,
    CircuitBreakerHandle,
) {
    let (mut svc, handle) = pending_endpoint(down);
    down.store(true, Ordering::SeqCst);
    assert!(svc.ready().await.unwrap().call(()).await.is_err());
    assert_eq!(handle.state(), State::Open);
    (svc, handle)
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_is_pending_until_its_probe_is_due_and_wakes_itself_then() {
    let down = Arc::new(AtomicBool::new(false));
    let (mut svc, handle) = opened(&down).await;
    let poller = Poller::new();

    assert!(!poller.ready(&mut svc));
    tokio::time::advance(COOLDOWN - secs(1)).await;
    settle().await;
    assert_eq!(poller.wakes(), 0, "not before the probe is due");

    tokio::time::advance(secs(1)).await;
    settle().await;
    assert_eq!(poller.wakes(), 1, "woken when the probe is due");
    down.store(false, Ordering::SeqCst);
    assert!(poller.ready(&mut svc));
    let answer = svc.call(()).await.expect("the probe succeeds");
    assert_eq!(answer.source(), Source::Probe, "the next call is the probe");
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counts.skipped(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_reset_wakes_a_pending_poll_at_once() {
    let down = Arc::new(AtomicBool::new(false));
    let (mut svc, handle) = opened(&down).await;
    let poller = Poller::new();
    assert!(!poller.ready(&mut svc));

    handle.reset();
    assert_eq!(poller.wakes(), 1, "woken by the reset itself");
    assert!(poller.ready(&mut svc));
    down.store(false, Ordering::SeqCst);
    let answer = svc.call(()).await.expect("closed");
    assert_eq!(answer.source(), Source::Service);
}

#[tokio::test(start_paused = true)]
async fn a_forced_open_breaker_is_pending_until_a_reset_however_long_it_waits() {
    let (mut svc, handle) = pending_endpoint(&Arc::default());
    let poller = Poller::new();
    handle.force_open();
    assert!(!poller.ready(&mut svc));

    tokio::time::advance(secs(3600)).await;
    settle().await;
    assert_eq!(poller.wakes(), 0, "no probe is ever due");
    assert!(!poller.ready(&mut svc));

    handle.reset(); // the forced close
    assert_eq!(poller.wakes(), 1);
    assert!(poller.ready(&mut svc));
}

#[tokio::test(start_paused = true)]
async fn a_hold_for_a_time_is_pending_until_it_ends() {
    let (mut svc, handle) = pending_endpoint(&Arc::default());
    let poller = Poller::new();
    handle.open_for(secs(600));
    assert!(!poller.ready(&mut svc));

    tokio::time::advance(secs(599)).await;
    settle().await;
    assert_eq!(poller.wakes(), 0);
    tokio::time::advance(secs(1)).await;
    settle().await;
    assert_eq!(poller.wakes(), 1);
    assert!(poller.ready(&mut svc));
    let answer = svc.call(()).await.unwrap();
    assert_eq!(answer.source(), Source::Probe);
}

#[tokio::test(start_paused = true)]
async fn a_kill_makes_a_closed_endpoint_pending_and_a_revive_wakes_it_at_once() {
    let (mut svc, handle) = pending_endpoint(&Arc::default());
    let poller = Poller::new();
    assert!(poller.ready(&mut svc), "closed: ready");
    svc.call(()).await.unwrap();

    handle.kill_switch().kill();
    assert!(!poller.ready(&mut svc), "killed: pending");
    tokio::time::advance(secs(3600)).await;
    settle().await;
    assert_eq!(poller.wakes(), 0, "only a person ends a kill");

    handle.kill_switch().revive();
    assert_eq!(poller.wakes(), 1, "woken by the revive itself");
    assert!(poller.ready(&mut svc));
}

#[tokio::test(start_paused = true)]
async fn a_kill_after_the_endpoint_said_ready_makes_it_pending_before_the_call() {
    let (mut svc, handle) = pending_endpoint(&Arc::default());
    let poller = Poller::new();
    assert!(poller.ready(&mut svc));

    // A balancer polls a ready endpoint again before it calls it.
    handle.kill_switch().kill();
    assert!(!poller.ready(&mut svc));
    handle.kill_switch().revive();
    assert!(poller.ready(&mut svc));
    assert_eq!(svc.call(()).await.unwrap().source(), Source::Service);
    assert_eq!(handle.snapshot().counts.skipped(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_revive_of_an_open_breaker_still_waits_for_its_probe() {
    let down = Arc::new(AtomicBool::new(false));
    let (mut svc, handle) = opened(&down).await;
    let poller = Poller::new();
    handle.kill_switch().kill();
    assert!(!poller.ready(&mut svc));

    handle.kill_switch().revive();
    assert_eq!(poller.wakes(), 1, "woken to look again");
    assert!(!poller.ready(&mut svc), "open: the probe is not due");
    tokio::time::advance(COOLDOWN).await;
    settle().await;
    assert_eq!(poller.wakes(), 2);
    assert!(poller.ready(&mut svc));
}

#[tokio::test(start_paused = true)]
async fn allow_probe_wakes_a_pending_poll_and_the_next_call_is_the_probe() {
    let down = Arc::new(AtomicBool::new(false));
    let (mut svc, handle) = opened(&down).await;
    let poller = Poller::new();
    assert!(!poller.ready(&mut svc));

    assert!(handle.allow_probe());
    assert_eq!(poller.wakes(), 1);
    down.store(false, Ordering::SeqCst);
    assert!(poller.ready(&mut svc));
    assert_eq!(svc.call(()).await.unwrap().source(), Source::Probe);
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_disabled_breaker_makes_every_call_so_its_endpoint_is_ready_while_open() {
    let down = Arc::new(AtomicBool::new(false));
    let (mut svc, handle) = opened(&down).await;
    let poller = Poller::new();
    assert!(!poller.ready(&mut svc));

    handle.set_mode(Mode::Disabled);
    assert_eq!(poller.wakes(), 1, "woken by the change of mode");
    assert!(poller.ready(&mut svc));
}

#[tokio::test(start_paused = true)]
async fn half_open_with_its_probe_slot_taken_is_pending_until_the_probe_settles() {
    let layer = breaker();
    let handle = layer.handle();
    let (mock, mut server) = tower_test::mock::pair::<(), &'static str>();
    let mut prober = layer.pending_while_open().unwrap().layer(mock);
    let mut other = prober.clone();
    let poller = Poller::new();
    handle.open_for(Duration::ZERO); // the next call is the probe

    server.allow(1);
    assert!(poller.ready(&mut prober), "the probe is due");
    assert!(
        poller.ready(&mut prober),
        "its own probe's slot does not make it wait"
    );
    let probe = tokio::spawn(prober.call(()));
    let (_, respond) = server
        .next_request()
        .await
        .expect("the probe reaches the service");
    assert_eq!(handle.state(), State::HalfOpen);

    assert!(!poller.ready(&mut other), "the slot is taken");
    assert_eq!(poller.wakes(), 0);
    respond.send_response("up");
    let answer = probe.await.unwrap().unwrap();
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(poller.wakes(), 1, "woken when the probe settled");
    server.allow(1);
    assert!(poller.ready(&mut other));
    assert_eq!(handle.state(), State::Closed);
}

/// A service failing on `true`, behind a breaker that opens at its first failure for
/// 1 s, as a balanced endpoint and as another caller of the same breaker; the endpoint
/// has reserved the half-open's probe (a balancer polled it ready) and is not called.
async fn an_endpoint_holding_the_probe() -> (
    CircuitBreakerHandle,
    impl Service<bool, Response = Answer<()>, Error = BoxError> + Clone,
    impl Service<bool, Response = Answer<()>, Error = BoxError>,
) {
    let layer = CircuitBreakerLayer::builder()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(1)))
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(service_fn(|fail: bool| async move {
        if fail {
            Err(std::io::Error::other("down"))
        } else {
            Ok(())
        }
    }));
    let other = svc.clone();
    let mut endpoint = Readiness::new(svc, handle.clone()).unwrap();
    let _ = endpoint.ready().await.unwrap().call(true).await;
    tokio::time::sleep(secs(1)).await;
    assert!(
        endpoint.ready().now_or_never().is_some(),
        "the probe reserved"
    );
    assert_eq!(handle.state(), State::HalfOpen);
    (handle, other, endpoint)
}

#[tokio::test(start_paused = true)]
async fn a_probe_reserved_in_an_earlier_half_open_does_not_make_the_endpoint_ready_in_the_next() {
    let (handle, mut other, mut endpoint) = an_endpoint_holding_the_probe().await;
    // A person resets (the probe is written off), and the breaker trips again.
    handle.reset();
    let _ = other.ready().await.unwrap().call(true).await;
    assert_eq!(handle.state(), State::Open);
    tokio::time::sleep(secs(1)).await;
    // Another caller takes the next half-open's only probe slot.
    let held = other.ready().await.unwrap().call(false);
    assert_eq!(handle.state(), State::HalfOpen);
    assert!(
        endpoint.ready().now_or_never().is_none(),
        "ready while another caller's probe holds the only slot"
    );
    held.await.unwrap();
    assert_eq!(handle.state(), State::Closed);
    assert!(endpoint.ready().now_or_never().is_some(), "closed: ready");
}

#[tokio::test(start_paused = true)]
async fn a_probe_reservation_given_up_by_a_change_of_mode_does_not_make_the_endpoint_ready() {
    let (handle, mut other, mut endpoint) = an_endpoint_holding_the_probe().await;
    // A change of mode gives the probe slot up; the state, and so no transition, stays.
    handle.set_mode(Mode::Disabled);
    handle.set_mode(Mode::Enabled);
    assert_eq!(handle.state(), State::HalfOpen);
    let held = other.ready().await.unwrap().call(false);
    assert!(
        endpoint.ready().now_or_never().is_none(),
        "ready while another caller's probe holds the only slot"
    );
    held.await.unwrap();
    assert!(endpoint.ready().now_or_never().is_some(), "closed: ready");
}

#[tokio::test(start_paused = true)]
async fn a_probe_that_hangs_past_the_dwell_limit_wakes_the_other_endpoints_to_wait_for_the_next_probe(
) {
    let layer = breaker();
    let handle = layer.handle();
    let (mock, mut server) = tower_test::mock::pair::<(), &'static str>();
    let mut prober = layer.pending_while_open().unwrap().layer(mock);
    let mut other = prober.clone();
    let poller = Poller::new();
    handle.open_for(Duration::ZERO);

    server.allow(2);
    assert!(poller.ready(&mut prober));
    let hanging = prober.call(());
    let (_, _never_answered) = server.next_request().await.unwrap();
    assert!(!poller.ready(&mut other));

    // The dwell limit (10 s) passes: it looks again, finds the breaker re-opened, and
    // waits for the next probe, due a cooldown after the limit.
    tokio::time::advance(secs(10)).await;
    settle().await;
    assert_eq!(poller.wakes(), 1);
    // (Its look re-opens the breaker, a change its own watch may hear: a wake to look
    // again, at most.)
    assert!(!poller.ready(&mut other));
    assert_eq!(handle.state(), State::Open);
    let woken = poller.wakes();
    tokio::time::advance(COOLDOWN - secs(1)).await;
    settle().await;
    assert_eq!(poller.wakes(), woken, "not before the next probe is due");
    assert!(!poller.ready(&mut other));
    tokio::time::advance(secs(1)).await;
    settle().await;
    assert_eq!(poller.wakes(), woken + 1);
    assert!(poller.ready(&mut other), "the next probe is due");
    drop(hanging);
}

#[tokio::test(start_paused = true)]
async fn the_default_breaker_stays_ready_while_open_and_answers_from_its_fallback() {
    let layer = breaker();
    let handle = layer.handle();
    let mut svc = layer.layer(flaky(&Arc::default()));
    handle.force_open();
    assert!(Poller::new().ready(&mut svc), "readiness mode is opt-in");
    assert!(svc.call(()).await.is_err(), "rejected: no fallback");
}

#[test]
fn a_cooldown_in_calls_is_refused_with_a_typed_error() {
    let layer = CircuitBreakerLayer::builder()
        .name("chat")
        .cooldown(Cooldown::Calls(4))
        .build()
        .unwrap();
    let refused: CooldownInCalls = ReadinessLayer::new(layer.handle()).unwrap_err();
    assert_eq!((refused.breaker(), refused.calls()), ("chat", 4));
    let svc = service_fn(|()| async { Ok::<_, BoxError>(()) });
    assert_eq!(Readiness::new(svc, layer.handle()).unwrap_err(), refused);
    assert_eq!(layer.pending_while_open().unwrap_err(), refused);
}

#[tokio::test(start_paused = true)]
async fn changed_sees_a_change_made_before_it_is_first_polled_and_nothing_else() {
    let handle = breaker().handle();
    let mut quiet = handle.changed();
    tokio::time::advance(secs(3600)).await;
    assert!((&mut quiet).now_or_never().is_none(), "no change, no wake");

    let changed = handle.changed();
    handle.force_open();
    assert!(changed.now_or_never().is_some());
    let changed = handle.changed();
    handle.kill_switch().kill();
    assert!(changed.now_or_never().is_some(), "the kill switch counts");
    assert!(quiet.now_or_never().is_some(), "an older one sees them too");

    // It holds nothing of the breaker: with the breaker gone, it ends.
    let orphan = breaker().handle().changed();
    assert!(orphan.now_or_never().is_some());
}

#[test]
fn the_readiness_types_are_send_sync_and_debug() {
    fn send_sync_debug<T: Send + Sync + std::fmt::Debug>() {}
    send_sync_debug::<
        Readiness<tower_circuit_breaker::CircuitBreaker<tower_test::mock::Mock<(), ()>>>,
    >();
    send_sync_debug::<ReadinessLayer>();
    send_sync_debug::<Changed>();
    send_sync_debug::<CooldownInCalls>();
    fn is_static<T: 'static>(_: &T) {}
    let handle = breaker().handle();
    let changed = handle.changed();
    is_static(&changed);
    assert!(format!("{changed:?}").contains("model"));
}

/// The watch is armed before each look, so a person's act that races the look is never
/// lost: the pending endpoint is woken by it or sees it. Two threads, many rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_racing_a_pending_poll_is_never_lost() {
    let layer = breaker();
    let handle = layer.handle();
    let svc = layer
        .pending_while_open()
        .unwrap()
        .layer(flaky(&Arc::default()));
    for round in 0..500 {
        handle.force_open();
        let mut endpoint = svc.clone();
        let waiter = tokio::spawn(async move {
            endpoint.ready().await.map(|_| ()).expect("never fails");
        });
        let operator = handle.clone();
        let reset = tokio::spawn(async move {
            for _ in 0..round % 4 {
                tokio::task::yield_now().await;
            }
            if round % 2 == 0 {
                operator.reset();
            } else {
                // Through the kill switch: killed while forced open, then both undone.
                operator.kill_switch().kill();
                operator.reset();
                operator.kill_switch().revive();
            }
        });
        reset.await.unwrap();
        tokio::time::timeout(CALL_BOUND, waiter)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the act was lost"))
            .unwrap();
    }
}
