//! Paused-time tests of when an open breaker lets its probe through: time cooldowns,
//! exponential backoff, jitter, the half-open dwell limit, response-given waits
//! (Retry-After), permanent failures and slow calls.
//!
//! Every test runs on tokio's paused clock and moves it with `tokio::time::advance`, so
//! nothing waits on the wall clock and every boundary is checked to the nanosecond.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, Notify};
use tokio::time::advance;
use tower::{Layer, Service, ServiceExt};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::fallback::Fallback;
use tower_circuit_breaker::{
    Answer, Backoff, Builder, Cause, CircuitBreaker, CircuitBreakerHandle, Cooldown, Failure,
    NextProbe, Outcome, Reason, Source, State, Transition,
};

const NS: Duration = Duration::from_nanos(1);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The breaker's clock, as the tests see it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// What the backend should do with a request.
#[derive(Clone, Debug)]
enum Req {
    /// Answer with this status at once (see [`classify`] for what each one means).
    Status(u16),
    /// Fail with an I/O error.
    Fail,
    /// Sleep this long on the tokio clock, then answer 200.
    Slow(Duration),
    /// Hang until notified, then answer 200.
    Wait(Arc<Notify>),
}

/// The wrapped service: does what the request says.
#[derive(Clone, Debug)]
struct Backend;

impl Service<Req> for Backend {
    type Response = u16;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<u16, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        Box::pin(async move {
            match req {
                Req::Status(status) => Ok(status),
                Req::Fail => Err(io::Error::other("connection refused")),
                Req::Slow(took) => {
                    tokio::time::sleep(took).await;
                    Ok(200)
                }
                Req::Wait(release) => {
                    release.notified().await;
                    Ok(200)
                }
            }
        })
    }
}

/// The fallback: always answers 0.
#[derive(Clone, Debug)]
struct Canned;

impl Service<Req> for Canned {
    type Response = u16;
    type Error = Infallible;
    type Future = std::future::Ready<Result<u16, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Req) -> Self::Future {
        std::future::ready(Ok(0))
    }
}

type Classifier = fn(&Result<u16, io::Error>) -> Outcome;

/// 429: failure, come back in 2 s. 503: failure, come back in 10 minutes. 402: permanent
/// failure. 500: failure. Any other status: success. An error: failure.
fn classify(result: &Result<u16, io::Error>) -> Outcome {
    match result {
        Ok(429) => Outcome::Failure(Failure::new("429").retry_after(secs(2))),
        Ok(503) => Outcome::Failure(Failure::new("503").retry_after(secs(600))),
        Ok(402) => Outcome::Failure(Failure::new("quota exhausted").permanent()),
        Ok(500) => Outcome::failure_with("500"),
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::failure(),
    }
}

type Svc = CircuitBreaker<Backend, Fallback<Canned>, Classifier>;

fn breaker(builder: Builder) -> (Svc, CircuitBreakerHandle) {
    let layer = builder
        .build()
        .expect("a valid configuration")
        .with_fallback(Canned)
        .with_classifier(classify as Classifier);
    let handle = layer.handle();
    (layer.layer(Backend), handle)
}

async fn send(svc: &mut Svc, req: Req) -> Result<Answer<u16>, BoxError> {
    svc.ready().await?.call(req).await
}

/// A call the breaker must make as a normal call; the backend answers `status`.
#[track_caller]
fn assert_service(answer: &Answer<u16>, status: u16) {
    assert_eq!(answer.source(), Source::Service, "{answer:?}");
    assert_eq!(*answer.get_ref(), status);
}

async fn expect_service(svc: &mut Svc, status: u16) -> Answer<u16> {
    let answer = send(svc, Req::Status(status))
        .await
        .expect("the call reaches the service");
    assert_service(&answer, status);
    answer
}

/// A call the breaker must skip to the fallback, for `reason`.
async fn expect_skip(svc: &mut Svc, reason: Reason) -> Answer<u16> {
    let answer = send(svc, Req::Status(200))
        .await
        .expect("a skipped call gets the fallback's answer");
    assert_eq!(answer.source(), Source::Fallback(reason), "{answer:?}");
    assert_eq!(*answer.get_ref(), 0, "the fallback answered");
    answer
}

/// A call the breaker must send as the half-open probe; the backend answers `status`.
async fn expect_probe(svc: &mut Svc, status: u16) -> Answer<u16> {
    let answer = send(svc, Req::Status(status))
        .await
        .expect("the probe reaches the service");
    assert_eq!(answer.source(), Source::Probe, "{answer:?}");
    assert_eq!(answer.state(), State::HalfOpen);
    assert_eq!(*answer.get_ref(), status);
    answer
}

/// The transitions received so far.
fn transitions(events: &mut broadcast::Receiver<Transition>) -> Vec<Transition> {
    std::iter::from_fn(|| events.try_recv().ok()).collect()
}

fn steps(transitions: &[Transition]) -> Vec<(State, State, Cause)> {
    transitions
        .iter()
        .map(|t| (t.from, t.to, t.cause))
        .collect()
}

/// Waits out the cooldown the snapshot reports, checking that a call 1 ns before its end
/// is skipped, then sends the probe with `status`.
async fn wait_out_cooldown_then_probe(
    svc: &mut Svc,
    handle: &CircuitBreakerHandle,
    status: u16,
) -> Duration {
    let wait = handle
        .snapshot()
        .retry_after()
        .expect("an open breaker with a time cooldown knows its wait");
    advance(wait - NS).await;
    let skipped = expect_skip(svc, Reason::Open).await;
    assert_eq!(skipped.next_probe().retry_after(now()), Some(NS));
    advance(NS).await;
    expect_probe(svc, status).await;
    wait
}

#[tokio::test(start_paused = true)]
async fn time_cooldown_skips_calls_until_it_elapses_then_the_first_call_is_the_probe() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(2)
            .cooldown(Cooldown::Time(secs(10))),
    );
    let mut events = handle.subscribe();

    expect_service(&mut svc, 500).await;
    assert_eq!(handle.state(), State::Closed);
    expect_service(&mut svc, 500).await;
    let opened_at = now();
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().retry_after(), Some(secs(10)));

    advance(secs(4)).await;
    let answer = expect_skip(&mut svc, Reason::Open).await;
    assert_eq!(answer.state(), State::Open);
    assert_eq!(
        answer.next_probe(),
        NextProbe::After {
            calls: 1,
            at: Some(opened_at + secs(10)),
        }
    );
    assert_eq!(answer.next_probe().retry_after(now()), Some(secs(6)));
    assert_eq!(handle.snapshot().retry_after(), Some(secs(6)));

    advance(secs(6) - NS).await;
    let answer = expect_skip(&mut svc, Reason::Open).await;
    assert_eq!(answer.next_probe().retry_after(now()), Some(NS));
    assert_eq!(handle.state(), State::Open);

    advance(NS).await;
    let probe = expect_probe(&mut svc, 200).await;
    assert_eq!(probe.next_probe(), NextProbe::NotNeeded);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.next_probe, NextProbe::NotNeeded);
    assert_eq!(snapshot.retry_after(), None);
    assert_eq!(snapshot.counts.skipped_open, 2);
    assert_eq!(snapshot.counts.probes, 1);

    let events = transitions(&mut events);
    assert_eq!(
        steps(&events),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
    assert_eq!(events[0].at, opened_at);
    assert_eq!(events[1].at, opened_at + secs(10));
    assert_eq!(events[2].at, opened_at + secs(10));

    // Closed again: calls go through as normal calls.
    expect_service(&mut svc, 200).await;
}

#[tokio::test(start_paused = true)]
async fn calls_during_a_time_cooldown_do_not_shorten_it() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10))),
    );
    expect_service(&mut svc, 500).await;
    for _ in 0..50 {
        expect_skip(&mut svc, Reason::Open).await;
    }
    assert_eq!(handle.snapshot().retry_after(), Some(secs(10)));
    advance(secs(10)).await;
    expect_probe(&mut svc, 200).await;
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn failed_probe_reopens_the_breaker_and_restarts_the_cooldown() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10))),
    );
    let mut events = handle.subscribe();
    expect_service(&mut svc, 500).await;

    advance(secs(25)).await; // well past the cooldown: still open until a call comes
    assert_eq!(handle.state(), State::Open);
    expect_probe(&mut svc, 500).await;
    let reopened_at = now();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(
        snapshot.next_probe,
        NextProbe::After {
            calls: 1,
            at: Some(reopened_at + secs(10)),
        }
    );

    // The new cooldown counts from the failed probe, not from the first opening.
    advance(secs(10) - NS).await;
    expect_skip(&mut svc, Reason::Open).await;
    advance(NS).await;
    expect_probe(&mut svc, 200).await;
    assert_eq!(handle.state(), State::Closed);

    assert_eq!(
        steps(&transitions(&mut events)),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Open, Cause::ProbeFailed),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn only_one_probe_goes_while_it_is_in_flight() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10))),
    );
    expect_service(&mut svc, 500).await;
    advance(secs(10)).await;

    let release = Arc::new(Notify::new());
    let probe = svc.ready().await.unwrap().call(Req::Wait(release.clone()));
    let probe = tokio::spawn(probe);
    tokio::task::yield_now().await;

    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::HalfOpen);
    assert_eq!(snapshot.probes_in_flight, 1);
    assert_eq!(snapshot.next_probe, NextProbe::InFlight);
    for _ in 0..3 {
        let answer = expect_skip(&mut svc, Reason::HalfOpenFull).await;
        assert_eq!(answer.state(), State::HalfOpen);
        assert_eq!(answer.next_probe(), NextProbe::InFlight);
    }

    release.notify_one();
    let answer = probe.await.unwrap().unwrap();
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counts.skipped_half_open_full, 3);
}

#[tokio::test(start_paused = true)]
async fn exponential_backoff_doubles_the_time_cooldown_on_each_reopen_up_to_the_cap() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(1)))
            .backoff(Backoff::exponential(2.0, Cooldown::Time(secs(5)))),
    );
    expect_service(&mut svc, 500).await;

    // Opened (1 s), then four failed probes in a row: 2 s, 4 s, then the 5 s cap.
    let mut waits = Vec::new();
    for _ in 0..5 {
        waits.push(wait_out_cooldown_then_probe(&mut svc, &handle, 500).await);
    }
    assert_eq!(waits, [1, 2, 4, 5, 5].map(secs));

    // A successful probe closes the breaker and resets the backoff.
    let last = wait_out_cooldown_then_probe(&mut svc, &handle, 200).await;
    assert_eq!(last, secs(5));
    assert_eq!(handle.state(), State::Closed);

    expect_service(&mut svc, 500).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(1)));
    let mut waits = Vec::new();
    for _ in 0..2 {
        waits.push(wait_out_cooldown_then_probe(&mut svc, &handle, 500).await);
    }
    assert_eq!(waits, [1, 2].map(secs));
}

#[tokio::test(start_paused = true)]
async fn backoff_is_reset_by_a_manual_reset_too() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(1)))
            .backoff(Backoff::exponential(3.0, Cooldown::Time(secs(60)))),
    );
    expect_service(&mut svc, 500).await;
    wait_out_cooldown_then_probe(&mut svc, &handle, 500).await;
    wait_out_cooldown_then_probe(&mut svc, &handle, 500).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(9)));

    handle.reset();
    expect_service(&mut svc, 500).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(1)));
}

/// Skips `calls - 1` calls, checking the countdown each skipped answer reports, then sends
/// the probe with `status`.
async fn skip_calls_then_probe(svc: &mut Svc, handle: &CircuitBreakerHandle, status: u16) -> u64 {
    let NextProbe::After { calls, at: None } = handle.snapshot().next_probe else {
        panic!("a cooldown in calls: {:?}", handle.snapshot().next_probe);
    };
    for skipped in 1..calls {
        let answer = expect_skip(svc, Reason::Open).await;
        assert_eq!(
            answer.next_probe(),
            NextProbe::After {
                calls: calls - skipped,
                at: None,
            }
        );
    }
    expect_probe(svc, status).await;
    calls
}

#[tokio::test(start_paused = true)]
async fn exponential_backoff_in_calls_grows_the_skipped_calls_up_to_the_calls_cap() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(2))
            .backoff(Backoff::exponential(2.0, Cooldown::Calls(6))),
    );
    expect_service(&mut svc, 500).await;

    let mut cooldowns = Vec::new();
    for _ in 0..4 {
        cooldowns.push(skip_calls_then_probe(&mut svc, &handle, 500).await);
    }
    assert_eq!(cooldowns, [2, 4, 6, 6]);
    // Time plays no part in a cooldown in calls.
    advance(secs(3600)).await;
    assert_eq!(skip_calls_then_probe(&mut svc, &handle, 200).await, 6);
    assert_eq!(handle.state(), State::Closed);

    // Closing reset the backoff.
    expect_service(&mut svc, 500).await;
    let mut cooldowns = Vec::new();
    for _ in 0..2 {
        cooldowns.push(skip_calls_then_probe(&mut svc, &handle, 500).await);
    }
    assert_eq!(cooldowns, [2, 4]);
}

#[tokio::test(start_paused = true)]
async fn jitter_keeps_each_cooldown_within_its_fraction_and_varies_them() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10)))
            .jitter(0.2)
            .jitter_seed(7),
    );
    expect_service(&mut svc, 500).await;

    let mut cooldowns = Vec::new();
    for _ in 0..16 {
        // Each measured wait is also enforced: skipped 1 ns before, probed at it.
        let wait = wait_out_cooldown_then_probe(&mut svc, &handle, 500).await;
        assert!(
            (secs(8)..=secs(12)).contains(&wait),
            "cooldown {wait:?} outside 10 s ± 20 %"
        );
        cooldowns.push(wait);
    }
    let mut distinct = cooldowns.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() > 1,
        "jitter gave the same cooldown every time: {cooldowns:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn jitter_with_backoff_stays_within_its_fraction_of_each_step_and_never_above_the_cap() {
    let cap = secs(30);
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10)))
            .backoff(Backoff::exponential(2.0, Cooldown::Time(cap)))
            .jitter(0.2)
            .jitter_seed(7),
    );
    expect_service(&mut svc, 500).await;

    let mut cooldowns = Vec::new();
    for reopens in 0..6 {
        let base = secs(10) * 2u32.pow(reopens);
        let wait = wait_out_cooldown_then_probe(&mut svc, &handle, 500).await;
        assert!(wait <= cap, "cooldown {wait:?} above the cap");
        // Jittered within ±20 % of this step's base, then capped.
        assert!(
            wait == cap || (base.mul_f64(0.8)..=base.mul_f64(1.2)).contains(&wait),
            "cooldown {wait:?} outside {base:?} ± 20 %"
        );
        if base.mul_f64(0.8) > cap {
            assert_eq!(wait, cap);
        }
        cooldowns.push(wait);
    }
    assert_ne!(cooldowns[0], secs(10), "the first cooldown was jittered");
    assert_eq!(&cooldowns[2..], [cap; 4], "{cooldowns:?}");
}

#[tokio::test(start_paused = true)]
async fn the_same_jitter_seed_gives_the_same_cooldowns() {
    async fn cooldowns(seed: u64) -> Vec<Duration> {
        let (mut svc, handle) = breaker(
            Builder::new()
                .failure_threshold(1)
                .cooldown(Cooldown::Time(secs(10)))
                .jitter(0.2)
                .jitter_seed(seed),
        );
        expect_service(&mut svc, 500).await;
        let mut waits = Vec::new();
        for _ in 0..5 {
            waits.push(wait_out_cooldown_then_probe(&mut svc, &handle, 500).await);
        }
        waits
    }
    assert_eq!(cooldowns(7).await, cooldowns(7).await);
}

/// A breaker (cooldown 10 s, dwell limit 5 s) opened by a failure and half-open 10 s later
/// with its probe hung: its inner future never completes until `release` is notified.
struct HungProbe {
    svc: Svc,
    handle: CircuitBreakerHandle,
    events: broadcast::Receiver<Transition>,
    release: Arc<Notify>,
    probe: tokio::task::JoinHandle<Result<Answer<u16>, BoxError>>,
    probed_at: Instant,
}

async fn hung_probe() -> HungProbe {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10)))
            .max_half_open_dwell(Some(secs(5))),
    );
    let events = handle.subscribe();
    expect_service(&mut svc, 500).await;
    advance(secs(10)).await;
    let release = Arc::new(Notify::new());
    let probe = svc.ready().await.unwrap().call(Req::Wait(release.clone()));
    let probe = tokio::spawn(probe);
    tokio::task::yield_now().await;
    HungProbe {
        svc,
        handle,
        events,
        release,
        probe,
        probed_at: now(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_probe_reopens_the_breaker_after_the_max_half_open_dwell() {
    let HungProbe {
        mut svc,
        handle,
        mut events,
        release,
        probe,
        probed_at,
    } = hung_probe().await;
    assert_eq!(handle.state(), State::HalfOpen);

    advance(secs(5) - NS).await;
    assert_eq!(handle.snapshot().state, State::HalfOpen);
    expect_skip(&mut svc, Reason::HalfOpenFull).await;

    advance(NS).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(snapshot.retry_after(), Some(secs(10)));
    let events = transitions(&mut events);
    assert_eq!(
        steps(&events),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Open, Cause::DwellExceeded),
        ]
    );
    assert_eq!(events[2].at, probed_at + secs(5));

    // The hung probe finally succeeds: too late, it is counted as late and changes nothing.
    release.notify_one();
    let answer = probe.await.unwrap().unwrap();
    assert_eq!(answer.source(), Source::Probe);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.counts.late, 1);
    assert_eq!(snapshot.counts.successes, 0);
    assert_eq!(snapshot.counts.cancelled, 0);

    // After the next cooldown a new probe goes through.
    advance(secs(10) - NS).await;
    expect_skip(&mut svc, Reason::Open).await;
    advance(NS).await;
    expect_probe(&mut svc, 200).await;
    assert_eq!(handle.state(), State::Closed);
}

/// The first call after a hung probe's half-open outlived its dwell limit and the cooldown
/// of the re-opening that follows: it re-opens the breaker and starts the next half-open as
/// its probe, and both changes are told, in order, each from the state the one before left.
#[tokio::test(start_paused = true)]
async fn a_call_long_after_the_dwell_limit_tells_the_reopening_and_the_next_half_open() {
    let HungProbe {
        mut svc,
        mut events,
        release,
        probe,
        probed_at,
        ..
    } = hung_probe().await;

    // Nobody looks at the breaker until the dwell limit and the next cooldown are past.
    advance(secs(60)).await;
    expect_probe(&mut svc, 200).await;
    let events = transitions(&mut events);
    assert_eq!(
        steps(&events),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Open, Cause::DwellExceeded),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
    assert_eq!(events[2].at, probed_at + secs(5));
    for pair in events.windows(2) {
        assert_eq!(pair[0].to, pair[1].from);
        assert_eq!(pair[0].generation + 1, pair[1].generation, "{pair:?}");
    }
    release.notify_one();
    let _ = probe.await;
}

#[tokio::test(start_paused = true)]
async fn an_unpolled_probe_future_kept_past_the_dwell_limit_is_late_when_it_finally_runs() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .max_half_open_dwell(Some(secs(5))),
    );
    expect_service(&mut svc, 500).await;

    // The probe is admitted and called, but its future is kept without being polled.
    let stalled = svc.ready().await.unwrap().call(Req::Status(200));
    assert_eq!(handle.state(), State::HalfOpen);
    advance(secs(5)).await;
    assert_eq!(handle.snapshot().state, State::Open);

    // The next call after the re-opening one is a new probe.
    expect_probe(&mut svc, 200).await;
    assert_eq!(handle.state(), State::Closed);

    let answer = stalled.await.unwrap();
    assert_eq!(answer.source(), Source::Probe);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.counts.late, 1);
    assert_eq!(snapshot.counts.successes, 1);
}

#[tokio::test(start_paused = true)]
async fn a_probe_reservation_never_used_is_reclaimed_by_the_dwell_limit() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10)))
            .max_half_open_dwell(Some(secs(5))),
    );
    expect_service(&mut svc, 500).await;
    advance(secs(10)).await;

    // One clone reserves the probe slot and sits on it.
    let mut sitter = svc.clone();
    sitter.ready().await.unwrap();
    assert_eq!(handle.state(), State::HalfOpen);
    expect_skip(&mut svc, Reason::HalfOpenFull).await;

    advance(secs(5)).await;
    assert_eq!(handle.state(), State::Open);

    // Used now, its stale reservation is turned away: the breaker is open.
    let answer = sitter.call(Req::Status(200)).await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Open));

    advance(secs(10)).await;
    expect_probe(&mut svc, 200).await;
    assert_eq!(handle.state(), State::Closed);
}

/// `max_half_open_dwell` is "the longest the breaker stays half-open before it re-opens
/// on its own": the re-opening happens at the dwell deadline, and its cooldown counts
/// from there, whether or not anyone looked at the breaker in between.
#[tokio::test(start_paused = true)]
async fn a_hung_probe_reopens_at_the_dwell_deadline_even_when_nobody_looks() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10)))
            .max_half_open_dwell(Some(secs(5))),
    );
    let mut events = handle.subscribe();
    expect_service(&mut svc, 500).await;
    advance(secs(10)).await;

    let hung = svc
        .ready()
        .await
        .unwrap()
        .call(Req::Wait(Arc::new(Notify::new())));
    let hung = tokio::spawn(hung);
    tokio::task::yield_now().await;
    let probed_at = now();

    // Nobody calls or looks for a long time: the dwell limit passed at +5 s and the
    // cooldown of that re-opening ended at +15 s.
    advance(secs(100)).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    let dwell = transitions(&mut events)
        .into_iter()
        .find(|t| t.cause == Cause::DwellExceeded)
        .expect("a dwell transition");
    let next = send(&mut svc, Req::Status(200)).await.unwrap().source();
    assert_eq!(
        (dwell.at - probed_at, snapshot.retry_after(), next),
        (secs(5), Some(Duration::ZERO), Source::Probe),
        "(re-opened after, wait reported at +100 s, the next call): the re-opening \
         should be dated at the dwell deadline and its cooldown counted from there"
    );
    hung.abort();
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_hint_on_the_tripping_failure_sets_the_cooldown() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(30))),
    );
    expect_service(&mut svc, 429).await;
    let opened_at = now();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.retry_after(), Some(secs(2)));
    assert_eq!(
        snapshot.next_probe,
        NextProbe::After {
            calls: 1,
            at: Some(opened_at + secs(2)),
        }
    );

    advance(secs(2) - NS).await;
    let answer = expect_skip(&mut svc, Reason::Open).await;
    assert_eq!(answer.next_probe().retry_after(now()), Some(NS));
    advance(NS).await;
    // A failed probe with a hint re-opens for the hint too.
    expect_probe(&mut svc, 429).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(2)));
    advance(secs(2)).await;
    expect_probe(&mut svc, 200).await;
    assert_eq!(handle.state(), State::Closed);

    // Without a hint, the configured 30 s apply.
    expect_service(&mut svc, 500).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(30)));
}

#[tokio::test(start_paused = true)]
async fn counting_hints_only_the_hint_of_the_failure_that_opens_the_breaker_counts() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(2)
            .cooldown(Cooldown::Time(secs(30)))
            .open_on_retry_after(false),
    );
    expect_service(&mut svc, 429).await;
    expect_service(&mut svc, 500).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(30)));
    handle.reset();

    expect_service(&mut svc, 500).await;
    expect_service(&mut svc, 429).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(2)));
}

#[tokio::test(start_paused = true)]
async fn by_default_a_failure_with_a_retry_after_opens_the_breaker_at_once_for_that_long() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(3)
            .cooldown(Cooldown::Time(secs(30))),
    );
    let mut transitions = handle.subscribe();
    expect_service(&mut svc, 429).await; // asks for 2 s
    assert_eq!(handle.state(), State::Open, "one failure, not three");
    let opened = transitions.try_recv().expect("the opening");
    assert_eq!(opened.cause, Cause::RetryAfter);
    assert_eq!(handle.snapshot().retry_after(), Some(secs(2)));
    advance(secs(2) - NS).await;
    expect_skip(&mut svc, Reason::Open).await;
    advance(NS).await;
    expect_probe(&mut svc, 200).await;
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_hint_is_bounded_by_max_retry_after() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(30)))
            .max_retry_after(secs(5)),
    );
    expect_service(&mut svc, 503).await; // asks for 10 minutes
    assert_eq!(handle.snapshot().retry_after(), Some(secs(5)));
    advance(secs(5) - NS).await;
    expect_skip(&mut svc, Reason::Open).await;
    advance(NS).await;
    expect_probe(&mut svc, 200).await;

    // The default cap is 5 minutes.
    let (mut svc, handle) = breaker(Builder::new().failure_threshold(1));
    expect_service(&mut svc, 503).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(300)));
}

#[tokio::test(start_paused = true)]
async fn with_a_cooldown_in_calls_a_retry_after_hint_makes_the_probe_wait_for_both() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(3)),
    );

    // The calls pass first: the probe still waits for the time.
    expect_service(&mut svc, 429).await;
    let opened_at = now();
    let until = opened_at + secs(2);
    for calls in [2, 1, 1, 1] {
        let answer = expect_skip(&mut svc, Reason::Open).await;
        assert_eq!(
            answer.next_probe(),
            NextProbe::After {
                calls,
                at: Some(until),
            }
        );
    }
    advance(secs(2) - NS).await;
    expect_skip(&mut svc, Reason::Open).await;
    advance(NS).await;
    expect_probe(&mut svc, 429).await; // fails with the hint again: re-opens

    // The time passes first: the probe still waits for the calls.
    advance(secs(60)).await;
    assert_eq!(
        handle.snapshot().next_probe,
        NextProbe::After { calls: 3, at: None }
    );
    for calls in [2, 1] {
        let answer = expect_skip(&mut svc, Reason::Open).await;
        assert_eq!(answer.next_probe(), NextProbe::After { calls, at: None });
    }
    expect_probe(&mut svc, 200).await;
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_keeps_the_breaker_open_whatever_the_time_until_reset() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(3)
            .cooldown(Cooldown::Time(secs(1))),
    );
    let mut events = handle.subscribe();

    // One permanent failure is enough, whatever the threshold.
    expect_service(&mut svc, 402).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.next_probe, NextProbe::Manual);
    assert_eq!(snapshot.retry_after(), None);
    assert_eq!(
        snapshot.last_failure.map(|f| f.message.to_string()),
        Some("quota exhausted".to_string())
    );

    for _ in 0..5 {
        advance(secs(3600)).await;
        let answer = expect_skip(&mut svc, Reason::Open).await;
        assert_eq!(answer.next_probe(), NextProbe::Manual);
        assert_eq!(handle.snapshot().next_probe, NextProbe::Manual);
    }
    assert_eq!(handle.snapshot().counts.probes, 0);

    handle.reset();
    assert_eq!(handle.state(), State::Closed);
    expect_service(&mut svc, 200).await;
    assert_eq!(
        steps(&transitions(&mut events)),
        vec![
            (State::Closed, State::Open, Cause::PermanentFailure),
            (State::Open, State::Closed, Cause::Reset),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_on_a_probe_keeps_the_breaker_open_until_reset() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(1))),
    );
    expect_service(&mut svc, 500).await;
    advance(secs(1)).await;
    expect_probe(&mut svc, 402).await;
    assert_eq!(handle.snapshot().next_probe, NextProbe::Manual);
    advance(secs(86_400)).await;
    expect_skip(&mut svc, Reason::Open).await;
    assert_eq!(handle.state(), State::Open);

    handle.reset();
    expect_service(&mut svc, 200).await;
}

#[tokio::test(start_paused = true)]
async fn a_success_slower_than_the_slow_call_threshold_counts_as_a_failure() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(2)
            .slow_call_threshold(secs(1)),
    );

    // Exactly at the threshold is not slow.
    let started = now();
    let answer = send(&mut svc, Req::Slow(secs(1))).await.unwrap();
    assert_eq!(now() - started, secs(1));
    assert_service(&answer, 200);
    assert_eq!(handle.snapshot().counts.successes, 1);

    // Slower: the caller still gets the answer, but the breaker counts a failure.
    let answer = send(&mut svc, Req::Slow(secs(2))).await.unwrap();
    assert_service(&answer, 200);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.consecutive_failures, 1);
    assert_eq!(snapshot.counts.failures, 1);
    assert_eq!(snapshot.counts.successes, 1);
    let message = snapshot.last_failure.unwrap().message;
    assert!(message.contains("slow call"), "{message}");

    // A fast success resets the run of failures.
    expect_service(&mut svc, 200).await;
    assert_eq!(handle.snapshot().consecutive_failures, 0);

    // Two slow calls in a row trip the breaker.
    send(&mut svc, Req::Slow(Duration::from_millis(1001)))
        .await
        .unwrap();
    send(&mut svc, Req::Slow(secs(30))).await.unwrap();
    assert_eq!(handle.state(), State::Open);
    expect_skip(&mut svc, Reason::Open).await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_probe_reopens_the_breaker() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .slow_call_threshold(secs(1)),
    );
    expect_service(&mut svc, 500).await;
    let answer = send(&mut svc, Req::Slow(secs(2))).await.unwrap();
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn snapshot_reports_the_next_probe_without_making_a_call() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10))),
    );
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.next_probe, NextProbe::NotNeeded);
    assert_eq!(snapshot.retry_after(), None);

    let _ = send(&mut svc, Req::Fail).await.unwrap_err();
    let opened_at = now();

    advance(secs(3)).await;
    for _ in 0..3 {
        let snapshot = handle.snapshot();
        assert_eq!(
            snapshot.next_probe,
            NextProbe::After {
                calls: 1,
                at: Some(opened_at + secs(10)),
            }
        );
        assert_eq!(snapshot.retry_after(), Some(secs(7)));
        assert_eq!(snapshot.taken_at, now());
        // Looking is not a call.
        assert_eq!(snapshot.counts.arrived, 1);
    }

    // The cooldown is over: a probe may go now, but open never turns half-open by itself.
    advance(secs(7)).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.next_probe, NextProbe::After { calls: 1, at: None });
    assert_eq!(snapshot.retry_after(), Some(Duration::ZERO));

    // The kill switch: only a person ends it.
    handle.kill_switch().kill();
    let snapshot = handle.snapshot();
    assert!(snapshot.killed);
    assert_eq!(snapshot.next_probe, NextProbe::Manual);
    assert_eq!(snapshot.retry_after(), None);
    handle.kill_switch().revive();

    expect_probe(&mut svc, 200).await;
    assert_eq!(handle.snapshot().next_probe, NextProbe::NotNeeded);
}

/// What a skipped call is told is what the breaker will do, to the nanosecond: a caller
/// that waits exactly the `retry_after` it was given gets the probe, and a skip, a
/// rejection and a snapshot taken at the same time say the same. Odd nanoseconds on the
/// clock and in the cooldown, so that no rounding can hide.
#[tokio::test(start_paused = true)]
async fn a_caller_that_waits_exactly_the_retry_after_it_was_told_gets_the_probe() {
    advance(Duration::from_nanos(1_234_567)).await;
    let cooldown = secs(10) + Duration::from_nanos(999);
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(cooldown)),
    );
    let _ = send(&mut svc, Req::Fail).await.unwrap_err();
    let due = now() + cooldown;
    advance(Duration::from_nanos(333)).await;

    let skip = expect_skip(&mut svc, Reason::Open).await;
    let told = skip.next_probe();
    assert_eq!(
        told,
        NextProbe::After {
            calls: 1,
            at: Some(due)
        }
    );
    assert_eq!(handle.snapshot().next_probe, told);
    let wait = told.retry_after(now()).expect("a wait in time");
    assert_eq!(wait, cooldown - Duration::from_nanos(333));

    advance(wait - NS).await;
    expect_skip(&mut svc, Reason::Open).await;
    advance(NS).await;
    expect_probe(&mut svc, 200).await;
}

/// The same for a wait counted in calls, with the longest cooldown a breaker accepts:
/// the count told is the machine's, not a rounded one.
#[tokio::test(start_paused = true)]
async fn the_calls_until_the_probe_are_told_exactly_even_for_the_longest_cooldown() {
    let longest = Cooldown::MAX_CALLS;
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(longest)),
    );
    let _ = send(&mut svc, Req::Fail).await.unwrap_err();
    assert_eq!(
        handle.snapshot().next_probe,
        NextProbe::After {
            calls: longest,
            at: None
        }
    );
    for left in (longest - 3..longest).rev() {
        let skip = expect_skip(&mut svc, Reason::Open).await;
        assert_eq!(
            skip.next_probe(),
            NextProbe::After {
                calls: left,
                at: None
            }
        );
        assert_eq!(handle.snapshot().next_probe, skip.next_probe());
    }
    assert_eq!(
        Builder::new()
            .cooldown(Cooldown::Calls(longest + 1))
            .build()
            .unwrap_err(),
        tower_circuit_breaker::error::ConfigError::CooldownTooLong
    );
}

/// Times past what the breaker keeps exactly (a paused clock moved on by centuries):
/// every call is still decided, none panics, and a cooldown long over lets the next call
/// through (a probe), whose failure opens the breaker again.
#[tokio::test(start_paused = true)]
async fn a_clock_moved_on_by_centuries_still_decides_every_call() {
    let year = secs(365 * 24 * 3600);
    let (mut svc, handle) = breaker(Builder::new().failure_threshold(1));
    expect_service(&mut svc, 500).await;
    assert_eq!(handle.state(), State::Open);
    for _ in 0..4 {
        advance(year * 150).await;
        expect_probe(&mut svc, 500).await;
        assert_eq!(handle.state(), State::Open);
    }
    handle.reset();
    expect_service(&mut svc, 200).await;
    assert_eq!(handle.state(), State::Closed);
}

/// The change to half-open is made by the call that becomes its probe: as of the
/// transition, that probe holds its slot, so with one slot the next probe is in flight,
/// and with two the next call may be the second.
#[tokio::test(start_paused = true)]
async fn the_change_to_half_open_tells_the_next_probe_after_the_probe_that_made_it() {
    for (probes, told) in [
        (1, NextProbe::InFlight),
        (2, NextProbe::After { calls: 1, at: None }),
    ] {
        let (mut svc, handle) = breaker(
            Builder::new()
                .failure_threshold(1)
                .cooldown(Cooldown::Time(secs(10)))
                .half_open_probes(probes),
        );
        expect_service(&mut svc, 500).await;
        let mut events = handle.subscribe();
        advance(secs(10)).await;
        let release = Arc::new(Notify::new());
        let probe = send(&mut svc, Req::Wait(release.clone()));
        let mut probe = std::pin::pin!(probe);
        assert!(
            futures::poll!(probe.as_mut()).is_pending(),
            "the probe hangs"
        );
        let seen = transitions(&mut events);
        assert_eq!(
            steps(&seen),
            [(State::Open, State::HalfOpen, Cause::CooldownElapsed)]
        );
        assert_eq!(seen[0].next_probe, told, "{probes} slot(s)");
        assert_eq!(handle.snapshot().next_probe, told, "as the snapshot says");
        release.notify_one();
        assert_eq!(
            probe.await.expect("the probe answers").source(),
            Source::Probe
        );
    }
}
