//! Behaviours ported from sony/gobreaker (`v2/gobreaker_test.go`): the consecutive-failure
//! threshold, half-open's probe slots, generations, and the counts after each transition.

use super::*;

// gobreaker TestDefaultCircuitBreaker: five failures in a row stay closed under the
// default ReadyToTrip (more than 5), a success resets the run, and the sixth in a row
// opens. Ours counts to the threshold: threshold 6 is gobreaker's default.
#[tokio::test(start_paused = true)]
async fn failures_below_the_threshold_stay_closed_and_a_success_resets_the_run() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(6));
    fail_n(&mut svc, 5).await;
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.state, snapshot.consecutive_failures),
        (State::Closed, 5)
    );
    assert_eq!(snapshot.counts.failures, 5);

    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.snapshot().consecutive_failures, 0);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().consecutive_failures, 1);
    fail_n(&mut svc, 5).await;
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.state, snapshot.consecutive_failures),
        (State::Open, 6)
    );
    assert_eq!(snapshot.counts.made, 12);
}

// gobreaker TestDefaultCircuitBreaker: an open breaker rejects a success and a failure
// alike (ErrOpenState), and neither reaches the service.
#[tokio::test(start_paused = true)]
async fn an_open_breaker_turns_away_every_call_without_calling_the_service() {
    let (mut svc, handle, calls) = rig_rejecting(Builder::new().failure_threshold(1));
    fail_n(&mut svc, 1).await;
    for req in [Req::Ok, Req::Fail, Req::Ignore] {
        let error = call(&mut svc, req).await.unwrap_err();
        let rejected = error.downcast_ref::<Rejected>().expect("a typed rejection");
        assert_eq!(
            (rejected.reason(), rejected.state()),
            (Reason::Open, State::Open)
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(handle.snapshot().counts.skipped_open, 3);
}

// gobreaker TestDefaultCircuitBreaker: open until the timeout passes (timeout - 1ms:
// open), then half-open. gobreaker probes only strictly after the expiry; ours lets the
// probe go at the exact end of the cooldown (a caller that waits exactly the time it was
// told gets the probe), so the boundary is checked to the nanosecond on our side.
#[tokio::test(start_paused = true)]
async fn the_probe_goes_at_the_exact_end_of_the_cooldown_and_not_a_nanosecond_before() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(60))));
    fail_n(&mut svc, 1).await;
    advance(secs(60) - Duration::from_millis(1)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(Duration::from_millis(1) - NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    assert_eq!(handle.snapshot().retry_after(), Some(NS));
    advance(NS).await;
    assert_eq!(handle.peek(), Advice::Probe);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// gobreaker TestDefaultCircuitBreaker: half-open to open on a failure, with a new
// expiry: the cooldown starts again from the failed probe.
#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_and_the_cooldown_runs_again_from_the_failure() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(60))));
    let mut transitions = handle.subscribe();
    fail_n(&mut svc, 1).await;
    advance(secs(60)).await;
    assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
    assert_eq!(handle.state(), State::Open);
    let failed_at = now();
    assert_eq!(
        handle.snapshot().next_probe,
        NextProbe::After {
            calls: 1,
            at: Some(failed_at + secs(60))
        }
    );
    advance(secs(60) - NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(
        summary(&drain(&mut transitions)),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Open, Cause::ProbeFailed),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
}

// gobreaker TestCustomCircuitBreaker: in half-open, excluded requests are neutral: they
// neither count nor use up MaxRequests, and the breaker stays half-open; then the first
// real failure re-opens it.
#[tokio::test(start_paused = true)]
async fn ignored_probes_give_their_slot_back_and_leave_the_breaker_half_open() {
    let (mut svc, handle, calls) = half_open_rig(3);
    fail_n(&mut svc, 1).await;
    for _ in 0..4 {
        assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
        assert_eq!(handle.state(), State::HalfOpen);
        assert_eq!(handle.snapshot().probes_in_flight, 0);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    assert_eq!(handle.snapshot().counts.ignored, 4);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// gobreaker TestCustomCircuitBreaker (MaxRequests 3): successes in half-open do not close
// it until three have succeeded; a call over the limit while the third is in flight is
// turned away (ErrTooManyRequests); the third success closes it.
#[tokio::test(start_paused = true)]
async fn half_open_closes_only_after_as_many_successes_as_probe_slots() {
    let (mut svc, handle, _) = half_open_rig(3);
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::HalfOpen);
    let (a, tx_a) = start_waiting(&mut svc).await;
    let (b, tx_b) = start_waiting(&mut svc).await;
    let (c, tx_c) = start_waiting(&mut svc).await;
    assert_eq!(handle.snapshot().probes_in_flight, 3);
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::HalfOpenFull));
    tx_a.send(true).unwrap();
    assert_eq!(a.await.unwrap().source(), Source::Probe);
    assert_eq!(handle.state(), State::Closed);
    // The other two were probes of a half-open that is over: late, counted for nothing.
    tx_b.send(false).unwrap();
    tx_c.send(true).unwrap();
    assert!(b.await.is_err());
    assert!(c.await.is_ok());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.counts.late, 2);
}

// gobreaker TestPanicInRequest: a panic in the request propagates and counts as one
// failure.
#[tokio::test(start_paused = true)]
async fn a_panic_in_the_call_reaches_the_caller_and_counts_as_one_failure() {
    let (svc, handle, _) = rig(Builder::new().failure_threshold(3));
    let mut on_a_task = svc.clone();
    let joined = tokio::spawn(async move { call(&mut on_a_task, Req::Panic).await }).await;
    assert!(joined.unwrap_err().is_panic());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.counts.failures, 1);
    assert_eq!(snapshot.consecutive_failures, 1);
    assert_eq!(snapshot.counts.made, 1);
}

// gobreaker TestGeneration: a request from an earlier generation (the window was
// cleared meanwhile) has no effect on the counts. Ours: a call in flight across a change
// of state is late.
#[tokio::test(start_paused = true)]
async fn a_result_from_an_earlier_generation_changes_nothing() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(2));
    fail_n(&mut svc, 1).await;
    let (pending, tx) = start_waiting(&mut svc).await;
    handle.force_open();
    handle.reset();
    tx.send(false).unwrap();
    assert!(pending.await.is_err());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.counts.late, 1);
    assert_eq!(snapshot.counts.failures, 1);
}

// gobreaker TestCustomIsSuccessful: a classifier that calls every error a success never
// trips the breaker; the default one does.
#[tokio::test(start_paused = true)]
async fn a_classifier_that_calls_errors_successes_never_trips() {
    let layer = Builder::new().failure_threshold(5).build().unwrap();
    let handle = layer.handle();
    let mut svc = layer
        .with_classifier(|_: &Result<&'static str, io::Error>| Outcome::Success)
        .layer(Backend::default());
    for _ in 0..10 {
        let result = svc.ready().await.unwrap().call(Req::Fail).await;
        assert!(result.is_err(), "the error still reaches the caller");
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(
        (snapshot.counts.successes, snapshot.counts.failures),
        (10, 0)
    );
}

// gobreaker TestIsExcludedAndIsSuccessfulCombination: excluded errors count as neither
// success nor failure; in particular they do not reset a run of failures.
#[tokio::test(start_paused = true)]
async fn ignored_errors_neither_count_nor_break_a_run_of_failures() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(3));
    for _ in 0..3 {
        assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    }
    let snapshot = handle.snapshot();
    assert_eq!(
        (
            snapshot.counts.ignored,
            snapshot.counts.successes,
            snapshot.counts.failures
        ),
        (3, 0, 0)
    );
    fail_n(&mut svc, 2).await;
    assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    assert_eq!(handle.snapshot().consecutive_failures, 2);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// gobreaker TestCircuitBreakerInParallel: many goroutines, successes and exclusions
// interleaved; the counts add up exactly and the breaker stays closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_callers_leave_exact_counts() {
    let (svc, handle, calls) = rig(Builder::new().failure_threshold(3));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let mut svc = svc.clone();
            tokio::spawn(async move {
                for i in 0..1000 {
                    let req = if i % 2 == 0 { Req::Ok } else { Req::Ignore };
                    let _ = call(&mut svc, req).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(calls.load(Ordering::SeqCst), 10_000);
    let counts = snapshot.counts;
    assert_eq!((counts.arrived, counts.made), (10_000, 10_000));
    assert_eq!((counts.successes, counts.ignored), (5_000, 5_000));
    assert_eq!(counts.failures + counts.skipped() + counts.cancelled, 0);
}

// gobreaker TestCustomCircuitBreaker (Interval): outcomes older than the window no longer
// count; a ratio over the fresh ones trips (60 % of at least 3).
#[tokio::test(start_paused = true)]
async fn a_time_window_forgets_old_outcomes_and_trips_on_the_fresh_ratio() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.6, RateWindow::Time(secs(30)), 3));
    for _ in 0..5 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
        fail_n(&mut svc, 1).await;
        assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    }
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().window.calls, 10);
    advance(secs(30)).await;
    assert_eq!(handle.snapshot().window.calls, 0);
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await; // 2 of 3: 67 % >= 60 %
    assert_eq!(handle.state(), State::Open);
}

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
    let (mut svc, handle, _) = half_open_rig(1);
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
