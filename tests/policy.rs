//! Trip policies, modes and observability (snapshots, subscribers, callbacks), on
//! tokio's paused clock, plus `Send`/`Sync` checks of the public types.

mod common;
use common::counts::assert_counts_add_up;

use std::convert::Infallible;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::oneshot;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_circuit_breaker::config::RateWindow;
use tower_circuit_breaker::snapshot::{Counts, WindowCounts};
use tower_circuit_breaker::{
    Answer, Builder, Cause, CircuitBreakerHandle, Cooldown, Mode, Outcome, Reason, Source, State,
    Transition,
};

// ---------------------------------------------------------------------------------
// A scripted model: each request says how the call ends.
// ---------------------------------------------------------------------------------

#[derive(Debug)]
enum Req {
    Ok,
    Fail(&'static str),
    /// Ends when the sender says how (`Ok(())` or `Err(message)`).
    Wait(oneshot::Receiver<Result<(), &'static str>>),
}

type Reply = Result<Answer<&'static str>, BoxError>;

/// The failure-rate window's counts.
fn window(failures: u64, calls: u64) -> WindowCounts {
    WindowCounts { failures, calls }
}

fn model() -> impl Service<Req, Response = &'static str, Error = io::Error> + Clone {
    service_fn(|req: Req| async move {
        match req {
            Req::Ok => Ok("ok"),
            Req::Fail(message) => Err(io::Error::other(message)),
            Req::Wait(rx) => match rx.await {
                Ok(Ok(())) => Ok("ok"),
                Ok(Err(message)) => Err(io::Error::other(message)),
                Err(_) => Err(io::Error::other("sender dropped")),
            },
        }
    })
}

fn fallback() -> impl Service<Req, Response = &'static str, Error = Infallible> + Clone {
    service_fn(|_: Req| async { Ok::<_, Infallible>("fallback") })
}

/// A breaker around the model, answering skipped calls from the fallback.
fn breaker(
    builder: Builder,
) -> (
    impl Service<Req, Response = Answer<&'static str>, Error = BoxError> + Clone,
    CircuitBreakerHandle,
) {
    let layer = builder.build().expect("valid settings");
    let handle = layer.handle();
    (layer.with_fallback(fallback()).layer(model()), handle)
}

async fn call<S>(svc: &mut S, req: Req) -> Reply
where
    S: Service<Req, Response = Answer<&'static str>, Error = BoxError>,
{
    svc.ready().await?.call(req).await
}

async fn ok<S>(svc: &mut S) -> Answer<&'static str>
where
    S: Service<Req, Response = Answer<&'static str>, Error = BoxError>,
{
    call(svc, Req::Ok).await.expect("a success or a fallback")
}

/// A failing call: the service's error comes back (the breaker was closed or probing).
async fn fail<S>(svc: &mut S)
where
    S: Service<Req, Response = Answer<&'static str>, Error = BoxError>,
{
    let err = call(svc, Req::Fail("boom"))
        .await
        .expect_err("the call was made and failed");
    assert_eq!(err.to_string(), "boom");
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

// ---------------------------------------------------------------------------------
// Failure rate over a count window.
// ---------------------------------------------------------------------------------

fn rate_over_calls() -> Builder {
    Builder::new()
        .name("rate-calls")
        .failure_rate(0.5, RateWindow::Calls(10), 5)
        .cooldown(Cooldown::Time(Duration::from_secs(30)))
}

#[tokio::test(start_paused = true)]
async fn failure_rate_does_not_trip_below_minimum_calls() {
    let (mut svc, handle) = breaker(rate_over_calls());
    for _ in 0..4 {
        fail(&mut svc).await;
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.window, window(4, 4));
    // The fifth outcome reaches the minimum: 5 of 5 failed.
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn failure_rate_trips_when_the_share_reaches_the_rate() {
    let (mut svc, handle) = breaker(rate_over_calls());
    let mut rx = handle.subscribe();
    ok(&mut svc).await;
    ok(&mut svc).await;
    fail(&mut svc).await;
    fail(&mut svc).await;
    ok(&mut svc).await;
    // 2 of 5: below the rate.
    assert_eq!(handle.snapshot().window, window(2, 5));
    assert_eq!(handle.state(), State::Closed);
    // 3 of 6 is exactly 0.5: trips.
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
    let t = rx.try_recv().expect("a transition");
    assert_eq!(
        (t.from, t.to, t.cause),
        (State::Closed, State::Open, Cause::Tripped)
    );
    // The window starts again after opening.
    assert_eq!(handle.snapshot().window, window(0, 0));
    let answer = ok(&mut svc).await;
    assert_eq!(answer.source(), Source::Fallback(Reason::Open));
}

/// The rate is a state of the window: a success that leaves too many failures in it
/// trips the breaker too (resilience4j's semantics).
#[tokio::test(start_paused = true)]
async fn failure_rate_is_checked_after_every_outcome_successes_too() {
    let (mut svc, handle) = breaker(rate_over_calls());
    for _ in 0..3 {
        fail(&mut svc).await;
    }
    ok(&mut svc).await;
    // 3 of 4: below the minimum of 5 outcomes.
    assert_eq!(handle.state(), State::Closed);
    ok(&mut svc).await;
    // 3 of 5 failed: the fifth outcome, a success, reaches the minimum and the rate.
    assert_eq!(handle.state(), State::Open);
    assert_eq!(ok(&mut svc).await.source(), Source::Fallback(Reason::Open));
}

/// A success that trips the breaker on a failure rate ends the run of failures: its
/// transition's line names no run of failures ("0 consecutive failures" would say the
/// breaker opened with none).
#[tokio::test(start_paused = true)]
async fn a_transition_tripped_by_a_success_names_no_run_of_failures() {
    let (mut svc, handle) = breaker(rate_over_calls());
    let mut rx = handle.subscribe();
    for _ in 0..3 {
        fail(&mut svc).await;
    }
    ok(&mut svc).await;
    ok(&mut svc).await;
    let t = rx.try_recv().expect("the success tripped it");
    assert_eq!((t.cause, t.consecutive_failures), (Cause::Tripped, 0));
    assert_eq!(
        t.to_string(),
        "circuit `rate-calls`: closed -> open (tripped); next probe in 30s"
    );
}

#[tokio::test(start_paused = true)]
async fn failure_rate_ring_forgets_old_failures() {
    let (mut svc, handle) = breaker(rate_over_calls());
    for _ in 0..6 {
        ok(&mut svc).await;
    }
    for _ in 0..4 {
        fail(&mut svc).await;
    }
    assert_eq!(handle.snapshot().window, window(4, 10));
    assert_eq!(handle.state(), State::Closed);
    for _ in 0..10 {
        ok(&mut svc).await;
    }
    // The ten successes pushed the four failures out of the ring.
    assert_eq!(handle.snapshot().window, window(0, 10));
    for _ in 0..4 {
        fail(&mut svc).await;
    }
    // 4 of the last 10: had the old failures stayed, it would be 8 of 10.
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.window, window(4, 10));
    assert_eq!(snapshot.state, State::Closed);
}

#[tokio::test(start_paused = true)]
async fn failure_rate_ring_forgets_old_successes() {
    let (mut svc, handle) = breaker(rate_over_calls());
    for _ in 0..10 {
        ok(&mut svc).await;
    }
    for _ in 0..4 {
        fail(&mut svc).await;
    }
    assert_eq!(handle.snapshot().window, window(4, 10));
    assert_eq!(handle.state(), State::Closed);
    // 5 of the last 10 (but only 5 of all 15): the old successes no longer count.
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
}

// ---------------------------------------------------------------------------------
// Failure rate over a time window.
// ---------------------------------------------------------------------------------

fn rate_over_time() -> Builder {
    Builder::new()
        .name("rate-time")
        .failure_rate(0.5, RateWindow::Time(Duration::from_secs(10)), 4)
        .cooldown(Cooldown::Time(Duration::from_secs(30)))
}

#[tokio::test(start_paused = true)]
async fn failure_rate_time_window_forgets_failures_older_than_the_window() {
    let (mut svc, handle) = breaker(rate_over_time());
    for _ in 0..3 {
        fail(&mut svc).await;
    }
    assert_eq!(handle.snapshot().window, window(3, 3));
    tokio::time::advance(Duration::from_secs(9)).await;
    assert_eq!(
        handle.snapshot().window,
        window(3, 3),
        "still inside the window"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(
        handle.snapshot().window,
        window(0, 0),
        "the window has passed"
    );

    // Had the three old failures still counted, the first failure here would make
    // 4 of 5 and trip.
    ok(&mut svc).await;
    fail(&mut svc).await;
    ok(&mut svc).await;
    ok(&mut svc).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.window, window(1, 4));
    assert_eq!(snapshot.state, State::Closed);

    // Failures inside the window still trip it: 3 of 6.
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Closed);
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn failure_rate_time_window_trips_on_failures_spread_inside_the_window() {
    let (mut svc, handle) = breaker(rate_over_time());
    for _ in 0..3 {
        fail(&mut svc).await;
        tokio::time::advance(Duration::from_secs(3)).await;
    }
    // 9 s after the first failure: all three are inside the 10 s window.
    assert_eq!(handle.snapshot().window, window(3, 3));
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
}

// ---------------------------------------------------------------------------------
// Consecutive failures and threshold relief.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_success_resets_the_consecutive_failure_count() {
    let (mut svc, handle) = breaker(Builder::new().failure_threshold(3));
    fail(&mut svc).await;
    fail(&mut svc).await;
    assert_eq!(handle.snapshot().consecutive_failures, 2);
    ok(&mut svc).await;
    assert_eq!(handle.snapshot().consecutive_failures, 0);
    fail(&mut svc).await;
    fail(&mut svc).await;
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.state, snapshot.consecutive_failures),
        (State::Closed, 2)
    );
    assert_eq!(
        snapshot.window,
        window(0, 0),
        "no window for consecutive failures"
    );
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn threshold_relief_lowers_the_threshold_by_one() {
    let (mut svc, handle) = breaker(Builder::new().failure_threshold(3));
    handle.set_threshold_relief(1);
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Closed);
    fail(&mut svc).await;
    assert_eq!(
        handle.state(),
        State::Open,
        "two failures trip a threshold of 3 - 1"
    );
}

#[tokio::test(start_paused = true)]
async fn threshold_relief_of_zero_restores_the_threshold() {
    let (mut svc, handle) = breaker(Builder::new().failure_threshold(3));
    handle.set_threshold_relief(1);
    handle.set_threshold_relief(0);
    fail(&mut svc).await;
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Closed);
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn threshold_relief_never_lowers_the_threshold_below_one() {
    let (mut svc, handle) = breaker(Builder::new().failure_threshold(3));
    handle.set_threshold_relief(u32::MAX);
    ok(&mut svc).await;
    assert_eq!(handle.state(), State::Closed, "a success never trips");
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
}

// ---------------------------------------------------------------------------------
// Subscribers and callbacks.
// ---------------------------------------------------------------------------------

fn transitions_of(rx: &mut tokio::sync::broadcast::Receiver<Transition>) -> Vec<Transition> {
    let mut seen = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(t) => seen.push(t),
            Err(TryRecvError::Empty) => return seen,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
}

fn summary(transitions: &[Transition]) -> Vec<(State, State, Cause)> {
    transitions
        .iter()
        .map(|t| (t.from, t.to, t.cause))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_receives_every_transition_with_the_breakers_name() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .name("chat-model")
            .failure_threshold(2)
            .cooldown(Cooldown::Time(Duration::from_secs(5))),
    );
    let mut rx = handle.subscribe();
    let started = now();

    fail(&mut svc).await;
    fail(&mut svc).await;
    tokio::time::advance(Duration::from_secs(5)).await;
    let probe = ok(&mut svc).await;
    assert_eq!(probe.source(), Source::Probe);
    handle.force_open();
    handle.force_open(); // already forced open: no transition
    handle.reset();
    handle.reset(); // already closed: no transition

    // A failed probe re-opens.
    fail(&mut svc).await;
    fail(&mut svc).await;
    tokio::time::advance(Duration::from_secs(5)).await;
    fail(&mut svc).await;

    let seen = transitions_of(&mut rx);
    assert_eq!(
        summary(&seen),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
            (State::Closed, State::ForcedOpen, Cause::ForcedOpen),
            (State::ForcedOpen, State::Closed, Cause::Reset),
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Open, Cause::ProbeFailed),
        ]
    );
    for t in &seen {
        assert_eq!(&*t.name, "chat-model");
        assert_eq!(t.mode, Mode::Enabled);
    }
    assert!(
        seen.windows(2).all(|w| w[0].generation < w[1].generation),
        "generations grow: {seen:?}"
    );
    assert_eq!(seen[0].at, started);
    assert_eq!(seen[0].consecutive_failures, 2);
    assert_eq!(seen[1].at, started + Duration::from_secs(5));
    assert_eq!(
        seen.last().unwrap().generation,
        handle.snapshot().generation
    );
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_that_never_reads_does_not_block_calls() {
    let (mut svc, handle) = breaker(Builder::new().name("tool").failure_threshold(1));
    let mut rx = handle.subscribe();
    // 40 trips by a call and 40 resets: 80 transitions, more than the 64 the channel
    // holds, and nobody reads.
    for _ in 0..40 {
        fail(&mut svc).await;
        assert_eq!(handle.state(), State::Open);
        handle.reset();
    }
    assert_eq!(ok(&mut svc).await.source(), Source::Service);

    match rx.recv().await {
        Err(RecvError::Lagged(missed)) => assert_eq!(missed, 80 - 64),
        other => panic!("expected a lag, got {other:?}"),
    }
    // The 64 newest are still there, oldest first.
    let rest = transitions_of(&mut rx);
    assert_eq!(rest.len(), 64);
    assert_eq!(
        (rest[0].from, rest[0].to, rest[0].cause),
        (State::Closed, State::Open, Cause::Tripped)
    );
    assert_eq!(
        summary(&rest[62..]),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::Closed, Cause::Reset),
        ]
    );
}

type Log = Arc<Mutex<Vec<(State, State, Cause, String)>>>;

#[tokio::test(start_paused = true)]
async fn on_transition_is_called_for_every_transition() {
    let log: Log = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let builder = Builder::new()
        .name("logged")
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(2))
        .on_transition({
            let log = log.clone();
            move |t| {
                log.lock()
                    .unwrap()
                    .push((t.from, t.to, t.cause, t.name.to_string()))
            }
        })
        .on_transition({
            let calls = calls.clone();
            move |_| {
                calls.fetch_add(1, Ordering::SeqCst);
            }
        });
    let (mut svc, handle) = breaker(builder);
    let mut rx = handle.subscribe();

    fail(&mut svc).await; // trips
    assert_eq!(ok(&mut svc).await.source(), Source::Fallback(Reason::Open));
    fail(&mut svc).await; // the probe fails
    ok(&mut svc).await; // skipped
    assert_eq!(ok(&mut svc).await.source(), Source::Probe); // closes
    handle.force_open();
    handle.reset();

    let from_subscriber = summary(&transitions_of(&mut rx));
    let from_callback: Vec<_> = log
        .lock()
        .unwrap()
        .iter()
        .map(|(from, to, cause, name)| {
            assert_eq!(name, "logged");
            (*from, *to, *cause)
        })
        .collect();
    assert_eq!(from_callback.len(), 7);
    assert_eq!(from_callback, from_subscriber);
    assert_eq!(calls.load(Ordering::SeqCst), 7);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_callback_does_not_break_the_call_that_caused_the_transition() {
    let after = Arc::new(AtomicUsize::new(0));
    let builder = Builder::new()
        .name("panicky")
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(1))
        .on_transition(|t| {
            if t.cause == Cause::Tripped {
                panic!("a bug in the operator's callback");
            }
        })
        .on_transition({
            let after = after.clone();
            move |_| {
                after.fetch_add(1, Ordering::SeqCst);
            }
        });
    let (mut svc, handle) = breaker(builder);
    let mut rx = handle.subscribe();

    fail(&mut svc).await;
    // This call trips the breaker: its answer is still the service's error.
    let err = call(&mut svc, Req::Fail("the tripping call"))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "the tripping call");
    assert_eq!(handle.state(), State::Open);
    // The other callback and the subscriber still heard of it.
    assert_eq!(after.load(Ordering::SeqCst), 1);
    assert_eq!(rx.try_recv().unwrap().cause, Cause::Tripped);

    // The breaker goes on working: the next call is the probe and closes it.
    let probe = ok(&mut svc).await;
    assert_eq!(probe.source(), Source::Probe);
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(after.load(Ordering::SeqCst), 3);

    // And it trips again, through the panicking callback, as often as it must.
    fail(&mut svc).await;
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(ok(&mut svc).await.source(), Source::Probe);
}

// ---------------------------------------------------------------------------------
// Snapshots.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn snapshot_records_the_last_failure_from_the_errors_display() {
    let (mut svc, handle) = breaker(Builder::new().name("search").failure_threshold(5));
    let fresh = handle.snapshot();
    assert_eq!(&*fresh.name, "search");
    assert_eq!(fresh.last_failure, None);
    assert_eq!(fresh.counts, Counts::default());

    tokio::time::advance(Duration::from_secs(2)).await;
    let failed_at = now();
    let err = call(&mut svc, Req::Fail("connection refused"))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "connection refused");

    tokio::time::advance(Duration::from_secs(3)).await;
    ok(&mut svc).await;

    tokio::time::advance(Duration::from_secs(1)).await;
    let snapshot = handle.snapshot();
    let last_failure = snapshot.last_failure.clone().expect("a failure");
    assert_eq!(&*last_failure.message, "connection refused");
    assert_eq!(last_failure.at, failed_at);
    assert_eq!(snapshot.taken_at, now());
    assert_eq!(snapshot.state, State::Closed);
    assert!(!snapshot.killed);
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.probes_in_flight, 0);
    let counts = snapshot.counts;
    assert_eq!(
        (
            counts.arrived,
            counts.made,
            counts.successes,
            counts.failures
        ),
        (2, 2, 1, 1)
    );
    assert_eq!(counts.skipped(), 0);
    assert_counts_add_up(&counts);
}

#[tokio::test(start_paused = true)]
async fn snapshot_prefers_the_classifiers_message() {
    let layer = Builder::new().name("classified").build().unwrap();
    let handle = layer.handle();
    let mut svc = layer
        .with_classifier(|result: &Result<&'static str, io::Error>| match result {
            Ok(_) => Outcome::Success,
            Err(e) if e.to_string() == "quiet" => Outcome::failure(),
            Err(_) => Outcome::failure_with("status 503"),
        })
        .layer(model());
    let _ = call(&mut svc, Req::Fail("upstream said 503")).await;
    assert_eq!(
        &*handle.snapshot().last_failure.unwrap().message,
        "status 503"
    );
    // A classifier failure with no message takes the error's text.
    let _ = call(&mut svc, Req::Fail("quiet")).await;
    assert_eq!(&*handle.snapshot().last_failure.unwrap().message, "quiet");
}

#[tokio::test(start_paused = true)]
async fn snapshot_counts_skips_by_reason_and_says_when_to_retry() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(Duration::from_secs(30))),
    );
    fail(&mut svc).await;
    tokio::time::advance(Duration::from_secs(10)).await;
    let answer = ok(&mut svc).await;
    assert_eq!(answer.source(), Source::Fallback(Reason::Open));
    assert_eq!(answer.state(), State::Open);
    assert_eq!(answer.into_inner(), "fallback");

    let snapshot = handle.snapshot();
    assert_eq!(snapshot.retry_after(), Some(Duration::from_secs(20)));
    assert_eq!(snapshot.counts.skipped_open, 1);

    handle.kill_switch().kill();
    assert_eq!(
        ok(&mut svc).await.source(),
        Source::Fallback(Reason::Killed)
    );
    let snapshot = handle.snapshot();
    assert!(snapshot.killed);
    assert_eq!(
        snapshot.retry_after(),
        None,
        "killed: only a person ends it"
    );
    handle.kill_switch().revive();

    handle.force_open();
    assert_eq!(
        ok(&mut svc).await.source(),
        Source::Fallback(Reason::ForcedOpen)
    );
    let counts = handle.snapshot().counts;
    assert_eq!(
        (
            counts.skipped_open,
            counts.skipped_killed,
            counts.skipped_forced_open
        ),
        (1, 1, 1)
    );
    assert_eq!((counts.arrived, counts.made, counts.failures), (4, 1, 1));
    assert_counts_add_up(&counts);
}

// ---------------------------------------------------------------------------------
// Modes.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn observe_only_trips_but_still_makes_every_call() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(2)
            .cooldown(Cooldown::Calls(3))
            .mode(Mode::ObserveOnly),
    );
    let mut rx = handle.subscribe();
    fail(&mut svc).await;
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
    let t = rx.try_recv().unwrap();
    assert_eq!((t.cause, t.mode), (Cause::Tripped, Mode::ObserveOnly));

    // An enabled breaker would skip these; observing, the service answers.
    let answer = ok(&mut svc).await;
    assert_eq!(answer.source(), Source::Shadowed(Reason::Open));
    assert_eq!(answer.into_inner(), "ok");
    fail(&mut svc).await;
    let counts = handle.snapshot().counts;
    assert_eq!(counts.would_have_skipped, 2);
    assert_eq!(counts.skipped(), 0);
    assert_eq!(counts.made, 4);
    assert_counts_add_up(&counts);
}

#[tokio::test(start_paused = true)]
async fn disabled_passes_through_and_records_nothing_but_obeys_the_kill_switch() {
    let (mut svc, handle) = breaker(Builder::new().failure_threshold(1).mode(Mode::Disabled));
    for _ in 0..5 {
        fail(&mut svc).await;
    }
    assert_eq!(ok(&mut svc).await.source(), Source::Service);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.counts, Counts::default());

    handle.kill_switch().kill();
    assert_eq!(
        ok(&mut svc).await.source(),
        Source::Fallback(Reason::Killed)
    );
    handle.kill_switch().revive();

    handle.set_mode(Mode::Enabled);
    assert_eq!(handle.mode(), Mode::Enabled);
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
}

/// A mode switch bumps the generation, so results of calls admitted before it are
/// "late". A probe admitted before the switch holds the half-open slot; when it ends,
/// the slot must come back, or the breaker stays half-open with its only slot taken.
#[tokio::test(start_paused = true)]
async fn a_mode_switch_while_a_probe_is_in_flight_does_not_leave_the_breaker_stuck() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .max_half_open_dwell(None),
    );
    fail(&mut svc).await;
    assert_eq!(handle.state(), State::Open);

    let (tx, rx) = oneshot::channel();
    let probe = svc.ready().await.unwrap().call(Req::Wait(rx));
    tokio::pin!(probe);
    assert!(futures::poll!(&mut probe).is_pending());
    assert_eq!(handle.snapshot().probes_in_flight, 1);

    handle.set_mode(Mode::ObserveOnly);
    handle.set_mode(Mode::Enabled);
    tx.send(Ok(())).unwrap();
    let answer = probe.await.unwrap();
    assert_eq!(answer.source(), Source::Probe);

    let snapshot = handle.snapshot();
    assert_counts_add_up(&snapshot.counts);
    assert_eq!(
        snapshot.probes_in_flight, 0,
        "the probe has ended but still holds its slot: {snapshot:?}"
    );
    let next = ok(&mut svc).await;
    assert_ne!(next.source(), Source::Fallback(Reason::HalfOpenFull));
}

/// The same, for a probe that is cancelled (its future dropped) after a mode switch.
#[tokio::test(start_paused = true)]
async fn a_probe_cancelled_after_a_mode_switch_frees_its_slot() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .max_half_open_dwell(None),
    );
    fail(&mut svc).await;
    let (_tx, rx) = oneshot::channel();
    let probe = svc.ready().await.unwrap().call(Req::Wait(rx));
    assert_eq!(handle.snapshot().probes_in_flight, 1);
    handle.set_mode(Mode::ObserveOnly);
    handle.set_mode(Mode::Enabled);
    drop(probe);

    let snapshot = handle.snapshot();
    assert_counts_add_up(&snapshot.counts);
    assert_eq!(
        snapshot.probes_in_flight, 0,
        "a dropped probe still holds its slot: {snapshot:?}"
    );
}

/// `Counts` promises `arrived == made + skipped() + abandoned`. A call reserved in one
/// mode and made in another goes through `revalidate`.
#[tokio::test(start_paused = true)]
async fn counts_add_up_when_the_mode_changes_between_ready_and_call() {
    let (mut svc, handle) = breaker(Builder::new());
    // Reserved while enabled (an arrival), called while disabled.
    let ready = svc.ready().await.unwrap();
    handle.set_mode(Mode::Disabled);
    let answer = ready.call(Req::Ok).await.unwrap();
    assert_eq!(answer.source(), Source::Service);
    assert_counts_add_up(&handle.snapshot().counts);
}

#[tokio::test(start_paused = true)]
async fn counts_add_up_when_a_call_reserved_while_disabled_is_made_while_enabled() {
    let (mut svc, handle) = breaker(Builder::new().mode(Mode::Disabled));
    let ready = svc.ready().await.unwrap();
    handle.set_mode(Mode::Enabled);
    let answer = ready.call(Req::Ok).await.unwrap();
    assert_eq!(answer.source(), Source::Service);
    assert_counts_add_up(&handle.snapshot().counts);
}

// ---------------------------------------------------------------------------------
// Send and Sync, in the style of tokio/tests/async_send_sync.rs.
// ---------------------------------------------------------------------------------

#[allow(dead_code)]
mod send_sync {
    use std::future::{Future, Ready};
    use std::io;
    use std::pin::Pin;

    use tower::util::ServiceFn;
    use tower::Service;
    use tower_circuit_breaker::classify::DefaultClassifier;
    use tower_circuit_breaker::error::ConfigError;
    use tower_circuit_breaker::error::Rejected;
    use tower_circuit_breaker::fallback::{Fallback, NoFallback};
    use tower_circuit_breaker::snapshot::{Counts, Snapshot};
    use tower_circuit_breaker::{
        Answer, Builder, CircuitBreaker, CircuitBreakerHandle, CircuitBreakerLayer, KillSwitch,
        Transition,
    };

    fn assert_send<T: Send>() {}
    fn assert_sync<T: Sync>() {}
    fn assert_static<T: 'static>() {}

    type ReadyFn = fn(String) -> Ready<Result<String, io::Error>>;
    type BoxedFn =
        fn(String) -> Pin<Box<dyn Future<Output = Result<String, io::Error>> + Send + 'static>>;
    type Breaker<F> = CircuitBreaker<ServiceFn<F>>;
    type WithFallback =
        CircuitBreaker<ServiceFn<ReadyFn>, Fallback<ServiceFn<ReadyFn>>, DefaultClassifier>;

    type FutureOf<S> = <S as Service<String>>::Future;

    #[test]
    fn public_types_are_send_and_sync() {
        assert_send::<CircuitBreakerLayer>();
        assert_sync::<CircuitBreakerLayer>();
        assert_send::<CircuitBreakerLayer<Fallback<ServiceFn<ReadyFn>>>>();
        assert_sync::<CircuitBreakerLayer<Fallback<ServiceFn<ReadyFn>>>>();
        assert_send::<Builder>();
        assert_sync::<Builder>();

        assert_send::<Breaker<ReadyFn>>();
        assert_sync::<Breaker<ReadyFn>>();
        assert_send::<Breaker<BoxedFn>>();
        assert_sync::<Breaker<BoxedFn>>();
        assert_send::<WithFallback>();
        assert_sync::<WithFallback>();
        assert_send::<CircuitBreaker<ServiceFn<ReadyFn>, NoFallback>>();

        assert_send::<CircuitBreakerHandle>();
        assert_sync::<CircuitBreakerHandle>();
        assert_send::<KillSwitch>();
        assert_sync::<KillSwitch>();
        assert_send::<Snapshot>();
        assert_sync::<Snapshot>();
        assert_send::<Counts>();
        assert_sync::<Counts>();
        assert_send::<Transition>();
        assert_sync::<Transition>();
        assert_send::<Answer<String>>();
        assert_sync::<Answer<String>>();
        assert_send::<ConfigError>();
        assert_sync::<ConfigError>();
        assert_static::<ConfigError>();

        // Rejected travels in a BoxError, which needs all three.
        assert_send::<Rejected>();
        assert_sync::<Rejected>();
        assert_static::<Rejected>();
    }

    #[test]
    fn the_response_future_is_send_when_the_inner_future_is() {
        assert_send::<FutureOf<Breaker<ReadyFn>>>();
        assert_send::<FutureOf<Breaker<BoxedFn>>>();
        assert_send::<FutureOf<WithFallback>>();
        assert_static::<FutureOf<Breaker<BoxedFn>>>();
    }
}
