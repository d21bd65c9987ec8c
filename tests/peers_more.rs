//! More behaviours ported from the peers' own test suites (sony/gobreaker
//! `v2/gobreaker_test.go`, resilience4j `CircuitBreakerStateMachineTest` and its
//! `internal` tests, Polly `test/Polly.Core.Tests/CircuitBreaker/**`, Hystrix
//! `HystrixCircuitBreakerTest`, failsafe-go `circuitbreaker/*_test.go`), beyond those of
//! `tests/peers.rs`: the counts and the snapshot after each transition, the events of
//! each transition and their order, acts of a person during calls, half-open with
//! several probes, the failure-rate window's edges, the slow-call rule with consecutive
//! failures, and extreme settings.
//!
//! Each test names the peer test it comes from; where our documented semantics differ,
//! the test is adapted to ours and says so. Every test runs on tokio's paused clock.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::advance;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_circuit_breaker::config::RateWindow;
use tower_circuit_breaker::error::{BoxError, Rejected};
use tower_circuit_breaker::snapshot::Counts;
use tower_circuit_breaker::{
    Advice, Answer, Backoff, Builder, Cause, CircuitBreakerHandle, Cooldown, Event, Failure, Mode,
    NextProbe, Outcome, Reason, Source, State, Transition,
};

const NS: Duration = Duration::from_nanos(1);
/// The error text of a failed call.
const FAILED: &str = "connection refused";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

// ---------------------------------------------------------------------------------
// The wrapped service: each request says how the call ends.
// ---------------------------------------------------------------------------------

#[derive(Debug)]
enum Req {
    Ok,
    Fail,
    /// An error the classifier ignores (the caller's mistake).
    Ignore,
    /// A failure that says how long to wait.
    RetryAfter(Duration),
    /// A failure that will not pass by itself.
    Permanent,
    Slow(Duration),
    Wait(oneshot::Receiver<bool>),
}

#[derive(Clone, Debug, Default)]
struct Backend {
    calls: Arc<AtomicUsize>,
}

#[derive(Debug)]
enum Reply {
    Ok,
    Fail,
    Ignore,
    RetryAfter(Duration),
    Permanent,
}

impl Service<Req> for Backend {
    type Response = &'static str;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<&'static str, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let reply = match req {
                Req::Ok => Reply::Ok,
                Req::Fail => Reply::Fail,
                Req::Ignore => Reply::Ignore,
                Req::RetryAfter(wait) => Reply::RetryAfter(wait),
                Req::Permanent => Reply::Permanent,
                Req::Slow(took) => {
                    tokio::time::sleep(took).await;
                    Reply::Ok
                }
                Req::Wait(rx) => match rx.await {
                    Ok(true) => Reply::Ok,
                    _ => Reply::Fail,
                },
            };
            match reply {
                Reply::Ok => Ok("ok"),
                Reply::Fail => Err(io::Error::other(FAILED)),
                Reply::Ignore => Err(io::Error::new(io::ErrorKind::InvalidInput, "bad request")),
                Reply::RetryAfter(wait) => Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("retry after {}", wait.as_nanos()),
                )),
                Reply::Permanent => Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "quota exhausted",
                )),
            }
        })
    }
}

/// `InvalidInput` is ignored; `WouldBlock` says how long to wait (in nanoseconds);
/// `PermissionDenied` is permanent; any other error is a failure.
fn classify(result: &Result<&'static str, io::Error>) -> Outcome {
    match result {
        Ok(_) => Outcome::Success,
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Outcome::Ignored,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            let nanos: u64 = e.to_string()["retry after ".len()..].parse().unwrap();
            Outcome::Failure(Failure::new("429").retry_after(Duration::from_nanos(nanos)))
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            Outcome::Failure(Failure::new("quota exhausted").permanent())
        }
        Err(_) => Outcome::failure_with(FAILED),
    }
}

type Result2 = Result<Answer<&'static str>, BoxError>;

trait Svc:
    Service<Req, Response = Answer<&'static str>, Error = BoxError, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}
impl<T> Svc for T where
    T: Service<Req, Response = Answer<&'static str>, Error = BoxError, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

/// A breaker around the backend, answering skipped calls from a fallback.
fn rig(builder: Builder) -> (impl Svc, CircuitBreakerHandle, Arc<AtomicUsize>) {
    let backend = Backend::default();
    let calls = backend.calls.clone();
    let layer = builder.build().expect("valid settings");
    let handle = layer.handle();
    let svc = layer
        .with_classifier(classify)
        .with_fallback(service_fn(|_: Req| async {
            Ok::<_, Infallible>("fallback")
        }))
        .layer(backend);
    (svc, handle, calls)
}

/// A breaker with no fallback: skipped calls are a typed [`Rejected`] error.
fn rig_rejecting(builder: Builder) -> (impl Svc, CircuitBreakerHandle, Arc<AtomicUsize>) {
    let backend = Backend::default();
    let calls = backend.calls.clone();
    let layer = builder.build().expect("valid settings");
    let handle = layer.handle();
    let svc = layer.with_classifier(classify).layer(backend);
    (svc, handle, calls)
}

async fn call<S: Svc>(svc: &mut S, req: Req) -> Result2 {
    svc.ready().await?.call(req).await
}

/// Where the answer came from, or the error's text.
async fn got<S: Svc>(svc: &mut S, req: Req) -> Result<Source, String> {
    match call(svc, req).await {
        Ok(answer) => Ok(answer.source()),
        Err(e) => Err(e.to_string()),
    }
}

async fn start<S: Svc>(svc: &mut S, req: Req) -> S::Future {
    svc.ready().await.expect("ready").call(req)
}

/// A call that hangs until told how it ends.
async fn start_waiting<S: Svc>(svc: &mut S) -> (S::Future, oneshot::Sender<bool>) {
    let (tx, rx) = oneshot::channel();
    (start(svc, Req::Wait(rx)).await, tx)
}

async fn fail_n<S: Svc>(svc: &mut S, n: usize) {
    for _ in 0..n {
        assert_eq!(got(svc, Req::Fail).await, Err(FAILED.into()));
    }
}

async fn succeed_n<S: Svc>(svc: &mut S, n: usize) {
    for _ in 0..n {
        assert_eq!(got(svc, Req::Ok).await, Ok(Source::Service));
    }
}

fn skipped(reason: Reason) -> Result<Source, String> {
    Ok(Source::Fallback(reason))
}

fn drain(rx: &mut tokio::sync::broadcast::Receiver<Transition>) -> Vec<Transition> {
    let mut all = Vec::new();
    while let Ok(t) = rx.try_recv() {
        all.push(t);
    }
    all
}

fn summary(transitions: &[Transition]) -> Vec<(State, State, Cause)> {
    transitions
        .iter()
        .map(|t| (t.from, t.to, t.cause))
        .collect()
}

/// Every event an observer hears, as one line each.
fn recorder() -> (
    Arc<Mutex<Vec<String>>>,
    impl Fn(&Event<'_>) + Send + Sync + 'static,
) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let observer = move |event: &Event<'_>| {
        let line = match event {
            Event::Transition(t) => format!("transition {}->{} {}", t.from, t.to, t.cause),
            Event::Recorded { outcome, probe, .. } => {
                let what = match outcome {
                    Outcome::Success => "success",
                    Outcome::Failure(_) => "failure",
                    Outcome::Ignored => "ignored",
                };
                format!("recorded {what}{}", if *probe { " probe" } else { "" })
            }
            Event::Skipped { skip, .. } => format!("skipped {}", skip.reason()),
            Event::ModeChanged { from, to, .. } => {
                format!("mode {}->{}", from.as_str(), to.as_str())
            }
            _ => "other".into(),
        };
        sink.lock().unwrap().push(line);
    };
    (lines, observer)
}

/// The trip policy's readings (`failure_rate`) an observer hears, in order.
type Readings = Arc<Mutex<Vec<Option<f64>>>>;

/// An observer keeping the readings it hears.
fn rate_recorder() -> (Readings, impl Fn(&Event<'_>) + Send + Sync + 'static) {
    let rates = Arc::new(Mutex::new(Vec::new()));
    let sink = rates.clone();
    let observer = move |event: &Event<'_>| {
        if let Event::Recorded { failure_rate, .. } = event {
            sink.lock().unwrap().push(*failure_rate);
        }
    };
    (rates, observer)
}

fn taken<T>(lines: &Arc<Mutex<Vec<T>>>) -> Vec<T> {
    std::mem::take(&mut *lines.lock().unwrap())
}

/// The running totals add up, as `Counts` documents.
fn assert_counts_add_up(c: &Counts) {
    assert_eq!(c.arrived, c.made + c.skipped() + c.abandoned, "{c:?}");
    assert_eq!(
        c.made,
        c.successes + c.failures + c.ignored + c.cancelled + c.late,
        "{c:?}"
    );
}

// =================================================================================
// gobreaker v2/gobreaker_test.go: counts after each transition
// =================================================================================

// gobreaker TestDefaultCircuitBreaker (Counts{5, 0, 5, 0, 5} then {6, 1, 5, 1, 0}): the
// run of failures is exactly the failures since the last success, and a success zeroes
// it while the running totals keep every outcome.
#[tokio::test(start_paused = true)]
async fn a_success_zeroes_the_run_of_failures_and_the_totals_keep_every_outcome() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(6));
    fail_n(&mut svc, 5).await;
    let s = handle.snapshot();
    assert_eq!((s.state, s.consecutive_failures), (State::Closed, 5));
    assert_eq!(
        (s.counts.arrived, s.counts.made, s.counts.failures),
        (5, 5, 5)
    );
    succeed_n(&mut svc, 1).await;
    let s = handle.snapshot();
    assert_eq!((s.state, s.consecutive_failures), (State::Closed, 0));
    assert_eq!((s.counts.successes, s.counts.failures), (1, 5));
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().consecutive_failures, 1);
    assert_counts_add_up(&handle.snapshot().counts);
}

// gobreaker TestDefaultCircuitBreaker ("StateClosed to StateOpen", 6 consecutive
// failures): the threshold reached exactly opens, one below does not; the opening tells
// how many failures in a row opened it.
#[tokio::test(start_paused = true)]
async fn exactly_the_threshold_opens_and_one_below_stays_closed() {
    for threshold in [1u32, 2, 3, 6, 10] {
        let (mut svc, handle, _) = rig(Builder::new().failure_threshold(threshold));
        let mut changes = handle.subscribe();
        fail_n(&mut svc, threshold as usize - 1).await;
        assert_eq!(handle.state(), State::Closed, "threshold {threshold}");
        assert!(drain(&mut changes).is_empty());
        fail_n(&mut svc, 1).await;
        assert_eq!(handle.state(), State::Open, "threshold {threshold}");
        let opened = drain(&mut changes);
        assert_eq!(opened.len(), 1);
        assert_eq!(
            (opened[0].from, opened[0].to, opened[0].cause),
            (State::Closed, State::Open, Cause::Tripped)
        );
        assert_eq!(opened[0].consecutive_failures, threshold);
    }
}

// gobreaker TestDefaultCircuitBreaker ("assert.Error(t, succeed(defaultCB))" while open,
// with the counts unchanged): calls rejected by an open breaker are neither successes nor
// failures; they are counted as skipped, and the run of failures is untouched.
#[tokio::test(start_paused = true)]
async fn rejected_calls_are_skips_not_outcomes() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(2)
        .cooldown(Cooldown::Time(secs(60))));
    fail_n(&mut svc, 2).await;
    let before = handle.snapshot();
    for req in [Req::Ok, Req::Fail, Req::Ignore] {
        assert_eq!(got(&mut svc, req).await, skipped(Reason::Open));
    }
    let after = handle.snapshot();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(after.consecutive_failures, before.consecutive_failures);
    assert_eq!(after.counts.skipped_open, 3);
    assert_eq!(after.counts.skipped(), 3);
    assert_eq!(
        (
            after.counts.successes,
            after.counts.failures,
            after.counts.ignored
        ),
        (0, 2, 0)
    );
    assert_eq!(after.counts.arrived, 5);
    assert_counts_add_up(&after.counts);
}

// gobreaker TestDefaultCircuitBreaker, followed through a whole cycle (closed, open,
// half-open, open, half-open, closed): after every step the totals add up and the
// snapshot says what the state and next probe are.
#[tokio::test(start_paused = true)]
async fn the_snapshot_is_consistent_after_every_transition_of_a_whole_cycle() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(2)
        .cooldown(Cooldown::Time(secs(60))));
    let check = |state: State, next: NextProbe| {
        let s = handle.snapshot();
        assert_eq!(s.state, state);
        assert_eq!(s.next_probe, next, "{state:?}");
        assert_counts_add_up(&s.counts);
    };
    check(State::Closed, NextProbe::NotNeeded);
    fail_n(&mut svc, 2).await;
    let opened = now();
    check(
        State::Open,
        NextProbe::After {
            calls: 1,
            at: Some(opened + secs(60)),
        },
    );
    advance(secs(59)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(secs(1)).await;
    assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
    let reopened = now();
    check(
        State::Open,
        NextProbe::After {
            calls: 1,
            at: Some(reopened + secs(60)),
        },
    );
    assert_eq!(handle.snapshot().consecutive_failures, 3);
    advance(secs(60)).await;
    let (probe, tx) = start_waiting(&mut svc).await;
    check(State::HalfOpen, NextProbe::InFlight);
    assert_eq!(handle.snapshot().probes_in_flight, 1);
    tx.send(true).unwrap();
    assert_eq!(probe.await.unwrap().source(), Source::Probe);
    check(State::Closed, NextProbe::NotNeeded);
    let s = handle.snapshot();
    assert_eq!((s.consecutive_failures, s.probes_in_flight), (0, 0));
    assert_eq!(
        (
            s.counts.probes,
            s.counts.successes,
            s.counts.failures,
            s.counts.skipped_open
        ),
        (2, 1, 3, 1)
    );
}

// gobreaker TestGeneration / TestCustomCircuitBreaker: the generation grows with every
// change of state, as the transitions and the snapshot report it.
#[tokio::test(start_paused = true)]
async fn the_generation_grows_with_every_transition_and_the_snapshot_shows_the_last() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1)));
    let mut changes = handle.subscribe();
    let start = handle.snapshot().generation;
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    handle.force_open();
    handle.reset();
    let all = drain(&mut changes);
    assert_eq!(all.len(), 7, "{:?}", summary(&all));
    let generations: Vec<u64> = all.iter().map(|t| t.generation).collect();
    assert!(
        generations.windows(2).all(|w| w[0] < w[1]),
        "{generations:?}"
    );
    assert!(generations[0] > start);
    assert_eq!(handle.snapshot().generation, *generations.last().unwrap());
}

// gobreaker TestCustomCircuitBreaker (MaxRequests 3: two successes leave it half-open
// with Counts{2, 2, 0, 2, 0}): each successful probe is counted as a probe and a
// success, and the breaker stays half-open until the third.
#[tokio::test(start_paused = true)]
async fn each_successful_probe_is_counted_and_the_third_of_three_closes() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(90)))
        .half_open_probes(3));
    fail_n(&mut svc, 1).await;
    advance(secs(90)).await;
    for n in 1..=2u64 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
        let s = handle.snapshot();
        assert_eq!(s.state, State::HalfOpen);
        assert_eq!((s.counts.probes, s.counts.successes), (n, n));
        assert_eq!(s.probes_in_flight, 0);
    }
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counts.probes, 3);
}

// gobreaker TestCustomCircuitBreaker (Interval: the counts are cleared every 30 s in
// closed): ours keeps no interval for consecutive failures; a run of failures is a run
// however far apart (failsafe-go's count-based threshold does the same).
#[tokio::test(start_paused = true)]
async fn a_run_of_failures_is_not_forgotten_with_time() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(3));
    fail_n(&mut svc, 2).await;
    advance(secs(24 * 3600)).await;
    assert_eq!(handle.snapshot().consecutive_failures, 2);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// =================================================================================
// failsafe-go circuitbreaker/*_test.go
// =================================================================================

// failsafe-go TestHalfOpenFailureWithSuccessThreshold (success threshold 3: a success,
// then a failure opens) and TestHalfOpenFailureWithSuccessAndFailureThresholds (two
// successes, then a failure opens; the failure threshold is ignored in half-open).
#[tokio::test(start_paused = true)]
async fn with_three_probes_a_failure_after_successes_reopens_at_once() {
    for successes in [1usize, 2] {
        let (mut svc, handle, _) = rig(Builder::new()
            .failure_threshold(2)
            .cooldown(Cooldown::Calls(1))
            .half_open_probes(3));
        let mut changes = handle.subscribe();
        fail_n(&mut svc, 2).await;
        for _ in 0..successes {
            assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
        }
        assert_eq!(handle.state(), State::HalfOpen);
        assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
        assert_eq!(handle.state(), State::Open);
        let all = drain(&mut changes);
        assert_eq!(
            summary(&all),
            vec![
                (State::Closed, State::Open, Cause::Tripped),
                (State::Open, State::HalfOpen, Cause::CooldownElapsed),
                (State::HalfOpen, State::Open, Cause::ProbeFailed),
            ]
        );
        // The successes broke the run: the failed probe is one failure in a row.
        assert_eq!(all[2].consecutive_failures, 1);
        assert_eq!(handle.snapshot().consecutive_failures, 1);
    }
}

// failsafe-go TestHalfOpenSuccessWithSuccessThreshold, then a second half-open: the
// successes of a half-open that failed do not carry over to the next one.
#[tokio::test(start_paused = true)]
async fn successes_of_a_failed_half_open_do_not_carry_over_to_the_next() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .half_open_probes(3));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
    assert_eq!(handle.state(), State::Open);
    for _ in 0..2 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
        assert_eq!(handle.state(), State::HalfOpen);
    }
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// failsafe-go TestRemainingDelayInHalfOpenState: in half-open the remaining delay is
// zero while a probe may go; with every slot taken ours says the probes decide (no time).
#[tokio::test(start_paused = true)]
async fn half_open_with_a_free_slot_has_no_delay_left() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(1)))
        .half_open_probes(2));
    fail_n(&mut svc, 1).await;
    advance(secs(1)).await;
    let (first, _tx1) = start_waiting(&mut svc).await;
    let s = handle.snapshot();
    assert_eq!(s.state, State::HalfOpen);
    assert_eq!(s.retry_after(), Some(Duration::ZERO));
    assert_eq!(handle.peek(), Advice::Probe);
    let (second, _tx2) = start_waiting(&mut svc).await;
    assert_eq!(handle.snapshot().retry_after(), None);
    assert!(matches!(handle.peek(), Advice::Skip(s) if s.reason() == Reason::HalfOpenFull));
    drop((first, second));
}

// failsafe-go TestClosedStateFailureWithFailureThresholdRatio (2 of 3: success, failure,
// failure trips) ported to a count window of 3 with a minimum of 3.
#[tokio::test(start_paused = true)]
async fn two_failures_in_a_window_of_three_trip_at_two_thirds() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(2.0 / 3.0, RateWindow::Calls(3), 3)
        .cooldown(Cooldown::Calls(1)));
    succeed_n(&mut svc, 1).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// failsafe-go TestClosedStateSuccessWithFailureThresholdRatio (failures, then successes
// push the share below the ratio): a full window whose share stays below keeps it closed.
#[tokio::test(start_paused = true)]
async fn a_share_below_the_ratio_never_trips_however_long_it_runs() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(4), 4)
        .cooldown(Cooldown::Calls(1)));
    for _ in 0..50 {
        fail_n(&mut svc, 1).await;
        succeed_n(&mut svc, 3).await;
    }
    assert_eq!(handle.state(), State::Closed);
    let s = handle.snapshot();
    assert_eq!((s.window.failures, s.window.calls), (1, 4));
}

// failsafe-go "should call OnHalfOpen listener" and "OnStateChanged": every change of
// state is heard once, in order, by the transition callback.
#[tokio::test(start_paused = true)]
async fn on_transition_hears_every_change_once_in_order() {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = heard.clone();
    let (mut svc, _, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(10)))
        .on_transition(move |t| sink.lock().unwrap().push((t.from, t.to, t.cause))));
    fail_n(&mut svc, 1).await;
    advance(secs(10)).await;
    assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
    advance(secs(10)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(
        taken(&heard),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Open, Cause::ProbeFailed),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
}

// =================================================================================
// resilience4j CircuitBreakerStateMachineTest and internal tests
// =================================================================================

// resilience4j shouldNotTransitionToOpen... with failureRateThreshold 100: a rate of 1.0
// trips only when every call in the window failed.
#[tokio::test(start_paused = true)]
async fn a_rate_of_one_trips_only_when_every_call_in_the_window_failed() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(1.0, RateWindow::Calls(4), 4)
        .cooldown(Cooldown::Calls(1)));
    fail_n(&mut svc, 3).await;
    succeed_n(&mut svc, 1).await;
    fail_n(&mut svc, 3).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "a success still in the window"
    );
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// resilience4j CircuitBreakerConfig with slidingWindowSize 1 (the extreme count window):
// the last outcome alone decides.
#[tokio::test(start_paused = true)]
async fn a_count_window_of_one_trips_on_the_first_failure() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(1.0, RateWindow::Calls(1), 1)
        .cooldown(Cooldown::Calls(1)));
    succeed_n(&mut svc, 5).await;
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// resilience4j shouldNotCountIgnoredExceptions... (ignored exceptions are not in the
// window): an ignored outcome neither fills the window nor changes the share.
#[tokio::test(start_paused = true)]
async fn ignored_outcomes_stay_out_of_the_rate_window() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(4), 4)
        .cooldown(Cooldown::Calls(1)));
    fail_n(&mut svc, 2).await;
    for _ in 0..10 {
        assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    }
    let s = handle.snapshot();
    assert_eq!((s.window.failures, s.window.calls), (2, 2));
    assert_eq!(s.counts.ignored, 10);
    assert_eq!(handle.state(), State::Closed);
    succeed_n(&mut svc, 2).await;
    assert_eq!(handle.state(), State::Open, "2 of 4 at 50 % trips");
}

// resilience4j shouldOpenAfterFailureRateThresholdExceeded with a time window and a
// minimum of calls: below the minimum nothing trips, whatever the share; the minimum'th
// outcome is judged.
#[tokio::test(start_paused = true)]
async fn a_time_window_judges_nothing_below_its_minimum_of_calls() {
    let (rates, observer) = rate_recorder();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Time(secs(10)), 5)
        .cooldown(Cooldown::Calls(1))
        .on_event(observer));
    for _ in 0..4 {
        fail_n(&mut svc, 1).await;
        advance(secs(1)).await;
    }
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(taken(&rates), vec![Some(-1.0); 4]);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(taken(&rates), vec![Some(100.0)]);
}

// resilience4j shouldTransitionToOpenState... then getNumberOfNotPermittedCalls: once
// tripped by its rate, the window is empty while open, and its skipped calls never fill
// it.
#[tokio::test(start_paused = true)]
async fn a_tripped_rate_window_is_empty_and_skips_never_fill_it() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(4), 2)
        .cooldown(Cooldown::Time(secs(30))));
    fail_n(&mut svc, 2).await;
    assert_eq!(handle.state(), State::Open);
    for _ in 0..5 {
        assert_eq!(got(&mut svc, Req::Fail).await, skipped(Reason::Open));
    }
    let s = handle.snapshot();
    assert_eq!((s.window.failures, s.window.calls), (0, 0));
    assert_eq!(s.counts.skipped_open, 5);
}

// resilience4j shouldResetToClosedStateFromForcedOpen... and the events of each
// transition: forced open from every state is one transition with its cause, and a
// reset out of it another.
#[tokio::test(start_paused = true)]
async fn forced_open_and_reset_from_every_state_are_one_transition_each() {
    for from in [State::Closed, State::Open, State::HalfOpen] {
        let (mut svc, handle, _) = rig(Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1)));
        let mut probe = None;
        if from != State::Closed {
            fail_n(&mut svc, 1).await;
        }
        if from == State::HalfOpen {
            probe = Some(start_waiting(&mut svc).await);
        }
        assert_eq!(handle.state(), from);
        let mut changes = handle.subscribe();
        handle.force_open();
        handle.reset();
        assert_eq!(
            summary(&drain(&mut changes)),
            vec![
                (from, State::ForcedOpen, Cause::ForcedOpen),
                (State::ForcedOpen, State::Closed, Cause::Reset),
            ],
            "from {from:?}"
        );
        if let Some((probe, tx)) = probe {
            tx.send(false).unwrap();
            assert!(probe.await.is_err());
            let s = handle.snapshot();
            assert_eq!((s.state, s.counts.late), (State::Closed, 1));
        }
    }
}

// resilience4j shouldResetClosedState while a call is in flight (and gobreaker
// TestGeneration, where a request of an earlier generation is discarded). Ours differs
// on purpose: a reset of a closed breaker is no change of state and starts no epoch (the
// README's guarantee: "calls in flight across a change of state or of mode are not
// counted"), so, as in resilience4j, whose in-flight outcome goes to the state current
// when it ends, the failure in flight counts after the reset: one failure since it.
#[tokio::test(start_paused = true)]
async fn a_failure_in_flight_across_a_reset_of_a_closed_breaker_counts_after_it() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(2));
    fail_n(&mut svc, 1).await;
    let (in_flight, tx) = start_waiting(&mut svc).await;
    handle.reset();
    assert_eq!(handle.snapshot().consecutive_failures, 0);
    tx.send(false).unwrap();
    assert!(in_flight.await.is_err());
    let s = handle.snapshot();
    assert_eq!(s.consecutive_failures, 1);
    assert_eq!((s.counts.late, s.counts.failures), (0, 2));
    assert_eq!(s.state, State::Closed);
    assert_counts_add_up(&s.counts);
}

// resilience4j transitionToForcedOpenState while a call runs: its outcome is not counted
// when it ends, and the breaker stays forced open.
#[tokio::test(start_paused = true)]
async fn a_call_in_flight_when_forced_open_is_late() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(5));
    let (in_flight, tx) = start_waiting(&mut svc).await;
    handle.force_open();
    tx.send(true).unwrap();
    assert_eq!(in_flight.await.unwrap().source(), Source::Service);
    let s = handle.snapshot();
    assert_eq!(s.state, State::ForcedOpen);
    assert_eq!((s.counts.late, s.counts.successes), (1, 0));
}

// resilience4j transitionToOpenStateFor(Duration.ZERO): a hold of no time makes the next
// call the probe (our `open_until` documents an instant already past so).
#[tokio::test(start_paused = true)]
async fn open_for_no_time_makes_the_next_call_the_probe() {
    let (mut svc, handle, _) = rig(Builder::new());
    handle.open_for(Duration::ZERO);
    assert_eq!(handle.snapshot().retry_after(), Some(Duration::ZERO));
    assert_eq!(handle.peek(), Advice::Probe);
    let mut changes = handle.subscribe();
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(
        summary(&drain(&mut changes)),
        vec![
            (State::ForcedOpen, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
}

// resilience4j transitionToOpenStateFor, then a failed trial: the breaker re-opens on
// its own cooldown (open, not forced open).
#[tokio::test(start_paused = true)]
async fn a_failed_probe_after_a_hold_reopens_on_the_breakers_own_cooldown() {
    let (mut svc, handle, _) = rig(Builder::new().cooldown(Cooldown::Time(secs(7))));
    handle.open_for(secs(100));
    advance(secs(100)).await;
    assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
    let s = handle.snapshot();
    assert_eq!((s.state, s.cause), (State::Open, Some(Cause::ProbeFailed)));
    assert_eq!(s.retry_after(), Some(secs(7)));
    advance(secs(7)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j shouldNotAllowTransitionFromForcedOpenToHalfOpen (transitionToHalfOpen
// refused): `allow_probe` leaves a forced-open breaker, a closed and a half-open one as
// they are; it applies to an open one, whose next call then probes.
#[tokio::test(start_paused = true)]
async fn allow_probe_applies_only_to_a_breaker_open_on_its_own() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(3600))));
    assert!(!handle.allow_probe(), "closed");
    fail_n(&mut svc, 1).await;
    assert!(handle.allow_probe(), "open");
    let (probe, _tx) = start_waiting(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    assert!(!handle.allow_probe(), "half-open");
    drop(probe);
    handle.force_open();
    assert!(!handle.allow_probe(), "forced open");
    assert_eq!(handle.state(), State::ForcedOpen);
}

// resilience4j shouldResetMetrics + IntervalFunction (a reset starts the backoff over):
// after re-opens have grown the cooldown, a reset restores the base.
#[tokio::test(start_paused = true)]
async fn a_reset_restores_the_base_cooldown_after_backoff_grew_it() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(10)))
        .backoff(Backoff::exponential(2.0, Cooldown::Time(secs(1000)))));
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(10)));
    advance(secs(10)).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(20)));
    advance(secs(20)).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(40)));
    handle.reset();
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(10)));
}

// resilience4j shouldPublishEvents (onError then onStateTransition, in that order): the
// outcome that trips is reported before the transition it caused, and a probe's before
// the close.
#[tokio::test(start_paused = true)]
async fn the_tripping_outcome_is_reported_before_its_transition() {
    let (lines, observer) = recorder();
    let (mut svc, _, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(2))
        .on_event(observer));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(
        taken(&lines),
        vec![
            "recorded failure",
            "transition closed->open tripped",
            "skipped open",
            "transition open->half_open cooldown_elapsed",
            "recorded success probe",
            "transition half_open->closed probe_succeeded",
        ]
    );
}

// resilience4j CircuitBreakerEventPublisher onCallNotPermitted for each reason: skipped
// calls are reported with the reason they were skipped for.
#[tokio::test(start_paused = true)]
async fn each_skip_is_reported_with_its_reason() {
    let (lines, observer) = recorder();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(2))
        .on_event(observer));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    let (probe, _tx) = start_waiting(&mut svc).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::HalfOpenFull));
    handle.kill_switch().kill();
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Killed));
    handle.kill_switch().revive();
    handle.force_open();
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::ForcedOpen));
    drop(probe);
    let skips: Vec<String> = taken(&lines)
        .into_iter()
        .filter(|l| l.starts_with("skipped"))
        .collect();
    assert_eq!(
        skips,
        vec![
            "skipped open",
            "skipped half_open_full",
            "skipped killed",
            "skipped forced_open"
        ]
    );
    let c = handle.snapshot().counts;
    assert_eq!(
        (
            c.skipped_open,
            c.skipped_half_open_full,
            c.skipped_killed,
            c.skipped_forced_open
        ),
        (1, 1, 1, 1)
    );
}

// resilience4j shouldRecordSlowCall... with a count-based (consecutive) policy: slow
// successes in a row open a consecutive-failures breaker; a fast success breaks the run.
#[tokio::test(start_paused = true)]
async fn slow_successes_in_a_row_trip_a_consecutive_threshold_and_a_fast_one_resets_it() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(3)
        .slow_call_threshold(secs(1)));
    for _ in 0..2 {
        assert_eq!(got(&mut svc, Req::Slow(secs(2))).await, Ok(Source::Service));
    }
    assert_eq!(handle.snapshot().consecutive_failures, 2);
    succeed_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().consecutive_failures, 0);
    for _ in 0..3 {
        assert_eq!(got(&mut svc, Req::Slow(secs(2))).await, Ok(Source::Service));
    }
    let s = handle.snapshot();
    assert_eq!((s.state, s.cause), (State::Open, Some(Cause::Tripped)));
    let last = s.last_failure.expect("a slow call is a failure");
    assert!(last.message.contains("slow"), "{}", last.message);
    assert_eq!((s.counts.successes, s.counts.failures), (1, 5));
}

// resilience4j shouldRecordSlowCall... at the boundary, through half-open: a probe that
// takes exactly the threshold is not slow and closes; one a nanosecond slower re-opens.
#[tokio::test(start_paused = true)]
async fn a_probe_exactly_at_the_slow_call_threshold_closes_and_a_nanosecond_more_reopens() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .slow_call_threshold(secs(1)));
    fail_n(&mut svc, 1).await;
    assert_eq!(
        got(&mut svc, Req::Slow(secs(1) + NS)).await,
        Ok(Source::Probe)
    );
    assert_eq!(handle.snapshot().cause, Some(Cause::ProbeFailed));
    assert_eq!(got(&mut svc, Req::Slow(secs(1))).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j Event onSuccess / onError carrying the failure-rate reading: the
// consecutive policy's reading climbs to 100 where it trips; a probe reports none; an
// ignored outcome none.
#[tokio::test(start_paused = true)]
async fn the_reading_climbs_to_a_hundred_at_the_threshold_and_probes_report_none() {
    let (rates, observer) = rate_recorder();
    let (mut svc, _, _) = rig(Builder::new()
        .failure_threshold(4)
        .cooldown(Cooldown::Calls(1))
        .on_event(observer));
    fail_n(&mut svc, 3).await;
    assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(
        taken(&rates),
        vec![Some(25.0), Some(50.0), Some(75.0), None, Some(100.0), None]
    );
}

// =================================================================================
// Polly test/Polly.Core.Tests/CircuitBreaker/**
// =================================================================================

// Polly CircuitStateControllerTests OnActionFailureAsync_EnsureBreakDurationGeneration
// (a break duration from the result) in closed below the threshold: a failure that says
// how long to wait opens at once, before the threshold, with its own wait.
#[tokio::test(start_paused = true)]
async fn a_retry_after_below_the_threshold_opens_for_exactly_that_long() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(10)
        .cooldown(Cooldown::Time(secs(60))));
    let mut changes = handle.subscribe();
    assert_eq!(
        got(&mut svc, Req::RetryAfter(secs(3))).await,
        Err("retry after 3000000000".into())
    );
    let s = handle.snapshot();
    assert_eq!((s.state, s.cause), (State::Open, Some(Cause::RetryAfter)));
    assert_eq!(s.retry_after(), Some(secs(3)));
    assert_eq!(drain(&mut changes)[0].consecutive_failures, 1);
    advance(secs(3) - NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
}

// Polly CircuitStateControllerTests OnActionPreExecute_CircuitOpenedByValue (the
// BrokenCircuitException carries the retry-after): a rejection tells how long is left of
// the break, counted down on the paused clock.
#[tokio::test(start_paused = true)]
async fn a_rejection_tells_the_break_left_counted_down() {
    let (mut svc, _, _) = rig_rejecting(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10))),
    );
    fail_n(&mut svc, 1).await;
    advance(secs(4)).await;
    let error = call(&mut svc, Req::Ok).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("typed");
    assert_eq!(rejected.reason(), Reason::Open);
    assert_eq!(rejected.retry_after_from(now()), Some(secs(6)));
}

// Polly CircuitStateControllerTests OnActionFailure_EnsureLock / Isolate then failure:
// a permanent failure in half-open re-opens until a reset and never probes again.
#[tokio::test(start_paused = true)]
async fn a_permanent_failure_of_a_probe_holds_the_breaker_open_until_a_reset() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(1))));
    fail_n(&mut svc, 1).await;
    advance(secs(1)).await;
    assert_eq!(
        got(&mut svc, Req::Permanent).await,
        Err("quota exhausted".into())
    );
    let s = handle.snapshot();
    assert_eq!(
        (s.state, s.cause),
        (State::Open, Some(Cause::PermanentFailure))
    );
    assert_eq!(s.next_probe, NextProbe::Manual);
    advance(secs(365 * 24 * 3600)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    assert!(!handle.allow_probe());
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    handle.reset();
    succeed_n(&mut svc, 1).await;
}

// Polly CircuitBreakerManualControl IsolateAsync while a call runs, then CloseAsync:
// the call that was running is not counted, and after the close a fresh run starts.
#[tokio::test(start_paused = true)]
async fn isolating_and_closing_around_a_call_leaves_a_fresh_count() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(2));
    fail_n(&mut svc, 1).await;
    let (in_flight, tx) = start_waiting(&mut svc).await;
    handle.force_open();
    handle.reset();
    tx.send(false).unwrap();
    assert!(in_flight.await.is_err());
    assert_eq!(handle.snapshot().consecutive_failures, 0);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// Polly Should_not_call_onreset_on_successive_successful_calls / Should_call_onreset_...:
// a reset of a closed breaker publishes nothing, and forcing open twice publishes once.
#[tokio::test(start_paused = true)]
async fn a_reset_of_a_closed_breaker_clears_its_run_without_a_transition() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(3));
    let mut changes = handle.subscribe();
    fail_n(&mut svc, 2).await;
    handle.reset();
    assert!(drain(&mut changes).is_empty());
    assert_eq!(handle.snapshot().consecutive_failures, 0);
    fail_n(&mut svc, 2).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "two failures since the reset"
    );
}

// Polly Should_be_able_to_handle_a_duration_of_timespan_maxvalue (break duration
// TimeSpan.MaxValue), for a wait asked for by the service with `max_retry_after` at
// its longest: neither overflows nor panics.
#[tokio::test(start_paused = true)]
async fn the_longest_retry_after_is_capped_and_never_overflows() {
    let (mut svc, handle, _) = rig(Builder::new().max_retry_after(Duration::MAX));
    let _ = got(&mut svc, Req::RetryAfter(Duration::from_nanos(u64::MAX))).await;
    let s = handle.snapshot();
    assert_eq!(s.state, State::Open);
    // Ours caps any wait at a century ("a wait that long means not by time"), where
    // Polly keeps TimeSpan.MaxValue: the same in effect, and no overflow either way.
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    assert_eq!(s.retry_after(), Some(CENTURY));
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
}

// =================================================================================
// Hystrix HystrixCircuitBreakerTest
// =================================================================================

// Hystrix testCircuitClosedAfterSuccessAndClearsStatisticsWindow: after a successful
// test request the window starts again, so earlier failures do not trip it at once.
#[tokio::test(start_paused = true)]
async fn after_recovery_the_old_failures_are_forgotten() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Time(secs(10)), 4)
        .cooldown(Cooldown::Time(secs(5))));
    fail_n(&mut svc, 4).await;
    assert_eq!(handle.state(), State::Open);
    advance(secs(5)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    fail_n(&mut svc, 3).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "3 calls: below the minimum of 4"
    );
    let s = handle.snapshot();
    assert_eq!((s.window.failures, s.window.calls), (3, 3));
}

// Hystrix testRequestVolumeThreshold... with a time window: outcomes slide out of the
// window, so an old burst does not meet the volume.
#[tokio::test(start_paused = true)]
async fn an_old_burst_slides_out_and_does_not_meet_the_volume() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Time(secs(10)), 4)
        .cooldown(Cooldown::Time(secs(5))));
    fail_n(&mut svc, 3).await;
    advance(secs(11)).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().window.calls, 1);
}

// Hystrix testCircuitForceOpen / testShortCircuit... with a kill switch: a killed call is
// counted as killed, never as a failure, and never enters the rate window.
#[tokio::test(start_paused = true)]
async fn killed_calls_never_enter_the_rate_window() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(4), 1)
        .cooldown(Cooldown::Calls(1)));
    succeed_n(&mut svc, 1).await;
    handle.kill_switch().kill();
    for _ in 0..10 {
        assert_eq!(got(&mut svc, Req::Fail).await, skipped(Reason::Killed));
    }
    handle.kill_switch().revive();
    let s = handle.snapshot();
    assert_eq!((s.window.failures, s.window.calls), (0, 1));
    assert_eq!(s.counts.skipped_killed, 10);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

// =================================================================================
// Extreme settings (gobreaker's zero and negative settings, Polly's MaxValue)
// =================================================================================

// gobreaker with ReadyToTrip never true (a threshold no run reaches): u32::MAX never
// opens however many fail, and the reading stays below 100.
#[tokio::test(start_paused = true)]
async fn the_largest_threshold_never_trips_on_a_long_run() {
    let (rates, observer) = rate_recorder();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(u32::MAX)
        .on_event(observer));
    fail_n(&mut svc, 1000).await;
    let s = handle.snapshot();
    assert_eq!((s.state, s.consecutive_failures), (State::Closed, 1000));
    let last = taken(&rates).pop().unwrap().unwrap();
    assert!(last > 0.0 && last < 100.0, "{last}");
}

// failsafe-go changing the threshold at runtime, at its extreme: relief of u32::MAX
// lowers any threshold to 1, never 0.
#[tokio::test(start_paused = true)]
async fn the_largest_relief_lowers_the_threshold_to_one() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(u32::MAX));
    handle.set_threshold_relief(u32::MAX);
    succeed_n(&mut svc, 3).await;
    assert_eq!(handle.state(), State::Closed, "successes never trip");
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// gobreaker MaxRequests of the largest value: half-open admits many probes at once and
// does not close after a few successes.
#[tokio::test(start_paused = true)]
async fn the_largest_probe_limit_admits_many_at_once_and_does_not_close_early() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .half_open_probes(u32::MAX));
    fail_n(&mut svc, 1).await;
    let mut running = Vec::new();
    for _ in 0..100 {
        running.push(start_waiting(&mut svc).await);
    }
    assert_eq!(handle.snapshot().probes_in_flight, 100);
    for (probe, tx) in running {
        tx.send(true).unwrap();
        assert_eq!(probe.await.unwrap().source(), Source::Probe);
    }
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(calls.load(Ordering::SeqCst), 101);
}

// gobreaker newNegativeDurationCB (a zero or negative timeout falls back to the
// default) against ours: a zero cooldown is refused when built (SPEC: bad configuration
// gets a clear error at build time); a one-call and a one-nanosecond cooldown work.
#[tokio::test(start_paused = true)]
async fn the_shortest_cooldowns_work_and_zero_is_refused() {
    use tower_circuit_breaker::error::ConfigError;
    for zero in [Cooldown::Calls(0), Cooldown::Time(Duration::ZERO)] {
        assert_eq!(
            Builder::new().cooldown(zero).build().unwrap_err(),
            ConfigError::ZeroCooldown
        );
    }
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(NS)));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// Polly break duration of zero for a result-derived wait (retry-after 0): the next call
// is the probe, and a second zero wait from the probe does the same.
#[tokio::test(start_paused = true)]
async fn a_zero_retry_after_from_a_probe_makes_the_next_call_the_probe_again() {
    let (mut svc, handle, _) = rig(Builder::new().cooldown(Cooldown::Time(secs(30))));
    let _ = got(&mut svc, Req::RetryAfter(Duration::ZERO)).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.peek(), Advice::Probe);
    let _ = got(&mut svc, Req::RetryAfter(Duration::ZERO)).await;
    let s = handle.snapshot();
    assert_eq!((s.state, s.cause), (State::Open, Some(Cause::ProbeFailed)));
    assert_eq!(handle.peek(), Advice::Probe);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
}

// =================================================================================
// Second pass: holds replacing holds, the dwell limit's edge, probes in the counts,
// the time window's edges, observe-only transitions
// =================================================================================

// resilience4j transitionToForcedOpenState after transitionToOpenStateFor (and the
// reverse): our `open_for` documents "It replaces whatever held the breaker open
// before"; a hold replaced by a hold is no new transition.
#[tokio::test(start_paused = true)]
async fn a_hold_replaces_the_hold_before_it_without_a_new_transition() {
    let (mut svc, handle, _) = rig(Builder::new());
    let mut changes = handle.subscribe();
    handle.open_for(secs(10));
    handle.force_open();
    advance(secs(3600)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::ForcedOpen));
    assert_eq!(handle.snapshot().next_probe, NextProbe::Manual);
    handle.open_for(secs(10));
    assert_eq!(handle.snapshot().retry_after(), Some(secs(10)));
    advance(secs(10)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(
        summary(&drain(&mut changes)),
        vec![
            (State::Closed, State::ForcedOpen, Cause::ForcedOpen),
            (State::ForcedOpen, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
}

// resilience4j transitionToOpenStateFor on an OPEN breaker with a longer wait: the
// person's hold replaces the breaker's own cooldown, shorter or not.
#[tokio::test(start_paused = true)]
async fn a_short_hold_replaces_a_longer_cooldown_of_the_breakers_own() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(3600))));
    fail_n(&mut svc, 1).await;
    handle.open_for(secs(5));
    assert_eq!(handle.state(), State::ForcedOpen);
    assert_eq!(handle.snapshot().retry_after(), Some(secs(5)));
    advance(secs(5)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
}

// resilience4j circuitBreakerTransitionsToOpenAfterWaitDurationInHalfOpenState, at the
// edge: a probe that answers a nanosecond before the dwell limit decides; one that
// answers at the limit is late, and the breaker re-opened at the limit.
#[tokio::test(start_paused = true)]
async fn a_probe_answering_just_before_the_dwell_limit_decides_and_at_it_is_late() {
    let dwell = secs(10);
    for (took, closes) in [(dwell - NS, true), (dwell, false)] {
        let (mut svc, handle, _) = rig(Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .max_half_open_dwell(Some(dwell)));
        fail_n(&mut svc, 1).await;
        // Told when to end by hand: tokio's timers round a sleep up to the millisecond.
        let (probe, tx) = start_waiting(&mut svc).await;
        advance(took).await;
        tx.send(true).unwrap();
        assert_eq!(probe.await.unwrap().source(), Source::Probe);
        let s = handle.snapshot();
        if closes {
            assert_eq!((s.state, s.counts.late), (State::Closed, 0), "{took:?}");
        } else {
            assert_eq!(
                (s.state, s.cause),
                (State::Open, Some(Cause::DwellExceeded))
            );
            assert_eq!(s.counts.late, 1);
            assert_eq!(s.probes_in_flight, 0);
        }
    }
}

// gobreaker TestGeneration for a probe (resilience4j: a permission acquired in an old
// state): a probe that ends after a reset is counted as a probe made, late, and frees no
// slot twice; the totals add up.
#[tokio::test(start_paused = true)]
async fn a_probe_ending_after_a_reset_is_a_late_probe_in_the_totals() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1)));
    fail_n(&mut svc, 1).await;
    let (probe, tx) = start_waiting(&mut svc).await;
    handle.reset();
    assert_eq!(handle.snapshot().probes_in_flight, 0);
    tx.send(false).unwrap();
    assert!(probe.await.is_err());
    let s = handle.snapshot();
    assert_eq!(s.state, State::Closed);
    assert_eq!(
        (s.counts.probes, s.counts.late, s.consecutive_failures),
        (1, 1, 0)
    );
    assert_eq!(s.probes_in_flight, 0);
    assert!(s.counts.probes <= s.counts.made);
    assert_counts_add_up(&s.counts);
}

// resilience4j CircuitBreakerFutureTest (a cancelled probe releases its permission):
// a dropped probe is counted as made and cancelled, the next call probes.
#[tokio::test(start_paused = true)]
async fn a_dropped_probe_is_cancelled_and_the_next_call_probes() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1)));
    fail_n(&mut svc, 1).await;
    let (probe, _tx) = start_waiting(&mut svc).await;
    drop(probe);
    let s = handle.snapshot();
    assert_eq!((s.state, s.probes_in_flight), (State::HalfOpen, 0));
    assert_eq!((s.counts.cancelled, s.counts.probes), (1, 1));
    assert_counts_add_up(&s.counts);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// gobreaker TestTwoStepCircuitBreaker (Allow while killed, ours): `advise` turned away
// by the kill switch counts a killed skip, and the totals still add up.
#[tokio::test(start_paused = true)]
async fn advise_under_the_kill_switch_counts_a_killed_skip() {
    let (_svc, handle, _) = rig(Builder::new());
    handle.kill_switch().kill();
    assert!(matches!(handle.peek(), Advice::Skip(s) if s.reason() == Reason::Killed));
    assert_eq!(handle.snapshot().counts.arrived, 0);
    assert!(matches!(handle.advise(), Advice::Skip(s) if s.reason() == Reason::Killed));
    let c = handle.snapshot().counts;
    assert_eq!((c.skipped_killed, c.arrived), (1, 1));
    assert_counts_add_up(&c);
}

// failsafe-go "should support time based failure rate thresholding" with the shortest
// window: a window of one nanosecond forgets an outcome once it is a nanosecond old (as
// `outcomes_exactly_one_window_old_are_forgotten` in tests/peers.rs has it for 10 s).
#[tokio::test(start_paused = true)]
async fn a_one_nanosecond_window_forgets_an_outcome_a_nanosecond_old() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Time(NS), 2)
        .cooldown(Cooldown::Calls(1)));
    fail_n(&mut svc, 1).await;
    advance(NS).await;
    assert_eq!(
        handle.snapshot().window.calls,
        0,
        "the failure is a window old"
    );
    fail_n(&mut svc, 1).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "one call in the window: below 2"
    );
}

// The same for a window that is not a whole number of tenths (15 ns): an outcome 12 ns
// old is inside it and still counts.
#[tokio::test(start_paused = true)]
async fn a_window_of_fifteen_nanoseconds_keeps_an_outcome_twelve_nanoseconds_old() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Time(Duration::from_nanos(15)), 2)
        .cooldown(Cooldown::Calls(1)));
    fail_n(&mut svc, 1).await;
    advance(Duration::from_nanos(12)).await;
    assert_eq!(handle.snapshot().window.calls, 1);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// resilience4j shouldRecordMetricsInMetricsOnlyState with the state transition events:
// an observe-only breaker's transitions say they are what an enabled breaker would have
// done.
#[tokio::test(start_paused = true)]
async fn observe_only_transitions_carry_their_mode() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(2))
        .mode(Mode::ObserveOnly));
    let mut changes = handle.subscribe();
    fail_n(&mut svc, 1).await;
    let _ = got(&mut svc, Req::Ok).await;
    let _ = got(&mut svc, Req::Ok).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let all = drain(&mut changes);
    assert_eq!(
        summary(&all),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
    assert!(all.iter().all(|t| t.mode == Mode::ObserveOnly));
    assert_eq!(handle.snapshot().counts.would_have_skipped, 1);
}

// Polly HalfOpen with an ignored (unhandled) outcome after successes: with three probe
// slots, two successes, an ignored probe, then a third success closes.
#[tokio::test(start_paused = true)]
async fn an_ignored_probe_between_successes_neither_closes_nor_reopens() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .half_open_probes(3));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// Hystrix testTripCircuitOnTimeouts with the sleep window from when the slow failure
// ended: a cooldown in time runs from the failure that opened the breaker, as the
// transition's time says.
#[tokio::test(start_paused = true)]
async fn the_cooldown_runs_from_when_the_tripping_failure_ended() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(10))));
    let mut changes = handle.subscribe();
    let started = now();
    let (slow, tx) = start_waiting(&mut svc).await;
    advance(secs(5)).await;
    tx.send(false).unwrap();
    assert!(slow.await.is_err());
    let opened = drain(&mut changes);
    assert_eq!(opened[0].at, started + secs(5));
    assert_eq!(
        opened[0].next_probe,
        NextProbe::After {
            calls: 1,
            at: Some(started + secs(15))
        }
    );
    advance(secs(10) - NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
}

// resilience4j getNumberOfFailedCalls / getNumberOfBufferedCalls after a transition to
// HALF_OPEN and back: the half-open's probes never enter the closed state's window.
#[tokio::test(start_paused = true)]
async fn probes_never_enter_the_closed_states_window() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(10), 2)
        .cooldown(Cooldown::Calls(1))
        .half_open_probes(2));
    fail_n(&mut svc, 2).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.snapshot().window, Default::default());
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().window, Default::default());
}

// Polly / resilience4j: a reset of a breaker tripped by its rate clears the window, so
// the next failure alone does not trip it again.
#[tokio::test(start_paused = true)]
async fn a_reset_of_a_breaker_tripped_by_its_rate_starts_an_empty_window() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(4), 3)
        .cooldown(Cooldown::Time(secs(60))));
    fail_n(&mut svc, 3).await;
    assert_eq!(handle.state(), State::Open);
    handle.reset();
    fail_n(&mut svc, 1).await;
    succeed_n(&mut svc, 1).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "two calls: below the minimum of 3"
    );
    succeed_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Closed, "1 of 3");
    assert_eq!(handle.snapshot().window.calls, 3);
}

// resilience4j CircuitBreakerResultHandlingTest with the wait only counted (ours:
// `open_on_retry_after(false)`, documented: "if it trips the breaker, that opening still
// waits as long as the service asked"): the retry-after counts as one failure, and when
// it is the one that trips, the opening waits for it rather than the cooldown.
#[tokio::test(start_paused = true)]
async fn a_counted_retry_after_that_trips_waits_as_long_as_the_service_asked() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(2)
        .cooldown(Cooldown::Time(secs(10)))
        .open_on_retry_after(false));
    let _ = got(&mut svc, Req::RetryAfter(secs(60))).await;
    assert_eq!(handle.state(), State::Closed, "counted once, not opened");
    assert_eq!(handle.snapshot().consecutive_failures, 1);
    succeed_n(&mut svc, 1).await;
    fail_n(&mut svc, 1).await;
    let _ = got(&mut svc, Req::RetryAfter(secs(60))).await;
    let s = handle.snapshot();
    assert_eq!((s.state, s.cause), (State::Open, Some(Cause::Tripped)));
    assert_eq!(s.retry_after(), Some(secs(60)));
}

// resilience4j minimumNumberOfCalls (which must be at least 1 there) against ours, which
// accepts 0 (tests/peers.rs builds it): a minimum of 0 reads as 1, so a first failure is
// a share of 100 %.
#[tokio::test(start_paused = true)]
async fn a_minimum_of_zero_calls_reads_the_rate_from_the_first_outcome() {
    let (rates, observer) = rate_recorder();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(4), 0)
        .cooldown(Cooldown::Calls(1))
        .on_event(observer));
    succeed_n(&mut svc, 1).await;
    assert_eq!(taken(&rates), vec![Some(0.0)]);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open, "1 of 2 at 50 %");
}
