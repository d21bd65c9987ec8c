//! Behaviours ported from Hystrix (`HystrixCircuitBreakerTest`): the error percentage over a
//! rolling window, the single test request after the sleep window, and recovery.

use super::*;

// Hystrix testLowVolumeDoesNotTripCircuit: a low request volume does not trip it, even
// at 100 % errors.
#[tokio::test(start_paused = true)]
async fn a_low_volume_of_errors_does_not_trip_the_breaker() {
    let (mut svc, handle, _) =
        rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(10)), 20));
    fail_n(&mut svc, 19).await;
    assert_eq!(handle.state(), State::Closed);
}

// Hystrix testTripCircuitOnTimeouts: timeouts count as failures (tower's timeout inside
// the breaker).
#[tokio::test(start_paused = true)]
async fn timeouts_inside_the_breaker_count_as_failures_and_trip_it() {
    let layer = Builder::new().failure_threshold(3).build().unwrap();
    let handle = layer.handle();
    let mut svc = ServiceBuilder::new()
        .layer(layer)
        .timeout(secs(1))
        .service(Backend::default());
    for _ in 0..3 {
        let error = svc
            .ready()
            .await
            .unwrap()
            .call(Req::Slow(secs(5)))
            .await
            .unwrap_err();
        assert!(error.is::<tower::timeout::error::Elapsed>(), "{error}");
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.counts.failures, 3);
}

// Hystrix testSingleTestOnOpenCircuitAfterTimeWindow and testCircuitClosedAfterSuccess:
// after the sleep window one test request goes through while the others are still
// short-circuited; its success closes the circuit.
#[tokio::test(start_paused = true)]
async fn after_the_sleep_window_a_single_test_request_decides() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Time(secs(10)), 4)
        .cooldown(Cooldown::Time(secs(5))));
    fail_n(&mut svc, 4).await;
    assert_eq!(handle.state(), State::Open);
    advance(secs(5)).await;
    let (test_request, tx) = start_waiting(&mut svc).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::HalfOpenFull));
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    tx.send(true).unwrap();
    test_request.await.unwrap();
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
}

// Hystrix testMultipleTimeWindowRetriesBeforeClosingCircuit: failed test requests keep it
// open for another sleep window each, until one succeeds.
#[tokio::test(start_paused = true)]
async fn failed_test_requests_keep_it_open_window_after_window_until_one_succeeds() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Time(secs(5))));
    fail_n(&mut svc, 3).await;
    for _ in 0..2 {
        assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
        advance(secs(5)).await;
        fail_n(&mut svc, 1).await; // the test request fails
        assert_eq!(handle.state(), State::Open);
    }
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(secs(5)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(calls.load(Ordering::SeqCst), 6);
}

// Hystrix testBadRequestsDoNotAffectErrorPercentage (HystrixBadRequestException): bad
// requests are not in the error percentage, nor in the volume.
#[tokio::test(start_paused = true)]
async fn bad_requests_stay_out_of_the_error_percentage() {
    let (mut svc, handle, _) = rig(Builder::new().failure_rate(0.5, RateWindow::Time(secs(10)), 4));
    for _ in 0..10 {
        let _ = got(&mut svc, Req::Ignore).await;
    }
    assert_eq!(handle.snapshot().window.calls, 0);
    fail_n(&mut svc, 1).await;
    for _ in 0..3 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    }
    assert_eq!(
        handle.state(),
        State::Closed,
        "1 failure of 4 counted calls"
    );
}

// Hystrix testCircuitForceClosed... (circuitBreaker.forceClosed: errors never trip it);
// ours is the disabled mode, switched at runtime; switching back enables it from a clean
// start.
#[tokio::test(start_paused = true)]
async fn a_breaker_disabled_at_runtime_ignores_errors_until_enabled_again() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(2));
    fail_n(&mut svc, 1).await;
    handle.set_mode(Mode::Disabled);
    fail_n(&mut svc, 10).await;
    assert_eq!(handle.state(), State::Closed);
    handle.set_mode(Mode::Enabled);
    assert_eq!(handle.snapshot().consecutive_failures, 1);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

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
