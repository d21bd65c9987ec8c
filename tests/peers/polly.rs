//! Behaviours ported from Polly (`CircuitBreakerSpecs`, `AdvancedCircuitBreakerSpecs`,
//! `Polly.Core.Tests/CircuitBreaker/**`: `CircuitStateControllerTests`,
//! `CircuitBreakerManualControl`): breaking, isolating and closing by hand, the advanced
//! breaker's sampling duration and minimum throughput, the break and reset callbacks.

use super::*;

// Polly Should_open_circuit_blocking_executions_and_noting_the_last_raised_exception:
// after the threshold the circuit blocks and remembers the last error.
#[tokio::test(start_paused = true)]
async fn an_opened_breaker_remembers_the_last_error() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(2));
    fail_n(&mut svc, 2).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.last_failure.unwrap().message.as_ref(), FAILED);
}

// Polly Should_set_LastException_on_handling_exception_even_when_not_breaking.
#[tokio::test(start_paused = true)]
async fn the_last_failure_is_kept_even_when_the_breaker_stays_closed() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(5));
    fail_n(&mut svc, 1).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    let last = snapshot.last_failure.unwrap();
    assert_eq!((last.message.as_ref(), last.at), (FAILED, now()));
}

// Polly Should_not_open_circuit_if_exception_raised_is_not_the_specified_exception:
// errors the classifier does not call failures never open it.
#[tokio::test(start_paused = true)]
async fn errors_that_are_not_failures_never_open_the_breaker() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(2));
    for _ in 0..10 {
        let _ = got(&mut svc, Req::Ignore).await;
    }
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().last_failure, None);
}

// Polly Should_halfopen_circuit_after_the_specified_duration_has_passed: at exactly the
// break duration the circuit lets the trial through (Polly's boundary is ours).
#[tokio::test(start_paused = true)]
async fn at_exactly_the_break_duration_the_trial_call_goes_through() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(2)
        .cooldown(Cooldown::Time(secs(60))));
    fail_n(&mut svc, 2).await;
    advance(secs(60)).await;
    assert_eq!(handle.peek(), Advice::Probe);
    assert_eq!(handle.state(), State::Open, "open until a call arrives");
    let (probe, tx) = start_waiting(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    tx.send(true).unwrap();
    probe.await.unwrap();
    assert_eq!(handle.state(), State::Closed);
}

// Polly Should_only_allow_single_execution_on_first_entering_halfopen_state: one trial
// in half-open; a second caller gets the fallback (no thundering herd).
#[tokio::test(start_paused = true)]
async fn only_one_trial_call_goes_through_in_half_open() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(60))));
    fail_n(&mut svc, 1).await;
    advance(secs(60)).await;
    let (probe, tx) = start_waiting(&mut svc).await;
    for _ in 0..5 {
        assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::HalfOpenFull));
    }
    assert_eq!(handle.snapshot().next_probe, NextProbe::InFlight);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    tx.send(true).unwrap();
    probe.await.unwrap();
    assert_eq!(handle.snapshot().counts.skipped_half_open_full, 5);
}

// Polly Should_allow_single_execution_per_break_duration_in_halfopen_state: a trial that
// never ends does not block the circuit for ever. Polly permits another trial after
// another break duration; ours re-opens at the half-open dwell limit, and after the
// cooldown the next call is a fresh trial.
#[tokio::test(start_paused = true)]
async fn a_trial_that_never_ends_does_not_keep_the_breaker_half_open() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(60)))
        .max_half_open_dwell(Some(secs(60))));
    fail_n(&mut svc, 1).await;
    advance(secs(60)).await;
    let (_hung, _tx) = start_waiting(&mut svc).await;
    advance(secs(60)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(secs(60)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

// Polly Should_be_able_to_reset_automatically_opened_circuit_without_specified_duration_passing.
#[tokio::test(start_paused = true)]
async fn a_reset_closes_a_tripped_breaker_before_its_cooldown() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(2)
        .cooldown(Cooldown::Time(secs(3600))));
    fail_n(&mut svc, 2).await;
    handle.reset();
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    // And the run of failures starts from zero: one failure does not re-open it.
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Closed);
}

// Polly Should_call_onbreak_when_breaking_circuit_first_time_but_not_for_subsequent_calls_placed_through_open_circuit
// and Should_not_call_onreset_on_initialise / on successive successful calls.
#[tokio::test(start_paused = true)]
async fn on_transition_fires_once_per_change_and_not_for_calls_through_an_open_breaker() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let (mut svc, _, _) = rig(Builder::new()
        .failure_threshold(2)
        .cooldown(Cooldown::Time(secs(60)))
        .on_transition(move |t| sink.lock().unwrap().push((t.from, t.to, t.cause))));
    for _ in 0..3 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    }
    assert!(seen.lock().unwrap().is_empty());
    fail_n(&mut svc, 2).await;
    for _ in 0..3 {
        assert_eq!(got(&mut svc, Req::Fail).await, skipped(Reason::Open));
    }
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(State::Closed, State::Open, Cause::Tripped)]
    );
}

// Polly Should_call_onbreak_when_breaking_circuit_first_time_but_not_for_subsequent_call_failure_which_arrives_on_open_state_though_started_on_closed_state.
#[tokio::test(start_paused = true)]
async fn a_failure_started_while_closed_that_ends_after_the_opening_opens_nothing_again() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(60))));
    let mut transitions = handle.subscribe();
    let (long_running, tx) = start_waiting(&mut svc).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    let due = handle.snapshot().next_probe;
    advance(secs(10)).await;
    tx.send(false).unwrap();
    assert!(
        long_running.await.is_err(),
        "the caller still sees its error"
    );
    assert_eq!(
        summary(&drain(&mut transitions)),
        vec![(State::Closed, State::Open, Cause::Tripped)]
    );
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.next_probe, due, "the cooldown is not restarted");
    assert_eq!(snapshot.counts.late, 1);
}

// Polly Should_call_onreset_when_automatically_closing_circuit_but_not_when_halfopen and
// Should_call_onhalfopen_when_automatically_transitioning_to_halfopen_due_to_subsequent_execution:
// open, half-open (when the trial starts), closed (when it succeeds), in that order.
#[tokio::test(start_paused = true)]
async fn the_half_open_transition_comes_with_the_trial_and_the_close_after_it() {
    let (lines, observer) = recorder();
    let (mut svc, _, _) = rig(Builder::new()
        .failure_threshold(2)
        .cooldown(Cooldown::Time(secs(60)))
        .on_event(observer));
    fail_n(&mut svc, 2).await;
    advance(secs(60)).await;
    let (trial, tx) = start_waiting(&mut svc).await;
    let before = taken(&lines);
    assert_eq!(
        before,
        vec![
            "recorded failure",
            "recorded failure",
            "transition closed->open tripped",
            "transition open->half_open cooldown_elapsed",
        ]
    );
    tx.send(true).unwrap();
    trial.await.unwrap();
    assert_eq!(
        taken(&lines),
        vec![
            "recorded success probe",
            "transition half_open->closed probe_succeeded"
        ]
    );
}

// Polly Should_call_onbreak_with_a_state_of_half_open: a failed trial breaks the circuit
// from half-open.
#[tokio::test(start_paused = true)]
async fn a_failed_trial_breaks_from_half_open() {
    let (mut svc, handle, _) = half_open_rig(1);
    fail_n(&mut svc, 1).await;
    let mut transitions = handle.subscribe();
    fail_n(&mut svc, 1).await;
    assert_eq!(
        summary(&drain(&mut transitions)),
        vec![
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Open, Cause::ProbeFailed),
        ]
    );
}

// Polly Should_call_onbreak_with_the_correct_timespan: the opening says when it will
// probe: the break duration from the failure.
#[tokio::test(start_paused = true)]
async fn the_opening_transition_says_when_the_probe_goes() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(90))));
    let mut transitions = handle.subscribe();
    fail_n(&mut svc, 1).await;
    let t = transitions.try_recv().unwrap();
    assert_eq!(t.at, now());
    assert_eq!(t.consecutive_failures, 1);
    assert_eq!(
        t.next_probe,
        NextProbe::After {
            calls: 1,
            at: Some(now() + secs(90))
        }
    );
}

// Polly Should_be_able_to_handle_a_duration_of_timespan_maxvalue and
// Should_open_circuit_with_timespan_maxvalue_if_manual_override_open: the longest
// durations neither overflow nor panic.
#[tokio::test(start_paused = true)]
async fn the_longest_durations_neither_overflow_nor_panic() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(Duration::MAX))
        .max_half_open_dwell(Some(Duration::MAX)));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    assert!(handle.snapshot().retry_after().unwrap() >= secs(99 * 365 * 24 * 3600));
    handle.reset();
    handle.open_for(Duration::MAX);
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::ForcedOpen));
    assert!(handle.snapshot().retry_after().unwrap() >= secs(99 * 365 * 24 * 3600));
}

// Polly AdvancedCircuitBreakerSpecs
// Should_not_open_circuit_if_failure_threshold_exceeded_but_throughput_threshold_not_met:
// 100 % failures below the minimum throughput do not open it.
#[tokio::test(start_paused = true)]
async fn all_failures_below_the_minimum_throughput_do_not_open() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(10)), 4));
    fail_n(&mut svc, 3).await;
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// Polly AdvancedCircuitBreakerSpecs
// Should_open_circuit_with_the_last_raised_exception_if_failure_threshold_exceeded_and_throughput_threshold_equalled_within_timeslice_low_failure_threshold:
// exactly the rate, with exactly the minimum throughput, opens it (the comparisons are
// inclusive).
#[tokio::test(start_paused = true)]
async fn exactly_the_rate_at_exactly_the_minimum_throughput_opens() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(10)), 4));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await; // 2 of 4
    assert_eq!(handle.state(), State::Open);
}

// Polly AdvancedCircuitBreakerSpecs
// Should_not_open_circuit_if_failures_at_end_of_last_timeslice_below_failure_threshold_and_failures_in_beginning_of_new_timeslice_where_total_equals_failure_threshold
// (rolling window): outcomes that have left the window no longer count, those still in
// it do.
#[tokio::test(start_paused = true)]
async fn a_rolling_window_counts_only_the_outcomes_still_inside_it() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(10)), 4));
    // t = 0 s: two successes and a failure.
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    fail_n(&mut svc, 1).await;
    // t = 9 s: one failure; 2 of 4 in the window would open it...
    advance(secs(10)).await;
    // ...but at t = 10 s the first three have left it: one failure of one call.
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().window.calls, 1);
    assert_eq!(handle.state(), State::Closed);
    advance(secs(5)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await; // 2 of 4, all inside the window
    assert_eq!(handle.state(), State::Open);
}

// Polly Should_not_execute_action_when_cancellationToken_cancelled_before_execute: a call
// given up before it is made never reaches the service and counts nothing against it.
#[tokio::test(start_paused = true)]
async fn a_call_given_up_before_it_is_made_never_reaches_the_service() {
    let (svc, handle, calls) = rig(Builder::new().failure_threshold(1));
    let mut reserved = svc.clone();
    reserved.ready().await.unwrap();
    drop(reserved);
    let snapshot = handle.snapshot();
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(snapshot.counts.abandoned, 1);
    assert_eq!(snapshot.counts.made, 0);
    assert_eq!(snapshot.state, State::Closed);
}

// Polly Should_report_cancellation_when_both_open_circuit_and_cancellation: the caller
// of an open circuit is told it is open, and nothing is cancelled.
#[tokio::test(start_paused = true)]
async fn a_call_dropped_at_an_open_breaker_is_a_skip_not_a_cancellation() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(1));
    fail_n(&mut svc, 1).await;
    let skipped_call = start(&mut svc, Req::Ok).await;
    drop(skipped_call);
    let counts = handle.snapshot().counts;
    assert_eq!((counts.skipped_open, counts.cancelled), (1, 0));
    assert_eq!(
        counts.arrived,
        counts.made + counts.skipped() + counts.abandoned
    );
}

// Polly Should_set_LastException_to_null_on_circuit_reset: Polly forgets the last
// exception on a reset. Ours keeps the last failure as history (when it happened and
// what it said), while the reset clears the run of failures.
#[tokio::test(start_paused = true)]
async fn a_reset_clears_the_run_of_failures_but_keeps_the_last_failure_as_history() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(1));
    fail_n(&mut svc, 1).await;
    handle.reset();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.last_failure.unwrap().message.as_ref(), FAILED);
}

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
