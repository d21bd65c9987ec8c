//! The tower contract of a `CircuitBreaker` and how it handles failures: readiness,
//! clones and reservations, decisions that change between `poll_ready` and `call`,
//! abandoned and cancelled calls, panics, ignored outcomes, the rollout modes and
//! force-open.
//!
//! Mostly driven through `tower_test::mock`, so every request that reaches (or does not
//! reach) the wrapped service is seen. Time is tokio's paused clock.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;
use tokio::task::JoinError;
use tokio::time::advance;
use tower::{Layer, Service, ServiceExt};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::fallback::Fallback;
use tower_circuit_breaker::snapshot::Counts;
use tower_circuit_breaker::{
    Answer, Builder, Cause, CircuitBreaker, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown,
    Mode, NextProbe, Outcome, Reason, Source, State, Transition,
};
use tower_test::assert_request_eq;
use tower_test::mock::{self, Mock, Spawn};

type Req = &'static str;
type Resp = &'static str;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The fallback: answers "fallback".
///
/// (The test services take a `&str` of any lifetime: a breaker future moved to another
/// task must be `Send`, and rustc proves that for every lifetime of the request.)
#[derive(Clone, Debug)]
struct Canned;

impl Service<&str> for Canned {
    type Response = Resp;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Resp, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: &str) -> Self::Future {
        std::future::ready(Ok("fallback"))
    }
}

type Classifier = fn(&Result<Resp, BoxError>) -> Outcome;

/// `Ok("ignored")` says nothing about the service; `Ok("panic in classifier")` makes the
/// classifier panic; other answers are successes and errors are failures.
fn classify(result: &Result<Resp, BoxError>) -> Outcome {
    match result {
        Ok("panic in classifier") => panic!("the classifier panicked"),
        Ok("ignored") => Outcome::Ignored,
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::failure(),
    }
}

/// A breaker around a mock service, spawned on a mock task.
type MockBreaker<F, C> = Spawn<CircuitBreaker<Mock<Req, Resp>, F, C>>;

/// Wraps a mock service in `layer`.
fn with_mock<F: Clone, C: Clone>(
    layer: CircuitBreakerLayer<F, C>,
) -> (
    MockBreaker<F, C>,
    mock::Handle<Req, Resp>,
    CircuitBreakerHandle,
) {
    let breaker = layer.handle();
    let (svc, mock) = mock::spawn_layer(layer);
    (svc, mock, breaker)
}

fn build(builder: Builder) -> CircuitBreakerLayer {
    builder.build().expect("a valid configuration")
}

/// `assert_request_eq!`, but a request that never comes fails the test at once instead
/// of waiting for ever (on the paused clock the timeout passes as soon as nothing else
/// can run).
macro_rules! expect_request {
    ($mock:expr, $request:expr) => {
        tokio::time::timeout(Duration::from_secs(60), async {
            assert_request_eq!($mock, $request)
        })
        .await
        .expect("the call reached the wrapped service")
    };
}

#[track_caller]
fn assert_ready_ok<S: Service<Req, Error = BoxError>>(svc: &mut Spawn<S>) {
    match svc.poll_ready() {
        Poll::Ready(Ok(())) => {}
        Poll::Ready(Err(error)) => panic!("poll_ready failed: {error}"),
        Poll::Pending => panic!("poll_ready is pending"),
    }
}

#[track_caller]
fn assert_no_request(mock: &mut mock::Handle<Req, Resp>) {
    assert!(
        mock.poll_request().is_pending(),
        "the wrapped service was called"
    );
}

/// A call the mock answers with an error.
async fn fail_call<S>(svc: &mut Spawn<S>, mock: &mut mock::Handle<Req, Resp>)
where
    S: Service<Req, Response = Answer<Resp>, Error = BoxError>,
{
    assert_ready_ok(svc);
    let response = svc.call("boom");
    expect_request!(mock, "boom").send_error(io::Error::other("connection refused"));
    let error = response.await.expect_err("the inner error is returned");
    assert_eq!(error.to_string(), "connection refused");
}

/// A call the mock answers with `reply`.
async fn answered_call<S>(
    svc: &mut Spawn<S>,
    mock: &mut mock::Handle<Req, Resp>,
    request: Req,
    reply: Resp,
) -> Answer<Resp>
where
    S: Service<Req, Response = Answer<Resp>, Error = BoxError>,
{
    assert_ready_ok(svc);
    let response = svc.call(request);
    expect_request!(mock, request).send_response(reply);
    response.await.expect("the inner answer is returned")
}

/// Calls "hello" on a service already polled ready, checks that the call did not reach
/// the mock (before awaiting it, so a regression fails instead of waiting for a reply
/// that never comes), and returns the breaker's answer.
async fn call_not_forwarded<S>(
    svc: &mut Spawn<S>,
    mock: &mut mock::Handle<Req, Resp>,
) -> Result<Answer<Resp>, BoxError>
where
    S: Service<Req, Response = Answer<Resp>, Error = BoxError>,
{
    let response = svc.call("hello");
    assert_no_request(mock);
    response.await
}

/// A call the breaker skips: the mock never sees it.
async fn skipped_call<S>(svc: &mut Spawn<S>, mock: &mut mock::Handle<Req, Resp>) -> Answer<Resp>
where
    S: Service<Req, Response = Answer<Resp>, Error = BoxError>,
{
    assert_ready_ok(svc);
    let answer = call_not_forwarded(svc, mock)
        .await
        .expect("the fallback answers a skipped call");
    assert!(answer.is_fallback(), "{answer:?}");
    assert_eq!(*answer.get_ref(), "fallback");
    answer
}

fn transitions(events: &mut broadcast::Receiver<Transition>) -> Vec<(State, State, Cause)> {
    std::iter::from_fn(|| events.try_recv().ok())
        .map(|t| (t.from, t.to, t.cause))
        .collect()
}

#[track_caller]
fn assert_balanced(counts: &Counts) {
    assert_eq!(
        counts.arrived,
        counts.made + counts.skipped() + counts.abandoned,
        "every arrival is made, skipped or abandoned: {counts:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Readiness
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn when_closed_poll_ready_waits_for_the_inner_service() {
    let (mut svc, mut mock, breaker) = with_mock(build(Builder::new()).with_fallback(Canned));

    mock.allow(0);
    assert!(svc.poll_ready().is_pending());
    assert!(svc.poll_ready().is_pending());
    assert!(!svc.is_woken());

    mock.allow(1);
    assert!(
        svc.is_woken(),
        "the inner service's wake-up reaches the caller"
    );
    assert_ready_ok(&mut svc);
    let response = svc.call("hello");
    expect_request!(mock, "hello").send_response("world");
    let answer = response.await.unwrap();
    assert_eq!(answer.source(), Source::Service);
    assert_eq!(answer.state(), State::Closed);
    assert_eq!(answer.into_inner(), "world");

    // Pending polls are one admission, not one per poll.
    let counts = breaker.snapshot().counts;
    assert_eq!((counts.arrived, counts.made, counts.successes), (1, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn when_open_poll_ready_is_ready_without_polling_the_inner_service_and_the_fallback_answers()
{
    let (mut svc, mut mock, breaker) =
        with_mock(build(Builder::new().failure_threshold(1)).with_fallback(Canned));
    fail_call(&mut svc, &mut mock).await;
    assert_eq!(breaker.state(), State::Open);

    // Polling the inner service now would give Pending, or this error.
    mock.allow(0);
    mock.send_error("the inner service was polled");
    for _ in 0..3 {
        let answer = skipped_call(&mut svc, &mut mock).await;
        assert_eq!(answer.source(), Source::Fallback(Reason::Open));
        assert_eq!(answer.state(), State::Open);
    }
    assert_eq!(breaker.snapshot().counts.skipped_open, 3);

    // Nobody consumed the error: the inner service was never polled while open.
    breaker.reset();
    match svc.poll_ready() {
        Poll::Ready(Err(error)) => assert_eq!(error.to_string(), "the inner service was polled"),
        other => panic!("expected the inner readiness error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_rejection_names_its_breaker_in_full_short_long_or_not_ascii() {
    for name in [
        "a",
        "exactly-thirty-bytes-long-name",
        "a-breaker-name-longer-than-thirty-bytes-by-far",
        "modèle[gpt-4o]→réponse",
    ] {
        let layer = Builder::new().name(name).build().expect("valid");
        layer.handle().force_open();
        let mut svc = layer.layer(tower::service_fn(|_: ()| async { Ok::<_, Infallible>(()) }));
        let error = svc.ready().await.unwrap().call(()).await.unwrap_err();
        let rejected = error.downcast_ref::<Rejected>().expect("a Rejected error");
        assert_eq!(rejected.name(), name);
        assert!(error.to_string().contains(&format!("`{name}`")), "{error}");
        assert_eq!(rejected.clone().name(), name);
    }
}

#[tokio::test(start_paused = true)]
async fn when_open_without_a_fallback_the_call_fails_with_rejected_and_poll_ready_does_not() {
    let (mut svc, mut mock, _breaker) = with_mock(build(
        Builder::new()
            .name("search")
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10))),
    ));
    fail_call(&mut svc, &mut mock).await;
    let opened_at = now();
    advance(secs(4)).await;

    mock.allow(0);
    assert_ready_ok(&mut svc);
    let error = call_not_forwarded(&mut svc, &mut mock).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("a Rejected error");
    assert_eq!(rejected.name(), "search");
    assert_eq!(rejected.reason(), Reason::Open);
    assert_eq!(rejected.state(), State::Open);
    assert_eq!(
        rejected.next_probe(),
        NextProbe::After {
            calls: 1,
            at: Some(opened_at + secs(10)),
        }
    );
    assert_eq!(rejected.retry_after_from(now()), Some(secs(6)));
    assert_eq!(rejected.calls_until_probe(), Some(1));
    assert_eq!(
        error.to_string(),
        "circuit breaker `search` skipped the call: it is open; next probe in 6s"
    );
}

#[tokio::test(start_paused = true)]
async fn rejected_counts_down_the_calls_until_the_probe_with_a_cooldown_in_calls() {
    let (mut svc, mut mock, breaker) = with_mock(build(
        Builder::new()
            .name("search")
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(3)),
    ));
    fail_call(&mut svc, &mut mock).await;

    for (calls, text) in [(2, "next probe in 2 calls"), (1, "next probe in 1 call")] {
        assert_ready_ok(&mut svc);
        let error = call_not_forwarded(&mut svc, &mut mock).await.unwrap_err();
        let rejected = error.downcast_ref::<Rejected>().unwrap();
        assert_eq!(rejected.reason(), Reason::Open);
        assert_eq!(rejected.calls_until_probe(), Some(calls));
        assert_eq!(
            error.to_string(),
            format!("circuit breaker `search` skipped the call: it is open; {text}")
        );
    }
    let answer = answered_call(&mut svc, &mut mock, "probe", "ok").await;
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(breaker.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn when_killed_poll_ready_is_ready_without_polling_the_inner_service() {
    let (mut svc, mut mock, breaker) = with_mock(build(Builder::new()).with_fallback(Canned));
    // Polling the inner service now would give Pending, or this error.
    mock.allow(0);
    mock.send_error("the inner service was polled");
    breaker.kill_switch().kill();

    for _ in 0..2 {
        let answer = skipped_call(&mut svc, &mut mock).await;
        assert_eq!(answer.source(), Source::Fallback(Reason::Killed));
        assert_eq!(answer.next_probe(), NextProbe::Manual);
        assert_eq!(
            answer.state(),
            State::Closed,
            "the kill switch leaves the state alone"
        );
    }
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.counts.skipped_killed, 2);
    assert_eq!(snapshot.counts.made, 0);

    // Revived: the breaker polls the inner service again, and finds the error nobody
    // consumed while killed, then waits for it.
    breaker.kill_switch().revive();
    match svc.poll_ready() {
        Poll::Ready(Err(error)) => assert_eq!(error.to_string(), "the inner service was polled"),
        other => panic!("expected the inner readiness error, got {other:?}"),
    }
    assert!(svc.poll_ready().is_pending());
}

#[tokio::test(start_paused = true)]
async fn when_killed_without_a_fallback_the_call_fails_with_rejected() {
    let (mut svc, mut mock, breaker) = with_mock(build(Builder::new().name("chat")));
    breaker.kill_switch().kill();
    assert_ready_ok(&mut svc);
    let error = call_not_forwarded(&mut svc, &mut mock).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().unwrap();
    assert_eq!(rejected.reason(), Reason::Killed);
    assert_eq!(rejected.next_probe(), NextProbe::Manual);
    assert_eq!(rejected.retry_after_from(now()), None);
    assert_eq!(rejected.calls_until_probe(), None);
    assert_eq!(
        error.to_string(),
        "circuit breaker `chat` skipped the call: the kill switch is on"
    );
}

/// A caller parked in `poll_ready` on an inner service that is not ready (saturated by
/// hung calls, say) when the kill switch is flipped: polled again, the breaker should
/// answer from the fallback as it does for any call while killed, not keep waiting on
/// the service it was told to stop using.
#[tokio::test(start_paused = true)]
async fn a_caller_waiting_on_inner_readiness_is_released_to_the_fallback_once_killed() {
    let (mut svc, mut mock, breaker) = with_mock(build(Builder::new()).with_fallback(Canned));
    mock.allow(0);
    assert!(svc.poll_ready().is_pending());

    breaker.kill_switch().kill();
    assert!(
        svc.poll_ready().is_ready(),
        "poll_ready kept waiting on the inner service although the kill switch is on"
    );
    let answer = call_not_forwarded(&mut svc, &mut mock).await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Killed));
}

/// The same caller, as `ready().await` waits: it is woken by the kill, by a person's
/// force-open and by the breaker opening on another clone's failure, not only when the
/// wrapped service becomes ready (which it may never do while hung calls hold it), and is
/// answered by the fallback.
#[tokio::test(start_paused = true)]
async fn a_caller_waiting_on_inner_readiness_is_woken_by_a_kill_a_force_open_or_an_opening() {
    for (act, reason) in [
        ("kill", Reason::Killed),
        ("force_open", Reason::ForcedOpen),
        ("an opening by another clone's failure", Reason::Open),
    ] {
        let (mut svc, mut mock, breaker) =
            with_mock(build(Builder::new().failure_threshold(1)).with_fallback(Canned));
        let mut other = mock::Spawn::new(svc.get_ref().clone());
        if reason == Reason::Open {
            // The other clone holds its call before the wrapped service fills up.
            mock.allow(1);
            assert!(other.poll_ready().is_ready());
        }
        mock.allow(0);
        assert!(svc.poll_ready().is_pending());
        assert!(!svc.is_woken());
        match reason {
            Reason::Killed => breaker.kill_switch().kill(),
            Reason::ForcedOpen => breaker.force_open(),
            _ => {
                let call = other.call("fail");
                let (_, respond) = mock.next_request().await.expect("the other clone's call");
                respond.send_error(io::Error::other("down"));
                assert!(call.await.is_err());
                assert_eq!(breaker.state(), State::Open);
            }
        }
        assert!(svc.is_woken(), "{act}: the waiting caller was not woken");
        assert!(svc.poll_ready().is_ready(), "{act}");
        let answer = call_not_forwarded(&mut svc, &mut mock).await.unwrap();
        assert_eq!(answer.source(), Source::Fallback(reason), "{act}");
    }
}

/// A wrapped service whose `poll_ready` flips the kill switch, then says it is not ready:
/// the kill comes between the breaker's decision and the start of its wait.
#[derive(Clone)]
struct KillsWhileAsked(CircuitBreakerHandle);

impl Service<Req> for KillsWhileAsked {
    type Response = Resp;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Resp, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.kill_switch().kill();
        Poll::Pending
    }

    fn call(&mut self, _: Req) -> Self::Future {
        unreachable!("never ready")
    }
}

#[tokio::test(start_paused = true)]
async fn a_kill_between_the_decision_and_the_wait_still_wakes_the_caller() {
    let layer = build(Builder::new()).with_fallback(Canned);
    let inner = KillsWhileAsked(layer.handle());
    let mut svc = mock::Spawn::new(layer.layer(inner));
    assert!(svc.poll_ready().is_pending());
    assert!(
        svc.is_woken(),
        "the kill came after the decision: the caller must look again"
    );
    assert!(svc.poll_ready().is_ready());
    let answer = svc.call("request").await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Killed));
}

#[tokio::test(start_paused = true)]
async fn an_inner_poll_ready_error_counts_as_a_failure_and_is_returned() {
    let (mut svc, mut mock, breaker) =
        with_mock(build(Builder::new().failure_threshold(2)).with_fallback(Canned));

    mock.send_error("overloaded");
    match svc.poll_ready() {
        Poll::Ready(Err(error)) => assert_eq!(error.to_string(), "overloaded"),
        other => panic!("expected the inner error, got {other:?}"),
    }
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.consecutive_failures, 1);
    assert_eq!(snapshot.counts.failures, 1);
    assert_eq!(
        snapshot.last_failure.unwrap().message.as_ref(),
        "poll_ready failed: overloaded"
    );
    assert_eq!(snapshot.state, State::Closed);

    mock.send_error("overloaded");
    assert!(matches!(svc.poll_ready(), Poll::Ready(Err(_))));
    assert_eq!(breaker.snapshot().consecutive_failures, 2);
    assert_eq!(breaker.state(), State::Open);

    // Open: no more inner errors, the fallback answers.
    mock.send_error("overloaded");
    let answer = skipped_call(&mut svc, &mut mock).await;
    assert_eq!(answer.source(), Source::Fallback(Reason::Open));
    assert_balanced(&breaker.snapshot().counts);
}

// ---------------------------------------------------------------------------------------
// Clones
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn clones_share_the_breaker_state_and_counts() {
    let (mut a, mut mock, breaker) =
        with_mock(build(Builder::new().failure_threshold(2)).with_fallback(Canned));
    let mut b = a.clone();
    assert_eq!(a.get_ref().handle(), b.get_ref().handle());
    assert_eq!(a.get_ref().handle(), breaker);

    fail_call(&mut a, &mut mock).await;
    assert_eq!(breaker.snapshot().consecutive_failures, 1);
    fail_call(&mut b, &mut mock).await;
    assert_eq!(breaker.state(), State::Open);

    // Tripped by two different clones: both see it open.
    for svc in [&mut a, &mut b] {
        let answer = skipped_call(svc, &mut mock).await;
        assert_eq!(answer.source(), Source::Fallback(Reason::Open));
    }
    let counts = breaker.snapshot().counts;
    assert_eq!(
        (counts.made, counts.failures, counts.skipped_open),
        (2, 2, 2)
    );
}

/// A service that answers "ok" without caring whether it was polled ready, counting its
/// calls; it can be told to panic in `poll_ready`, and panics on some requests.
#[derive(Clone, Debug, Default)]
struct Scripted {
    calls: Arc<AtomicUsize>,
    panic_when_polled: Arc<AtomicBool>,
}

impl Service<&str> for Scripted {
    type Response = Resp;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Resp, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.panic_when_polled.load(Ordering::SeqCst) {
            panic!("the inner poll_ready panicked");
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: &str) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if request == "panic in call" {
            panic!("the inner call panicked");
        }
        let request = request.to_owned();
        Box::pin(async move {
            match request.as_str() {
                "panic in future" => panic!("the inner future panicked"),
                "fail" => Err(io::Error::other("connection refused").into()),
                "panic in classifier" => Ok("panic in classifier"),
                "ignored" => Ok("ignored"),
                _ => Ok("ok"),
            }
        })
    }
}

type ScriptedBreaker = CircuitBreaker<Scripted, Fallback<Canned>, Classifier>;

fn scripted(builder: Builder) -> (ScriptedBreaker, CircuitBreakerHandle, Scripted) {
    let layer = build(builder)
        .with_fallback(Canned)
        .with_classifier(classify as Classifier);
    let inner = Scripted::default();
    (layer.layer(inner.clone()), layer.handle(), inner)
}

async fn send(svc: &mut ScriptedBreaker, request: Req) -> Result<Answer<Resp>, BoxError> {
    svc.ready().await?.call(request).await
}

/// Sends `request` through a clone of `svc` on its own task, as a server would.
async fn send_on_a_task(
    svc: &ScriptedBreaker,
    request: Req,
) -> Result<Result<Answer<Resp>, BoxError>, JoinError> {
    let mut svc = svc.clone();
    tokio::spawn(async move { send(&mut svc, request).await }).await
}

fn panic_message(error: JoinError) -> String {
    assert!(error.is_panic(), "{error:?}");
    let payload = error.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_clone_of_a_ready_service_must_be_polled_ready_itself() {
    let (mut svc, breaker, inner) = scripted(Builder::new());
    svc.ready().await.unwrap();

    let mut clone = svc.clone();
    let panic = catch_unwind(AssertUnwindSafe(|| {
        drop(clone.call("hello"));
    }))
    .expect_err("calling an unpolled clone panics");
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(
        message.contains("poll_ready must be called first"),
        "{message}"
    );
    assert_eq!(inner.calls.load(Ordering::SeqCst), 0);

    // The original kept its reservation; the clone works once polled ready.
    assert_eq!(svc.call("hello").await.unwrap().source(), Source::Service);
    assert_eq!(
        send(&mut clone, "hello").await.unwrap().source(),
        Source::Service
    );
    let counts = breaker.snapshot().counts;
    assert_eq!((counts.arrived, counts.made, counts.successes), (2, 2, 2));
    assert_eq!(inner.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "poll_ready must be called first")]
async fn calling_without_poll_ready_panics() {
    let (mut svc, _breaker, _inner) = scripted(Builder::new());
    drop(svc.call("hello"));
}

// ---------------------------------------------------------------------------------------
// Decisions that change between poll_ready and call
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_kill_switch_flipped_between_poll_ready_and_call_sends_the_call_to_the_fallback() {
    let (mut svc, mut mock, breaker) = with_mock(build(Builder::new()).with_fallback(Canned));
    assert_ready_ok(&mut svc);
    breaker.kill_switch().kill();

    let answer = call_not_forwarded(&mut svc, &mut mock).await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Killed));
    assert_eq!(answer.next_probe(), NextProbe::Manual);
    assert_eq!(*answer.get_ref(), "fallback");
    let counts = breaker.snapshot().counts;
    assert_eq!(
        (counts.arrived, counts.made, counts.skipped_killed),
        (1, 0, 1)
    );
    assert_balanced(&counts);

    breaker.kill_switch().revive();
    let answer = answered_call(&mut svc, &mut mock, "hello", "world").await;
    assert_eq!(answer.source(), Source::Service);
}

#[tokio::test(start_paused = true)]
async fn the_kill_switch_flipped_between_poll_ready_and_call_rejects_without_a_fallback() {
    let (mut svc, mut mock, breaker) = with_mock(build(Builder::new()));
    assert_ready_ok(&mut svc);
    breaker.kill_switch().kill();
    let error = call_not_forwarded(&mut svc, &mut mock).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().unwrap();
    assert_eq!(rejected.reason(), Reason::Killed);
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opened_by_another_clone_between_poll_ready_and_call_skips_the_call() {
    let (mut a, mut mock, breaker) =
        with_mock(build(Builder::new().failure_threshold(1)).with_fallback(Canned));
    let mut b = a.clone();
    assert_ready_ok(&mut a);
    assert_ready_ok(&mut b);

    fail_call(&mut b, &mut mock).await;
    assert_eq!(breaker.state(), State::Open);

    let answer = call_not_forwarded(&mut a, &mut mock).await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Open));
    assert_eq!(answer.state(), State::Open);
    let counts = breaker.snapshot().counts;
    assert_eq!(
        (
            counts.arrived,
            counts.made,
            counts.failures,
            counts.skipped_open
        ),
        (2, 1, 1, 1)
    );
    assert_balanced(&counts);
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opened_between_poll_ready_and_call_rejects_without_a_fallback() {
    let (mut a, mut mock, _breaker) = with_mock(build(Builder::new().failure_threshold(1)));
    let mut b = a.clone();
    assert_ready_ok(&mut a);
    fail_call(&mut b, &mut mock).await;
    let error = call_not_forwarded(&mut a, &mut mock).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<Rejected>().unwrap().reason(),
        Reason::Open
    );
}

// ---------------------------------------------------------------------------------------
// Abandoned reservations and cancelled calls
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_probe_reservation_dropped_without_a_call_gives_the_slot_back() {
    let (mut svc, mut mock, breaker) = with_mock(
        build(
            Builder::new()
                .failure_threshold(1)
                .cooldown(Cooldown::Calls(1)),
        )
        .with_fallback(Canned),
    );
    fail_call(&mut svc, &mut mock).await;

    let mut reserved = svc.clone();
    assert_ready_ok(&mut reserved); // this is the probe's reservation
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.state, State::HalfOpen);
    assert_eq!(snapshot.probes_in_flight, 1);
    assert_eq!(snapshot.next_probe, NextProbe::InFlight);

    // Everyone else is turned away meanwhile, and poll_ready still says ready.
    let answer = skipped_call(&mut svc, &mut mock).await;
    assert_eq!(answer.source(), Source::Fallback(Reason::HalfOpenFull));
    assert_eq!(answer.next_probe(), NextProbe::InFlight);

    drop(reserved);
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.state, State::HalfOpen);
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(snapshot.counts.abandoned, 1);
    assert_eq!(
        snapshot.counts.probes, 0,
        "the abandoned probe was not made"
    );
    assert_eq!(snapshot.next_probe, NextProbe::After { calls: 1, at: None });
    assert_balanced(&snapshot.counts);

    let answer = answered_call(&mut svc, &mut mock, "probe", "ok").await;
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(breaker.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_probe_whose_response_future_is_dropped_frees_the_slot_and_is_not_a_success() {
    let (mut svc, mut mock, breaker) = with_mock(
        build(
            Builder::new()
                .failure_threshold(1)
                .cooldown(Cooldown::Calls(1)),
        )
        .with_fallback(Canned),
    );
    fail_call(&mut svc, &mut mock).await;

    assert_ready_ok(&mut svc);
    let mut response = Box::pin(svc.call("probe"));
    let reply = expect_request!(mock, "probe");
    assert!(futures::poll!(response.as_mut()).is_pending());
    drop(response);

    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.state, State::HalfOpen);
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(snapshot.counts.cancelled, 1);
    assert_eq!(snapshot.counts.probes, 1, "the probe was made");
    assert_eq!(snapshot.counts.successes, 0);
    assert_eq!(snapshot.consecutive_failures, 1);

    // The service answers after all: nobody is listening, nothing changes.
    reply.send_response("ok");
    tokio::task::yield_now().await;
    assert_eq!(breaker.snapshot().counts.successes, 0);
    assert_eq!(breaker.state(), State::HalfOpen);

    // The next call is the probe.
    let answer = answered_call(&mut svc, &mut mock, "probe 2", "ok").await;
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(breaker.state(), State::Closed);
}

// ---------------------------------------------------------------------------------------
// Panics
// ---------------------------------------------------------------------------------------

async fn assert_panic_is_a_failure(request: Req, expected_panic: &str, recorded: &str) {
    let (mut svc, breaker, _inner) = scripted(Builder::new().failure_threshold(3));
    let error = send_on_a_task(&svc, request)
        .await
        .expect_err("the panic reaches the caller");
    assert_eq!(panic_message(error), expected_panic);

    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.counts.failures, 1);
    assert_eq!(snapshot.consecutive_failures, 1);
    assert_eq!(snapshot.last_failure.unwrap().message.as_ref(), recorded);
    assert_eq!(snapshot.state, State::Closed);

    // Not poisoned: later calls go through and are counted.
    for _ in 0..2 {
        let answer = send(&mut svc, "hello").await.unwrap();
        assert_eq!(answer.source(), Source::Service);
    }
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.counts.successes, 2);
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_balanced(&snapshot.counts);
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_inner_call_counts_as_a_failure_and_propagates() {
    assert_panic_is_a_failure(
        "panic in call",
        "the inner call panicked",
        "the service panicked",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_inner_future_counts_as_a_failure_and_propagates() {
    assert_panic_is_a_failure(
        "panic in future",
        "the inner future panicked",
        "the service panicked",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_classifier_counts_as_a_failure_and_propagates() {
    assert_panic_is_a_failure(
        "panic in classifier",
        "the classifier panicked",
        "the classifier panicked",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_inner_poll_ready_counts_as_a_failure_and_propagates() {
    let (mut svc, breaker, inner) = scripted(Builder::new().failure_threshold(3));
    inner.panic_when_polled.store(true, Ordering::SeqCst);
    let error = send_on_a_task(&svc, "hello").await.unwrap_err();
    assert_eq!(panic_message(error), "the inner poll_ready panicked");
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.consecutive_failures, 1);
    assert_eq!(
        snapshot.last_failure.unwrap().message.as_ref(),
        "the service panicked in poll_ready"
    );

    inner.panic_when_polled.store(false, Ordering::SeqCst);
    assert_eq!(
        send(&mut svc, "hello").await.unwrap().source(),
        Source::Service
    );
    assert_eq!(breaker.snapshot().consecutive_failures, 0);
}

#[tokio::test(start_paused = true)]
async fn panics_trip_the_breaker_like_failures_and_it_keeps_working_afterwards() {
    let (mut svc, breaker, inner) = scripted(
        Builder::new()
            .failure_threshold(3)
            .cooldown(Cooldown::Calls(2)),
    );
    let mut events = breaker.subscribe();
    for request in ["panic in call", "panic in future", "panic in classifier"] {
        assert!(send_on_a_task(&svc, request).await.unwrap_err().is_panic());
    }
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.consecutive_failures, 3);
    assert_eq!(snapshot.probes_in_flight, 0);

    let calls = inner.calls.load(Ordering::SeqCst);
    let answer = send(&mut svc, "hello").await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Open));
    assert_eq!(inner.calls.load(Ordering::SeqCst), calls);
    let answer = send(&mut svc, "hello").await.unwrap();
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(
        transitions(&mut events),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
}

/// The failure of a panicking call is recorded while its panic unwinds: an observer that
/// panics too, at that failure and at the transition it causes, is caught as ever, the
/// service's panic (not the observer's) reaches the caller, and the transition is still
/// delivered.
#[tokio::test(start_paused = true)]
async fn a_panicking_observer_of_a_panicking_calls_failure_is_caught_and_the_failure_counted() {
    let observed = Arc::new(AtomicUsize::new(0));
    let builder = Builder::new().failure_threshold(1).on_event({
        let observed = observed.clone();
        move |_| {
            observed.fetch_add(1, Ordering::SeqCst);
            panic!("the observer panicked");
        }
    });
    let (mut svc, breaker, _inner) = scripted(builder);
    let mut events = breaker.subscribe();
    for request in ["panic in future", "panic in classifier", "panic in call"] {
        breaker.reset();
        let error = send_on_a_task(&svc, request).await.unwrap_err();
        assert_ne!(panic_message(error), "the observer panicked");
        assert_eq!(
            breaker.state(),
            State::Open,
            "{request}: the failure opened it"
        );
    }
    assert!(
        observed.load(Ordering::SeqCst) >= 6,
        "the observer ran at each"
    );
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.counts.failures, 3);
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(
        transitions(&mut events)
            .iter()
            .filter(|(_, to, cause)| *to == State::Open && *cause == Cause::Tripped)
            .count(),
        3
    );
    breaker.reset();
    assert_eq!(
        send(&mut svc, "hello").await.unwrap().source(),
        Source::Service
    );
}

#[tokio::test(start_paused = true)]
async fn a_panicking_probe_reopens_the_breaker_and_frees_its_slot() {
    let (mut svc, breaker, _inner) = scripted(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1)),
    );
    send(&mut svc, "fail").await.unwrap_err();
    assert!(send_on_a_task(&svc, "panic in future")
        .await
        .unwrap_err()
        .is_panic());
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.counts.probes, 1);
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(
        send(&mut svc, "hello").await.unwrap().source(),
        Source::Probe
    );
    assert_eq!(breaker.state(), State::Closed);
}

// ---------------------------------------------------------------------------------------
// Ignored outcomes
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn ignored_outcomes_neither_count_as_failures_nor_reset_the_run() {
    let (mut svc, breaker, _inner) = scripted(Builder::new().failure_threshold(2));
    send(&mut svc, "fail").await.unwrap_err();
    for _ in 0..3 {
        let answer = send(&mut svc, "ignored").await.unwrap();
        assert_eq!(answer.source(), Source::Service);
        assert_eq!(answer.into_inner(), "ignored");
    }
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.consecutive_failures, 1);
    assert_eq!(snapshot.counts.ignored, 3);
    assert_eq!(
        (snapshot.counts.successes, snapshot.counts.failures),
        (0, 1)
    );

    send(&mut svc, "fail").await.unwrap_err();
    assert_eq!(breaker.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn an_ignored_probe_outcome_gives_the_half_open_slot_back() {
    let (mut a, mut mock, breaker) = with_mock(
        build(
            Builder::new()
                .failure_threshold(1)
                .cooldown(Cooldown::Calls(1)),
        )
        .with_fallback(Canned)
        .with_classifier(classify as Classifier),
    );
    let mut events = breaker.subscribe();
    fail_call(&mut a, &mut mock).await;

    let answer = answered_call(&mut a, &mut mock, "probe", "ignored").await;
    assert_eq!(answer.source(), Source::Probe);
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.state, State::HalfOpen);
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(snapshot.counts.ignored, 1);
    assert_eq!(snapshot.next_probe, NextProbe::After { calls: 1, at: None });

    // The next call, from any clone, is the probe.
    let mut b = a.clone();
    let answer = answered_call(&mut b, &mut mock, "probe 2", "ok").await;
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(
        transitions(&mut events),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Modes
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn disabled_mode_passes_everything_through_and_records_nothing() {
    let (mut svc, breaker, inner) = scripted(Builder::new().failure_threshold(1));
    breaker.set_mode(Mode::Disabled);
    assert_eq!(breaker.mode(), Mode::Disabled);
    let mut events = breaker.subscribe();

    for _ in 0..10 {
        let error = send(&mut svc, "fail").await.unwrap_err();
        assert_eq!(error.to_string(), "connection refused");
    }
    assert_eq!(
        send(&mut svc, "hello").await.unwrap().source(),
        Source::Service
    );
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.mode, Mode::Disabled);
    assert_eq!(snapshot.counts, Counts::default());
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.last_failure, None);
    assert_eq!(inner.calls.load(Ordering::SeqCst), 11);
    assert!(transitions(&mut events).is_empty());
}

#[tokio::test(start_paused = true)]
async fn disabling_an_open_breaker_lets_calls_through_without_recording_them() {
    let (mut svc, breaker, inner) = scripted(Builder::new().failure_threshold(1));
    send(&mut svc, "fail").await.unwrap_err();
    assert_eq!(breaker.state(), State::Open);
    let before = breaker.snapshot().counts;

    breaker.set_mode(Mode::Disabled);
    assert_eq!(breaker.snapshot().next_probe, NextProbe::NotNeeded);
    let answer = send(&mut svc, "hello").await.unwrap();
    assert_eq!(answer.source(), Source::Service);
    send(&mut svc, "fail").await.unwrap_err();
    assert_eq!(inner.calls.load(Ordering::SeqCst), 3);
    assert_eq!(breaker.snapshot().counts, before);
    assert_eq!(breaker.state(), State::Open, "nothing was decided either");

    // The kill switch still applies: it is a person's decision.
    breaker.kill_switch().kill();
    let answer = send(&mut svc, "hello").await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Killed));
    assert_eq!(inner.calls.load(Ordering::SeqCst), 3);
    breaker.kill_switch().revive();

    // Enabled again: the breaker is still open.
    breaker.set_mode(Mode::Enabled);
    let answer = send(&mut svc, "hello").await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Open));
}

/// `Counts` promises `arrived == made + skipped() + abandoned`. It must still hold when
/// the mode is switched between `poll_ready` and `call`, in either direction.
#[tokio::test(start_paused = true)]
async fn switching_disabled_mode_between_poll_ready_and_call_keeps_the_counts_balanced() {
    async fn counts_after_switch(from: Mode, to: Mode) -> (u64, u64) {
        let (mut svc, breaker, inner) = scripted(Builder::new().mode(from));
        svc.ready().await.unwrap();
        breaker.set_mode(to);
        let answer = svc.call("hello").await.unwrap();
        assert_eq!(answer.source(), Source::Service);
        assert_eq!(inner.calls.load(Ordering::SeqCst), 1);
        let c = breaker.snapshot().counts;
        (c.arrived, c.made + c.skipped() + c.abandoned)
    }
    let enabled_to_disabled = counts_after_switch(Mode::Enabled, Mode::Disabled).await;
    let disabled_to_enabled = counts_after_switch(Mode::Disabled, Mode::Enabled).await;
    assert!(
        enabled_to_disabled.0 == enabled_to_disabled.1
            && disabled_to_enabled.0 == disabled_to_enabled.1,
        "(arrived, made + skipped + abandoned): enabled -> disabled {enabled_to_disabled:?}, \
         disabled -> enabled {disabled_to_enabled:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn observe_only_never_skips_but_marks_the_answers_an_enabled_breaker_would_have_skipped() {
    let (mut svc, mut mock, breaker) = with_mock(
        build(
            Builder::new()
                .failure_threshold(2)
                .cooldown(Cooldown::Calls(3))
                .mode(Mode::ObserveOnly),
        )
        .with_fallback(Canned),
    );
    let mut events = breaker.subscribe();
    fail_call(&mut svc, &mut mock).await;
    fail_call(&mut svc, &mut mock).await;
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.mode, Mode::ObserveOnly);
    assert_eq!(snapshot.state, State::Open, "it moves through its states");

    // Would have been skipped: made anyway, and marked.
    let answer = answered_call(&mut svc, &mut mock, "a", "ok").await;
    assert_eq!(answer.source(), Source::Shadowed(Reason::Open));
    assert_eq!(answer.source().reason(), Some(Reason::Open));
    assert!(answer.source().is_service());
    assert_eq!(answer.into_inner(), "ok");
    assert_eq!(
        breaker.state(),
        State::Open,
        "a shadowed success does not close"
    );

    assert_ready_ok(&mut svc);
    let response = svc.call("b");
    expect_request!(mock, "b").send_error(io::Error::other("refused"));
    response.await.unwrap_err();
    assert_eq!(breaker.state(), State::Open);

    // The third call after the opening one is the probe, as when enabled.
    let answer = answered_call(&mut svc, &mut mock, "c", "ok").await;
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(breaker.state(), State::Closed);

    let counts = breaker.snapshot().counts;
    assert_eq!(counts.would_have_skipped, 2);
    assert_eq!(counts.skipped(), 0);
    assert_eq!(counts.made, 5);
    assert_eq!(counts.probes, 1);
    assert_balanced(&counts);
    assert_eq!(
        transitions(&mut events),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn switching_to_observe_only_at_runtime_turns_skips_into_shadowed_calls() {
    let (mut svc, breaker, inner) = scripted(Builder::new().failure_threshold(1));
    send(&mut svc, "fail").await.unwrap_err();
    assert_eq!(
        send(&mut svc, "hello").await.unwrap().source(),
        Source::Fallback(Reason::Open)
    );
    breaker.set_mode(Mode::ObserveOnly);
    assert_eq!(breaker.mode(), Mode::ObserveOnly);
    assert_eq!(
        send(&mut svc, "hello").await.unwrap().source(),
        Source::Shadowed(Reason::Open)
    );
    assert_eq!(inner.calls.load(Ordering::SeqCst), 2);
    assert_eq!(breaker.snapshot().counts.would_have_skipped, 1);
}

// ---------------------------------------------------------------------------------------
// Force-open
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn force_open_skips_with_forced_open_until_reset() {
    let (mut svc, mut mock, breaker) =
        with_mock(build(Builder::new().cooldown(Cooldown::Time(secs(1)))).with_fallback(Canned));
    let mut events = breaker.subscribe();
    breaker.force_open();
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.state, State::ForcedOpen);
    assert_eq!(snapshot.next_probe, NextProbe::Manual);

    // Polling the inner service now would give Pending, or this error.
    mock.allow(0);
    mock.send_error("the inner service was polled");
    for _ in 0..3 {
        let answer = skipped_call(&mut svc, &mut mock).await;
        assert_eq!(answer.source(), Source::Fallback(Reason::ForcedOpen));
        assert_eq!(answer.state(), State::ForcedOpen);
        assert_eq!(answer.next_probe(), NextProbe::Manual);
        advance(secs(3600)).await; // no cooldown ends it
    }
    assert_eq!(breaker.snapshot().counts.skipped_forced_open, 3);
    assert_eq!(breaker.snapshot().counts.probes, 0);

    breaker.reset();
    assert_eq!(breaker.state(), State::Closed);
    match svc.poll_ready() {
        Poll::Ready(Err(error)) => assert_eq!(error.to_string(), "the inner service was polled"),
        other => panic!("expected the inner readiness error, got {other:?}"),
    }
    mock.allow(1);
    let answer = answered_call(&mut svc, &mut mock, "hello", "world").await;
    assert_eq!(answer.source(), Source::Service);
    assert_eq!(
        transitions(&mut events),
        vec![
            (State::Closed, State::ForcedOpen, Cause::ForcedOpen),
            (State::ForcedOpen, State::Closed, Cause::Reset),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn force_open_without_a_fallback_rejects_with_forced_open() {
    let (mut svc, mut mock, breaker) = with_mock(build(Builder::new().name("tool")));
    breaker.force_open();
    assert_ready_ok(&mut svc);
    let error = call_not_forwarded(&mut svc, &mut mock).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().unwrap();
    assert_eq!(rejected.reason(), Reason::ForcedOpen);
    assert_eq!(rejected.state(), State::ForcedOpen);
    assert_eq!(rejected.next_probe(), NextProbe::Manual);
    assert_eq!(
        error.to_string(),
        "circuit breaker `tool` skipped the call: it was forced open"
    );
}

/// A breaker held open until a reset by the service's own permanent failure (an
/// exhausted quota) says so in its rejections, and why; a person's forced open does not
/// claim one.
#[tokio::test]
async fn a_rejection_held_by_a_permanent_failure_names_that_failure() {
    use tower_circuit_breaker::Failure;
    let layer = Builder::new()
        .name("openai")
        .build()
        .unwrap()
        .with_classifier(|result: &Result<&'static str, io::Error>| match result {
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Failure(Failure::new("429: insufficient_quota").permanent()),
        });
    let handle = layer.handle();
    let mut svc = layer.layer(tower::service_fn(|fail: bool| async move {
        if fail {
            Err(io::Error::other("quota"))
        } else {
            Ok("ok")
        }
    }));
    assert!(svc.ready().await.unwrap().call(true).await.is_err());
    let error = svc.ready().await.unwrap().call(false).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("a Rejected error");
    assert_eq!(rejected.next_probe(), NextProbe::Manual);
    assert_eq!(
        rejected.permanent_failure(),
        Some("429: insufficient_quota")
    );
    assert_eq!(
        rejected.to_string(),
        "circuit breaker `openai` skipped the call: it is open after a permanent failure \
         (429: insufficient_quota); closed only by a reset"
    );

    handle.reset();
    handle.force_open();
    let error = svc.ready().await.unwrap().call(false).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("a Rejected error");
    assert_eq!(
        rejected.permanent_failure(),
        None,
        "a person's act, not a failure"
    );
}
