//! Behaviours ported from resilience4j (`CircuitBreakerStateMachineTest` and its `internal`
//! tests): forced and manual states, the failure-rate and slow-call rules, half-open with
//! several probes, events and their order, cancelled calls.

use super::*;

// resilience4j shouldThrowCallNotPermittedExceptionWhenStateIsForcedOpen and failsafe-go
// "should reject initial execution when circuit open" (cb.Open()): a breaker opened by
// hand rejects its first call, and counts it as not permitted.
#[tokio::test(start_paused = true)]
async fn a_forced_open_breaker_rejects_with_its_own_reason_and_counts_it() {
    let (mut svc, handle, calls) = rig_rejecting(Builder::new());
    handle.force_open();
    let error = call(&mut svc, Req::Ok).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().unwrap();
    assert_eq!(
        (rejected.reason(), rejected.state(), rejected.next_probe()),
        (Reason::ForcedOpen, State::ForcedOpen, NextProbe::Manual)
    );
    assert_eq!(handle.snapshot().counts.skipped_forced_open, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

// resilience4j shouldForceOpenCircuitBreaker, and Polly
// Should_open_circuit_and_block_calls_if_manual_override_open,
// Should_hold_circuit_open_despite_elapsed_time_if_manual_override_open and
// Should_close_circuit_again_on_reset_after_manual_override: forced open never turns
// half-open, however long past the wait duration; a reset closes it.
#[tokio::test(start_paused = true)]
async fn forced_open_never_probes_however_long_it_waits() {
    let (mut svc, handle, calls) = rig(Builder::new().cooldown(Cooldown::Time(secs(5))));
    handle.force_open();
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::ForcedOpen));
    advance(secs(6)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::ForcedOpen));
    advance(secs(24 * 3600)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::ForcedOpen));
    assert_eq!(handle.state(), State::ForcedOpen);
    assert!(!handle.allow_probe(), "forced open waits for a reset");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(handle.snapshot().counts.skipped_forced_open, 3);
    handle.reset();
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

// resilience4j shouldOnlyPermitFourCallsInHalfOpenState and
// shouldThrowCallNotPermittedExceptionWhenNotFurtherTestCallsArePermitted (and
// failsafe-go "should reject excessive attempts when breaker half-open"): exactly the
// permitted number of probes at once, the rest turned away as half-open-full; the same
// again in the next half-open.
#[tokio::test(start_paused = true)]
async fn half_open_admits_exactly_the_permitted_probes_at_once() {
    let (mut svc, handle, calls) = half_open_rig(4);
    for round in 0..2 {
        fail_n(&mut svc, 1).await;
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(start_waiting(&mut svc).await);
        }
        assert_eq!(handle.state(), State::HalfOpen);
        for _ in 0..2 {
            assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::HalfOpenFull));
        }
        assert_eq!(handle.snapshot().probes_in_flight, 4);
        // The first probe fails: open again (and the others are written off).
        let (first, tx) = held.remove(0);
        tx.send(false).unwrap();
        assert!(first.await.is_err());
        assert_eq!(handle.state(), State::Open, "round {round}");
        for (future, tx) in held {
            tx.send(true).unwrap();
            assert!(future.await.is_ok());
        }
        // Back to closed for the next round (the late successes changed nothing).
        assert_eq!(handle.state(), State::Open);
        handle.reset();
    }
    assert_eq!(calls.load(Ordering::SeqCst), 10);
}

// resilience4j shouldIncreaseCounterOnReleasePermission: a permission released without
// an outcome frees its slot for another probe.
#[tokio::test(start_paused = true)]
async fn a_probe_given_back_without_an_outcome_frees_its_slot() {
    let (mut svc, handle, calls) = half_open_rig(2);
    fail_n(&mut svc, 1).await;
    let (a, _tx_a) = start_waiting(&mut svc).await;
    let (_b, _tx_b) = start_waiting(&mut svc).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::HalfOpenFull));
    drop(a); // cancelled: its slot is free
    assert_eq!(handle.snapshot().probes_in_flight, 1);
    assert_eq!(handle.peek(), Advice::Probe);
    // A reservation from poll_ready that is never used gives its slot back too.
    let mut reserving = svc.clone();
    reserving.ready().await.unwrap();
    assert_eq!(handle.snapshot().probes_in_flight, 2);
    drop(reserving);
    assert_eq!(handle.snapshot().probes_in_flight, 1);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    let counts = handle.snapshot().counts;
    assert_eq!((counts.cancelled, counts.abandoned), (1, 1));
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

// resilience4j shouldOpenAfterFailureRateThresholdExceeded: a count window of 5, 50 %:
// three failures and a success leave it closed with the rate unknown (-1) until the
// window is full; the fifth outcome, a success, opens it at 60 %, and the next call is
// not permitted.
#[tokio::test(start_paused = true)]
async fn the_failure_rate_is_unknown_until_the_minimum_then_trips_on_a_success() {
    let (lines, observer) = recorder();
    let rates = Arc::new(Mutex::new(Vec::new()));
    let sink = rates.clone();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(5), 5)
        .on_event(move |event| {
            observer(event);
            if let Event::Recorded { failure_rate, .. } = event {
                sink.lock().unwrap().push(*failure_rate);
            }
        }));
    fail_n(&mut svc, 3).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().window.failures, 3);
    assert_eq!(handle.snapshot().window.calls, 4);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Open);
    assert_eq!(
        *rates.lock().unwrap(),
        vec![Some(-1.0), Some(-1.0), Some(-1.0), Some(-1.0), Some(60.0)]
    );
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    let counts = handle.snapshot().counts;
    assert_eq!(
        (counts.successes, counts.failures, counts.skipped_open),
        (2, 3, 1)
    );
    // resilience4j CircuitBreakerEventPublisherTest: the outcome is published before the
    // transition it causes.
    let lines = taken(&lines);
    assert_eq!(
        lines[lines.len() - 3..],
        [
            "recorded success".to_string(),
            "transition closed->open tripped".to_string(),
            "skipped open".to_string()
        ]
    );
}

// resilience4j shouldOpenAfterFailureRateThresholdExceeded2: a time window; failures
// spread over seconds inside it trip the breaker once their share reaches the rate.
#[tokio::test(start_paused = true)]
async fn a_time_window_trips_on_failures_spread_across_its_buckets() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(20)), 5));
    for req in [Req::Ok, Req::Ok, Req::Ok, Req::Fail, Req::Fail] {
        let _ = got(&mut svc, req).await;
        advance(secs(1)).await;
    }
    assert_eq!(handle.state(), State::Closed, "2 of 5 is 40 %");
    fail_n(&mut svc, 1).await; // 3 of 6: 50 %
    assert_eq!(handle.state(), State::Open);
}

// resilience4j shouldOpenAfterSlowCallRateThresholdExceededUsingMockClock: slow calls
// (above 4 s) open the breaker. resilience4j keeps a slow-call rate apart from the
// failure rate; ours counts a slow success as a failure of the trip policy, so the same
// sequence (slow, slow, fast, fast, slow) trips a 50 % failure rate at 60 %.
#[tokio::test(start_paused = true)]
async fn slow_successes_count_as_failures_and_trip_the_rate() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(5), 5)
        .slow_call_threshold(secs(4)));
    for took in [5, 5, 1, 1] {
        assert_eq!(
            got(&mut svc, Req::Slow(secs(took))).await,
            Ok(Source::Service),
            "the answer is good, whatever the breaker counts"
        );
    }
    assert_eq!(handle.snapshot().window.failures, 2);
    assert_eq!(handle.state(), State::Closed);
    let _ = got(&mut svc, Req::Slow(secs(5))).await;
    assert_eq!(handle.state(), State::Open);
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.counts.failures, snapshot.counts.successes),
        (3, 2)
    );
    assert!(snapshot.last_failure.unwrap().message.contains("slow call"));
}

// resilience4j shouldOpenAfterSlowCallRateThresholdExceeded (a slow call is one whose
// duration exceeds the threshold): exactly the threshold is not slow, a nanosecond more is.
#[tokio::test(start_paused = true)]
async fn a_call_exactly_at_the_slow_call_threshold_is_not_slow() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .slow_call_threshold(secs(4)));
    let _ = got(&mut svc, Req::Slow(secs(4))).await;
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counts.successes, 1);
    let _ = got(&mut svc, Req::Slow(secs(4) + NS)).await;
    assert_eq!(handle.state(), State::Open);
}

// resilience4j shouldOpenAfterSlowCallRateThresholdExceeded, call 1: a slow call that
// fails is one failure, not two.
#[tokio::test(start_paused = true)]
async fn a_slow_failure_counts_once() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(2)
        .slow_call_threshold(secs(4)));
    assert_eq!(
        got(&mut svc, Req::SlowFail(secs(5))).await,
        Err(FAILED.into())
    );
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(
        (snapshot.counts.failures, snapshot.consecutive_failures),
        (1, 1)
    );
}

// resilience4j shouldTransitionToHalfOpenAfterPassedWaitDuration
// (transitionToOpenStateFor(2h)): held open for the duration, then the next call goes
// through. resilience4j reports OPEN; ours, a person's hold, is ForcedOpen until it ends.
#[tokio::test(start_paused = true)]
async fn open_for_holds_the_breaker_for_the_duration_then_probes() {
    let (mut svc, handle, calls) = rig(Builder::new());
    handle.open_for(secs(2 * 3600));
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::ForcedOpen));
    advance(secs(3600)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::ForcedOpen));
    assert_eq!(handle.snapshot().retry_after(), Some(secs(3600)));
    assert_eq!(handle.snapshot().counts.skipped_forced_open, 2);
    advance(secs(3600) - NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::ForcedOpen));
    advance(NS).await;
    let mut transitions = handle.subscribe();
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(
        summary(&drain(&mut transitions)),
        probe_closed_from(State::ForcedOpen)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

// resilience4j shouldTransitionToHalfOpenAfterPassedWaitUntil: held open until an
// instant, then the next call goes through.
#[tokio::test(start_paused = true)]
async fn open_until_holds_the_breaker_until_the_instant_then_probes() {
    let (mut svc, handle, _) = rig(Builder::new());
    let until = now() + secs(30 * 60);
    handle.open_until(until);
    assert_eq!(
        handle.snapshot().next_probe,
        NextProbe::After {
            calls: 1,
            at: Some(until)
        }
    );
    advance(secs(15 * 60)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::ForcedOpen));
    advance(secs(15 * 60)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j open_until with an instant already past (transitionToOpenStateUntil in the
// past): documented here as "opens it for no time: the next call is a probe".
#[tokio::test(start_paused = true)]
async fn open_until_an_instant_already_past_makes_the_next_call_the_probe() {
    let (mut svc, handle, _) = rig(Builder::new());
    advance(secs(10)).await;
    handle.open_until(now() - secs(5));
    assert_eq!(handle.state(), State::ForcedOpen);
    assert_eq!(handle.peek(), Advice::Probe);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j shouldTransitionToHalfOpenAfterWaitInterval (exponential backoff from
// 5 s, multiplier 1.5): the first opening waits 5 s, the re-open after a failed probe
// 7.5 s; a close starts again from 5 s.
#[tokio::test(start_paused = true)]
async fn exponential_backoff_lengthens_each_reopen_and_a_close_restores_the_base() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(5)))
        .backoff(Backoff::exponential(1.5, Cooldown::Time(secs(60)))));
    fail_n(&mut svc, 1).await;
    advance(secs(3)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(secs(2)).await;
    assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into())); // the probe fails
    advance(secs(6)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(Duration::from_millis(1500) - NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
    // Closed again: the next opening waits the base cooldown.
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(5)));
}

// resilience4j shouldTransitionBackToOpenStateWhenFailureRateIsAboveThreshold: in
// resilience4j half-open evaluates a failure rate over its permitted calls. Ours (documented:
// "failure opens it again") re-opens on the first failed probe, whatever came before.
#[tokio::test(start_paused = true)]
async fn any_failed_probe_reopens_even_after_successful_ones() {
    let (mut svc, handle, _) = half_open_rig(4);
    fail_n(&mut svc, 1).await;
    for _ in 0..3 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    }
    assert_eq!(handle.state(), State::HalfOpen);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().cause, Some(Cause::ProbeFailed));
}

// resilience4j shouldTransitionBackToOpenStateWhenSlowCallRateIsAboveThreshold: a slow
// probe is a failed probe.
#[tokio::test(start_paused = true)]
async fn a_slow_probe_reopens_the_breaker() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .slow_call_threshold(secs(4)));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Slow(secs(5))).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().cause, Some(Cause::ProbeFailed));
    assert_eq!(got(&mut svc, Req::Slow(secs(1))).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j shouldTransitionBackToClosedStateWhenFailureIsBelowThreshold: after the
// half-open closes, the closed state's window starts empty (-1), and the next success is
// its first outcome.
#[tokio::test(start_paused = true)]
async fn after_closing_the_failure_rate_window_starts_empty() {
    let rates = Arc::new(Mutex::new(Vec::new()));
    let sink = rates.clone();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(5), 5)
        .cooldown(Cooldown::Calls(1))
        .half_open_probes(3)
        .on_event(move |event| {
            if let Event::Recorded {
                failure_rate: Some(rate),
                ..
            } = event
            {
                sink.lock().unwrap().push(*rate);
            }
        }));
    fail_n(&mut svc, 5).await;
    assert_eq!(handle.state(), State::Open);
    for _ in 0..3 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    }
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().window, Default::default());
    rates.lock().unwrap().clear();
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.snapshot().window.calls, 1);
    assert_eq!(*rates.lock().unwrap(), vec![-1.0]);
}

// resilience4j shouldResetMetrics and shouldResetClosedState: a reset clears the
// window and the run of failures (our running totals are a log of calls, and stay).
#[tokio::test(start_paused = true)]
async fn a_reset_clears_the_window_and_the_run_of_failures() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Calls(5), 5));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().window.calls, 2);
    handle.reset();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.window, Default::default());
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.counts.made, 2);
}

// resilience4j shouldDisableCircuitBreaker: disabled permits every call and records
// nothing, however many fail.
#[tokio::test(start_paused = true)]
async fn disabled_permits_everything_and_records_nothing() {
    let (lines, observer) = recorder();
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(1)
        .mode(Mode::Disabled)
        .on_event(observer));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    fail_n(&mut svc, 4).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.last_failure, None);
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    assert!(taken(&lines).is_empty(), "no outcome is reported");
}

// resilience4j shouldReleasePermissionWhenExceptionIgnored: three successful probes of
// four, then an ignored one gives its permission back and the breaker stays half-open.
// resilience4j then closes on a failure (25 % is below 50 %); ours needs a fourth
// success, and a failure would re-open it.
#[tokio::test(start_paused = true)]
async fn an_ignored_probe_releases_its_permission_and_counts_for_nothing() {
    let (mut svc, handle, _) = half_open_rig(4);
    fail_n(&mut svc, 1).await;
    for _ in 0..3 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
        assert_eq!(handle.state(), State::HalfOpen);
    }
    assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(handle.snapshot().probes_in_flight, 0);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j shouldIgnoreExceptionsAndThenTransitionToClosed: any number of ignored
// probes keep it half-open; then the permitted number of successes closes it.
#[tokio::test(start_paused = true)]
async fn only_ignored_probes_keep_it_half_open_until_real_successes_close_it() {
    let (mut svc, handle, _) = half_open_rig(4);
    fail_n(&mut svc, 1).await;
    for _ in 0..4 {
        let _ = got(&mut svc, Req::Ignore).await;
        assert_eq!(handle.state(), State::HalfOpen);
    }
    probes_succeed_half_open(&mut svc, &handle, 3).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j shouldRecordMetricsInMetricsOnlyState: metrics-only records every
// outcome and permits every call. resilience4j's METRICS_ONLY never changes state; ours
// (observe-only) moves through the states as an enabled breaker would, and says so on
// the answers an enabled breaker would have skipped.
#[tokio::test(start_paused = true)]
async fn observe_only_records_and_trips_but_makes_every_call() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(5), 5)
        .cooldown(Cooldown::Time(secs(30)))
        .mode(Mode::ObserveOnly));
    let mut transitions = handle.subscribe();
    fail_n(&mut svc, 3).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Open);
    let t = transitions.try_recv().unwrap();
    assert_eq!((t.to, t.mode), (State::Open, Mode::ObserveOnly));
    assert_eq!(
        got(&mut svc, Req::Ok).await,
        Ok(Source::Shadowed(Reason::Open))
    );
    assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
    assert_eq!(calls.load(Ordering::SeqCst), 7);
    let counts = handle.snapshot().counts;
    assert_eq!(counts.would_have_skipped, 2);
    assert_eq!(counts.skipped(), 0);
}

// resilience4j circuitBreakerInitializeInMetricOnlyState: a breaker can start in the
// observe-only mode.
#[tokio::test(start_paused = true)]
async fn a_breaker_can_start_observe_only() {
    let (_, handle, _) = rig(Builder::new().mode(Mode::ObserveOnly));
    assert_eq!(handle.mode(), Mode::ObserveOnly);
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j circuitBreakerDoesNotPublishStateTransitionEventsForInternalTransitions:
// staying in a state publishes nothing: forcing open twice, resetting a closed breaker,
// setting the mode it has.
#[tokio::test(start_paused = true)]
async fn staying_in_a_state_publishes_no_transition() {
    let (lines, observer) = recorder();
    let (_, handle, _) = rig(Builder::new().on_event(observer));
    let mut transitions = handle.subscribe();
    handle.reset();
    handle.force_open();
    handle.force_open();
    handle.set_mode(Mode::Disabled);
    handle.set_mode(Mode::Disabled);
    handle.set_mode(Mode::ObserveOnly);
    handle.set_mode(Mode::ObserveOnly);
    handle.reset();
    handle.reset();
    assert_eq!(
        summary(&drain(&mut transitions)),
        vec![
            (State::Closed, State::ForcedOpen, Cause::ForcedOpen),
            (State::ForcedOpen, State::Closed, Cause::Reset),
        ]
    );
    assert_eq!(
        taken(&lines),
        vec![
            "transition closed->forced_open forced_open",
            "mode enabled->disabled",
            "mode disabled->observe_only",
            "transition forced_open->closed reset",
        ]
    );
}

// resilience4j circuitBreakerTransitionsToOpenAfterWaitDurationInHalfOpenState
// (maxWaitDurationInHalfOpenState 1 s): half-open past its limit re-opens; ours at the
// exact deadline, with the cause `DwellExceeded`, and the probe's late result changes
// nothing.
#[tokio::test(start_paused = true)]
async fn half_open_past_its_dwell_limit_reopens_at_the_exact_deadline() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(5)))
        .max_half_open_dwell(Some(secs(1))));
    fail_n(&mut svc, 1).await;
    advance(secs(5)).await;
    let (probe, tx) = start_waiting(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    advance(secs(1) - NS).await;
    assert_eq!(handle.state(), State::HalfOpen);
    advance(NS).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.cause, Some(Cause::DwellExceeded));
    // The cooldown runs from the deadline.
    assert_eq!(snapshot.retry_after(), Some(secs(5)));
    tx.send(true).unwrap();
    assert!(probe.await.is_ok());
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().counts.late, 1);
}

// resilience4j shouldNotAllowTransitionFromClosedToHalfOpen: a closed breaker cannot be
// sent to half-open (our `allow_probe` applies only to an open breaker).
#[tokio::test(start_paused = true)]
async fn a_closed_breaker_cannot_be_made_half_open() {
    let (_, handle, _) = rig(Builder::new());
    assert!(!handle.allow_probe());
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.peek(), Advice::Call);
}

// resilience4j CircuitBreakerTest shouldInvokeAsyncApply... / CircuitBreakerFutureTest
// (a cancelled future releases its permission and is not a failure): a call whose
// future is dropped is cancelled, neither a success nor a failure.
#[tokio::test(start_paused = true)]
async fn a_cancelled_call_is_neither_a_success_nor_a_failure() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(2));
    fail_n(&mut svc, 1).await;
    let (pending, _tx) = start_waiting(&mut svc).await;
    drop(pending);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.consecutive_failures, 1);
    assert_eq!(snapshot.counts.cancelled, 1);
    assert_eq!(
        (snapshot.counts.failures, snapshot.counts.successes),
        (1, 0)
    );
    // A timeout inside the breaker is a failure, though (see Hystrix below).
}

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
        let (mut svc, handle, _) = half_open_rig(1);
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
// guarantee in docs/guarantees.md: "calls in flight across a change of state or of mode are not
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
        probe_closed_from(State::ForcedOpen)
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
