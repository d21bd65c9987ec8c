//! Behaviours ported from the test suites of other circuit breakers: sony/gobreaker
//! (`v2/gobreaker_test.go`), resilience4j (`CircuitBreakerStateMachineTest` and its
//! `internal` tests), Polly (`CircuitBreakerSpecs`, `AdvancedCircuitBreakerSpecs`, and
//! `test/Polly.Core.Tests/CircuitBreaker/**`: `CircuitStateControllerTests`,
//! `CircuitBreakerManualControl`), failsafe-go (`test/circuitbreaker_test.go`,
//! `circuitbreaker/*_test.go`) and Hystrix (`HystrixCircuitBreakerTest`): the states and
//! their boundaries, the counts and the snapshot after each transition, the events of
//! each transition and their order, acts of a person during calls, half-open with several
//! probes, the failure-rate window's edges, the slow-call rule, waits the service asks
//! for, and extreme settings.
//!
//! Each test names the peer test it comes from. Where this crate's documented semantics
//! differ on purpose (any failed probe re-opens, the probe goes at the exact end
//! of a cooldown, a forced open is its own state, observe-only moves through the states;
//! and half-open admits its probes N at a time, a failure rate is checked after every
//! outcome, successes too, and time alone never turns an open breaker half-open), the test
//! is adapted to ours and says so.
//!
//! The peers' suites are followed one file each, in their order (`gobreaker`, `resilience4j`,
//! `polly`, `failsafe_go`, `hystrix`), with `extreme_settings`; further ports and this
//! crate's own additions are grouped by behaviour: counting `windows`, `cooldowns` and
//! waits, half-open's `probes`, a person's `acts`, and what callers and observers are told
//! (`reports`). This file holds the wrapped service and the helpers they share.
//!
//! Every test runs on tokio's paused clock (or, for concurrent callers, on a multi-thread
//! runtime with no time involved), so nothing waits on the wall clock.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::time::advance;
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::config::{RateWindow, TripPolicy};
use tower_circuit_breaker::error::{BoxError, Rejected};
use tower_circuit_breaker::snapshot::Counts;
use tower_circuit_breaker::{
    Advice, Answer, Backoff, Builder, Cause, CircuitBreakerHandle, Cooldown, Event, Failure,
    KillSwitch, Mode, NextProbe, Outcome, Reason, Source, State, Transition,
};

mod acts;
mod cooldowns;
mod extreme_settings;
mod failsafe_go;
mod gobreaker;
mod hystrix;
mod polly;
mod probes;
mod reports;
mod resilience4j;
mod windows;

const NS: Duration = Duration::from_nanos(1);
/// The error text of a failed call.
const FAILED: &str = "connection refused";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The breaker's clock, as the tests see it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

// ---------------------------------------------------------------------------------
// The wrapped service: each request says how the call ends.
// ---------------------------------------------------------------------------------

#[derive(Debug)]
enum Req {
    /// Succeeds at once.
    Ok,
    /// Fails at once (an I/O error: a failure).
    Fail,
    /// Fails with an error the classifier ignores (a bad request: the caller's mistake,
    /// resilience4j's ignored exception, gobreaker's excluded error).
    Ignore,
    /// Fails at once, saying how long to wait before calling again.
    RetryAfter(Duration),
    /// Fails at once with a failure that will not pass by itself (an exhausted quota).
    Permanent,
    /// Sleeps this long on the tokio clock, then succeeds.
    Slow(Duration),
    /// Sleeps this long, then fails.
    SlowFail(Duration),
    /// Sleeps this long, then fails with an error the classifier ignores.
    SlowIgnore(Duration),
    /// Ends when told: `true` succeeds, `false` fails.
    Wait(oneshot::Receiver<bool>),
    /// Panics inside the call's future.
    Panic,
}

#[derive(Clone, Debug, Default)]
struct Backend {
    calls: Arc<AtomicUsize>,
}

/// The error of a failed call.
fn failed() -> io::Error {
    io::Error::other(FAILED)
}

/// The error of a call the classifier ignores.
fn bad_request() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "bad request")
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
            match req {
                Req::Ok => Ok("ok"),
                Req::Fail => Err(failed()),
                Req::Ignore => Err(bad_request()),
                Req::RetryAfter(wait) => Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("retry after {}", wait.as_nanos()),
                )),
                Req::Permanent => Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "quota exhausted",
                )),
                Req::Slow(took) => {
                    tokio::time::sleep(took).await;
                    Ok("ok")
                }
                Req::SlowFail(took) => {
                    tokio::time::sleep(took).await;
                    Err(failed())
                }
                Req::SlowIgnore(took) => {
                    tokio::time::sleep(took).await;
                    Err(bad_request())
                }
                Req::Wait(rx) => match rx.await {
                    Ok(true) => Ok("ok"),
                    _ => Err(failed()),
                },
                Req::Panic => panic!("oops"),
            }
        })
    }
}

/// `InvalidInput` is the caller's mistake: ignored; `WouldBlock` says how long to wait
/// (in nanoseconds); `PermissionDenied` is permanent; any other error is a failure, whose
/// message is the error's text.
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
        Err(_) => Outcome::failure(),
    }
}

type Reply = Result<Answer<&'static str>, BoxError>;

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

async fn call<S: Svc>(svc: &mut S, req: Req) -> Reply {
    svc.ready().await?.call(req).await
}

/// Where the answer came from, or the error's text.
async fn got<S: Svc>(svc: &mut S, req: Req) -> Result<Source, String> {
    match call(svc, req).await {
        Ok(answer) => Ok(answer.source()),
        Err(e) => Err(e.to_string()),
    }
}

/// Starts a call (its decision is made and the wrapped service is called) without
/// awaiting its end.
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

fn summary(transitions: &[Transition]) -> Vec<(State, State, Cause)> {
    transitions
        .iter()
        .map(|t| (t.from, t.to, t.cause))
        .collect()
}

/// The transitions published since the last look.
fn drain(rx: &mut tokio::sync::broadcast::Receiver<Transition>) -> Vec<Transition> {
    let mut all = Vec::new();
    while let Ok(t) = rx.try_recv() {
        all.push(t);
    }
    all
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
            Event::Recorded {
                outcome,
                probe,
                shadow,
                ..
            } => {
                let what = match outcome {
                    Outcome::Success => "success",
                    Outcome::Failure(_) => "failure",
                    Outcome::Ignored => "ignored",
                };
                let kind = match (probe, shadow) {
                    (true, _) => " probe",
                    (_, true) => " shadow",
                    _ => "",
                };
                format!("recorded {what}{kind}")
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

/// The transitions of a probe that goes once the wait in state `from` is over, and
/// succeeds: half-open, then closed.
fn probe_closed_from(from: State) -> Vec<(State, State, Cause)> {
    vec![
        (from, State::HalfOpen, Cause::CooldownElapsed),
        (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
    ]
}

/// What a recorder heard since the last look.
fn taken<T>(heard: &Arc<Mutex<Vec<T>>>) -> Vec<T> {
    std::mem::take(&mut *heard.lock().unwrap())
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

/// Brings a breaker to half-open with `probes` probe slots: opened, the cooldown passed
/// (in calls: 1), nothing in flight.
fn half_open_rig(probes: u32) -> (impl Svc, CircuitBreakerHandle, Arc<AtomicUsize>) {
    rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .half_open_probes(probes))
}

/// `n` successful probes, the breaker still half-open after each.
async fn probes_succeed_half_open<S: Svc>(svc: &mut S, handle: &CircuitBreakerHandle, n: usize) {
    for _ in 0..n {
        assert_eq!(got(svc, Req::Ok).await, Ok(Source::Probe));
        assert_eq!(handle.state(), State::HalfOpen);
    }
}

/// On a breaker with a threshold of 1, a cooldown of one call and two probe slots: opens
/// it, then fails one of two probes. The breaker re-opens; the other probe, its sibling,
/// still runs, and is returned.
async fn a_failed_probe_and_its_running_sibling<S: Svc>(
    svc: &mut S,
) -> (S::Future, oneshot::Sender<bool>) {
    fail_n(svc, 1).await;
    let (failing, tx_failing) = start_waiting(svc).await;
    let sibling = start_waiting(svc).await;
    tx_failing.send(false).unwrap();
    assert!(failing.await.is_err());
    sibling
}
