//! Counting windows: failure rates read outcome by outcome over count and time windows, their
//! edges to the nanosecond, buckets leaving them, and their minimum number of calls.

use super::*;

// Hystrix testCircuitDoesNotTripOnFailuresBelowThreshold: enough volume, but an error
// percentage below the threshold keeps it closed.
#[tokio::test(start_paused = true)]
async fn an_error_percentage_below_the_threshold_keeps_it_closed() {
    let (mut svc, handle, _) =
        rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(10)), 10));
    for i in 0..30 {
        let req = if i % 3 == 0 { Req::Fail } else { Req::Ok };
        let _ = got(&mut svc, req).await;
        advance(Duration::from_millis(100)).await;
    }
    assert_eq!(handle.state(), State::Closed);
    let window = handle.snapshot().window;
    assert_eq!((window.failures, window.calls), (10, 30));
}

// Threshold relief (a degraded pre-call check) against resilience4j's
// changeConfig-at-runtime tests: the lowered threshold applies to the next outcome.
#[tokio::test(start_paused = true)]
async fn a_lowered_threshold_applies_to_the_next_failure() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(3));
    fail_n(&mut svc, 1).await;
    handle.set_threshold_relief(1);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// resilience4j shouldOpenAfterFailureRateThresholdExceeded (the rate is compared with
// `>=`: a window whose share of failures equals the threshold opens) and Polly
// AdvancedCircuitBreakerSpecs ..._failure_threshold_equalled_...: exactly the rate opens,
// for rates whose decimal has no exact binary form too (28 % of 25 calls is 7 failures,
// 55 % of 100 is 55).
#[tokio::test(start_paused = true)]
async fn a_share_of_failures_exactly_at_a_decimal_rate_opens() {
    for (rate, window, failures) in [(0.28, 25u32, 7u32), (0.55, 100, 55), (0.14, 50, 7)] {
        let (mut svc, handle, _) =
            rig(Builder::new().failure_rate(rate, RateWindow::Calls(window), window));
        for _ in 0..window - failures {
            assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
        }
        fail_n(&mut svc, failures as usize - 1).await;
        assert_eq!(handle.state(), State::Closed, "{rate}: one failure short");
        fail_n(&mut svc, 1).await;
        assert_eq!(
            handle.state(),
            State::Open,
            "{failures} of {window} is {rate} of the window"
        );
    }
}

// gobreaker TestRollingWindowCircuitBreakerInParallel: successes, failures and
// exclusions from many goroutines through a rolling window; whatever the breaker does
// with them, every call is accounted for once and only made calls reach the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_mixed_outcomes_through_a_rate_window_are_each_counted_once() {
    let (svc, handle, calls) = rig(Builder::new()
        .failure_rate(0.6, RateWindow::Calls(30), 3)
        .cooldown(Cooldown::Calls(5))
        .half_open_probes(3));
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let mut svc = svc.clone();
            tokio::spawn(async move {
                for j in 0..100 {
                    let req = match j % 3 {
                        0 => Req::Ok,
                        1 => Req::Fail,
                        _ => Req::Ignore,
                    };
                    let _ = call(&mut svc, req).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let c = handle.snapshot().counts;
    assert_eq!(c.arrived, 1_200);
    assert_eq!(c.arrived, c.made + c.skipped() + c.abandoned);
    assert_eq!(
        c.made,
        c.successes + c.failures + c.ignored + c.cancelled + c.late
    );
    assert_eq!(c.made as usize, calls.load(Ordering::SeqCst));
    assert_eq!(handle.snapshot().probes_in_flight, 0);
}

/// The failure-rate window as `(failures, calls)`.
fn window(handle: &CircuitBreakerHandle) -> (u64, u64) {
    let counts = handle.snapshot().window;
    (counts.failures, counts.calls)
}

/// A failure-rate breaker that never trips (a rate of 100 % over at least a thousand
/// calls), to read its window.
fn window_rig(window: RateWindow) -> (impl Svc, CircuitBreakerHandle, Arc<AtomicUsize>) {
    let minimum = match window {
        RateWindow::Calls(n) => n,
        RateWindow::Time(_) => 1_000,
    };
    rig(Builder::new().failure_rate(1.0, window, minimum))
}

// gobreaker TestRollingWindowCircuitBreaker (Interval 30 s in buckets of 3 s, 60 % of at
// least 3, MaxRequests 3, Timeout 90 s): the window holds ten buckets; excluded errors
// count in none; at 30 s the first bucket leaves the window, and the failure that brings
// the share to 14 of 23 trips it; after the timeout three successful probes close it,
// and the closed window starts empty.
#[tokio::test(start_paused = true)]
async fn a_window_of_ten_buckets_drops_its_oldest_bucket_and_trips_at_the_ratio() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.6, RateWindow::Time(secs(30)), 3)
        .cooldown(Cooldown::Time(secs(90)))
        .half_open_probes(3));
    for _ in 0..5 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
        fail_n(&mut svc, 1).await;
        assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    }
    assert_eq!((handle.state(), window(&handle)), (State::Closed, (5, 10)));
    advance(secs(3)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(window(&handle), (5, 11));
    advance(secs(2)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    assert_eq!(window(&handle), (5, 12));
    advance(secs(2)).await;
    assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(window(&handle), (5, 13));
    advance(secs(2)).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(window(&handle), (6, 14));
    for i in 0..6 {
        advance(secs(3)).await;
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
        fail_n(&mut svc, 1).await;
        assert_eq!(window(&handle), (7 + i, 16 + 2 * i));
    }
    // t = 30 s: the bucket of t = 0 (five failures, five successes) is gone.
    advance(secs(3)).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(window(&handle), (8, 17));
    for i in 0..5 {
        fail_n(&mut svc, 1).await;
        assert_eq!(window(&handle), (9 + i, 18 + i));
    }
    assert_eq!(handle.state(), State::Closed, "13 of 22 is below 60 %");
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open, "14 of 23 is above 60 %");
    assert_eq!(handle.snapshot().cause, Some(Cause::Tripped));

    advance(secs(90)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::HalfOpen);
    // gobreaker turns a fourth request away while the third runs (MaxRequests counts
    // the requests of a half-open); ours admits three probes at a time, so a fourth
    // would be turned away only with three in flight.
    let (third, tx) = start_waiting(&mut svc).await;
    assert_eq!(handle.snapshot().probes_in_flight, 1);
    tx.send(true).unwrap();
    assert_eq!(third.await.unwrap().source(), Source::Probe);
    assert_eq!((handle.state(), window(&handle)), (State::Closed, (0, 0)));
}

// resilience4j SlidingTimeWindowMetricsTest testSlidingTimeWindowMetrics (a window of
// 5 s): outcomes a fraction of a second apart all count; as the window slides, the
// oldest leave it, a second at a time; after a long pause only the newest counts.
#[tokio::test(start_paused = true)]
async fn a_time_window_slides_and_counts_only_its_last_duration() {
    let (mut svc, handle, _) = window_rig(RateWindow::Time(secs(5)));
    let ms = Duration::from_millis;
    fail_n(&mut svc, 1).await;
    assert_eq!(window(&handle), (1, 1));
    let steps = [
        (ms(100), Req::Ok, (1, 2)),
        (ms(100), Req::Ok, (1, 3)),
        (secs(1), Req::Ok, (1, 4)),
        (secs(1), Req::Ok, (1, 5)),
        (secs(1), Req::Fail, (2, 6)),
        (secs(1), Req::Ok, (2, 7)),
        // t = 5.2 s: the three outcomes of the first fifth of a second are gone.
        (secs(1), Req::Ok, (1, 5)),
        (secs(1), Req::Ok, (1, 5)),
        (secs(5), Req::Ok, (0, 1)),
    ];
    for (pause, req, expected) in steps {
        advance(pause).await;
        let _ = got(&mut svc, req).await;
        assert_eq!(window(&handle), expected, "at {pause:?} more");
    }
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j SlidingTimeWindowMetricsTest shouldClearSlidingTimeWindowMetrics: the
// window empties as time passes with no call at all (read from a snapshot), and the
// next outcome starts it again.
#[tokio::test(start_paused = true)]
async fn a_time_window_empties_with_time_alone() {
    let (mut svc, handle, _) = window_rig(RateWindow::Time(secs(5)));
    let ms = Duration::from_millis;
    fail_n(&mut svc, 1).await;
    advance(ms(100)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    advance(ms(700)).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(window(&handle), (2, 3));
    advance(secs(4)).await; // t = 4.8 s
    assert_eq!(window(&handle), (2, 3));
    advance(secs(1)).await; // t = 5.8 s
    assert_eq!(window(&handle), (0, 0));
    advance(ms(100)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(window(&handle), (0, 1));
    advance(secs(5)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(window(&handle), (0, 1));
}

// resilience4j FixedSizeSlidingWindowMetricsTest testSlidingWindowMetrics (a window of 4
// calls): the rate after each outcome (100, 50, 33.3, 25 in resilience4j; ours reads -1
// until the window holds its minimum), and a fifth outcome pushes out the first.
#[tokio::test(start_paused = true)]
async fn a_count_window_reads_the_rate_after_each_outcome_and_pushes_out_the_oldest() {
    let rates = Arc::new(Mutex::new(Vec::new()));
    let sink = rates.clone();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(1.0, RateWindow::Calls(4), 2)
        .on_event(move |event| {
            if let Event::Recorded { failure_rate, .. } = event {
                sink.lock().unwrap().push(failure_rate.unwrap());
            }
        }));
    fail_n(&mut svc, 1).await;
    assert_eq!(window(&handle), (1, 1));
    for expected in [(1, 2), (1, 3), (1, 4), (0, 4)] {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
        assert_eq!(window(&handle), expected);
    }
    assert_eq!(
        *rates.lock().unwrap(),
        vec![-1.0, 50.0, 100.0 / 3.0, 25.0, 0.0]
    );
    assert_eq!(handle.state(), State::Closed);
}

// Polly RollingHealthMetricsTests GetHealthInfo_EnsureWindowRespected (10 s in 10
// windows): two outcomes every 2 s, the first two rounds with a failure; the throughput
// and failures read 2/1, 4/2, 6/2, 8/2, then 8/1 and 6/0 as the oldest rounds leave.
#[tokio::test(start_paused = true)]
async fn a_rolling_window_reports_throughput_and_failures_as_rounds_leave_it() {
    let (mut svc, handle, _) = window_rig(RateWindow::Time(secs(10)));
    let mut health = Vec::new();
    for i in 0..5 {
        let first = if i < 2 { Req::Fail } else { Req::Ok };
        let _ = got(&mut svc, first).await;
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
        advance(secs(2)).await;
        health.push(window(&handle));
    }
    advance(secs(2)).await;
    health.push(window(&handle));
    assert_eq!(health, vec![(1, 2), (2, 4), (2, 6), (2, 8), (1, 8), (0, 6)]);
}

// Polly RollingHealthMetricsTests GetHealthInfo_EnsureWindowCapacityRespected and
// GetHealthInfo_SamplingDurationRespected (and SingleHealthMetricsTests
// SamplingDurationRespected_Ok): one success a second for ten seconds leaves nine in the
// window, then eight; outcomes exactly one window old are gone.
#[tokio::test(start_paused = true)]
async fn outcomes_exactly_one_window_old_are_forgotten() {
    let (mut svc, handle, _) = window_rig(RateWindow::Time(secs(10)));
    for _ in 0..10 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
        advance(secs(1)).await;
    }
    assert_eq!(window(&handle), (0, 9));
    advance(secs(1)).await;
    assert_eq!(window(&handle), (0, 8));

    let (mut svc, handle, _) = window_rig(RateWindow::Time(secs(10)));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    advance(secs(10) - NS).await;
    assert_eq!(window(&handle), (0, 2));
    advance(NS).await;
    assert_eq!(window(&handle), (0, 0));
}

// failsafe-go TestClosedStateFailureWithFailureRatio (2 of 3): failure, success, failure
// opens it: a share of exactly two thirds reaches a rate of two thirds.
#[tokio::test(start_paused = true)]
async fn two_failures_in_three_reach_a_rate_of_two_thirds() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(2.0 / 3.0, RateWindow::Calls(3), 3));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// failsafe-go TestClosedStateSuccessWithFailureRatio (3 of 4) and
// TestClosedStateSuccessWithFailureThreshold (2): alternating successes and failures
// never reach three failures in four, nor two in a row.
#[tokio::test(start_paused = true)]
async fn alternating_outcomes_never_reach_a_rate_of_three_in_four_or_two_in_a_row() {
    for builder in [
        Builder::new().failure_rate(0.75, RateWindow::Calls(4), 4),
        Builder::new().failure_threshold(2),
    ] {
        let (mut svc, handle, _) = rig(builder);
        for _ in 0..20 {
            assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
            fail_n(&mut svc, 1).await;
            assert_eq!(handle.state(), State::Closed);
        }
        assert_eq!(handle.snapshot().counts.failures, 20);
    }
}

// failsafe-go TestGetSuccessAndFailureStats (failure ratio 5 of 10): seven alternating
// outcomes leave 3 failures of 7 in the window; fifteen more, one failure in four, leave
// 2 failures of the last 10.
#[tokio::test(start_paused = true)]
async fn a_count_window_keeps_the_failures_of_its_last_calls() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Calls(10), 10));
    for i in 0..7 {
        let _ = got(&mut svc, if i % 2 == 0 { Req::Ok } else { Req::Fail }).await;
    }
    assert_eq!(window(&handle), (3, 7));
    for i in 0..15 {
        let _ = got(&mut svc, if i % 4 == 0 { Req::Fail } else { Req::Ok }).await;
    }
    assert_eq!(window(&handle), (2, 10));
    assert_eq!(handle.state(), State::Closed);
}

// Polly AdvancedCircuitBreakerSpecs
// Should_open_circuit_with_the_last_raised_exception_if_failure_threshold_equalled_and_throughput_threshold_equalled_even_if_only_just_within_timeslice
// and Should_open_circuit_if_failures_in_second_window_of_last_timeslice_and_failures_in_first_window_in_next_timeslice_exceeds_failure_threshold_and_minimum_threshold
// (50 %, at least 4, 10 s): outcomes a tick before the end of the sampling duration
// still count with the first ones; at its end, only the first tenth has left.
#[tokio::test(start_paused = true)]
async fn outcomes_a_tick_inside_the_sampling_duration_still_count() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(10)), 4));
    fail_n(&mut svc, 3).await;
    advance(secs(10) - NS).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open, "4 of 4 within the duration");

    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(10)), 4));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    // Polly's second window holds two failures and a success; ours checks the rate after
    // successes too (resilience4j's rule), and would open at that success (2 of 4), so
    // it holds one failure and two successes.
    advance(secs(1)).await; // the second of the ten windows
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Closed, "1 of 4");
    advance(secs(9)).await; // t = 10 s: the first window has left
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open, "2 of 4 in the window");
}

// Polly AdvancedCircuitBreakerSpecs
// Should_not_open_circuit_if_failure_threshold_exceeded_but_throughput_threshold_not_met_before_timeslice_expires_even_if_error_occurring_just_at_the_end_of_the_duration
// and Should_not_open_circuit_if_failures_at_end_of_last_timeslice_and_failures_in_beginning_of_new_timeslice_when_below_minimum_throughput_threshold:
// once the first outcomes have left the window, the failures left are too few to
// judge, however high their share.
#[tokio::test(start_paused = true)]
async fn failures_straddling_the_end_of_the_sampling_duration_are_too_few_to_judge() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(10)), 4));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    advance(secs(10) - NS).await;
    fail_n(&mut svc, 1).await;
    advance(NS).await;
    fail_n(&mut svc, 1).await;
    assert_eq!((handle.state(), window(&handle)), (State::Closed, (2, 2)));

    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(10)), 4));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    advance(secs(10) - NS).await;
    fail_n(&mut svc, 2).await;
    advance(NS).await;
    fail_n(&mut svc, 1).await;
    assert_eq!((handle.state(), window(&handle)), (State::Closed, (3, 3)));
}

// Hystrix testTripCircuit and testTripCircuitOnFailuresAboveThreshold (40 %, read after
// the eighth call): four successes then four failures, and successes and failures
// interleaved to half, both trip it. Hystrix reads its health every so often; ours reads
// the rate after every outcome, so the volume is set to the eight calls read.
#[tokio::test(start_paused = true)]
async fn half_the_calls_failing_trips_a_forty_percent_threshold() {
    use Req::{Fail as F, Ok as S};
    for sequence in [[S, S, S, S, F, F, F, F], [S, S, F, S, F, S, F, F]] {
        let (mut svc, handle, _) =
            rig(Builder::new().failure_rate(0.4, RateWindow::Time(secs(5)), 8));
        for (i, req) in sequence.into_iter().enumerate() {
            assert_eq!(handle.state(), State::Closed, "before call {i}");
            let _ = got(&mut svc, req).await;
        }
        assert_eq!(handle.state(), State::Open);
        assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    }
}

// resilience4j CircuitBreakerMetricsTest testCircuitBreakerMetrics (a count window of 10,
// at least 10): the rate is -1 below the minimum; after 12 outcomes the window holds the
// last 10 (6 failures: 60 %, over the threshold); three successes more bring it to 30 %.
// With resilience4j's 50 % the breaker opens at the tenth outcome, a success.
#[tokio::test(start_paused = true)]
async fn a_count_window_reads_sixty_then_thirty_percent_as_successes_push_failures_out() {
    let rates = Arc::new(Mutex::new(Vec::new()));
    let sink = rates.clone();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(1.0, RateWindow::Calls(10), 10)
        .on_event(move |event| {
            if let Event::Recorded { failure_rate, .. } = event {
                sink.lock().unwrap().push(failure_rate.unwrap());
            }
        }));
    use Req::{Fail as F, Ok as S};
    let play = async |svc: &mut _, reqs: Vec<Req>| {
        for req in reqs {
            let _ = got(svc, req).await;
        }
    };
    play(&mut svc, vec![S, S, F, F]).await;
    assert_eq!(window(&handle), (2, 4));
    assert_eq!(rates.lock().unwrap().last(), Some(&-1.0));
    play(&mut svc, vec![F, F, F, F, S, S, S, S]).await;
    assert_eq!(window(&handle), (6, 10));
    assert_eq!(rates.lock().unwrap().last(), Some(&60.0));
    play(&mut svc, vec![S, S, S]).await;
    assert_eq!(window(&handle), (3, 10));
    assert_eq!(rates.lock().unwrap().last(), Some(&30.0));
    assert_eq!(handle.state(), State::Closed);

    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Calls(10), 10));
    play(&mut svc, vec![S, S, F, F, F, F, F, F, S]).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "nine outcomes: below the minimum"
    );
    play(&mut svc, vec![S]).await;
    assert_eq!(handle.state(), State::Open, "6 of 10");
}

// resilience4j shouldTransitionToHalfOpenAfterWaitDuration (its metrics reset when the
// breaker opens, two calls not permitted while open) and Polly
// Should_halfopen_circuit_after_the_specified_duration_has_passed_with_failures_in_different_windows:
// failures spread over the window's buckets trip it; while open the window is empty and
// calls are not permitted; at the end of the wait the next call is the trial, and
// half-open starts with an empty window too.
#[tokio::test(start_paused = true)]
async fn a_breaker_tripped_by_its_rate_probes_after_its_wait_with_the_window_empty() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Time(secs(10)), 4)
        .cooldown(Cooldown::Time(secs(5))));
    for _ in 0..3 {
        fail_n(&mut svc, 1).await;
        advance(secs(2)).await;
    }
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(window(&handle), (0, 0));
    advance(secs(3)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    assert_eq!(got(&mut svc, Req::Fail).await, skipped(Reason::Open));
    assert_eq!(handle.snapshot().counts.skipped_open, 2);
    advance(secs(2)).await;
    let (trial, tx) = start_waiting(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(window(&handle), (0, 0));
    tx.send(true).unwrap();
    assert_eq!(trial.await.unwrap().source(), Source::Probe);
    assert_eq!((handle.state(), window(&handle)), (State::Closed, (0, 0)));
}

// failsafe-go "should support time based failure rate thresholding" with the shortest
// window: a window of one nanosecond forgets an outcome once it is a nanosecond old (as
// `outcomes_exactly_one_window_old_are_forgotten` has it for 10 s).
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

// resilience4j minimumNumberOfCalls (which must be at least 1 there) against ours, which
// accepts 0 (`each_bad_setting_the_peers_refuse_is_a_typed_error_when_built` builds it): a
// minimum of 0 reads as 1, so a first failure is a share of 100 %.
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
