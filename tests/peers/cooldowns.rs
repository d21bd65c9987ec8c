//! Cooldowns and waits: cooldowns in calls and in time, backoff and jitter, the waits a
//! service asks for (`Retry-After`), holds, and what a caller is told of the wait left.

use super::*;

// A cooldown of N calls makes the N-th call after the opening one the probe; skipped calls
// count (like a Hystrix sleep window counted in requests).
#[tokio::test(start_paused = true)]
async fn a_cooldown_in_calls_makes_the_nth_call_after_the_opening_the_probe() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Calls(4)));
    fail_n(&mut svc, 3).await;
    for left in [3, 2, 1] {
        let answer = call(&mut svc, Req::Ok).await.unwrap();
        assert_eq!(answer.source(), Source::Fallback(Reason::Open));
        assert_eq!(answer.next_probe().calls(), Some(left));
    }
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j CircuitBreakerResultHandlingTest (a result-derived wait,
// transitionToOpenStateFor) and our `Failure::retry_after`: one failure that says how
// long to wait opens at once for that long.
#[tokio::test(start_paused = true)]
async fn a_failure_that_says_how_long_to_wait_opens_at_once_for_that_long() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Time(secs(30))));
    assert!(call(&mut svc, Req::RetryAfter(secs(7))).await.is_err());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.cause, Some(Cause::RetryAfter));
    assert_eq!(snapshot.retry_after(), Some(secs(7)));
    advance(secs(7)).await;
    assert_eq!(handle.peek(), Advice::Probe);
}

// resilience4j CircuitBreakerExceptionHandlingTest (an exception recorded with no state
// change) versus our permanent failure: one that will not pass by itself opens until a
// reset and never probes.
#[tokio::test(start_paused = true)]
async fn a_permanent_failure_opens_until_a_reset_and_never_probes() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Time(secs(1))));
    assert!(call(&mut svc, Req::Permanent).await.is_err());
    advance(secs(3600)).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.next_probe, NextProbe::Manual);
    assert!(!handle.allow_probe());
    handle.reset();
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j IntervalFunction.ofExponentialBackoff, counted in calls (ours): the
// re-opens in a row wait 2, 4, 8, then the cap 8 calls; a close restores 2.
#[tokio::test(start_paused = true)]
async fn backoff_in_calls_doubles_each_reopen_up_to_its_cap() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(2))
        .backoff(Backoff::exponential(2.0, Cooldown::Calls(8))));
    fail_n(&mut svc, 1).await;
    for wait in [2u64, 4, 8, 8] {
        assert_eq!(handle.snapshot().next_probe.calls(), Some(wait));
        for _ in 1..wait {
            assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
        }
        fail_n(&mut svc, 1).await; // the probe fails
    }
    assert_eq!(handle.snapshot().next_probe.calls(), Some(8));
    for _ in 1..8 {
        let _ = got(&mut svc, Req::Ok).await;
    }
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().next_probe.calls(), Some(2));
}

// resilience4j IntervalFunction.ofExponentialRandomBackoff (randomized wait within
// bounds), ours as jitter with a seed: each cooldown is within ±fraction of the base, and
// two breakers with the same seed wait the same.
#[tokio::test(start_paused = true)]
async fn jittered_cooldowns_stay_within_their_fraction_and_repeat_with_a_seed() {
    let mut waits = Vec::new();
    for _ in 0..2 {
        let (mut svc, handle, _) = rig(Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(100)))
            .jitter(0.1)
            .jitter_seed(42));
        let mut these = Vec::new();
        for _ in 0..20 {
            fail_n(&mut svc, 1).await;
            let wait = handle.snapshot().retry_after().unwrap();
            assert!(wait >= secs(90) && wait <= secs(110), "{wait:?}");
            these.push(wait);
            handle.reset();
        }
        waits.push(these);
    }
    assert_eq!(waits[0], waits[1]);
    assert!(
        waits[0].iter().any(|w| *w != waits[0][0]),
        "jitter spreads them"
    );
}

// Polly v8 OnActionFailureAsync_EnsureBreakDurationNotOverflow / a result-derived wait
// (resilience4j): a wait the service asks for is capped by `max_retry_after`.
#[tokio::test(start_paused = true)]
async fn a_wait_asked_for_by_the_service_is_capped() {
    let (mut svc, handle, _) = rig(Builder::new().max_retry_after(secs(300)));
    assert!(call(&mut svc, Req::RetryAfter(secs(86_400))).await.is_err());
    assert_eq!(handle.snapshot().retry_after(), Some(secs(300)));
}

// Failure::retry_after's docs: "with a cooldown in calls, the probe waits for both".
#[tokio::test(start_paused = true)]
async fn a_retry_after_with_a_cooldown_in_calls_waits_for_both() {
    let (mut svc, handle, _) = rig(Builder::new().cooldown(Cooldown::Calls(3)));
    assert!(call(&mut svc, Req::RetryAfter(secs(10))).await.is_err());
    // Many calls pass, but not the time: still open.
    for _ in 0..5 {
        assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    }
    handle.reset();
    assert!(call(&mut svc, Req::RetryAfter(secs(10))).await.is_err());
    // The time passes, but not the calls: still open until the third.
    advance(secs(10)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// Polly v8 OnActionFailureAsync_EnsureCorrectBehavior (HalfOpen -> Open with the break
// duration the result asks for): a failed probe that says how long to wait re-opens for
// that long.
#[tokio::test(start_paused = true)]
async fn a_failed_probe_that_says_how_long_to_wait_reopens_for_that_long() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(5))));
    fail_n(&mut svc, 1).await;
    advance(secs(5)).await;
    assert!(call(&mut svc, Req::RetryAfter(secs(42))).await.is_err());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.cause, Some(Cause::ProbeFailed));
    assert_eq!(snapshot.retry_after(), Some(secs(42)));
}

// Time and calls keep counting under the kill switch, against Polly's isolate:
// killed through the whole cooldown, the breaker probes on the first call after the
// revive.
#[tokio::test(start_paused = true)]
async fn a_cooldown_in_time_runs_on_under_the_kill_switch() {
    let kill = KillSwitch::new();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(30)))
        .kill_switch(kill.clone()));
    fail_n(&mut svc, 1).await;
    kill.kill();
    advance(secs(45)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Killed));
    assert_eq!(handle.state(), State::Open);
    kill.revive();
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j shouldTransitionToHalfOpenAfterWaitDuration and gobreaker's expiry, to the
// nanosecond for any cooldown: with neither backoff nor jitter, a cooldown in time is
// waited exactly as configured, however long (a float of seconds holds only 53 bits).
#[tokio::test(start_paused = true)]
async fn a_long_cooldown_in_time_is_waited_to_the_nanosecond() {
    for cooldown in [
        Duration::new(10_000_000, 1),
        Duration::new(1_000_000_000, 1),
    ] {
        let (mut svc, handle, _) = rig(Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(cooldown)));
        fail_n(&mut svc, 1).await;
        assert_eq!(handle.snapshot().retry_after(), Some(cooldown));
        advance(cooldown - NS).await;
        assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
        advance(NS).await;
        assert_eq!(
            got(&mut svc, Req::Ok).await,
            Ok(Source::Probe),
            "{cooldown:?}"
        );
    }
}

// failsafe-go TestRemainingDelay, TestNoRemainingDelay and
// TestRemainingDelayInHalfOpenState: the wait left counts down while open and is zero
// once the cooldown is over; in half-open with a free slot it is zero. failsafe-go says 0
// for a closed breaker; ours says there is no wait to tell (`None`), and with every
// probe slot taken, that the probes decide (`None` too).
#[tokio::test(start_paused = true)]
async fn the_wait_left_counts_down_while_open_and_is_zero_once_a_probe_may_go() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(1)))
        .half_open_probes(2));
    assert_eq!(handle.snapshot().retry_after(), None);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(1)));
    advance(Duration::from_millis(110)).await;
    assert_eq!(
        handle.snapshot().retry_after(),
        Some(Duration::from_millis(890))
    );
    advance(secs(5)).await;
    assert_eq!(handle.snapshot().retry_after(), Some(Duration::ZERO));
    let (first, _tx_first) = start_waiting(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(handle.snapshot().retry_after(), Some(Duration::ZERO));
    let (second, _tx_second) = start_waiting(&mut svc).await;
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.next_probe, snapshot.retry_after()),
        (NextProbe::InFlight, None)
    );
    drop((first, second));
}

// Polly CircuitStateControllerTests Flow_Closed_HalfOpen_Open_HalfOpen_Closed: a failed
// trial re-opens; a call turned away a millisecond later is told the break duration less
// that millisecond; well after it, the next call is a trial, and its success closes.
#[tokio::test(start_paused = true)]
async fn a_rejection_after_a_failed_trial_says_how_much_of_the_break_is_left() {
    let (mut svc, handle, _) = rig_rejecting(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(5))),
    );
    fail_n(&mut svc, 1).await;
    advance(secs(5)).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    advance(Duration::from_millis(1)).await;
    let error = call(&mut svc, Req::Ok).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("a typed rejection");
    assert_eq!(
        (rejected.reason(), rejected.state()),
        (Reason::Open, State::Open)
    );
    assert_eq!(
        rejected.retry_after_from(now()),
        Some(secs(5) - Duration::from_millis(1))
    );
    advance(secs(10)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// Polly CircuitStateControllerTests BreakDurationGenerator_EnsureHalfOpenAttempts (a
// generator returning TimeSpan.Zero: the next call is the trial at once). Ours: a failure
// whose retry-after is zero opens the breaker for no time, and the next call is the
// probe.
#[tokio::test(start_paused = true)]
async fn a_failure_asking_for_no_wait_makes_the_next_call_the_probe() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Time(secs(30))));
    assert!(call(&mut svc, Req::RetryAfter(Duration::ZERO))
        .await
        .is_err());
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.state, snapshot.cause),
        (State::Open, Some(Cause::RetryAfter))
    );
    assert_eq!(snapshot.retry_after(), Some(Duration::ZERO));
    assert_eq!(handle.peek(), Advice::Probe);
    let answer = svc.ready().await.unwrap().call(Req::Ok).await.unwrap();
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(handle.state(), State::Closed);
}

// Polly CircuitBreakerResiliencePipelineBuilderTests AddCircuitBreaker_IntegrationTest
// (50 % of at least 10 in 10 s, a break of 1 s): ten failures open it once; a rejection
// is told the whole break, half a break later the half left; a failed trial opens it a
// second time with a fresh break; a break later a success closes it. Opened twice,
// half-opened twice, closed once.
#[tokio::test(start_paused = true)]
async fn opened_twice_half_opened_twice_and_closed_once_with_the_break_left_told_each_time() {
    let (lines, observer) = recorder();
    let (mut svc, handle, _) = rig_rejecting(
        Builder::new()
            .failure_rate(0.5, RateWindow::Time(secs(10)), 10)
            .cooldown(Cooldown::Time(secs(1)))
            .on_event(observer),
    );
    let retry_after = async |svc: &mut _| -> Option<Duration> {
        let error = call(svc, Req::Ok).await.unwrap_err();
        error
            .downcast_ref::<Rejected>()
            .unwrap()
            .retry_after_from(now())
    };
    let half = Duration::from_millis(500);
    fail_n(&mut svc, 10).await;
    assert_eq!(retry_after(&mut svc).await, Some(secs(1)));
    advance(half).await;
    assert_eq!(retry_after(&mut svc).await, Some(half));
    advance(half).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(retry_after(&mut svc).await, Some(secs(1)));
    advance(secs(1)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
    let transitions: Vec<_> = taken(&lines)
        .into_iter()
        .filter(|l| l.starts_with("transition"))
        .collect();
    assert_eq!(
        transitions,
        vec![
            "transition closed->open tripped",
            "transition open->half_open cooldown_elapsed",
            "transition half_open->open probe_failed",
            "transition open->half_open cooldown_elapsed",
            "transition half_open->closed probe_succeeded",
        ]
    );
}

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
